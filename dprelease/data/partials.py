"""Exact histograms as partial sums: a batch's keys counted sparsely or densely, partials added.

The one job: turn the cell keys of some rows (place and cell in one mixed-radix integer, built by
:mod:`dprelease.data.histogram`) into exact per-cell integers, and add such partials, so that
memory and time grow with the rows and the occupied cells, not with the declared domain times
the number of batches.

Model. A :class:`Partial` is one histogram of ``cells`` cells with ``parts`` integer rows (1 for
counts and sums; 2 for a mean: its sum and its count over the same rows). It is either *dense*
(``keys`` None, ``values`` of shape (parts, cells)) or *sparse* (``keys`` the occupied cells,
strictly increasing, ``values`` of shape (parts, len(keys))). A cell absent from a sparse partial
holds 0 in every part. Partials of disjoint rows add: the histogram of all rows is their sum,
whatever the order or grouping (a commutative monoid), which is what lets batches, files and Dask
pieces be counted anywhere and combined tree-wise.

Algorithm.
* One batch (:func:`count_keys`): dense ``numpy.bincount`` when the domain is small against the
  batch, ``cells <= DENSE_PER_ROW * rows``; else sort-based: ``numpy.sort`` of the keys (an
  argsort when there are weights), the starts of equal runs, their lengths (counts) or
  ``numpy.add.reduceat`` of the weights in int64 (sums). Measured on this machine (numpy 2.4,
  2^20 rows, median of 7): the sort-based count takes 4.3–4.5 ms whatever the domain; a dense
  bincount added into an accumulator takes 1.4 ms + about 0.85 ns per cell (4.9 ms at 2^20 cells,
  9.0 ms at 2^22, 59 ms at 2^26); they cross between 2 and 4 cells per row, hence
  ``DENSE_PER_ROW = 2``. Dense sums keep the arithmetic :mod:`dprelease.data.histogram` had
  (float64 only while every partial sum is below 2^53, else int64); sparse sums add in int64,
  refused where the dense path refuses.
* Adding (:meth:`Accumulator.add`): dense + anything is dense (a sparse one scattered into it);
  sparse + sparse: the key lists side by side, sorted, equal keys' values added (a count's key and
  value packed in one int64 for numpy's SIMD sort; a first version merged pairs by
  ``searchsorted`` and ``numpy.insert`` and spent 2.3 of 3.4 s of counting at 10M rows / 250,000
  blocks there). Sparse runs holding more than half the domain become dense (they would otherwise
  take more memory than the dense array). An accumulator keeps the sparse runs as they come and
  merges them all at once when they hold GROWTH = 4 times the entries of its last merge (and more
  than GROWTH × MERGE_FLOOR = 4M entries):
  every entry is merged O(1) times amortised (a binary counter's log₂ B merges per entry cost 1.7
  of 2.7 s at 10M rows / 250,000 blocks, where nearly every row is a cell of its own and merging
  saves little; a merge costs about 30 ns per entry here, against 5 ns per row to count a batch).
* Densify (:meth:`Accumulator.dense`) once, at the end, for the caller that needs every declared
  cell: the runs are scattered into a zero array, not merged first.

Cost. Per batch of n rows: O(n log n) for a sparse histogram (sort), O(n + cells) for a dense
one. Accumulating: O(N log N) sorting over the N entries merged, N at most about 4/3 of the
entries counted (amortised), plus the final dense array where it is asked for (the runs scattered
into it). Memory: at most about GROWTH times the occupied cells (or 4M entries), capped at the
dense array's size, plus one batch (12–16 bytes per entry and part), never a dense domain per
batch.

Assumes: keys are in [0, cells) (built from codes of the declared domains); weights are whole
numbers held as float64 or int64; the rows of partials that are added are disjoint.
Guarantees: exact integer counts and sums (int64), equal to ``numpy.bincount(keys, weights,
minlength=cells)`` of all the rows at once; a sum that could overflow int64 is refused
(:class:`~dprelease.errors.DataError`), never wrapped. A transformation: no noise, no
privacy loss of its own; the histograms it builds have the sensitivity stated in
:mod:`dprelease.data.histogram`. Imports numpy and :mod:`dprelease.errors` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dprelease.errors import DataError

DENSE_PER_ROW = 2  # a batch is counted densely when its histogram has at most this many cells per row
MERGE_FLOOR = 1 << 20  # sparse runs are merged once they hold more than GROWTH times this many entries
GROWTH = 4  # ... or GROWTH times the entries of the last merge


@dataclass(eq=False)
class Partial:
    """Exact integers of one histogram over some rows: dense (``keys`` None) or sparse."""

    cells: int
    values: np.ndarray  # int64, (parts, cells) dense or (parts, len(keys)) sparse
    keys: np.ndarray | None = None  # sparse: the occupied cells, strictly increasing

    @property
    def parts(self) -> int:
        return self.values.shape[0]

    @property
    def size(self) -> int:
        """Entries held: the domain when dense, the occupied cells when sparse."""
        return self.cells if self.keys is None else self.keys.size

    def dense(self) -> np.ndarray:
        """Every declared cell (int64, shape (parts, cells)); a dense partial's own array."""
        if self.keys is None:
            return self.values
        out = zeros(self.parts, self.cells)
        scatter(out, self)
        return out


