"""A lifetime budget starts only by a deliberate, recorded act (issue 27, cases 1–4).

No command but ``dprelease ledger init`` creates a ledger from a spec's pin, ``$DPRELEASE_LEDGER``
or the per-user default (``dprelease run --ledger LOCATION`` typed for a spec that pins none is the
one other way, and says so first); a pin is a pin; a copied spec or a second clone is refused;
the key file a deleted ledger left is honoured whatever ``$DPRELEASE_LEDGER_KEY`` says. Every
refusal names the location, the command that creates a ledger there, and that nothing was created
or spent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dprelease.ledger import Ledger, default_path, resolve_location
from tests.conftest import ROOT, shipped_project
from tests.ledgers import make_ledger, remove_ledger

NOTHING = "Nothing was created or spent."


def runs_in(path: Path) -> list[tuple[str, str]]:
    opened = Ledger.open(resolve_location(str(path)))
    if opened is None:
        return []
    with opened:
        return [(name, r.release) for name in opened.datasets() for r in opened.state(name).runs]


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """The demo in a fresh clone; no $DPRELEASE_LEDGER (the spec's pin decides)."""
    monkeypatch.delenv("DPRELEASE_LEDGER")
    return shipped_project(tmp_path / "clone", ledger=False) / "acs_demo.yaml"


def run(cli, spec: Path, *args: str | Path):
    return cli("run", spec, "--orchestrator", "inline", *args)


# ---------------------------------------------------------------- the precedence, once


def test_the_precedence_of_every_source(tmp_path, monkeypatch):
    """Every source of a ledger location, alone and together: a spec's pin wins over the variable
    (noted as ignored); --ledger away from a pin is kept apart (allowed only to a ledger that
    records the dataset, checked when it is opened); without a pin: --ledger, the variable, the
    default; only a typed --ledger without a pin may create a ledger (for `run`)."""
    spec_dir, env, typed = tmp_path / "specs", str(tmp_path / "env.sqlite"), str(tmp_path / "typed.sqlite")
    pinned = spec_dir / "pin.sqlite"
    monkeypatch.delenv("DPRELEASE_LEDGER")
    cases = {  # (--ledger, $DPRELEASE_LEDGER, ledger:) → (path, source, pin, env ignored, may create)
        (None, None, None): (default_path(), "default", None, False, False),
        (None, None, "pin.sqlite"): (pinned, "spec ledger:", None, False, False),
        (None, env, None): (Path(env), "$DPRELEASE_LEDGER", None, False, False),
        (None, env, "pin.sqlite"): (pinned, "spec ledger:", None, True, False),
        (typed, None, None): (Path(typed), "--ledger", None, False, True),
        (typed, env, None): (Path(typed), "--ledger", None, False, True),
        (typed, None, "pin.sqlite"): (Path(typed), "--ledger", pinned, False, False),
        (typed, env, "pin.sqlite"): (Path(typed), "--ledger", pinned, False, False),
        (str(pinned), env, "pin.sqlite"): (pinned, "spec ledger:", None, False, False),  # --ledger = the pin
    }
    for (cli, variable, pin), (path, source, away, ignored, creatable) in cases.items():
        if variable is None:
            monkeypatch.delenv("DPRELEASE_LEDGER", raising=False)
        else:
            monkeypatch.setenv("DPRELEASE_LEDGER", variable)
        location = resolve_location(cli, pin, spec_dir)
        assert (location.sqlite_path, location.source) == (path, source), (cli, variable, pin)
        assert location.pin_shown == (None if away is None else f"sqlite:///{away}"), (cli, variable, pin)
        assert (location.env_ignored, location.may_create) == (ignored, creatable), (cli, variable, pin)


# ---------------------------------------------------------------- case 1: a copied spec


def test_a_copied_spec_is_refused_and_creates_nothing(clone, cli):
    """`cp configs/x.yaml drafts/ && dprelease run drafts/x.yaml`: the relative pin now points under
    drafts/, where no ledger is; refused, nothing created, nothing published."""
    drafts = clone.parent.parent / "drafts"
    drafts.mkdir()
    copied = drafts / "acs_demo.yaml"
    copied.write_text(clone.read_text().replace("path: ../data/", f"path: {clone.parent.parent}/data/")
                      .replace("domain_file: domains/", f"domain_file: {clone.parent}/domains/"))
    result = run(cli, copied)
    assert result.code == 2, result
    message = result.stderr
    assert f"{copied} pins its dataset's ledger at sqlite:///{drafts.parent / 'ledgers' / 'nist-acs.sqlite'}" in message
    assert f"(ledger: ../ledgers/nist-acs.sqlite, relative to the spec's folder {drafts})" in message
    assert f"dprelease ledger init --spec {copied} --reason TEXT" in message and NOTHING in message
    assert "Traceback" not in result.output
    assert not (drafts.parent / "ledgers").exists() and not (drafts.parent / "outputs").exists()
    for command in (("plan", copied), ("plan", copied, "--approve", "--by", "A"), ("schedule", copied, "--cron",
                                                                                    "0 3 1 * *")):
        refused = cli(*command)
        assert refused.code == 2 and "pins its dataset's ledger" in refused.stderr and NOTHING in refused.stderr, command
    assert not (drafts.parent / "ledgers").exists()


# ---------------------------------------------------------------- case 2: a second clone


def test_a_second_clone_needs_the_deliberate_step(clone, cli):
    """The README's main command without `ledger init` is refused on a fresh clone (nothing
    created); with it, the demo publishes, and its ledger, manifest and report say where its budget
    lives and how that ledger was born."""
    refused = run(cli, clone)
    assert refused.code == 2 and "there is no ledger there" in refused.stderr and NOTHING in refused.stderr, refused
    ledger = clone.parent.parent / "ledgers" / "nist-acs.sqlite"
    assert not ledger.parent.exists() and not (clone.parent.parent / "outputs").exists()

    born = cli("ledger", "init", "--spec", clone, "--reason", "the demo's own budget", "--by", "Grace")
    assert born.code == 0, born
    assert "created ledger id " in born.stdout and f"at sqlite:///{ledger}" in born.stdout
    assert "by Grace (dprelease ledger init): the demo's own budget" in born.stdout
    assert oct(ledger.stat().st_mode & 0o777) == "0o600"
    again = cli("ledger", "init", "--spec", clone, "--reason", "twice")  # nothing done, said
    assert again.code == 0 and "already at" in again.stderr and "nothing was created" in again.stderr

    published = run(cli, clone)
    assert published.code == 0, published
    release = clone.parent.parent / "outputs" / "acs-demo-2019"
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["ledger"]["born"]["by"] == "Grace"
    assert manifest["ledger"]["born"]["reason"] == "the demo's own budget"
    assert manifest["ledger"]["location"] == f"sqlite:///{ledger}"
    report = (release / "budget_report.md").read_text()
    assert f"at `sqlite:///{ledger}`" in report and "by Grace (dprelease ledger init): the demo's own budget" in report
    shown = cli("ledger", "--spec", clone, "--json")
    assert json.loads(shown.stdout)["ledger"]["born"]["reason"] == "the demo's own budget"
    assert "born " in shown.stderr and "by Grace" in shown.stderr


# ---------------------------------------------------------------- case 3: $DPRELEASE_LEDGER


def test_the_variable_never_overrides_a_pin(clone, cli, monkeypatch, tmp_path):
    """$DPRELEASE_LEDGER left in a profile: the spec's pin is used (and the variable said to be
    ignored); no ledger is created where the variable points."""
    make_ledger(clone.parent.parent / "ledgers" / "nist-acs.sqlite")
    elsewhere = tmp_path / "other-project" / "ledger.sqlite"
    monkeypatch.setenv("DPRELEASE_LEDGER", str(elsewhere))
    result = run(cli, clone)
    assert result.code == 0, result
    assert "$DPRELEASE_LEDGER is set but not used" in result.stderr and "a pin is a pin" in result.stderr
    assert "(chosen by the spec's ledger: key)" in result.stderr
    assert not elsewhere.parent.exists()
    assert runs_in(clone.parent.parent / "ledgers" / "nist-acs.sqlite") == [("nist-acs-national-2019", "acs-demo-2019")]


def test_the_variable_never_creates_a_ledger(cli, tmp_path, isolated_ledger):
    """A spec that pins none, the variable naming a location with no ledger: refused."""
    remove_ledger(isolated_ledger)
    spec = tmp_path / "s.yaml"
    spec.write_text((ROOT / "tests" / "specs" / "good" / "three_tables.yaml").read_text())
    for command in (("run", spec, "--orchestrator", "inline"), ("plan", spec), ("plan", spec, "--approve")):
        result = cli(*command)
        assert result.code == 2, (command, result)
        assert f"there is no ledger at sqlite:///{isolated_ledger} (chosen by the $DPRELEASE_LEDGER environment " \
               "variable), and a variable never creates one" in result.stderr
        assert f"dprelease ledger init sqlite:///{isolated_ledger} --reason TEXT" in result.stderr
        assert NOTHING in result.stderr
    assert not isolated_ledger.exists()


# ---------------------------------------------------------------- case 4: the key file left behind


def test_a_deleted_pinned_ledger_is_not_recreated_whatever_the_key_variable(clone, cli, monkeypatch, tmp_path):
    """The pinned ledger was moved away; its key file is still beside where it was. With
    $DPRELEASE_LEDGER_KEY set (a team's key elsewhere), neither a run nor `ledger init` starts a
    fresh ledger there."""
    import dprelease.ledger.schema as schema

    monkeypatch.setattr(schema, "CREATION_WAIT", 0.2)  # the wait for a concurrent creator
    ledger = make_ledger(clone.parent.parent / "ledgers" / "nist-acs.sqlite")
    ledger.rename(tmp_path / "moved.sqlite")
    key = Path(str(ledger) + ".key")
    shutil.copy(key, tmp_path / "team.key")
    monkeypatch.setenv("DPRELEASE_LEDGER_KEY", str(tmp_path / "team.key"))
    refused = run(cli, clone)
    assert refused.code == 2 and f"there is no ledger at sqlite:///{ledger}" in refused.stderr, refused
    assert f"but its fingerprint key {key} is there: the ledger was moved or deleted" in refused.stderr
    assert "Restore it from a backup" in refused.stderr and NOTHING in refused.stderr
    init = cli("ledger", "init", "--spec", clone, "--reason", "start again")
    assert init.code == 2 and f"{key} exists but the ledger {ledger} does not" in init.stderr, init
    assert not ledger.exists()


# ---------------------------------------------------------------- --ledger: typed, and away from a pin


def test_a_typed_ledger_away_from_a_pin_must_record_the_dataset(clone, cli, tmp_path):
    """--ledger naming another location than the spec's pin: refused where no ledger is, or where
    the ledger does not record the dataset; allowed to the dataset's ledger that moved."""
    pinned = make_ledger(clone.parent.parent / "ledgers" / "nist-acs.sqlite")
    assert run(cli, clone).code == 0
    fresh = tmp_path / "fresh.sqlite"
    refused = run(cli, clone, "--ledger", fresh)
    assert refused.code == 2 and "--ledger" in refused.stderr and "there is no ledger there" in refused.stderr
    assert "A pin is a pin" in refused.stderr and NOTHING in refused.stderr and not fresh.exists()
    other = make_ledger(tmp_path / "other.sqlite")
    refused = run(cli, clone, "--ledger", other)
    assert refused.code == 2 and "does not record dataset 'nist-acs-national-2019'" in refused.stderr
    assert runs_in(other) == []
    moved = tmp_path / "moved" / "ledger.sqlite"  # the dataset's ledger moved: named by --ledger, it is used
    moved.parent.mkdir()
    shutil.move(pinned, moved)
    shutil.move(str(pinned) + ".key", str(moved) + ".key")
    known = cli("ledger", "--spec", clone, "--ledger", moved, "--json")
    assert json.loads(known.stdout)["datasets"][0]["name"] == "nist-acs-national-2019"
    again = run(cli, clone, "--ledger", moved)
    assert again.code == 4 and "already" in again.stderr  # its record is there: a re-run is refused as released


def test_a_typed_ledger_for_an_unpinned_spec_says_first_that_budgets_start_there(cli, tmp_path, monkeypatch):
    """`dprelease run --ledger LOCATION` of a spec that pins none is the one run that may create a
    ledger: its first line says every lifetime budget starts there, and the birth is recorded."""
    from tests.test_budget_identity import demo_copy

    monkeypatch.delenv("DPRELEASE_LEDGER")
    spec = demo_copy(tmp_path, ledger=None)
    typed = tmp_path / "typed" / "l.sqlite"
    result = run(cli, spec, "--ledger", typed, "--output-dir", tmp_path / "out")
    assert result.code == 0, result
    first = result.stderr.splitlines()[0]
    assert first.startswith("ledger id ") and f": sqlite:///{typed} (chosen by the --ledger option) — created now: " \
                                                "every lifetime budget of the datasets it records starts here" in first
    with Ledger.open(resolve_location(str(typed))) as opened:
        assert opened.birth is not None and opened.birth.how == "dprelease run --ledger"
        assert str(spec) in opened.birth.reason


# ---------------------------------------------------------------- nothing else creates one


def test_no_other_command_creates_a_ledger(clone, cli, tmp_path):
    """randomize, register-answers, evaluate, set-budget --create, plan --approve and schedule, at a
    pin or --ledger where no ledger is: refused, nothing created."""
    from tests.test_local import write_spec as local_spec

    local = local_spec(tmp_path)
    local.write_text(local.read_text().replace("\nbudget:", "\nledger: ledgers/local.sqlite\nbudget:", 1))
    answers = tmp_path / "answers.csv"
    answers.write_text("ID,FAVOURITE,SMOKES\nr1,a,yes\n")
    nowhere = tmp_path / "nowhere.sqlite"
    commands = [
        ("randomize", local, "smokers", "--input", answers, "--output", tmp_path / "r.csv", "--id", "ID"),
        ("ledger", "register-answers", local, "smokers", "--answers", answers, "--statement", "phones"),
        ("evaluate", clone),
        ("plan", clone, "--approve", "--by", "A"),
        ("ledger", "set-budget", "x", "--epsilon", "1", "--reason", "r", "--create", "--ledger", nowhere),
        ("ledger", "--ledger", nowhere, "set-budget", "x", "--epsilon", "1", "--reason", "r", "--create"),
        ("ledger", "--ledger", nowhere, "require-approval", "x", "--reason", "r"),
    ]
    for command in commands:
        result = cli(*command)
        assert result.code == 2, (command, result)
        assert "ledger init" in result.stderr and "Nothing was created" in result.stderr, (command, result)
        assert "Traceback" not in result.output
    assert not (tmp_path / "ledgers").exists() and not (clone.parent.parent / "ledgers").exists()
    assert not nowhere.exists() and not (tmp_path / "r.csv").exists()


def test_a_ledger_opened_away_from_where_it_was_born_is_said(cli, tmp_path):
    """`cp -a` of a project copies its ledger: two ledgers, one id, each spending the same
    people's budget. Where a ledger is opened at another place than it was created, every command
    says so (moved: fine; copied: keep one)."""
    born = make_ledger(tmp_path / "a" / "l.sqlite")
    here = cli("ledger", "--ledger", born)
    assert "was created at" not in here.stderr
    copy = tmp_path / "b" / "l.sqlite"
    copy.parent.mkdir()
    shutil.copy(born, copy)
    shutil.copy(str(born) + ".key", str(copy) + ".key")
    moved = cli("ledger", "--ledger", copy)
    assert moved.code == 0
    assert f"was created at sqlite:///{born} and is opened at sqlite:///{copy}" in moved.stderr, moved.stderr
    assert "if it was copied" in moved.stderr and "keep one" in moved.stderr


def test_messages_name_what_is_there(clone, cli):
    """No ledger yet: `ledger --spec` says so (not "not in the ledger"); a SQLite URL of three
    slashes names a relative path: the fix is the fourth slash, not a path under the cwd."""
    shown = cli("ledger", "--spec", clone)
    assert shown.code == 2 and "there is no ledger at" in shown.stderr and "ledger init" in shown.stderr, shown
    relative = cli("ledger", "init", "sqlite:///tmp/x/l.sqlite", "--reason", "r")
    assert relative.code == 2 and "an absolute path takes four: sqlite:////tmp/x/l.sqlite" in relative.stderr, relative


def test_a_budget_started_on_the_variables_word_is_said(cli, tmp_path):
    """A spec that pins none, $DPRELEASE_LEDGER naming an existing ledger that does not know the
    dataset: the run says, before anything is reserved, that the budget starts there on the
    variable's word; a second run of the same dataset does not repeat it."""
    from tests.test_budget_identity import demo_copy

    spec = demo_copy(tmp_path, ledger=None)
    first = run(cli, spec, "--output-dir", tmp_path / "out")
    assert first.code == 0, first
    said = first.stderr.index("is new to ledger id")
    assert "which only $DPRELEASE_LEDGER chose (the spec pins no ledger)" in first.stderr
    assert said < first.stderr.index("reserved ")
    again = run(cli, demo_copy(tmp_path, ledger=None, release="acs-demo-2019-b"), "--output-dir", tmp_path / "out")
    assert again.code == 0 and "is new to ledger" not in again.stderr, again
