"""A dataset's identity is its records, not its bytes: the same people are recognised in any file.

Model. The data is a multiset of records (:mod:`dprelease.data.record_hash`: a row's values in
every column, canonicalised, column order free), so rows reordered, line endings, quoting, CSV
↔ Parquet leave the records exactly as they were, and a column added, dropped, renamed or
recoded leaves them equal on the other columns. Two data sets are taken for the same people
when they share most of their records: a re-export that drops or adds a tenth of the rows shares
about 90% of them; two samples of different people share almost none (the shipped NIST
excerpts: 0.03% at most, ``benchmarks/identity.py``). Every column, not the spec's declared
ones: a person's full record (23 columns of the NIST excerpts, exact income and weights
included) is nearly unique, while a few declared columns (PUMA × SEX × AGEP …) repeat across
people, so two years of one survey would share most projected records (measured there too).

Algorithm: bottom-k (MinHash) sketches of multisets, in one pass over the data.

* ``records``: the :data:`K_RECORDS` smallest distinct record hashes and each one's count: a
  uniform sample of the distinct records, with their multiplicities (so duplicates count).
* the columns fall in :data:`GROUPS` groups, by a hash of their names; for each group, the
  :data:`K_GROUP` smallest hashes of the records WITHOUT that group's columns (the row's hash
  sum less the group's part: a subtraction). Two data sets whose columns differ in one group
  only (a column dropped, added or renamed there), or whose values differ in one group only (a
  column recoded), are compared on the other three quarters of their columns.
* ``digest``: the exact multiset (the row count, the columns, two sums mod 2**64 of the record
  hashes and of their squares): "the same records exactly".

Estimate. The share of data set A's rows whose records are in B (containment, with
multiplicity: Σ min(count_A, count_B) / Σ count_A) is estimated on A's sampled records whose
hash is at most B's k-th smallest: below it B's sketch holds every record of B, so each is
known to be in B or not. Exact for data of fewer than k distinct records; otherwise a proportion
of about k samples (standard error at most 0.016 at k = 1024, 0.031 at k = 256). It needs
:data:`MIN_SAMPLES` samples, so a data set more than about k / 16 times the other's size (64×
for the full records) is not compared, nor one of fewer than 16 distinct records (a handful of
rows shares records with other data by chance) but for the same records exactly. Records that recur within a data set (a file of a few
coded columns: many people, one record) say nothing about people: a share counts beyond the
chance level ρ, the share of the searched data set's rows whose record recurs in it, as
``(share − ρ) / (1 − ρ)`` (0 when every record recurs: such data is recognised only when its
records are the same exactly).

Threshold: refused at :data:`THRESHOLD` = 1/2 either way, "most records": most of the new
data's rows are rows of released data, or most of a released data set's rows are in the new
one. Most of the people of one of the two would then spend a second lifetime budget. A tenth of
the rows dropped or added gives about 0.9, different people about 0; the estimates' error is a
few hundredths, far from 1/2 either way. A minority overlap (a small sample of released data
mixed into other data) is not caught: docs/ledger.md, "What identity cannot catch".

Cost: per row and column, one gather of a value hash and one addition; per row, five mixes (the
record, the four groups) and the comparisons with the sketches' thresholds: measured in
``benchmarks/identity.py`` (the rows are read by the data check's pass whenever it reads every
row, so the identity adds no reading there).

Assumes: the batches are every row of the data, every column. Guarantees: the same multiset of
records gives the same identity whatever the batches' order. Nothing here is keyed: an
:class:`Identity` is as sensitive as the data (a sketch of a small file holds every distinct
record, with its count). It stays in this process's memory; the ledger and the run record hold
it only sealed under the ledger's key (:meth:`Identity.plain` is :data:`PLAIN_BYTES` long,
whatever the data), and its digest only HMAC-ed (:mod:`dprelease.ledger.keys`). Imports numpy,
pyarrow and the data layer's scan and record hashes only.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dprelease.data.record_hash import Lookup, Missing, column_hashes, column_seed, mix
from dprelease.data.scan import Source, every_column

K_RECORDS = 1024  # the full records' sketch
GROUPS = 4  # the columns fall in four groups by name; a sketch of the records without each
K_GROUP = 256  # each group-left-out sketch
THRESHOLD = 0.5  # most records: refused at or above
MIN_SAMPLES = 16  # fewer sampled records below the other's threshold: not compared
CHUNK_ROWS = 1 << 16  # rows hashed and sketched at a time: a few arrays of this size stay in cache
_WRAP = 1 << 64
_TOP = np.uint64(0xFFFFFFFFFFFFFFFF)
_MAGIC = b"dprid\x00\x00\x01"


class Share(NamedTuple):
    """One data set's rows found in another's, estimated from their sketches."""

    raw: float  # Σ min(count here, count there) / Σ count here, over the sampled records
    beyond_chance: float  # (raw − ρ) / (1 − ρ), ρ the other's recurring share: what the threshold is applied to
    samples: int  # the sampled records it rests on


@dataclass(frozen=True)
class Sketch:
    """The k smallest distinct hashes of a multiset (ascending) and each one's count."""

    k: int
    hashes: np.ndarray  # uint64
    counts: np.ndarray  # int64, ≥ 1

    @property
    def threshold(self) -> np.uint64:
        """The largest hash the sketch is complete up to: every element of the multiset with a
        hash at most this is in it (all of it, when it holds fewer than k)."""
        return self.hashes[-1] if self.hashes.size == self.k else _TOP

    def recurring(self) -> float:
        """The share of the sampled rows whose record occurs more than once (the chance level)."""
        total = int(self.counts.sum())
        return float(self.counts[self.counts > 1].sum() / total) if total else 0.0

    def within(self, other: Sketch) -> Share:
        """The estimated share of this multiset's rows whose records are in ``other``."""
        below = self.hashes <= other.threshold
        mine, counts = self.hashes[below], self.counts[below]
        if not mine.size:
            return Share(0.0, 0.0, 0)
        theirs = np.zeros(mine.size, dtype=np.int64)
        at = np.searchsorted(other.hashes, mine)
        found = at < other.hashes.size
        found[found] = other.hashes[at[found]] == mine[found]
        theirs[found] = other.counts[at[found]]
        share = float(np.minimum(counts, theirs).sum() / counts.sum())
        chance = other.recurring()
        return Share(share, 0.0 if chance >= 1 else max(0.0, (share - chance) / (1 - chance)), int(mine.size))