def zeros(parts: int, cells: int) -> np.ndarray:
    """A dense int64 zero array, its pages touched in order (a calloc'ed array first touched by a
    scatter faults its pages in random order: 2.2 s against 0.08 s for 63M cells here)."""
    out = np.empty((parts, cells), dtype=np.int64)
    out.fill(0)
    return out


def scatter(out: np.ndarray, p: Partial) -> None:
    """Add a sparse partial into a dense (parts, cells) array, row by row (a 2-D fancy index is
    three to four times slower here)."""
    keys = p.keys.astype(np.intp)  # type: ignore[union-attr]
    for row, values in zip(out, p.values):
        row[keys] += values


def key_dtype(cells: int) -> np.dtype:
    """The narrowest signed integer that holds every key (int32 sorts twice as fast as int64)."""
    return np.dtype(np.int32 if cells <= 2**31 else np.int64)


def count_keys(keys: np.ndarray, cells: int, weights: tuple[np.ndarray | None, ...] = (None,),
               column: str = "", granularity: int = 1) -> Partial:
    """The histogram of one batch: per cell, for each entry of ``weights``, the rows' count
    (``None``) or the exact sum of that array's whole numbers (``column`` and ``granularity``
    only name a refused sum)."""
    if cells <= DENSE_PER_ROW * max(keys.size, 1):
        return Partial(cells, np.stack([_dense(keys, cells, w, column, granularity) for w in weights]))
    if all(w is None for w in weights):
        ordered = np.sort(keys)
        starts = _starts(ordered)
        counts = np.diff(np.r_[starts, ordered.size]).astype(np.int64)
        return Partial(cells, np.broadcast_to(counts, (len(weights), counts.size)).copy(), ordered[starts])
    order = np.argsort(keys)
    ordered = keys[order]
    starts = _starts(ordered)
    rows = []
    for w in weights:
        if w is None:
            rows.append(np.diff(np.r_[starts, ordered.size]).astype(np.int64))
        else:
            rows.append(_sparse_sums(w[order], starts, column, granularity))
    return Partial(cells, np.stack(rows), ordered[starts])


def _starts(ordered: np.ndarray) -> np.ndarray:
    if not ordered.size:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])


def _dense(keys: np.ndarray, cells: int, weights: np.ndarray | None, column: str, g: int) -> np.ndarray:
    if weights is None:
        return np.bincount(keys, minlength=cells).astype(np.int64, copy=False)
    return exact_sums(weights, keys, cells, column, g)


def _refuse_overflow(units: np.ndarray, column: str, g: int) -> None:
    if np.abs(units).max(initial=0) * units.size >= 2.0**63:
        raise DataError(f"a sum of {column} could exceed 2^63 units of the granularity {g}: raise the "
                        "granularity or narrow the bounds")


def _sparse_sums(units: np.ndarray, starts: np.ndarray, column: str, g: int) -> np.ndarray:
    """Sums of runs of ``units`` (whole numbers) beginning at ``starts``, exact in int64."""
    if not units.size:
        return np.zeros(0, dtype=np.int64)
    if np.abs(units).sum() >= 2.0**53:  # the same refusal as the dense path's
        _refuse_overflow(units, column, g)
    return np.add.reduceat(units.astype(np.int64), starts)


def exact_sums(units: np.ndarray, index: np.ndarray, cells: int, column: str, g: int) -> np.ndarray:
    """Per cell, the exact integer sum of ``units`` (whole numbers held as float64), int64: in
    float64 only when every partial sum stays below 2^53, else in int64; refuses sums that could
    overflow int64."""
    if np.abs(units).sum() < 2.0**53:  # every partial sum is an exact float64 integer
        return np.bincount(index, weights=units, minlength=cells).astype(np.int64)
    _refuse_overflow(units, column, g)
    order = np.argsort(index, kind="stable")
    ordered = index[order]
    starts = _starts(ordered)
    sums = np.zeros(cells, dtype=np.int64)
    if ordered.size:
        sums[ordered[starts]] = np.add.reduceat(units.astype(np.int64)[order], starts)
    return sums


