"""Record hashes: each row of the data as one 64-bit number that does not depend on how the
file is written.

Model. A record is a row's values in EVERY column of the file (Hive keys included), each
named by its column's canonical name (:func:`canonical_name`: Unicode-normalised, case-folded,
letters and digits only, so ``SEX``, `` sex `` and ``s_e_x`` are one column), so column order
and the header's spelling do not matter. A value is canonicalised before it is hashed, so that
a re-export that keeps the values keeps the hashes:

* text is trimmed; an empty value, a null and any of the spec's ``na_values`` are one null;
* a value that reads as a decimal number (``5000.0``, ``+5``, ``1.50``, ``1e3``, ``007``; a
  Parquet integer or float) is the number, so ``5000.0``, ``5000`` and an int64 5000 agree
  (a float NaN is a null, as pandas writes a missing value);
* anything else is its text (a Parquet date, decimal or boolean as Arrow writes it as text).

Algorithm (additive tabulation, then a mix). Each (column, value) gets a 64-bit hash from a
fixed, public function (:func:`mix`, splitmix64's finaliser, of the value's canonical bits, or
of its UTF-8 bytes eight at a time, seeded with a hash of the column's name); a row's sum ``S``
of its columns' hashes mod 2**64 does not depend on column order, and ``S`` less the part of some
columns is the same row without them, for the cost of a subtraction (how a dropped, added or
changed column is recognised: :mod:`dprelease.data.identity`). ``mix(S)`` breaks the sum's
linearity before sketches select records by their smallest hashes. Work on distinct values
where it pays: text is dictionary-encoded (Arrow) and each distinct value hashed once, and so
are one- and two-byte integers (a table of every value of the type, kept) and small integer
ranges; a column is then a :class:`Lookup`, a table and an index gathered row by row;
everything is vectorised numpy, never a Python loop over rows.

Cost: per batch and column, a dictionary encoding (text) or a mix (floats and wide integer
ranges) or nothing (the others); then, per row and column, a gather and an addition.

Assumes: values are what a reader of the file gets (CSV as text, Parquet as its types).
Guarantees: the same multiset of records gives the same hashes whatever the row order, line
endings, quoting, column order, the case and punctuation of column names, CSV or Parquet; the hashes are NOT keyed (anyone can compute
them), so they are as sensitive as the data and never leave this process: what is stored is
sealed under the ledger's key (:mod:`dprelease.ledger.keys`). Unkeyed on purpose, like the plain
SHA-256 of a file: one plain identity is compared with any ledger's sealed ones (a release of
another ledger in the output directory is unsealed with that ledger's key), and the key guards
what leaves the process, not what stays in it. Imports numpy and pyarrow only.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LENGTH = np.uint64(0x9E3779B97F4A7C15)
_NUMBER = np.uint64(0x243F6A8885A308D3)  # domain separation: a number, a text, a null never share a hash
_TEXT = np.uint64(0x13198A2E03707344)
_NULL = np.uint64(0xA4093822299F31D0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
NUMBER_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_SMALL_RANGE = 1 << 16  # integers spanning fewer values than this are hashed through a table


def mix(x: np.ndarray, out: np.ndarray | None = None, scratch: np.ndarray | None = None) -> np.ndarray:
    """splitmix64's finaliser (a bijection of 64-bit integers that spreads every input bit) of
    ``x``, into ``out`` (may be ``x``; a new array if None) with ``scratch`` as its one temporary:
    reused buffers, as a fresh large array costs more in page faults than the arithmetic."""
    out = np.empty_like(x) if out is None else out
    scratch = np.empty_like(x) if scratch is None else scratch
    np.right_shift(x, np.uint64(30), out=scratch)
    np.bitwise_xor(x, scratch, out=out)
    for multiplier, shift in ((_M1, 27), (_M2, 31)):
        np.multiply(out, multiplier, out=out)
        np.right_shift(out, np.uint64(shift), out=scratch)
        np.bitwise_xor(out, scratch, out=out)
    return out


def finish(x: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """A lighter mix for sums that are already uniform (sums of :func:`mix`-ed value hashes):
    multiply, xor-shift, multiply (a bijection, half of :func:`mix`'s passes). It breaks the
    sums' additivity before a sketch selects them by their smallest values (the top bits of the
    last product depend on every bit of the sum); into ``out``, ``scratch`` its temporary."""
    np.multiply(x, _M1, out=out)
    np.right_shift(out, np.uint64(32), out=scratch)
    np.bitwise_xor(out, scratch, out=out)
    np.multiply(out, _M2, out=out)
    return out


def canonical_name(name: str) -> str:
    """A column's name as a record knows it: Unicode-normalised (NFKC), case-folded, and only its
    letters and digits kept, so ``SEX``, ``sex``, `` Sex `` and ``s_e_x`` are one column, and
    ``WGTP_1``, ``wgtp-1`` and ``WGTP1`` another. (Two columns of one file that meet here are both
    hashed, under one name; a name of no letter or digit is the empty name.)"""
    return "".join(c for c in unicodedata.normalize("NFKC", name).casefold() if c.isalnum())


@functools.lru_cache(maxsize=4096)
def column_seed(name: str) -> np.uint64:
    """A column's seed: its canonical name (:func:`canonical_name`) hashed, so a value hashes
    differently in each column and alike under any spelling of its column's name."""
    digest = hashlib.blake2b(canonical_name(name).encode("utf-8", "surrogatepass"), digest_size=8,
                             person=b"dprelease-col").digest()
    return np.uint64(int.from_bytes(digest, "little"))


