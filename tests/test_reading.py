"""dprelease.read_release: a published release as pandas DataFrames and typed facts.

Three real releases are published once for the module (a pure one like the demo, with one table
leaving its structural zeros out; a zCDP one with a mean, a sum, a mode, a quantile and a count;
the census one with geography, consistency and invariants), then read back: values equal the
published files, categories are the declared ones in declared order (also those no row holds),
facts equal the plan of the same spec, and what is not a release is refused clearly."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dprelease
from dprelease.accounting import ZCDP, ApproxDP, PureDP, budget_from_record
from dprelease.errors import UserError
from dprelease.plan import plan_release
from dprelease.publish.reading import MANIFEST_FORMATS, NotARelease, read_release
from dprelease.spec import load_spec
from tests.conftest import ROOT, unpinned
from tests.ledgers import make_ledger
from tests.test_run import run

DEMO = unpinned((ROOT / "configs" / "acs_demo.yaml").read_text())
OMIT = "    where: {AGEP: {ge: 18}}\n    epsilon: \"0.25\"\n"
assert OMIT in DEMO

MEASURES = """\
release: acs-measures-2019
dataset:
  name: nist-acs-measures
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{rho: 4}}
privacy: {{definition: zcdp, unit: row, delta: 1e-6}}
budget: {{rho: 2}}
columns:
  SEX: {{domain: [2, 1], labels: [Female, Male]}}
  AGEP: {{range: [0, 99]}}
  RAC1P:
    domain: [1, 2, 3, 4, 5, 6, 7, 8, 9]
    labels: [White, Black, American Indian, Alaska Native, AIAN tribe or not specified, Asian,
             NHPI, Some other race, Two or more races]
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
tables:
  - name: mean_income_by_sex_age
    group_by: [SEX, AGE_GROUP]
    measure: {{mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip}}
    rho: 0.5
  - name: income_by_sex
    group_by: [SEX]
    measure: {{sum: PINCP, bounds: [0, 200000], granularity: 100, missing: zero}}
    rho: 0.5
  - name: modal_race_by_sex
    group_by: [SEX]
    measure: {{mode: RAC1P}}
    rho: 0.25
  - name: median_age_by_sex
    group_by: [SEX]
    measure: {{quantile: AGEP, q: 0.5}}
    rho: 0.25
  - name: persons_by_race
    group_by: [RAC1P]
    rho: 0.5
"""


def _absolute(text: str) -> str:
    """A shipped spec's text with its data and domain files named absolutely (written elsewhere)."""
    return (text.replace("ledger: ../ledgers/nist-acs.sqlite\n", "")
            .replace("../data/", f"{ROOT}/data/").replace("domains/puma.txt", f"{ROOT}/configs/domains/puma.txt"))


def _publish(tmp, env, spec_path, release):
    out = tmp / "out"
    proc = run(spec_path, "--output-dir", out, "--ledger", tmp / "ledger.sqlite", env=env)
    assert proc.returncode == 0, proc.stderr
    return spec_path, out / release


@pytest.fixture(scope="module")
def demo(tmp_path_factory, release_env_module):
    """The demo, with adults_by_puma_age_group leaving out its structural cells (AGE_GROUP 0-17)."""
    tmp = tmp_path_factory.mktemp("demo")
    spec = tmp / "demo.yaml"
    spec.write_text(_absolute(DEMO).replace(OMIT, OMIT + "    structural_zeros: omit\n"))
    return _publish(tmp, release_env_module, spec, "acs-demo-2019")


@pytest.fixture(scope="module")
def measures(tmp_path_factory, release_env_module):
    tmp = tmp_path_factory.mktemp("measures")
    spec = tmp / "measures.yaml"
    spec.write_text(MEASURES.format(data=ROOT / "data" / "nist_acs" / "national2019.csv"))
    return _publish(tmp, release_env_module, spec, "acs-measures-2019")