def add(a: Partial, b: Partial) -> Partial:
    """The sum of two partials of disjoint rows (either may be reused for the result)."""
    if (a.cells, a.parts) != (b.cells, b.parts):
        raise AssertionError("partials of different histograms")  # pragma: no cover - a bug
    if a.keys is None:
        if b.keys is None:
            a.values += b.values
        else:
            scatter(a.values, b)
        return a
    if b.keys is None:
        return add(b, a)
    return _merge([a, b])


def _merge(runs: list[Partial]) -> Partial:
    """Sparse partials as one: their keys and values side by side, sorted by key, equal keys'
    values added. Counts of int32 keys (values in [0, 2^32)) are sorted packed in one int64
    (key · 2^32 + value), which numpy's SIMD sort orders several times faster than an argsort
    and a gather; other values go through an argsort."""
    a = runs[0]
    keys = np.concatenate([r.keys for r in runs])  # type: ignore[misc]
    values = np.concatenate([r.values for r in runs], axis=1)
    if a.parts == 1 and keys.dtype == np.int32 and values.min(initial=0) >= 0 and values.max(initial=0) < 2**32:
        packed = (keys.astype(np.int64) << 32) | values[0]
        packed.sort()
        keys = (packed >> 32).astype(np.int32)
        values = (packed & 0xFFFFFFFF)[np.newaxis]
    else:
        order = np.argsort(keys)
        keys, values = keys[order], values[:, order]
    starts = _starts(keys)
    return Partial(a.cells, np.add.reduceat(values, starts, axis=1) if keys.size else values, keys[starts])


@dataclass(eq=False)
class Accumulator:
    """Partials of one histogram added as they come: a dense total, or sparse runs, merged into
    one when they hold more than :data:`GROWTH` times the entries of the last merge (and more than
    GROWTH × :data:`MERGE_FLOOR`): each entry is merged O(1) times amortised, and the runs never
    hold much more than GROWTH times the occupied cells plus a batch. Held runs of more than half
    the domain become the dense total (less memory)."""

    cells: int
    parts: int = 1
    total: Partial | None = None  # dense, once anything dense was added
    runs: list[Partial] = field(default_factory=list)
    merged: int = 0  # entries after the last merge of the runs
    shown: np.ndarray | None = None  # what :meth:`dense` returned (kept until more is added)

    def add(self, p: Partial) -> Accumulator:
        return self.add_all([p])

    def add_all(self, partials: list[Partial]) -> Accumulator:
        """Add partials of disjoint rows (their arrays may be reused); the merge rule is applied
        once, after all of them."""
        self.shown = None
        for p in partials:
            if p.keys is None or self.total is not None:
                self.total = p if self.total is None else add(self.total, p)
            elif p.keys.size:
                self.runs.append(p)
        if self.total is not None and self.total.keys is None:
            for run in self.runs:
                add(self.total, run)
            self.runs.clear()
            return self
        held = sum(r.size for r in self.runs)
        if 2 * held > self.cells:
            self.total, self.runs = Partial(self.cells, self._scattered()), []
        elif len(self.runs) > 1 and held > GROWTH * max(self.merged, MERGE_FLOOR):
            self.runs = [_merge(self.runs)]
            self.merged = self.runs[0].size
        return self

    def absorb(self, other: Accumulator) -> Accumulator:
        """These partials plus ``other``'s (of disjoint rows; ``other``'s arrays may be reused)."""
        return self.add_all(([other.total] if other.total is not None else []) + other.runs)

    def _scattered(self) -> np.ndarray:
        """The runs added into one dense array (keys are distinct within a run)."""
        out = zeros(self.parts, self.cells)
        for run in self.runs:
            scatter(out, run)
        self.runs = []
        return out

    def dense(self) -> np.ndarray:
        """The histogram over every declared cell: shape (cells,), or (parts, cells) for more
        than one part; built once (the runs scattered into it, not merged), then the same array
        until more is added."""
        if self.shown is None:
            if self.total is None:
                self.total = Partial(self.cells, self._scattered())
            self.shown = self.total.values[0] if self.parts == 1 else self.total.values
        return self.shown
