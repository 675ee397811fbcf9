"""Confidential data as a stream of record batches: one file or a directory of files.

A dataset path is a CSV or Parquet file, or a directory of them (every file below it whose
name does not start with ``.`` or ``_``; Hive-style ``KEY=value`` directories add a column
``KEY``). It is cut into :class:`Piece`\\ s, units of counting work that can be read
anywhere the path is visible (this process, or a Dask worker), and each piece is read in
batches of at most :data:`BATCH_ROWS` rows: only the needed columns, every CSV value as text,
Parquet text columns dictionary-encoded. Empty text and the spec's ``na_values`` read as nulls
in either format, in every text column and in a Hive key's value (:attr:`Source.missing`).
Memory is one batch (plus a little read-ahead), whatever the size of the data.

Every piece's own columns are checked against the needed ones: a file that lacks a column is
an error, never a column of nulls.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Iterator
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dprelease.errors import DataError, first_line

BATCH_ROWS = 1 << 20  # rows per batch: big enough that per-batch work is noise, small enough for memory
CSV_BLOCK_BYTES = 32 << 20  # bytes of CSV text per batch (about a million rows of a dozen short columns)
PIECE_ROWS = 1 << 22  # rows per piece when work is spread over a cluster (whole row groups)


HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # how Hive, Spark and pyarrow write a null key
_ENCODED = pa.dictionary(pa.int32(), pa.string())  # a CSV column read dictionary-encoded


@dataclass(frozen=True, eq=False)
class Piece:
    """A file, or some of a Parquet file's row groups; picklable (sent to Dask workers)."""

    path: str
    keys: tuple[tuple[str, str | None], ...] = ()  # the Hive keys of its directories (None: a null)
    row_groups: tuple[int, ...] | None = None  # None: the whole file
    first_row: int = 0  # the file's row number of the piece's first row (for messages)


