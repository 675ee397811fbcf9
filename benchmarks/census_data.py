"""Issue 28's synthetic six-level census: its geography, its persons (Parquet) and its release spec.

    python benchmarks/census_data.py --size 100k/2.5k      # writes benchmarks/data/census/100000-2500/

The model. Six levels, nation > STATE > COUNTY > TRACT > BG > BLOCK, each place named by a
Census-style GEOID, every coarser level a prefix of the block's 15 characters: STATE 2 (the 51
FIPS codes of the states and DC), COUNTY 5 (+ 3 digits), TRACT 11 (+ 6), BG 12 (+ 1, the block
group's digit 1-9), BLOCK 15 (+ 3). Fan-outs like the 2020 census, drawn uniformly within
``FANOUT`` (means 33 blocks per block group, 3 block groups per tract, 27 tracts per county), built
bottom-up so that there are exactly the requested number of blocks; the counties are spread over
min(51, counties) states by a skewed weight (every state at least one county). Persons are placed
on blocks with probability proportional to a heavy-tailed weight: a fifth of the blocks
unpopulated (as many census blocks are), the others log-normal (σ = 1.2: 40 persons per block
on average, a median populated block of about 25, the largest a few thousand), in
random row order. Each person has AGE_GROUP (the 23 age
bins of the census P12 table, skewed), VOTING_AGE (0 under 18, 1 over: a function of AGE_GROUP,
so the two never disagree), HISP (2), RACE (63: the non-empty combinations of 6 races, single
races common), SEX (2) and HHGQ (8: household, then 7 group-quarters types, rare), all stored as
small integer codes; BLOCK is stored dictionary-encoded.

The release spec: three tables in one consistency group — VOTING_AGE × HISP × RACE (252 cells),
SEX × AGE_GROUP (46), HHGQ × VOTING_AGE (16) — measured at the root and every level (314 cells
per place), ``post_process: consistent``, pure DP, ε per table split over the six levels.

Cost: one pass per batch of 2,000,000 persons (numpy ``choice`` with weights: O(n log blocks));
10M persons over 250,000 blocks took 9.5 s and 290 MB peak RSS here (a 50 MB file). Seeded with numpy's generator: this
is benchmark data, never noise. The same size and seed always give the same files; a size
already written (its ``done`` marker present) is reused as it is. Everything lands under
``benchmarks/data/census/<persons>-<blocks>/`` (git-ignored), never committed.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
CENSUS = HERE / "data" / "census"
BATCH = 2_000_000
ROW_GROUP = 1_000_000

# FIPS codes of the 50 states and DC
STATE_FIPS = ("01 02 04 05 06 08 09 10 11 12 13 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 "
              "37 38 39 40 41 42 44 45 46 47 48 49 50 51 53 54 55 56").split()
LEVELS = ("STATE", "COUNTY", "TRACT", "BG", "BLOCK")
PREFIX = {"STATE": 2, "COUNTY": 5, "TRACT": 11, "BG": 12, "BLOCK": 15}
# inclusive ranges of the number of children per parent (uniform: means 33, 3, 27)
FANOUT = {"BG": (17, 49), "TRACT": (1, 5), "COUNTY": (14, 40)}
MAX_STATES = len(STATE_FIPS)
UNPOPULATED = 0.2  # the share of blocks where no one lives
MODEL = 2  # the version of the persons' model, in each size's ``done`` marker: older data is never reused

# the 23 age bins of the census P12 table; the first 4 are under 18
AGE_GROUPS = ("0-4", "5-9", "10-14", "15-17", "18-19", "20", "21", "22-24", "25-29", "30-34", "35-39", "40-44",
              "45-49", "50-54", "55-59", "60-61", "62-64", "65-66", "67-69", "70-74", "75-79", "80-84", "85+")
UNDER_18 = 4
AGE_WEIGHT = (6, 6, 6, 4, 3, 1.4, 1.4, 4, 7, 7, 7, 6, 6, 6, 7, 3, 4, 2.5, 3.5, 4, 3, 2, 2)
HHGQ_WEIGHT = (97, 0.6, 0.4, 0.5, 0.3, 0.7, 0.3, 0.2)  # household; 7 group-quarters types
HISP_WEIGHT = (81, 19)
SEX_WEIGHT = (49, 51)
ATTRIBUTES = {"VOTING_AGE": 2, "HISP": 2, "RACE": 63, "SEX": 2, "AGE_GROUP": 23, "HHGQ": 8}
TABLES = {"va_hisp_race": ("VOTING_AGE", "HISP", "RACE"), "sex_age_group": ("SEX", "AGE_GROUP"),
          "hhgq_va": ("HHGQ", "VOTING_AGE")}
CELLS_PER_PLACE = sum(int(np.prod([ATTRIBUTES[c] for c in t])) for t in TABLES.values())  # 314
EPSILON = {"root": "1/10", "STATE": "1/10", "COUNTY": "1/10", "TRACT": "1/5", "BG": "1/5", "BLOCK": "3/10"}


def race_weight() -> np.ndarray:
    """63 race combinations (bit i: race i of White, Black, AIAN, Asian, NHPI, Other), code = bits - 1:
    single races as in 2020 (roughly), each combination of two or more rarer the more races it has."""
    single = np.array([62, 12.4, 1.1, 6, 0.2, 8.4])
    weight = np.empty(63)
    for bits in range(1, 64):
        races = [i for i in range(6) if bits >> i & 1]
        weight[bits - 1] = single[races[0]] if len(races) == 1 else \
            10 * np.prod(single[races] / 100) ** 0.5 / 4 ** len(races)
    return weight / weight.sum()


@dataclass(frozen=True)
class Geography:
    """Every level's codes (sorted) and each place's parent index in the level above."""

    codes: dict[str, list[str]]
    parent: dict[str, np.ndarray]  # level -> index of each place's parent in the coarser level

    @property
    def blocks(self) -> list[str]:
        return self.codes["BLOCK"]


def fan_out(gen: np.random.Generator, total: int, low: int, high: int) -> np.ndarray:
    """Children per parent, uniform in [low, high], summing to exactly ``total`` (the last parent
    takes what is left, at least 1)."""
    sizes = gen.integers(low, high + 1, total // low + 1)
    ends = np.cumsum(sizes)
    count = int(np.searchsorted(ends, total)) + 1
    sizes = sizes[:count].copy()
    sizes[-1] = total - (ends[count - 2] if count > 1 else 0)
    return sizes


def geography(blocks: int, seed: int = 28) -> Geography:
    """The six-level geography with exactly ``blocks`` blocks (see the module docstring)."""
    gen = np.random.default_rng(seed)  # benchmark data only: never noise
    per_bg = fan_out(gen, blocks, *FANOUT["BG"])
    per_tract = fan_out(gen, len(per_bg), *FANOUT["TRACT"])
    per_county = fan_out(gen, len(per_tract), *FANOUT["COUNTY"])
    states = min(MAX_STATES, len(per_county))
    weight = gen.pareto(1.2, states) + 0.2
    per_state = 1 + np.floor(weight / weight.sum() * (len(per_county) - states)).astype(int)
    per_state[np.argsort(-weight)[: len(per_county) - per_state.sum()]] += 1
    fips = sorted(gen.choice(STATE_FIPS, states, replace=False).tolist())
    counties = [f"{fips[s]}{2 * c + 1:03d}" for s in range(states) for c in range(per_state[s])]
    tracts = [f"{county}{100 * (t + 1):06d}" for county, n in zip(counties, per_county) for t in range(n)]
    bgs = [f"{tract}{g + 1}" for tract, n in zip(tracts, per_tract) for g in range(n)]
    block_codes = [f"{bg}{b:03d}" for bg, n in zip(bgs, per_bg) for b in range(n)]
    codes = {"STATE": fips, "COUNTY": counties, "TRACT": tracts, "BG": bgs, "BLOCK": block_codes}
    parent = {"COUNTY": np.repeat(np.arange(states), per_state), "TRACT": np.repeat(np.arange(len(counties)), per_county),
              "BG": np.repeat(np.arange(len(tracts)), per_tract), "BLOCK": np.repeat(np.arange(len(bgs)), per_bg)}
    return Geography(codes, parent)


def parse_size(text: str) -> tuple[int, int]:
    """'400k/10k' -> (400000, 10000); '2.5k', '10M', '1000' are accepted."""
    def one(part: str) -> int:
        match = re.fullmatch(r"([\d.]+)\s*([kKmM]?)", part.strip())
        if not match:
            raise ValueError(f"{part!r} is not a count such as 400k, 2.5k or 10M")
        return round(float(match[1]) * {"": 1, "k": 10**3, "m": 10**6}[match[2].lower()])
    persons, _, blocks = text.partition("/")
    if not blocks:
        raise ValueError(f"{text!r}: write a size as PERSONS/BLOCKS, e.g. 400k/10k")
    return one(persons), one(blocks)


def size_dir(persons: int, blocks: int) -> Path:
    return CENSUS / f"{persons}-{blocks}"


def _persons(gen: np.random.Generator, n: int, weight: np.ndarray) -> dict[str, np.ndarray]:
    age = gen.choice(len(AGE_GROUPS), n, p=np.array(AGE_WEIGHT) / sum(AGE_WEIGHT)).astype(np.int8)
    return {"BLOCK": gen.choice(len(weight), n, p=weight).astype(np.int32),
            "VOTING_AGE": (age >= UNDER_18).astype(np.int8),
            "HISP": gen.choice(2, n, p=np.array(HISP_WEIGHT) / sum(HISP_WEIGHT)).astype(np.int8),
            "RACE": gen.choice(63, n, p=race_weight()).astype(np.int8),
            "SEX": gen.choice(2, n, p=np.array(SEX_WEIGHT) / sum(SEX_WEIGHT)).astype(np.int8),
            "AGE_GROUP": age,
            "HHGQ": gen.choice(8, n, p=np.array(HHGQ_WEIGHT) / sum(HHGQ_WEIGHT)).astype(np.int8)}


def generate(persons: int, blocks: int, seed: int = 2020, out: Path | None = None) -> Path:
    """Write (once) the size's persons and block domain (in ``out``, by default its directory
    under benchmarks/data/census/); the directory."""
    out = size_dir(persons, blocks) if out is None else out
    marker = f"{persons} persons on {blocks} blocks, seed {seed}, model {MODEL}\n"
    if (out / "done").exists():
        if (out / "done").read_text() != marker:
            raise SystemExit(f"{out} holds other data ({(out / 'done').read_text().strip()}); remove it")
        return out
    out.mkdir(parents=True, exist_ok=True)
    geo = geography(blocks)
    (out / "blocks.txt").write_text("\n".join(geo.blocks) + "\n")
    gen = np.random.default_rng(seed)  # benchmark data only: never noise
    weight = gen.lognormal(0.0, 1.2, blocks) * (gen.random(blocks) >= UNPOPULATED)
    weight /= weight.sum()
    dictionary = pa.array(geo.blocks)
    partial = out / "persons.parquet.partial"
    writer = None
    for start in range(0, persons, BATCH):
        columns = _persons(gen, min(BATCH, persons - start), weight)
        table = pa.table({"BLOCK": pa.DictionaryArray.from_arrays(pa.array(columns.pop("BLOCK")), dictionary),
                          **{name: pa.array(values) for name, values in columns.items()}})
        if writer is None:
            writer = pq.ParquetWriter(partial, table.schema)
        writer.write_table(table, row_group_size=ROW_GROUP)
    assert writer is not None
    writer.close()
    partial.rename(out / "persons.parquet")
    (out / "done").write_text(marker)
    return out


SPEC = """\
# Issue 28's synthetic census: {persons:,} persons on {blocks:,} blocks (benchmarks/census_data.py).
release: {release}
dataset:
  name: synthetic-census-{persons}-{blocks}
  path: persons.parquet
  lifetime_budget: {{epsilon: 1000}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 3}}
{engine}limits: {{max_cells: {max_cells}}}
columns:
  BLOCK: {{domain_file: blocks.txt, geographic: true}}
  VOTING_AGE: {{domain: [0, 1], labels: [under 18, 18 and over]}}
  HISP: {{domain: [0, 1], labels: [Not Hispanic, Hispanic]}}
  RACE: {{domain: [{race}]}}
  SEX: {{domain: [0, 1], labels: [Male, Female]}}
  AGE_GROUP: {{domain: [{age}], labels: [{age_labels}]}}
  HHGQ: {{domain: [0, 1, 2, 3, 4, 5, 6, 7]}}