@pytest.fixture(scope="module")
def census(tmp_path_factory, release_env_module):
    tmp = tmp_path_factory.mktemp("census")
    spec = tmp / "census.yaml"
    spec.write_text(_absolute(unpinned((ROOT / "configs" / "acs_census_invariants.yaml").read_text())))
    make_ledger(tmp / "ledger.sqlite")  # an approval is recorded in an existing ledger only
    approve = subprocess.run([sys.executable, "-m", "dprelease", "plan", spec, "--approve", "--by", "reviewer",
                              "--ledger", tmp / "ledger.sqlite"], capture_output=True, text=True, cwd=ROOT)
    assert approve.returncode == 0, approve.stderr  # exact publications need an approved plan
    return _publish(tmp, release_env_module, spec, "acs-census-2019-invariants")


def published_rows(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def as_published(value) -> str:
    """A DataFrame cell as the CSV writes it: true/false, whole numbers without .0, NaN empty."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value)


def assert_frame_is_the_csv(frame: pd.DataFrame, path) -> None:
    rows = published_rows(path)
    assert list(frame.columns) == list(rows[0])
    assert len(frame) == len(rows)
    for column in frame.columns:
        assert [as_published(v) for v in frame[column].tolist()] == [r[column] for r in rows], column


# ---------------------------------------------------------------- the demo (pure)


def test_frames_hold_the_published_values(demo):
    _, directory = demo
    release = read_release(directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert release.table_names == tuple(t["name"] for t in manifest["tables"])
    for name in release.table_names:
        assert_frame_is_the_csv(release.table(name), directory / "tables" / f"{name}.csv")
        assert_frame_is_the_csv(release[name], directory / "tables" / f"{name}.csv")
    frame = release.table("puma_by_sex")
    assert frame["count"].dtype == np.int64 and frame["count"].sum() > 20_000


def test_categories_are_declared_in_declared_order(demo):
    spec_path, directory = demo
    release = read_release(directory)
    puma = [line.strip() for line in (ROOT / "configs" / "domains" / "puma.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert len(puma) == 20 and list(load_spec(spec_path).column("PUMA").categories) == puma
    by_sex = release.table("puma_by_sex")
    assert by_sex["PUMA"].dtype == pd.CategoricalDtype(puma, ordered=True)
    assert by_sex["SEX"].dtype == pd.CategoricalDtype(["Male", "Female"], ordered=True)
    marital = release.table("marital_status_by_sex")["MSP"]
    declared = ["Married spouse present", "Married spouse absent", "Widowed", "Divorced", "Separated",
                "Never married", "Not applicable (under 15)"]  # the missing category last
    assert list(marital.cat.categories) == declared and marital.cat.ordered
    assert declared != sorted(declared)  # the declared order, not one read off the values
    # structural_zeros: omit leaves no row with AGE_GROUP 0-17, and the category is still there, first
    adults = release.table("adults_by_puma_age_group")
    assert "0-17" not in set(adults["AGE_GROUP"]) and "structural" not in adults.columns
    assert list(adults["AGE_GROUP"].cat.categories) == ["0-17", "18-64", "65+"]
    assert len(adults) == 20 * 2 and release.facts("adults_by_puma_age_group").structural_cells == 20
    counts = adults.groupby("AGE_GROUP", observed=False)["count"].sum()
    assert list(counts.index) == ["0-17", "18-64", "65+"] and counts["0-17"] == 0


def test_facts_are_the_plans(demo):
    """Every fact read back equals the plan of the same spec (an independent source), exactly."""
    spec_path, directory = demo
    release = read_release(directory)
    plan = plan_release(load_spec(spec_path), None)
    assert (release.release, release.dataset, release.definition) == ("acs-demo-2019", "nist-acs-national-2019",
                                                                       "pure")
    assert release.total == plan.total == PureDP(Fraction(1)) and release.release_budget == PureDP(Fraction(1))
    assert release.ledger_charge == plan.charge
    assert (release.lifetime_cap, release.lifetime_spent_before, release.lifetime_spent_after) == \
        (PureDP(Fraction(4)), PureDP(Fraction(0)), PureDP(Fraction(1)))
    assert release.confidence == plan.confidence and release.implied_approximate_dp is None
    for facts, planned in zip(release.measurements, plan.tables, strict=True):
        assert (facts.name, facts.level, facts.mechanism) == (planned.name, planned.level, planned.mechanism)
        assert facts.budget == planned.budget and type(facts.budget) is PureDP
        assert facts.scale == planned.shown_scale and facts.margin_of_error == planned.moe
        assert facts.cells == planned.cells and facts.structural_cells == len(planned.structural)
    assert release.facts("race_by_hispanic_origin").budget == PureDP(Fraction(1, 5))
    summary = release.summary()
    assert list(summary["table"]) == list(release.table_names) and summary["budget"].tolist()[0] == PureDP(Fraction(1, 4))


def test_raw_noisy_measurements_are_the_parquet(demo):
    _, directory = demo
    release = read_release(directory)
    noisy = release.noisy("marital_status_by_sex")
    raw = pq.read_table(directory / "measurements" / "marital_status_by_sex.parquet")
    assert list(noisy.columns) == raw.column_names == ["MSP", "SEX", "noisy_count", "structural"]
    assert noisy["noisy_count"].tolist() == raw.column("noisy_count").to_pylist()
    assert noisy["MSP"].astype(str).tolist() == [str(v) for v in raw.column("MSP").to_pylist()]
    assert noisy["MSP"].dtype == release.table("marital_status_by_sex")["MSP"].dtype
    # clamping is the only post-processing: a published count is the noisy one, or 0 if that was negative
    published = release.table("marital_status_by_sex")
    assert (published["count"] == noisy["noisy_count"].clip(lower=0)).all()


def test_postprocessed_versions_are_read_too(demo, tmp_path, cli):
    _, published = demo
    directory = tmp_path / published.name
    shutil.copytree(published, directory)
    assert read_release(directory).postprocessed == ()
    assert cli("postprocess", directory, "--method", "none").code == 0
    release = read_release(directory)
    assert release.postprocessed == ("1-none",)
    version = directory / "postprocessed" / "1-none" / "tables" / "race_by_hispanic_origin.csv"
    frame = release.table("race_by_hispanic_origin", version="1-none")
    assert_frame_is_the_csv(frame, version)
    assert (frame["count"] == release.noisy("race_by_hispanic_origin")["noisy_count"]).all()  # none: unclamped
    with pytest.raises(KeyError, match="1-none"):
        release.table("race_by_hispanic_origin", version="2-clamp")


# ---------------------------------------------------------------- measures (zCDP)


def test_means_sums_modes_and_quantiles(measures):
    spec_path, directory = measures
    release = read_release(directory)
    for name in release.table_names:
        assert_frame_is_the_csv(release.table(name), directory / "tables" / f"{name}.csv")
    mean = release.table("mean_income_by_sex_age")
    assert list(mean.columns) == ["SEX", "AGE_GROUP", "mean", "count"]
    assert (mean["mean"].dtype, mean["count"].dtype) == (np.float64, np.int64)
    assert list(mean["SEX"].cat.categories) == ["Female", "Male"]  # as declared (domain [2, 1])
    mode = release.table("modal_race_by_sex")["mode"]
    assert mode.dtype == release.table("persons_by_race")["RAC1P"].dtype  # RAC1P's categories, in order
    quantile = release.table("median_age_by_sex")["quantile"]  # AGEP is a range column: its values are numbers
    assert quantile.dtype == "Int64" and quantile.notna().all()
    assert all(20 <= q <= 60 for q in quantile)
    assert release.table("income_by_sex")["sum"].dtype == np.int64


def test_measure_facts_are_typed_in_rho(measures):
    spec_path, directory = measures
    release = read_release(directory)
    plan = plan_release(load_spec(spec_path), None)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert release.definition == "zcdp" and release.total == ZCDP(Fraction(2)) == plan.total
    assert release.implied_approximate_dp == ApproxDP(Fraction(manifest["implied_approximate_dp"]["epsilon"]),
                                                      Fraction(1, 10**6))
    for facts, planned in zip(release.measurements, plan.tables, strict=True):
        assert type(facts.budget) is ZCDP and facts.budget == planned.budget
        assert facts.ledger_charge == planned.ledger_charge
    mean = release.facts("mean_income_by_sex_age")
    assert (mean.measure, mean.column) == ("mean", "PINCP")
    assert [p.part for p in mean.parts] == ["sum", "count"]
    assert sum((p.budget for p in mean.parts), ZCDP(Fraction(0))) == mean.budget == ZCDP(Fraction(1, 2))
    assert [p.scale for p in mean.parts] == [p.shown_scale for p in plan.tables[0].parts]
    assert mean.margin_of_error is None and mean.margin_of_error_95 is None  # not in the mean's own unit
    assert [p.margin_of_error for p in mean.parts] == [p.moe for p in plan.tables[0].parts]  # the parts' own
    mode = release.facts("modal_race_by_sex")
    assert (mode.measure, mode.column, mode.margin_of_error) == ("mode", "RAC1P", None)  # a category: no margin
    assert release.facts("income_by_sex").margin_of_error == plan.tables[1].moe > 0


def test_noisy_means_are_their_two_parts(measures):
    _, directory = measures
    noisy = read_release(directory).noisy("mean_income_by_sex_age")
    raw = pq.read_table(directory / "measurements" / "mean_income_by_sex_age.parquet")
    assert list(noisy.columns) == ["SEX", "AGE_GROUP", "noisy_sum", "noisy_count"]
    assert noisy["noisy_sum"].tolist() == raw.column("noisy_sum").to_pylist()
    assert noisy["noisy_count"].tolist() == raw.column("noisy_count").to_pylist()


# ---------------------------------------------------------------- geography


def test_geographic_tables_per_level(census):
    spec_path, directory = census
    release = read_release(directory)
    name = "persons_by_sex_age_group"
    assert release.levels(name) == ("root", "STATE", "PUMA") and release.geography == ("STATE", "PUMA")
    for level in release.levels(name):
        frame = release.table(name, level)
        assert_frame_is_the_csv(frame, directory / "tables" / name / f"{level}.csv")
        assert list(frame.columns) == ([] if level == "root" else [level]) + ["SEX", "AGE_GROUP", "count"]
        assert release.facts(name, level).level == level
    states, pumas = release[name, "STATE"], release[name, "PUMA"]
    state_of = {p: p[:2] for p in pumas["PUMA"].cat.categories}
    assert list(states["STATE"].cat.categories) == list(dict.fromkeys(state_of.values()))  # from the declared PUMAs
    rolled = pumas.assign(STATE=pumas["PUMA"].map(state_of).astype(states["STATE"].dtype)) \
        .groupby(["STATE", "SEX", "AGE_GROUP"], observed=False)["count"].sum().reset_index()
    assert rolled["count"].tolist() == states["count"].tolist()  # consistent: PUMAs add up to their state
    assert release.facts(name, "PUMA").budget == PureDP(Fraction(3, 10))
    assert release.facts(name, "root").budget + release.facts(name, "STATE").budget + \
        release.facts(name, "PUMA").budget == PureDP(Fraction(1, 2))
    every = release.tables()
    assert set(every[name]) == {"root", "STATE", "PUMA"}
    with pytest.raises(KeyError, match="per level: name one of root, STATE, PUMA"):
        release.table(name)


def test_invariants_are_read_as_published(census):
    _, directory = census
    release = read_release(directory)
    assert release.invariant_levels == ("root", "STATE")
    for level in release.invariant_levels:
        assert_frame_is_the_csv(release.invariants(level), directory / "invariants" / f"{level}.csv")
    states = release.invariants("STATE")
    assert states["count"].sum() == release.invariants("root")["count"].item() == 27_253
    assert (release["persons_by_sex_age_group", "STATE"].groupby("STATE", observed=False)["count"].sum().to_numpy()
            == states["count"].to_numpy()).all()
    with pytest.raises(KeyError, match="root, STATE"):
        release.invariants("PUMA")


# ---------------------------------------------------------------- local tables


def test_local_tables(tmp_path, release_env, cli):
    from tests.test_local import randomized_answers, true_answers, write_spec

    true_answers(tmp_path / "true.csv", n=2000)
    spec = write_spec(tmp_path)
    ledger = tmp_path / "ledger.sqlite"
    randomized_answers(cli, spec, ledger, tmp_path / "true.csv", tmp_path / "answers.csv")
    assert run(spec, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env).returncode == 0
    directory = tmp_path / "out" / "survey-wave-1"
    release = read_release(directory)
    assert release.table_names == ("favourite", "smokers") and release.measurements == ()
    smokers = release.table("smokers")
    assert_frame_is_the_csv(smokers, directory / "tables" / "smokers.csv")
    assert smokers["SMOKES"].dtype == pd.CategoricalDtype(["yes", "no"], ordered=True)
    assert abs(smokers["share"].sum() - 1) < 1e-9
    assert release.local_facts("smokers")["epsilon_local"] == "ln 3"


# ---------------------------------------------------------------- what is not a release


def test_what_is_not_a_release_is_refused_clearly(demo, tmp_path):
    _, published = demo
    with pytest.raises(NotARelease, match="does not exist"):
        read_release(tmp_path / "nowhere")
    with pytest.raises(NotARelease, match="has no manifest.json"):
        read_release(tmp_path)
    with pytest.raises(NotARelease, match=f"holds releases: read one of {published}"):
        read_release(published.parent)
    assert read_release(published / "manifest.json").release == "acs-demo-2019"  # the manifest names its release
    assert issubclass(NotARelease, UserError)

    def altered(edit):
        directory = tmp_path / f"altered-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(published, directory)
        edit(directory)
        return directory

    def manifest_edit(change):
        def edit(directory):
            path = directory / "manifest.json"
            data = json.loads(path.read_text())
            change(data)
            path.write_text(json.dumps(data))
        return edit

    future = altered(manifest_edit(lambda m: m.update(format=99)))
    with pytest.raises(NotARelease, match="manifest format 99; dprelease .* reads format 2"):
        read_release(future)
    broken = altered(lambda d: (d / "manifest.json").write_text("{not json"))
    with pytest.raises(NotARelease, match="cannot read .*manifest.json"):
        read_release(broken)
    foreign = altered(lambda d: (d / "manifest.json").write_text(json.dumps({"name": "something else"})))
    with pytest.raises(NotARelease, match="is not a dprelease manifest"):
        read_release(foreign)
    no_spec = altered(lambda d: (d / "spec.json").unlink())
    with pytest.raises(NotARelease, match="spec.json not found"):
        read_release(no_spec)
    table = "tables/puma_by_sex.csv"
    renamed = altered(lambda d: (d / table).write_text((d / table).read_text().replace('"Female"', '"Femme"')))
    with pytest.raises(NotARelease, match="SEX holds 'Femme', not a declared category"):
        read_release(renamed).table("puma_by_sex")
    short = altered(lambda d: (d / table).write_text("".join((d / table).read_text().splitlines(True)[:-1])))
    with pytest.raises(NotARelease, match="39 rows, the manifest states 40"):
        read_release(short).table("puma_by_sex")
    relabelled = altered(lambda d: (d / table).write_text((d / table).read_text().replace('"count"', '"total"', 1)))
    with pytest.raises(NotARelease, match=r"expected \['PUMA', 'SEX', 'count'\]"):
        read_release(relabelled).table("puma_by_sex")
    with pytest.raises(KeyError, match="no table 'nope'; it has puma_by_sex"):
        read_release(published).table("nope")


def test_a_manifest_from_before_the_typed_records_is_refused(demo, tmp_path):
    """Manifests written before the typed budget records (format 1: figures named ε whatever
    their unit) are not read: one reader, of format 2 (issue 30), naming the version that wrote it."""
    _, published = demo
    directory = tmp_path / published.name
    shutil.copytree(published, directory)
    data = json.loads((directory / "manifest.json").read_text())
    data.pop("budget")
    for entry in data["tables"]:
        entry.pop("budget"), entry.pop("ledger_charge")
        entry["epsilon"] = "1/4"
    data.update(format=1, total_epsilon="1", release_budget="1", software={"name": "dprelease", "version": "0.1.0"})
    assert dprelease.__version__ != "0.1.0"  # the refusal names a version that reads format 1
    (directory / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(NotARelease, match=r"manifest format 1; dprelease .* reads format 2: read it with the "
                                          rf"version that wrote it \(dprelease {data['software']['version']}\)"):
        read_release(directory)
    assert read_release(published).total == PureDP(Fraction(1))


# ---------------------------------------------------------------- budget records, formats, imports


def test_budget_records_round_trip():
    from dprelease.publish.manifest import budget_record

    for budget in (PureDP(Fraction(1, 4)), ZCDP(Fraction(3, 10)), ApproxDP(Fraction(1, 2), Fraction(1, 10**6))):
        assert budget_from_record(budget_record(budget)) == budget
    assert budget_from_record({"epsilon": "0.1"}) == PureDP(Fraction(1, 10))
    for bad, words in (({"epsilon": 0.25}, "exact text"), ({"delta": "1"}, "must name"), ({}, "names nothing"),
                       ({"eps": "1"}, "no key 'eps'"), ({"rho": "x"}, "not a decimal"), ("1/4", "an object")):
        with pytest.raises(ValueError, match=words):
            budget_from_record(bad)


def test_the_manifest_format_written_is_read():
    from dprelease.publish import manifest

    assert manifest.MANIFEST_FORMAT == 2 and MANIFEST_FORMATS == (2,)


def test_the_example_reads_the_demo(demo):
    """examples/read_demo.py, run as a user would on a published demo, prints its DataFrames."""
    _, directory = demo
    proc = subprocess.run([sys.executable, ROOT / "examples" / "read_demo.py", directory], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "PUMA     category" in proc.stdout and "Not applicable (under 15)" in proc.stdout, proc.stdout


def test_pandas_is_imported_on_first_use_only():
    """The CLI does not import pandas; dprelease.read_release imports it when first asked for."""
    code = ("import sys, dprelease, dprelease.cli\n"
            "assert 'pandas' not in sys.modules and 'dprelease.publish.reading' not in sys.modules\n"
            "assert dprelease.read_release.__module__ == 'dprelease.publish.reading' and 'pandas' in sys.modules\n"
            "try:\n    dprelease.no_such_thing\nexcept AttributeError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "has no attribute 'no_such_thing'" in proc.stdout, proc.stderr
    assert dprelease.read_release is read_release


def test_margins_in_each_measures_own_units_per_published_cell(measures):
    """TableFacts.margin is the plan's (plan.margins.margin_of, at the release's confidence), and
    Release.margins gives it per cell: a mean's at the cell's published noisy count."""
    from dprelease.plan.margins import margin_of

    spec_path, directory = measures
    release = read_release(directory)
    spec = load_spec(spec_path)
    plan = plan_release(spec, None)
    for facts, planned in zip(release.measurements, plan.tables, strict=True):
        assert facts.margin == margin_of(planned, spec.confidence), facts.name
    mean = release.margins("mean_income_by_sex_age")
    margin = release.facts("mean_income_by_sex_age").margin
    assert margin.kind == "mean"
    for count, shown in zip(mean["count"], mean["margin_of_error"]):
        at = margin.at_count(count)
        assert (np.isnan(shown) if at is None else shown == at), (count, shown)
    assert mean["margin_of_error"].notna().any()
    modes = release.margins("modal_race_by_sex")
    assert "margin_of_error" not in modes  # a gap in rows, not a margin of the category
    assert modes["count_gap"].nunique() == 1 and modes["count_gap"].iloc[0] == release.facts("modal_race_by_sex").margin.value > 0
    quantiles = release.margins("median_age_by_sex")  # no count of the same cells here: ranks only
    assert list(quantiles.columns) == ["SEX", "quantile", "rank_error"]
    assert (quantiles["rank_error"] == release.facts("median_age_by_sex").margin.value).all()
    sums = release.margins("income_by_sex")["margin_of_error"]
    assert (sums == release.facts("income_by_sex").margin_of_error).all()


# ---------------------------------------------------------------- large levels: Parquet


def _same_frames(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    for column in a.columns:
        assert a[column].dtype == b[column].dtype, column
        assert a[column].isna().tolist() == b[column].isna().tolist(), column
        assert a[column].dropna().tolist() == b[column].dropna().tolist(), column


@pytest.mark.parametrize("which", ["demo", "measures", "census"])
def test_a_level_published_as_parquet_reads_as_its_csv(which, request, tmp_path, cli, monkeypatch):
    """Levels over publish.PARQUET_CELLS cells are published as Parquet (here: every level): the
    same post-processing of the same measurements, read back, gives the frames its CSV gives —
    counts, sums, means, modes and quantiles (a structural mode: empty), geography, structural
    zeros marked or omitted, margins."""
    import dprelease.publish.layout as publish

    _, published = request.getfixturevalue(which)
    directory = tmp_path / published.name
    shutil.copytree(published, directory)
    assert cli("postprocess", directory).code == 0  # "1-as-specified": CSV
    monkeypatch.setattr(publish, "PARQUET_CELLS", 0)
    assert cli("postprocess", directory).code == 0  # "2-as-specified": Parquet
    release = read_release(directory)
    assert release.postprocessed == ("1-as-specified", "2-as-specified")
    parquet = list((directory / "postprocessed" / "2-as-specified" / "tables").rglob("*.parquet"))
    assert parquet and not list((directory / "postprocessed" / "2-as-specified" / "tables").rglob("*.csv"))
    for name in release.table_names:
        for level in release.levels(name):
            _same_frames(release.table(name, level, version="2-as-specified"),
                         release.table(name, level, version="1-as-specified"))


def test_a_release_publishes_large_levels_as_parquet(tmp_path, cli, monkeypatch):
    """The manifest names the Parquet file; read_release reads it; what it reads is the file's
    content; the category columns are stored dictionary-encoded."""
    import dprelease.publish.layout as publish

    monkeypatch.setattr(publish, "PARQUET_CELLS", 2)  # the 2-cell tables stay CSV
    spec = tmp_path / "measures.yaml"
    text = MEASURES.format(data=ROOT / "data" / "nist_acs" / "national2019.csv")
    assert "    group_by: [RAC1P]\n    rho: 0.5\n" in text
    spec.write_text(text.replace("    group_by: [RAC1P]\n    rho: 0.5\n", "    group_by: [RAC1P]\n    rho: 0.4\n")
                    + "  - {name: adults_modal_race, group_by: [AGE_GROUP], where: {AGEP: {ge: 18}}, "
                      "measure: {mode: RAC1P}, rho: 0.1}\n")
    assert cli("run", spec, "--output-dir", tmp_path / "out", "--orchestrator", "inline").code == 0
    directory = tmp_path / "out" / "acs-measures-2019"
    manifest = json.loads((directory / "manifest.json").read_text())
    files = {t["name"]: t["file"] for t in manifest["tables"]}
    assert files["persons_by_race"] == "tables/persons_by_race.parquet"  # 9 cells
    assert files["mean_income_by_sex_age"] == "tables/mean_income_by_sex_age.parquet"  # 6 cells
    assert files["income_by_sex"] == "tables/income_by_sex.csv"  # 2 cells
    release = read_release(directory)
    stored = pq.read_table(directory / files["persons_by_race"])
    assert str(stored.schema.field("RAC1P").type).startswith("dictionary")
    frame = release.table("persons_by_race")
    assert frame["RAC1P"].tolist() == stored.column("RAC1P").to_pylist()
    assert frame["count"].tolist() == stored.column("count").to_pylist()
    assert list(frame["RAC1P"].cat.categories) == list(load_spec(spec).column("RAC1P").categories)
    modes = release.table("adults_modal_race")  # 3 cells, "0-17" structural: no category
    assert files["adults_modal_race"].endswith(".parquet")
    assert modes["mode"].isna().tolist() == [True, False, False] and modes["structural"].tolist() == [True, False, False]
    assert list(modes["mode"].cat.categories) == list(load_spec(spec).column("RAC1P").categories)
    (directory / files["persons_by_race"]).chmod(0o600)
    pq.write_table(stored.set_column(0, "RAC1P", pa.array(["Martian"] * len(frame))), directory / files["persons_by_race"])
    with pytest.raises(NotARelease, match="'Martian', not a declared category of RAC1P"):
        release.table("persons_by_race")


def test_the_json_report_gives_a_cell_moe_to_counts_and_sums_only(measures):
    """Issue 29, point 8: a mean's "moe" was its sum part's (1,151,300 beside a ±2,056 margin), a
    mode's and a quantile's 0; now only counts and sums carry "moe"/"moe95" (in persons, in the
    summed unit), and every table its "margin" in its measure's own units."""
    from dprelease.report import published as reporting

    _, directory = measures
    manifest = json.loads((directory / "manifest.json").read_text())
    tables = {t["name"]: t for t in reporting.report_json(manifest, None)["tables"]}
    for name in ("persons_by_race", "income_by_sex"):
        assert tables[name]["moe"] == tables[name]["margin"]["value"] > 0, name
        assert "moe95" in tables[name]
    for name in ("mean_income_by_sex_age", "modal_race_by_sex", "median_age_by_sex"):
        assert "moe" not in tables[name] and "moe95" not in tables[name], name
        assert tables[name]["margin"]["kind"] in ("mean", "mode", "quantile")


