"""How often each stated margin of error holds, by simulation on test data (``dprelease evaluate``).

NOT PRIVATE, like :mod:`dprelease.evaluate.accuracy`: it reads the data and compares simulated releases
with the exact histograms. For every measurement of the spec — counts, sums, means, modes and
quantiles — it draws the plan's own noise ``trials`` times with the release's samplers
(:mod:`dprelease.lifecycle.measure`) and counts the (cell, trial) pairs whose error is within the margin
that :func:`dprelease.plan.margins.margin_of` states at the spec's confidence, in the measure's
own units:

* counts and sums: |noisy − exact| ≤ the cell margin (value units), every measured cell;
* means: |published mean − exact mean| ≤ the bound at the cell's exact row count n, for the
  cells where the bound exists (n > B); the exact mean is that of the values clamped to the
  bounds and put on the granularity's grid; an empty published mean (noisy count below 1) is a
  miss;
* modes and quantiles: the utility gap of the chosen category to the best (a count gap in rows;
  a quantile's, divided by b, a rank error in rows) ≤ the margin, every measured cell.

A margin holds if the share covered is at least the confidence (up to simulation error); the
mean's, mode's and quantile's are conservative bounds, so they cover more.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dprelease.data import ExactCounts, count_exact
from dprelease.evaluate.accuracy import NOT_PRIVATE
from dprelease.mechanisms.sampling import Entropy
from dprelease.lifecycle.measure import measure_counts, measure_mean, measure_mode
from dprelease.plan.margins import Margin, margin_of, table_units
from dprelease.plan.measurements import TablePlan
from dprelease.plan.planner import measurement_plans
from dprelease.plan.split import resolve
from dprelease.postprocess import mean_values
from dprelease.spec import MeanMeasure, ModeMeasure, Spec, Table


@dataclass(frozen=True)
class Coverage:
    """One measurement's stated margin and how often it held over ``pairs`` (cell, trial) pairs."""

    table: str
    level: str | None
    margin: Margin
    unit: str
    pairs: int
    covered: int
    mean_error: float  # mean |error| over the pairs, in the margin's unit

    @property
    def share(self) -> float:
        return self.covered / self.pairs if self.pairs else float("nan")


def margin_coverage(spec: Spec, trials: int, counts: ExactCounts | None = None,
                    rng: Entropy | None = None) -> list[Coverage]:
    """Every measurement's margin at the spec's confidence and its simulated coverage (module
    docstring). ``counts``: the exact histograms (default: the spec's data, counted);
    ``rng``: the samplers' test-only seam (the OS CSPRNG otherwise)."""
    spec = resolve(spec)  # epsilon: auto: the planner's split, chosen once for every measurement below
    counts = count_exact(spec) if counts is None else counts
    units = table_units(spec)
    tables = {t.name: t for t in spec.tables}
    out = []
    for plan in measurement_plans(spec):
        margin = margin_of(plan, spec.confidence)
        exact = counts.histograms[(plan.name, plan.level)]
        errors, within = _errors(spec, tables[plan.name], plan, margin, exact, trials, rng)
        out.append(Coverage(plan.name, plan.level, margin, units[plan.name], int(within.size), int(within.sum()),
                            float(errors[np.isfinite(errors)].mean()) if np.isfinite(errors).any() else float("nan")))
    return out


def _errors(spec: Spec, table: Table, plan: TablePlan, margin: Margin, exact: np.ndarray, trials: int,
            rng: Entropy | None) -> tuple[np.ndarray, np.ndarray]:
    """(|error| per (trial, cell) pair, whether each is within the margin), measured cells only."""
    keep = plan.structural_mask()
    keep = np.ones(plan.cells, dtype=bool) if keep is None else ~keep
    errors = []
    measure = table.measure
    for _ in range(trials):
        if isinstance(measure, MeanMeasure):
            published = mean_values(measure_mean(exact, plan, rng=rng), measure)[0]
            n = exact[1]
            with np.errstate(divide="ignore", invalid="ignore"):
                truth = measure.centre + measure.granularity * exact[0] / n
            errors.append(np.where(np.isnan(published), np.inf, np.abs(published - truth)))
        elif isinstance(measure, ModeMeasure):
            categories = spec.dims_cells((measure.column,))
            utilities = _utilities(exact.reshape(plan.cells, categories), measure.q)
            chosen = measure_mode(exact, plan, categories, measure.q, rng=rng)
            best = utilities.max(axis=1)
            picked = utilities[np.arange(plan.cells), np.maximum(chosen, 0)]
            gap = (best - picked).astype(np.float64)
            errors.append(gap if measure.q is None else gap / measure.q.denominator)
        else:
            g = plan.granularity
            errors.append(np.abs(measure_counts(exact // g, plan, rng=rng) - exact).astype(np.float64))
    found = np.stack(errors)[:, keep]
    if margin.kind == "mean":
        bounds = np.array([np.nan if (b := margin.at_count(int(n))) is None else b for n in exact[1][keep]])
        found, bounds = found[:, ~np.isnan(bounds)], bounds[~np.isnan(bounds)]
        return found.ravel(), (found <= bounds).ravel()
    return found.ravel(), (found <= (np.inf if margin.value is None else margin.value)).ravel()


def _utilities(counts: np.ndarray, q: Fraction | None) -> np.ndarray:
    """Per cell and category, the utility permute-and-flip scores (as :func:`measure_mode` builds it)."""
    if q is None:
        return counts
    below = np.cumsum(counts, axis=1) - counts
    return -np.abs(q.denominator * below - q.numerator * counts.sum(axis=1, keepdims=True))


def coverage_md(spec: Spec, rows: list[Coverage], trials: int) -> str:
    """The coverage section of ``dprelease evaluate``'s report."""
    confidence = f"{float(spec.confidence):.0%}"
    lines = [f"## Margins of error at {confidence}: stated and simulated", "",
             f"Each measurement's margin in its own units (as `plan` and the report state it), and the share of "
             f"(cell, trial) pairs over {trials} simulated releases whose error is within it (it should be at least "
             f"{confidence}; the mean's, mode's and quantile's margins are conservative bounds). A mean's margin is "
             "taken at each cell's exact row count; cells where it gives no bound are left out.", "",
             "| table | level | measure | margin | unit | pairs | within the margin | mean abs. error |",
             "|---|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| `{r.table}` | {r.level or '—'} | {r.margin.kind} | {r.margin.short()} | {r.unit} | {r.pairs:,} | "
                     f"{r.share:.1%} | {r.mean_error:,.2f} |")
    return "\n".join(lines + ["", f"_{NOT_PRIVATE}._", ""])