geography:
  levels: [STATE, COUNTY, TRACT, BG, BLOCK]
  STATE: {{from: COUNTY, prefix: 2}}
  COUNTY: {{from: TRACT, prefix: 5}}
  TRACT: {{from: BG, prefix: 11}}
  BG: {{from: BLOCK, prefix: 12}}
tables:
{tables}"""


def write_spec(out: Path, persons: int, blocks: int, release: str, engine: str | None = None) -> Path:
    """The release spec of the three tables over the size's data in ``out``; ``engine``: a Dask
    scheduler's address (``engine: {kind: dask, address: ...}``), else the local engine. The cell
    limit is raised to the largest table's cells (a table of 252 cells per block is over 10^8 from
    about 400,000 blocks)."""
    epsilon = "{" + ", ".join(f"{level}: {eps}" for level, eps in EPSILON.items()) + "}"
    tables = "".join(f"  - {{name: {name}, group_by: [geography, {', '.join(cols)}], consistency: persons, "
                     f"post_process: consistent, epsilon: {epsilon}}}\n" for name, cols in TABLES.items())
    spec = out / f"{release}.yaml"
    spec.write_text(SPEC.format(
        persons=persons, blocks=blocks, release=release, tables=tables, max_cells=max(10**8, 252 * blocks),
        engine=f"engine: {{kind: dask, address: \"{engine}\"}}\n" if engine else "",
        race=", ".join(str(i) for i in range(63)), age=", ".join(str(i) for i in range(23)),
        age_labels=", ".join(f'"{a}"' for a in AGE_GROUPS)))
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="100k/2.5k", help="PERSONS/BLOCKS, e.g. 400k/10k")
    parser.add_argument("--seed", type=int, default=2020)
    args = parser.parse_args()
    persons, blocks = parse_size(args.size)
    out = generate(persons, blocks, args.seed)
    spec = write_spec(out, persons, blocks, "census-bench")
    print(f"{persons:,} persons on {blocks:,} blocks in {out}; spec {spec}")


if __name__ == "__main__":
    main()
