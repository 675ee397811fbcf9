"""Issue 21's scale cases: time and peak RSS of consistent post-processing alone.

Each case's noisy measurements are drawn first (the release's own samplers, their words from a
seeded generator through the test-only seam) and saved under benchmarks/data/scale/; then a
child process (launched by benchmarks/peak_rss.py, which records its peak RSS) loads them and
times ``postprocess_release(spec, noisy, variances, method="consistent")``, the entry point a
release uses. A case that runs past ``--timeout`` is killed and reported as "did not finish in
N s"; each child's address space is capped (``--memory-limit`` GB) so that a dense method fails
with MemoryError rather than taking the shared machine down.

Cases:
* ``three``: marital status × sex, education × sex, race × Hispanic origin in one group over the
  2018 concatenation's 31 PUMAs (benchmarks/consistency_data.py), counted from its records.
* ``ten``: 10 tables of 2–3 columns each in one group over a synthetic hierarchy of 52 states and
  2,400 PUMAs with 10,000,000 persons: the persons are drawn in memory from a synthetic model
  (independent attributes with skewed marginals, PUMA sizes Pareto-distributed), counted per
  table, and only the histograms kept (no file of rows).
* ``k1``, ``k2``, ``k4``, ``k8``: the first 1, 2, 4, 8 of those 10 tables, same hierarchy.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
SCALE = HERE / "data" / "scale"
sys.path.insert(0, str(HERE))

STATES, PUMAS, PERSONS = 52, 2400, 10_000_000
EPS = {"root": 0.05, "STATE": 0.15, "PUMA": 0.3}
# synthetic attributes: name -> relative frequencies of its codes 0..k-1 (skewed, like a census)
ATTRIBUTES = {
    "SEX": [49, 51], "AGEG": [6, 6, 6, 4, 3, 7, 7, 7, 6, 6, 6, 6, 7, 3, 3, 2, 2, 4, 3, 2, 1, 1, 1],
    "RACE": [60, 13, 1, 0.2, 0.5, 6, 0.3, 8, 11], "HISP": [80, 12, 2, 1, 5], "MSP": [40, 2, 6, 10, 2, 22, 18],
    "EDU": [1, 5, 13, 6, 20, 3, 15, 8, 16, 8, 2, 2, 1], "TEN": [40, 23, 34, 3], "CIT": [86, 2, 1, 5, 6],
    "LANG": [78, 13, 3, 3, 2, 1], "EMP": [48, 3, 20, 29],
}
TABLES = [("SEX", "AGEG"), ("RACE", "HISP"), ("MSP", "SEX"), ("EDU", "SEX"), ("TEN", "RACE"), ("CIT", "HISP"),
          ("LANG", "AGEG"), ("EMP", "SEX", "AGEG"), ("HISP", "SEX", "MSP"), ("EDU", "EMP")]
CASES = {"three": None, "ten": 10, "k1": 1, "k2": 2, "k4": 4, "k8": 8}
GOALS = {"three": (2.0, 500), "ten": (60.0, 4096)}  # seconds, MB


def synthetic_geography() -> tuple[list[str], np.ndarray]:
    """2,400 PUMA codes "SS-PPPPP" in 52 states (every state at least one PUMA; sizes skewed),
    and each PUMA's population share (seeded: benchmark data, never noise)."""
    gen = np.random.default_rng(52)
    weight = gen.pareto(1.2, STATES) + 0.2
    per_state = 1 + np.floor(weight / weight.sum() * (PUMAS - STATES)).astype(int)
    per_state[np.argsort(-weight)[: PUMAS - per_state.sum()]] += 1
    codes = [f"{s + 1:02d}-{p + 1:05d}" for s in range(STATES) for p in range(per_state[s])]
    share = gen.pareto(2.5, PUMAS) + 1
    return codes, share / share.sum()


def synthetic_counts() -> dict[str, np.ndarray]:
    """Per synthetic table, its PUMA × cells histogram (int64) of 10M drawn persons (cached)."""
    cache = SCALE / "synthetic_counts.npz"
    if cache.exists():
        with np.load(cache) as saved:
            return dict(saved)
    _, share = synthetic_geography()
    gen = np.random.default_rng(2400)
    counts = {table_name(t): np.zeros(PUMAS * math.prod(len(ATTRIBUTES[c]) for c in t), dtype=np.int64)
              for t in TABLES}
    batch = 2_000_000
    for start in range(0, PERSONS, batch):
        n = min(batch, PERSONS - start)
        puma = gen.choice(PUMAS, n, p=share)
        values = {c: gen.choice(len(f), n, p=np.array(f) / sum(f)) for c, f in ATTRIBUTES.items()}
        for t in TABLES:
            sizes = [len(ATTRIBUTES[c]) for c in t]
            cell = np.ravel_multi_index([values[c] for c in t], sizes)
            name = table_name(t)
            counts[name] += np.bincount(puma * math.prod(sizes) + cell, minlength=counts[name].size)
    SCALE.mkdir(parents=True, exist_ok=True)
    np.savez(cache, **counts)
    return counts