class Missing:
    """What counts as a null: the spec's ``na_values`` (as text, and those that read as numbers,
    as numbers), besides empty text, a null and a float NaN."""

    def __init__(self, na_values: tuple[str, ...] = ()):
        texts = sorted({v.strip() for v in na_values} | {""})
        self.texts = pa.array(texts, pa.string())
        numeric = [v for v in texts if pc.match_substring_regex(pa.array([v]), NUMBER_PATTERN)[0].as_py()]
        self.numbers = np.unique(np.asarray([float(v) for v in numeric], dtype=np.float64) + 0.0)


@dataclass(frozen=True)
class Lookup:
    """One column's value hashes, row by row: ``table[index - offset]`` (a dictionary's or a
    small integer range's hashes, gathered), or ``table`` itself where ``index`` is None."""

    table: np.ndarray  # uint64
    index: np.ndarray | None = None
    offset: int = 0

    def add_to(self, total: np.ndarray, start: int, scratch: np.ndarray, *, fresh: bool = False) -> None:
        """Add rows ``start`` to ``start + len(total)`` of the column's hashes into ``total``
        (``scratch``: a buffer of its size); ``fresh``: write them there instead (``total`` holds
        nothing yet: a pass saved)."""
        stop = start + total.size
        if self.index is None:
            if fresh:
                total[:] = self.table[start:stop]
            else:
                np.add(total, self.table[start:stop], out=total)
            return
        index = self.index[start:stop]
        np.take(self.table, index - index.dtype.type(self.offset) if self.offset else index,
                out=total if fresh else scratch, mode="clip")  # in range by construction; "clip" skips numpy's check
        if not fresh:
            np.add(total, scratch, out=total)


def column_hashes(arr: pa.Array | pa.ChunkedArray, name: str, missing: Missing,
                  kept: dict[str, tuple[pa.Array, np.ndarray]] | None = None) -> Lookup:
    """The hash of every value of one column (see the module docstring), as a :class:`Lookup`.
    ``kept``: the last dictionary of each column and its values' hashes, reused while a batch
    of that column has an equal dictionary (a file's batches often share theirs)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    seed = column_seed(name)
    null = mix(np.array([seed ^ _NULL], dtype=np.uint64))[0]
    kind = arr.type
    if pa.types.is_dictionary(kind):
        last = None if kept is None else kept.get(name)
        if last is not None and last[0].equals(arr.dictionary):
            return _through(arr, last[1], null)
        table = _distinct_hashes(arr.dictionary, seed, missing, null)
        if kept is not None:
            kept[name] = (arr.dictionary, table)
        return _through(arr, table, null)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
            or pa.types.is_large_binary(kind):
        encoded = pc.dictionary_encode(arr)
        return _through(encoded, _distinct_hashes(encoded.dictionary, seed, missing, null), null)
    if pa.types.is_integer(kind):
        return _integer_lookup(arr, seed, missing, null)
    if pa.types.is_floating(kind):
        values = np.asarray(arr.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
        return Lookup(_number_hashes(values, seed, missing.numbers, null))
    if pa.types.is_null(kind):
        return Lookup(np.full(len(arr), null, dtype=np.uint64))
    return column_hashes(_as_text(arr), name, missing)


def hashes_of(lookup: Lookup, rows: int) -> np.ndarray:
    """A lookup's hashes as one array (for small data and tests)."""
    out = np.zeros(rows, dtype=np.uint64)
    lookup.add_to(out, 0, np.empty(rows, dtype=np.uint64))
    return out


def _through(encoded: pa.DictionaryArray, table: np.ndarray, null: np.uint64) -> Lookup:
    """A dictionary array's hashes: its dictionary's (``table``), gathered by index."""
    indices = encoded.indices
    if indices.null_count:
        table = np.append(table, null)  # the last entry: a null index
        indices = indices.fill_null(len(table) - 1)
    return Lookup(table, indices.to_numpy(zero_copy_only=False))


