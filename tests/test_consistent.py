"""Consistent (census-style) post-processing: non-negative integers that add up across levels
and agree across the tables of a group."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pyarrow.parquet as pq
import pytest

from dprelease.accounting import PureDP
from dprelease.evaluate.accuracy import plan_variances
from dprelease.data import encode
from dprelease.evaluate.accuracy import exact_measurements
from dprelease.mechanisms import discrete_laplace
from dprelease.postprocess import postprocess_release
from dprelease.postprocess.integral import round_two_way
from dprelease.postprocess.nonnegative import SUM_TOLERANCE, project_segments
from dprelease.postprocess.transport import fit_blocks
from dprelease.spec import load_spec
from tests.conftest import ROOT, shipped
from tests.test_run import run
from tests.ledgers import init_at

CENSUS = ROOT / "configs" / "acs_census.yaml"


@pytest.fixture(scope="module")
def census():
    spec = load_spec(CENSUS)
    exact, scales = exact_measurements(spec, encode(spec))
    return spec, exact, scales


def noisy_release(exact, scales):
    return {k: v + discrete_laplace(scales[k], v.size) for k, v in exact.items()}


def check_consistency(spec, published):
    """Children sum to parents, tables agree on shared marginals, all non-negative integers."""
    puma_to_state = np.asarray(spec.column("STATE").parent_of)
    totals = {}
    for t in spec.tables:
        m = spec.dims_cells(t.group_by)
        root = published[(t.name, "root")].reshape(1, m)
        state = published[(t.name, "STATE")].reshape(-1, m)
        puma = published[(t.name, "PUMA")].reshape(-1, m)
        for values in (root, state, puma):
            assert values.dtype == np.int64 and values.min() >= 0
        summed = np.zeros_like(state)
        np.add.at(summed, puma_to_state, puma)
        assert np.array_equal(summed, state), t.name
        assert np.array_equal(state.sum(axis=0), root[0]), t.name
        totals[t.name] = (root.sum(), state.sum(axis=1), puma.sum(axis=1))
    first, second = totals.values()
    assert first[0] == second[0]
    assert np.array_equal(first[1], second[1]) and np.array_equal(first[2], second[2])


def test_consistent_output_adds_up_and_agrees(census):
    spec, exact, scales = census
    for _ in range(3):
        published = postprocess_release(spec, noisy_release(exact, scales), plan_variances(spec))
        check_consistency(spec, published)


def test_consistent_is_no_worse_than_clamp_on_cells_and_better_on_totals(census):
    """Mean absolute errors over 20 simulated releases of the real data, at every level of
    both tables: cells no worse than clamping (strictly better, in fact), totals better.
    The 6-cell sex-by-age table at PUMA level is the tight one (about 3.1 against 3.3)."""
    spec, exact, scales = census
    errors = defaultdict(list)
    for _ in range(20):
        noisy = noisy_release(exact, scales)
        for method in ("clamp", "consistent"):
            out = postprocess_release(spec, noisy, plan_variances(spec), method=method)
            for t in spec.tables:
                m = spec.dims_cells(t.group_by)
                for level in ("root", "STATE", "PUMA"):
                    got = out[(t.name, level)].reshape(-1, m)
                    true = exact[(t.name, level)].reshape(-1, m)
                    errors[(method, t.name, level, "total")].append(np.abs(got.sum(1) - true.sum(1)).mean())
                    errors[(method, t.name, level, "cell")].append(np.abs(got - true).mean())
    mean = {k: float(np.mean(v)) for k, v in errors.items()}
    for t in spec.tables:
        for level in ("root", "STATE", "PUMA"):
            for what in ("total", "cell"):
                assert mean[("consistent", t.name, level, what)] < mean[("clamp", t.name, level, what)], \
                    (t.name, level, what, mean[("consistent", t.name, level, what)], mean[("clamp", t.name, level, what)])


def _project_columns(values: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Each column of ``values`` projected onto {x ≥ 0, Σ x = its total} (:func:`project_segments`)."""
    columns = np.tile(np.arange(values.shape[1]), values.shape[0])
    return project_segments(values.ravel(), columns, totals).reshape(values.shape)


