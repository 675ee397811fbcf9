"""The typed, immutable release spec: what :func:`dprelease.spec.load_spec` returns.

The columns' declared domains and the row conditions are in :mod:`dprelease.spec.domains`;
here are the measures, tables, the dataset and the spec itself, with the privacy unit and the
neighbouring relation it asks for (:class:`dprelease.accounting.Neighbouring`).
"""

from __future__ import annotations

from datetime import datetime
from dataclasses import dataclass, replace
from fractions import Fraction
from math import prod
from pathlib import Path
from typing import Literal

from dprelease.accounting import ApproxDP, Budget, Neighbouring, PrivacyUnit, compose, delta_of
from dprelease.spec.domains import (  # re-exported: the model's public names
    ROOT,
    BinnedColumn,
    CategoricalColumn,
    Column,
    Condition,
    Op,
    RangeColumn,
    RollupColumn,
    Rule,
)

__all__ = ["ROOT", "AutoSplit", "BinnedColumn", "CategoricalColumn", "Column", "Condition", "Dataset", "Engine", "LocalTable",
           "MeanMeasure", "ModeMeasure", "Op", "PostProcess", "RangeColumn", "RollupColumn", "Rule", "Spec",
           "SumMeasure", "Table"]

BYTES_PER_CELL = 64  # a published cell's peak memory in a run (49 measured, benchmarks/census_scale.py), rounded up
MACHINE_SHARE = 3 / 4  # of the machine's memory a table may take


