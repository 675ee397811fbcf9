"""Decisions, not checks: what a spec means where it leaves something out.

A table's default mechanism and post-processing, the release δ's split across the discrete
Gaussian tables, a dataset's format and delimiter from its file name, the ledger key of a
period of disjoint people, a mean's budget share, a local table's collection and the privacy
unit. The section checkers ask here, so each default is decided in one place.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from dprelease.spec.model import MeanMeasure, ModeMeasure, SumMeasure, Table
from dprelease.spec.sections.reader import Reader

FORMATS = {".csv": "csv", ".txt": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet"}
SUM_SHARE = Fraction(1, 2)  # a mean's budget: half to the sum, the rest to the count


def data_format(path: str) -> str | None:
    """The data file's format from its extension (``.gz`` aside), or None if it does not tell."""
    return FORMATS.get(Path(path.removesuffix(".gz")).suffix.lower())


def delimiter(path: str) -> str:
    """A tab for ``.tsv`` files, else a comma."""
    return "\t" if path.lower().removesuffix(".gz").endswith(".tsv") else ","


def period_key(name: str, column: str | None, value: str | None, disjoint: bool) -> str:
    """The dataset's name in the ledger: a lifetime budget per period of disjoint people."""
    return f"{name}/{column}={value}" if disjoint else name


def privacy_unit(unit_id: object) -> str:
    """``person`` when the spec names a person identifier, else ``row``."""
    return "person" if unit_id else "row"


def collection(written: object, release: str | None) -> object:
    """A local table's collection: as written, else the release name as written."""
    return written or release or ""


def post_process(measure: SumMeasure | ModeMeasure | MeanMeasure | None, consistency: str | None,
                 geographic: bool) -> str:
    """Counts: consistent in a geography or a consistency group, else clamped. Sums: clamped when
    their lower bound is ≥ 0, else none. Modes, quantiles and means: none."""
    match measure:
        case SumMeasure():
            return "clamp" if measure.low >= 0 else "none"
        case ModeMeasure() | MeanMeasure():
            return "none"
    return "consistent" if consistency or geographic else "clamp"


def mechanism(definition: str, measure: SumMeasure | ModeMeasure | MeanMeasure | None) -> str:
    """The discrete Gaussian under zcdp and approx, else the discrete Laplace. A mode or quantile
    is chosen by the exponential mechanism whatever this says; it keeps the discrete Laplace."""
    gaussian = definition in ("zcdp", "approx") and not isinstance(measure, ModeMeasure)
    return "discrete_gaussian" if gaussian else "discrete_laplace"


def split_delta(r: Reader, tables: list[Table], release_delta: Fraction) -> list[Table] | None:
    """Under approx, every discrete Gaussian table gets a δ: its own ``delta:``, or a share of
    what the release's δ leaves, in proportion to ε among the Gaussian tables without one."""
    declared = sum((t.delta for t in tables if t.delta is not None), Fraction(0))
    if declared > release_delta:
        r.fail(("budget", "delta"), f"the tables declare δ = {declared} in all, over the release's δ = "
               f"{release_delta}; raise budget.delta or lower the tables' delta:")
        return None
    open_ = [t for t in tables if t.mechanism == "discrete_gaussian" and t.delta is None]
    weight = sum((t.budget.amount for t in open_), Fraction(0))
    if open_ and declared == release_delta:
        r.fail(("budget", "delta"), f"the tables' delta: use all of the release's δ, leaving none for "
               f"{', '.join(t.name for t in open_)}; give them a delta: or raise budget.delta")
        return None
    return [t.with_delta((release_delta - declared) * t.budget.amount / weight) if t in open_ else t
            for t in tables]