def _distinct_hashes(values: pa.Array, seed: np.uint64, missing: Missing, null: np.uint64) -> np.ndarray:
    """The hashes of a dictionary's values (each distinct): text canonicalised, numbers as numbers."""
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        values = _as_text(values)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return _typed_distinct(values, seed, missing, null)
    trimmed = pc.utf8_trim_whitespace(values)
    is_null = np.asarray(pc.or_kleene(pc.is_null(trimmed), pc.is_in(trimmed, value_set=missing.texts))
                         .fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)
    numeric = np.asarray(pc.match_substring_regex(trimmed, NUMBER_PATTERN).fill_null(False)
                         .to_numpy(zero_copy_only=False), dtype=bool) & ~is_null
    out = _text_hashes(trimmed, seed)
    if numeric.any():
        picked = pc.filter(trimmed, pa.array(numeric))
        numbers = np.asarray(pc.cast(picked, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
        out[numeric] = _number_hashes(numbers, seed, missing.numbers, null)
    out[is_null] = null
    return out


def _typed_distinct(values: pa.Array, seed: np.uint64, missing: Missing, null: np.uint64) -> np.ndarray:
    """A dictionary of numbers (or other types): hashed as the column type would be."""
    if pa.types.is_integer(values.type):
        return hashes_of(_integer_lookup(values, seed, missing, null), len(values))
    if pa.types.is_floating(values.type):
        numbers = np.asarray(values.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False),
                             dtype=np.float64)
        return _number_hashes(numbers, seed, missing.numbers, null)
    return _distinct_hashes(_as_text(values), seed, missing, null)


def _integer_lookup(arr: pa.Array, seed: np.uint64, missing: Missing, null: np.uint64) -> Lookup:
    """Integers as numbers: through a table of their range when it is small (one gather per row)."""
    values = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False) if arr.null_count
                        else arr.to_numpy(zero_copy_only=False))
    if arr.null_count or values.size == 0:  # rare: hashed one by one, nulls put back
        out = _number_hashes(values.astype(np.float64), seed, missing.numbers, null)
        if arr.null_count:
            out[~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)] = null
        return Lookup(out)
    if values.dtype.itemsize <= 2:  # every value of the type in one table, indexed by its bits
        table = _type_table(int(seed), values.dtype.str, tuple(missing.numbers.tolist()))
        return Lookup(table, values.view(np.dtype(f"u{values.dtype.itemsize}")))
    low, high = int(values.min()), int(values.max())
    if high - low < _SMALL_RANGE and values.size > 2 * (high - low + 1):
        return Lookup(_number_hashes(np.arange(low, high + 1, dtype=np.float64), seed, missing.numbers, null), values, low)
    return Lookup(_number_hashes(values.astype(np.float64), seed, missing.numbers, null))


@functools.lru_cache(maxsize=256)
def _type_table(seed: int, dtype: str, na_numbers: tuple[float, ...]) -> np.ndarray:
    """The hash of every value of a one- or two-byte integer type, indexed by its bits (the same
    for every batch of a column: kept)."""
    kind = np.dtype(dtype)
    every = np.arange(1 << (8 * kind.itemsize), dtype=np.int64).astype(f"u{kind.itemsize}").view(kind)
    null = mix(np.array([np.uint64(seed) ^ _NULL], dtype=np.uint64))[0]
    table = _number_hashes(every.astype(np.float64), np.uint64(seed), np.asarray(na_numbers, dtype=np.float64), null)
    table.setflags(write=False)
    return table


def _number_hashes(values: np.ndarray, seed: np.uint64, na_numbers: np.ndarray, null: np.uint64) -> np.ndarray:
    """float64 numbers: -0 is 0, NaN and the numeric na_values (``na_numbers``) are nulls."""
    values = values + 0.0  # -0.0 + 0.0 is +0.0
    out = mix(values.view(np.uint64) ^ (seed ^ _NUMBER))
    gone = np.isnan(values)
    if na_numbers.size:
        gone |= np.isin(values, na_numbers)
    out[gone] = null
    return out


def _text_hashes(values: pa.Array, seed: np.uint64) -> np.ndarray:
    """Each value's UTF-8 bytes hashed eight at a time (unaligned little-endian words read
    straight from Arrow's data buffer), seeded with its length; nulls get some hash (the
    caller overwrites them)."""
    n = len(values)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    _, offsets_buffer, data_buffer = values.buffers()[:3]
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)[values.offset:values.offset + n + 1]
    starts = offsets[:-1].astype(np.int64)
    lengths = offsets[1:].astype(np.int64) - starts
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    padded = np.zeros(data.size + 8, dtype=np.uint8)
    padded[:data.size] = data
    words = np.ndarray((data.size + 1,), dtype="<u8", buffer=padded, strides=(1,))  # a word at every byte
    h = mix(lengths.astype(np.uint64) * _LENGTH ^ (seed ^ _TEXT))
    for w in range(int(-(-int(lengths.max(initial=0)) // 8))):
        keep = np.clip(lengths - 8 * w, 0, 8).astype(np.uint64)
        word = words[np.minimum(starts + 8 * w, data.size)]
        mask = np.where(keep >= 8, _ALL, (np.uint64(1) << (np.uint64(8) * np.minimum(keep, 7))) - np.uint64(1))
        h = mix(h ^ (word & mask))
    return h


def _as_text(arr: pa.Array) -> pa.Array:
    """Any other type as text (dates, decimals, booleans as Arrow writes them); a type Arrow
    cannot cast, through Python's ``str`` (rare: lists, structs)."""
    try:
        return pc.cast(arr, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.array([None if v is None else str(v) for v in arr.to_pylist()], pa.string())
