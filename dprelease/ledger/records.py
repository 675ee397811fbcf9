"""The ledger's record types: frozen values read from or written to it, and their states.

Nothing here touches the database; every type is an immutable snapshot of rows. Every cap,
charge and spend is a typed budget of the dataset's terms' kind (``PureDP``, ``ZCDP``: ρ under
zCDP terms, ``ApproxDP`` with its δ inside); :func:`budget_from_row` and :func:`row_figures`
are the one place the ledger's ``amount`` and ``delta`` columns become budgets and back.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from typing import Protocol

from dprelease.accounting import (
    Budget,
    Kind,
    PureDP,
    Terms,
    budget_of,
    delta_of,
    fraction_text,
    parse_exact,
    subtract,
)

LIVE_STATES = ("reserved", "drawing", "committed", "failed")  # states whose charges count as spent
UNFINISHED = ("reserved", "drawing")  # drawing: noise is being drawn; never voided from then on
RANDOMIZED = "dprelease randomize"  # AnswerSet.how: answers written by `dprelease randomize`
REGISTERED = "registered"  # AnswerSet.how: answers randomized elsewhere, registered with a statement


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (containers): fall back to the uid
        return f"uid:{os.getuid()}"


@dataclass(frozen=True)
class Birth:
    """How a ledger came to be: a deliberate, recorded act (``dprelease ledger init``, or a run's
    typed ``--ledger`` for a spec that pins none). None for a ledger made before births were
    recorded."""

    at: str
    by: str
    reason: str
    how: str  # "dprelease ledger init" | "dprelease run --ledger"
    where: str = ""  # the location it was created at, as shown (password hidden); "" where not recorded

    @property
    def shown(self) -> str:
        return f"born {self.at[:19]} UTC by {self.by} ({self.how}): {self.reason}"

    def record(self) -> dict[str, str]:
        """As manifests and ``dprelease ledger --json`` state it."""
        return {"at": self.at, "by": self.by, "reason": self.reason, "how": self.how, "where": self.where}


def budget_from_row(kind: Kind, amount: str, delta: str | None) -> Budget:
    """A cap or charge as the ledger stores it (exact text in ``amount`` and, under approx terms,
    ``delta``) as a budget of the terms' ``kind``: the one place rows become budgets. ValueError
    for an (ε, δ) figure without its δ."""
    return budget_of(kind, parse_exact(amount), None if delta is None else parse_exact(delta))


def row_figures(budget: Budget) -> dict[str, str | None]:
    """The ``amount`` and ``delta`` columns of a cap or charge: the one place budgets become
    rows (δ NULL but under approx terms)."""
    delta = delta_of(budget)
    return {"amount": fraction_text(budget.amount), "delta": None if delta is None else fraction_text(delta)}


def of_terms(budget: Budget, terms: Terms, what: str) -> Budget:
    """``budget``, checked to be of ``terms``' kind: a budget of another kind is a bug in the
    caller (TypeError), never recorded: a ρ is not an ε, nor an ε a ρ."""
    kind = getattr(budget, "kind", None)
    if kind != terms.kind:
        found = f"a {kind} budget ({budget})" if kind else f"not a budget but {type(budget).__name__} {budget!r}"
        raise TypeError(f"{what} is {found}, but the dataset's ledger terms are {terms.text!r}: the ledger records "
                        f"only {terms.shown} budgets there (convert explicitly first)")
    return budget


class RecordIdentity(Protocol):
    """A data set's identity by its records (:class:`dprelease.data.identity.Identity`, plain:
    the memory of the process that read the data). The ledger stores it only keyed (the digest,
    HMAC-ed) and sealed (:meth:`plain`, under the ledger's key), and asks it to compare itself
    with what it stored: the ledger never imports the data layer."""

    @property
    def digest(self) -> str:
        """The exact records' plain digest."""

    def plain(self) -> bytes:
        """The sketches, of a fixed size, to seal."""

    def matches(self, other_plain: bytes) -> str | None:
        """Why the data whose :meth:`plain` is ``other_plain`` is the same people (words with no
        figure of the data: they reach refusals and logs), or None; ValueError if ``other_plain``
        is not an identity of this version."""


@dataclass(frozen=True, slots=True)
class CapChange:
    """A recorded lifetime cap: the budget (of the terms' kind; an (ε, δ) cap holds its δ), who and why."""

    budget: Budget
    reason: str
    set_by: str
    set_at: str


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    release: str
    state: str
    charge: Budget  # its charges composed, of the terms' kind (zero for a release of local tables only)
    charges: tuple[tuple[str, Budget], ...]  # (measurement, its charge)
    spec_fingerprint: str
    data_fingerprint: str | None
    created_at: str
    created_by: str
    output_dir: str | None = None
    state_at: str | None = None  # when the current state was reached
    reason: str | None = None  # of the latest state change, if one was given
    approved_by: str | None = None  # the approval of its plan recorded at its reservation
    approved_at: str | None = None

    @property
    def unfinished(self) -> bool:
        return self.state in UNFINISHED

    @property
    def noise_drawn(self) -> bool:
        """The ledger recorded that noise was (being) drawn: spent, published or not."""
        return self.state in ("drawing", "failed") or self.state == "committed"


@dataclass(frozen=True, slots=True)
class LocalCollection:
    """One question asked in one collection under local DP: what a release's local table declares."""

    collection: str
    question: str  # the column of randomized answers
    protocol: str  # protocol and ε ("k_rr:1", "coin_flip"): a memoised collection must match the first
    epsilon: Fraction  # the randomizer's pure ε per respondent (local DP), a rational upper bound; never ρ
    memoised: bool = False
    answers: str | None = None  # fingerprint of the collected answers (None when planning without data)
    memo_of: str | None = None  # memoised: the collection whose randomized answers are repeated


@dataclass(frozen=True, slots=True)
class LocalRecord:
    """A local collection as recorded: its randomizer's pure ε per respondent, and the pure ε it
    charged each respondent (its ε, or 0 when memoised). Local DP is pure ε whatever the
    dataset's terms, and it is uncapped: never added to the central spend."""

    collection: str
    question: str
    protocol: str
    epsilon: Fraction  # the randomizer's pure ε per respondent, as LocalCollection.epsilon
    charged: PureDP  # each respondent's ε newly spent by this collection
    memoised: bool
    run_id: str
    recorded_at: str
    recorded_by: str
    answers: str | None = None



@dataclass(frozen=True, slots=True)
class AnswerSet:
    """The provenance of one file of answers to one question of one local collection: what a
    ``kind: local`` table may read. Written by ``dprelease randomize`` (``how``) for its output,
    or registered with a statement of who randomized the answers and how (on the respondents'
    devices). ``answers`` is the file's keyed fingerprint (never a plain hash)."""

    dataset: str
    collection: str
    question: str
    protocol: str  # as LocalCollection.protocol ("k_rr:1/k=10")
    epsilon: Fraction  # the randomizer's pure ε per respondent, a rational upper bound
    answers: str  # keyed fingerprint of the answers file
    how: str  # RANDOMIZED or REGISTERED
    memo_of: str | None = None  # the collection whose memo (first randomized answers) was reused
    statement: str | None = None
    registered_by: str = ""
    registered_at: str = ""
    respondent_id: str | None = None  # the respondent id column, where the registration was kept per respondent


@dataclass(frozen=True, slots=True)
class Respondents:
    """Each respondent's answers in one file of answers, in this process's memory only: what
    registering or estimating a collection gives the ledger, which keeps (or checks) keyed
    digests of them and never the values (see :mod:`dprelease.ledger.memos`). Ids are text
    exactly as written; an answer is its declared value's text."""

    id_column: str
    ids: tuple[str, ...]  # one a row
    answers: dict[str, tuple[str, ...]]  # question → one answer a row, in the rows' order
    domains: dict[str, tuple[str, ...]]  # question → its declared values
    questions: frozenset[str] = frozenset()  # every column the spec asks as a local question: never an id



@dataclass(frozen=True, slots=True)
class Approval:
    """A reviewer's approval of one plan: the spec fingerprint it covers, who and when."""

    dataset: str
    release: str
    spec_fingerprint: str
    approved_by: str
    approved_at: str
    spec_path: str | None = None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A `dprelease evaluate` of a dataset's data: read in the open (NOT private), nothing spent."""

    dataset: str
    data_fingerprint: str  # keyed
    evaluated_at: str
    evaluated_by: str
    trials: int
    spec_path: str | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """A recorded decision about a dataset (``approval: required``), with who and why."""

    dataset: str
    policy: str
    value: str
    reason: str
    set_by: str
    set_at: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """A granted reservation and the lifetime state it was checked against (in its transaction),
    in the terms' kind (under approx terms with the δ inside)."""

    run_id: str
    spent_before: Budget
    budget: Budget
    records: str | None = None  # the data's records' digest as recorded with the run: keyed
    sealed: str | None = None  # and its identity, sealed (what the run record carries too)


@dataclass(frozen=True, slots=True)
class DatasetState:
    """A dataset's lifetime record: its terms, its cap and what its runs spent, every budget of
    its terms' kind (``PureDP``; ``ZCDP`` under zCDP terms; ``ApproxDP`` with the δ inside).
    A dataset is in the ledger only with a cap: ``budget`` is the latest."""

    name: str
    terms: Terms
    budget: Budget
    spent: Budget
    caps: tuple[CapChange, ...]
    runs: tuple[RunRecord, ...] = field(default=())
    local: tuple[LocalRecord, ...] = ()  # collections under local DP, in order
    evaluations: tuple[Evaluation, ...] = ()  # evaluations recorded under this dataset's name
    policies: tuple[Policy, ...] = ()  # every recorded decision, in order

    @property
    def approval_required(self) -> Policy | None:
        """The latest approval policy of the dataset (or of its whole family, for a period), if
        it requires approval."""
        latest = next((p for p in reversed(self.policies) if p.policy == "approval"), None)
        return latest if latest is not None and latest.value == "required" else None

    @property
    def local_epsilon(self) -> PureDP:
        """Each respondent's ε over every recorded local collection (sequential composition)."""
        return PureDP(sum((r.charged.epsilon for r in self.local), Fraction(0)))

    @property
    def remaining(self) -> Budget:
        """The cap less the spend (negative after a cap was lowered below it)."""
        return subtract(self.budget, self.spent)  # one kind, by construction (TypeError otherwise)

    def live_run(self, release: str) -> RunRecord | None:
        """The reserved or committed run of ``release``, if any."""
        return next((r for r in self.runs if r.release == release and r.state in LIVE_STATES), None)

    @property
    def data_versions(self) -> int:
        return len({r.data_fingerprint for r in self.runs if r.data_fingerprint})
