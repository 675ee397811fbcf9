"""Issue 28's top-down fit at census shape: consistent post-processing alone, this code against a
baseline checkout, on a six-level synthetic census.

    python benchmarks/fit_scale.py --sizes 100k/2.5k,400k/10k --baseline-src /tmp/base [--timeout 900]

The case (in memory, no file of rows): nation > STATE > COUNTY > TRACT > BG > BLOCK with
fan-outs like the 2020 census (uniform 17–49 blocks per block group, 1–5 block groups per tract,
14–40 tracts per county, the counties over up to 51 states by a skewed weight); persons on
blocks by a heavy-tailed weight (Pareto 1.2 + 0.05); VOTING_AGE × HISP × RACE (252 cells),
SEX × AGE_GROUP (46) and HHGQ × VOTING_AGE (16) in one consistency group, measured at every
level (ε per table 1/10, 1/10, 1/10, 1/5, 1/5, 3/10 from the root down), the same shape as
issue 28's benchmark (``benchmarks/census_data.py``). Counts are exact, the noise is the
release's own samplers fed by seeded words (:class:`consistency.SeededWords`): repeatable, never
a release. Everything is written under ``benchmarks/data/fit/<persons>-<blocks>/``.

Each code (this checkout, and ``--baseline-src``: the root of another checkout, e.g.
``git archive main dprelease | tar -x -C /tmp/base``) runs ``postprocess_release(spec, noisy,
variances, method="consistent")`` once in a child process (peak RSS by benchmarks/peak_rss.py),
killed after ``--timeout``. Printed per size: published cells, seconds (estimate and fit where the
code reports them), peak RSS, and the ratio baseline ÷ this.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from census_data import fan_out  # noqa: E402  (the census benchmark's fan-outs, one generator)

DATA = HERE / "data" / "fit"
FANOUT = {"BG": (17, 49), "TRACT": (1, 5), "COUNTY": (14, 40)}
LEVELS = ("STATE", "COUNTY", "TRACT", "BG", "BLOCK")
PREFIX = {"STATE": 2, "COUNTY": 5, "TRACT": 11, "BG": 12}
SIZES = {"VOTING_AGE": 2, "HISP": 2, "RACE": 63, "SEX": 2, "AGE_GROUP": 23, "HHGQ": 8}
TABLES = {"va_hisp_race": ("VOTING_AGE", "HISP", "RACE"), "sex_age_group": ("SEX", "AGE_GROUP"),
          "hhgq_va": ("HHGQ", "VOTING_AGE")}
EPSILON = {"root": "1/10", "STATE": "1/10", "COUNTY": "1/10", "TRACT": "1/5", "BG": "1/5", "BLOCK": "3/10"}
AGE_WEIGHT = (6, 6, 6, 4, 3, 1.4, 1.4, 4, 7, 7, 7, 6, 6, 6, 7, 3, 4, 2.5, 3.5, 4, 3, 2, 2)
HHGQ_WEIGHT = (97, 0.6, 0.4, 0.5, 0.3, 0.7, 0.3, 0.2)


def parse_size(text: str) -> tuple[int, int]:
    """'400k/10k' -> (400000, 10000)."""
    def one(part: str) -> int:
        unit = {"k": 10**3, "m": 10**6}.get(part[-1].lower(), 1)
        return round(float(part[:-1] if unit > 1 else part) * unit)
    persons, blocks = text.split("/")
    return one(persons), one(blocks)


def geography(blocks: int, seed: int = 28) -> tuple[list[str], dict[str, np.ndarray]]:
    """Block codes (15 characters, coarser levels by prefix) and per level each place's parent."""
    gen = np.random.default_rng(seed)  # benchmark data only: never noise
    per_bg = fan_out(gen, blocks, *FANOUT["BG"])
    per_tract = fan_out(gen, len(per_bg), *FANOUT["TRACT"])
    per_county = fan_out(gen, len(per_tract), *FANOUT["COUNTY"])
    states = min(51, len(per_county))
    weight = gen.pareto(1.2, states) + 0.2
    per_state = 1 + np.floor(weight / weight.sum() * (len(per_county) - states)).astype(int)
    per_state[np.argsort(-weight)[: len(per_county) - per_state.sum()]] += 1
    counties = [f"{s + 1:02d}{2 * c + 1:03d}" for s in range(states) for c in range(per_state[s])]
    tracts = [f"{county}{100 * (t + 1):06d}" for county, n in zip(counties, per_county) for t in range(n)]
    bgs = [f"{tract}{g + 1}" for tract, n in zip(tracts, per_tract) for g in range(n)]
    codes = [f"{bg}{b:03d}" for bg, n in zip(bgs, per_bg) for b in range(n)]
    parent = {"COUNTY": np.repeat(np.arange(states), per_state), "TRACT": np.repeat(np.arange(len(counties)), per_county),
              "BG": np.repeat(np.arange(len(tracts)), per_tract), "BLOCK": np.repeat(np.arange(len(bgs)), per_bg)}
    return codes, parent


