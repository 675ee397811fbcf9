"""Sparse counting (dprelease/data/partials.py) gives exactly the dense reference.

The reference is ``numpy.bincount(keys, weights, minlength=cells)`` of all the rows at once, its
keys built here from the codes (mixed radix, place first), independently of
:mod:`dprelease.data.histogram`. Counting runs batch by batch (several batch sizes, so the same
histogram is dense in one batch and sparse in another) and the partials are added in random
groupings, as files and Dask pieces are.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dprelease.data import count as count_module
from dprelease.data import partials
from dprelease.data.count import ExactCounts, combine_on_worker, count_encoded, zero_counts
from dprelease.data.load import Encoded
from dprelease.data.partials import DENSE_PER_ROW, Accumulator, count_keys
from dprelease.spec import ROOT, MeanMeasure, ModeMeasure, SumMeasure, load_spec

BLOCKS = [f"{c:02d}{t}{b}" for c in range(1, 4) for t in "ab" for b in "0123456789"]  # 60 blocks, 6 tracts, 3 counties

SPEC = """
release: sparse-test
dataset: {name: d, path: data.csv, format: csv, lifetime_budget: {epsilon: 20}}
privacy: {definition: pure, unit: row}
budget: {epsilon: 10}
columns:
  BLOCK: {domain_file: blocks.txt, geographic: true}
  A: {domain: [a, b, c, d, e, f, g]}
  B: {range: [0, 9]}
geography:
  levels: [COUNTY, TRACT, BLOCK]
  COUNTY: {from: TRACT, prefix: 2}
  TRACT: {from: BLOCK, prefix: 3}
invariants: {totals: [TRACT]}
tables:
  - {name: count, group_by: [geography, A, B], where: {B: {ge: 2}}, epsilon: {root: 0.1, COUNTY: 0.1, TRACT: 0.1, BLOCK: 0.2}}
  - name: total
    group_by: [geography, A]
    measure: {sum: X, bounds: [-50, 400], granularity: 10, missing: zero}
    epsilon: {root: 0.1, COUNTY: 0.1, TRACT: 0.1, BLOCK: 0.2}
  - name: average
    group_by: [geography, B]
    measure: {mean: X, bounds: [0, 300], granularity: 5, missing: skip}
    epsilon: {root: 0.1, COUNTY: 0.1, TRACT: 0.1, BLOCK: 0.2}
  - name: average_zero
    group_by: [TRACT]
    measure: {mean: X, bounds: [0, 300], granularity: 5, missing: zero}
    epsilon: 0.5
  - {name: mode, group_by: [TRACT, A], measure: {mode: B}, epsilon: 0.5}
  - {name: plain, group_by: [A], epsilon: 0.5}
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    d = tmp_path_factory.mktemp("sparse")
    (d / "blocks.txt").write_text("\n".join(BLOCKS) + "\n")
    (d / "data.csv").write_text("BLOCK,A,B,X\n")
    (d / "spec.yaml").write_text(SPEC)
    return load_spec(d / "spec.yaml")


def random_rows(spec, rows: int, blocks: int, seed: int) -> Encoded:
    """Rows on the first ``blocks`` blocks (few: every histogram small against the rows; many:
    sparse), X a float with missing values and values outside the bounds."""
    rng = np.random.default_rng(seed)
    block = rng.integers(0, blocks, rows).astype(np.int16)
    codes = {"BLOCK": block, "A": rng.integers(0, 7, rows).astype(np.int16),
             "B": rng.integers(0, 10, rows).astype(np.int16)}
    codes["TRACT"] = np.asarray(spec.column("TRACT").parent_of, dtype=np.int16)[block]
    codes["COUNTY"] = np.asarray(spec.column("COUNTY").parent_of, dtype=np.int16)[codes["TRACT"]]
    x = rng.normal(150, 150, rows).round(1)
    x[rng.random(rows) < 0.1] = np.nan
    return Encoded(codes, rows_read=rows, rows_dropped=0, values={"X": x})


def sliced(data: Encoded, start: int, stop: int) -> Encoded:
    return Encoded({k: v[start:stop] for k, v in data.codes.items()}, rows_read=stop - start, rows_dropped=0,
                   values={k: v[start:stop] for k, v in data.values.items()})


