"""``dprelease init``: a starter spec from a data file and its dictionary, which validates and
plans; domains come from the dictionary only (codes the data adds are reported, never added);
without a dictionary, TODOs; never overwrites; a bad dictionary is a clear exit 2."""

from __future__ import annotations

import json

import yaml

from dprelease.spec import load_spec
from tests.conftest import ROOT

NIST = ROOT / "data" / "nist_acs"


def test_init_on_the_nist_file_validates_and_plans(tmp_path, cli):
    spec = tmp_path / "proj" / "nist.yaml"
    result = cli("init", NIST / "national2019.csv", "--dictionary", NIST / "data_dictionary.json", "--output", spec)
    assert result.code == 0, result.output
    assert f"wrote {spec.resolve()}" in result.stdout
    assert f"dprelease validate {spec}" in result.stdout and f"dprelease plan {spec}" in result.stdout
    assert not list(tmp_path.rglob("*.sqlite")), "init created a ledger"
    validated = cli("validate", spec)
    assert validated.code == 0, validated.output
    planned = cli("plan", spec, "--ledger", tmp_path / "l.sqlite")
    assert planned.code == 0, planned.output
    assert not (tmp_path / "l.sqlite").exists()

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
    assert doc["ledger"] == "ledgers/national2019.sqlite" and doc["output_dir"] == "outputs"
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
    assert "# REPORTED by init: 3 row(s)" in spec.read_text()
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