def prepare(persons: int, blocks: int, seed: int = 2020) -> Path:
    """Write the size's spec and noisy measurements (once); its directory."""
    out = DATA / f"{persons}-{blocks}"
    if (out / "case.json").exists():
        return out
    sys.path.insert(0, str(HERE))
    from consistency import SeededWords

    from dprelease.lifecycle.measure import measure_counts
    from dprelease.plan.planner import measurement_plans
    from dprelease.spec import load_spec

    out.mkdir(parents=True, exist_ok=True)
    codes, parent = geography(blocks)
    (out / "blocks.txt").write_text("\n".join(codes) + "\n")
    (out / "persons.csv").write_text("BLOCK," + ",".join(SIZES) + "\n")  # a header: the counts are passed directly
    spec_path = out / "spec.yaml"
    spec_path.write_text(_spec(persons, blocks))
    spec = load_spec(spec_path)
    gen = np.random.default_rng(seed)  # benchmark data only: never noise
    weight = gen.pareto(1.2, blocks) + 0.05
    block = gen.choice(blocks, persons, p=weight / weight.sum())
    age = gen.choice(23, persons, p=np.array(AGE_WEIGHT) / sum(AGE_WEIGHT))
    race_w = np.r_[[62, 12.4, 1.1, 6, 0.2, 8.4], np.full(57, 0.05)]
    values = {"VOTING_AGE": (age >= 4).astype(int), "HISP": gen.choice(2, persons, p=[0.81, 0.19]),
              "RACE": gen.choice(63, persons, p=race_w / race_w.sum()), "SEX": gen.choice(2, persons, p=[0.49, 0.51]),
              "AGE_GROUP": age, "HHGQ": gen.choice(8, persons, p=np.array(HHGQ_WEIGHT) / sum(HHGQ_WEIGHT))}
    plans = {(p.name, p.level): p for p in measurement_plans(spec)}
    words = SeededWords(seed)
    noisy = {}
    for name, cols in TABLES.items():
        cells = math.prod(SIZES[c] for c in cols)
        cell = np.ravel_multi_index([values[c] for c in cols], [SIZES[c] for c in cols])
        counts = np.bincount(block * cells + cell, minlength=blocks * cells).reshape(blocks, cells)
        for level in reversed(("root", *LEVELS)):
            plan = plans[(name, level)]
            noisy[f"{name}|{level}"] = measure_counts(counts.ravel(), plan, rng=words)
            if level != "root":
                up = parent.get(level, np.zeros(counts.shape[0], dtype=np.int64))
                coarser = np.zeros((int(up.max()) + 1, cells), dtype=np.int64)
                np.add.at(coarser, up, counts)
                counts = coarser
    np.savez(out / "noisy.npz", **noisy)
    published = sum(v.size for v in noisy.values())
    (out / "case.json").write_text(json.dumps({"persons": persons, "blocks": blocks, "published_cells": published}))
    return out


def _spec(persons: int, blocks: int) -> str:
    epsilon = "{" + ", ".join(f"{level}: {eps}" for level, eps in EPSILON.items()) + "}"
    tables = "".join(f"  - {{name: {name}, group_by: [geography, {', '.join(cols)}], consistency: persons, "
                     f"post_process: consistent, epsilon: {epsilon}}}\n" for name, cols in TABLES.items())
    columns = "".join(f"  {c}: {{domain: [{', '.join(str(i) for i in range(n))}]}}\n" for c, n in SIZES.items())
    geo = "".join(f"  {lv}: {{from: {LEVELS[i + 1]}, prefix: {PREFIX[lv]}}}\n" for i, lv in enumerate(LEVELS[:-1]))
    return (f"release: fit-{persons}-{blocks}\nledger: ledger.sqlite\noutput_dir: outputs\n"
            f"dataset: {{name: fit-{persons}-{blocks}, path: persons.csv, format: csv, lifetime_budget: {{epsilon: 1000}}}}\n"
            f"privacy: {{definition: pure, unit: row}}\nbudget: {{epsilon: 3}}\n"
            f"limits: {{max_cells: {max(10**8, 252 * blocks)}}}\n"
            f"columns:\n  BLOCK: {{domain_file: blocks.txt, geographic: true}}\n{columns}"
            f"geography:\n  levels: [{', '.join(LEVELS)}]\n{geo}tables:\n{tables}")