def reference(spec, data: Encoded) -> dict:
    """Every histogram by numpy.bincount with minlength over all the rows at once."""
    out = {}
    for table in spec.tables:
        mode = (table.measure.column,) if isinstance(table.measure, ModeMeasure) else ()
        rows = np.ones(data.rows, dtype=bool)
        if table.where:
            rows &= data.codes["B"] >= 2
        m = table.measure
        x = data.values["X"]
        if isinstance(m, MeanMeasure) and m.missing == "skip":
            rows &= ~np.isnan(x)
        for level, dims, _ in table.measured():
            key = np.zeros(data.rows, dtype=np.int64)
            for name in dims + mode:
                key = key * spec.column(name).size + data.codes[name]
            cells = spec.dims_cells(dims + mode)
            if isinstance(m, SumMeasure):
                units = np.where(np.isnan(x), 0, np.rint(np.clip(x, m.low, m.high) / m.granularity))
                want = np.bincount(key[rows], units[rows], minlength=cells).astype(np.int64)
            elif isinstance(m, MeanMeasure):
                units = np.rint(np.clip(np.nan_to_num(x, nan=0.0), m.low, m.high) / m.granularity) \
                    - m.centre // m.granularity
                want = np.stack([np.bincount(key[rows], units[rows], minlength=cells).astype(np.int64),
                                 np.bincount(key[rows], minlength=cells)])
            else:
                want = np.bincount(key[rows], minlength=cells)
            out[(table.name, level)] = want
    return out


def with_merge_floor(floor: int, run):  # type: ignore[no-untyped-def]
    """``run()`` with sparse runs merged from ``floor`` entries on (small: merged often)."""
    saved = partials.MERGE_FLOOR
    partials.MERGE_FLOOR = floor
    try:
        return run()
    finally:
        partials.MERGE_FLOOR = saved


def counted(spec, data: Encoded, cuts: list[int], grouping: int) -> ExactCounts:
    """Counted batch by batch at ``cuts``; the batches' counts added in groups of ``grouping``
    (as pieces are), then the groups added."""
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < data.rows)), data.rows]
    batches = [count_encoded(spec, sliced(data, a, b)) for a, b in zip(bounds, bounds[1:])]
    groups = [batches[i:i + grouping] for i in range(0, len(batches), grouping)]
    total = zero_counts(spec)
    for group in reversed(groups):
        part = zero_counts(spec)
        for counts in group:
            part.add(counts)
        total.add(part)
    return total


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(0, 3000), blocks=st.sampled_from([1, 6, 60]), seed=st.integers(0, 2**32 - 1),
       cuts=st.lists(st.integers(1, 2999), max_size=12), grouping=st.integers(1, 4),
       floor=st.sampled_from([1, 50, 1 << 20]))
def test_sparse_counts_equal_the_dense_bincount(spec, rows, blocks, seed, cuts, grouping, floor):
    data = random_rows(spec, rows, blocks, seed)
    got = with_merge_floor(floor, lambda: counted(spec, data, cuts, grouping))
    want = reference(spec, data)
    assert got.histograms.keys() == want.keys()
    for key, histogram in want.items():
        np.testing.assert_array_equal(got.histograms[key], histogram, err_msg=str(key))
        assert got.histograms[key].dtype == np.int64
    tract = np.bincount(data.codes["TRACT"], minlength=6)
    np.testing.assert_array_equal(got.invariants["TRACT"], tract)
    np.testing.assert_array_equal(got.invariants["COUNTY"], np.bincount(data.codes["COUNTY"], minlength=3))
    np.testing.assert_array_equal(got.invariants[ROOT], [rows])
    assert got.rows_read == rows


def test_both_ways_of_counting_are_exercised(spec):
    """The block-level histograms are sparse for a small batch and dense for a large one (so the
    property test above covers both paths and their sums)."""
    small = count_keys(np.arange(10), 10_000)
    large = count_keys(np.arange(10_000) % 7, 7 * DENSE_PER_ROW)
    assert small.keys is not None and large.keys is None


@settings(max_examples=60, deadline=None)
@given(cells=st.integers(1, 5000), sizes=st.lists(st.integers(0, 400), min_size=1, max_size=20),
       seed=st.integers(0, 2**32 - 1), weighted=st.booleans(), floor=st.sampled_from([1, 30, 1 << 20]))
