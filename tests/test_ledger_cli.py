"""`dprelease ledger` and `dprelease ledger set-budget`."""

from __future__ import annotations

import json
from fractions import Fraction

from dprelease.accounting import ZCDP, ApproxDP, PureDP
from dprelease.ledger import Ledger, resolve_location
from tests.ledgers import init_at, make_ledger, remove_ledger


def seed(url: str | None = None) -> None:
    ledger = init_at(resolve_location(url))
    run = ledger.reserve(dataset="acs", release="acs-2019", charges=[("a", PureDP(Fraction(1, 4))),
                                                                          ("b", PureDP(Fraction(3, 4)))],
                         spec_fingerprint="sha256:s", lifetime_from_spec=PureDP(Fraction(4))).run_id
    ledger.commit(run, data_fingerprint="sha256:d1")
    run = ledger.reserve(dataset="acs", release="acs-2020", charges=[("a", PureDP(Fraction(1, 2)))],
                         spec_fingerprint="sha256:s", lifetime_from_spec=PureDP(Fraction(4))).run_id
    ledger.fail(run, reason="disk full after noise", data_fingerprint="sha256:d2")
    ledger.reserve(dataset="acs", release="acs-2021", charges=[("a", PureDP(Fraction(1, 4)))],
                   spec_fingerprint="sha256:s", lifetime_from_spec=PureDP(Fraction(4)))
    ledger.close()


def test_ledger_json_lists_spend_per_dataset(cli):
    seed()
    result = cli("ledger", "--json")
    assert result.code == 0, result
    data = json.loads(result.stdout)
    [acs] = data["datasets"]
    assert (acs["name"], acs["budget"], acs["spent"], acs["remaining"]) == ("acs", "4", "7/4", "9/4")
    assert [(r["release"], r["epsilon"], r["state"]) for r in acs["releases"]] == [
        ("acs-2019", "1", "committed"), ("acs-2020", "1/2", "failed"), ("acs-2021", "1/4", "reserved")]
    assert all(r["created_at"] for r in acs["releases"])
    assert acs["data_versions"] == 2


def test_ledger_text_and_dataset_filter(cli):
    seed()
    result = cli("ledger", "--dataset", "acs")
    assert result.code == 0
    assert "cap ε = 4, spent 7/4 (1.75), remaining 9/4 (2.25)" in result.stdout
    assert "acs-2021" in result.stdout and "reserved" in result.stdout
    assert "2 versions of the data file" in result.stdout
    missing = cli("ledger", "--dataset", "nope")
    assert missing.code == 2 and "not in the ledger" in missing.stderr


def test_ledger_on_an_empty_location_creates_nothing(cli, isolated_ledger):
    remove_ledger(isolated_ledger)
    result = cli("ledger")
    assert result.code == 0
    assert "no ledger there" in result.stderr and "dprelease ledger init" in result.stderr
    assert not isolated_ledger.exists()


def test_ledger_with_nothing_to_show_says_where_it_looked_and_the_specs_pins(cli, isolated_ledger, tmp_path,
                                                                             monkeypatch):
    """`dprelease ledger` with no argument after a project's run (issue 29, point 12): the answer
    (stdout) says which ledger it read and why, and the ledgers the specs here pin, with their
    specs and how to create one that is not there yet; nothing is created."""
    (tmp_path / "configs").mkdir()
    make_ledger(tmp_path / "ledgers" / "pinned.sqlite")
    for name, pin in (("a", "../ledgers/pinned.sqlite"), ("b", "../ledgers/pinned.sqlite"),
                      ("c", "../ledgers/later.sqlite"), ("d", "postgresql://u@127.0.0.1:9/x")):
        (tmp_path / "configs" / f"{name}.yaml").write_text(f"release: r-{name}\nledger: {pin}\n")
    (tmp_path / "notes.yaml").write_text("- not a spec\n")
    (tmp_path / "broken.yaml").write_text("ledger: [\n")
    monkeypatch.chdir(tmp_path)
    result = cli("ledger")
    assert result.code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"No datasets with releases in this ledger yet at sqlite:///{isolated_ledger}, chosen by " \
                       "the $DPRELEASE_LEDGER environment variable."
    assert f"  sqlite:///{tmp_path}/ledgers/pinned.sqlite (pinned by configs/a.yaml, configs/b.yaml)" in lines
    assert f"  sqlite:///{tmp_path}/ledgers/later.sqlite (pinned by configs/c.yaml): not created yet, " \
           "`dprelease ledger init --spec configs/c.yaml --reason TEXT`" in lines
    assert "  postgresql+psycopg://u@127.0.0.1:9/x (pinned by configs/d.yaml)" in lines  # listed, never connected to
    remove_ledger(isolated_ledger)
    assert cli("ledger").stdout.startswith(f"There is no ledger at sqlite:///{isolated_ledger}, chosen by")
    assert not isolated_ledger.exists() and not (tmp_path / "ledgers" / "later.sqlite").exists()


