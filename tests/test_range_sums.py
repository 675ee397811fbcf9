"""Sums and means of declared range columns: the declared range is the default of ``bounds`` (on
the granularity's grid; granularity 1 by default), written bounds win where narrower and are
narrowed to the range where wider (no value leaves the range, so that changes no value and only
removes noise); the column is read and checked as declared (out-of-range values refused or
dropped, its missing category as missing values) and summed as a number."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dprelease.data import encode, histogram
from dprelease.errors import DataError
from dprelease.plan import plan_release
from dprelease.spec import MeanMeasure, SumMeasure, load_spec
from tests.conftest import ROOT, assert_edit_refused
from tests.test_run import run

DATA = ROOT / "data" / "nist_acs" / "national2019.csv"
AGES = """\
release: acs-ages-2019
dataset:
  name: nist-acs-ages
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{epsilon: 4}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  AGEP: {{range: [0, 99]}}
  NOC: {{range: [0, 20], missing: "no own children in household"}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
tables:
  - name: total_age_by_sex
    group_by: [SEX]
    measure: {{sum: AGEP}}
    epsilon: 0.25
  - name: mean_age_by_sex
    group_by: [SEX]
    measure: {{mean: AGEP}}
    epsilon: 0.25
  - name: mean_age_by_sex_clamped
    group_by: [SEX]
    measure: {{mean: AGEP, bounds: [0, 90], granularity: 10}}
    epsilon: 0.25
  - name: children_by_age_group
    group_by: [AGE_GROUP]
    measure: {{sum: NOC, bounds: [0, 100], missing: zero}}
    epsilon: 0.25
"""


def ages(tmp_path, data=DATA):
    path = tmp_path / "ages.yaml"
    path.write_text(AGES.format(data=data))
    return path


# ---------------------------------------------------------------- planning


def test_the_declared_range_is_the_default_and_written_bounds_are_kept_within_it(tmp_path):
    spec = load_spec(ages(tmp_path))
    total, mean, clamped, children = (t.measure for t in spec.tables)
    assert total == SumMeasure("AGEP", 0, 99, 1, False)  # the range; granularity 1
    assert mean == MeanMeasure("AGEP", 0, 99, 1, "error") and mean.centre == 49
    assert clamped == MeanMeasure("AGEP", 0, 90, 10, "error")  # narrower bounds win (ages above 90 count as 90)
    assert children == SumMeasure("NOC", 0, 20, 1, True)  # [0, 100] narrowed to the declared [0, 20]
    plan = plan_release(spec, None)
    assert [t.shown_noise.sensitivity for t in plan.tables] == [99, 50, 50, 20]  # a mean: its sum part's
    assert [p.noise.sensitivity for p in plan.tables[1].parts] == [50, 1]  # max(|0 − 49|, |99 − 49|)
    assert [p.noise.sensitivity for p in plan.tables[2].parts] == [50, 1]  # max(|0 − 40|, |90 − 40|)
    assert plan.tables[0].scale == Fraction(99 * 4)  # Δ/ε, in units of the granularity 1


@pytest.mark.parametrize("measure,bounds", [
    ("{sum: AGEP, granularity: 10}", (0, 100)),  # the range [0, 99] on the grid of 10
    ("{sum: AGEP, bounds: [10, 500]}", (10, 99)),  # the written lower bound, the range's upper
    ("{sum: AGEP, bounds: [-50, 60]}", (0, 60)),
    ("{sum: AGEP, bounds: [-100, 200], granularity: 20}", (0, 100)),
    ("{mean: AGEP, bounds: [20, 40], granularity: 5}", (20, 40)),  # within the range: as written
])
def test_bounds_on_the_grid(tmp_path, measure, bounds):
    path = ages(tmp_path)
    path.write_text(path.read_text().replace("{sum: AGEP}", measure))
    chosen = load_spec(path).tables[0].measure
    assert (chosen.low, chosen.high) == bounds


def test_a_negative_range_on_the_grid(tmp_path):
    path = ages(tmp_path)
    path.write_text(path.read_text().replace("AGEP: {range: [0, 99]}", "AGEP: {range: [0, 99]}\n  DELTA: {range: [-7, 12]}")
                    .replace("{sum: AGEP}", "{sum: DELTA, granularity: 5}"))
    measure = load_spec(path).tables[0].measure
    assert (measure.low, measure.high, measure.granularity) == (-10, 15, 5)
    assert plan_release(load_spec(path), None).tables[0].sensitivity == 15  # max(|−10|, |15|)


# ---------------------------------------------------------------- counting, before noise


def test_exact_sums_and_means_of_the_declared_columns(tmp_path):
    """The exact histograms (no noise) equal pandas on the raw file: AGEP summed and centred per
    sex, clamped and rounded on the grid of 10, NOC's missing category counted as 0."""
    spec = load_spec(ages(tmp_path))
    data = encode(spec)
    raw = pd.read_csv(DATA, na_values=["N"], usecols=["SEX", "AGEP", "NOC"])
    by_sex = raw.groupby("SEX")
    total, mean, clamped, children = (histogram(spec, t, data) for t in spec.tables)
    assert total.tolist() == by_sex["AGEP"].sum().tolist()
    assert mean.tolist() == [(by_sex["AGEP"].sum() - 49 * by_sex.size()).tolist(), by_sex.size().tolist()]
    units = np.rint(raw["AGEP"].clip(0, 90) / 10) - 4
    assert clamped.tolist() == [units.groupby(raw["SEX"]).sum().astype(int).tolist(), by_sex.size().tolist()]
    group = pd.cut(raw["AGEP"], [0, 18, 65, 100], right=False)
    assert children.tolist() == raw["NOC"].fillna(0).clip(0, 20).groupby(group, observed=False).sum() \
        .astype(int).tolist()
    assert raw["NOC"].isna().sum() > 0 and raw["NOC"].max() <= 20  # missing values exist; none above the range


def test_narrowing_the_bounds_to_the_range_changes_no_value(tmp_path):
    """The written [0, 100] of NOC, narrowed to its range [0, 20]: the same exact sums (values never
    leave the range), with a fifth of the sensitivity."""
    spec = load_spec(ages(tmp_path))
    table = spec.tables[3]
    wide = dataclasses.replace(table, measure=dataclasses.replace(table.measure, high=100))
    data = encode(spec)
    assert histogram(spec, table, data).tolist() == histogram(spec, wide, data).tolist()


SMALL = """\
release: small
dataset: {{name: small, path: {data}, lifetime_budget: {{epsilon: 4}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  G: {{domain: [a, b]}}
  HOURS: {{range: [0, 80]{extra}}}
tables:
  - {{name: hours_by_g, group_by: [G], measure: {{sum: HOURS{missing}}}, epsilon: 0.5}}
  - {{name: persons_by_g, group_by: [G], epsilon: 0.5}}
"""


def small(tmp_path, rows, extra="", missing="", name="data.csv"):
    data = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.table(rows), data)
    else:
        data.write_text(rows)
    path = tmp_path / "small.yaml"
    path.write_text(SMALL.format(data=data, extra=extra, missing=missing))
    spec = load_spec(path)
    return spec, lambda: [histogram(spec, t, encode(spec)).tolist() for t in spec.tables]