class _Bottom:
    """A streaming bottom-k sketch: every occurrence of a value at most the threshold is counted."""

    def __init__(self, k: int):
        self.k = k
        self.hashes = np.empty(0, dtype=np.uint64)
        self.counts = np.empty(0, dtype=np.int64)
        self.few = False  # the data so far has fewer than k distinct values: count every batch whole

    def add(self, x: np.ndarray) -> None:
        if self.hashes.size == self.k:
            x = x[x <= self.hashes[-1]]
        elif x.size > 8 * self.k and not self.few:  # not full yet: the batch's smallest, enough to fill it
            smallest = x[x <= np.partition(x, 4 * self.k)[4 * self.k]]
            values, counts = _value_counts(smallest)
            if values.size >= self.k:
                self._merge(values, counts)
                return
        values, counts = _value_counts(x)
        if values.size > self.k:  # only the k smallest distinct values can stay
            keep = np.argpartition(values, self.k - 1)[:self.k]
            values, counts = values[keep], counts[keep]
        self._merge(values, counts)

    def _merge(self, values: np.ndarray, counts: np.ndarray) -> None:
        if not values.size:
            return
        merged, inverse = np.unique(np.concatenate([self.hashes, values]), return_inverse=True)
        total = np.zeros(merged.size, dtype=np.int64)
        np.add.at(total, inverse.ravel(), np.concatenate([self.counts, counts]))
        self.few = merged.size < self.k
        self.hashes, self.counts = merged[:self.k], total[:self.k]

    def sketch(self) -> Sketch:
        return Sketch(self.k, self.hashes, self.counts)