@dataclass(frozen=True)
class Source:
    """What to read: the dataset's location and how to parse it (from the spec)."""

    path: Path
    format: str  # csv | parquet
    na_values: tuple[str, ...] = ()
    delimiter: str = ","

    @property
    def missing(self) -> tuple[str, ...]:
        """The text that reads as missing: empty text and the spec's ``na_values``, in a CSV field
        quoted or not (as pandas and R read ``na_values``), in a Parquet text column and in a Hive
        key's value alike."""
        return ("", *self.na_values)

    def files(self) -> list[Piece]:
        """Every data file, in a stable order, each with its Hive keys; an error if there is none."""
        if not self.path.exists():
            raise DataError(f"{self.path}: no such file or directory")
        if not self.path.is_dir():
            return [Piece(str(self.path))]
        pieces = []
        for file in sorted(p for p in self.path.rglob("*") if p.is_file() and not _hidden(p.relative_to(self.path))):
            keys = tuple(_hive_key(part) for part in file.relative_to(self.path).parts[:-1] if "=" in part)
            pieces.append(Piece(str(file), keys))
        if not pieces:
            raise DataError(f"{self.path}: the directory holds no data file (names starting with '.' or '_' are "
                            "skipped)")
        return pieces

    def split(self, pieces: list[Piece], rows: int | None = None) -> list[Piece]:
        """Parquet files cut into runs of whole row groups of about ``rows`` (default
        :data:`PIECE_ROWS`) rows; CSV files stay whole."""
        rows = PIECE_ROWS if rows is None else rows
        if self.format != "parquet":
            return pieces
        out = []
        for piece in pieces:
            try:
                meta = pq.ParquetFile(piece.path).metadata
            except (pa.ArrowException, OSError) as exc:
                raise DataError(f"{piece.path}: cannot read as parquet: {first_line(exc)}") from None
            groups: list[int] = []
            group_rows = start = 0
            for group in range(meta.num_row_groups):
                groups.append(group)
                group_rows += meta.row_group(group).num_rows
                if group_rows >= rows or group == meta.num_row_groups - 1:
                    out.append(Piece(piece.path, piece.keys, tuple(groups), start))
                    start += group_rows
                    groups, group_rows = [], 0
            if not meta.num_row_groups:
                out.append(piece)
        return out

    def batches(self, piece: Piece, names: list[str], text_columns: list[str], *,
                read: Callable[[int], None] | None = None,
                dictionary: Collection[str] = ()) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(file row of the batch's first row, batch) for the needed columns of one piece; a
        Hive key is a column of text. ``read`` (for a progress bar) is told, after each block,
        about how many of the file's bytes were read so far (a CSV block is about
        :data:`CSV_BLOCK_BYTES` of text; a Parquet file's bytes go in proportion to its rows).
        ``dictionary``: CSV columns read as dictionary-encoded text (each block's distinct values
        once, encoded by the reader's threads: for a reader that only hashes values)."""
        missing = self.missing
        keys = {k: None if v in missing else v for k, v in piece.keys}  # a Hive key's value reads as a field's
        missing_text = pa.array(missing, pa.string())
        try:
            reader = self._reader(piece, [n for n in names if n not in keys], text_columns, list(keys),
                                  set(dictionary))
            row = piece.first_row
            for blocks, block in enumerate(reader, 1):  # a CSV block may hold more than BATCH_ROWS rows
                if self.format == "parquet":
                    block = _missing_text(block, missing_text)
                for start in range(0, block.num_rows, BATCH_ROWS):
                    batch = block.slice(start, BATCH_ROWS)
                    if keys:
                        batch = _with_keys(batch, [n for n in names if n in keys], keys)
                    yield row, batch
                    row += batch.num_rows
                if read is not None:
                    read(_parquet_bytes(piece, row - piece.first_row) if self.format == "parquet"
                         else min(blocks * CSV_BLOCK_BYTES, os.stat(piece.path).st_size))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError, UnicodeDecodeError,
                ValueError) as exc:
            raise DataError(f"{piece.path}: cannot read as {self.format}: {first_line(exc)}") from None

    def _reader(self, piece: Piece, names: list[str], text_columns: list[str],
                keys: list[str], dictionary: set[str]) -> Iterator[pa.RecordBatch]:
        """Batches of the file's own columns ``names``, after checking its header (or schema)."""
        if self.format == "parquet":
            file = pq.ParquetFile(piece.path, pre_buffer=False)  # pre-buffering holds more as files grow
            schema = file.schema_arrow
            require(piece.path, list(schema.names) + keys, names)
            text = [n for n in names if n in text_columns and (pa.types.is_string(schema.field(n).type)
                                                                or pa.types.is_large_string(schema.field(n).type))]
            if text:  # dictionary-encoded text: each distinct value is encoded once, then gathered
                file = pq.ParquetFile(piece.path, read_dictionary=text, pre_buffer=False)
            groups = list(piece.row_groups) if piece.row_groups is not None else None
            return file.iter_batches(batch_size=BATCH_ROWS, row_groups=groups, columns=names, use_threads=True)
        header = csv_header(piece.path, self.delimiter)
        require(piece.path, header + keys, names)
        return pa_csv.open_csv(
            piece.path, read_options=pa_csv.ReadOptions(block_size=CSV_BLOCK_BYTES),
            parse_options=pa_csv.ParseOptions(delimiter=self.delimiter),
            convert_options=pa_csv.ConvertOptions(
                include_columns=names, column_types={n: _ENCODED if n in dictionary else pa.string() for n in names},
                null_values=list(self.missing), strings_can_be_null=True, quoted_strings_can_be_null=True))


def _missing_text(batch: pa.RecordBatch, missing: pa.Array) -> pa.RecordBatch:
    """The batch with each value of ``missing`` null in every text column (dictionary-encoded or
    not; whatever the column's use: categorical, range, summed, id), as the CSV reader's
    ``null_values`` make them: a Parquet file's text reads as a CSV file's does. Numbers and
    other types are left as they are (nulls are how Parquet writes a missing one)."""
    columns, changed = list(batch.columns), False
    for i, column in enumerate(columns):
        if getattr(pa.types, "is_string_view", lambda _: False)(column.type):  # pyarrow 16+
            column = column.cast(pa.string())
        if pa.types.is_dictionary(column.type) and (pa.types.is_string(column.type.value_type)
                                                    or pa.types.is_large_string(column.type.value_type)):
            hit = pc.is_in(column.dictionary, value_set=missing.cast(column.type.value_type))
            if not pc.any(hit).as_py():
                continue
            drop = pc.take(hit, column.indices)
            indices = pc.if_else(drop, pa.scalar(None, column.indices.type), column.indices)
            columns[i] = pa.DictionaryArray.from_arrays(indices, column.dictionary)
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            hit = pc.is_in(column, value_set=missing.cast(column.type))
            if not pc.any(hit).as_py():
                continue
            columns[i] = pc.if_else(hit, pa.scalar(None, column.type), column)
        else:
            continue
        changed = True
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names) if changed else batch