def test_values_outside_the_range_are_refused_or_dropped_as_declared(tmp_path):
    _, counted = small(tmp_path, "G,HOURS\na,10\nb,20\na,95\nb,40.0\n")
    with pytest.raises(DataError, match=r"column HOURS: 1 value\(s\) outside the declared range \[0, 80\]"):
        counted()
    _, counted = small(tmp_path, "G,HOURS\na,10\nb,20\na,95\nb,40.0\na,lots\n", extra=", on_out_of_domain: drop")
    assert counted() == [[10, 60], [1, 2]]  # 95 and "lots" dropped from every table; 40.0 read as 40


def test_a_range_column_in_parquet_is_summed_as_a_number(tmp_path):
    _, counted = small(tmp_path, {"G": ["a", "b", "a"], "HOURS": pa.array([10, 20, 35], pa.int64())},
                       name="data.parquet")
    assert counted() == [[45, 20], [2, 1]]


def test_missing_values_are_its_missing_category(tmp_path):
    rows = "G,HOURS\na,10\nb,\na,30\n"
    with pytest.raises(DataError, match="declares no missing: category"):
        small(tmp_path, rows)[1]()
    with pytest.raises(DataError, match=r"column HOURS has 1 missing value\(s\); add missing: zero"):
        small(tmp_path, rows, extra=", missing: none given")[1]()
    assert small(tmp_path, rows, extra=", missing: none given", missing=", missing: zero")[1]() == [[40, 0], [2, 1]]


