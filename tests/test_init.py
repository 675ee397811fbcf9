"""``dprelease init``: a starter spec from a data file and its dictionary, which validates and
plans; domains come from the dictionary only (codes the data adds are reported on the terminal,
never added and never written: the spec holds no data value and no count); written owner-only;
its ledger and outputs pinned beside the spec's folder (git-ignored in the project's layout),
the terminal naming the ledger and how to create it; without a dictionary, TODOs; never
overwrites; a bad dictionary is a clear exit 2."""

from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import subprocess

import pytest
import yaml

from dprelease.spec import load_spec
from tests.conftest import ROOT
from tests.ledgers import make_ledger

NIST = ROOT / "data" / "nist_acs"
DICTIONARY = NIST / "data_dictionary.json"


def test_init_on_the_nist_file_validates_and_plans(tmp_path, cli):
    spec = tmp_path / "proj" / "nist.yaml"
    result = cli("init", NIST / "national2019.csv", "--dictionary", NIST / "data_dictionary.json", "--output", spec)
    assert result.code == 0, result.output
    assert f"wrote {spec.resolve()}" in result.stdout
    assert f"dprelease validate {spec}" in result.stdout and f"dprelease plan {spec}" in result.stdout
    assert not list(tmp_path.rglob("*.sqlite")), "init created a ledger"
    validated = cli("validate", spec)
    assert validated.code == 0, validated.output
    refused = cli("plan", spec)  # its pinned ledger is not there yet: refused, nothing created
    assert refused.code == 2 and f"dprelease ledger init --spec {spec}" in refused.stderr, refused.output
    assert not list(tmp_path.rglob("*.sqlite")), "plan created a ledger"
    assert cli("ledger", "init", "--spec", spec, "--reason", "the starter's budget").code == 0
    planned = cli("plan", spec)
    assert planned.code == 0, planned.output

    doc = yaml.safe_load(spec.read_text())
    dictionary = json.loads((NIST / "data_dictionary.json").read_text())
    assert doc["columns"]["SEX"]["domain"] == ["1", "2"] and doc["columns"]["SEX"]["labels"] == ["Male", "Female"]
    msp = dictionary["MSP"]["values"]
    assert doc["columns"]["MSP"]["domain"] == [c for c in msp if c != "N"]
    assert doc["columns"]["MSP"]["labels"] == [msp[c] for c in msp if c != "N"]
    assert doc["columns"]["MSP"]["missing"] == msp["N"]
    assert doc["columns"]["AGEP"]["range"] == [0, 99]
    assert doc["columns"]["NOC"]["range"] == [0, 19]  # the code 0 beside min 1, max 19
    assert doc["dataset"]["na_values"] == ["N"]
    assert doc["dataset"]["format"] == "csv"
    assert (spec.parent / doc["dataset"]["path"]).resolve() == (NIST / "national2019.csv").resolve()
    assert doc["ledger"] == "../ledgers/national2019.sqlite" and doc["output_dir"] == "../outputs"
    assert doc["privacy"] == {"definition": "pure", "unit": "row"} and doc["budget"] == {"epsilon": 1}
    assert "lifetime_budget" in doc["dataset"]
    assert len(doc["tables"]) == 1 and "EXAMPLE" in spec.read_text()
    loaded = load_spec(spec)
    assert {c.name for c in loaded.columns} >= {"PUMA", "SEX", "AGEP", "MSP", "RAC1P", "HISP"}


def small(tmp_path):
    data = tmp_path / "people.csv"
    data.write_text("AGE,COLOR,SEX\n30,1,1\n40,2,2\n50,9,1\n60,9,2\n70,7,1\n80,N,2\n")
    dictionary = tmp_path / "dict.json"
    dictionary.write_text(json.dumps({
        "AGE": {"description": "age", "values": {"min": 0, "max": 99}},
        "COLOR": {"description": "colour", "values": {"N": "N/A (none)", "1": "Red", "2": "Blue"}},
        "SEX": {"values": {"1": "Male", "2": "Female"}},
    }))
    return data, dictionary


def test_codes_the_dictionary_lacks_are_reported_never_added(tmp_path, cli):
    data, dictionary = small(tmp_path)
    spec = tmp_path / "people.yaml"
    result = cli("init", data, "--dictionary", dictionary, "--output", spec)
    assert result.code == 0, result.output
    assert "reported: COLOR: 3 row(s)" in result.stdout and "'9', '7'" in result.stdout
    doc = yaml.safe_load(spec.read_text())
    assert doc["columns"]["COLOR"]["domain"] == ["1", "2"]
    assert doc["columns"]["COLOR"]["labels"] == ["Red", "Blue"]
    assert doc["columns"]["COLOR"]["missing"] == "N/A (none)"
    assert "REPORTED" not in spec.read_text() and "'9'" not in spec.read_text()  # the terminal only
    assert "reported: SEX" not in result.stdout and "reported: AGE" not in result.stdout
    assert cli("validate", spec).code == 0


