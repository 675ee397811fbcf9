"""Issue 21's benchmark: the accuracy and the scale of consistent post-processing.

    python benchmarks/consistency.py accuracy [--trials 100] [--dataset national2019|nist2018|both]
    python benchmarks/consistency.py scale [--timeout 600] [--memory-limit 8]
    python benchmarks/consistency.py all [--readme] [--accuracy-doc]    # both, then the documents
    python benchmarks/consistency.py pgm                                 # Private-PGM side by side (own venv)

``accuracy``: per data set, ``--trials`` simulated releases of `configs/acs_census.yaml`'s two
tables (ε per table root 0.05 / STATE 0.15 / PUMA 0.3), each post-processed with clamp, with the
project's ``consistent`` (whatever it is when this runs: through ``postprocess_release``, the
entry point ``dprelease evaluate`` uses) and with the independent TopDown + inverse-variance
baseline (benchmarks/consistency_baseline.py); cell MAE and place-total MAE per table and level,
as a markdown table with the ratios ours/baseline, and as JSON in benchmarks/results/.

Data sets: ``national2019``, the shipped excerpt (data/nist_acs/national2019.csv, 27,253
persons); ``nist2018``, the 2018 NIST excerpts national + Texas + Massachusetts concatenated
(43,130 persons, 31 PUMAs in 18 states), built at run time from ../shared/data/nist_acs into
benchmarks/data/nist2018/ (git-ignored; never committed, never read by tests).

The simulated noise is the release's own (``measure_counts``: the exact discrete Laplace
sampler), its random words drawn through the samplers' test-only ``rng`` seam from a seeded
generator (``--seed``) so that a run can be repeated; ``--os-noise`` draws them from the OS
CSPRNG as ``dprelease evaluate`` does. NOT PRIVATE: the errors describe the confidential data
(public-use excerpts here).

``scale``: benchmarks/consistency_scale.py. ``--readme`` and ``--accuracy-doc``:
benchmarks/consistency_report.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from consistency_baseline import topdown_iv  # noqa: E402
from consistency_data import DATASETS, hierarchy, load_dataset  # noqa: E402

from dprelease.data import count_exact  # noqa: E402
from dprelease.evaluate.accuracy import exact_measurements, plan_variances  # noqa: E402
from dprelease.lifecycle.measure import measure_counts  # noqa: E402
from dprelease.plan.planner import measurement_plans  # noqa: E402
from dprelease.postprocess import postprocess_release  # noqa: E402

RESULTS = HERE / "results"
METHODS = ("clamp", "consistent", "baseline")


class SeededWords:
    """Random words for the samplers' test-only seam (``words(n) -> uint64``), from a seeded
    PCG64: a benchmark's repeatable simulated releases, never a release's noise."""

    def __init__(self, seed: int) -> None:
        self._bits = np.random.PCG64(seed)

    def words(self, n: int) -> np.ndarray:
        return np.asarray(self._bits.random_raw(n), dtype=np.uint64)


def simulate(spec, trials: int, seed: int | None, on_trial=None) -> dict:  # type: ignore[no-untyped-def]
    """Cell and place-total MAE per (table, level, method) over ``trials`` simulated releases,
    and the seconds each method's post-processing took in all. ``seed`` None: OS CSPRNG noise."""
    counts = count_exact(spec)
    exact, _ = exact_measurements(spec, counts)
    plans = {(p.name, p.level): p for p in measurement_plans(spec)}
    variances = plan_variances(spec)
    names, parents = hierarchy(spec)
    if any(p.structural for p in plans.values()):
        raise SystemExit("this benchmark does not handle structural zeros (the baseline estimates every cell)")
    rng = None if seed is None else SeededWords(seed)
    cell_sum: dict[tuple, float] = defaultdict(float)
    cell_n: dict[tuple, int] = defaultdict(int)
    total_sum: dict[tuple, float] = defaultdict(float)
    total_n: dict[tuple, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for trial in range(trials):
        noisy = {k: measure_counts(v // plans[k].granularity, plans[k], rng=rng) for k, v in exact.items()}
        published: dict[str, dict] = {}
        for method in ("clamp", "consistent"):
            start = time.perf_counter()
            published[method] = postprocess_release(spec, noisy, variances, method=method)
            seconds[method] += time.perf_counter() - start
        start = time.perf_counter()
        published["baseline"] = {}
        for t in spec.tables:
            m = spec.dims_cells(t.group_by)
            levels = [lv for lv, _, _ in t.measured()]
            if levels != list(names):
                raise SystemExit(f"table {t.name}: measured at {levels}, the hierarchy is {names}")
            out = topdown_iv([noisy[(t.name, lv)].reshape(-1, m) for lv in levels],
                             [variances[(t.name, lv)] for lv in levels], parents)
            published["baseline"].update({(t.name, lv): o.reshape(-1) for lv, o in zip(levels, out)})
        seconds["baseline"] += time.perf_counter() - start
        for method in METHODS:
            for t in spec.tables:
                m = spec.dims_cells(t.group_by)
                for lv, _, _ in t.measured():
                    got = np.asarray(published[method][(t.name, lv)]).reshape(-1, m).astype(np.float64)
                    true = exact[(t.name, lv)].reshape(-1, m)
                    key = (t.name, lv, method)
                    cell_sum[key] += float(np.abs(got - true).sum())
                    cell_n[key] += got.size
                    total_sum[key] += float(np.abs(got.sum(1) - true.sum(1)).sum())
                    total_n[key] += got.shape[0]
        if on_trial is not None:
            on_trial(trial + 1)
    rows = [{"table": t, "level": lv, "method": method, "cell_mae": cell_sum[(t, lv, method)] / cell_n[(t, lv, method)],
             "total_mae": total_sum[(t, lv, method)] / total_n[(t, lv, method)]}
            for (t, lv, method) in cell_sum]
    return {"trials": trials, "seed": seed, "rows": rows, "seconds": dict(seconds)}


def accuracy_lines(name: str, result: dict) -> list[str]:
    """The issue's markdown table for one data set, with the ratios ours/baseline."""
    by = {(r["table"], r["level"], r["method"]): r for r in result["rows"]}
    tables = list(dict.fromkeys(r["table"] for r in result["rows"]))
    levels = list(dict.fromkeys(r["level"] for r in result["rows"]))
    info = result.get("dataset", {})
    noise = "OS CSPRNG" if result["seed"] is None else f"seed {result['seed']}"
    lines = [f"### {name}: {info.get('persons', '?'):,} persons, {info.get('states', '?')} states, "
             f"{info.get('pumas', '?')} PUMAs; {result['trials']} simulated releases ({noise})", "",
             "| table | level | cell MAE: clamp | consistent (ours) | TopDown + IV | ours ÷ IV | "
             "totals: clamp | ours | TopDown + IV | ours ÷ IV |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in tables:
        for lv in levels:
            c, o, b = (by[(t, lv, m)] for m in METHODS)
            lines.append(f"| {t} | {lv} | {c['cell_mae']:.2f} | {o['cell_mae']:.2f} | {b['cell_mae']:.2f} | "
                         f"{_ratio(o['cell_mae'], b['cell_mae'])} | {c['total_mae']:.2f} | {o['total_mae']:.2f} | "
                         f"{b['total_mae']:.2f} | {_ratio(o['total_mae'], b['total_mae'])} |")
    s = result["seconds"]
    lines += ["", f"Post-processing time over the {result['trials']} releases: clamp {s['clamp']:.1f} s, "
              f"consistent {s['consistent']:.1f} s, baseline {s['baseline']:.1f} s.", ""]
    met = goals_met(result)
    lines.append("Goal (ours ≤ baseline and ≤ clamp, cells and totals, every table and level): "
                 + ("met" if not met else f"NOT met at {len(met)} of {2 * len(tables) * len(levels)}: "
                    + "; ".join(met)))
    return lines + [""]


def goals_met(result: dict) -> list[str]:
    """The (table, level, cells|totals) where ours is worse than the baseline or clamp (empty: met)."""
    by = {(r["table"], r["level"], r["method"]): r for r in result["rows"]}
    misses = []
    for (t, lv, method), o in by.items():
        if method != "consistent":
            continue
        for what in ("cell_mae", "total_mae"):
            worse = [m for m in ("baseline", "clamp") if o[what] > by[(t, lv, m)][what]]
            if worse:
                misses.append(f"{t} {lv} {what.split('_')[0]}s > {'/'.join(worse)}")
    return misses


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "—"


def run_accuracy(names: list[str], trials: int, seed: int | None) -> dict:
    results = {}
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in names:
        spec, info = load_dataset(name)
        print(f"{name}: {info['persons']:,} persons, {info['pumas']} PUMAs in {info['states']} states"
              + "".join(f", {s} {n} PUMAs" for s, n in info.get("named", {}).items()), flush=True)
        start = time.perf_counter()
        result = simulate(spec, trials, seed, on_trial=lambda k: print(f"  {k}/{trials}", end="\r", flush=True))
        result["dataset"] = info
        result["wall_seconds"] = time.perf_counter() - start
        result["measured"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        (RESULTS / f"consistency_accuracy_{name}.json").write_text(json.dumps(result, indent=2))
        print("\n".join(accuracy_lines(name, result)), flush=True)
        results[name] = result
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["accuracy", "scale", "all", "pgm", "docs"],
                        help="docs: rewrite the documents from the last results in benchmarks/results/")
    parser.add_argument("--dataset", choices=[*DATASETS, "both"], default="both")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=21, help="seed of the simulated noise's words (repeatable runs)")
    parser.add_argument("--os-noise", action="store_true", help="draw the simulated noise from the OS CSPRNG")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per scale case (then: did not finish)")
    parser.add_argument("--memory-limit", type=float, default=8, help="GB of address space per scale case")
    parser.add_argument("--cases", default="", help="scale cases to run, comma-separated (default: all)")
    parser.add_argument("--readme", action="store_true", help="write the section of benchmarks/README.md")
    parser.add_argument("--accuracy-doc", action="store_true", help="regenerate docs/accuracy.md and accuracy.png")
    args = parser.parse_args()
    names = list(DATASETS) if args.dataset == "both" else [args.dataset]
    if args.what == "pgm":
        from consistency_pgm import run_pgm
        run_pgm(args.trials if args.trials != 100 else 10, args.seed)
        return
    if args.what in ("accuracy", "all"):
        run_accuracy(names, args.trials, None if args.os_noise else args.seed)
    if args.what in ("scale", "all"):
        from consistency_scale import run_scale
        run_scale(args.timeout, args.memory_limit, [c for c in args.cases.split(",") if c])
    if args.what == "docs" and not (args.readme or args.accuracy_doc):
        args.readme = args.accuracy_doc = True
    if args.readme or args.accuracy_doc:
        from consistency_report import write_documents
        write_documents(readme=args.readme, accuracy_doc=args.accuracy_doc)


if __name__ == "__main__":
    main()