def test_the_manifest_gives_a_cell_moe_to_counts_and_sums_only(measures):
    """Issue 29, "drop the first format's moe/moe95 keys for measures they misdescribe": the
    manifest itself (not only the JSON report) gives "moe"/"moe95" to counts and sums, equal to
    their margin record; a mean's sum and count parts keep theirs (each in its own unit); a mean,
    a mode and a quantile carry their margin record only. `dprelease plan --json` says the same."""
    _, directory = measures
    manifest = json.loads((directory / "manifest.json").read_text())
    tables = {t["name"]: t for t in manifest["tables"]}
    for name in ("persons_by_race", "income_by_sex"):
        assert tables[name]["moe"] == tables[name]["margin"]["value"] > 0 and tables[name]["moe95"] > 0, name
    for name in ("mean_income_by_sex_age", "modal_race_by_sex", "median_age_by_sex"):
        assert "moe" not in tables[name] and "moe95" not in tables[name], name
    parts = tables["mean_income_by_sex_age"]["parts"]
    assert [p["part"] for p in parts] == ["sum", "count"] and all(p["moe"] > 0 and p["moe95"] > 0 for p in parts)
    assert read_release(directory).facts("median_age_by_sex").margin_of_error is None


def test_a_quantile_s_margin_is_in_ranks_never_in_the_value_s_units(tmp_path, cli):
    """Issue 29, point 1: `margins("median_age_by_sex")` showed `44 … margin_of_error 34`, read as
    44 ± 34 years; 34 is a rank error in rows. Now: the median age is a number; its margin is
    `rank_error` (rows) and nothing else (no interval of levels: the best category's own distance
    to q·n is not published); a mode's is `count_gap`. A mode of a range column that declares a
    missing category stays categorical (its missing label is no number) and is read."""
    spec = tmp_path / "median.yaml"
    spec.write_text(MEASURES.format(data=ROOT / "data" / "nist_acs" / "national2019.csv").replace(
        "  - name: persons_by_race\n    group_by: [RAC1P]\n    rho: 0.5\n",
        "  - name: persons_by_race\n    group_by: [RAC1P]\n    rho: 0.4\n"
        "  - {name: modal_poverty, group_by: [SEX], measure: {mode: POVPIP}, rho: 0.1}\n").replace(
        "  AGEP: {range: [0, 99]}\n",
        "  AGEP: {range: [0, 99]}\n  POVPIP: {range: [0, 501], missing: \"N/A\"}\n"))
    result = cli("run", spec, "--output-dir", tmp_path / "out", "--orchestrator", "inline")
    assert result.code == 0, result
    release = read_release(tmp_path / "out" / "acs-measures-2019")
    frame = release.margins("median_age_by_sex")
    assert list(frame.columns) == ["SEX", "quantile", "rank_error"]
    assert frame["quantile"].dtype == "Int64"
    assert (frame["rank_error"] == release.facts("median_age_by_sex").margin.value).all()
    assert list(release.margins("modal_race_by_sex").columns) == ["SEX", "mode", "count_gap"]
    poverty = release.table("modal_poverty")["mode"]
    assert isinstance(poverty.dtype, pd.CategoricalDtype) and list(poverty.cat.categories)[-1] == "N/A"


def test_a_structural_cell_has_no_margin(demo):
    """Review of issue 29: `margins()` gave an exact-zero structural cell (MSP N/A of a table of
    people 15 and over, by the demo's rule) the table's margin; it has none: 0, as the published
    margin columns give it. The other cells keep the table's margin."""
    _, directory = demo
    release = read_release(directory)
    frame = release.margins("marital_status_by_sex")
    structural = frame["structural"].astype(bool)
    assert structural.any() and (~structural).any()
    assert (frame.loc[structural, "margin_of_error"] == 0).all()
    assert (frame.loc[~structural, "margin_of_error"] == release.facts("marital_status_by_sex").margin.value).all()