def _with_whole_sums(values: np.ndarray, rows: np.ndarray, cols: np.ndarray):  # type: ignore[no-untyped-def]
    """``values`` moved (least squares, non-negative) to whole row and column sums with the same
    total, as the fit before a rounding leaves them: (values, row sums, column sums)."""
    a, b = np.round(values.sum(axis=1)), np.round(values.sum(axis=0))
    b[np.argmax(b)] += a.sum() - b.sum()
    fitted = fit_blocks(values[None], a[None], b[None]).x[0]  # one block: every cell
    assert np.allclose(fitted.sum(axis=1), a, rtol=0, atol=SUM_TOLERANCE) and np.allclose(fitted.sum(axis=0), b)
    return fitted, a, b


def test_simplex_projection_and_controlled_rounding():
    rng = np.random.default_rng(7)  # test data, not noise
    values = rng.normal(3, 5, size=(6, 40))
    totals = rng.integers(0, 30, size=40).astype(float)
    projected = _project_columns(values, totals)
    assert projected.min() >= 0
    assert np.allclose(projected.sum(axis=0), totals)
    # a point already in the set is left where it is
    inside = np.abs(values)
    assert np.allclose(_project_columns(inside, inside.sum(axis=0)), inside)


def test_controlled_rounding_keeps_parent_cells_and_children_marginals():
    """Children × cells (a table's cells inside one separator cell): every parent cell exact,
    every cell within 1 of its value, and each child's sum (its separator cell, fixed earlier)
    exact too, where independent rounding per column moves it."""
    rng = np.random.default_rng(11)  # test data, not noise
    rows, cols = np.repeat(np.arange(12), 40), np.tile(np.arange(40), 12)
    values, children, totals = _with_whole_sums(rng.gamma(0.7, 2.0, size=(12, 40)), rows, cols)  # many small cells
    rounded = round_two_way(values.ravel(), rows, children, cols, totals).reshape(12, 40)
    assert rounded.dtype == np.int64 and rounded.min() >= 0
    assert np.array_equal(rounded.sum(axis=0), totals.astype(np.int64))
    assert np.array_equal(rounded.sum(axis=1), children.astype(np.int64))
    assert np.abs(rounded - values).max() < 1
    # the usual controlled rounding per column: floors, then the largest fractional parts
    naive = np.floor(values).astype(np.int64)
    for j in range(values.shape[1]):
        units = int(totals[j] - naive[:, j].sum())
        naive[np.argsort(-(values[:, j] - naive[:, j]))[:units], j] += 1
    assert np.array_equal(naive.sum(axis=0), totals.astype(np.int64))
    assert np.abs(naive.sum(axis=1) - children).max() >= 1  # which moves the children's sums


def test_rounding_one_place_keeps_its_total_and_marginals():
    """One place's 30 × 40 cells with whole sums along both dimensions: both kept exactly."""
    rng = np.random.default_rng(12)  # test data, not noise
    rows, cols = np.repeat(np.arange(30), 40), np.tile(np.arange(40), 30)
    values, a, b = _with_whole_sums(rng.gamma(0.5, 1.5, size=(30, 40)), rows, cols)
    rounded = round_two_way(values.ravel(), rows, a, cols, b).reshape(30, 40)
    assert rounded.sum() == int(a.sum()) and rounded.min() >= 0
    assert np.abs(rounded - values).max() < 1
    assert np.array_equal(rounded.sum(axis=1), a.astype(np.int64)) and np.array_equal(rounded.sum(axis=0), b.astype(np.int64))