def test_a_cap_is_given_in_the_unit_of_the_datasets_terms(cli, tmp_path):
    """A zCDP dataset's cap is a ρ (--rho), a pure or (ε, δ) one's an ε (--epsilon): a ρ is never
    typed under an ε name, and a cap in the wrong unit changes nothing."""
    url = str(make_ledger(tmp_path / "l.sqlite"))
    made = cli("ledger", "set-budget", "z", "--rho", "2", "--reason", "initial", "--ledger", url, "--create")
    assert made.code == 0, made
    assert "lifetime cap (ρ) of z set (new dataset) to 2" in made.stdout
    state = json.loads(cli("ledger", "--ledger", url, "--json").stdout)["datasets"][0]
    assert state["definition"] == "zcdp" and state["lifetime"]["cap"] == {"rho": "2"}
    wrong = cli("ledger", "set-budget", "z", "--epsilon", "3", "--reason", "x", "--ledger", url)
    assert wrong.code == 2 and "give it as --rho R" in wrong.stderr
    cli("ledger", "set-budget", "p", "--epsilon", "1", "--reason", "x", "--ledger", url, "--create")
    wrong = cli("ledger", "set-budget", "p", "--rho", "3", "--reason", "x", "--ledger", url)
    assert wrong.code == 2 and "give it as --epsilon E" in wrong.stderr
    for both in (("--epsilon", "1", "--rho", "1"), ()):
        assert cli("ledger", "set-budget", "p", *both, "--reason", "x", "--ledger", url).code == 2
    caps = {d["name"]: d["lifetime"]["cap"] for d in json.loads(cli("ledger", "--ledger", url, "--json").stdout)["datasets"]}
    assert caps == {"p": {"epsilon": "1"}, "z": {"rho": "2"}}  # nothing changed by the refusals


def test_set_budget_is_recorded_and_shown(cli, tmp_path):
    url = str(tmp_path / "l.sqlite")
    for create in ((), ("--create",)):  # no ledger: set-budget never creates one, --create or not
        refused = cli("ledger", "set-budget", "acs", "--epsilon", "4", "--reason", "initial", "--ledger", url, *create)
        assert refused.code == 2 and f"dprelease ledger init sqlite:///{url} --reason TEXT" in refused.stderr, refused
        assert "Nothing was created" in refused.stderr
        assert not (tmp_path / "l.sqlite").exists()
    assert cli("ledger", "init", url, "--reason", "acs's budget").code == 0
    refused = cli("ledger", "set-budget", "acs", "--epsilon", "4", "--reason", "initial", "--ledger", url)
    assert refused.code == 2 and "--create" in refused.stderr
    first = cli("ledger", "set-budget", "acs", "--epsilon", "4", "--reason", "initial", "--ledger", url, "--create")
    assert first.code == 0, first
    second = cli("ledger", "set-budget", "acs", "--epsilon", "11/2", "--reason", "board decision", "--by", "alice",
                 "--ledger", url)
    assert second.code == 0 and "set from 4 to 11/2" in second.stdout
    shown = cli("ledger", "--ledger", url)
    assert "cap set to 11/2" in shown.stdout and "alice: board decision" in shown.stdout
    assert "cap set to 4 on" in shown.stdout and ": initial" in shown.stdout  # every recorded change, in order
    assert shown.stdout.index("cap set to 4 on") < shown.stdout.index("cap set to 11/2")
    data = json.loads(cli("ledger", "--ledger", url, "--json").stdout)
    assert [c["epsilon"] for c in data["datasets"][0]["budget_changes"]] == ["4", "11/2"]