def test_without_a_dictionary_every_column_is_a_todo(tmp_path, cli, monkeypatch):
    data, _ = small(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = cli("init", data)
    assert result.code == 0, result.output
    spec = tmp_path / "people.yaml"  # the default: <data stem>.yaml here
    assert f"wrote {spec.resolve()}" in result.stdout
    text = spec.read_text()
    for name in ("AGE", "COLOR", "SEX"):
        assert f"  {name}: {{}}   # TODO: declare domain: [...] or range: [lo, hi]" in text
    assert "will not validate" in result.stderr
    assert cli("validate", spec).code == 2


def test_init_refuses_to_overwrite_without_force(tmp_path, cli):
    data, dictionary = small(tmp_path)
    spec = tmp_path / "people.yaml"
    spec.write_text("mine\n")
    result = cli("init", data, "--dictionary", dictionary, "--output", spec)
    assert result.code == 2 and "already exists" in result.stderr and "--force" in result.stderr
    assert "Traceback" not in result.output
    assert spec.read_text() == "mine\n"
    assert cli("init", data, "--dictionary", dictionary, "--output", spec, "--force").code == 0
    assert spec.read_text() != "mine\n"


def test_a_bad_dictionary_is_a_clear_error(tmp_path, cli):
    data, _ = small(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"AGE": {"values": {"min": 0,}}}')
    spec = tmp_path / "out.yaml"
    result = cli("init", data, "--dictionary", bad, "--output", spec)
    assert result.code == 2, result.output
    assert str(bad) in result.stderr and "not valid JSON" in result.stderr and "Traceback" not in result.output
    assert not spec.exists()
    bad.write_text('["AGE"]')
    result = cli("init", data, "--dictionary", bad, "--output", spec)
    assert result.code == 2 and "not a non-empty JSON object" in result.stderr
    result = cli("init", data, "--dictionary", tmp_path / "nope.json", "--output", spec)
    assert result.code == 2 and "no such dictionary file" in result.stderr
    result = cli("init", tmp_path / "nope.csv", "--output", spec)
    assert result.code == 2 and "no such data file" in result.stderr


def test_init_does_not_import_prefect(tmp_path):
    from tests.test_no_prefect import run_probe  # its probe is shown to fail by test_the_probe_can_fail

    proc = run_probe(["init", str(NIST / "national2019.csv"), "--dictionary", str(NIST / "data_dictionary.json"),
                      "--output", str(tmp_path / "nist.yaml")])
    assert proc.returncode == 0, proc.stderr
    assert "NO-PREFECT-OK" in proc.stdout and (tmp_path / "nist.yaml").exists()


def reviewers_copy(path, drop=0):
    """The NIST national 2019 excerpt as the reviewer changed it: one person's income outside the
    dictionary's range (PINCP 1523456 > 1341000) and an age of 104 (AGEP > 99); the last
    ``drop`` rows left out (so every row count differs too)."""
    with (NIST / "national2019.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    header, first = rows[0], rows[1]
    first[header.index("PINCP")], first[header.index("AGEP")] = "1523456", "104"
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows[:len(rows) - drop])


def test_init_writes_no_data_value_and_no_count(tmp_path, cli):
    """What init finds in the data is on the terminal; the spec is the same whatever the rows
    hold: byte for byte the spec of the unchanged file, with 1000 fewer rows and two values out
    of the dictionary's ranges."""
    data = tmp_path / "data" / "national2019.csv"
    data.parent.mkdir()
    shutil.copy(NIST / "national2019.csv", data)
    spec = tmp_path / "project" / "configs" / "nist.yaml"
    clean = cli("init", data, "--dictionary", DICTIONARY, "--output", spec)
    assert clean.code == 0, clean.output
    assert "reported:" not in clean.stdout
    as_shipped = spec.read_text()
    reviewers_copy(data, drop=1000)
    changed = cli("init", data, "--dictionary", DICTIONARY, "--output", spec, "--force")
    assert changed.code == 0, changed.output
    assert "reported: PINCP: 1 row(s)" in changed.stdout and "'1523456'" in changed.stdout
    assert "reported: AGEP: 1 row(s)" in changed.stdout and "'104'" in changed.stdout
    written = [p for p in (tmp_path / "project").rglob("*") if p.is_file()]
    assert written == [spec]
    assert "1523456" not in spec.read_text() and "REPORTED" not in spec.read_text()
    assert spec.read_text() == as_shipped  # no value, no count: nothing of the rows


def test_init_writes_owner_only_whatever_the_umask(tmp_path, cli):
    spec = tmp_path / "project" / "configs" / "nist.yaml"
    previous = os.umask(0o022)
    try:
        first = cli("init", NIST / "national2019.csv", "--dictionary", DICTIONARY, "--output", spec)
        shared = tmp_path / "shared.yaml"  # a spec someone left readable by all, replaced with --force
        shared.write_text("old\n")
        os.chmod(shared, 0o644)
        forced = cli("init", NIST / "national2019.csv", "--output", shared, "--force")
    finally:
        os.umask(previous)
    assert first.code == 0 and forced.code == 0, first.output + forced.output
    mode = {p.relative_to(tmp_path).as_posix(): oct(stat.S_IMODE(os.lstat(p).st_mode))
            for p in (tmp_path / "project", spec.parent, spec, shared)}
    assert mode == {"project": "0o700", "project/configs": "0o700", "project/configs/nist.yaml": "0o600",
                    "shared.yaml": "0o600"}


def test_init_pins_the_ledger_and_outputs_beside_the_spec_folder_and_says_where(tmp_path, cli, monkeypatch):
    spec = tmp_path / "project" / "configs" / "nist.yaml"
    result = cli("init", NIST / "national2019.csv", "--dictionary", DICTIONARY, "--output", spec)
    assert result.code == 0, result.output
    doc = yaml.safe_load(spec.read_text())
    assert doc["ledger"] == "../ledgers/national2019.sqlite" and doc["output_dir"] == "../outputs"
    ledger = (tmp_path / "project" / "ledgers" / "national2019.sqlite").resolve()
    outputs = (tmp_path / "project" / "outputs").resolve()
    assert f"ledger: {ledger} (ledger: ../ledgers/national2019.sqlite; not created" in result.stdout
    assert f"outputs: {outputs} (output_dir: ../outputs)" in result.stdout
    assert f"  dprelease ledger init --spec {spec} --reason " in result.stdout
    assert not ledger.exists() and [p.name for p in spec.parent.iterdir()] == ["nist.yaml"]
    monkeypatch.delenv("DPRELEASE_LEDGER")
    assert load_spec(spec).output_path == outputs
    planned = cli("plan", spec)  # where a run would spend from: the pin, resolved as init said (none yet: refused)
    assert planned.code == 2 and f"pins its dataset's ledger at sqlite:///{ledger}" in planned.output
    make_ledger(ledger)
    planned = cli("plan", spec)
    assert planned.code == 0 and f"sqlite:///{ledger} (chosen by the spec's ledger: key)" in planned.output
    again = cli("init", NIST / "national2019.csv", "--dictionary", DICTIONARY, "--output", spec, "--force")
    assert f"ledger: {ledger} (ledger: ../ledgers/national2019.sqlite; exists" in again.stdout
    assert "dprelease ledger init" not in again.stdout


def git(project, *args):
    return subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_in_a_git_work_tree_the_ledger_and_outputs_stay_out_of_git(tmp_path, cli):
    """The reviewer's case: `git status` showed `?? configs/ledgers/` with the ledger's key in it.
    In the project's layout (its .gitignore) nothing of the ledger shows; without one, init warns."""
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    spec = project / "configs" / "nist.yaml"
    bare = cli("init", NIST / "national2019.csv", "--dictionary", DICTIONARY, "--output", spec)
    assert bare.code == 0, bare.output
    assert ("WARNING: git would not ignore ledgers/national2019.sqlite, ledgers/national2019.sqlite.key, "
            f"outputs/national2019-release-1 in the work tree {project.resolve()}: add ledgers/ and outputs/ to "
            f"{project.resolve() / '.gitignore'}") in bare.stderr
    shutil.copy(ROOT / ".gitignore", project / ".gitignore")
    ignored = cli("init", NIST / "national2019.csv", "--dictionary", DICTIONARY, "--output", spec, "--force")
    assert ignored.code == 0 and "WARNING" not in ignored.stderr, ignored.output
    make_ledger(project / "ledgers" / "national2019.sqlite")  # where `dprelease ledger init --spec` creates it
    assert (project / "ledgers" / "national2019.sqlite.key").exists()
    status = git(project, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == ["?? .gitignore", "?? configs/nist.yaml"]


def test_init_never_fails_for_want_of_git(tmp_path, cli, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    if shutil.which("git"):
        git(project, "init", "-q")  # a work tree init cannot ask about
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    result = cli("init", NIST / "national2019.csv", "--output", project / "configs" / "nist.yaml")
    assert result.code == 0, result.output
    assert "WARNING" not in result.stderr and "dprelease ledger init --spec" in result.stdout


def test_from_the_top_of_a_project_the_pins_stay_inside_it(tmp_path, cli, monkeypatch):
    """`dprelease init DATA` at the top of a git work tree writes ./STEM.yaml: its pins are the
    project's ledgers/ and outputs/ (which the project's .gitignore keeps out of git), never the
    folder above the project, which sibling projects would share."""
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    shutil.copy(ROOT / ".gitignore", project / ".gitignore")
    monkeypatch.chdir(project)
    result = cli("init", NIST / "national2019.csv", "--dictionary", DICTIONARY)
    assert result.code == 0, result.output
    doc = yaml.safe_load((project / "national2019.yaml").read_text())
    assert doc["ledger"] == "ledgers/national2019.sqlite" and doc["output_dir"] == "outputs"
    assert f"ledger: {project.resolve() / 'ledgers' / 'national2019.sqlite'}" in result.stdout
    assert "WARNING" not in result.stderr
    outside = tmp_path / "elsewhere"  # no work tree: beside the spec's folder, as before
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert cli("init", NIST / "national2019.csv", "--dictionary", DICTIONARY).code == 0
    assert yaml.safe_load((outside / "national2019.yaml").read_text())["ledger"] == "../ledgers/national2019.sqlite"


def accepted(text: str) -> str:
    """The starter's proposed rules, uncommented as a statistician accepting them would."""
    lines = text.splitlines()
    start = lines.index("# rules:")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("#  "))
    return "\n".join(lines[:start] + ["rules:"] + [line[1:] for line in lines[start + 1:end]] + lines[end:]) + "\n"


def test_init_proposes_the_rules_the_dictionary_states(tmp_path, cli):
    """Issue 29, point 6: "N/A (age less than 15 years)" proposes `MSP missing exactly when AGEP
    < 15` (commented out: the statistician accepts it); accepted, the rules hold for the NIST
    data, and a table of adults by marital status has its N/A cell structural (an exact zero,
    no noise). Labels of several conditions propose nothing; nor does a dictionary with no age."""
    from dprelease.plan import plan_release

    spec = tmp_path / "proj" / "nist.yaml"
    assert cli("init", NIST / "national2019.csv", "--dictionary", DICTIONARY, "--output", spec).code == 0
    text = spec.read_text()
    assert "rules" not in yaml.safe_load(text)  # proposed only
    assert "#   - name: msp-not-applicable-under-15\n#     description: \"the dictionary: MSP is 'N/A (age less " \
        "than 15 years)' exactly when AGEP < 15\"\n#     if: {AGEP: {lt: 15}}\n#     then: {MSP: {missing: " \
        "true}}\n#     both_ways: true\n" in text
    names = [r["name"] for r in yaml.safe_load(accepted(text))["rules"]]
    assert names == ["msp-not-applicable-under-15", "edu-not-applicable-under-3", "pincp-not-applicable-under-15",
                     "pincp_decile-not-applicable-under-15", "drem-not-applicable-under-5",
                     "dphy-not-applicable-under-5"]  # not INDP_CAT's "less than 16 years old, or …"
    adults = accepted(text).replace("tables:\n", "tables:\n  - {name: adults_by_msp, group_by: [SEX, MSP], "
                                                 "where: {AGEP: {ge: 15}}, epsilon: \"1/4\"}\n", 1)
    spec.write_text(adults.replace("budget: {epsilon: 1}", "budget: {epsilon: 1/2}"))
    assert cli("validate", spec).code == 0
    checked = cli("check", spec)
    assert checked.code == 0 and "rules: no row breaks a declared rule" in checked.stdout, checked.output
    table = next(t for t in plan_release(load_spec(spec), None).tables if t.name == "adults_by_msp")
    assert len(table.structural) == 2  # (Male, N/A) and (Female, N/A)

    data, dictionary = small(tmp_path)
    labels = json.loads(dictionary.read_text())
    labels["COLOR"]["values"]["N"] = "N/A (less than 16 years old, or never asked)"
    dictionary.write_text(json.dumps(labels))
    out = tmp_path / "small.yaml"
    assert cli("init", data, "--dictionary", dictionary, "--output", out).code == 0
    assert "rules" not in out.read_text()
    labels["COLOR"]["values"]["N"] = "N/A (under 16)"
    labels["AGE"]["description"] = "years since the start"
    dictionary.write_text(json.dumps(labels))
    assert cli("init", data, "--dictionary", dictionary, "--output", out, "--force").code == 0
    assert "rules" not in out.read_text()  # no column is the age
    labels["AGE"]["description"] = "Age of the person"
    dictionary.write_text(json.dumps(labels))
    assert cli("init", data, "--dictionary", dictionary, "--output", out, "--force").code == 0
    assert "#     if: {AGE: {lt: 16}}\n#     then: {COLOR: {missing: true}}" in out.read_text()
