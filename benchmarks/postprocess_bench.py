"""Consistent post-processing of a detailed histogram of 10^6 cells under a 3-level hierarchy.

The workload: STATE (10) > COUNTY (200) > TRACT (5,000), one table TRACT × SEX × AGEP
(2 × 100 = 200 cells per tract: 1,000,000 cells at the finest level, plus the counties,
states and nation), measured at every level from the synthetic person file of
benchmarks/generate.py. Times the post-processing alone (consistent, and clamp as the
baseline measured in the same run); medians of --repeats. Goal: consistent under 60 s.

    python benchmarks/postprocess_bench.py --rows 1000000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import generate  # noqa: E402

from dprelease.data import encode  # noqa: E402
from dprelease.evaluate.accuracy import exact_measurements, plan_variances  # noqa: E402
from dprelease.mechanisms import discrete_laplace  # noqa: E402
from dprelease.postprocess import postprocess_release  # noqa: E402
from dprelease.spec import load_spec  # noqa: E402

SPEC = """\
release: postprocess-bench
dataset: {name: postprocess-bench, path: persons.parquet, lifetime_budget: {epsilon: 10}}
privacy: {definition: pure, unit: row}
budget: {epsilon: 2}
columns:
  TRACT: {domain_file: tracts.txt}
  SEX: {domain: [1, 2]}
  AGEP: {range: [0, 99]}
geography:
  levels: [STATE, COUNTY, TRACT]
  STATE: {from: COUNTY, prefix: 2}
  COUNTY: {from: TRACT, prefix: 5}
tables:
  - name: tract_by_sex_by_age
    group_by: [geography, SEX, AGEP]
    epsilon: {root: 0.1, STATE: 0.2, COUNTY: 0.4, TRACT: 1}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out = Path(__file__).resolve().parent / "data" / f"{args.rows}"
    if not (out / "persons.parquet").exists():
        generate(args.rows, out)
    (out / "postprocess_bench.yaml").write_text(SPEC)
    spec = load_spec(out / "postprocess_bench.yaml")
    table = spec.tables[0]
    exact, scales = exact_measurements(spec, encode(spec))
    variances = plan_variances(spec)
    cells = {level: exact[(table.name, level)].size for level, _, _ in table.measured()}
    print(f"cells per level: {cells} (total {sum(cells.values()):,})")
    timings: dict[str, list[float]] = {"clamp": [], "consistent": []}
    for _ in range(args.repeats):
        noisy = {k: v + discrete_laplace(scales[k], v.size) for k, v in exact.items()}
        for method in timings:
            start = time.perf_counter()
            postprocess_release(spec, noisy, variances, method=method)
            timings[method].append(time.perf_counter() - start)
    clamp, consistent = (statistics.median(timings[m]) for m in ("clamp", "consistent"))
    print(f"post-processing, median of {args.repeats}: consistent {consistent:.2f} s, clamp {clamp:.3f} s "
          f"(ratio {consistent / clamp:.0f}×); goal: consistent under 60 s")


if __name__ == "__main__":
    main()
