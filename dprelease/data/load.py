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

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dprelease.data.arrays import rank_within
from dprelease.data.scan import Piece, Source
from dprelease.data.scan import fingerprint as file_fingerprint
from dprelease.errors import DataError, first_line
from dprelease.spec import (
    ROOT,
    BinnedColumn,
    CategoricalColumn,
    Column,
    ModeMeasure,
    RangeColumn,
    RollupColumn,
    Spec,
    SumMeasure,
    MeanMeasure,
)

__all__ = ["Encoded", "encode", "encode_batch", "encoded_batches", "file_fingerprint", "needed_columns", "pieces",
           "read_table"]


def code_dtype(size: int) -> np.dtype:
    """Signed (−1 marks 'no code' while encoding) and narrow: less memory traffic per row."""
    return np.dtype(np.int16 if size < 2**15 else np.int32 if size < 2**31 else np.int64)


@dataclass(frozen=True, slots=True)
class Encoded:
    """Codes per column for the rows kept; confidential (row-level)."""

    codes: dict[str, np.ndarray]
    rows_read: int
    rows_dropped: int  # out-of-domain drops and rows over the contribution bound
    rows_over_bound: int = 0  # of which: a person's rows beyond max_rows
    values: dict[str, np.ndarray] = field(default_factory=dict)  # summed columns (float64, NaN if missing)
    local_counts: dict[str, np.ndarray] = field(default_factory=dict)  # per local table: answers per value

    @property
    def rows(self) -> int:
        return self.rows_read - self.rows_dropped


def needed_columns(spec: Spec) -> list[Column]:
    """The columns the tables use, with the sources of derived columns, in spec order."""
    used: set[str] = set()
    for table in spec.tables:
        for _, dims, _ in table.measured():
            used.update(dims)
        used.update(c.column for c in table.where)
        if isinstance(table.measure, ModeMeasure):
            used.add(table.measure.column)
        if isinstance(table.measure, (SumMeasure, MeanMeasure)):  # a declared range column is checked against it
            used.add(table.measure.column)
    used.update(t.column for t in spec.local_tables)
    used.update(level for level in spec.invariant_levels if level != ROOT)
    for column in reversed(spec.columns):  # rollups: coarse first, each from the next finer
        if isinstance(column, (BinnedColumn, RollupColumn)) and column.name in used:
            used.add(column.source)
    return [c for c in spec.columns if c.name in used]


def source(spec: Spec) -> Source:
    d = spec.dataset
    if not d.resolved_path.exists():
        raise DataError(f"{spec.source}: dataset.path {d.path!r} does not exist (resolved to {d.resolved_path})")
    return Source(d.resolved_path, d.format, d.na_values, d.delimiter)


def columns_to_read(spec: Spec) -> tuple[list[str], list[str]]:
    """The data columns to read, and which of them to read as text (dictionary-encoded)."""
    columns = needed_columns(spec)
    declared = [c for c in columns if not isinstance(c, (BinnedColumn, RollupColumn))]
    identifier = [spec.unit_id] if spec.unit_id else []
    summed = undeclared_summed(spec)
    period = [spec.dataset.partition_column] if spec.dataset.partition_column else []
    names = list(dict.fromkeys([c.name for c in declared] + identifier + summed + period))
    text = [c.name for c in declared if isinstance(c, CategoricalColumn)] + identifier + summed + period
    return names, text


def pieces(spec: Spec, *, split: bool = False) -> list[Piece]:
    """The dataset's files (``split``: Parquet files cut into runs of row groups, for a cluster)."""
    src = source(spec)
    files = src.files()
    return src.split(files) if split else files


def encoded_batches(spec: Spec, piece: Piece, *, read: Callable[[int], None] | None = None) -> Iterator[Encoded]:
    """scan → encode: one piece's rows, batch by batch (:mod:`dprelease.data.scan`), each encoded
    (:func:`encode_batch`); what counting reads, in one direction. ``read``: see
    :meth:`~dprelease.data.scan.Source.batches`."""
    names, text = columns_to_read(spec)
    for first_row, batch in source(spec).batches(piece, names, text, read=read):
        yield encode_batch(spec, batch, where=piece.path, first_row=first_row)


