"""A dataset's identity is its records, not its bytes: the same people are recognised in any file.

Model. The data is a multiset of records (:mod:`dprelease.data.record_hash`: a row's values in
every column, canonicalised, each under its column's canonical name — case-folded, letters and
digits only — column order free), so rows reordered, line endings, quoting, CSV ↔ Parquet, the
header's case or punctuation leave the records exactly as they were, and columns added,
dropped, renamed or recoded leave them equal on the other columns. Two data sets are taken for
the same people when most of the rows of either are rows of the other, beyond chance: a
re-export that drops or adds a tenth of the rows, or repeats rows, shares all of one's rows;
two samples of different people share almost none (the shipped NIST excerpts: 0.03% of rows at
most, ``benchmarks/identity.py``). Every column, not the spec's declared ones: a person's full
record (24 columns of the NIST excerpts, exact income and weights included) is nearly unique,
while a few declared columns (PUMA × SEX × AGEP …) repeat across people, so two years of one
survey share most projected records by chance (measured there too).

Algorithm: bottom-k sketches of multisets (:mod:`dprelease.data.sketches`), in one pass.

* ``records``: the :data:`K_RECORDS` smallest distinct record hashes and each one's count: a
  uniform sample of the distinct records, with their multiplicities (so duplicates count).
* the columns fall in :data:`GROUPS` groups by a hash of their canonical names; for each of the
  six pairs of groups (:data:`PAIRS`), the :data:`K_PAIR` smallest hashes of the records
  WITHOUT that pair's columns (the sum of the other two groups' parts of the row's hash: an
  addition; then :func:`~dprelease.data.record_hash.finish`, a lighter mix than the record's). Two data sets whose column names differ in one or two groups only (two columns
  dropped, added or renamed; one dropped and one added) are compared on the records of the
  other groups' columns: with one group apart, on the three pairs that include it; with the
  same names, on every pair (values recoded in one or two groups). The groups each data set's
  names fall in are kept (hashed), so which pairs to compare is chosen at comparison time.
* ``digest``: the exact multiset (the row count, the canonical column names, two sums mod 2**64
  of the record hashes and of their squares): "the same records exactly".

Estimate (:meth:`dprelease.data.sketches.Sketch.within`): the share of A's rows whose records
are in B, with multiplicity, beyond the share chance would give if B were other people of the
same population — judged from how A's own records recur (Good–Turing), never from B's, which
the new data's maker controls: every row of the new file twice leaves the chance that a released
record is found in it where it was. Such a share needs 16 sampled records that chance would not
find, so a data set more than about k / 16 times the other's size (64× for the full records,
16× for the pair sketches), or of few distinct records, is compared only by its exact records.

Threshold: refused at :data:`THRESHOLD` = 1/2 either way, "most records": most of the new
data's rows are rows of released data, or most of a released data set's rows are in the new
one. Most of the people of one of the two would then spend a second lifetime budget. A tenth of
the rows dropped or added gives about 0.9 or more, different people about 0; the estimates'
error is a few hundredths, far from 1/2 either way. A minority overlap (a small sample of
released data mixed into other data) is not caught: docs/ledger.md, "What identity cannot
catch". Why a data set is taken for another is said in words with no figure of the data
(:attr:`Overlap.how`: "most of its records …"), as refusals reach a scheduled run's log.

Cost: per row and column, one gather of a value hash and one addition; per row, seven mixes
(the record's, and a lighter one for each of the six pairs) and the comparisons with the
sketches' thresholds; a sketch of few distinct values (a pair of groups of a few coded columns)
counts every row through numpy's hash table: measured in
``benchmarks/identity.py`` (the rows are read by the data check's pass whenever it reads every
row, so the identity adds only the columns the spec does not declare, and a run sketches each
batch on a thread of its own while the check reads the next, ``Sketcher(beside=True)``; a pass
of its own, every column read dictionary-encoded, where the check reads headers only). Reading
every column is the floor of what it costs: on a file of many columns the spec does not declare
(24 of which 6 declared, CSV) that reading costs about as much as the run's own work.

Assumes: the batches are every row of the data, every column. Guarantees: the same multiset of
records gives the same identity whatever the batches' order. Nothing here is keyed: an
:class:`Identity` is as sensitive as the data (a sketch of a small file holds every distinct
record, with its count). It stays in this process's memory; the ledger and the run record hold
it only sealed under the ledger's key (:meth:`Identity.plain` is :data:`PLAIN_BYTES` long,
whatever the data), and its digest only HMAC-ed (:mod:`dprelease.ledger.keys`). Imports numpy,
pyarrow and the data layer's scan, record hashes and sketches only.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from dprelease.data.record_hash import Lookup, Missing, canonical_name, column_hashes, column_seed, finish, mix
from dprelease.data.scan import Source, every_column
from dprelease.data.sketches import Bottom, Sketch, packed, unpacked

K_RECORDS = 1024  # the full records' sketch
GROUPS = 4  # the columns fall in four groups by name
PAIRS = tuple(itertools.combinations(range(GROUPS), 2))  # a sketch of the records without each pair of groups
K_PAIR = 256  # each pair-left-out sketch
_KEPT = tuple(tuple(j for j in range(GROUPS) if j not in pair) for pair in PAIRS)  # the groups each keeps
THRESHOLD = 0.5  # most records: refused at or above
CHUNK_ROWS = 1 << 16  # rows hashed and sketched at a time: a few arrays of this size stay in cache
_WRAP = 1 << 64
_MAGIC = b"dprid\x00\x00\x02"
_APART = {True: " (compared on the columns of the groups where the two do not differ)",
          False: " (compared on half of the columns: some values may differ)"}


@dataclass(frozen=True)
class Overlap:
    """Why two data sets are taken for the same people."""

    share: float  # the larger of the two containments, beyond chance (1.0 for the same records): never shown
    how: str  # for the operator, with no figure of the data: e.g. "most of its records are records of that data"


@dataclass(frozen=True)
class Identity:
    """The records of one data set, sketched (plain: this process's memory only)."""

    digest: str  # records-sha256:…, the exact multiset
    records: Sketch
    names: tuple[bytes, ...]  # GROUPS of them: each group's canonical column names, hashed (8 bytes)
    without: tuple[Sketch, ...]  # one per PAIRS: the records without that pair of groups' columns

    def plain(self) -> bytes:
        """A fixed-size form for sealing (:data:`PLAIN_BYTES`, whatever the data)."""
        return b"".join([_MAGIC, bytes.fromhex(self.digest.removeprefix("records-sha256:")),
                         struct.pack("<Q", self.records.rows), *self.names, packed(self.records),
                         *(packed(s) for s in self.without)])

    @classmethod
    def from_plain(cls, data: bytes) -> Identity:
        if len(data) != PLAIN_BYTES or data[:8] != _MAGIC:
            raise ValueError("not a record identity of this version")
        digest = "records-sha256:" + data[8:40].hex()
        (rows,) = struct.unpack_from("<Q", data, 40)
        names = tuple(data[48 + 8 * j:56 + 8 * j] for j in range(GROUPS))
        records, at = unpacked(data, 48 + 8 * GROUPS, K_RECORDS, rows)
        without = []
        for _ in PAIRS:
            sketch, at = unpacked(data, at, K_PAIR, rows)
            without.append(sketch)
        return cls(digest, records, names, tuple(without))

    def overlap(self, other: Identity) -> Overlap | None:
        """Whether this data and ``other`` are the same people: the same records exactly, or at
        least :data:`THRESHOLD` of either's records among the other's beyond chance, on every
        column, or on the columns outside one or two groups where the two differ in those
        groups' columns only (any pair where their columns are the same)."""
        if self.digest == other.digest:
            return Overlap(1.0, "the same records exactly")
        best = max(self._estimates(other), default=None, key=lambda e: e[0])
        if best is None or best[0] < THRESHOLD:
            return None
        return Overlap(best[0], best[1])

    def shares(self, other: Identity) -> tuple[float, float]:
        """(the estimated share of this data's rows whose records are in ``other``, of ``other``'s
        in this), beyond chance, the largest over the comparisons :meth:`overlap` makes (for
        benchmarks and tests: the figures the threshold is applied to; never shown where a log
        or a refusal can carry them)."""
        if self.digest == other.digest:
            return 1.0, 1.0
        found = [(e[0], e[2]) for e in self._estimates(other)]
        return max((f for f, way in found if way == 0), default=0.0), max((f for f, way in found if way == 1), default=0.0)

    def _estimates(self, other: Identity) -> Iterator[tuple[float, str, int]]:
        """(share beyond chance, what it is of, 0: this data's rows in ``other``, 1: the other
        way) of every comparison with enough sampled records that chance would not find
        (:data:`dprelease.data.sketches.MIN_SAMPLES`)."""
        for mine, theirs, apart in self._comparisons(other):
            for way, share, what in ((0, mine.within(theirs), "most of its records are records of that data"),
                                     (1, theirs.within(mine), "most of that data's records are in it")):
                if share.compared:
                    yield share.beyond_chance, what + apart, way

    def matches(self, other_plain: bytes) -> str | None:
        """For the ledger (which holds sealed identities and never imports this module): why the
        data of ``other_plain`` is the same people as this, or None."""
        found = self.overlap(Identity.from_plain(other_plain))
        return None if found is None else found.how

    def _comparisons(self, other: Identity) -> list[tuple[Sketch, Sketch, str]]:
        """The sketches to compare: the full records; and the records without a pair of groups
        wherever the two data sets' columns agree outside that pair (a column dropped, added or
        renamed in one or two groups; with the same columns, any pair: values changed)."""
        differ = {j for j in range(GROUPS) if self.names[j] != other.names[j]}
        found = [(self.records, other.records, "")]
        if len(differ) <= 2:
            found += [(mine, theirs, _APART[bool(differ)])
                      for pair, mine, theirs in zip(PAIRS, self.without, other.without) if differ <= set(pair)]
        return found


PLAIN_BYTES = 8 + 32 + 8 + 8 * GROUPS + 12 * K_RECORDS + len(PAIRS) * 12 * K_PAIR


class Sketcher:
    """Builds an :class:`Identity` from batches of rows, in one pass (the batches' order is free)."""

    def __init__(self, na_values: tuple[str, ...] = (), *, beside: bool = False):
        self.missing = Missing(na_values)
        self.records = Bottom(K_RECORDS)
        self.without = [Bottom(K_PAIR) for _ in PAIRS]
        self.names: set[str] = set()  # canonical
        self.rows = 0
        self.sums = [0, 0]  # Σ record hash and Σ its square, mod 2**64: the exact multiset's digest
        self._buffers = np.empty((GROUPS + 3, CHUNK_ROWS), dtype=np.uint64)
        self.seconds = 0.0  # the caller's time in add and identity (the reading of the batches excepted)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="dprelease-identity") if beside else None
        self._pending: Future[None] | None = None
        self._dictionaries: dict[str, tuple[pa.Array, np.ndarray]] = {}  # the last of each column, hashed

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Every column of ``batch`` (a column some file lacks is left out of that file's rows).
        Beside the caller (``beside``): the batch is sketched on a thread of its own while the
        caller reads and checks the next one; at most one batch waits (memory: one batch more)."""
        started = time.perf_counter()
        if self._worker is None:
            self._add(batch)
        else:
            self._wait()
            self._pending = self._worker.submit(self._add, batch)
        self.seconds += time.perf_counter() - started

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # the worker's error, if any, is raised here

    def close(self) -> None:
        """Stop the worker (a pass that ended early: its pending batch is dropped)."""
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
            self._worker = None
            self._pending = None

    def _add(self, batch: pa.RecordBatch | pa.Table) -> None:
        names = batch.schema.names
        self.names.update(canonical_name(n) for n in names)
        columns = [(group_of(n), column_hashes(batch.column(i), n, self.missing, self._dictionaries))
                   for i, n in enumerate(names)]
        for start in range(0, batch.num_rows, CHUNK_ROWS):  # rows in chunks that stay in the CPU's cache
            self._add_rows(columns, start, min(CHUNK_ROWS, batch.num_rows - start))
        self.rows += batch.num_rows

    def _add_rows(self, columns: list[tuple[int, Lookup]], start: int, n: int) -> None:
        *parts, total, record, scratch = (b[:n] for b in self._buffers)
        written = [False] * GROUPS
        for group, lookup in columns:
            lookup.add_to(parts[group], start, scratch, fresh=not written[group])
            written[group] = True
        for part, done in zip(parts, written):
            if not done:
                part.fill(0)
        np.add(parts[0], parts[1], out=total)
        for part in parts[2:]:
            np.add(total, part, out=total)
        mix(total, out=record, scratch=scratch)
        self.records.add(record)
        self.sums[0] = (self.sums[0] + int(record.sum(dtype=np.uint64))) % _WRAP
        self.sums[1] = (self.sums[1] + int(np.multiply(record, record, out=scratch).sum(dtype=np.uint64))) % _WRAP
        for (a, b), sketch in zip(_KEPT, self.without):  # the records on the other two groups' columns
            np.add(parts[a], parts[b], out=record)
            sketch.add(finish(record, out=record, scratch=scratch))

    def identity(self) -> Identity:
        started = time.perf_counter()
        try:
            self._wait()
        finally:
            self.close()
        self.seconds += time.perf_counter() - started
        seeds = [sorted(int(column_seed(n)) for n in self.names if group_of(n) == j) for j in range(GROUPS)]
        names = tuple(hashlib.blake2b(struct.pack(f"<{len(s)}Q", *s), digest_size=8).digest() for s in seeds)
        digest = hashlib.sha256(_MAGIC + struct.pack("<Q", self.rows) + struct.pack("<QQ", *self.sums)
                                + b"".join(names)).hexdigest()
        return Identity("records-sha256:" + digest, self.records.sketch(), names,
                        tuple(b.sketch() for b in self.without))


def group_of(name: str) -> int:
    """The column's group: a fixed function of its canonical name."""
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
        for _, batch in src.batches(piece, names, names, read=progress, dictionary=names):
            sketcher.add(batch)
        done += size
    return sketcher.identity()
