"""Local answers carry provenance (issue 19, item 3): a kind: local table reads only answers the
ledger registers — the output of `dprelease randomize`, or answers registered with a statement
of who randomized them and how — and never a column of a dataset with central releases;
memoised: true costs nothing new only when the registration says the answers came from that
memo."""

from __future__ import annotations

import csv
import json
from fractions import Fraction

import numpy as np
import pytest

from dprelease.accounting import PureDP, Terms
from dprelease.accounting import ln_upper_bound
from dprelease.data import file_fingerprint
from dprelease.errors import LedgerError
from dprelease.ledger import Ledger, LocalCollection, resolve_location
from dprelease.mechanisms.local import coin_flip, randomize
from tests.ledgers import untouched, make_ledger
from tests.conftest import ROOT
from tests.test_local import LETTERS, randomized_answers, read_csv, true_answers, write_spec
from tests.test_run import run
from tests.ledgers import init_at

DATA = ROOT / "data" / "nist_acs" / "national2019.csv"  # the confidential ACS excerpt (27,253 persons)

RACE = """\
release: {release}
dataset:
  name: {dataset}
  path: {data}
  lifetime_budget: {{epsilon: 1}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  RAC1P: {{domain: [1, 2, 3, 4, 5, 6, 7, 8, 9]}}
tables:
  - name: race
    kind: local
    column: RAC1P
    protocol: k_rr
    epsilon_local: 2
    collection: race-2019
"""


def race_spec(tmp_path, data, name="race.yaml", release="acs-race-local", dataset="acs-race-survey"):
    path = tmp_path / name
    path.write_text(RACE.format(release=release, dataset=dataset, data=data))
    return path


def opened(ledger):
    return Ledger.open(resolve_location(str(ledger)))


def run_ids(ledger):
    found = opened(ledger)
    if found is None:
        return set()
    try:
        return found.run_ids()
    finally:
        found.close()


