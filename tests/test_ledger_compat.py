"""Every existing ledger stays readable, its figures identical: a ledger written by the code of
e617fc4 (schema 4; a pure release, a zCDP release with a mean, a contribution bound and a local
collection; see tests/fixtures/ledger_e617fc4/README.md) is opened by today's code, and
`dprelease ledger --json` prints the figures it printed then."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "ledger_e617fc4"


def copy_of_the_old_ledger(tmp_path: Path) -> Path:
    for name in ("nist-acs.sqlite", "nist-acs.sqlite.key"):
        shutil.copyfile(FIXTURE / name, tmp_path / name)
        (tmp_path / name).chmod(0o600)  # git keeps no permissions; the ledger wants its key owner-only
    return tmp_path / "nist-acs.sqlite"


def figures(printed: dict) -> dict:
    """The budget figures of `dprelease ledger --json`, in the form figures.json keeps them."""
    def dataset(x: dict) -> dict:
        unit = "rho" if x["terms"]["guarantee"] == "zcdp" else "epsilon"  # each figure's key names its unit
        keep = ("name", "definition", "budget", "spent", "remaining", "delta_budget", "delta_spent",
                "data_versions", "local_epsilon_per_respondent")
        return {k: x[k] for k in keep} | {
            "local_collections": x["local_collections"],
            "budget_changes": [c[unit] for c in x["budget_changes"]],
            "releases": [{k: r[k] for k in ("release", unit, "delta", "state", "run_id", "spec_fingerprint")}
                         | {"tables": [{k: t[k] for k in ("name", unit)} for t in r["tables"]]}  # their keys
                         for r in x["releases"]]}
    return {"ledger_id": printed["ledger"]["id"], "datasets": [dataset(x) for x in printed["datasets"]],
            "answer_sets": [{k: a[k] for k in ("dataset", "collection", "question", "protocol", "epsilon", "memo_of",
                                               "how")} for a in printed["answer_sets"]]}


def test_a_ledger_of_e617fc4_prints_the_same_figures(tmp_path, cli):
    ledger = copy_of_the_old_ledger(tmp_path)
    expected = json.loads((FIXTURE / "figures.json").read_text())
    for _ in range(2):  # the first opening may migrate; the second reads the migrated ledger
        shown = cli("ledger", "--ledger", ledger, "--json")
        assert shown.code == 0, shown
        assert figures(json.loads(shown.stdout)) == expected
        typed = {d["name"]: (d["lifetime"], [r["charge"] for r in d["releases"]])
                 for d in json.loads(shown.stdout)["datasets"]}
        assert typed["nist-acs-ma-2019"] == ({"cap": {"rho": "2"}, "spent": {"rho": "1/2"}}, [{"rho": "1/2"}])
        assert typed["synthetic-persons"] == ({"cap": {"epsilon": "3"}, "spent": {"epsilon": "1"}}, [{"epsilon": "1"}])
        tables = {d["name"]: [(t["rho" if d["terms"]["guarantee"] == "zcdp" else "epsilon"], t["charge"])
                           for r in d["releases"] for t in r["tables"]]
                  for d in json.loads(shown.stdout)["datasets"]}  # each table's charge names its unit too
        assert all(set(c) == {"rho"} for _, c in tables["nist-acs-ma-2019"]) and tables["nist-acs-ma-2019"]
        assert all(c == {"epsilon": e} for e, c in tables["nist-acs-national-2019"]) and tables["nist-acs-national-2019"]
    with sqlite3.connect(ledger) as conn:  # migrated to schema 6: typed terms, figures under `amount`, identities
        assert conn.execute("SELECT value FROM dprelease_meta WHERE key = 'schema_version'").fetchone() == ("6",)
        assert conn.execute("SELECT COUNT(*) FROM data_identities").fetchone() == (0,)  # none: recorded before
        assert dict(conn.execute("SELECT name, guarantee || '/' || change_one_record || '/' || coalesce(unit_id, '') "
                                 "FROM datasets")) == {"nist-acs-ma-2019": "zcdp/0/", "nist-acs-national-2019": "pure/0/",
                                                       "survey-panel": "pure/1/", "synthetic-persons": "pure/0/PID"}
        assert conn.execute("SELECT COUNT(*) FROM charges WHERE amount IS NOT NULL").fetchone()[0] == 9


def test_the_fixture_is_what_figures_json_describes():
    """A control: the fixture holds four datasets of four kinds (a changed fixture fails here)."""
    expected = json.loads((FIXTURE / "figures.json").read_text())
    assert sorted(d["definition"] for d in expected["datasets"]) == ["pure", "pure-bounded", "pure@PID", "zcdp"]
    assert [len(d["releases"]) for d in expected["datasets"]] == [1, 1, 1, 1]
    assert {a["protocol"] for a in expected["answer_sets"]} == {"k_rr:1/k=10", "coin_flip/k=2"}


def test_the_specs_of_e617fc4_keep_their_fingerprints():
    """The four specs that wrote the fixture (copied beside it) fingerprint as the ledger recorded
    them then: the typed budgets change no fingerprint, so approvals and published releases stay
    valid (a pure, a zCDP, a bounded and a local spec)."""
    from dprelease.spec import fingerprint, load_spec

    expected = json.loads((FIXTURE / "figures.json").read_text())
    recorded = {r["release"]: r["spec_fingerprint"] for d in expected["datasets"] for r in d["releases"]}
    for name in ("acs_demo", "zcdp", "bounded", "local"):
        spec = load_spec(FIXTURE / "configs" / f"{name}.yaml")
        assert fingerprint(spec) == recorded[spec.release], name
