"""Accuracy studies on test data: simulated releases compared with the confidential truth.

NOT PRIVATE. An evaluation reads the data, computes exact histograms and reports errors
against them: its output describes the confidential data. It is for test and synthetic
data only; it writes no ledger entry and publishes nothing, and the CLI refuses a dataset
that already has releases in the ledger (data under protection must not be evaluated in
the open). The simulated noise comes from the same exact sampler as a release.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dprelease.data import Encoded, ExactCounts, count_exact
from dprelease.data.count import count_encoded
from dprelease.errors import UserError
from dprelease.lifecycle.measure import measure_counts
from dprelease.plan.planner import measurement_plans
from dprelease.plan.split import resolve
from dprelease.postprocess import Invariants, clamp_or_none, postprocess_release
from dprelease.spec import MeanMeasure, ModeMeasure, Spec

METHODS = ("clamp", "consistent")
NOT_PRIVATE = "NOT PRIVATE — evaluation against the confidential data; never publish"


@dataclass(frozen=True)
class Row:
    table: str
    level: str | None
    method: str
    cell_mae: float
    cell_p95: float
    total_mae: float  # error of each place's total (the whole table at a plain table)


def exact_measurements(spec: Spec, data: Encoded | ExactCounts) -> tuple[dict, dict]:  # type: ignore[type-arg]
    """The exact histogram of every (table, level) measurement, in published units, and the noise
    scale the planner gives it (Δ/ε, or σ² under zcdp)."""
    counts = count_encoded(spec, data) if isinstance(data, Encoded) else data
    plans = {(p.name, p.level): p for p in measurement_plans(spec)}
    exact = {key: counts.histograms[key] * plan.granularity for key, plan in plans.items()}
    return exact, {key: plan.scale for key, plan in plans.items()}


def plan_variances(spec: Spec) -> dict[tuple[str, str | None], float]:
    """The noise variance of every count measurement, as the plan of a dataset new to the ledger
    gives it (what consistent post-processing weights by)."""
    from dprelease.plan.measurements import noise_variances

    return noise_variances(measurement_plans(spec))


def evaluate(spec: Spec, trials: int, on_trial: Callable[[int], None] | None = None) -> list[Row]:
    """Mean absolute and 95th-percentile cell errors, and total errors, per table, level and method.
    ``on_trial(k)`` (if given) is called after the k-th of ``trials`` simulated releases (progress)."""
    spec = resolve(spec)  # epsilon: auto: the release's split, chosen once and with every table (before any is left out)
    # modes are categories and means ratios, not counts: errors in persons do not apply (left out here)
    spec = dataclasses.replace(spec, tables=tuple(t for t in spec.tables
                                                  if not isinstance(t.measure, (ModeMeasure, MeanMeasure))))
    counts = count_exact(spec)  # streamed, or on the spec's engine
    exact, _ = exact_measurements(spec, counts)
    plans = {(p.name, p.level): p for p in measurement_plans(spec)}  # simulated with the release's own step
    variances = plan_variances(spec)
    invariants = counts.invariants  # empty unless the spec declares invariants
    cell_errors: dict[tuple, list[np.ndarray]] = defaultdict(list)
    total_errors: dict[tuple, list[np.ndarray]] = defaultdict(list)
    for trial in range(trials):
        noisy = {k: measure_counts(v // plans[k].granularity, plans[k]) for k, v in exact.items()}
        for method in METHODS:
            published = postprocess_release(spec, noisy, variances, method=method,
                                            invariants=Invariants.from_totals(invariants))
            if method == "clamp":  # every count table clamped per cell, whatever its unbiased noise (a Gaussian's too)
                published.update({(t.name, level): clamp_or_none(noisy[(t.name, level)], "clamp")
                                  for t in spec.tables if t.measure is None and t.mechanism != "truncated_geometric"
                                  for level, _, _ in t.measured()})
            for t in spec.tables:
                m = spec.dims_cells(t.group_by)
                for level, _, _ in t.measured():
                    got = published[(t.name, level)].reshape(-1, m)
                    true = exact[(t.name, level)].reshape(-1, m)
                    measured = plans[(t.name, level)].structural_mask()  # structural cells: exact by definition
                    errors = np.abs(got - true).ravel()
                    cell_errors[(t.name, level, method)].append(errors if measured is None else errors[~measured])
                    total_errors[(t.name, level, method)].append(np.abs(got.sum(1) - true.sum(1)))
        if on_trial is not None:
            on_trial(trial + 1)
    rows = []
    for (table, level, method), errs in cell_errors.items():
        cells = np.concatenate(errs)
        rows.append(Row(table, level, method, float(cells.mean()), float(np.quantile(cells, 0.95)),
                        float(np.concatenate(total_errors[(table, level, method)]).mean())))
    return rows


def refuse_report_among_releases(output: Path, output_dirs: list[str]) -> None:
    """An evaluation's report describes the exact data: it is never written inside a published
    release (a directory holding a ``manifest.json``, at any depth above it), a directory holding
    releases (any ledger's), or an output directory releases are published to (``output_dirs``:
    the ledger's runs', the spec's),
    where it would travel with the published files. A UserError (exit 2) before anything is read."""
    target = output.expanduser().resolve()
    fix = (f"an evaluation's report describes the exact data ({NOT_PRIVATE}) and is never written among published "
           "files. Write it outside every output directory (e.g. --output ~/evaluations/" + output.name + "). Nothing "
           "was read, recorded or written.")
    release = next((d for d in target.parents if (d / "manifest.json").is_file()), None)
    if release is not None:
        raise UserError(f"--output {output}: {release} is a published release (it holds manifest.json); {fix}")
    for directory in output_dirs:
        root = Path(directory).expanduser().resolve()
        if target.is_relative_to(root):
            raise UserError(f"--output {output}: {root} is an output directory that releases are published to; {fix}")
    outputs = next((d for d in target.parents if _holds_releases(d)), None)  # any ledger's releases
    if outputs is not None:
        raise UserError(f"--output {output}: {outputs} holds published releases (a folder with manifest.json), so it "
                        f"is an output directory; {fix}")


def _holds_releases(directory: Path) -> bool:
    """A folder of ``directory`` holds a release's manifest (a folder that cannot be listed: no)."""
    try:
        return any((child / "manifest.json").exists() for child in directory.iterdir() if child.is_dir())
    except OSError:
        return False


def report_md(spec: Spec, rows: list[Row], trials: int, command: str) -> str:
    lines = [f"# Accuracy evaluation — {spec.release} ({NOT_PRIVATE})", "",
             f"{trials} simulated releases of `{spec.dataset.path}` (spec `{spec.source.name}`), each post-processed "
             "with clamp (max(0, x) per cell) and with consistent (census-style) post-processing, compared with the "
             "exact counts. Errors are absolute, in persons (a sum's in its column's units).", "",
             f"Neighbouring datasets: {spec.neighbouring}; every count's sensitivity is {spec.sensitivity} "
             "(a sum's follows its bounds)."
             + (f" Invariants (published exactly, NOT protected by DP): totals at {', '.join(spec.invariant_levels)}."
                if spec.invariants else ""), "", f"Command: `{command}`", "",
             "| table | level | cells: MAE clamp | MAE consistent | p95 clamp | p95 consistent | "
             "totals: MAE clamp | MAE consistent |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    by = {(r.table, r.level, r.method): r for r in rows}
    for t in spec.tables:
        if (t.name, t.measured()[0][0], "clamp") not in by:  # modes and means: not errors in persons
            continue
        for level, _, _ in t.measured():
            c, k = by[(t.name, level, "clamp")], by[(t.name, level, "consistent")]
            lines.append(f"| {t.name} | {level or '—'} | {c.cell_mae:.2f} | {k.cell_mae:.2f} | {c.cell_p95:.1f} | "
                         f"{k.cell_p95:.1f} | {c.total_mae:.2f} | {k.total_mae:.2f} |")
    left_out = [t.name for t in spec.tables if (t.name, t.measured()[0][0], "clamp") not in by]
    left_out += [t.name for t in spec.local_tables]
    if left_out:
        lines += ["", f"Not evaluated in this table (modes, means and local tables are not counts; every central table's margin "
                  f"is checked below): {', '.join(left_out)}."]
    lines += ["", f"_{NOT_PRIVATE}._", ""]
    return "\n".join(lines)