def read_table(spec: Spec) -> pa.Table:
    """Every needed column of every row, in one table (every CSV value as text)."""
    src = source(spec)
    names, text = columns_to_read(spec)
    batches = [batch for piece in src.files() for _, batch in src.batches(piece, names, text)]
    if not batches:
        return pa.table({n: pa.array([], pa.string()) for n in names})
    try:
        return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataError(f"{src.path}: the files do not agree on their columns' types: {first_line(exc)}") from None


def encode(spec: Spec) -> Encoded:
    """Read the whole dataset and encode it (see :func:`encode_batch`). With a contribution bound
    (``privacy.unit`` with ``max_rows``) every row of a person must be in memory together, so
    this is the loader for it; otherwise :func:`dprelease.data.count.count_exact` streams."""
    return encode_batch(spec, read_table(spec), where=str(spec.dataset.resolved_path), bound=True)



def encode_batch(spec: Spec, table: pa.Table | pa.RecordBatch, *, where: str, first_row: int = 0,
                 bound: bool = False) -> Encoded:
    """Encode every needed column of some rows; apply per-column drop opt-ins (and, with
    ``bound``, the contribution bound over these rows, which must then be all of the data:
    see :func:`encode`).

    Privacy contract: a deterministic, row-by-row map (the contribution bound aside: it is
    per person, over every row at once). The domains come from the spec, never from the data,
    so the set of possible codes (and every histogram's shape) is public. ``where`` and
    ``first_row`` (the file, and its row number of the first row) only place error messages.
    """
    columns = needed_columns(spec)
    declared = [c for c in columns if not isinstance(c, (BinnedColumn, RollupColumn))]
    summed = undeclared_summed(spec)
    period = [spec.dataset.partition_column] if spec.dataset.partition_column else []
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    codes: dict[str, np.ndarray] = {}
    local_counts: dict[str, np.ndarray] = {}
    keep = np.ones(n, dtype=bool)
    if period:  # only this period's rows (a public, row-wise filter), before anything else
        keep &= in_period(spec, table)
    period_rows = keep.copy()
    for column in declared:
        arr = table.column(column.name).combine_chunks() if n else pa.array([], pa.string())
        try:
            code, bad = encode_column(spec, column, arr)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise DataError(f"{where}: column {column.name} (type {arr.type}) cannot be read "
                            f"as {'whole numbers' if isinstance(column, RangeColumn) else 'text'}: "
                            f"{first_line(exc)}") from None
        if bad is not None and period:
            bad = bad & period_rows  # other periods' rows are not this release's data
        if bad is not None and bad.any():
            if column.on_out_of_domain == "drop":
                keep &= ~bad
            else:
                raise DataError(_bad_values_message(where, first_row, column, arr, bad))
        codes[column.name] = code
        for t in spec.local_tables:  # every answer in its own domain counts, whatever the other columns hold
            if t.column == column.name:
                valid = code[period_rows] if bad is None else code[period_rows & ~bad]
                local_counts[t.name] = np.bincount(valid, minlength=column.size).astype(np.int64)
    for column in columns:
        if isinstance(column, BinnedColumn):
            codes[column.name] = _bin(column, spec.column(column.source), codes[column.source])
    for column in reversed(columns):  # the finest rollup first: each reads its finer level's codes
        if isinstance(column, RollupColumn):
            table_ = np.asarray(column.parent_of, dtype=code_dtype(column.size))
            codes[column.name] = table_[codes[column.source]]
    over = 0
    if spec.unit_id:
        if not bound:
            raise AssertionError("a contribution bound needs every row of a person at once: encode(spec)")
        before = int(keep.sum())
        keep &= bound_contributions(spec, table.column(spec.unit_id), keep)
        over = before - int(keep.sum())
    values = {name: _numbers(spec, where, name, table.column(name)) for name in summed}
    for column in declared:  # a declared range column's values are its codes, read and checked above
        if isinstance(column, RangeColumn) and column.name in summed_columns(spec):
            values[column.name] = _range_values(spec, where, column, codes[column.name], keep)
    if not keep.all():
        codes = {k: v[keep] for k, v in codes.items()}
        values = {k: v[keep] for k, v in values.items()}
    return Encoded(codes, rows_read=n, rows_dropped=int(n - keep.sum()), rows_over_bound=over, values=values,
                   local_counts=local_counts)


