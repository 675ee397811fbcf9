"""Memos verified by respondent ids that name one respondent a row (issue 27, item 7, second
review): the ledger keeps (and checks) per-respondent digests only by an id column whose ids
are all present, none repeated, and which is not an answer column. The review's bypass: wave 1
registered `--id REGION` (5 regions over 400 respondents) kept the digests of (region, answer)
pairs, under which every answer of a fresh randomization matched, and was charged 0."""

from __future__ import annotations

import csv
import re
import sqlite3
from pathlib import Path

import pytest

from dprelease.ledger import memos
from tests.ledgers import make_ledger, untouched
from tests.test_local import write_spec
from tests.test_local_memos import STATEMENT, local_records, register_as_before, run_inline, wave_two
from tests.test_local_memos import refusal as exit_2
from tests.test_local_provenance import run_ids

FIELDS = ["ID", "REGION", "FAVOURITE", "SMOKES"]


def panel(n: int = 400) -> list[dict]:
    """Wave 1's randomized answers (test data): ids r0…, 5 regions, answers in a fixed pattern
    (both answers in every region)."""
    return [{"ID": f"r{i}", "REGION": f"R{i % 5}", "FAVOURITE": "abcdefghij"[(3 * i) % 10],
             "SMOKES": "yes" if i % 3 == 0 else "no"} for i in range(n)]


def write_panel(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def fresh_wave(rows: list[dict]) -> list[dict]:
    """The review's wave 2: a fresh randomization, in which a quarter of the SMOKES answers differ."""
    return [row | {"SMOKES": ("no" if row["SMOKES"] == "yes" else "yes")} if i % 4 == 0 else dict(row)
            for i, row in enumerate(rows)]


def refusal(result) -> str:  # type: ignore[no-untyped-def]
    """A refusal (exit 2): its message, on one line, without the ledger's preamble."""
    return exit_2(result).split("error: ", 1)[1]


def register(cli, spec, table, answers, ledger, *more):  # type: ignore[no-untyped-def]
    return cli("ledger", "register-answers", spec, table, "--answers", answers, "--statement", STATEMENT,
               "--ledger", ledger, *more)


def kept(ledger: Path) -> tuple[int, int, int]:
    """(registrations, registrations kept per respondent, rows of digests) in the ledger."""
    with sqlite3.connect(ledger) as conn:
        return tuple(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]  # type: ignore[return-value]
                     for t in ("answer_sets", "respondent_sets", "respondent_digests"))