def machine_max_cells() -> int:
    """``limits.max_cells`` when a spec does not set it: the cells of one table this machine can
    hold (:data:`MACHINE_SHARE` of its physical memory at :data:`BYTES_PER_CELL` bytes a cell;
    10^8 where the memory cannot be read). A cluster's driver, or a machine that knows better, sets
    it in the spec."""
    import os

    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 10**8
    return max(int(memory * MACHINE_SHARE) // BYTES_PER_CELL, 1)


DEFAULT_MAX_CELLS = machine_max_cells()
DEFAULT_CONFIDENCE = Fraction(95, 100)

PostProcess = Literal["clamp", "none", "consistent"]


@dataclass(frozen=True, slots=True)
class ModeMeasure:
    """Each cell holds one category of ``column`` (a declared column), chosen by the exponential
    mechanism (permute-and-flip) over the declared domain.

    Mode (``q`` None): the most common category. Utility: the category's count in the cell,
    Δu = the contribution bound K; under add/remove one row every count moves the same way
    (monotone), so the exponent is ε·u/Δu; under change one record ε·u/(2Δu).

    Quantile (``q`` = a/b): the category o closest to the q-quantile of the cell's rows, in
    declared order. Utility −|b·#{x < o} − a·n| (n the cell's rows), integer. Adding or removing
    a row moves it by at most max(a, b − a): Δu = K·max(a, b − a) (a person's rows spread over
    cells add up: the privacy loss is linear in each cell's change). Changing one record is a
    removal from one cell and an addition to another (or a move of at most b within one), so
    the cells' changes add up to 2·max(a, b − a) ≥ b per row: Δu = 2K·max(a, b − a). Never
    monotone, so the exponent is ε·u/(2Δu). (Per-cell Δu = K·b would let a change across cells
    cost 2ε·max(q, 1 − q), more than ε for q ≠ 1/2.)
    """

    column: str
    q: Fraction | None = None

    @property
    def kind(self) -> str:
        return "mode" if self.q is None else "quantile"


@dataclass(frozen=True, slots=True)
class SumMeasure:
    """Each cell holds the sum of ``column`` over its rows, every value clamped to [low, high]
    and rounded to a multiple of ``granularity`` first (low and high are multiples of it).

    Sensitivity (in value units, times the contribution bound K), with M = max(|low|, |high|):
    add/remove one row, M. Change one record: a row that changes cell (or enters or leaves the
    table's ``where``) takes up to M out of one cell and puts up to M into another, so 2M for a
    table of more than one cell; for a single cell, max(high − low, M), since the changed row
    may also be dropped (``on_out_of_domain: drop``) or missing (counted 0). Noise is drawn in
    units of the granularity, so published sums are multiples of it.
    """

    column: str
    low: int
    high: int
    granularity: int
    missing_as_zero: bool = False


@dataclass(frozen=True, slots=True)
class MeanMeasure:
    """Each cell holds a mean of ``column``: a noisy sum over a noisy count of exactly the same
    rows, the table's budget split between them (``sum_share`` to the sum).

    Every value is clamped to [low, high] and rounded to a multiple of ``granularity`` (low and
    high are multiples of it), then centred: the sum adds up value − ``centre``, the bounds'
    midpoint on the grid, so its sensitivity is max(|low − centre|, |high − centre|) rather
    than max(|low|, |high|) (half as much noise for [0, U]), and the mean is
    centre + sum/count. The count's sensitivity is a count's. ``missing``: ``error`` (default),
    ``zero`` (a missing value counts as 0, clamped to the bounds, and its row is counted) or
    ``skip`` (rows without a value are in neither the sum nor the count).
    """

    column: str
    low: int
    high: int
    granularity: int
    missing: Literal["error", "zero", "skip"] = "error"
    sum_share: Fraction = Fraction(1, 2)

    @property
    def centre(self) -> int:
        """The midpoint of the bounds, rounded down to the grid."""
        return self.granularity * ((self.low + self.high) // (2 * self.granularity))

    @property
    def centred_sum(self) -> SumMeasure:
        """The sum part: centred values, whose sensitivities are :class:`SumMeasure`'s for the
        centred bounds."""
        return SumMeasure(self.column, self.low - self.centre, self.high - self.centre, self.granularity,
                          self.missing == "zero")


@dataclass(frozen=True, slots=True)
class AutoSplit:
    """``epsilon: auto`` (``rho: auto``): the planner chooses this table's budget and its levels'
    (:mod:`dprelease.plan.split`). ``weights``: one per measurement (per level, the root first,
    for a geographic table; one for a plain table), each the table's ``weight`` × its level's.
    Until ``chosen``, the table's budgets are the provisional equal split of what the explicit
    tables leave (valid, never spent: every plan resolves the split first)."""

    weights: tuple[Fraction, ...]
    chosen: bool = False


@dataclass(frozen=True, slots=True)
class Table:
    """A noisy histogram over the cross product of its group_by domains.

    A geographic table (``levels`` not empty) is measured once per level, the root first:
    at each level its histogram has the level's column in front of ``group_by``, and that
    measurement costs ``level_budgets[i]``. The levels compose sequentially.

    ``budget`` is of the release's kind: ε (pure), ρ (zcdp), or (ε, δ) (approx: δ is the
    discrete Gaussian table's own, 0 for the other mechanisms), never a bare number whose unit
    depends on something else.
    """

    name: str
    group_by: tuple[str, ...]  # the non-geographic dimensions
    where: tuple[Condition, ...]
    budget: Budget  # the table's total: the sum over its levels
    post_process: PostProcess = "clamp"
    description: str | None = None
    levels: tuple[str, ...] = ()  # ("root", "STATE", "PUMA") for a geographic table
    level_budgets: tuple[Budget, ...] = ()
    consistency: str | None = None  # the consistency group, if any
    mechanism: Literal["discrete_laplace", "truncated_geometric", "discrete_gaussian"] = "discrete_laplace"
    upper: int | None = None  # truncated_geometric: the public upper bound of every count
    measure: SumMeasure | ModeMeasure | MeanMeasure | None = None  # None: counts
    structural_zeros: Literal["publish", "omit"] = "publish"  # structural cells: published as exact 0s, or left out
    auto: AutoSplit | None = None  # epsilon: auto: the budgets are the planner's (see AutoSplit)

    def __post_init__(self) -> None:
        if self.budget.amount <= 0:
            raise ValueError(f"table {self.name}: its budget must be positive")
        if len(self.levels) != len(self.level_budgets):
            raise ValueError(f"table {self.name}: one budget per level")
        if self.levels and compose(self.level_budgets, self.budget.kind) != self.budget:
            raise ValueError(f"table {self.name}: the levels' budgets must add up to the table's")

    @property
    def delta(self) -> Fraction | None:
        """Under approx, a discrete Gaussian table's δ (None for the others: their δ is 0)."""
        return delta_of(self.budget) or None

    def with_delta(self, delta: Fraction) -> Table:
        """This (approx) table with δ, split over its levels in proportion to their ε."""
        epsilon = self.budget.amount
        return replace(self, budget=ApproxDP(epsilon, delta),
                       level_budgets=tuple(ApproxDP(b.amount, delta * b.amount / epsilon) for b in self.level_budgets))

    def measured(self) -> tuple[tuple[str | None, tuple[str, ...], Budget], ...]:
        """(level, histogram dimensions, budget) per measurement; level None for a plain table."""
        if not self.levels:
            return ((None, self.group_by, self.budget),)
        return tuple((level, (() if level == ROOT else (level,)) + self.group_by, budget)
                     for level, budget in zip(self.levels, self.level_budgets))


@dataclass(frozen=True, slots=True)
class LocalTable:
    """An estimate, from answers randomized by the respondents themselves (local DP), of the
    distribution of ``column`` over its declared domain (k values).

    ``k_rr``: each respondent reported the truth with probability e^ε/(e^ε + k − 1) and each
    other value with probability 1/(e^ε + k − 1): ε-local DP per respondent for this answer.
    ``coin_flip`` (Warner 1965): k = 2, truth with probability 3/4, ε = ln 3. The collected
    answers are the data; estimating from them is post-processing and spends no central budget.
    The ledger records each collection's per-respondent ε (:attr:`epsilon_bound`).
    """

    name: str
    column: str
    protocol: Literal["k_rr", "coin_flip"]
    epsilon: Fraction | None  # k_rr: the exact ε; coin_flip: None (ε = ln 3)
    collection: str
    memoised: bool = False
    description: str | None = None
    memo_of: str | None = None  # memoised: the collection whose randomized answers are repeated

    @property
    def epsilon_bound(self) -> Fraction:
        """The per-respondent ε as a rational upper bound: ε itself for k_rr; ln 3 rounded up
        to 12 significant digits for coin_flip (ln 3 is not a fraction)."""
        if self.epsilon is not None:
            return self.epsilon
        from dprelease.accounting import ln_upper_bound

        return ln_upper_bound(3)

    @property
    def epsilon_shown(self) -> str:
        return "ln 3" if self.epsilon is None else str(self.epsilon)

    @property
    def protocol_key(self) -> str:
        """What a memoised collection must share with the first: the protocol and its ε."""
        return "coin_flip" if self.epsilon is None else f"k_rr:{self.epsilon}"


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    path: str  # as written, relative to the spec file
    resolved_path: Path
    format: Literal["csv", "parquet"]
    na_values: tuple[str, ...] = ()
    delimiter: str = ","
    lifetime: Budget | None = None  # the dataset's lifetime budget, if the spec declares one
    partition_column: str | None = None  # release only the rows whose column equals partition_value
    partition_value: str | None = None
    partition_template: str | None = None  # the value as written (e.g. "{run_date:%Y-%m}")
    disjoint_units: bool = False  # each person in at most one partition: a lifetime budget per partition
    base_name: str | None = None  # the name as written, when ``name`` is keyed by partition

    @property
    def partition_note(self) -> str | None:
        if self.partition_column is None:
            return None
        if self.disjoint_units:
            return (f"only the rows with {self.partition_column} = {self.partition_value!r}; the spec declares that "
                    "each person belongs to at most one period (disjoint units), so this period has a lifetime budget "
                    f"of its own ({self.name}). If people recur across periods, this guarantee does not hold")
        return (f"only the rows with {self.partition_column} = {self.partition_value!r}; periods are not declared "
                "disjoint in people, so every period spends from the dataset's one lifetime budget")


@dataclass(frozen=True, slots=True)
class Engine:
    """Where the exact counts are computed: streamed on this machine (local), or on a Dask
    cluster (the scheduler's address; without one, local worker processes for the run). Not
    part of the plan: it changes where data is counted, never what is published or spent."""

    kind: Literal["local", "dask"] = "local"
    address: str | None = None


@dataclass(frozen=True, slots=True)
class Spec:
    source: Path
    release: str
    dataset: Dataset
    definition: Literal["pure", "zcdp", "approx"]  # the kind of every budget of the spec (ρ under zcdp)
    unit: Literal["row", "person"]  # person: every row with one value of ``unit_id``
    budget: Budget  # the release's: of the kind of ``definition``
    columns: tuple[Column, ...]  # declared, then derived, in spec order
    tables: tuple[Table, ...]  # central tables; the local ones are in local_tables
    ledger: str | None = None  # as written
    geography: tuple[str, ...] = ()  # levels, coarse to fine; the root is implicit
    confidence: Fraction = DEFAULT_CONFIDENCE
    margin_columns: bool = False  # accuracy.margin_columns: a margin column beside each published estimate
    max_cells: int = DEFAULT_MAX_CELLS
    description: str | None = None
    invariants: tuple[str, ...] = ()  # levels whose place totals are published exactly (not DP)
    guarantee_delta: Fraction | None = None  # zcdp: the δ of the (ε, δ) guarantee the release states
    unit_id: str | None = None  # the person identifier (unit "person"); read, never published
    max_rows: int = 1  # rows kept per person (contribution bound); 1 for unit "row"
    local_tables: tuple[LocalTable, ...] = ()  # kind: local (estimates from randomized answers)
    release_template: str | None = None  # e.g. "acs-monthly-{run_date:%Y-%m}"; release is it resolved
    run_date: datetime | None = None  # what the template was resolved with (UTC)
    engine: Engine = Engine()
    approval_required: bool = False  # approval: required (not in the fingerprint: it changes nothing released)
    rules: tuple[Rule, ...] = ()  # declared public facts about every row (structural zeros)
    output_dir: str | None = None  # as written (not in the fingerprint: where releases land, not what)

    @property
    def side_files(self) -> tuple[str, ...]:
        """The files beside the spec that shape the release, as written (relative to the spec
        file): its domain files and geography mapping files."""
        found = []
        for column in self.columns:
            match column:
                case CategoricalColumn(domain_file=str(written)) | RollupColumn(mapping_file=str(written)):
                    found.append(written)
        return tuple(found)

    @property
    def invariant_levels(self) -> tuple[str, ...]:
        """Levels whose place totals are published exactly: the declared ones and every coarser
        one (a coarser total is a sum of finer ones, so it is exact too), the root first."""
        if not self.invariants:
            return ()
        order = (ROOT,) + self.geography
        return order[:max(order.index(level) for level in self.invariants) + 1]

    @property
    def privacy_unit(self) -> PrivacyUnit:
        """One row, or one person (every row with one ``unit_id``, at most ``max_rows`` kept)."""
        return PrivacyUnit(self.unit_id, self.max_rows) if self.unit == "person" else PrivacyUnit()

    @property
    def bounded(self) -> bool:
        """Change-one-record terms: invariants publish exact totals, and local tables publish the
        number of answers (public in a local collection), so neighbours have the same totals."""
        return bool(self.invariants or self.local_tables)

    @property
    def relation(self) -> Neighbouring:
        """The neighbouring relation this spec asks for (a dataset whose earlier releases published
        invariants may impose change one record: :func:`dprelease.plan.planner.ledger_terms`).

        Add/remove one unit; with invariants, datasets that differ by an added or removed row no
        longer share the published totals, so the honest relation is change one record (bounded
        DP); local tables publish the number of answers, likewise."""
        why = "invariants" if self.invariants else "local" if self.local_tables else None
        return Neighbouring(self.privacy_unit, why is not None, why)  # type: ignore[arg-type]

    @property
    def sensitivity(self) -> int:
        """L1 sensitivity of every count histogram of the release (:attr:`Neighbouring.count_l1`)."""
        return self.relation.count_l1

    @property
    def neighbouring(self) -> str:
        return self.relation.text

    @property
    def symbol(self) -> str:
        """The budget's symbol: ε (pure) or ρ (zcdp)."""
        return "ρ" if self.definition == "zcdp" else "ε"

    @property
    def output_path(self) -> Path | None:
        """The spec's ``output_dir:`` as a directory: relative to the spec file's real directory
        (as the ``ledger:`` path is), ``~`` expanded; None when the spec names none."""
        if self.output_dir is None:
            return None
        written = Path(self.output_dir).expanduser()
        return (written if written.is_absolute() else self.source.resolve().parent / written).resolve()

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def cells(self, table: Table) -> int:
        """Cells of a plain table; of a geographic table, at its finest level."""
        return prod(self.column(c).size for c in table.measured()[-1][1])

    def dims_cells(self, dims: tuple[str, ...]) -> int:
        return prod(self.column(c).size for c in dims)