def test_accumulated_partials_equal_one_bincount(cells, sizes, seed, weighted, floor):
    """Any sequence of batches (dense or sparse each), accumulated, is the bincount of all rows;
    sums exact in int64 beyond float64's 2^53."""
    rng = np.random.default_rng(seed)
    acc = Accumulator(cells, 2 if weighted else 1)
    keys_all, units_all = [], []
    for n in sizes:
        keys = rng.integers(0, min(cells, rng.integers(1, cells + 1)), n).astype(np.int32)
        units = rng.integers(-2**40, 2**40, n).astype(np.float64) * (2**12 if rng.random() < 0.3 else 1)
        with_merge_floor(floor, lambda: acc.add(count_keys(keys, cells, (units, None) if weighted else (None,),
                                                           "X", 1)))  # noqa: B023 - called at once
        keys_all.append(keys)
        units_all.append(units)
    keys, units = np.concatenate(keys_all), np.concatenate(units_all)
    counts = np.bincount(keys, minlength=cells)
    if weighted:
        sums = np.zeros(cells, dtype=np.int64)
        np.add.at(sums, keys, units.astype(np.int64))
        np.testing.assert_array_equal(acc.dense(), np.stack([sums, counts]))
    else:
        np.testing.assert_array_equal(acc.dense(), counts)


def test_pieces_combined_tree_wise_equal_the_sequential_sum(spec):
    """What a Dask worker does with two pieces' outcomes (combine_on_worker), in any tree, is the
    local sum; a failure outcome wins over counts, and two versions are both reported."""
    data = random_rows(spec, 5000, 60, 3)
    pieces = [("counts", ("v", count_encoded(spec, sliced(data, a, a + 500)))) for a in range(0, 5000, 500)]
    while len(pieces) > 1:
        pieces = [combine_on_worker(pieces[i], pieces[i + 1]) if i + 1 < len(pieces) else pieces[i]
                  for i in range(0, len(pieces), 2)]
    got = pieces[0][1][1]
    for key, histogram in reference(spec, data).items():
        np.testing.assert_array_equal(got.histograms[key], histogram, err_msg=str(key))
    counts = ("counts", ("v", zero_counts(spec)))
    assert combine_on_worker(counts, ("data error", "bad")) == ("data error", "bad")
    assert combine_on_worker(("failure", "X"), counts) == ("failure", "X")
    assert combine_on_worker(counts, ("counts", ("w", zero_counts(spec))))[1][0] == "v and w"


def test_a_histogram_is_densified_once_and_popped(spec, monkeypatch):
    """The dense array is built when a histogram is first read, kept while it is held, and handed
    over by pop (release.py measures each then drops it)."""
    counts = count_encoded(spec, random_rows(spec, 100, 60, 1))
    first = counts.histograms[("count", "BLOCK")]
    assert counts.histograms[("count", "BLOCK")] is first
    assert counts.histograms.pop(("count", "BLOCK")) is first and ("count", "BLOCK") not in counts.histograms
    assert count_module.Histograms is type(counts.histograms)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=12), seed=st.integers(0, 2**32 - 1),
       weighted=st.booleans(), floor=st.sampled_from([1, 100, 1 << 20]))
def test_census_scale_keys_are_int64_and_counted_sparsely_exactly(sizes, seed, weighted, floor):
    """Review of issue 28: a census's widest histogram (8M blocks × 2,016 cells) has keys past
    2^31: int64 keys, counted and merged sparsely (never a dense array of its 2^34 cells here),
    equal to numpy's count of the same keys, sums exact."""
    cells = 2**34
    assert partials.key_dtype(cells) == np.int64
    rng = np.random.default_rng(seed)
    acc = Accumulator(cells, 2 if weighted else 1)
    keys_all, units_all = [], []
    hot = rng.integers(2**31, cells, 50)  # some keys recur, most are far past int32
    for n in sizes:
        keys = np.where(rng.random(n) < 0.5, hot[rng.integers(0, hot.size, n)], rng.integers(0, cells, n)).astype(np.int64)
        units = rng.integers(-2**40, 2**40, n).astype(np.float64)
        with_merge_floor(floor, lambda: acc.add(count_keys(keys, cells, (units, None) if weighted else (None,),
                                                           "X", 1)))  # noqa: B023 - called at once
        keys_all.append(keys)
        units_all.append(units)
    assert acc.total is None  # never dense
    found = partials._merge(acc.runs) if acc.runs else None
    keys, units = np.concatenate(keys_all), np.concatenate(units_all)
    expected_keys, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    if found is None:
        assert keys.size == 0
        return
    assert found.keys.dtype == np.int64 and np.array_equal(found.keys, expected_keys)
    if weighted:
        sums = np.zeros(expected_keys.size, dtype=np.int64)
        np.add.at(sums, inverse, units.astype(np.int64))
        np.testing.assert_array_equal(found.values, np.stack([sums, counts]))
    else:
        np.testing.assert_array_equal(found.values[0], counts)