# ---------------------------------------------------------------- what is refused


@pytest.mark.parametrize("old,new,field,words", [
    ("{sum: AGEP}", "{sum: AGEP, bounds: [100, 200]}", "tables[0].measure.bounds",
     "leave no room within AGEP's declared range [0, 99]"),
    ("{sum: AGEP}", "{sum: AGEP, bounds: [0, 95], granularity: 10}", "tables[0].measure.bounds",
     "multiples of the granularity 10"),
    ("{sum: AGEP}", "{sum: AGEP, bounds: [0.0, 99]}", "tables[0].measure.bounds", "whole numbers"),
    ("{sum: AGEP}", "{sum: SEX}", "tables[0].measure.sum", "declared under columns: with categories"),
    ("{sum: AGEP}", "{sum: AGE_GROUP}", "tables[0].measure.sum", "declared under derived: with categories"),
    ("{sum: AGEP}", "{sum: PINCP}", "tables[0].measure", "a column not declared under columns:, needs bounds:"),
    ("{sum: AGEP}", "{sum: PINCP, bounds: [0, 1000]}", "tables[0].measure", "needs granularity:"),
    ("{mean: AGEP}", "{mean: PINCP, granularity: 100}", "tables[1].measure", "needs bounds:"),
    ("NOC: {range: [0, 20]", "NOC: {range: [3, 3]", "tables[3].measure.sum", "holds at most a single value"),
    ("{sum: AGEP}", "{sum: AGEP, granularity: 1000}", "tables[0].measure.sum",  # only 0 in [0, 99] on that grid
     "holds at most a single value on the grid of granularity 1000"),
])
def test_bad_sums_of_range_columns_are_refused(tmp_path, cli, old, new, field, words):
    assert_edit_refused(cli, ages(tmp_path), old, new, field, words)


# ---------------------------------------------------------------- end to end


def test_a_release_summing_declared_range_columns(tmp_path, release_env, cli):
    path = ages(tmp_path)
    planned = cli("plan", path, "--ledger", tmp_path / "ledger.sqlite")
    assert planned.code == 0 and "total_age_by_sex" in planned.stdout, planned
    proc = run(path, "--output-dir", tmp_path / "out", "--ledger", tmp_path / "ledger.sqlite", env=release_env)
    assert proc.returncode == 0, proc.stderr
    directory = tmp_path / "out" / "acs-ages-2019"
    manifest = {t["name"]: t for t in json.loads((directory / "manifest.json").read_text())["tables"]}
    assert manifest["total_age_by_sex"]["measure"] == {"sum": "AGEP", "bounds": [0, 99], "granularity": 1,
                                                       "missing": "error"}
    assert manifest["children_by_age_group"]["measure"]["bounds"] == [0, 20]
    assert manifest["mean_age_by_sex"]["measure"]["centre"] == 49

    from dprelease.publish.reading import read_release

    release = read_release(directory)
    raw = pd.read_csv(DATA, usecols=["SEX", "AGEP"])
    exact = raw.groupby("SEX")["AGEP"].sum().tolist()
    total = release.table("total_age_by_sex")
    # noise of scale 396: |noise| > 40 scales has probability e^−40 per cell
    assert all(abs(p - e) < 40 * 396 for p, e in zip(total["sum"], exact)), (total, exact)
    means = release.table("mean_age_by_sex")
    assert all(30 < m < 50 for m in means["mean"]) and list(means["SEX"].cat.categories) == ["Male", "Female"]
    assert release.facts("total_age_by_sex").sensitivity == 99
