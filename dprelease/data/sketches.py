"""Bottom-k sketches of multisets of record hashes, and how much of one multiset is in another
beyond what chance would put there.

Model. A data set is a multiset of records (:mod:`dprelease.data.record_hash`), one per row, and
its rows are people. Two data sets share a record either because one person is in both, or by
chance: two people with the same values (a file of a few coded columns: many people, one
record). The question asked of two data sets A and B is how many of A's people are in B; the
figure it is answered by is the share of A's rows whose records are in B, with multiplicity
(containment: Σ min(count in A, count in B) / Σ count in A), less what chance explains.

Algorithm (a bottom-k sketch: Cohen and Kaplan 2007; Broder 1997). A :class:`Sketch` keeps the k
smallest distinct hashes of the multiset and each one's count: a uniform sample of the distinct
records with their multiplicities, built in one streaming pass (:class:`Bottom`). The containment
is estimated on A's sampled records whose hash is at most B's k-th smallest (below it B's sketch
holds every record of B, so each is known to be in B or not): exact for data of fewer than k
distinct records, otherwise a proportion of about k samples (standard error at most 0.016 at
k = 1024, 0.031 at k = 256).

The chance model (Good–Turing, Katz's cut-off, Poisson). If B were other people of the same
population as A, how often would A's record r be in B? That depends on how common r is among
people, which is told by how A's records recur within A — the data whose rows are looked for,
never B (B's recurrence is B's to inflate: a file with every row twice has only recurring
records, and would otherwise explain any overlap away). A record seen c times in A has, by
Good (1953) after Turing, the probability ``p_c = (c + 1) F_{c+1} / (F_c n_A)`` where F_c is the
number of A's distinct records seen c times (estimated from the sketch, a uniform sample of
them) and n_A its rows; for c above :data:`KATZ` the count itself, ``c / n_A`` (Katz 1987: the
Good–Turing ratio is reliable for small counts only). So in B's n_B rows r is expected
``λ_c = n_B p_c`` times (Poisson), and chance alone would give the containment
``ρ = Σ E[min(c_r, Poisson(λ_{c_r}))] / Σ c_r`` over the same sampled records. The share beyond
chance is ``(share − ρ) / (1 − ρ)``. Person records that are nearly unique (the NIST excerpts'
24 columns) have ``F_2 ≪ F_1``: ρ ≈ 0, whatever B's size. A few coded columns recur: ρ near the
raw share, and beyond chance near 0 (every pair of the NIST excerpts projected on the demo's
declared columns, ``benchmarks/identity.py``). Duplicated rows in A (every row twice: F_1 = F_3 = 0)
give ρ ≈ 0 too; in B they change nothing of ρ. An estimate needs :data:`MIN_SAMPLES` sampled
records that chance would not find (``Σ P(not found by chance)``), so data whose records all
recur says nothing of its people and is not compared (only its exact records are).

Where A and B are not of one population (other states: other places' records), the model
overstates chance (A's common records are not common in B): it errs towards telling data sets
apart, and a re-export, whose share is all or nearly all, is still far above it.

Cost: streaming, per batch of hashes, one comparison with the sketch's threshold per hash and a
hash table (numpy's ``unique``) of those below it — most of them where the sketch is of a few
coded columns —, whose values, once all of them are in the sketch (the usual case), are counted
in place (a binary search among k); a comparison, vectors of at most k, the Poisson sum to about λ + 12√λ terms
(a few milliseconds at most).

Assumes: hashes are uniform (mixed) 64-bit values, one per row; ``rows`` is the multiset's size.
Guarantees: a sketch depends on the multiset only (not on the batches' order); estimates are of
the sampled records only. Nothing here is keyed: a sketch is as sensitive as the data (a sketch
of a small file holds every distinct record). Imports numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

MIN_SAMPLES = 16  # fewer sampled records that chance would not find: not compared
KATZ = 5  # Good–Turing for counts up to this, the count itself above
_POISSON_EXACT = 700.0  # above this mean, E[min(c, X)] is taken as min(c, λ) (an upper bound: more chance)
_TOP = np.uint64(0xFFFFFFFFFFFFFFFF)


class Share(NamedTuple):
    """One data set's rows found in another's, estimated from their sketches."""

    raw: float  # Σ min(count here, count there) / Σ count here, over the sampled records
    chance: float  # ρ: the same figure expected of other people (the chance model)
    beyond_chance: float  # (raw − ρ) / (1 − ρ): what the threshold is applied to
    samples: int  # the sampled records it rests on
    informative: float  # of them, how many chance would not find: compared only from MIN_SAMPLES

    @property
    def compared(self) -> bool:
        return self.informative >= MIN_SAMPLES


@dataclass(frozen=True)
class Sketch:
    """The k smallest distinct hashes of a multiset of ``rows`` elements (ascending), and each
    one's count."""

    k: int
    hashes: np.ndarray  # uint64
    counts: np.ndarray  # int64, ≥ 1
    rows: int

    @property
    def threshold(self) -> np.uint64:
        """The largest hash the sketch is complete up to: every element of the multiset with a
        hash at most this is in it (all of it, when it holds fewer than k)."""
        return self.hashes[-1] if self.hashes.size == self.k else _TOP

    def within(self, other: Sketch) -> Share:
        """The estimated share of this multiset's rows whose records are in ``other``, raw and
        beyond chance (module docstring)."""
        below = self.hashes <= other.threshold
        mine, counts = self.hashes[below], self.counts[below]
        if not mine.size or not self.rows:
            return Share(0.0, 0.0, 0.0, 0, 0.0)
        theirs = np.zeros(mine.size, dtype=np.int64)
        at = np.searchsorted(other.hashes, mine)
        found = at < other.hashes.size
        found[found] = other.hashes[at[found]] == mine[found]
        theirs[found] = other.counts[at[found]]
        total = float(counts.sum())
        share = float(np.minimum(counts, theirs).sum()) / total
        expected = expected_min(counts, self.rates(counts) * (other.rows / self.rows))
        chance = min(1.0, float(expected.sum()) / total)
        informative = float((1 - expected / counts).sum())
        beyond = 0.0 if chance >= 1 else max(0.0, (share - chance) / (1 - chance))
        return Share(share, chance, beyond, int(mine.size), informative)

    def rates(self, counts: np.ndarray) -> np.ndarray:
        """For records seen ``counts`` times here, the expected count in one row of other people
        of the same population, times this multiset's rows: Good–Turing's ``(c + 1) F_{c+1} / F_c``
        up to :data:`KATZ`, ``c`` above (F_c: this sketch's records seen c times)."""
        classes = np.bincount(np.minimum(self.counts, KATZ + 1), minlength=KATZ + 2).astype(np.float64)
        small = np.minimum(counts, KATZ)
        turing = (small + 1) * classes[small + 1] / np.maximum(classes[small], 1)
        return np.where(counts <= KATZ, turing, counts.astype(np.float64))


