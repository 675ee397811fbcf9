"""The 6-table census workload: `dprelease run` against a plain numpy bincount, and the sampler.

For each size it generates (once, deterministically) a synthetic person file, then measures
in the same run, medians of --repeats:

* plain: pyarrow load of the same columns + integer codes + numpy.bincount per table, no
  noise, no checks (the floor any implementation has to pay), in a fresh process each time,
  as `dprelease run` gets one (imports are not timed on either side);
* ours: `dprelease run` as a child process (ephemeral Prefect, warm PREFECT_HOME, a fresh
  ledger per run); the stage timings come from its internal run record;
* the ratio of ours (load + histogram + noise + post-process) to plain, and to plain with
  our data fingerprint (SHA-256 of the file, which the ledger records) added.

Then the sampler: exact discrete Laplace samples per second, ours (ChaCha20 keystream from
os.urandom, integer-only) next to numpy's insecure, inexact difference of two geometrics.

    python benchmarks/release_bench.py --rows 1000000 10000000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import generate, write_spec  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
AGE_GROUP = [0, 5, 10, 15, 18, 20, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 100]
TABLES = [("STATE", "SEX", "AGEP"), ("COUNTY", "SEX", "AGE_GROUP"), ("TRACT", "SEX"), ("TRACT", "RAC1P"),
          ("COUNTY", "RAC1P", "HISP"), ("TRACT", "VOTING_AGE", "HISP")]


def dataset(rows: int) -> Path:
    out = DATA / f"{rows}"
    if not (out / "persons.parquet").exists():
        print(f"generating {rows:,} rows ...", flush=True)
        generate(rows, out)
    return out


def plain_bincount_in_child(path: Path) -> float:
    """The plain computation in a fresh process, as `dprelease run` gets one (imports not timed)."""
    proc = subprocess.run([sys.executable, __file__, "--plain", str(path)], capture_output=True, text=True,
                          check=True)
    return float(proc.stdout.strip().splitlines()[-1])


def plain_bincount(path: Path) -> float:
    """Load + codes + bincount for the six tables; no noise, no domain checks."""
    start = time.perf_counter()
    table = pq.read_table(path, columns=["STATE", "COUNTY", "TRACT", "AGEP", "SEX", "RAC1P", "HISP"])
    codes, sizes = {}, {}
    for name in ("STATE", "COUNTY", "TRACT"):
        col = table.column(name).combine_chunks()
        codes[name], sizes[name] = col.indices.to_numpy(), len(col.dictionary)
    age = table.column("AGEP").to_numpy().astype(np.int64)
    codes["AGEP"], sizes["AGEP"] = age, 100
    codes["SEX"], sizes["SEX"] = table.column("SEX").to_numpy().astype(np.int64) - 1, 2
    codes["RAC1P"], sizes["RAC1P"] = table.column("RAC1P").to_numpy().astype(np.int64) - 1, 9
    codes["HISP"], sizes["HISP"] = table.column("HISP").to_numpy().astype(np.int64), 5
    lookup = np.searchsorted(AGE_GROUP, np.arange(100), side="right") - 1
    codes["AGE_GROUP"], sizes["AGE_GROUP"] = lookup[age], len(AGE_GROUP) - 1
    codes["VOTING_AGE"], sizes["VOTING_AGE"] = (age >= 18).astype(np.int64), 2
    for dims in TABLES:
        index = np.zeros(table.num_rows, dtype=np.int64)
        for d in dims:
            index *= sizes[d]
            index += codes[d]
        np.bincount(index, minlength=math.prod(sizes[d] for d in dims))
    return time.perf_counter() - start


def ours(data_dir: Path, rows: int, release: str, prefect_home: Path) -> tuple[float, dict]:
    spec = write_spec(data_dir, rows, release)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PREFECT_HOME": str(prefect_home), "XDG_DATA_HOME": f"{tmp}/xdg"}
        env.pop("PREFECT_API_URL", None)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dprelease", "run", str(spec), "--output-dir", f"{tmp}/out"],
                              env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"dprelease run failed ({proc.returncode}):\n{proc.stderr}")
        record = json.loads(Path(f"{tmp}/out/_internal/{release}/run.json").read_text())
    spec.unlink()
    return wall, record["timings"]


def sampler(n: int, repeats: int) -> tuple[float, float]:
    from dprelease.mechanisms import discrete_laplace

    scale = Fraction(2)
    ours_t = statistics.median(_time(lambda: discrete_laplace(scale, n)) for _ in range(repeats))
    rng = np.random.default_rng()  # the insecure baseline, for comparison only
    p = 1 - math.exp(-1 / float(scale))
    numpy_t = statistics.median(_time(lambda: rng.geometric(p, n) - rng.geometric(p, n)) for _ in range(repeats))
    return n / ours_t, n / numpy_t


def _time(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sampler-n", type=int, default=10_000_000)
    parser.add_argument("--plain", type=Path, help=argparse.SUPPRESS)  # internal: one timed plain run
    args = parser.parse_args()
    if args.plain:
        print(plain_bincount(args.plain))
        return
    prefect_home = DATA / "prefect-home"
    print("| rows | plain bincount s | ours: fingerprint | load | histogram | noise | post-process | "
          "compute ratio | ratio incl. fingerprint | whole `dprelease run` s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        data_dir = dataset(rows)
        path = data_dir / "persons.parquet"
        plain_bincount_in_child(path)  # warm the page cache for both sides
        if not (prefect_home / "warm").exists():  # the first ephemeral start builds Prefect's database
            ours(data_dir, rows, "warmup", prefect_home)
            (prefect_home / "warm").write_text("")
        plain_runs, our_runs = [], []
        for i in range(args.repeats):
            plain_runs.append(plain_bincount_in_child(path))
            our_runs.append(ours(data_dir, rows, f"bench-{i}", prefect_home))
        plain = statistics.median(plain_runs)
        stage = {k: statistics.median(t[k] for _, t in our_runs)
                 for k in ("fingerprint", "load", "histogram", "noise", "postprocess")}
        compute = stage["load"] + stage["histogram"] + stage["noise"] + stage["postprocess"]
        wall = statistics.median(w for w, _ in our_runs)
        print(f"| {rows:,} | {plain:.3f} | {stage['fingerprint']:.3f} | {stage['load']:.3f} | "
              f"{stage['histogram']:.3f} | {stage['noise']:.3f} | {stage['postprocess']:.4f} | "
              f"{compute / plain:.2f}× | {(compute + stage['fingerprint']) / plain:.2f}× | {wall:.1f} |", flush=True)
    ours_rate, numpy_rate = sampler(args.sampler_n, args.repeats)
    print(f"\nsampler, scale 2, {args.sampler_n:,} samples, median of {args.repeats}: ours (exact, CSPRNG) "
          f"{ours_rate / 1e6:.2f} M samples/s; numpy geometric difference (inexact, insecure) "
          f"{numpy_rate / 1e6:.2f} M samples/s; ratio {ours_rate / numpy_rate:.2f}×")
    shutil.rmtree(DATA / "tmp", ignore_errors=True)


if __name__ == "__main__":
    main()
