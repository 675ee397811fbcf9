"""``dprelease randomize SPEC TABLE``: the respondent's side of a local table's protocol.

For simulations and field tools: reads true answers, writes each one randomized with the
table's protocol (k-RR or the coin flip), exactly, from the OS CSPRNG. With ``--memo`` every
respondent's first randomized answer to this question is kept (a permanent randomized
response, as in RAPPOR) and repeated by later, memoised collections, which then cost no new ε.
The memo links respondents to their answers, so it is respondent-side state: written
owner-only and never to be collected.

Local answers carry provenance: the output is registered in the dataset's ledger (its keyed
fingerprint, the collection, question, protocol, ε and the memo reused, if any) before it
appears, and a ``kind: local`` table reads no answers the ledger has not registered. Columns
copied unchanged from an input that is itself registered answers keep their registrations.
The true answers must not be the data of a central release: randomizing confidential records
that have a central budget would publish them outside it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyarrow import csv

from dprelease.host import files
from dprelease.data import file_fingerprint
from dprelease.data.scan import Source
from dprelease.errors import DataError, LedgerError, UserError
from dprelease.lifecycle.memos import read_respondents
from dprelease.plan.local import randomizer_of
from dprelease.ledger import RANDOMIZED, AnswerSet, Ledger, Respondents
from dprelease.spec import CategoricalColumn, LocalTable, Spec

MEMO_FORMAT = 1


def protocol_key(spec: Spec, table: LocalTable) -> str:
    return f"{table.protocol_key}/k={len(spec.column(table.column).categories)}"


def randomize_file(spec: Spec, table_name: str, source: Path, target: Path, id_column: str | None,
                   memo_path: Path | None, ledger: Ledger) -> tuple[int, int, tuple[AnswerSet, ...]]:
    """Randomize ``source``'s answers to the table's question into ``target``; returns (answers
    written, answers reused from the memo, the registrations of ``target`` in ``ledger``).

    Privacy contract (per respondent): without a memo every answer is a fresh draw, ε-local DP
    (ε of the protocol). With a memo each respondent's first randomized answer is kept and every
    later collection of the question repeats it, whatever the respondent's answer is by then, so
    the later reports are a function of the first draw alone: no new ε. (Reusing per true value
    instead would reveal whether an answer changed: no ε at all.) A memo is created only by a
    collection that is not memoised (its origin); a memoised collection needs the memo of the
    collection its ``memo_of`` names and takes only the respondents it holds. Ids and answers are
    read as text, exactly as written."""
    table = next((t for t in spec.local_tables if t.name == table_name), None)
    if table is None:
        known = ", ".join(t.name for t in spec.local_tables) or "none"
        raise UserError(f"{spec.source}: no local table {table_name!r} (local tables: {known})")
    if memo_path is not None and id_column is None:
        raise UserError("--memo keeps each respondent's first randomized answer: name the respondent id column "
                        "with --id COLUMN")
    if table.memoised and memo_path is None:
        raise UserError(f"{spec.source}: table {table.name} says memoised: true, so every respondent must reuse their "
                        "first randomized answer: pass --memo FILE --id COLUMN (the memo of the first collection)")
    if target.exists():
        raise UserError(f"{target} exists; choose a new --output (randomized answers are never overwritten)")
    for path, what in ((target, "--output"), (memo_path, "--memo")):
        if path is not None and not path.resolve().parent.is_dir():
            raise UserError(f"{what} {path}: the folder {path.resolve().parent} does not exist")
    rows = _read(source, [table.column] + ([id_column] if id_column else []))
    values = [str(v) if v is not None else None for v in rows.column(table.column).to_pylist()]
    domain = spec.column(table.column).values  # type: ignore[union-attr]
    code_of = {v: i for i, v in enumerate(domain)}
    bad = [i for i, v in enumerate(values) if v not in code_of]
    if bad:
        raise DataError(f"{source}: column {table.column}: {len(bad)} answer(s) are not in the declared domain "
                        f"({', '.join(domain)}), e.g. on data row {bad[0] + 1}; every answer must be a declared value")
    codes = np.array([code_of[v] for v in values], dtype=np.int64)  # type: ignore[index]
    key = protocol_key(spec, table)
    memo = _load_memo(memo_path, table, key) if memo_path else None
    carried = _provenance_of_input(spec, table, source, ledger)
    ids = rows.column(id_column).to_pylist() if id_column else []
    if any(not i for i in ids):
        raise DataError(f"{source}: column {id_column} has an empty respondent id on data row "
                        f"{next(n for n, i in enumerate(ids) if not i) + 1}; every respondent needs one to keep their "
                        "answer")
    missing = next(((n, i) for n, i in enumerate(ids) if i in spec.dataset.na_values), None)
    if missing is not None:  # the answers are read with them (the memo check, a run): that id would be missing there
        raise DataError(f"{source}: column {id_column} has respondent id {missing[1]!r} on data row {missing[0] + 1}, "
                        "one of dataset.na_values, which read as missing wherever the answers are read; give that "
                        f"respondent another id, or take {missing[1]!r} out of dataset.na_values. Nothing was written.")
    reported = np.full(codes.size, -1, dtype=np.int64)
    if memo is not None:
        kept = memo["answers"]
        known = [i for i, respondent in enumerate(ids) if respondent in kept]
        for i in known:  # the first randomized answer, whatever the answer is now
            reported[i] = code_of[kept[ids[i]]]
        first_time = {ids[i] for i in range(len(ids)) if ids[i] not in kept}
        if table.memoised and first_time:
            raise UserError(f"{len(first_time)} respondent(s) of {source} are not in the memo {memo_path} (e.g. "
                            f"{sorted(first_time)[0]!r}); a memoised collection only repeats earlier answers. Collect "
                            "new respondents in a collection of their own (memoised: false), which costs its ε")
    fresh = np.flatnonzero(reported < 0)
    drawn = randomizer_of(table, len(domain)).draw(codes[fresh])  # the plan's local randomizer
    reported[fresh] = drawn
    if memo is not None:
        for i in fresh:  # a respondent's first randomized answer is kept (one per respondent) ...
            memo["answers"].setdefault(ids[i], domain[reported[i]])
        for i in fresh:  # ... and one who appears twice in this file answers the same both times
            reported[i] = code_of[memo["answers"][ids[i]]]
    reused = codes.size - fresh.size
    out_columns = {name: rows.column(name) for name in rows.column_names}
    out_columns[table.column] = pa.array([domain[c] for c in reported], pa.string())
    registered: tuple[AnswerSet, ...] = ()

    def register_then_memo(tmp: Path) -> None:  # the output is complete; it appears only after both
        nonlocal registered
        answers = ledger.fingerprint(file_fingerprint(tmp))
        entries = (AnswerSet(spec.dataset.name, table.collection, table.column, key, table.epsilon_bound, answers,
                             RANDOMIZED, memo_of=table.memo_of if table.memoised else None),)
        entries += tuple(dataclasses.replace(a, answers=answers) for a in carried)
        registered = ledger.register_answers(entries, respondents=_respondents(spec, tmp, id_column, entries, carried))
        if memo is not None and memo_path is not None:  # the memo before the answers: none out without it
            _write_private(memo_path, json.dumps(memo, ensure_ascii=False, sort_keys=True))

    _write_new(target, lambda f: csv.write_csv(pa.table(out_columns), f,
                                               csv.WriteOptions(quoting_style="needed")), register_then_memo)
    return codes.size, reused, registered


def _respondents(spec: Spec, output: Path, id_column: str | None, entries: tuple[AnswerSet, ...],
                 carried: tuple[AnswerSet, ...]) -> Respondents | None:
    """The output's answers to each registered question with their respondent ids (by --id, else
    the column a copied registration was kept by), read back from the written file: what the
    ledger keeps digests of, or checks a memo with. None without an id column."""
    column = id_column or next((a.respondent_id for a in carried if a.respondent_id), None)
    if column is None:
        return None
    declared = {c.name for c in spec.columns if isinstance(c, CategoricalColumn)}
    questions = list(dict.fromkeys(e.question for e in entries if e.question in declared))
    return read_respondents(spec, Source(output, "csv", spec.dataset.na_values), column, questions)


def _provenance_of_input(spec: Spec, table: LocalTable, source: Path, ledger: Ledger) -> tuple[AnswerSet, ...]:
    """The registrations of the input's other columns (kept for the output, which copies them
    unchanged); refused when the input is the data of a central release (of any dataset)."""
    plain = file_fingerprint(source)  # in this process's memory only
    keyed = ledger.fingerprint(plain)
    central = ledger.central_releases(spec.dataset.name, keyed)
    if central:
        name, release = central[0]
        raise LedgerError(
            f"{source} is the data of dataset {name!r}, or {spec.dataset.name!r} has central releases (release "
            f"{release!r}, charged to the lifetime budget of {name!r}): randomizing confidential records that have a "
            f"central budget would publish them outside it. Publish {table.column!r} as a central table of dataset "
            f"{name!r}, or randomize answers the respondents gave for a collection of their own. Nothing was written.")
    return tuple(a for a in ledger.answer_sets(spec.dataset.name, keyed) if a.question != table.column)


def _read(path: Path, needed: list[str]) -> pa.Table:
    """Every column as text, exactly as written (an id "001" stays "001"); empty cells are ""."""
    import csv as text_csv

    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            header = next(text_csv.reader(f), [])
        table = csv.read_csv(path, convert_options=csv.ConvertOptions(
            column_types={n: pa.string() for n in header}, strings_can_be_null=False, quoted_strings_can_be_null=False,
            auto_dict_encode=False))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read it as CSV: {str(exc).splitlines()[0]}") from None
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise DataError(f"{path}: no column {', '.join(missing)} (it has: {', '.join(table.column_names)})")
    return table


def _load_memo(path: Path, table: LocalTable, key: str) -> dict[str, Any]:
    if not path.exists():
        if table.memoised:
            raise UserError(f"--memo {path} does not exist: a memoised collection repeats the answers kept by "
                            f"collection {table.memo_of!r} (randomized with --memo); without them it would be a "
                            "fresh collection, which costs ε again: set memoised: false")
        return {"format": MEMO_FORMAT, "question": table.column, "protocol": key, "origin": table.collection,
                "answers": {}}
    try:
        memo = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a memo written by dprelease randomize ({exc})") from None
    if not isinstance(memo, dict) or memo.get("format") != MEMO_FORMAT or not isinstance(memo.get("answers"), dict):
        raise UserError(f"{path}: not a memo written by dprelease randomize")
    if memo.get("question") != table.column or memo.get("protocol") != key:
        raise UserError(f"{path} memoises {memo.get('question')!r} under {memo.get('protocol')!r}, not "
                        f"{table.column!r} under {key!r}: a reused answer keeps its question and protocol")
    if not table.memoised and memo.get("origin") != table.collection:
        raise UserError(f"{path} holds the answers of collection {memo.get('origin')!r}; table {table.name} is not "
                        "memoised, so it is a fresh collection: use a new memo file, or set memoised: true")
    if table.memoised and memo.get("origin") != table.memo_of:
        raise UserError(f"{path} holds the answers of collection {memo.get('origin')!r}, not of {table.memo_of!r} "
                        f"(table {table.name}'s memo_of:); a memoised collection repeats that collection's answers")
    return memo


def _write_new(target: Path, write, before_link) -> None:  # type: ignore[no-untyped-def]
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        files.write_with(tmp, write)  # 0600, whatever the umask
        before_link(tmp)  # registered (and the memo written) before the answers appear
        os.link(tmp, target)  # fails if the target appeared meanwhile: never overwrite
    except FileExistsError:
        raise UserError(f"{target} exists; choose a new --output") from None
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"cannot write {target}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _write_private(path: Path, text: str) -> None:
    try:
        files.write_text(path, text)  # owner-only, never through a link at path
    except OSError as exc:
        raise UserError(f"cannot write the memo {path}: {exc}") from None