def test_census_release_end_to_end_publishes_consistent_tables(tmp_path, release_env):
    out = tmp_path / "out"
    proc = run(shipped(tmp_path, "acs_census.yaml"), "--output-dir", out, env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = out / "acs-census-2019"
    spec = load_spec(CENSUS)
    published = {}
    for t in spec.tables:
        for level, dims, _ in t.measured():
            rows = list(csv.DictReader((release / "tables" / t.name / f"{level}.csv").open()))
            assert list(rows[0]) == [*dims, "count"]
            assert len(rows) == spec.dims_cells(dims)
            published[(t.name, level)] = np.array([int(r["count"]) for r in rows], dtype=np.int64)
    check_consistency(spec, published)
    manifest = json.loads((release / "manifest.json").read_text())
    assert sum(Fraction(t["budget"]["epsilon"]) for t in manifest["tables"]) == 1
    assert {(t["name"], t["level"]) for t in manifest["tables"]} == set(published)


def test_three_levels_from_a_mapping_file(tmp_path):
    import shutil

    from tests.conftest import SPECS

    shutil.copy(SPECS / "good" / "tract_to_county.csv", tmp_path)
    shutil.copy(SPECS / "good" / "geography.yaml", tmp_path / "spec.yaml")
    rng = np.random.default_rng(3)  # test data, not noise
    tracts = rng.choice(["01001", "01002", "01101", "02001"], 3000, p=[0.5, 0.1, 0.3, 0.1])
    rows = "\n".join(f"{t},{s},{a}" for t, s, a in zip(tracts, rng.integers(1, 3, 3000), rng.integers(0, 100, 3000)))
    (tmp_path / "data.csv").write_text("TRACT,SEX,AGEP\n" + rows + "\n")
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.column("COUNTY").values == ("01001", "01101", "02001")
    assert spec.column("STATE").values == ("01", "02")
    exact, scales = exact_measurements(spec, encode(spec))
    assert exact[("by_sex", "COUNTY")].reshape(3, 2).sum(1).tolist() == [
        int(np.isin(tracts, ["01001", "01002"]).sum()), int((tracts == "01101").sum()), int((tracts == "02001").sum())]
    published = postprocess_release(spec, noisy_release(exact, scales), plan_variances(spec))
    chain = [("root", None), ("STATE", None), ("COUNTY", "STATE"), ("TRACT", "COUNTY")]
    for t in spec.tables:
        m = spec.dims_cells(t.group_by)
        for (level, up), (parent_level, _) in zip(chain[1:], chain[:-1]):
            child = published[(t.name, level)].reshape(-1, m)
            parent = published[(t.name, parent_level)].reshape(-1, m)
            assert child.min() >= 0
            if parent_level == "root":
                assert np.array_equal(child.sum(0), parent[0])
            else:
                up_of = np.asarray(spec.column(parent_level).parent_of)
                summed = np.zeros_like(parent)
                np.add.at(summed, up_of, child)
                assert np.array_equal(summed, parent), (t.name, level)
    for level, _ in chain:
        a = published[("by_sex", level)].reshape(-1, 2).sum(1)
        b = published[("by_age", level)].reshape(-1, 2).sum(1)
        assert np.array_equal(a, b), level


def test_postprocess_command_reruns_from_the_measurements_only(tmp_path, release_env, cli):
    out = tmp_path / "out"
    assert run(shipped(tmp_path, "acs_census.yaml"), "--output-dir", out, env=release_env).returncode == 0
    release = out / "acs-census-2019"
    before = sorted((p.relative_to(release), p.read_bytes()) for p in release.rglob("*") if p.is_file())
    ledger_file = tmp_path / "xdg"  # the isolated default ledger of this test process
    again = cli("postprocess", release)
    assert again.code == 0, again
    same = release / "postprocessed" / "1-as-specified" / "tables"
    for table in ("persons_by_sex_age_group", "persons_by_race_hispanic"):
        for level in ("root", "STATE", "PUMA"):  # deterministic: the same tables again
            assert (same / table / f"{level}.csv").read_bytes() == (release / "tables" / table / f"{level}.csv").read_bytes()
    clamped = cli("postprocess", release, "--method", "clamp")
    assert clamped.code == 0 and "2-clamp" in clamped.stdout
    raw = pq.read_table(release / "measurements" / "persons_by_race_hispanic" / "PUMA.parquet")
    rows = list(csv.DictReader((release / "postprocessed" / "2-clamp" / "tables" / "persons_by_race_hispanic"
                                / "PUMA.csv").open()))
    assert [int(r["count"]) for r in rows] == [max(0, v) for v in raw.column("noisy_count").to_pylist()]
    after = sorted((p.relative_to(release), p.read_bytes()) for p in release.rglob("*")
                   if p.is_file() and "postprocessed" not in p.parts)
    assert after == before  # the published release is untouched
    assert not ledger_file.exists()
    note = json.loads((release / "postprocessed" / "2-clamp" / "postprocess.json").read_text())
    assert note["budget_spent"] == "0"
    # tampering is noticed
    spec = json.loads((release / "spec.json").read_text())
    spec["tables"][0]["epsilon"] = "1"
    (release / "spec.json").write_text(json.dumps(spec))
    tampered = cli("postprocess", release)
    assert tampered.code == 2 and "altered" in tampered.stderr


def test_evaluate_reports_both_methods_and_refuses_protected_datasets(cli, tmp_path):
    from fractions import Fraction as F

    from dprelease.ledger import resolve_location

    report = tmp_path / "eval.md"
    result = cli("evaluate", shipped(tmp_path, "acs_census.yaml"), "--trials", "2", "--output", report)
    assert result.code == 0, result
    assert "NOT PRIVATE" in result.stdout and "NOT PRIVATE" in report.read_text()
    assert result.stdout.count("| persons_by") == 6
    assert not (tmp_path / "xdg").exists()
    ledger = init_at(resolve_location())
    ledger.reserve(dataset="nist-acs-national-2019", release="real", charges=[("t", PureDP(F(1, 2)))],
                   spec_fingerprint="sha256:x", lifetime_from_spec=PureDP(F(4)))
    ledger.close()
    refused = cli("evaluate", shipped(tmp_path, "acs_census.yaml"), "--trials", "2")
    assert refused.code == 2 and "not evaluated in the open" in refused.stderr


def zcdp_geography_spec(directory, rho: str):  # type: ignore[no-untyped-def]
    """A zCDP release of persons by sex at root, STATE and PUMA (discrete Gaussian, consistent),
    each level's ρ as ``rho`` says (a YAML mapping)."""
    path = directory / "zcdp.yaml"
    path.write_text(f"""release: zcdp-geo
dataset:
  name: zcdp-geo
  path: {ROOT / "data" / "nist_acs" / "national2019.csv"}
  na_values: ["N"]
privacy: {{definition: zcdp, unit: row, delta: 1e-6}}
budget: {{rho: 1}}
columns:
  PUMA: {{domain_file: {ROOT / "configs" / "domains" / "puma.txt"}, geographic: true}}
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
geography:
  levels: [STATE, PUMA]
  STATE: {{from: PUMA, prefix: 2}}
tables:
  - name: persons_by_sex
    group_by: [geography, SEX]
    rho: {rho}
""")
    return path


def test_a_method_override_keeps_the_consistency_of_the_tables_it_does_not_override(tmp_path):
    """`postprocess --method none|clamp` overrides the discrete Laplace count tables only; a
    zCDP (discrete Gaussian) geographic table keeps its own consistent post-processing, and every
    level of it is still published (it was missing: a KeyError)."""
    from dprelease.postprocess import postprocess_release
    from dprelease.spec import load_spec

    spec_path = zcdp_geography_spec(tmp_path, "{root: 0.1, STATE: 0.1, PUMA: 0.2}")
    spec = load_spec(spec_path)
    table = spec.tables[0]
    assert table.post_process == "consistent"
    rng = np.random.default_rng(7)  # stand-in noisy values (not noise for release: no sampler involved)
    noisy = {(table.name, level): rng.integers(0, 500, size=int(np.prod([spec.column(d).size for d in dims])))
             for level, dims, _ in table.measured()}
    variances = {key: 25.0 for key in noisy}
    for method in ("none", "clamp"):
        published = postprocess_release(spec, noisy, variances, method)
        assert set(published) == set(noisy), method
        root, state = published[(table.name, "root")], published[(table.name, "STATE")]
        assert root.sum() == state.sum()  # still consistent across levels
