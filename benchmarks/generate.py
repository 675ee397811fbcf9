"""Deterministic generator of a synthetic census-like person file (Parquet).

One row per person: STATE (2 chars), COUNTY (5-char GEOID), TRACT (11-char GEOID), AGEP
(0-99), SEX (1-2), RAC1P (1-9), HISP (0-4). 10 states × 20 counties × 25 tracts = 5,000
tracts with skewed sizes. The same --rows and --seed always give the same file. It also
writes the domain files and the 6-table release spec that the benchmark runs.

    python benchmarks/generate.py --rows 10000000 --out benchmarks/data/10m
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

STATES = ["01", "06", "08", "13", "17", "24", "26", "36", "48", "51"]
COUNTIES_PER_STATE = 20
TRACTS_PER_COUNTY = 25
BATCH = 2_000_000

SPEC = """\
# Synthetic census-like workload: 6 tables over {rows:,} generated rows (benchmarks/generate.py).
release: {release}
dataset:
  name: synthetic-census-{rows}
  path: persons.parquet
  lifetime_budget: {{epsilon: 1000}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 3}}
columns:
  STATE: {{domain_file: states.txt}}
  COUNTY: {{domain_file: counties.txt}}
  TRACT: {{domain_file: tracts.txt}}
  AGEP: {{range: [0, 99]}}
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  RAC1P: {{domain: [1, 2, 3, 4, 5, 6, 7, 8, 9]}}
  HISP: {{domain: [0, 1, 2, 3, 4]}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 5, 10, 15, 18, 20, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 100]}}
  VOTING_AGE: {{from: AGEP, bins: [0, 18, 100], labels: [under 18, 18 and over]}}
tables:
  - {{name: state_by_sex_by_age, group_by: [STATE, SEX, AGEP], epsilon: 0.5}}
  - {{name: county_by_sex_by_age_group, group_by: [COUNTY, SEX, AGE_GROUP], epsilon: 0.5}}
  - {{name: tract_by_sex, group_by: [TRACT, SEX], epsilon: 0.5}}
  - {{name: tract_by_race, group_by: [TRACT, RAC1P], epsilon: 0.5}}
  - {{name: county_by_race_by_hispanic, group_by: [COUNTY, RAC1P, HISP], epsilon: 0.5}}
  - {{name: tract_by_voting_age_by_hispanic, group_by: [TRACT, VOTING_AGE, HISP], epsilon: 0.5}}
"""


def geography() -> tuple[list[str], list[str]]:
    counties = [f"{s}{c:03d}" for s in STATES for c in range(1, 2 * COUNTIES_PER_STATE, 2)]
    tracts = [f"{c}{t * 100:06d}" for c in counties for t in range(1, TRACTS_PER_COUNTY + 1)]
    return counties, tracts


def generate(rows: int, out: Path, seed: int = 2020) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    counties, tracts = geography()
    (out / "states.txt").write_text("\n".join(STATES) + "\n")
    (out / "counties.txt").write_text("\n".join(counties) + "\n")
    (out / "tracts.txt").write_text("\n".join(tracts) + "\n")
    path = out / "persons.parquet"
    rng = np.random.default_rng(seed)  # benchmark data only: never noise
    tract_weight = rng.pareto(1.5, len(tracts)) + 1
    tract_weight /= tract_weight.sum()
    age_weight = np.concatenate([np.full(65, 1.0), np.linspace(1.0, 0.05, 35)])
    age_weight /= age_weight.sum()
    race_weight = np.array([60, 13, 1, 0.2, 0.5, 6, 0.3, 8, 11])
    race_weight /= race_weight.sum()
    tract_arr = pa.array(tracts)
    county_arr = pa.array([t[:5] for t in tracts])
    state_arr = pa.array([t[:2] for t in tracts])
    writer = None
    for start in range(0, rows, BATCH):
        n = min(BATCH, rows - start)
        t = rng.choice(len(tracts), n, p=tract_weight).astype(np.int32)
        table = pa.table({
            "STATE": pa.DictionaryArray.from_arrays(pa.array(t), state_arr),
            "COUNTY": pa.DictionaryArray.from_arrays(pa.array(t), county_arr),
            "TRACT": pa.DictionaryArray.from_arrays(pa.array(t), tract_arr),
            "AGEP": pa.array(rng.choice(100, n, p=age_weight).astype(np.int16)),
            "SEX": pa.array(rng.integers(1, 3, n).astype(np.int8)),
            "RAC1P": pa.array((rng.choice(9, n, p=race_weight) + 1).astype(np.int8)),
            "HISP": pa.array(np.where(rng.random(n) < 0.8, 0, rng.integers(1, 5, n)).astype(np.int8)),
        })
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=1_000_000)
    assert writer is not None
    writer.close()
    return path


def write_spec(out: Path, rows: int, release: str) -> Path:
    spec = out / f"{release}.yaml"
    spec.write_text(SPEC.format(rows=rows, release=release))
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=2020)
    args = parser.parse_args()
    path = generate(args.rows, args.out, args.seed)
    write_spec(args.out, args.rows, "bench")
    print(f"wrote {args.rows:,} rows to {path} ({path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