def table_name(columns: tuple[str, ...]) -> str:
    return "_by_".join(columns).lower()


def synthetic_spec(k: int, out: Path, grouped: bool = True) -> Path:
    """A spec of the first ``k`` synthetic tables in one consistency group (its data file is a
    header only: the benchmark passes the counts directly). ``grouped=False``: each table alone,
    the same measurements (the spec the noise is planned from, which a group spec whose detail
    is over the spec's cell limit cannot give; the measured child then reports that refusal)."""
    codes, _ = synthetic_geography()
    out.mkdir(parents=True, exist_ok=True)
    (out / "puma.txt").write_text("# synthetic PUMAs: the benchmark's declared domain\n" + "\n".join(codes) + "\n")
    (out / "persons.csv").write_text("PUMA," + ",".join(ATTRIBUTES) + "\n")
    spec = {"release": f"synthetic-{k}-tables", "ledger": "ledger.sqlite", "output_dir": "outputs",
            "dataset": {"name": f"synthetic-{k}", "path": "persons.csv", "format": "csv",
                        "lifetime_budget": {"epsilon": 100}},
            "privacy": {"definition": "pure", "unit": "row"}, "budget": {"epsilon": round(0.5 * k, 2)},
            "columns": {"PUMA": {"domain_file": "puma.txt", "geographic": True},
                        **{c: {"domain": list(range(len(f)))} for c, f in ATTRIBUTES.items()}},
            "geography": {"levels": ["STATE", "PUMA"], "STATE": {"from": "PUMA", "prefix": 2}},
            "tables": [{"name": table_name(t), "group_by": ["geography", *t], "epsilon": EPS,
                        **({"consistency": "persons"} if grouped else {})} for t in TABLES[:k]]}
    path = out / ("spec.yaml" if grouped else "noise_spec.yaml")
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def prepare(case: str, seed: int) -> dict:
    """Write the case's spec and noisy measurements under benchmarks/data/scale/CASE; its sizes."""
    from consistency import SeededWords
    from consistency_data import BUILT, hierarchy, three_table_spec

    from dprelease.data import count_exact
    from dprelease.evaluate.accuracy import exact_measurements
    from dprelease.lifecycle.measure import measure_counts
    from dprelease.plan.planner import measurement_plans
    from dprelease.spec import load_spec

    out = SCALE / case
    out.mkdir(parents=True, exist_ok=True)
    if CASES[case] is None:
        spec = three_table_spec()
        exact, _ = exact_measurements(spec, count_exact(spec))
        spec_path = BUILT / "three_tables_2018.yaml"
    else:
        spec_path = synthetic_spec(CASES[case], out)
        spec = load_spec(synthetic_spec(CASES[case], out, grouped=False))
        _, parents = hierarchy(spec)
        counts = synthetic_counts()
        exact = {}
        for t in spec.tables:
            puma = counts[t.name].reshape(PUMAS, -1)
            state = np.zeros((STATES, puma.shape[1]), dtype=np.int64)
            np.add.at(state, parents[2], puma)
            exact.update({(t.name, "PUMA"): puma.ravel(), (t.name, "STATE"): state.ravel(),
                          (t.name, "root"): state.sum(0)})
    plans = {(p.name, p.level): p for p in measurement_plans(spec)}
    rng = SeededWords(seed)
    noisy = {f"{t}|{lv}": measure_counts(v // plans[(t, lv)].granularity, plans[(t, lv)], rng=rng)
             for (t, lv), v in exact.items()}
    np.savez(out / "noisy.npz", **noisy)
    dims = list(dict.fromkeys(c for t in spec.tables for c in t.group_by))
    first = spec.tables[0]
    info = {"case": case, "spec": str(spec_path), "tables": len(spec.tables), "names": [t.name for t in spec.tables],
            "places": {lv: int(exact[(first.name, lv)].size // spec.dims_cells(first.group_by))
                       for lv, _, _ in first.measured()},
            "published_cells": int(sum(v.size for v in exact.values())),
            "detail_cells_per_place": math.prod(spec.column(c).size for c in dims),
            "persons": int(exact[(spec.tables[0].name, "root")].sum())}
    (out / "case.json").write_text(json.dumps(info))
    return info


def child(case_dir: Path, memory_gb: float) -> None:
    """In the measured process: load the case, post-process it once, write the seconds."""
    limit = int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from dprelease.evaluate.accuracy import plan_variances
    from dprelease.postprocess import postprocess_release
    from dprelease.spec import load_spec

    info = json.loads((case_dir / "case.json").read_text())
    spec = load_spec(info["spec"])
    with np.load(case_dir / "noisy.npz") as saved:
        noisy = {tuple(k.split("|")): saved[k] for k in saved.files}
    variances = plan_variances(spec)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    published = postprocess_release(spec, noisy, variances, method="consistent")
    seconds = time.perf_counter() - start
    assert set(published) == set(noisy)
    (case_dir / "child.json").write_text(json.dumps({"seconds": seconds, "rss_before_kb": before}))


def measure(case: str, timeout: float, memory_gb: float) -> dict:
    """Run one prepared case in a child process: status, seconds, peak RSS."""
    out = SCALE / case
    for f in ("child.json", "rss.txt"):
        (out / f).unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / "peak_rss.py"), str(out / "rss.txt"), sys.executable, str(Path(__file__)),
           "--child", str(out), str(memory_gb)]
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.PIPE, text=True)
    started = time.perf_counter()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        so_far = _peak_so_far(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and the measured child: this case's session only
        proc.communicate()
        return {"status": f"did not finish in {timeout:.0f} s", "wall": time.perf_counter() - started,
                **({"peak_rss_mb": so_far} if so_far else {})}
    result: dict = {"wall": time.perf_counter() - started}
    if (out / "rss.txt").exists():
        result["peak_rss_mb"] = int((out / "rss.txt").read_text()) / 1024
    if proc.returncode != 0 or not (out / "child.json").exists():
        last = ([ln for ln in err.strip().splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"])[0]
        limit = re.search(r"([\d,]+) (?:detailed )?cells per place, over the limit of ([\d,]+)", last)
        if limit:  # the spec's own check refuses the group before any post-processing
            return {**result, "status": f"refused by the spec: group over its limit of {limit[2]} detail cells "
                                        "per place", "error": last}
        return {**result, "status": f"failed: {last[:200]}", "error": last}
    done = json.loads((out / "child.json").read_text())
    return {**result, "status": "ok", "seconds": done["seconds"], "rss_before_mb": done["rss_before_kb"] / 1024}


def _peak_so_far(launcher: int) -> float | None:
    """The measured child's peak RSS so far (MB; Linux /proc), read before a timed-out case is killed."""
    try:
        kids = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
        for line in Path(f"/proc/{kids[0]}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        return None
    return None


def scale_lines(results: dict) -> list[str]:
    lines = ["| case | tables | places (root/STATE/PUMA) | published cells | detail cells per place | status | "
             "post-processing s | peak RSS MB | RSS before it MB | goal |",
             "|---|---:|---|---:|---:|---|---:|---:|---:|---|"]
    for case, r in results.items():
        goal = GOALS.get(case)
        verdict = ""
        if goal:
            ok = r["status"] == "ok" and r["seconds"] < goal[0] and r.get("peak_rss_mb", 1e12) < goal[1]
            verdict = f"< {goal[0]:.0f} s, < {goal[1]} MB: {'met' if ok else 'NOT met'}"
        places = "/".join(str(v) for v in r["places"].values())
        secs = f"{r['seconds']:.2f}" if "seconds" in r else "—"
        rss = f"{r['peak_rss_mb']:.0f}" if "peak_rss_mb" in r else "—"
        before = f"{r['rss_before_mb']:.0f}" if "rss_before_mb" in r else "—"
        lines.append(f"| {case} | {r['tables']} | {places} | {r['published_cells']:,} | "
                     f"{r['detail_cells_per_place']:,} | {r['status']} | {secs} | {rss} | {before} | {verdict} |")
    return lines


def run_scale(timeout: float, memory_gb: float, cases: list[str], seed: int = 21) -> dict:
    results = {}
    for case in cases or list(CASES):
        if case not in CASES:
            raise SystemExit(f"unknown scale case {case!r}: one of {', '.join(CASES)}")
        info = prepare(case, seed)
        print(f"{case}: {info['tables']} tables, {info['published_cells']:,} published cells, "
              f"{info['detail_cells_per_place']:,} detail cells per place; post-processing...", flush=True)
        results[case] = {**info, **measure(case, timeout, memory_gb)}
        print(f"  {results[case]['status']} {results[case].get('seconds', '')}", flush=True)
    (HERE / "results").mkdir(exist_ok=True)
    saved = {"timeout": timeout, "memory_limit_gb": memory_gb, "cases": results,
             "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "machine": f"{os.cpu_count()} cores"}
    (HERE / "results" / "consistency_scale.json").write_text(json.dumps(saved, indent=2))
    print("\n".join(scale_lines(results)), flush=True)
    return saved


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    child(Path(sys.argv[2]), float(sys.argv[3]))