def child(case: Path, result: Path) -> None:
    """In the measured process (its sys.path already set to the code under test)."""
    import dprelease
    from dprelease.evaluate.accuracy import plan_variances
    from dprelease.postprocess import postprocess_release
    from dprelease.spec import load_spec

    spec = load_spec(case / "spec.yaml")
    with np.load(case / "noisy.npz") as saved:
        noisy = {tuple(k.split("|")): saved[k] for k in saved.files}
    variances = plan_variances(spec)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    try:
        postprocess_release(spec, noisy, variances, method="consistent", timings=timings)
    except TypeError:  # a code without the timings
        postprocess_release(spec, noisy, variances, method="consistent")
    seconds = time.perf_counter() - start
    result.write_text(json.dumps({"seconds": seconds, **timings, "code": str(Path(dprelease.__file__).parent)}))


def measure(case: Path, src: Path | None, timeout: float, tag: str) -> dict:
    """One post-processing of ``case`` by the code at ``src`` (None: this checkout)."""
    result, rss = case / f"{tag}.json", case / f"{tag}.rss"
    result.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, str(HERE / "peak_rss.py"), str(rss), sys.executable, str(Path(__file__)), "--child",
           str(case), str(result)]
    proc = subprocess.Popen(cmd, start_new_session=True, env=env, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # this case's session only
        proc.communicate()
        return {"status": f"did not finish in {timeout:.0f} s"}
    if not result.exists():
        return {"status": f"failed: {(err.strip().splitlines() or ['?'])[-1][:200]}"}
    return {"status": "ok", **json.loads(result.read_text()), "peak_rss_mb": int(rss.read_text()) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100k/2.5k,400k/10k")
    parser.add_argument("--baseline-src", type=Path, help="root of the baseline checkout (its dprelease/)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--reuse-baseline", action="store_true",
                        help="take the baseline's figures from its last run on the case, where there is one")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores", flush=True)
    rows = []
    for size in args.sizes.split(","):
        persons, blocks = parse_size(size)
        case = prepare(persons, blocks)
        info = json.loads((case / "case.json").read_text())
        runs = {"this": measure(case, None, args.timeout, "this")}
        if args.reuse_baseline and (case / "baseline.run.json").exists():
            runs["baseline"] = {**json.loads((case / "baseline.run.json").read_text()), "reused": True}
        elif args.baseline_src:
            runs["baseline"] = measure(case, args.baseline_src, args.timeout, "baseline")
            (case / "baseline.run.json").write_text(json.dumps(runs["baseline"]))
        for tag, r in runs.items():
            print(f"{size} {tag}: {json.dumps(r)}", flush=True)
        rows.append((size, info, runs))
    print("\n| persons / blocks | published cells | code | status | post-processing s | estimate s | fit s | "
          "peak RSS MB | baseline ÷ this |\n|---|---:|---|---|---:|---:|---:|---:|---:|")
    for size, info, runs in rows:
        for tag, r in runs.items():
            base, this = runs.get("baseline", {}).get("seconds"), runs["this"].get("seconds")
            ratio = f"{base / this:.1f}×" if tag == "this" and base and this else ("reused" if r.get("reused") else "")
            cells = [f"{r[k]:.2f}" if k in r else "—" for k in ("seconds", "postprocess_estimate", "postprocess_fit")]
            rss = f"{r['peak_rss_mb']:.0f}" if "peak_rss_mb" in r else "—"
            print(f"| {size} | {info['published_cells']:,} | {tag} | {r['status']} | {' | '.join(cells)} | {rss} | {ratio} |")


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    child(Path(sys.argv[2]), Path(sys.argv[3]))
elif __name__ == "__main__":
    main()