def _value_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``x`` and their counts (Arrow's hash table: no sort of x)."""
    if x.size < 4096:
        values, counts = np.unique(x, return_counts=True)
        return values, counts.astype(np.int64)
    found = pc.value_counts(pa.array(x, pa.uint64()))
    return (np.asarray(found.field("values").to_numpy(zero_copy_only=False), dtype=np.uint64),
            np.asarray(found.field("counts").to_numpy(zero_copy_only=False), dtype=np.int64))


@dataclass(frozen=True)
class Overlap:
    """Why two data sets are taken for the same people."""

    share: float  # the larger of the two containments, beyond chance (1.0 for the same records)
    how: str  # for the operator: e.g. "about 90% of its records are records of that data"


@dataclass(frozen=True)
class Group:
    """The records without one group of columns: the group's columns (their seeds, hashed) and
    the sketch of the records on every other column."""

    names: bytes  # 8 bytes: the group's column names
    sketch: Sketch


@dataclass(frozen=True)
class Identity:
    """The records of one data set, sketched (plain: this process's memory only)."""

    digest: str  # records-sha256:…, the exact multiset
    records: Sketch
    groups: tuple[Group, ...]  # GROUPS of them

    def plain(self) -> bytes:
        """A fixed-size form for sealing (:data:`PLAIN_BYTES`, whatever the data)."""
        parts = [_MAGIC, bytes.fromhex(self.digest.removeprefix("records-sha256:")), _packed(self.records, K_RECORDS)]
        for group in self.groups:
            parts += [group.names, _packed(group.sketch, K_GROUP)]
        return b"".join(parts)

    @classmethod
    def from_plain(cls, data: bytes) -> Identity:
        if len(data) != PLAIN_BYTES or data[:8] != _MAGIC:
            raise ValueError("not a record identity of this version")
        digest = "records-sha256:" + data[8:40].hex()
        records, at = _unpacked(data, 40, K_RECORDS)
        groups = []
        for _ in range(GROUPS):
            sketch, end = _unpacked(data, at + 8, K_GROUP)
            groups.append(Group(data[at:at + 8], sketch))
            at = end
        return cls(digest, records, tuple(groups))

    def overlap(self, other: Identity) -> Overlap | None:
        """Whether this data and ``other`` are the same people: the same records exactly, or at
        least :data:`THRESHOLD` of either's records among the other's, on every column, or on
        every column but one group's where the two differ in that group's columns only."""
        if self.digest == other.digest:
            return Overlap(1.0, "the same records exactly")
        best = max(self._estimates(other), default=None, key=lambda e: e[0])
        if best is None or best[0] < THRESHOLD:
            return None
        return Overlap(best[0], f"about {best[0]:.0%} {best[1]}")

    def shares(self, other: Identity, *, raw: bool = False) -> tuple[float, float]:
        """(the estimated share of this data's rows whose records are in ``other``, of ``other``'s
        in this), beyond chance (``raw``: not), the largest over the comparisons :meth:`overlap`
        makes (for reports: the figures the threshold is applied to)."""
        if self.digest == other.digest:
            return 1.0, 1.0
        found = [(e[3].raw if raw else e[0], e[2]) for e in self._estimates(other)]
        return max((f for f, way in found if way == 0), default=0.0), max((f for f, way in found if way == 1), default=0.0)

    def _estimates(self, other: Identity) -> Iterator[tuple[float, str, int, Share]]:
        """(share beyond chance, what it is of, 0: this data's rows in ``other``, 1: the other
        way, the estimate) of every comparison that rests on :data:`MIN_SAMPLES` sampled records."""
        for mine, theirs, apart in self._pairs(other):
            for way, share, what in ((0, mine.within(theirs), "of its records are records of that data"),
                                     (1, theirs.within(mine), "of that data's records are in it")):
                if share.samples >= MIN_SAMPLES:
                    yield share.beyond_chance, what + apart, way, share

    def matches(self, other_plain: bytes) -> str | None:
        """For the ledger (which holds sealed identities and never imports this module): why the
        data of ``other_plain`` is the same people as this, or None."""
        found = self.overlap(Identity.from_plain(other_plain))
        return None if found is None else found.how

    def _pairs(self, other: Identity) -> list[tuple[Sketch, Sketch, str]]:
        """The sketches to compare: the full records; and the records without group j wherever
        the two data sets' columns agree outside group j (a column dropped, added or renamed
        there; with the same columns, a column's values changed in any group)."""
        pairs = [(self.records, other.records, "")]
        apart = " (compared without a quarter of the columns, where the two differ)"
        differ = [j for j in range(GROUPS) if self.groups[j].names != other.groups[j].names]
        for j in range(GROUPS):
            if not differ or differ == [j]:
                pairs.append((self.groups[j].sketch, other.groups[j].sketch, apart))
        return pairs


def _packed(sketch: Sketch, k: int) -> bytes:
    """k hashes and k counts, the unused slots zero (count 0)."""
    hashes = np.zeros(k, dtype="<u8")
    counts = np.zeros(k, dtype="<u4")
    hashes[:sketch.hashes.size] = sketch.hashes
    counts[:sketch.counts.size] = np.minimum(sketch.counts, 0xFFFFFFFF)
    return hashes.tobytes() + counts.tobytes()


def _unpacked(data: bytes, at: int, k: int) -> tuple[Sketch, int]:
    hashes = np.frombuffer(data, dtype="<u8", count=k, offset=at).astype(np.uint64)
    counts = np.frombuffer(data, dtype="<u4", count=k, offset=at + 8 * k).astype(np.int64)
    used = counts > 0
    return Sketch(k, hashes[used], counts[used]), at + 12 * k


PLAIN_BYTES = 8 + 32 + 12 * K_RECORDS + GROUPS * (8 + 12 * K_GROUP)


class Sketcher:
    """Builds an :class:`Identity` from batches of rows, in one pass (the batches' order is free)."""

    def __init__(self, na_values: tuple[str, ...] = ()):
        self.missing = Missing(na_values)
        self.records = _Bottom(K_RECORDS)
        self.groups = [_Bottom(K_GROUP) for _ in range(GROUPS)]
        self.names: set[str] = set()
        self.rows = 0
        self.sums = [0, 0]  # Σ record hash and Σ its square, mod 2**64: the exact multiset's digest
        self._buffers = np.empty((GROUPS + 3, CHUNK_ROWS), dtype=np.uint64)
        self.seconds = 0.0  # spent in add (the reading of the batches excepted)

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Every column of ``batch`` (a column some file lacks is left out of that file's rows)."""
        started = time.perf_counter()
        names = [n.strip() for n in batch.schema.names]
        self.names.update(names)
        columns = [(group_of(n), column_hashes(batch.column(i), n, self.missing)) for i, n in enumerate(names)]
        for start in range(0, batch.num_rows, CHUNK_ROWS):  # rows in chunks that stay in the CPU's cache
            self._add_rows(columns, start, min(CHUNK_ROWS, batch.num_rows - start))
        self.rows += batch.num_rows
        self.seconds += time.perf_counter() - started

    def _add_rows(self, columns: list[tuple[int, Lookup]], start: int, n: int) -> None:
        *parts, total, record, scratch = (b[:n] for b in self._buffers)
        for part in parts:
            part.fill(0)
        for group, lookup in columns:
            lookup.add_to(parts[group], start, scratch)
        np.add(parts[0], parts[1], out=total)
        for part in parts[2:]:
            np.add(total, part, out=total)
        mix(total, out=record, scratch=scratch)
        self.records.add(record)
        self.sums[0] = (self.sums[0] + int(record.sum(dtype=np.uint64))) % _WRAP
        self.sums[1] = (self.sums[1] + int(np.multiply(record, record, out=scratch).sum(dtype=np.uint64))) % _WRAP
        for j, part in enumerate(parts):
            self.groups[j].add(mix(np.subtract(total, part, out=part), out=part, scratch=scratch))

    def identity(self) -> Identity:
        seeds = [sorted(int(column_seed(n)) for n in self.names if group_of(n) == j) for j in range(GROUPS)]
        names = [hashlib.blake2b(struct.pack(f"<{len(s)}Q", *s), digest_size=8).digest() for s in seeds]
        digest = hashlib.sha256(_MAGIC + struct.pack("<Q", self.rows) + struct.pack("<QQ", *self.sums)
                                + b"".join(names)).hexdigest()
        return Identity("records-sha256:" + digest, self.records.sketch(),
                        tuple(Group(n, b.sketch()) for n, b in zip(names, self.groups)))


def group_of(name: str) -> int:
    """The column's group: a fixed function of its name."""
    return int(column_seed(name)) % GROUPS


def identity_of(src: Source, *, read: Callable[[int], None] | None = None) -> Identity:
    """The identity of the data at ``src``: every column of every row of every file, one pass.
    ``read`` (a progress bar) is told the bytes read so far across all files."""
    sketcher = Sketcher(src.na_values)
    done = 0
    for piece in src.files():
        size = os.stat(piece.path).st_size
        progress = None if read is None else (lambda n, before=done: read(before + min(n, size)))
        names = every_column(src, piece)
        for _, batch in src.batches(piece, names, names, read=progress):
            sketcher.add(batch)
        done += size
    return sketcher.identity()
