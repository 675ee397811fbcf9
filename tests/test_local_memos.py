"""Memos verified (issue 27, item 7): a memoised collection's answers must equal, respondent by
respondent, the answers of the collection they repeat. The ledger keeps keyed, padded digests
per respondent at that collection's registration (`randomize --id`, `register-answers --id`),
and refuses a registration (`register-answers --memo-of`, `randomize --memo`) or a run whose
answers differ, nothing registered or spent; a memo of a collection kept without digests
cannot be verified and is refused, never charged 0."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import sqlite3
from fractions import Fraction
from pathlib import Path

import sqlalchemy as sa

from dprelease.accounting import PureDP, fraction_text, ln_upper_bound
from dprelease.data import file_fingerprint
from dprelease.ledger import Ledger, resolve_location
from dprelease.ledger.schema import SCHEMA_VERSION
from tests.ledgers import make_ledger
from tests.test_ledger_compat import copy_of_the_old_ledger
from tests.test_local import LETTERS, randomized_answers, read_csv, true_answers, write_spec
from tests.test_local_provenance import opened, run_ids

PROTOCOLS = {"FAVOURITE": ("k_rr:1/k=10", "1"), "SMOKES": ("coin_flip/k=2", fraction_text(ln_upper_bound(3)))}
STATEMENT = "randomized on the respondents' phones by SurveyApp 4.2"


def run_inline(cli, spec, ledger, out):
    return cli("run", spec, "--output-dir", out, "--ledger", ledger, "--orchestrator", "inline")


def wave_one(tmp_path, cli, n=400):
    """Wave 1 randomized by `dprelease randomize --id ID --memo` (digests kept per respondent)
    and estimated by a release: the ledger and the answers file."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    true_answers(tmp_path / "true.csv", n=n)
    spec = write_spec(tmp_path)
    randomized_answers(cli, spec, ledger, tmp_path / "true.csv", tmp_path / "answers.csv", memo=tmp_path / "memo")
    published = run_inline(cli, spec, ledger, tmp_path / "out")
    assert published.code == 0, published
    return ledger, tmp_path / "answers.csv"


def wave_two(directory: Path) -> Path:
    """The spec of wave 2: memoised, memo_of: wave-1, its answers in w2.csv."""
    return write_spec(directory, release="survey-wave-2", collection="wave-2", memoised="true", data="w2.csv",
                      name="s2.yaml")


def refusal(result) -> str:  # type: ignore[no-untyped-def]
    """A refusal (exit 2): its message on one line, also printed (the report quotes it)."""
    print(result.stderr)
    assert result.code == 2, result
    return " ".join(result.stderr.split())


