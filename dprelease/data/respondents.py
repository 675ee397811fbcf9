"""Each respondent's answers in a file of local answers: what the ledger's memo check reads
(:mod:`dprelease.ledger.memos`).

Reads, in one pass, the respondent id column and the answer columns of a file (or a directory)
of answers, as :mod:`dprelease.data.scan` reads any data: only those columns, every CSV value as
text. Ids are kept as text exactly as written (``001`` is not ``1``; a Parquet integer as its
decimal text); each answer becomes its declared value's text through the same encoding a run
counts with (:func:`~dprelease.data.load.encode_column`), so a CSV ``1`` and a Parquet ``1`` are
one answer. The values stay in this process's memory: the caller hands them to the ledger,
which keeps (or checks) only keyed digests of them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dprelease.data.load import encode_column
from dprelease.data.scan import Source
from dprelease.errors import DataError
from dprelease.spec import CategoricalColumn, Spec


def respondent_answers(spec: Spec, src: Source, id_column: str,
                       questions: list[str]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """(each row's respondent id, per question each row's answer) of the answers at ``src``.

    Assumes each question is a declared categorical column of ``spec`` (a local table's).
    Guarantees one id and one declared value per row, in the file's row order; an empty id or
    an answer outside the declared domain is a DataError naming the file, column and row."""
    names = list(dict.fromkeys([id_column, *questions]))
    ids: list[str] = []
    answers: dict[str, list[str]] = {q: [] for q in questions}
    for piece in src.files():
        for first_row, batch in src.batches(piece, names, names):
            column = batch.column(id_column)
            if column.null_count:
                row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0]) + 1
                na = f" or one of dataset.na_values {list(src.na_values)}" if src.na_values else ""
                raise DataError(f"{piece.path}: column {id_column} has an empty respondent id on data row {row} "
                                f"(empty text{na}: missing); every respondent needs one (ids are compared as "
                                "written)")
            ids.extend(str(v) for v in column.to_pylist())
            for q in questions:
                answers[q].extend(_declared(spec, piece.path, first_row, q, batch.column(q)))
    return tuple(ids), {q: tuple(v) for q, v in answers.items()}


def _declared(spec: Spec, path: str, first_row: int, question: str, values: pa.Array) -> list[str]:
    column = spec.column(question)
    if not isinstance(column, CategoricalColumn):
        raise TypeError(f"column {question} of a local table is categorical")
    code, bad = encode_column(spec, column, values)
    if bad is not None:
        row = first_row + int(np.flatnonzero(bad)[0]) + 1
        raise DataError(f"{path}: column {question}: {int(bad.sum())} answer(s) are not in the declared domain "
                        f"({', '.join(column.values)}), e.g. on data row {row}; every answer must be a declared value")
    return np.asarray(column.values, dtype=object)[code].tolist()
