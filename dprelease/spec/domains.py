"""The declared domains of a spec's columns, and the row conditions over them (typed, immutable).

Every category domain here comes from the spec (or a domain file it names), never from the
data. Values are kept as the text the user wrote; only range columns hold integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class CategoricalColumn:
    """A column whose values are matched as text against a declared list."""

    name: str
    values: tuple[str, ...]
    labels: tuple[str, ...] | None = None
    missing: str | None = None  # label of the extra category for missing values, if any
    on_out_of_domain: Literal["error", "drop"] = "error"
    domain_file: str | None = None  # as written, for the record

    def __post_init__(self) -> None:
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"column {self.name}: repeated domain values")
        if self.labels is not None and len(self.labels) != len(self.values):
            raise ValueError(f"column {self.name}: {len(self.labels)} labels for {len(self.values)} values")

    @property
    def size(self) -> int:
        return len(self.values) + (self.missing is not None)

    @property
    def categories(self) -> tuple[str, ...]:
        """The published category of each code, in code order (missing last)."""
        shown = self.labels if self.labels is not None else self.values
        return shown + ((self.missing,) if self.missing is not None else ())


@dataclass(frozen=True, slots=True)
class RangeColumn:
    """An integer column over the inclusive range [low, high]; one category per integer."""

    name: str
    low: int
    high: int
    missing: str | None = None
    on_out_of_domain: Literal["error", "drop"] = "error"

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"column {self.name}: empty range [{self.low}, {self.high}]")

    @property
    def size(self) -> int:
        return self.high - self.low + 1 + (self.missing is not None)

    @property
    def categories(self) -> tuple[str, ...]:
        own = tuple(str(v) for v in range(self.low, self.high + 1))
        return own + ((self.missing,) if self.missing is not None else ())


@dataclass(frozen=True, slots=True)
class BinnedColumn:
    """A derived column: half-open bins ``[edges[i], edges[i+1])`` over a range column."""

    name: str
    source: str
    edges: tuple[int, ...]
    labels: tuple[str, ...]
    missing: str | None = None  # inherited from the source column

    def __post_init__(self) -> None:
        if any(b >= a for a, b in zip(self.edges[1:], self.edges)):
            raise ValueError(f"column {self.name}: bins must increase")
        if len(self.labels) != len(self.edges) - 1:
            raise ValueError(f"column {self.name}: {len(self.labels)} labels for {len(self.edges) - 1} bins")

    @property
    def size(self) -> int:
        return len(self.edges) - 1 + (self.missing is not None)

    @property
    def categories(self) -> tuple[str, ...]:
        return self.labels + ((self.missing,) if self.missing is not None else ())


@dataclass(frozen=True, slots=True)
class RollupColumn:
    """A coarser geographic level: each value of ``source`` (a finer level) has one parent here.

    The domain follows from the source's *declared* domain (e.g. distinct 2-character
    prefixes of the declared PUMA codes), never from the data.
    """

    name: str
    source: str
    values: tuple[str, ...]
    parent_of: tuple[int, ...]  # per code of ``source``, the code of its parent in ``values``
    missing: None = None
    mapping_file: str | None = None  # as written, for the record

    def __post_init__(self) -> None:
        if any(not 0 <= p < len(self.values) for p in self.parent_of):
            raise ValueError(f"column {self.name}: a parent code is out of range")
        if set(self.parent_of) != set(range(len(self.values))):
            raise ValueError(f"column {self.name}: a parent has no children")

    @property
    def size(self) -> int:
        return len(self.values)

    @property
    def categories(self) -> tuple[str, ...]:
        return self.values


Column = CategoricalColumn | RangeColumn | BinnedColumn | RollupColumn
ROOT = "root"  # the implicit top of every geography: the whole dataset

Op = Literal["eq", "ne", "in", "not_in", "ge", "gt", "le", "lt", "missing", "present"]


@dataclass(frozen=True, slots=True)
class Condition:
    """One row filter. Operands are declared values (text, or ints for range columns).

    A missing value never satisfies a condition, not even ``ne``. Rules (not ``where``) may also
    test ``missing`` (the value is missing) and ``present`` (it is not); their operand is empty.
    """

    column: str
    op: Op
    operand: tuple[str | int, ...]  # one element except for in / not_in; none for missing / present


@dataclass(frozen=True, slots=True)
class Rule:
    """A public, declared fact about every row of the data: every row that satisfies all of
    ``if_`` satisfies all of ``then`` (and, with ``both_ways``, the other way round too: "then
    exactly when if").

    Rules come from public knowledge (a data dictionary: ``MSP`` is "not applicable" exactly
    when ``AGEP < 15``), never from the data. They narrow the set of possible datasets, like a
    declared domain does: a run checks the data against every rule before anything is
    reserved and refuses data that breaks one (:func:`dprelease.data.rules.check_rules`). The
    planner uses them to find structural zeros (:mod:`dprelease.spec.structural`).
    """

    name: str
    if_: tuple[Condition, ...]
    then: tuple[Condition, ...]
    both_ways: bool = False
    description: str | None = None

    def implications(self) -> tuple[tuple[tuple[Condition, ...], tuple[Condition, ...]], ...]:
        """(premises, conclusions) of each direction the rule holds in."""
        return ((self.if_, self.then),) + (((self.then, self.if_),) if self.both_ways else ())