def write_rows(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["ID", "FAVOURITE", "SMOKES"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def register_as_before(ledger: Path, answers: Path, collection: str = "wave-2", memo_of: str = "wave-1") -> None:
    """What `register-answers --memo-of` wrote before this check existed: a registration row
    for each question, and nothing per respondent (the ledger took the memo on trust)."""
    found = opened(ledger)
    keyed = found.fingerprint(file_fingerprint(answers))
    found.close()
    with sqlite3.connect(ledger) as conn:
        for question, (protocol, epsilon) in PROTOCOLS.items():
            conn.execute("INSERT INTO answer_sets (dataset, collection, question, protocol, epsilon, answers, memo_of, "
                         "how, statement, registered_by, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'registered', ?, "
                         "'field team', '2026-01-05T00:00:00+00:00')",
                         (("survey-panel", collection, question, protocol, epsilon, keyed, memo_of, STATEMENT)))


def local_records(ledger: Path) -> list[tuple[str, str, PureDP]]:
    found = opened(ledger)
    try:
        state = found.state("survey-panel")
        return [(r.collection, r.question, r.charged) for r in state.local] if state else []
    finally:
        found.close()


def test_a_fresh_randomization_claimed_as_a_memo_is_refused_at_registration_and_at_run(tmp_path, cli):
    """The outside review's case: w2.csv repeats wave 1 but for a quarter of the respondents,
    whose SMOKES answer differs. `register-answers --memo-of wave-1` (the reviewer's command,
    without --id: the id column wave 1 was kept by) refuses it, naming the collection and the
    counts, nothing registered; the run of it is refused, nothing charged. A registration written
    before this check existed (taken on trust) is checked by the run itself: refused with the
    same counts, nothing reserved or recorded."""
    ledger, answers = wave_one(tmp_path, cli)
    rows = read_csv(answers)
    for i, row in enumerate(rows):
        if i % 4 == 0:  # exactly 100 of the 400 respondents answer otherwise
            row["SMOKES"] = "no" if row["SMOKES"] == "yes" else "yes"
    w2 = write_rows(tmp_path / "w2.csv", rows)
    s2 = wave_two(tmp_path)
    before = (run_ids(ledger), local_records(ledger), len(opened(ledger).answer_sets()))

    refused = cli("ledger", "register-answers", s2, "smokers", "--answers", w2, "--memo-of", "wave-1",
                  "--statement", STATEMENT, "--ledger", ledger)
    message = refusal(refused)
    assert ("these answers to 'SMOKES' for collection 'wave-2' do not repeat collection 'wave-1': of 400 "
            "respondents, 100 answer otherwise than in 'wave-1' and 0 are not in 'wave-1' (0 of its 400 respondents "
            "have no answer here, which is allowed)") in message, message
    assert "memoised: false, charged its ε" in message and message.endswith("Nothing was registered or spent.")
    assert (run_ids(ledger), local_records(ledger), len(opened(ledger).answer_sets())) == before

    unregistered = run_inline(cli, s2, ledger, tmp_path / "out")
    assert unregistered.code == 2 and "match no registered answers" in unregistered.stderr, unregistered
    assert (run_ids(ledger), local_records(ledger)) == before[:2]

    register_as_before(ledger, w2)  # taken on trust before this change
    at_run = run_inline(cli, s2, ledger, tmp_path / "out")
    message = refusal(at_run)
    assert ("collection 'wave-2' says memoised: true with memo_of: 'wave-1', but the answers to 'SMOKES' in this data "
            "file do not repeat collection 'wave-1': of 400 respondents, 100 answer otherwise than in 'wave-1' and 0 "
            "are not in 'wave-1'") in message, message
    assert "Nothing was spent." in message
    assert (run_ids(ledger), local_records(ledger)) == before[:2]
    assert not (tmp_path / "out" / "survey-wave-2").exists()


def test_an_exact_memo_is_accepted_and_charged_nothing_new_respondents_are_refused(tmp_path, cli):
    """Wave 2 repeats wave 1's answers, rows reordered and a tenth of the respondents absent
    (allowed): registered with --memo-of and --id, each respondent checked, and the run charges
    it 0, as before. The same memo with one respondent wave 1 never asked is refused: they
    have no earlier answer to repeat (a collection of their own), nothing registered."""
    ledger, answers = wave_one(tmp_path, cli)
    rows = [row for i, row in enumerate(read_csv(answers)) if i % 10 != 3][::-1]
    s2 = wave_two(tmp_path)
    newcomer = write_rows(tmp_path / "w2-new.csv", rows + [{"ID": "r-new", "FAVOURITE": "a", "SMOKES": "no"}])
    refused = cli("ledger", "register-answers", s2, "favourite", "--answers", newcomer, "--memo-of", "wave-1",
                  "--statement", STATEMENT, "--ledger", ledger)  # --id: by default the column wave 1 was kept by
    message = refusal(refused)
    assert (
        "of 361 respondents, 0 answer otherwise than in 'wave-1' and 1 are not in 'wave-1' (40 of its 400 respondents "
        "have no answer here, which is allowed)") in message, message
    assert "respondents new since 'wave-1' go in a collection of their own" in message

    w2 = write_rows(tmp_path / "w2.csv", rows)
    for table in ("favourite", "smokers"):
        done = cli("ledger", "register-answers", s2, table, "--answers", w2, "--memo-of", "wave-1", "--id", "ID",
                   "--statement", STATEMENT, "--ledger", ledger)
        assert done.code == 0 and "repeats wave-1's (checked by ID)" in " ".join(done.stdout.split()), done
    published = run_inline(cli, s2, ledger, tmp_path / "out")
    assert published.code == 0, published
    ln3 = ln_upper_bound(3)
    assert local_records(ledger) == [("wave-1", "FAVOURITE", PureDP(1)), ("wave-1", "SMOKES", PureDP(ln3)),
                                     ("wave-2", "FAVOURITE", PureDP(0)), ("wave-2", "SMOKES", PureDP(0))]
    manifest = json.loads((tmp_path / "out" / "survey-wave-2" / "manifest.json").read_text())
    assert all(t["memoised"] is True and Fraction(t["charged_per_respondent"]) == 0 for t in manifest["local_tables"])


def test_a_memo_of_a_collection_without_per_respondent_digests_is_refused(tmp_path, cli):
    """A ledger written before this change (e617fc4's, with its wave 1 estimated) keeps no
    digests of wave 1: a memo of it cannot be verified, so its registration is refused, and a run
    over a memo registered then (on trust) is refused, not charged 0. Today a collection
    randomized without --id keeps none either: the same refusal, --id or not."""
    ledger = copy_of_the_old_ledger(tmp_path)
    registered = opened(ledger).answer_sets()
    assert {(a.collection, a.question) for a in registered} == {("wave-1", "FAVOURITE"), ("wave-1", "SMOKES")}
    true_answers(tmp_path / "w2.csv", n=60)
    s2 = wave_two(tmp_path)
    s2.write_text(s2.read_text().replace("lifetime_budget: {epsilon: 1}", "lifetime_budget: {epsilon: 4}"))  # its cap
    refused = cli("ledger", "register-answers", s2, "smokers", "--answers", tmp_path / "w2.csv", "--memo-of", "wave-1",
                  "--statement", STATEMENT, "--ledger", ledger)
    message = refusal(refused)
    assert (
        "these answers to 'SMOKES' for collection 'wave-2' cannot be verified: collection 'wave-1' of "
        "'SMOKES' in dataset 'survey-panel' was registered without per-respondent digests (before dprelease kept "
        "them, or without a respondent id column, --id)") in message, message
    assert "an unverified memo is never charged 0" in message and message.endswith("Nothing was registered or spent.")
    assert opened(ledger).answer_sets() == registered

    register_as_before(ledger, tmp_path / "w2.csv")
    runs, local = run_ids(ledger), local_records(ledger)
    at_run = run_inline(cli, s2, ledger, tmp_path / "out")
    message = refusal(at_run)
    assert (
        "collection 'wave-2' says memoised: true with memo_of: 'wave-1', but the answers to 'FAVOURITE' in this data "
        "file cannot be verified: collection 'wave-1' of 'FAVOURITE' in dataset 'survey-panel' was registered "
        "without per-respondent digests") in message, message
    assert "Nothing was spent." in message
    assert (run_ids(ledger), local_records(ledger)) == (runs, local)

    fresh = tmp_path / "today"  # randomized today, without --id: nothing kept per respondent
    fresh.mkdir()
    ledger = make_ledger(fresh / "ledger.sqlite")
    true_answers(fresh / "true.csv", n=60)
    spec = write_spec(fresh)
    randomized_answers(cli, spec, ledger, fresh / "true.csv", fresh / "answers.csv")
    assert run_inline(cli, spec, ledger, fresh / "out").code == 0
    shutil.copyfile(fresh / "answers.csv", fresh / "w2.csv")
    s2 = wave_two(fresh)
    refused = cli("ledger", "register-answers", s2, "smokers", "--answers", fresh / "w2.csv", "--memo-of", "wave-1",
                  "--id", "ID", "--statement", STATEMENT, "--ledger", ledger)
    assert refused.code == 2 and "registered without per-respondent digests" in refused.stderr, refused


def test_a_memo_checked_against_one_randomization_is_refused_when_another_was_estimated(tmp_path, cli):
    """Wave 1 randomized twice (A, then B with a fresh memo: both registered); wave 2 repeats A
    through A's memo, and its registration (wave 1 not yet estimated) is checked against A. Wave
    1 is then published from B: the run of wave 2 is checked against B, what wave 1's charge
    covers, and refused, nothing spent."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    true_answers(tmp_path / "true.csv", n=200)
    spec = write_spec(tmp_path, data="b.csv")
    randomized_answers(cli, spec, ledger, tmp_path / "true.csv", tmp_path / "a.csv", memo=tmp_path / "memo-a")
    randomized_answers(cli, spec, ledger, tmp_path / "true.csv", tmp_path / "b.csv", memo=tmp_path / "memo-b")
    s2 = wave_two(tmp_path)
    with (tmp_path / "true2.csv").open("w", newline="") as f:  # wave 2 of the same people (a file of its own)
        writer = csv.DictWriter(f, fieldnames=["ID", "FAVOURITE", "SMOKES", "WAVE"])
        writer.writeheader()
        writer.writerows(row | {"WAVE": "2"} for row in read_csv(tmp_path / "true.csv"))
    randomized_answers(cli, s2, ledger, tmp_path / "true2.csv", tmp_path / "w2.csv", memo=tmp_path / "memo-a")
    assert [(r["ID"], r["FAVOURITE"], r["SMOKES"]) for r in read_csv(tmp_path / "w2.csv")] == [
        (r["ID"], r["FAVOURITE"], r["SMOKES"]) for r in read_csv(tmp_path / "a.csv")]
    assert read_csv(tmp_path / "b.csv") != read_csv(tmp_path / "a.csv")
    assert run_inline(cli, spec, ledger, tmp_path / "out").code == 0
    runs, local = run_ids(ledger), local_records(ledger)
    refused = run_inline(cli, s2, ledger, tmp_path / "out")
    message = refusal(refused)
    assert "do not repeat collection 'wave-1': of 200 respondents," in message, message
    assert "Nothing was spent." in message and (run_ids(ledger), local_records(ledger)) == (runs, local)


# ---------------------------------------------------------------- what the ledger keeps


def plain_digests(salt: str, question: str, respondent: str, answer: str) -> list[str]:
    """What a ledger without a key could have stored for one respondent: every plain hash of the
    message the ledger's HMAC covers (with and without the registration's salt), full and cut
    to the stored length."""
    messages = [json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in
                ([salt, question, respondent, answer], [question, respondent, answer], [respondent, answer])]
    messages += [f"{respondent},{answer}", f"{question},{respondent},{answer}"]
    hashes = [hashlib.sha256(m.encode()).hexdigest() for m in messages]
    return hashes + [h[:32] for h in hashes]


def adversary(target: str, salts: list[str], outputs: list[bytes]) -> list[str]:
    """Knowing every respondent's answer but the target's (and the salts the ledger shows),
    hash each candidate answer for the target every plain way and look for it: those found."""
    found = []
    for answer in LETTERS:
        digests = [d for salt in salts + [""] for d in plain_digests(salt, "FAVOURITE", target, answer)]
        if any(d.encode() in out or d.upper().encode() in out for d in digests for out in outputs):
            found.append(answer)
    return found


def test_the_strong_adversary_learns_nothing_from_the_per_respondent_digests(tmp_path, cli):
    """All answers but one known (200 of 201 respondents): the ledger's database file, its
    listing and the registration's output do not identify the last respondent's answer among its
    10 candidates; the same search finds it at once in plain hashes (the control). The digests
    are padded: 200 and 201 respondents store the same number (their count does not tell whether
    the last one answered), and two registrations of the same answers share no digest."""
    from dprelease.ledger.memos import MIN_DIGESTS, padded_size

    ledger = make_ledger(tmp_path / "ledger.sqlite")
    rows = [{"ID": f"r{i}", "FAVOURITE": LETTERS[(7 * i) % 10], "SMOKES": "no"} for i in range(200)]
    secret = {"ID": "r200", "FAVOURITE": "e", "SMOKES": "no"}
    outputs = []
    for name, collection, kept in (("known.csv", "wave-0", rows), ("all.csv", "wave-1", rows + [secret]),
                                   ("again.csv", "wave-9", rows + [secret])):
        path = write_rows(tmp_path / name, kept)
        spec = write_spec(tmp_path, collection=collection, data=name, name=f"{collection}.yaml")
        done = cli("ledger", "register-answers", spec, "favourite", "--answers", path, "--id", "ID",
                   "--statement", STATEMENT, "--ledger", ledger)
        assert done.code == 0 and "a keyed digest per respondent kept (by ID)" in done.stdout, done
        outputs.append(done.stdout.encode() + done.stderr.encode())
    outputs += [cli("ledger", "--ledger", ledger, "--json").stdout.encode(),
                cli("ledger", "--ledger", ledger).stdout.encode(), (tmp_path / "ledger.sqlite").read_bytes()]
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    with engine.connect() as conn:
        salts = [r[0] for r in conn.execute(sa.text("SELECT salt FROM respondent_sets ORDER BY answer_set"))]
        sets = {}
        for answer_set, digests in conn.execute(sa.text("SELECT answer_set, digests FROM respondent_digests")):
            sets.setdefault(answer_set, []).extend(digests[i:i + 32] for i in range(0, len(digests), 32))
    engine.dispose()
    assert len(salts) == 3 and all(len(s) == 32 for s in salts)
    found = adversary("r200", salts, outputs)
    print(f"adversary: 10 candidates for the last respondent's answer hashed 10 plain ways with each of "
          f"{len(salts)} salts and none, {len(found)} found in {len(outputs)} outputs")
    assert found == []
    control = b"".join(d.encode() for d in plain_digests(salts[1], "FAVOURITE", "r200", "e"))
    assert adversary("r200", salts, [control]) == ["e"]  # the control: plain hashes give it away
    counts = sorted(len(set(s)) for s in sets.values())
    assert counts == [MIN_DIGESTS] * 3 == [padded_size(200), padded_size(201), padded_size(201)]
    assert all(s == sorted(s) for s in sets.values())  # in digest order: the row order tells nothing
    wave0, wave1, wave9 = (set(sets[k]) for k in sorted(sets))
    assert not (wave1 & wave9) and not (wave0 & wave1)  # the salt: no link between registrations
    assert [padded_size(n) for n in (1, 1024, 1025, 100_000)] == [1024, 1024, 2048, 131072]


def test_a_schema_5_ledger_gains_the_tables_of_digests(tmp_path):
    """A ledger of schema 5 (before per-respondent digests) migrates to 6: the two tables appear,
    empty, and nothing recorded changes."""
    path = make_ledger(tmp_path / "l.sqlite")
    ledger = Ledger.open(resolve_location(str(path)))
    ledger.set_budget("d", PureDP(1), reason="test")
    before = ledger.state("d")
    ledger.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE respondent_digests")
        conn.execute("DROP TABLE respondent_sets")
        conn.execute("UPDATE dprelease_meta SET value = '5' WHERE key = 'schema_version'")
    for _ in range(2):
        ledger = Ledger.open(resolve_location(str(path)))
        assert ledger.state("d") == before
        ledger.close()
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT value FROM dprelease_meta WHERE key = 'schema_version'").fetchone() == (
                str(SCHEMA_VERSION),) == ("6",)
            assert conn.execute("SELECT COUNT(*) FROM respondent_digests").fetchone() == (0,)
            assert conn.execute("SELECT COUNT(*) FROM respondent_sets").fetchone() == (0,)
