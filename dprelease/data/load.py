"""Confidential data in, integer codes against the declared domains out.

Reads only the columns the spec's tables need (CSV or Parquet, through pyarrow), and maps
every value to its code in the *declared* domain: categorical values are matched as text,
range values as integers (an integral float such as ``15400.0`` counts, ``3.5`` does not).
A value outside its domain, or a missing value where the column declares no ``missing``
category, is a :class:`DataError` naming the column, unless the column opts in with
``on_out_of_domain: drop`` (each such row is dropped on its own: a row-level transformation
that keeps the add/remove-one-row sensitivity of every later count at 1).

The operator running dprelease is trusted with the data, so a DataError may quote an
offending value; it must only ever reach the operator's terminal.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dprelease.errors import UserError
from dprelease.spec import BinnedColumn, CategoricalColumn, Column, RangeColumn, Spec

CODE = np.int64


class DataError(UserError):
    """The data does not match the spec (exit 2). May quote a value: terminal only."""


@dataclass(frozen=True, slots=True)
class Encoded:
    """Codes per column for the rows kept; confidential (row-level)."""

    codes: dict[str, np.ndarray]
    rows_read: int
    rows_dropped: int

    @property
    def rows(self) -> int:
        return self.rows_read - self.rows_dropped


def needed_columns(spec: Spec) -> list[Column]:
    """The columns the tables use, with the sources of derived columns, in spec order."""
    used: set[str] = set()
    for table in spec.tables:
        used.update(table.group_by)
        used.update(c.column for c in table.where)
    for column in spec.columns:
        if isinstance(column, BinnedColumn) and column.name in used:
            used.add(column.source)
    return [c for c in spec.columns if c.name in used]


def file_fingerprint(path: Path) -> str:
    """SHA-256 of the data file's bytes (internal only: never published)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def read_table(spec: Spec, names: list[str]) -> pa.Table:
    """Read only ``names`` from the dataset, every CSV value as text."""
    d = spec.dataset
    path = d.resolved_path
    if not path.exists():
        raise DataError(f"{spec.source}: dataset.path {d.path!r} does not exist (resolved to {path})")
    try:
        if d.format == "csv":
            return _read_csv(path, names, d.na_values, d.delimiter)
        return _read_parquet(path, names)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read as {d.format}: {_first_line(exc)}") from None


def _read_csv(path: Path, names: list[str], na_values: tuple[str, ...], delimiter: str) -> pa.Table:
    from pyarrow import csv

    header = _csv_header(path, delimiter)
    _require(path, header, names)
    table = csv.read_csv(
        path,
        parse_options=csv.ParseOptions(delimiter=delimiter),
        convert_options=csv.ConvertOptions(
            include_columns=names, column_types={n: pa.string() for n in names},
            null_values=["", *na_values], strings_can_be_null=True, quoted_strings_can_be_null=False),
    )
    return table


def _csv_header(path: Path, delimiter: str) -> list[str]:
    from pyarrow import csv

    reader = csv.open_csv(path, parse_options=csv.ParseOptions(delimiter=delimiter),
                          read_options=csv.ReadOptions(block_size=1 << 16))
    return list(reader.schema.names)


def _read_parquet(path: Path, names: list[str]) -> pa.Table:
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    _require(path, list(schema.names), names)
    return pq.read_table(path, columns=names)


