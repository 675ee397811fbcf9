"""The typed, immutable release spec: what :func:`dprelease.spec.load_spec` returns.

Every category domain here comes from the spec (or a domain file it names), never from the
data. Values are kept as the text the user wrote; only range columns hold integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import prod
from pathlib import Path
from typing import Literal

DEFAULT_MAX_CELLS = 10**8
DEFAULT_CONFIDENCE = Fraction(95, 100)


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


Column = CategoricalColumn | RangeColumn | BinnedColumn

Op = Literal["eq", "ne", "in", "not_in", "ge", "gt", "le", "lt"]


@dataclass(frozen=True, slots=True)
class Condition:
    """One row filter. Operands are declared values (text, or ints for range columns).

    A missing value never satisfies a condition, not even ``ne``.
    """

    column: str
    op: Op
    operand: tuple[str | int, ...]  # one element except for in / not_in


@dataclass(frozen=True, slots=True)
class Table:
    """A noisy histogram over the cross product of its group_by domains."""

    name: str
    group_by: tuple[str, ...]
    where: tuple[Condition, ...]
    epsilon: Fraction
    post_process: Literal["clamp", "none"] = "clamp"
    description: str | None = None

    def __post_init__(self) -> None:
        if self.epsilon <= 0:
            raise ValueError(f"table {self.name}: ε must be positive")


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    path: str  # as written, relative to the spec file
    resolved_path: Path
    format: Literal["csv", "parquet"]
    na_values: tuple[str, ...] = ()
    delimiter: str = ","
    lifetime_epsilon: Fraction | None = None


@dataclass(frozen=True, slots=True)
class Spec:
    source: Path
    release: str
    dataset: Dataset
    definition: Literal["pure"]
    unit: Literal["row"]
    budget_epsilon: Fraction
    columns: tuple[Column, ...]  # declared, then derived, in spec order
    tables: tuple[Table, ...]
    ledger: str | None = None  # as written
    confidence: Fraction = DEFAULT_CONFIDENCE
    max_cells: int = DEFAULT_MAX_CELLS
    description: str | None = None

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def cells(self, table: Table) -> int:
        return prod(self.column(c).size for c in table.group_by)