def test_set_budget_refuses_bad_numbers_and_empty_reasons(cli, tmp_path):
    url = str(tmp_path / "l.sqlite")
    for eps in ("0", "-1", "abc", ".inf", "１"):
        result = cli("ledger", "set-budget", "acs", "--epsilon", eps, "--reason", "x", "--ledger", url, "--create")
        assert result.code == 2, (eps, result)
    result = cli("ledger", "set-budget", "acs", "--epsilon", "1", "--reason", "  ", "--ledger", url, "--create")
    assert result.code == 2 and "say why" in result.output
    for name in ("Bad Name!", "", "../x"):
        result = cli("ledger", "set-budget", name, "--epsilon", "1", "--reason", "x", "--ledger", url, "--create")
        assert result.code == 2, (name, result)
    assert "Traceback" not in result.output
    assert not (tmp_path / "l.sqlite").exists()  # nothing was created by refused commands
    seed(url)
    typo = cli("ledger", "set-budget", "acss", "--epsilon", "5", "--reason", "x", "--ledger", url)
    assert typo.code == 2 and "known: acs" in typo.stderr


def test_ledger_env_variable_is_used(cli, tmp_path, monkeypatch):
    url = str(tmp_path / "env.sqlite")
    seed(url)
    monkeypatch.setenv("DPRELEASE_LEDGER", url)
    result = cli("ledger", "--json")
    assert json.loads(result.stdout)["ledger"]["source"] == "$DPRELEASE_LEDGER"
    assert json.loads(result.stdout)["datasets"][0]["name"] == "acs"


def test_budget_changes_name_their_unit_beside_the_figure_under_the_units_key(cli, tmp_path):
    """`dprelease ledger --json`: each budget change is a typed record naming its unit (ρ under
    zCDP terms, ε and δ under (ε, δ) terms), beside the figure under its unit's key ("rho"
    under zCDP terms, "epsilon" otherwise; up to 0.2.0 "epsilon" held a ρ too); an (ε, δ) cap changed without --delta keeps its δ."""
    url = str(make_ledger(tmp_path / "l.sqlite"))
    for args in (("z", "--rho", "2", "--create"), ("z", "--rho", "5/2"),
                 ("a", "--epsilon", "1", "--delta", "1e-6", "--create"), ("a", "--epsilon", "3/2"),
                 ("p", "--epsilon", "4", "--create")):
        done = cli("ledger", "set-budget", args[0], *args[1:], "--reason", "x", "--ledger", url)
        assert done.code == 0, done
    data = json.loads(cli("ledger", "--ledger", url, "--json").stdout)
    changes = {d["name"]: [(c["rho" if d["name"] == "z" else "epsilon"], c["cap"]) for c in d["budget_changes"]]
               for d in data["datasets"]}
    assert changes == {
        "z": [("2", {"rho": "2"}), ("5/2", {"rho": "5/2"})],
        "a": [("1", {"epsilon": "1", "delta": "1/1000000"}), ("3/2", {"epsilon": "3/2", "delta": "1/1000000"})],
        "p": [("4", {"epsilon": "4"})]}
    with Ledger.open(resolve_location(url)) as ledger:
        ledger.reserve(dataset="z", release="r1", charges=[("t", ZCDP(Fraction(1, 8)))], spec_fingerprint="f",
                       lifetime_from_spec=None, terms=ledger.state("z").terms)
    data = json.loads(cli("ledger", "--ledger", url, "--json").stdout)
    [z] = [d for d in data["datasets"] if d["name"] == "z"]
    assert [(t["rho"], t["charge"]) for r in z["releases"] for t in r["tables"]] == [("1/8", {"rho": "1/8"})]
    with Ledger.open(resolve_location(url)) as ledger:
        assert [c.budget for c in ledger.state("z").caps] == [ZCDP(2), ZCDP(Fraction(5, 2))]
        assert ledger.state("a").budget == ApproxDP(Fraction(3, 2), Fraction(1, 10**6))


def test_plan_json_names_the_unit_of_each_recorded_cap(cli, tmp_path):
    from tests.conftest import SPECS, write_spec

    url = str(make_ledger(tmp_path / "l.sqlite"))
    spec = write_spec(tmp_path, (SPECS / "good" / "three_tables.yaml").read_text())
    for args in (("--epsilon", "4", "--create"), ("--epsilon", "10")):  # the spec says 10
        assert cli("ledger", "set-budget", "three-tables-data", *args, "--reason", "x", "--ledger", url).code == 0
    plan = json.loads(cli("plan", spec, "--json", "--ledger", url).stdout)
    assert [(c["epsilon"], c["cap"]) for c in plan["lifetime"]["changes"]] == [("4", {"epsilon": "4"}),
                                                                              ("10", {"epsilon": "10"})]