def quotes_no_value(message: str, rows: list[dict]) -> bool:
    """Whether ``message`` names no id or region of ``rows`` (counts only)."""
    values = {row["ID"] for row in rows} | {row["REGION"] for row in rows}
    return not any(re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", message) for v in values)


def test_the_reviews_region_column_is_refused_as_the_origins_id(tmp_path, cli):
    """`register-answers s1.yaml smokers --answers w1.csv --id REGION`: 5 ids over 400 rows,
    refused, nothing registered (the ledger byte for byte as made), the message naming the column
    and how many ids repeat, no id. The review's wave 2 (a quarter of the answers fresh) then has
    no origin to match and is refused; with wave 1 kept by its true ids, it is refused as the 100
    changed answers it has."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    s1 = write_spec(tmp_path, data="w1.csv", name="s1.yaml")
    rows = panel()
    w1 = write_panel(tmp_path / "w1.csv", rows)
    message = refusal(register(cli, s1, "smokers", w1, ledger, "--id", "REGION"))
    assert message == (
        "the answers to 'SMOKES' of collection 'wave-1' cannot be kept respondent by respondent by column 'REGION': "
        "5 ids appear more than once (on 400 of its 400 rows). A memo is matched to its origin by respondent id, so "
        "the id column must name each respondent on one row of their own; otherwise a fresh answer could match "
        "another row's answer and be charged 0. Name the column that identifies each respondent (--id COLUMN), one "
        "row per respondent, or register the answers without --id (then no memo of 'wave-1' can be charged 0). "
        "Nothing was registered or spent."), message
    assert quotes_no_value(message, rows) and untouched(ledger)
    assert not quotes_no_value("e.g. 'R3'", rows) and not quotes_no_value("id r7 twice", rows)  # the helper's control

    w2 = write_panel(tmp_path / "w2.csv", fresh_wave(rows))
    s2 = wave_two(tmp_path)
    memo = refusal(register(cli, s2, "smokers", w2, ledger, "--memo-of", "wave-1", "--id", "REGION"))
    assert "cannot be verified: collection 'wave-1' of 'SMOKES' in dataset 'survey-panel' has no registered " \
           "answers randomized afresh" in memo, memo
    assert untouched(ledger)

    done = register(cli, s1, "smokers", w1, ledger, "--id", "ID")  # its true ids: kept
    assert done.code == 0 and "a keyed digest per respondent kept (by ID)" in done.stdout, done
    for column in ("REGION", "ID"):
        memo = refusal(register(cli, s2, "smokers", w2, ledger, "--memo-of", "wave-1", "--id", column))
        assert ("by column 'REGION': 5 ids appear more than once (on 400 of its 400 rows)" in memo if column == "REGION"
                else "of 400 respondents, 100 answer otherwise than in 'wave-1' and 0 are not in 'wave-1'" in memo), memo
    assert kept(ledger) == (1, 1, 1)


def twice(rows: list[dict]) -> list[dict]:
    """``rows`` and respondent r7 again, with the other SMOKES answer."""
    return rows + [rows[7] | {"SMOKES": "yes" if rows[7]["SMOKES"] == "no" else "no"}]


def test_a_respondent_id_on_two_rows_with_two_answers_is_refused(tmp_path, cli):
    """One respondent twice in wave 1, with both answers: refused at `register-answers --id ID`,
    nothing registered, the message counting the id without naming it."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    s1 = write_spec(tmp_path, data="w1.csv", name="s1.yaml")
    rows = panel()
    message = refusal(register(cli, s1, "smokers", write_panel(tmp_path / "twice.csv", twice(rows)), ledger,
                               "--id", "ID"))
    assert ("the answers to 'SMOKES' of collection 'wave-1' cannot be kept respondent by respondent by column 'ID': "
            "1 id appears more than once (on 2 of its 401 rows).") in message, message
    assert message.endswith("Nothing was registered or spent.") and quotes_no_value(message, rows)
    assert untouched(ledger)


def test_randomize_refuses_a_respondent_id_on_two_rows(tmp_path, cli):
    """`randomize --id ID` draws each row afresh, so a respondent on two rows may get two
    answers: refused at its registration, before the answers or the memo appear."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    s1 = write_spec(tmp_path, data="w1.csv", name="s1.yaml")
    result = cli("randomize", s1, "favourite", "--input", write_panel(tmp_path / "twice.csv", twice(panel())),
                 "--output", tmp_path / "out.csv", "--id", "ID", "--memo", tmp_path / "memo.json", "--ledger", ledger)
    message = refusal(result)
    assert ("the answers to 'FAVOURITE' of collection 'wave-1' cannot be kept respondent by respondent by column "
            "'ID': 1 id appears more than once (on 2 of its 401 rows).") in message, message
    assert message.endswith("Nothing was registered or spent.")
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "memo.json").exists() and untouched(ledger)


def test_a_blank_respondent_id_is_refused(tmp_path, cli):
    """A blank id (spaces) names nobody: refused, nothing registered. A quoted empty CSV id is a
    missing one, as an unquoted one is (empty text reads as missing, quoted or not: docs/spec.md's
    na_values), so it is refused on reading, naming its row: nothing registered either."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    s1 = write_spec(tmp_path, data="w1.csv", name="s1.yaml")
    blank = tmp_path / "blank.csv"
    blank.write_text('ID,REGION,FAVOURITE,SMOKES\nr1,R1,a,yes\n"  ",R2,b,no\n" ",R3,c,no\nr4,R4,d,yes\n')
    message = refusal(register(cli, s1, "smokers", blank, ledger, "--id", "ID"))
    assert ("the answers to 'SMOKES' of collection 'wave-1' cannot be kept respondent by respondent by column 'ID': 2 "
            "rows have no id.") in message, message
    assert message.endswith("Nothing was registered or spent.") and untouched(ledger)
    empty = tmp_path / "empty.csv"
    empty.write_text('ID,REGION,FAVOURITE,SMOKES\nr1,R1,a,yes\n"",R2,b,no\nr4,R4,d,yes\n')
    message = refusal(register(cli, s1, "smokers", empty, ledger, "--id", "ID"))
    assert message.startswith(f"{empty}: column ID has an empty respondent id on data row 2"), message
    assert message.endswith("Nothing was registered or spent.") and untouched(ledger)


@pytest.mark.parametrize("column, problem", [
    ("SMOKES", "it is the question itself (its answers are not respondent ids)"),
    ("FAVOURITE", "it is a question the spec asks (a local table's column), and answers are not respondent ids")])
def test_an_answer_column_is_refused_as_the_respondent_id(tmp_path, cli, column, problem):
    """The question's own column as the id, or another question of the collection, even where
    its values happen to be unique (2 respondents, 2 answers): refused, nothing registered."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    s1 = write_spec(tmp_path, data="w1.csv", name="s1.yaml")
    pair = write_panel(tmp_path / "pair.csv", [{"ID": "r1", "REGION": "R1", "FAVOURITE": "a", "SMOKES": "yes"},
                                               {"ID": "r2", "REGION": "R2", "FAVOURITE": "b", "SMOKES": "no"}])
    message = refusal(register(cli, s1, "smokers", pair, ledger, "--id", column))
    assert message.startswith(f"the answers to 'SMOKES' of collection 'wave-1' cannot be kept respondent by "
                              f"respondent by column {column!r}: {problem}. "), message
    assert message.endswith("Nothing was registered or spent.") and untouched(ledger)


def wave_one_by_id(tmp_path: Path, cli) -> tuple[Path, list[dict]]:  # type: ignore[no-untyped-def]
    """Wave 1 registered by its true ids (both questions) and estimated: the ledger, its rows."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    s1 = write_spec(tmp_path, data="w1.csv", name="s1.yaml")
    rows = panel()
    w1 = write_panel(tmp_path / "w1.csv", rows)
    for table in ("favourite", "smokers"):
        assert register(cli, s1, table, w1, ledger, "--id", "ID").code == 0
    assert run_inline(cli, s1, ledger, tmp_path / "out").code == 0
    return ledger, rows


MEMO_TWICE = ("these answers to 'SMOKES' for collection 'wave-2' cannot be checked respondent by respondent by column "
              "'ID': 1 id appears more than once (on 2 of its 401 rows).")
MEMO_FIX = ("A memo of 'wave-1' has one row per respondent, identified by the column 'wave-1' was kept by ('ID'; --id "
            "COLUMN); else publish collection 'wave-2' as a collection of its own (memoised: false, charged its ε). "
            "Nothing was registered or spent.")


def test_a_memo_giving_a_respondent_two_rows_with_two_answers_is_refused_by_its_ids(tmp_path, cli):
    """Wave 2 repeats wave 1 (kept by its true ids) but gives one respondent a second row with
    the other answer: refused at `register-answers --memo-of` by its ids (before, as one changed
    answer), nothing registered."""
    ledger, rows = wave_one_by_id(tmp_path, cli)
    w2 = write_panel(tmp_path / "w2.csv", twice(rows))
    message = refusal(register(cli, wave_two(tmp_path), "smokers", w2, ledger, "--memo-of", "wave-1", "--id", "ID"))
    assert message.startswith(MEMO_TWICE) and message.endswith(MEMO_FIX) and quotes_no_value(message, rows), message
    assert kept(ledger)[:2] == (2, 2)


def test_a_memo_repeating_a_row_is_refused_at_registration_and_at_run(tmp_path, cli):
    """Wave 2 repeats wave 1 with one respondent's row twice (the same answer): accepted before
    this check, now refused at `register-answers --memo-of`; registered on trust (the old way),
    the run refuses it the same way, nothing spent."""
    ledger, rows = wave_one_by_id(tmp_path, cli)
    s2 = wave_two(tmp_path)
    w2 = write_panel(tmp_path / "w2.csv", rows + [dict(rows[7])])
    message = refusal(register(cli, s2, "smokers", w2, ledger, "--memo-of", "wave-1", "--id", "ID"))
    assert message.startswith(MEMO_TWICE) and message.endswith(MEMO_FIX) and quotes_no_value(message, rows), message
    assert kept(ledger)[:2] == (2, 2)

    register_as_before(ledger, w2)  # taken on trust before this check
    runs, local = run_ids(ledger), local_records(ledger)
    message = refusal(run_inline(cli, s2, ledger, tmp_path / "out"))
    assert message.startswith(
        "collection 'wave-2' says memoised: true with memo_of: 'wave-1', but the answers to 'FAVOURITE' in this data "
        "file cannot be checked respondent by respondent by column 'ID': 1 id appears more than once (on 2 of its 401 "
        "rows)."), message
    assert message.endswith("Nothing was spent.") and (run_ids(ledger), local_records(ledger)) == (runs, local)
    assert not (tmp_path / "out" / "survey-wave-2").exists()


def test_an_origin_kept_before_ids_were_checked_is_no_memos_origin(tmp_path, cli, monkeypatch):
    """A schema-6 ledger written before this check: wave 1 kept by ID with respondent r7 on two
    rows with both answers (as the code before allowed), its respondent_sets without the
    unique_ids column. A wave 2 of unique ids in which r7's answer is the other one matched it
    before (charged 0); opened now, the column is added (NULL: unchecked) and the memo is refused
    as unverifiable, nothing registered. The migration is idempotent (the second opening finds
    it done)."""
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    s1 = write_spec(tmp_path, data="w1.csv", name="s1.yaml")
    rows = panel()
    w1 = write_panel(tmp_path / "w1.csv", twice(rows))
    with monkeypatch.context() as before_the_check:  # the registration the code before this check made
        before_the_check.setattr(memos, "check_origin", lambda *a: None, raising=False)
        assert register(cli, s1, "smokers", w1, ledger, "--id", "ID").code == 0
    with sqlite3.connect(ledger) as conn:
        if "unique_ids" in {r[1] for r in conn.execute("PRAGMA table_info(respondent_sets)")}:
            conn.execute("ALTER TABLE respondent_sets DROP COLUMN unique_ids")
    w2 = write_panel(tmp_path / "w2.csv", [row | {"SMOKES": twice(rows)[-1]["SMOKES"]} if i == 7 else row
                                           for i, row in enumerate(rows)])
    s2 = wave_two(tmp_path)
    for _ in range(2):
        memo = refusal(register(cli, s2, "smokers", w2, ledger, "--memo-of", "wave-1", "--id", "ID"))
        assert memo == (
            "these answers to 'SMOKES' for collection 'wave-2' cannot be verified: collection 'wave-1' of 'SMOKES' in "
            "dataset 'survey-panel' was kept per respondent (by column 'ID') before dprelease checked that an id "
            "column names one respondent a row: an id on two rows with two answers there would match either, so "
            "whether each respondent repeats their 'wave-1' answer cannot be checked, and an unverified memo is never "
            "charged 0. Publish collection 'wave-2' as a collection of its own (memoised: false, charged its ε), or "
            "repeat a collection whose answers were registered with --id. Nothing was registered or spent."), memo
        with sqlite3.connect(ledger) as conn:
            assert conn.execute("SELECT id_column, unique_ids FROM respondent_sets").fetchall() == [("ID", None)]
            assert conn.execute("SELECT value FROM dprelease_meta WHERE key = 'schema_version'").fetchone() == ("6",)
    assert kept(ledger) == (1, 1, 1)
