"""The privacy unit, the neighbouring relation, and a dataset's ledger terms, as types.

A guarantee (:mod:`dprelease.accounting.budgets`) is only meaningful for a stated pair of
neighbouring datasets. These types say which pair, and give the count sensitivities that
follow from it; every sensitivity of a measurement is derived from them
(:mod:`dprelease.plan.measurements`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dprelease.accounting.budgets import KINDS, Kind

ChangeReason = Literal["invariants", "local", "ledger"]


@dataclass(frozen=True, slots=True)
class PrivacyUnit:
    """Whose privacy a release protects.

    ``id`` None: one row (the data holds one row per person). Otherwise one person: every row
    with one value of the column ``id``, of which at most ``max_rows`` are kept (chosen with
    the CSPRNG; the rest dropped before counting), so one person moves at most ``max_rows``
    rows. The id column is read, never published."""

    id: str | None = None
    max_rows: int = 1

    def __post_init__(self) -> None:
        if self.max_rows < 1 or (self.id is None and self.max_rows != 1):
            raise ValueError(f"a privacy unit keeps at least one row, and a row unit exactly one: {self}")

    @property
    def is_row(self) -> bool:
        return self.id is None


@dataclass(frozen=True, slots=True)
class Neighbouring:
    """The neighbouring relation a release is planned under.

    ``change`` False: datasets that differ by adding or removing one privacy unit (unbounded DP).
    ``change`` True: datasets of the same size that differ in one unit's records (bounded DP):
    used when totals are public — invariants published exactly (``invariants``), the number of
    local answers (``local``), or a dataset whose earlier releases published invariants
    (``ledger``) — since datasets of different totals then cannot both be allowed.

    A count histogram's sensitivities follow: one unit's K rows move at most K cells by 1 each
    under add/remove (L1 K, all in one cell at worst: Δ₂² K²), and leave one cell and enter
    another under change (L1 2K, Δ₂² 2K²)."""

    unit: PrivacyUnit = PrivacyUnit()
    change: bool = False
    why: ChangeReason | None = None

    def __post_init__(self) -> None:
        if self.change != (self.why is not None):
            raise ValueError("a change-one-record relation says why (and only it does)")

    @property
    def count_l1(self) -> int:
        """L1 sensitivity of a count histogram."""
        return (2 if self.change else 1) * self.unit.max_rows

    @property
    def count_l2_squared(self) -> int:
        """Δ₂² of a count histogram."""
        return (2 if self.change else 1) * self.unit.max_rows ** 2

    @property
    def text(self) -> str:
        """The relation in words, as plans, manifests and reports state it."""
        if self.why == "ledger":
            return ("change one record (bounded DP: invariants of this dataset were published before, so every "
                    "release of it is planned under change one record)")
        if self.why == "local":
            return ("change one record (bounded DP: the local tables publish how many answers were collected, so "
                    "neighbours have the same number of rows)")
        if self.unit.id is not None:
            who = (f"one person (every row with one {self.unit.id}; at most {self.unit.max_rows} of them kept, "
                   "chosen at random, so one person moves at most that many rows)")
            if self.change:
                return f"change {who} (bounded DP: the invariants are public, so neighbours have the same totals)"
            return f"add or remove {who}"
        if self.change:
            return "change one record (bounded DP: the invariants are public, so neighbours have the same totals)"
        return "add or remove one row (one row per person)"


@dataclass(frozen=True, slots=True)
class Terms:
    """A dataset's ledger terms: the one kind of guarantee, relation and privacy unit its
    lifetime budget is spent in, fixed when the dataset enters the ledger. Budgets spent
    under different terms do not add up, so the ledger refuses a release under other terms.

    The ledger stores them as three columns (schema 5); :meth:`from_text` reads the one-string
    form of schemas 1–4 (``pure``, ``zcdp-bounded``, ``pure@SERIALNO``)."""

    kind: Kind
    change: bool = False  # change-one-record (bounded) terms
    unit_id: str | None = None  # the person id column; None: one row

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind of guarantee {self.kind!r}")

    @classmethod
    def from_text(cls, text: str) -> Terms:
        """Parse the terms of a schema 1–4 ledger; ValueError for anything else."""
        held, _, unit_id = text.partition("@")
        shown, _, bounded = held.partition("-")
        kind = next((k for k in KINDS if k == shown), None)
        if kind is None or bounded not in ("", "bounded"):
            raise ValueError(f"unknown ledger terms {text!r}")
        return cls(kind, bounded == "bounded", unit_id or None)

    @property
    def text(self) -> str:
        """The one-string form (``pure-bounded@SERIALNO``), as schemas 1–4 stored it."""
        return self.kind + ("-bounded" if self.change else "") + (f"@{self.unit_id}" if self.unit_id else "")

    @property
    def symbol(self) -> str:
        """Of the lifetime figures: ρ under zCDP terms, ε otherwise."""
        return "ρ" if self.kind == "zcdp" else "ε"

    @property
    def shown(self) -> str:
        return {"pure": "pure ε-DP", "zcdp": "zCDP (ρ)", "approx": "(ε, δ)-DP"}[self.kind]