def expected_min(counts: np.ndarray, means: np.ndarray) -> np.ndarray:
    """``E[min(c, X)]`` for X Poisson of mean λ, element-wise: ``Σ_{t=1}^{c} P(X ≥ t)``, the
    terms summed while they matter (to λ + 12√λ + 30); above a mean of 700, ``min(c, λ)``."""
    counts = counts.astype(np.float64)
    out = np.minimum(counts, means)
    exact = means <= _POISSON_EXACT
    if not exact.any():
        return out
    c, lam = counts[exact], means[exact]
    top = int(min(c.max(), math.ceil(lam.max() + 12 * math.sqrt(lam.max()) + 30)))
    pmf = np.exp(-lam)  # P(X = 0)
    below = pmf.copy()  # P(X ≤ t − 1)
    total = np.zeros_like(lam)
    for t in range(1, top + 1):
        total += np.where(t <= c, np.maximum(0.0, 1.0 - below), 0.0)
        pmf = pmf * lam / t
        below += pmf
    out[exact] = total
    return out


class Bottom:
    """A streaming bottom-k sketch: every occurrence of a value at most the threshold is counted."""

    def __init__(self, k: int):
        self.k = k
        self.hashes = np.empty(0, dtype=np.uint64)
        self.counts = np.empty(0, dtype=np.int64)
        self.rows = 0
        self.few = False  # the data so far has fewer than k distinct values: count every batch whole

    def add(self, x: np.ndarray) -> None:
        self.rows += x.size
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
        if values.size <= self.hashes.size:  # all of them kept already (a few coded columns: the usual case)?
            at = np.searchsorted(self.hashes, values)
            if not values.size or (at[-1] < self.hashes.size and np.array_equal(self.hashes[at], values)):
                self.counts = self.counts.copy()  # a sketch handed out keeps its counts
                self.counts[at] += counts
                return
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
        return Sketch(self.k, self.hashes, self.counts, self.rows)


def _value_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``x`` (ascending) and their counts (numpy's unique: a hash table
    since numpy 2.3, faster here than Arrow's value_counts at every size measured)."""
    values, counts = np.unique(x, return_counts=True)
    return values, counts.astype(np.int64)


def packed(sketch: Sketch) -> bytes:
    """k hashes and k counts, the unused slots zero (count 0): 12 k bytes whatever the data."""
    hashes = np.zeros(sketch.k, dtype="<u8")
    counts = np.zeros(sketch.k, dtype="<u4")
    hashes[:sketch.hashes.size] = sketch.hashes
    counts[:sketch.counts.size] = np.minimum(sketch.counts, 0xFFFFFFFF)
    return hashes.tobytes() + counts.tobytes()


def unpacked(data: bytes, at: int, k: int, rows: int) -> tuple[Sketch, int]:
    """The sketch :func:`packed` wrote at ``at``, and the offset after it."""
    hashes = np.frombuffer(data, dtype="<u8", count=k, offset=at).astype(np.uint64)
    counts = np.frombuffer(data, dtype="<u4", count=k, offset=at + 8 * k).astype(np.int64)
    used = counts > 0
    return Sketch(k, hashes[used], counts[used], rows), at + 12 * k