def _parquet_bytes(piece: Piece, rows: int) -> int:
    """A Parquet piece's bytes, in proportion to the rows read of it (for progress only)."""
    meta = pq.ParquetFile(piece.path).metadata
    total = meta.num_rows if piece.row_groups is None else sum(meta.row_group(g).num_rows for g in piece.row_groups)
    return os.stat(piece.path).st_size * rows // max(total, 1)


def _hive_key(part: str) -> tuple[str, str | None]:
    """``KEY=value`` of a Hive directory: the value URL-unescaped (as pyarrow and Spark write
    it), and the default-partition marker a null."""
    key, value = part.split("=", 1)
    return unquote(key), None if value == HIVE_NULL else unquote(value)


def _with_keys(batch: pa.RecordBatch, names: list[str], keys: dict[str, str | None]) -> pa.RecordBatch:
    """The batch with a text column per Hive key (the same value in every row)."""
    columns = [*batch.columns, *(pa.array([keys[n]] * batch.num_rows, pa.string()) for n in names)]
    return pa.RecordBatch.from_arrays(columns, names=[*batch.schema.names, *names])


def csv_header(path: str | Path, delimiter: str) -> list[str]:
    """A CSV file's column names (its first line)."""
    reader = pa_csv.open_csv(path, parse_options=pa_csv.ParseOptions(delimiter=delimiter),
                             read_options=pa_csv.ReadOptions(block_size=1 << 16))
    return list(reader.schema.names)


def every_column(src: Source, piece: Piece) -> list[str]:
    """Every column of a piece that its file names once (a name given twice is ambiguous: left
    out), and its Hive keys."""
    try:
        names = list(pq.ParquetFile(piece.path).schema_arrow.names) if src.format == "parquet" \
            else csv_header(piece.path, src.delimiter)
    except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{piece.path}: cannot read as {src.format}: {first_line(exc)}") from None
    keys = [key for key, _ in piece.keys]
    return [n for n in names if names.count(n) == 1 and n not in keys] + keys


def require(where: str | Path, header: list[str], names: list[str]) -> None:
    """Every needed column present, and none of them twice."""
    missing = [n for n in names if n not in header]
    if missing:
        raise DataError(f"{where}: no column {', '.join(repr(m) for m in missing)} in the data "
                        f"(it has: {', '.join(header[:30])}{' ...' if len(header) > 30 else ''})")
    dupes = {n for n in names if header.count(n) > 1}
    if dupes:
        raise DataError(f"{where}: column {', '.join(sorted(dupes))} appears more than once in the header")


def _hidden(relative: Path) -> bool:
    return any(part.startswith((".", "_")) for part in relative.parts)


def fingerprint(path: Path) -> str:
    """SHA-256 of the data's bytes (internal only: never published). For a directory, of every
    file below it, in sorted order, each with its relative path and length."""
    digest = hashlib.sha256()
    if not path.is_dir():
        _feed(digest, path)
        return "sha256:" + digest.hexdigest()
    files = sorted(p for p in path.rglob("*") if p.is_file() and not _hidden(p.relative_to(path)))
    for file in files:
        name = file.relative_to(path).as_posix().encode("utf-8", "surrogateescape")
        digest.update(len(name).to_bytes(8, "big") + name + os.stat(file).st_size.to_bytes(8, "big"))
        _feed(digest, file)
    return "sha256:" + digest.hexdigest()


def _feed(digest, path: Path) -> None:  # type: ignore[no-untyped-def]
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
