"""Issue 28's benchmark (benchmarks/census_data.py, benchmarks/census_scale.py): the generator's
geography is the six-level census the issue describes, its data repeats for a seed, the spec
validates, and the plain count the benchmark divides by counts what a release counts. Small
sizes only; no timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from census_data import (  # noqa: E402
    ATTRIBUTES,
    FANOUT,
    LEVELS,
    MAX_STATES,
    PREFIX,
    STATE_FIPS,
    TABLES,
    UNDER_18,
    generate,
    geography,
    parse_size,
    write_spec,
)
from census_scale import plain_histograms, published_cells  # noqa: E402

from dprelease.data import count_exact  # noqa: E402
from dprelease.evaluate.accuracy import exact_measurements  # noqa: E402
from dprelease.spec import load_spec  # noqa: E402


@pytest.mark.parametrize("blocks", [2_500, 60_000])
def test_geography_codes_are_census_geoids_each_level_a_prefix_of_the_next(blocks):
    geo = geography(blocks)
    assert len(geo.blocks) == blocks
    assert [len(c) for c in (geo.codes[lv][0] for lv in LEVELS)] == [2, 5, 11, 12, 15]
    for level in LEVELS:
        codes = geo.codes[level]
        assert all(len(c) == PREFIX[level] and c.isdigit() for c in codes)
        assert codes == sorted(set(codes))  # unique, in order
    assert set(geo.codes["STATE"]) <= set(STATE_FIPS)
    for coarse, fine in zip(LEVELS, LEVELS[1:]):
        parents = geo.codes[coarse]
        # each place's parent is the place its code begins with, and every parent has a child
        assert [c[: PREFIX[coarse]] for c in geo.codes[fine]] == [parents[i] for i in geo.parent[fine]]
        assert set(geo.parent[fine]) == set(range(len(parents)))


@pytest.mark.parametrize("blocks", [2_500, 60_000])
def test_fan_outs_within_the_stated_ranges(blocks):
    geo = geography(blocks)
    for fine, coarse in (("BLOCK", "BG"), ("BG", "TRACT"), ("TRACT", "COUNTY")):
        children = np.bincount(geo.parent[fine])
        low, high = FANOUT[coarse]
        # every parent within the range but the last one drawn, which takes what is left (>= 1)
        assert children[:-1].min() >= low and children.max() <= high and children[-1] >= 1
    counties = len(geo.codes["COUNTY"])
    assert len(geo.codes["STATE"]) == min(MAX_STATES, counties)
    assert np.bincount(geo.parent["COUNTY"]).min() >= 1
    mean = blocks / len(geo.codes["BG"])
    assert 28 <= mean <= 38  # about 33 blocks per block group


def test_large_geography_has_51_states():
    assert len(geography(250_000).codes["STATE"]) == MAX_STATES == 51


def test_sizes_parse():
    assert parse_size("400k/10k") == (400_000, 10_000)
    assert parse_size("100k/2.5k") == (100_000, 2_500)
    assert parse_size("10M/250k") == (10_000_000, 250_000)
    with pytest.raises(ValueError):
        parse_size("400k")


def _persons(path: Path):
    return pq.read_table(path / "persons.parquet")


def test_data_is_deterministic_for_a_seed_and_persons_are_well_formed(tmp_path):
    a = generate(5_000, 300, seed=7, out=tmp_path / "a")
    b = generate(5_000, 300, seed=7, out=tmp_path / "b")
    c = generate(5_000, 300, seed=8, out=tmp_path / "c")
    assert _persons(a).equals(_persons(b))
    assert (a / "blocks.txt").read_text() == (b / "blocks.txt").read_text()
    assert not _persons(a).equals(_persons(c))
    table = _persons(a)
    assert table.num_rows == 5_000
    blocks = set((a / "blocks.txt").read_text().split())
    assert len(blocks) == 300 and set(table["BLOCK"].to_pylist()) <= blocks
    for name, size in ATTRIBUTES.items():
        values = table[name].to_numpy()
        assert values.min() >= 0 and values.max() < size
    np.testing.assert_array_equal(table["VOTING_AGE"].to_numpy(), table["AGE_GROUP"].to_numpy() >= UNDER_18)
    per_block = np.bincount(np.concatenate([c.indices.to_numpy() for c in table["BLOCK"].chunks]), minlength=300)
    assert 0.1 <= (per_block == 0).mean() <= 0.3  # about a fifth of the blocks unpopulated
    assert per_block.max() >= 10 * per_block.mean()  # heavy-tailed: a few blocks hold many
    with pytest.raises(SystemExit, match="holds other data"):
        generate(5_000, 300, seed=9, out=a)


def test_the_spec_validates_and_the_plain_count_counts_what_a_release_counts(tmp_path):
    out = generate(3_000, 200, seed=3, out=tmp_path / "census")
    spec_path = write_spec(out, 3_000, 200, "census-test")
    done = subprocess.run([sys.executable, "-m", "dprelease", "validate", str(spec_path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_spec(spec_path)
    assert {t.name: spec.dims_cells(t.group_by) for t in spec.tables} == \
        {"va_hisp_race": 252, "sex_age_group": 46, "hhgq_va": 16}
    assert {t.consistency for t in spec.tables} == {"persons"}
    assert [lv for lv, _, _ in spec.tables[0].measured()] == ["root", *LEVELS]
    exact, _ = exact_measurements(spec, count_exact(spec))
    plain, _ = plain_histograms(out)
    assert set(plain) == {(t, lv) for t in TABLES for lv in ("root", *LEVELS)} == set(exact)
    for key, counts in plain.items():
        np.testing.assert_array_equal(counts, exact[key], err_msg=str(key))
    cells, _ = published_cells(out)
    assert cells == sum(v.size for v in exact.values())