def in_period(spec: Spec, table: pa.Table) -> np.ndarray:
    """The rows of the release's period (``dataset.partition_column`` equal to its value; a
    missing value is no period's); every row when the dataset is not partitioned."""
    n = table.num_rows
    if not spec.dataset.partition_column:
        return np.ones(n, dtype=bool)
    values = table.column(spec.dataset.partition_column).combine_chunks() if n else pa.array([], pa.string())
    return np.asarray(pc.fill_null(pc.equal(values, spec.dataset.partition_value), False)
                      .to_numpy(zero_copy_only=False), dtype=bool)


def summed_columns(spec: Spec) -> list[str]:
    """The columns a table sums or averages, in spec order."""
    return list(dict.fromkeys(t.measure.column for t in spec.tables
                              if isinstance(t.measure, (SumMeasure, MeanMeasure))))


def undeclared_summed(spec: Spec) -> list[str]:
    """The summed columns not declared under ``columns:`` (read as numbers by :func:`_numbers`)."""
    declared = {c.name for c in spec.columns}
    return [name for name in summed_columns(spec) if name not in declared]


def _range_values(spec: Spec, where: str, column: RangeColumn, code: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """A summed range column's values (float64, NaN for its missing category) from its codes: the
    values the range check read, so a value outside the declared range never reaches a sum (it
    was refused, or its row dropped, as the column's ``on_out_of_domain`` says).

    Privacy contract: a deterministic, row-by-row map (code + low), like :func:`_numbers` for an
    undeclared column; the histogram then clamps each value to the measure's public bounds, which
    is what its sensitivity rests on (:mod:`dprelease.data.histogram`), so nothing here depends on
    other rows. Missing values are refused (naming the column, never a value) unless every table
    summing the column says what they are; ``keep`` (the rows kept) only places that check."""
    out = code.astype(np.float64) + column.low
    if column.missing is not None:
        missing = code == column.size - 1
        out[missing] = np.nan
        _missing_allowed(spec, where, column.name, missing & keep)
    return out


def sums_allow_missing(spec: Spec, name: str) -> bool:
    """Whether every table summing or averaging column ``name`` says what its missing values are."""
    return all(t.measure.missing_as_zero if isinstance(t.measure, SumMeasure) else t.measure.missing != "error"
               for t in spec.tables if isinstance(t.measure, (SumMeasure, MeanMeasure)) and t.measure.column == name)


def _missing_allowed(spec: Spec, where: str, name: str, missing: np.ndarray) -> None:
    """Refuse missing values of a summed column unless every table summing it says what they are."""
    if missing.any() and not sums_allow_missing(spec, name):
        raise DataError(f"{where}: column {name} has {int(missing.sum())} missing value(s); "
                        f"add missing: zero (count them as 0) to the measure of every table that sums {name}, or "
                        "missing: skip (leave those rows out) to a mean's")


def _numbers(spec: Spec, where: str, name: str, column: pa.ChunkedArray) -> np.ndarray:
    """A summed column as float64 (NaN where missing); refuses text, NaN and infinities, and
    missing values unless every table summing it says ``missing: zero``."""
    arr = column.combine_chunks() if column.num_chunks else pa.array([], pa.string())
    try:
        numbers = pc.cast(arr, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(f"{where}: column {name} (summed by a table's measure) must hold "
                        f"numbers: {first_line(exc)}") from None
    out = np.array(numbers.to_numpy(zero_copy_only=False), dtype=np.float64)  # a writable copy
    missing = np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
    if (~np.isfinite(out) & ~missing).any():
        raise DataError(f"{where}: column {name} holds NaN or an infinity; a sum needs "
                        "finite numbers (or missing values, with measure.missing: zero)")
    _missing_allowed(spec, where, name, missing)
    out[missing] = np.nan
    return out


def bound_contributions(spec: Spec, ids: pa.ChunkedArray, keep: np.ndarray, *, rng=None) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Rows to keep so that no person (one value of ``spec.unit_id``) has more than
    ``spec.max_rows`` of the rows in ``keep``; which of a person's rows stay is chosen
    uniformly at random with the OS CSPRNG (``rng``: the test-only seam).

    Privacy contract: a person's rows are bounded whatever the others hold, so adding or
    removing one person changes at most ``max_rows`` rows of every later histogram (its
    sensitivity is scaled by ``max_rows``). The choice must be random, not "the first k": a
    deterministic choice would still be bounded, but the random one does not favour the
    file's order. A row without an id cannot be bounded: it is an error.
    """
    from dprelease.mechanisms import OsEntropy

    arr = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.string())
    missing = np.asarray(arr.is_null().to_numpy(zero_copy_only=False)) & keep
    if missing.any():
        raise DataError(f"{spec.dataset.resolved_path}: {int(missing.sum())} row(s) have no {spec.unit_id} (the "
                        f"person identifier of privacy.unit); every row must name its person")
    person = np.asarray(arr.dictionary_encode().indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    rows = np.flatnonzero(keep)
    random = (OsEntropy() if rng is None else rng).words(rows.size)
    order = rows[np.lexsort((random, person[rows]))]  # by person, each person's rows in random order
    bounded = np.zeros(keep.size, dtype=bool)
    bounded[order[rank_within(person[order]) < spec.max_rows]] = True
    return bounded


def encode_column(spec: Spec, column: Column, arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Codes (int64) and a mask of values that have no code (None: every value has one)."""
    is_null = null_mask(arr)
    match column:
        case CategoricalColumn(values=values):
            code = _categorical_codes(arr, values, code_dtype(column.size))
            bad = code < 0  # undeclared, or missing (handled below)
        case RangeColumn(low=low, high=high):
            value, unparsable = whole_numbers(arr)
            dtype = code_dtype(column.size)
            if low == 0 and value.dtype.kind == "i" and value.dtype.itemsize <= dtype.itemsize:
                code = value  # already the code: no copy
            else:
                code = value.astype(np.int64, copy=False) - low
            if unparsable is None and (not code.size or (code.min() >= 0 and code.max() <= high - low)):
                code = code.astype(dtype, copy=False)  # every value in range: the common case
                if is_null is None:
                    return code, None
                code = code.copy() if code is value else code
                bad = np.zeros(code.size, dtype=bool)
            else:
                bad = (code < 0) | (code > high - low)
                if unparsable is not None:
                    bad |= unparsable
        case _:
            raise AssertionError(column)  # pragma: no cover
    if is_null is not None:
        if not code.flags.writeable:  # a zero-copy view of the loaded data
            code = code.copy()
        if column.missing is not None:
            code[is_null] = column.size - 1
            bad &= ~is_null
        else:
            bad |= is_null
    code = code.astype(code_dtype(column.size), copy=False)
    if not bad.any():
        return code, None
    code = code if code.flags.writeable else code.copy()
    code[bad] = 0
    return code, bad


def null_mask(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _lookup(keys: np.ndarray, codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """codes[i] where values == keys[i], else −1; a dense table when the keys are compact."""
    if not keys.size:
        return np.full(values.size, -1, dtype=codes.dtype)
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo < 1 << 22:
        table = np.full(hi - lo + 1, -1, dtype=codes.dtype)
        table[keys - lo] = codes
        if not values.size or (values.min() >= lo and values.max() <= hi):  # the common case
            return table[values - lo] if lo else table[values]
        inside = (values >= lo) & (values <= hi)
        out = table[np.clip(values - lo, 0, hi - lo)]
        if not inside.all():
            out[~inside] = -1
        return out
    order = np.argsort(keys)
    pos = np.clip(np.searchsorted(keys[order], values), 0, keys.size - 1)
    return np.where(keys[order][pos] == values, codes[order][pos], -1)


def _categorical_codes(arr: pa.Array, values: tuple[str, ...], dtype: np.dtype) -> np.ndarray:
    """Code of each value's *text* in ``values`` (−1: not declared, or missing)."""
    if pa.types.is_dictionary(arr.type):  # encode the distinct values once, then gather
        per_entry = _categorical_codes(arr.dictionary, values, dtype)
        if not per_entry.size:
            return np.full(len(arr), -1, dtype=dtype)
        indices = arr.indices.fill_null(0) if arr.null_count else arr.indices
        return per_entry[indices.to_numpy(zero_copy_only=False)]
    if pa.types.is_integer(arr.type):  # the text of an integer is its decimal form: "1", never "01"
        numeric = [(int(v), i) for i, v in enumerate(values) if v.lstrip("-").isdigit() and str(int(v)) == v]
        keys = np.array([k for k, _ in numeric], dtype=np.int64)
        codes = np.array([i for _, i in numeric], dtype=dtype)
        ints = arr.fill_null(0) if arr.null_count else arr
        return _lookup(keys, codes, ints.to_numpy(zero_copy_only=False))
    text = arr if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else pc.cast(arr, pa.string())
    index = pc.index_in(text, value_set=pa.array(values, pa.string()))
    return np.asarray(index.fill_null(-1).to_numpy(zero_copy_only=False), dtype=dtype)


_WHOLE = r"^[+-]?[0-9]{1,18}(\.0*)?$"  # "15400" or "15400.0"; not "1e1", "5_0", " 7" or "3.5"


def whole_numbers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Integer values (nulls as 0) and a mask of non-null values that are not whole numbers."""
    if pa.types.is_integer(arr.type):
        ints = arr.fill_null(0) if arr.null_count else arr
        return ints.to_numpy(zero_copy_only=False), None  # native width; widened only where needed
    if pa.types.is_floating(arr.type):
        floats = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=float)
        whole = np.isfinite(floats) & (floats == np.floor(floats)) & (np.abs(floats) < 2**53)
        is_null = null_mask(arr)
        unparsable = ~whole if is_null is None else (~whole & ~is_null)
        return np.where(whole, floats, 0).astype(np.int64), (unparsable if unparsable.any() else None)
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        raise TypeError(f"a range column needs integers or text, not {arr.type}")
    try:
        if not pc.any(pc.match_substring(arr, "x", ignore_case=True)).as_py():  # Arrow would read "0x10" as 16
            return np.asarray(pc.cast(arr, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # some value is not a plain integer: check each one strictly
    valid = pc.fill_null(pc.match_substring_regex(arr, _WHOLE), False)
    digits = pc.replace_substring_regex(arr, r"\.0*$", "")
    ints = pc.cast(pc.if_else(valid, digits, pa.scalar(None, arr.type)), pa.int64())
    is_null = null_mask(arr)
    bad = ~np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool)
    unparsable = bad if is_null is None else (bad & ~is_null)
    return np.asarray(ints.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64), unparsable


def _bin(column: BinnedColumn, source: Column, source_code: np.ndarray) -> np.ndarray:
    """Bin codes by table lookup over the source's codes (its values, then missing)."""
    assert isinstance(source, RangeColumn)
    values = np.arange(source.low, source.high + 1)
    table = np.searchsorted(np.asarray(column.edges), values, side="right") - 1
    if source.missing is not None:
        table = np.append(table, column.size - 1)
    return table.astype(code_dtype(column.size))[source_code]


def _bad_values_message(file: str, first_row: int, column: Column, arr: pa.Array, bad: np.ndarray) -> str:
    count = int(bad.sum())
    first = first_row + int(np.flatnonzero(bad)[0])
    example = arr[first - first_row].as_py()
    where = f"{file}: column {column.name}"
    if example is None:
        return (f"{where}: {count:,} missing value(s) (empty or one of na_values), but the column declares "
                f"no missing: category (first at data row {first + 1}); add missing: LABEL to columns.{column.name}, "
                "or on_out_of_domain: drop")
    domain = (f"the declared range [{column.low}, {column.high}]" if isinstance(column, RangeColumn)
              else "the declared domain")
    return (f"{where}: {count:,} value(s) outside {domain}, e.g. {example!r} at data row {first + 1}; fix the "
            f"data or the spec, or set on_out_of_domain: drop on columns.{column.name}")
