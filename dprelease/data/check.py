"""The data checked against the spec, column by column, before anything is spent.

:func:`check_data` reads what a run reads (the columns the release's tables, rules and
contribution bound need) and says, per column, which rows a run would refuse and why: the
column is not in a file (or is there twice), a value does not parse as a whole number, a value
is outside the declared domain or range, a value is missing (empty, or one of
``dataset.na_values``) where the column declares no ``missing:`` category, a summed column
holds text or infinities, a row has no person identifier; and, for the whole data, a file that
cannot be read or is empty, or no rows at all. Rows a column drops by its own opt-in
(``on_out_of_domain: drop``) are counted, but are not problems.

``dprelease run`` calls it before it reserves anything (:func:`dprelease.lifecycle.refusals.refuse_bad_data`):
every row for data it reads whole, the header (schema) only for large streamed data and for
Dask; ``dprelease check SPEC`` always reads every row. It is read-only: it never draws noise,
never writes a file and never touches the ledger.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dprelease.data.load import (
    columns_to_read,
    encode_column,
    in_period,
    needed_columns,
    null_mask,
    source,
    summed_columns,
    sums_allow_missing,
    undeclared_summed,
    whole_numbers,
)
from dprelease.data.rules import with_rule_columns
from dprelease.data.identity import Sketcher
from dprelease.data.scan import Piece, Source, csv_header, every_column
from dprelease.errors import DataError, first_line
from dprelease.spec import BinnedColumn, Column, RangeColumn, RollupColumn, Spec

NA_LIKE = frozenset({"N", "NA", "N/A", "n/a", "na", "NaN", "nan", "NULL", "null", "None", "none", ".", "-", "?",
                     "missing", "MISSING", "NR", "-9", "-99", "-999", "99999"})  # how files often write "missing"


@dataclass
class Finding:
    """One kind of problem in one column: how many rows have it, and the first one's place and
    value (for the operator's terminal only: see :func:`check_data`)."""

    column: str
    kind: str  # absent | duplicate | unreadable | unparsable | outside | missing | not-number | not-finite | no-id
    what: str  # e.g. "outside the declared domain"
    fix: str
    rows: int = 0
    example: str | None = None  # the first offending value, as text
    where: str | None = None  # its file and data row
    problem: bool = True  # False: rows the column drops by its own opt-in (on_out_of_domain: drop)

    def line(self) -> str:
        """e.g. ``column PUMA: 3 rows outside the declared domain, e.g. '99-99999' (data.csv data row 101); fix: ...``"""
        count = f"{self.rows:,} row{'s' if self.rows != 1 else ''} " if self.rows else ""
        example = f", e.g. {self.example!r}" if self.example is not None else ""
        where = f" ({self.where})" if self.where else ""
        return f"column {self.column}: {count}{self.what}{example}{where}; {self.fix}"


@dataclass
class DataCheck:
    """What :func:`check_data` found. ``rows_read`` and ``rows`` (the rows of the release's
    period) are None when only the schema was checked."""

    data: str  # the dataset's path
    columns: list[str]  # every column checked, in spec order
    full: bool  # every row was read (else: the header or schema only)
    findings: list[Finding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # problems of whole files (unreadable, empty), each naming it
    rows_read: int | None = None
    rows: int | None = None

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def empty(self) -> bool:
        """Every row was read, the files were readable, and they hold no row at all (a period of a
        partitioned dataset without rows is not refused: the data may hold other periods)."""
        return self.full and not self.files and self.rows_read == 0

    @property
    def ok(self) -> bool:
        return not self.problems and not self.files and not self.empty

    def lines(self) -> list[str]:
        """Every problem, one line each (the whole files' first, then the columns', in spec order)."""
        out = list(self.files)
        if self.empty:
            out.append(f"{self.data}: no rows (a header only); point dataset.path at the data (a release of no "
                       "rows spends its budget on nothing)")
        order = {name: i for i, name in enumerate(self.columns)}
        return out + [f.line() for f in sorted(self.problems, key=lambda f: order.get(f.column, len(order)))]

    def of(self, column: str) -> list[Finding]:
        """The findings of one column (problems and drops)."""
        return [f for f in self.findings if f.column == column]


def check_data(spec: Spec, *, full: bool = True, read: Callable[[int], None] | None = None,
               records: Sketcher | None = None) -> DataCheck:
    """Check the release's data against ``spec``: every row (``full``), or each file's header
    (or Parquet schema) only. Never raises for a problem in the data: the problems are returned,
    counted per column (a run refuses the data if there is any). ``read`` is told the bytes
    read so far across all files (see :func:`data_bytes`), for a progress bar. With ``records``
    (and ``full``), every column of every row is read and added to it in the same pass (the
    data's identity, :mod:`dprelease.data.identity`): complete whenever the check finds the data
    fit (a file it could not read whole is a problem).

    Assumes: the spec validated (its domains, ranges and ``na_values`` are the declared ones; no
    domain is ever read off the data). Guarantees: reads the data only (no noise, no file written,
    no ledger); checks exactly what a run's loader would refuse (the same encoder,
    :func:`dprelease.data.load.encode_column`, on the same columns), rows of other periods of a
    partitioned dataset excepted, as a run ignores them.

    It reads confidential data, and what it returns is data-dependent: the number of rows with
    each problem, and the first offending value with its row. Like any data error's message it is
    for the data holder running the check, on their terminal; it must never be written to the
    ledger, a published file, a report or an orchestrator's logs.
    """
    reading = with_rule_columns(spec)  # a run reads the rules' columns too, before anything is reserved
    src = source(reading)
    names, text = columns_to_read(reading)
    declared = [c for c in needed_columns(reading) if not isinstance(c, (BinnedColumn, RollupColumn))]
    extra = [n for n in names if n not in {c.name for c in declared}]
    result = DataCheck(str(spec.dataset.resolved_path), [c.name for c in declared] + extra, full,
                       rows_read=0 if full else None, rows=0 if full else None)
    pieces = _pieces(src, result)
    done = 0
    for piece in pieces:
        header = _schema(src, piece, names, result)
        present = [n for n in names if header is not None and n in header]
        if not full or not _readable(reading, present, header):
            continue
        size = os.stat(piece.path).st_size
        progress = None if read is None else (lambda n, before=done: read(before + min(n, size)))
        wanted = present if records is None else list(dict.fromkeys(present + every_column(src, piece)))
        try:  # the columns the file has: one that lacks a column still has its other columns checked
            for first_row, batch in src.batches(piece, wanted, text, read=progress,
                                                dictionary=[n for n in wanted if n not in present]):
                _check_batch(reading, declared, batch, piece.path, first_row, result)
                if records is not None:
                    records.add(batch)
        except DataError as exc:  # a file that cannot be read past some point: the rest of it is not checked
            result.files.append(f"{exc}; the rows after it were not checked")
        done += size
    return result


def data_bytes(spec: Spec) -> int:
    """The bytes of every data file of the release (what :func:`check_data` reads)."""
    try:
        return sum(os.stat(p.path).st_size for p in source(spec).files())
    except (DataError, OSError):
        return 0


def _pieces(src: Source, result: DataCheck) -> list[Piece]:
    try:
        return src.files()
    except DataError as exc:
        result.files.append(str(exc))
        return []


def _readable(spec: Spec, present: list[str], header: list[str] | None) -> bool:
    """Whether the rows of a file can be checked: its header was read, names no column twice,
    and has the columns that say which rows are the release's (partition, person id)."""
    if header is None or any(header.count(n) > 1 for n in present):
        return False
    return all(n in present for n in (spec.dataset.partition_column, spec.unit_id) if n)


def _schema(src: Source, piece: Piece, names: list[str], result: DataCheck) -> list[str] | None:
    """The piece's column names (its Hive keys included), its missing and repeated needed columns
    added to the findings; None if it cannot be read."""
    try:
        if src.format == "parquet":
            header = list(pq.ParquetFile(piece.path).schema_arrow.names)
        else:
            header = csv_header(piece.path, src.delimiter)
    except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError) as exc:
        empty = os.path.isfile(piece.path) and os.stat(piece.path).st_size == 0
        result.files.append(f"{piece.path}: the file is empty (not even a header line); point dataset.path at the data"
                            if empty else f"{piece.path}: cannot read as {src.format}: {first_line(exc)}")
        return None
    header += [key for key, _ in piece.keys]
    shown = ", ".join(header[:30]) + (" ..." if len(header) > 30 else "")
    absent = [n for n in names if n not in header]
    for name in absent:
        close = difflib.get_close_matches(name, header, n=1)
        _note(result, name, "absent", f"not in the data file {piece.path}",
              (f"did you mean {close[0]!r}? " if close else "")
              + f"name the column as the data does (the file has: {shown}), or add it to the data")
    repeated = sorted({n for n in names if header.count(n) > 1})
    for name in repeated:
        _note(result, name, "duplicate", f"appears more than once in the header of {piece.path}",
              "give each column of the file its own name")
    return header


def _note(result: DataCheck, column: str, kind: str, what: str, fix: str, rows: int = 0,
          example: str | None = None, where: str | None = None, problem: bool = True) -> Finding:
    """Add ``rows`` to the finding of (column, kind), created with the first place and value."""
    for f in result.findings:
        if f.column == column and f.kind == kind:
            f.rows += rows
            return f
    found = Finding(column, kind, what, fix, rows, example, where, problem)
    result.findings.append(found)
    return found


def _check_batch(spec: Spec, declared: list[Column], batch: pa.RecordBatch, path: str, first_row: int,
                 result: DataCheck) -> None:
    table = pa.Table.from_batches([batch])
    period = in_period(spec, table)
    result.rows_read = (result.rows_read or 0) + table.num_rows
    result.rows = (result.rows or 0) + int(period.sum())
    has = set(table.column_names)
    for column in (c for c in declared if c.name in has):
        _check_column(spec, column, table.column(column.name).combine_chunks(), period, path, first_row, result)
    for name in (n for n in undeclared_summed(spec) if n in has):
        _check_numbers(spec, name, table.column(name).combine_chunks(), period, path, first_row, result)
    if spec.unit_id:
        arr = table.column(spec.unit_id).combine_chunks()
        _flag(result, spec.unit_id, "no-id", f"with no {spec.unit_id} (the person identifier of privacy.unit)",
              "every row must name its person", _mask(null_mask(arr), period), arr, path, first_row)


def _check_column(spec: Spec, column: Column, arr: pa.Array, period: np.ndarray, path: str, first_row: int,
                  result: DataCheck) -> None:
    """The rows of one declared column that the encoder refuses (or drops), by kind."""
    numbers = isinstance(column, RangeColumn)
    name = column.name
    try:
        _, bad = encode_column(spec, column, arr)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        _note(result, name, "unreadable", f"(type {arr.type}) cannot be read as {'whole numbers' if numbers else 'text'}"
              f": {first_line(exc)}", "store the column as text or integers", int(period.sum()), where=path)
        return
    if numbers and column.missing is not None and name in _summed_declared(spec):
        _missing_in_sums(spec, name, arr, period, path, first_row, result)
    if bad is None or not (bad := bad & period).any():
        return
    drop = column.on_out_of_domain == "drop"
    missing = _mask(null_mask(arr), bad)
    unparsable = _mask(whole_numbers(arr)[1], bad) if numbers else np.zeros(len(arr), dtype=bool)
    outside = bad & ~missing & ~unparsable
    dropped = f"dropped (on_out_of_domain: drop on columns.{name})"
    na = f"empty or one of na_values {list(spec.dataset.na_values)}" if spec.dataset.na_values else "empty"
    _flag(result, name, "missing", f"missing ({na}) in a column that declares no missing: category",
          dropped if drop else f"add missing: LABEL to columns.{name}, or on_out_of_domain: drop; if one of "
          "na_values is a real value of this column, remove it from dataset.na_values", missing, arr, path, first_row,
          problem=not drop)
    _flag(result, name, "unparsable", "not whole numbers", dropped if drop else
          f"fix the data, or set on_out_of_domain: drop on columns.{name}", unparsable, arr, path, first_row,
          problem=not drop)
    domain = f"the declared range [{column.low}, {column.high}]" if numbers else "the declared domain"
    _flag(result, name, "outside", f"outside {domain}", dropped if drop else
          f"fix the data or the spec's domain, or set on_out_of_domain: drop on columns.{name}", outside, arr,
          path, first_row, problem=not drop)


def _flag(result: DataCheck, column: str, kind: str, what: str, fix: str, rows: np.ndarray, arr: pa.Array,
          path: str, first_row: int, problem: bool = True) -> None:
    """Count the rows in ``rows`` under (column, kind); the first one's value and place are kept.
    A value that files often write for "missing" gets the na_values hint."""
    if not rows.any():
        return
    first = int(np.flatnonzero(rows)[0])
    value = arr[first].as_py()
    example = None if value is None else str(value)
    if example in NA_LIKE and problem and kind in ("unparsable", "outside"):
        fix = (f"if that value marks a missing value, add it to dataset.na_values (and missing: LABEL to "
               f"columns.{column}); else {fix}")
    _note(result, column, kind, what, fix, int(rows.sum()), example, f"{path} data row {first_row + first + 1:,}",
          problem)


def _check_numbers(spec: Spec, name: str, arr: pa.Array, period: np.ndarray, path: str, first_row: int,
                   result: DataCheck) -> None:
    """A summed column not declared under columns:, read as numbers exactly as the loader does
    (Arrow's cast to float64; where it fails, each distinct value is cast on its own)."""
    missing = _mask(null_mask(arr), period)
    try:
        numbers = pc.cast(arr, pa.float64())
        parsed = ~_mask(null_mask(arr), np.ones(len(arr), dtype=bool))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        distinct = pc.unique(arr.drop_null())
        failing = [v for v in distinct.to_pylist() if not _casts(pa.array([v], arr.type))]
        refused = np.asarray(pc.is_in(arr, value_set=pa.array(failing, arr.type)).fill_null(False)
                             .to_numpy(zero_copy_only=False), dtype=bool)
        parsed = ~refused & ~_mask(null_mask(arr), np.ones(len(arr), dtype=bool))
        numbers = pc.cast(pc.if_else(pa.array(parsed), arr, pa.scalar(None, arr.type)), pa.float64())
    values = np.asarray(numbers.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64)
    where = f"a table's measure sums {name}"
    _flag(result, name, "not-number", f"not numbers ({where}: it must hold numbers)", "fix the data",
          period & ~missing & ~parsed, arr, path, first_row)
    _flag(result, name, "not-finite", f"NaN or an infinity ({where})", "a sum needs finite numbers: fix the data",
          period & parsed & ~np.isfinite(values), arr, path, first_row)
    if not sums_allow_missing(spec, name):
        _flag(result, name, "missing", f"missing ({where})", _MISSING_FIX.format(name=name), missing, arr, path,
              first_row)


def _casts(value: pa.Array) -> bool:
    try:
        pc.cast(value, pa.float64())
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


_MISSING_FIX = ("add missing: zero (count them as 0) to the measure of every table that sums {name}, or missing: "
                "skip (leave those rows out) to a mean's")


def _missing_in_sums(spec: Spec, name: str, arr: pa.Array, period: np.ndarray, path: str, first_row: int,
                     result: DataCheck) -> None:
    """A summed range column's missing category, which a table summing it must say what to do with."""
    if not sums_allow_missing(spec, name):
        _flag(result, name, "missing", f"missing (a table's measure sums {name})", _MISSING_FIX.format(name=name),
              _mask(null_mask(arr), period), arr, path, first_row)


def _summed_declared(spec: Spec) -> set[str]:
    return set(summed_columns(spec)) - set(undeclared_summed(spec))


def _mask(mask: np.ndarray | None, within: np.ndarray) -> np.ndarray:
    return np.zeros(within.size, dtype=bool) if mask is None else mask & within