def _require(path: Path, header: list[str], names: list[str]) -> None:
    missing = [n for n in names if n not in header]
    if missing:
        raise DataError(f"{path}: no column {', '.join(repr(m) for m in missing)} in the data "
                        f"(it has: {', '.join(header[:30])}{' ...' if len(header) > 30 else ''})")
    dupes = {n for n in names if header.count(n) > 1}
    if dupes:
        raise DataError(f"{path}: column {', '.join(sorted(dupes))} appears more than once in the header")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def encode(spec: Spec) -> Encoded:
    """Read the dataset and encode every needed column; apply per-column drop opt-ins.

    Privacy contract: a deterministic, row-by-row map. The domains come from the spec, never
    from the data, so the set of possible codes (and every histogram's shape) is public.
    """
    columns = needed_columns(spec)
    declared = [c for c in columns if not isinstance(c, BinnedColumn)]
    table = read_table(spec, [c.name for c in declared])
    n = table.num_rows
    codes: dict[str, np.ndarray] = {}
    keep = np.ones(n, dtype=bool)
    for column in declared:
        arr = table.column(column.name).combine_chunks() if n else pa.array([], pa.string())
        code, bad = _encode_column(spec, column, arr)
        if bad.any():
            if column.on_out_of_domain == "drop":
                keep &= ~bad
            else:
                raise DataError(_bad_values_message(spec, column, arr, bad))
        codes[column.name] = code
    for column in columns:
        if isinstance(column, BinnedColumn):
            codes[column.name] = _bin(column, spec.column(column.source), codes[column.source])
    if not keep.all():
        codes = {k: v[keep] for k, v in codes.items()}
    return Encoded(codes, rows_read=n, rows_dropped=int(n - keep.sum()))


def _encode_column(spec: Spec, column: Column, arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Codes (int64) and a mask of values that have no code."""
    is_null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    match column:
        case CategoricalColumn(values=values):
            text = arr if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else pc.cast(arr, pa.string())
            index = pc.index_in(text, value_set=pa.array(values, pa.string()))
            code = np.asarray(index.fill_null(-1).to_numpy(zero_copy_only=False), dtype=CODE)
            bad = (code < 0) & ~is_null
        case RangeColumn(low=low, high=high):
            value, unparsable = _integers(arr, is_null)
            code = value - low
            bad = unparsable | (~is_null & ((value < low) | (value > high)))
        case _:
            raise AssertionError(column)  # pragma: no cover
    if column.missing is not None:
        code = np.where(is_null, column.size - 1, code)
    else:
        bad = bad | is_null
    return np.where(bad, 0, code).astype(CODE, copy=False), bad


def _integers(arr: pa.Array, is_null: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer values and a mask of non-null values that are not whole numbers."""
    if pa.types.is_integer(arr.type):
        return np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64), np.zeros(len(arr), bool)
    try:
        as_int = pc.cast(arr, pa.int64())
        return np.asarray(as_int.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64), np.zeros(len(arr), bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    # slower path: per value, for text such as "15400.0" or stray non-numbers
    floats = np.full(len(arr), np.nan)
    texts = arr.to_pylist() if not pa.types.is_floating(arr.type) else None
    if texts is None:
        floats = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=float)
    else:
        for i, t in enumerate(texts):
            if t is not None:
                try:
                    floats[i] = float(t)
                except ValueError:
                    pass
    whole = np.isfinite(floats) & (floats == np.floor(floats)) & (np.abs(floats) < 2**53)
    unparsable = ~is_null & ~whole
    value = np.where(whole, floats, 0).astype(np.int64)
    return value, unparsable


def _bin(column: BinnedColumn, source: Column, source_code: np.ndarray) -> np.ndarray:
    assert isinstance(source, RangeColumn)
    value = source_code + source.low
    code = np.searchsorted(np.asarray(column.edges), value, side="right") - 1
    if source.missing is not None:
        code = np.where(source_code == source.size - 1, column.size - 1, code)
    return code.astype(CODE, copy=False)


def _bad_values_message(spec: Spec, column: Column, arr: pa.Array, bad: np.ndarray) -> str:
    count = int(bad.sum())
    first = int(np.flatnonzero(bad)[0])
    example = arr[first].as_py()
    where = f"{spec.dataset.resolved_path}: column {column.name}"
    if example is None:
        return (f"{where}: {count:,} missing value(s) (empty or one of na_values), but the column declares "
                f"no missing: category (first at data row {first + 1}); add missing: LABEL to columns.{column.name}, "
                "or on_out_of_domain: drop")
    domain = (f"the declared range [{column.low}, {column.high}]" if isinstance(column, RangeColumn)
              else "the declared domain")
    return (f"{where}: {count:,} value(s) outside {domain}, e.g. {example!r} at data row {first + 1}; fix the "
            f"data or the spec, or set on_out_of_domain: drop on columns.{column.name}")
