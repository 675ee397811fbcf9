"""``dprelease randomize SPEC TABLE``: the respondent's side of a local table's protocol.

For simulations and field tools: reads true answers, writes each one randomized with the
table's protocol (k-RR or the coin flip), exactly, from the OS CSPRNG. With ``--memo`` every
respondent's first randomized answer to this question is kept (per true value, as RAPPOR's
permanent randomized response) and reused by later collections, which then cost no new ε; the
memo maps respondents to their true answers, so it is respondent-side state: written owner-only
and never to be collected.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyarrow import csv

from dprelease.data.load import DataError
from dprelease.errors import UserError
from dprelease.mechanisms.local import coin_flip, randomize
from dprelease.spec import LocalTable, Spec

MEMO_FORMAT = 1


def protocol_key(spec: Spec, table: LocalTable) -> str:
    return f"{table.protocol_key}/k={len(spec.column(table.column).categories)}"


def randomize_file(spec: Spec, table_name: str, source: Path, target: Path, id_column: str | None,
                   memo_path: Path | None) -> tuple[int, int]:
    """Randomize ``source``'s answers to the table's question into ``target``; returns (answers
    written, answers reused from the memo)."""
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
    memo = _load_memo(memo_path, table.column, key) if memo_path else None
    reported = np.full(codes.size, -1, dtype=np.int64)
    ids = [str(i) for i in rows.column(id_column).to_pylist()] if id_column else []
    reused = 0
    if memo is not None:
        for i, (respondent, value) in enumerate(zip(ids, values)):
            earlier = memo["answers"].get(respondent, {}).get(value)
            if earlier is not None:
                reported[i] = code_of[earlier]
                reused += 1
    fresh = np.flatnonzero(reported < 0)
    drawn = coin_flip(codes[fresh]) if table.protocol == "coin_flip" else randomize(
        codes[fresh], len(domain), table.epsilon)  # type: ignore[arg-type]
    reported[fresh] = drawn
    if memo is not None:
        for i in fresh:  # the first randomized answer per (respondent, true value) is kept
            memo["answers"].setdefault(ids[i], {}).setdefault(values[i], domain[reported[i]])
        for i in fresh:  # duplicates within this file reuse the kept one too
            reported[i] = code_of[memo["answers"][ids[i]][values[i]]]
    out_columns = {name: rows.column(name) for name in rows.column_names}
    out_columns[table.column] = pa.array([domain[c] for c in reported], pa.string())
    if memo is not None and memo_path is not None:  # the memo first: no answers out without it
        _write_private(memo_path, json.dumps(memo, ensure_ascii=False, sort_keys=True))
    _write_new(target, lambda tmp: csv.write_csv(pa.table(out_columns), tmp,
                                                 csv.WriteOptions(quoting_style="needed")))
    return codes.size, reused


def _read(path: Path, needed: list[str]) -> pa.Table:
    try:
        table = csv.read_csv(path, convert_options=csv.ConvertOptions(
            column_types={}, strings_can_be_null=False, auto_dict_encode=False),
            read_options=csv.ReadOptions(autogenerate_column_names=False))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: cannot read it as CSV: {str(exc).splitlines()[0]}") from None
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise DataError(f"{path}: no column {', '.join(missing)} (it has: {', '.join(table.column_names)})")
    # every column as text, as written
    return pa.table({n: pa.array([None if v is None else str(v) for v in table.column(n).to_pylist()], pa.string())
                     for n in table.column_names})


def _load_memo(path: Path, question: str, key: str) -> dict[str, Any]:
    if not path.exists():
        return {"format": MEMO_FORMAT, "question": question, "protocol": key, "answers": {}}
    try:
        memo = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a memo written by dprelease randomize ({exc})") from None
    if not isinstance(memo, dict) or memo.get("format") != MEMO_FORMAT or not isinstance(memo.get("answers"), dict):
        raise UserError(f"{path}: not a memo written by dprelease randomize")
    if memo.get("question") != question or memo.get("protocol") != key:
        raise UserError(f"{path} memoises {memo.get('question')!r} under {memo.get('protocol')!r}, not {question!r} "
                        f"under {key!r}: a reused answer keeps its question and protocol")
    return memo


def _write_new(target: Path, write) -> None:  # type: ignore[no-untyped-def]
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.link(tmp, target)  # fails if the target appeared meanwhile: never overwrite
    except FileExistsError:
        raise UserError(f"{target} exists; choose a new --output") from None
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"cannot write {target}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write the memo {path}: {exc}") from None