def test_a_local_table_over_a_raw_confidential_column_is_refused_and_a_randomize_collection_accepted(
        tmp_path, release_env, cli):
    """kind: local on RAC1P of the confidential ACS file would publish its exact counts (a
    2-person cell included) with central ε = 0: refused, exit 2, nothing reserved. The same column
    randomized by `dprelease randomize` is registered answers: accepted and published."""
    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out"
    raw = race_spec(tmp_path, DATA, name="raw.yaml")
    refused = run(raw, "--output-dir", out, "--ledger", ledger, env=release_env)
    assert refused.returncode == 2, refused.stderr
    assert "table race ('RAC1P') in this data file match no registered answers of collection 'race-2019'" \
        in refused.stderr, refused.stderr
    assert "`dprelease randomize SPEC TABLE" in refused.stderr and "register-answers" in refused.stderr
    assert "new dataset name" not in refused.stderr and "Nothing was spent" in refused.stderr
    assert run_ids(ledger) == set() and not (out / "acs-race-local").exists()

    answers = tmp_path / "race-answers.csv"
    randomized = race_spec(tmp_path, answers, name="randomized.yaml")
    done = cli("randomize", randomized, "race", "--input", DATA, "--output", answers, "--ledger", ledger)
    assert done.code == 0 and "registered" in done.stderr, done
    truth = [r["RAC1P"] for r in csv.DictReader(DATA.open())]
    reported = [r["RAC1P"] for r in read_csv(answers)]
    assert len(reported) == len(truth) and np.mean(np.array(truth) == np.array(reported)) < 0.9  # randomized
    proc = run(randomized, "--output-dir", out, "--ledger", ledger, env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = out / "acs-race-local"
    rows = read_csv(release / "tables" / "race.csv")
    assert [r["RAC1P"] for r in rows] == [str(v) for v in range(1, 10)]
    assert sum(int(r["answers"]) for r in rows) == len(truth)
    local = json.loads((release / "manifest.json").read_text())["local_tables"][0]
    assert local["provenance"]["how"] == "dprelease randomize" and local["provenance"]["memo_of"] is None
    assert local["charged_per_respondent"] == "2"


def _central_release_of_the_acs_file(ledger_path):
    """What a published central release of the ACS file leaves in the ledger (no Prefect needed)."""
    ledger = init_at(resolve_location(str(ledger_path)))
    keyed = ledger.fingerprint(file_fingerprint(DATA))
    ledger.reserve(dataset="nist-acs", release="central-1", charges=[("counts", PureDP(Fraction(1, 2)))],
                   spec_fingerprint="x", lifetime_from_spec=PureDP(Fraction(4)), data_fingerprint=keyed)
    return ledger, keyed


def test_a_column_of_a_dataset_with_central_releases_is_never_local_answers(tmp_path, cli):
    """The ACS file has a central release: randomizing it (any dataset name), registering it as
    answers, a local table of that dataset by name, and a local collection over that data are all
    refused; none advises a new dataset name."""
    ledger_path = tmp_path / "ledger.sqlite"
    ledger, keyed = _central_release_of_the_acs_file(ledger_path)
    answers = tmp_path / "race-answers.csv"
    spec = race_spec(tmp_path, answers)
    refused = cli("randomize", spec, "race", "--input", DATA, "--output", answers, "--ledger", ledger_path)
    assert refused.code == 2 and "is the data of dataset 'nist-acs'" in refused.stderr, refused
    assert not answers.exists()
    registered = cli("ledger", "register-answers", race_spec(tmp_path, DATA, name="direct.yaml"), "race", "--answers",
                     DATA, "--statement", "the respondents randomized it", "--ledger", ledger_path)
    assert registered.code == 2 and "has central releases (release 'central-1'" in registered.stderr, registered
    by_name = race_spec(tmp_path, answers, name="by-name.yaml", dataset="nist-acs")
    planned = cli("plan", by_name, "--ledger", ledger_path)
    assert planned.code == 2 and "dataset 'nist-acs' has central releases" in planned.stderr, planned
    for result in (refused, registered, planned):
        assert "new dataset name" not in result.stderr
    asked = LocalCollection("race-2019", "RAC1P", "k_rr:2/k=9", Fraction(2), answers=keyed)
    with pytest.raises(LedgerError, match="already released as dataset 'nist-acs'"):  # the same data, another name
        ledger.reserve(dataset="acs-race-survey", release="r", charges=[], spec_fingerprint="x",
                       lifetime_from_spec=PureDP(Fraction(1)), terms=Terms("pure", change=True), local=(asked,),
                       data_fingerprint=keyed)
    with pytest.raises(LedgerError, match="'nist-acs' \\(this very data file\\) has central releases"):
        ledger.reserve(dataset="acs-race-survey", release="r", charges=[], spec_fingerprint="x",  # the answers' own
                       lifetime_from_spec=PureDP(Fraction(1)), terms=Terms("pure", change=True), local=(asked,))
    assert [a for a in ledger.answer_sets()] == []
    assert len(ledger.run_ids()) == 1
    ledger.close()


def test_fresh_answers_claimed_as_memoised_are_charged_as_a_fresh_collection(tmp_path, release_env, cli):
    """Wave 2 says memoised: true, memo_of: wave-1, but its answers were randomized afresh and
    independently: each respondent's loss is wave 1's ε plus wave 2's. The ledger charges wave 2
    its full ε (never 0) and the manifest says so."""
    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out"
    true_answers(tmp_path / "true.csv", n=300)
    wave1 = write_spec(tmp_path)
    randomized_answers(cli, wave1, ledger, tmp_path / "true.csv", tmp_path / "answers.csv", memo=tmp_path / "memo")
    assert run(wave1, "--output-dir", out, "--ledger", ledger, env=release_env).returncode == 0
    fresh = write_spec(tmp_path, release="survey-wave-2", collection="wave-2", data="answers2.csv", name="fresh.yaml")
    randomized_answers(cli, fresh, ledger, tmp_path / "true.csv", tmp_path / "answers2.csv")  # no memo
    claimed = write_spec(tmp_path, release="survey-wave-2", collection="wave-2", memoised="true",
                         data="answers2.csv", name="claimed.yaml")
    proc = run(claimed, "--output-dir", out, "--ledger", ledger, env=release_env)
    assert proc.returncode == 0, proc.stderr
    assert "says memoised: true, but its registered answers were not produced from the memo" in proc.stderr
    state = opened(ledger).state("survey-panel")
    charged = {(r.collection, r.question): (r.charged, r.memoised) for r in state.local}
    ln3 = ln_upper_bound(3)
    assert charged[("wave-2", "FAVOURITE")] == (PureDP(1), False)
    assert charged[("wave-2", "SMOKES")] == (PureDP(ln3), False)
    assert state.local_epsilon == PureDP(2 * (1 + ln3))  # each respondent's true loss: both waves
    manifest = json.loads((out / "survey-wave-2" / "manifest.json").read_text())
    for t in manifest["local_tables"]:
        assert t["memoised"] is False and "charged as a fresh collection" in t["memo_not_honoured"]
        assert Fraction(t["charged_per_respondent"]) > 0
    assert Fraction(manifest["local_epsilon_per_respondent"]["after"]) == 2 * (1 + ln3)
    assert "charged as a fresh collection" in (out / "survey-wave-2" / "budget_report.md").read_text()


def test_answers_registered_with_a_statement_are_accepted_shown_and_refused_once_changed(tmp_path, release_env, cli):
    """Answers randomized on the respondents' devices are registered with a statement of who
    randomized them and how: the run accepts them, and the statement is in `dprelease ledger`
    (text and --json), the manifest and the budget report. The file changed after registration
    matches no registration: refused, nothing reserved."""
    ledger, out = make_ledger(tmp_path / "ledger.sqlite"), tmp_path / "out"
    data = np.random.default_rng(5)  # the devices' true answers (test data)
    favourite = randomize(data.choice(10, size=400), 10, Fraction(1))
    smokes = coin_flip((data.random(400) < 0.2).astype(np.int64))
    answers = tmp_path / "answers.csv"
    with answers.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["ID", "FAVOURITE", "SMOKES"])
        writer.writerows((f"d{i}", LETTERS[a], "yes" if b else "no") for i, (a, b) in enumerate(zip(favourite, smokes)))
    spec = write_spec(tmp_path)
    statement = "randomized on the respondents' phones by SurveyApp 4.2 (k-RR, ε = 1; the coin flip)"
    missing = cli("ledger", "register-answers", spec, "favourite", "--answers", answers, "--statement", " ",
                  "--ledger", ledger)
    assert missing.code == 2 and "--statement" in missing.stderr, missing
    wrong_memo = cli("ledger", "register-answers", spec, "favourite", "--answers", answers, "--statement", statement,
                     "--memo-of", "wave-0", "--ledger", ledger)
    assert wrong_memo.code == 2 and "is not memoised" in wrong_memo.stderr, wrong_memo
    for table in ("favourite", "smokers"):
        done = cli("ledger", "register-answers", spec, table, "--answers", answers, "--statement", statement,
                   "--by", "Field team", "--ledger", ledger)
        assert done.code == 0 and statement in done.stdout, done
    again = cli("ledger", "register-answers", spec, "smokers", "--answers", answers, "--statement", statement,
                "--ledger", ledger)
    assert again.code == 2 and "already registered" in again.stderr, again
    shown = cli("ledger", "--ledger", ledger)
    assert shown.code == 0 and f"registered: {statement} (by Field team" in shown.stdout, shown
    listed = json.loads(cli("ledger", "--ledger", ledger, "--json").stdout)["answer_sets"]
    assert [(a["question"], a["how"], a["statement"], a["registered_by"]) for a in listed] == [
        ("FAVOURITE", "registered", statement, "Field team"), ("SMOKES", "registered", statement, "Field team")]
    assert all("hmac" not in json.dumps(a) and "sha256" not in json.dumps(a) for a in listed)  # no fingerprints

    proc = run(spec, "--output-dir", out, "--ledger", ledger, env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = out / "survey-wave-1"
    manifest = json.loads((release / "manifest.json").read_text())
    for t in manifest["local_tables"]:
        assert t["provenance"]["how"] == "registered" and t["provenance"]["statement"] == statement
        assert t["provenance"]["registered_by"] == "Field team"
    assert statement in (release / "budget_report.md").read_text()

    before = run_ids(ledger)
    answers.write_text(answers.read_text() + "d400,a,no\n")  # changed after its registration
    changed = write_spec(tmp_path, release="survey-wave-1-b", name="changed.yaml")
    refused = run(changed, "--output-dir", out, "--ledger", ledger, env=release_env)
    assert refused.returncode == 2 and "match no registered answers" in refused.stderr, refused.stderr
    assert run_ids(ledger) == before and not (out / "survey-wave-1-b").exists()


def test_central_and_local_answers_never_mix(tmp_path, cli):
    """A release with central and local tables over one file is refused before reserving; the
    ledger refuses a central release over a registered answers file, and in a dataset that holds
    local collections."""
    true_answers(tmp_path / "true.csv", n=50)
    mixed = write_spec(tmp_path, name="mixed.yaml")
    mixed.write_text(mixed.read_text() + "  - {name: by_smokes, group_by: [SMOKES], epsilon: 1/2}\n")
    ledger_path = tmp_path / "ledger.sqlite"
    randomized_answers(cli, mixed, ledger_path, tmp_path / "true.csv", tmp_path / "answers.csv")
    refused = cli("run", mixed, "--output-dir", tmp_path / "out", "--ledger", ledger_path)
    assert refused.code == 2 and "central tables and kind: local tables over one data file" in refused.stderr, refused
    assert run_ids(ledger_path) == set()

    ledger = opened(ledger_path)
    keyed = ledger.fingerprint(file_fingerprint(tmp_path / "answers.csv"))
    with pytest.raises(LedgerError, match="holds local collections .* this very file"):
        ledger.reserve(dataset="survey-central", release="c", charges=[("t", PureDP(Fraction(1)))],
                       spec_fingerprint="x",
                       lifetime_from_spec=PureDP(Fraction(1)), data_fingerprint=keyed)
    asked = LocalCollection("wave-1", "FAVOURITE", "k_rr:1/k=10", Fraction(1), answers=keyed)
    ledger.reserve(dataset="survey-panel", release="l", charges=[], spec_fingerprint="x",
                   lifetime_from_spec=PureDP(Fraction(1)), terms=Terms("pure", change=True), local=(asked,),
                   data_fingerprint=keyed)
    with pytest.raises(LedgerError, match="dataset 'survey-panel' holds local collections"):
        ledger.reserve(dataset="survey-panel", release="c", charges=[("t", PureDP(Fraction(1)))], spec_fingerprint="x",
                       lifetime_from_spec=PureDP(Fraction(1)), terms=Terms("pure", change=True),
                       data_fingerprint="hmac-sha256:00")
    with pytest.raises(LedgerError, match="central tables and kind: local tables"):
        ledger.reserve(dataset="survey-panel", release="m", charges=[("t", PureDP(Fraction(1)))], spec_fingerprint="x",
                       lifetime_from_spec=PureDP(Fraction(1)), terms=Terms("pure", change=True), local=(asked,),
                       data_fingerprint=keyed)
    assert len(ledger.run_ids()) == 1
    ledger.close()


def test_randomize_needs_a_pinned_ledger_and_leaves_no_answers_it_could_not_register(tmp_path, cli, monkeypatch,
                                                                                     isolated_ledger):
    """No ledger at the per-user default and none pinned: refused (no budget starts there). A
    registration that fails leaves neither the answers nor the memo behind."""
    true_answers(tmp_path / "true.csv", n=20)
    spec = write_spec(tmp_path)
    monkeypatch.delenv("DPRELEASE_LEDGER")
    refused = cli("randomize", spec, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "o.csv")
    assert refused.code == 2 and "pin it in the spec" in refused.stderr.lower(), refused
    assert not (tmp_path / "o.csv").exists() and untouched(isolated_ledger)  # the per-user default

    def broken(self, entries, by=None, respondents=None):
        raise LedgerError("the ledger is unreachable")

    monkeypatch.setattr(Ledger, "register_answers", broken)
    failed = cli("randomize", spec, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "o.csv",
                 "--id", "ID", "--memo", tmp_path / "m.json", "--ledger", make_ledger(tmp_path / "l.sqlite"))
    assert failed.code == 2 and "unreachable" in failed.stderr, failed
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "m.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.csv")]


def test_no_refusal_advises_a_new_dataset_name():
    """Every refusal names the fix within the budget (the same dataset, a recorded cap change, a
    registered collection), never a new dataset name."""
    for path in (ROOT / "dprelease").rglob("*.py"):
        assert "new dataset name" not in path.read_text("utf-8"), path
