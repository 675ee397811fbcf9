"""Private-PGM side by side (issue 21): its estimate of the two tables at every level of the 2018
concatenation from the same noisy measurements as ours and the baseline, cell MAE and time.

``mbi`` is never a project dependency: it runs in its own venv (``bash benchmarks/anchors/setup.sh
mbi``), through benchmarks/anchors/pgm_consistency.py. Private-PGM's marginals are floats (it
does not round); its STATE and root cells are sums of its PUMA cells.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from consistency import RESULTS, SeededWords
from consistency_baseline import topdown_iv
from consistency_data import hierarchy, load_dataset

from dprelease.data import count_exact
from dprelease.evaluate.accuracy import exact_measurements, plan_variances
from dprelease.lifecycle.measure import measure_counts
from dprelease.plan.planner import measurement_plans
from dprelease.postprocess import postprocess_release

HERE = Path(__file__).resolve().parent
PYTHON = HERE / ".venvs" / "mbi" / "bin" / "python"


def run_pgm(trials: int, seed: int, iters: int = 5000, dataset: str = "nist2018") -> dict:
    if not PYTHON.exists():
        raise SystemExit(f"{PYTHON} not found: bash benchmarks/anchors/setup.sh mbi")
    version = subprocess.run([str(PYTHON), "-c", "import importlib.metadata as m; print(m.version('mbi'))"],
                             capture_output=True, text=True).stdout.strip()
    spec, info = load_dataset(dataset)
    exact, _ = exact_measurements(spec, count_exact(spec))
    plans = {(p.name, p.level): p for p in measurement_plans(spec)}
    variances = plan_variances(spec)
    names, parents = hierarchy(spec)
    states = np.zeros((len(parents[1]), len(parents[2])))
    states[parents[2], np.arange(len(parents[2]))] = 1
    rng = SeededWords(seed + 1)
    tables = {t.name: list(t.group_by) for t in spec.tables}
    cols = list(dict.fromkeys(c for g in tables.values() for c in g))
    meta = {"attrs": ["PUMA", *cols], "sizes": [spec.column("PUMA").size, *(spec.column(c).size for c in cols)],
            "tables": tables, "trials": trials,
            "stddev": {f"{t}|{lv}": variances[(t, lv)] ** 0.5 for (t, lv) in variances}}
    noisy_all = []
    payload = {"meta": json.dumps(meta), "states": states}
    for trial in range(trials):
        noisy = {k: measure_counts(v // plans[k].granularity, plans[k], rng=rng) for k, v in exact.items()}
        noisy_all.append(noisy)
        payload.update({f"{trial}|{t}|{lv}": v for (t, lv), v in noisy.items()})
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(Path(tmp) / "in.npz", **payload)
        start = time.perf_counter()
        proc = subprocess.run([str(PYTHON), str(HERE / "anchors" / "pgm_consistency.py"), str(Path(tmp) / "in.npz"),
                               str(Path(tmp) / "out.npz"), str(iters)], capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"Private-PGM failed:\n{proc.stderr[-3000:]}")
        with np.load(Path(tmp) / "out.npz") as saved:
            estimates = dict(saved)
    errors: dict[tuple[str, str, str], list[float]] = {}
    for trial, noisy in enumerate(noisy_all):
        ours = postprocess_release(spec, noisy, variances, method="consistent")
        for t in spec.tables:
            m = spec.dims_cells(t.group_by)
            base = topdown_iv([noisy[(t.name, lv)].reshape(-1, m) for lv in names],
                              [variances[(t.name, lv)] for lv in names], parents)
            puma = estimates[f"{trial}|{t.name}"].reshape(-1, m)
            pgm = {"PUMA": puma, "STATE": states @ puma, "root": puma.sum(0, keepdims=True)}
            for i, lv in enumerate(names):
                true = exact[(t.name, lv)].reshape(-1, m)
                for method, got in (("pgm", pgm[lv]), ("consistent", ours[(t.name, lv)].reshape(-1, m)),
                                    ("baseline", base[i])):
                    errors.setdefault((t.name, lv, method), []).append(float(np.abs(got - true).mean()))
    rows = [{"table": t.name, "level": lv,
             **{m: float(np.mean(errors[(t.name, lv, m)])) for m in ("pgm", "consistent", "baseline")}}
            for t in spec.tables for lv in names]
    seconds = estimates["seconds"]
    result = {"dataset": f"{dataset} ({info['persons']:,} persons, {info['pumas']} PUMAs)", "trials": trials,
              "version": version, "iterations": iters, "rows": rows,
              "seconds_per_release": float(np.mean(seconds)), "wall_seconds": wall,
              "note": f"the child process took {wall:.0f} s in all (JAX start-up and compilation included).",
              "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "consistency_pgm.json").write_text(json.dumps(result, indent=2))
    from consistency_report import pgm_lines
    print("\n".join(pgm_lines(result)))
    return result