def test_refusals_end_with_the_fix(cli, tmp_path):
    """Issue 29, point 9: a re-run of a committed release (a new `release:`), over the lifetime
    budget (a smaller release, or a recorded cap raise on the spec's own ledger), over the release
    budget (the planner's split), a release directory already there; nothing spent."""
    from tests.conftest import shipped_project

    configs = shipped_project(tmp_path)
    demo = configs / "acs_demo.yaml"
    out = ("--output-dir", tmp_path / "out", "--orchestrator", "inline")
    assert cli("run", demo, *out).code == 0
    again = cli("run", demo, *out)
    assert again.code == 4 and "to publish this data again, name a new release (`release:` in " \
        f"{demo})" in again.stderr, again.stderr

    text = demo.read_text()  # ε 4 in all: 3 are left of the lifetime's 4
    for old, new in (("release: acs-demo-2019", "release: acs-demo-late"), ("budget: {epsilon: 1}", "budget: {epsilon: 4}"),
                     ("epsilon: 0.25\n", "epsilon: 0.75\n"), ('epsilon: "0.25"', 'epsilon: "0.75"'),
                     ("epsilon: 1/5", "epsilon: 3/5"), ("epsilon: 0.3\n", "epsilon: 1.9\n")):
        assert old in text, old
        text = text.replace(old, new)
    (configs / "late.yaml").write_text(text)
    over = cli("run", configs / "late.yaml", *out)
    assert over.code == 3, over.stderr
    assert "Fix: a release of at most the remaining 3 ε (lower its tables' ε), or, as a recorded decision, raise " \
        "the dataset's cap: `dprelease ledger set-budget nist-acs-national-2019 --epsilon NEW_CAP --reason TEXT " \
        f"--ledger sqlite:///{tmp_path}/ledgers/nist-acs.sqlite`." in over.stderr, over.stderr

    (configs / "split.yaml").write_text(text.replace("acs-demo-late", "acs-demo-split")
                                        .replace("\nbudget: {epsilon: 4}", "\nbudget: {epsilon: 1}"))
    split = cli("run", configs / "split.yaml", *out)
    assert split.code == 3 and "Fix: lower the tables' ε in split.yaml to sum to at most the release budget (1; " \
        f"`dprelease plan {configs / 'split.yaml'} --allocate` proposes a split), or raise `budget:`." in split.stderr

    (tmp_path / "out" / "acs-demo-there").mkdir()
    (configs / "there.yaml").write_text(demo.read_text().replace("acs-demo-2019", "acs-demo-there"))
    exists = cli("run", configs / "there.yaml", *out)
    assert exists.code == 4 and "Name a new release (`release:` in " in exists.stderr \
        and "or publish into another output directory (--output-dir)" in exists.stderr, exists.stderr
    ledger = Ledger.open(resolve_location(f"{tmp_path}/ledgers/nist-acs.sqlite"))
    assert ledger is not None
    try:
        assert ledger.state("nist-acs-national-2019").spent == PureDP(Fraction(1))  # the refusals spent nothing
    finally:
        ledger.close()


def test_a_releases_manifest_and_reports_carry_the_warnings_its_plan_shows(cli, tmp_path):
    """Issue 29, point 4: `plan` warned that a table re-measures the same people, while the
    release's report said "Warnings: None" (a scheduled release's too): the manifest, and so every
    report, now carries them, in plan's order."""
    from tests.conftest import shipped_project

    configs = shipped_project(tmp_path)
    demo = configs / "acs_demo.yaml"
    out = ("--output-dir", tmp_path / "out", "--orchestrator", "inline")
    assert cli("run", demo, *out).code == 0
    again = configs / "again.yaml"
    again.write_text(demo.read_text().replace("release: acs-demo-2019", "release: acs-demo-again"))
    planned = cli("plan", again, "--json")
    assert planned.code == 0, planned
    shown = json.loads(planned.stdout)["warnings"]
    assert any("table puma_by_sex was already released in release acs-demo-2019" in w for w in shown), shown
    assert cli("run", again, *out).code == 0
    manifest = json.loads((tmp_path / "out" / "acs-demo-again" / "manifest.json").read_text())
    assert manifest["warnings"] == shown
    report = cli("report", tmp_path / "out" / "acs-demo-again", "--format", "md")
    assert report.code == 0 and "table puma_by_sex was already released in release acs-demo-2019" in report.stdout
