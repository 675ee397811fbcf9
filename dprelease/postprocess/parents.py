"""The top-down fit of one table at one level, parent by parent, in worker processes.

One job: given a table's GLS estimate at a level (places × cells), its known zeros, the sums
fixed before it — per child, its separator cells (from the tables fitted earlier at this level);
per parent, its cells (this table one level up) — the non-negative integers nearest the
estimate with exactly those sums (:func:`fit_level`).

The model. The problem falls apart into independent *blocks*, one per (parent, separator
cell): the matrix children × the table's free cells inside that separator cell, whose rows must
sum to each child's separator value and whose columns to the parent's cells. Per block:

1. :func:`.transport.fit_blocks` — the exact nearest non-negative matrix with those sums
   (semismooth Newton on the dual, converging per block, many blocks of one padded shape at a
   time);
2. :func:`.integral.round_two_way` — integers with the same sums, each cell its fit's floor or
   ceiling (a maximum flow over the blocks of one chunk only).

A block whose parent's cells are all zero is zero (its only non-negative point with zero
sums) and is not fitted (a rehearsal on zeros fits nothing). The other blocks are cut into
chunks of about ``CHUNK_CELLS`` padded cells (sorted by their number of children, so padding
is small); a level with more than ``PARALLEL_CELLS`` free cells (2^23,
about 33,000 places of a 252-cell table) sends its chunks to worker processes
(:class:`Workers`, ``concurrent.futures``, one per CPU; starting them costs about a second),
a smaller one is fitted here — unless the workers are already running (a cluster's, or the
local ones once started): then any level over ``RUNNING_CELLS`` (2^21) goes to them. Chunks
are sent the costliest first (padded cells × the most children of a block: the Newton step's
cost), so that the last ones to finish are small and the workers end a level together. The
chunks, and so the integers, do not depend on where or in which order they run. Cost: linear
in the level's cells times the Newton iterations, and min(children, cells)² per block and
iteration; memory: a chunk per worker besides the level.

Guarantees: non-negative integers, zero on the known zeros, the sums exact; a block whose
Newton iteration reached its cap is counted in the returned :class:`FitStats` (the caller must
report it: its integers still have the exact sums, but are not from the exact nearest point).
BLAS runs on one thread per process during the fit (threadpoolctl): the processes are the
parallelism. Sees published noisy values only; imports numpy, threadpoolctl and its siblings,
never the data readers.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from dprelease.postprocess.integral import round_two_way
from dprelease.postprocess.transport import fit_blocks

CHUNK_CELLS = 1 << 20  # padded cells per chunk (a few arrays of this many floats per worker)
PARALLEL_CELLS = 1 << 23  # a level with more free cells than this is fitted in worker processes (starting
# them costs about a second: the imports)
RUNNING_CELLS = 1 << 21  # ... or than this, when the workers are running already (a cluster's, or started before)


@dataclass(frozen=True)
class FitStats:
    """What the fit of some blocks took: ``blocks`` fitted, the most Newton ``iterations`` any
    took, and how many were ``unconverged`` (their iteration cap reached: to be reported)."""

    blocks: int = 0
    iterations: int = 0
    unconverged: int = 0

    def __add__(self, other: FitStats) -> FitStats:
        return FitStats(self.blocks + other.blocks, max(self.iterations, other.iterations),
                        self.unconverged + other.unconverged)


class FitFailed(RuntimeError):
    """A chunk's fit raised (here, in a worker process or on a cluster's worker): the run stops
    at once, the chunks still pending cancelled. Its message names the chunk and the error (a
    fit sees noisy values only: nothing confidential to hide)."""


class Workers:
    """Where the fit's chunks run: local worker processes, started on first use (forkserver: safe
    beside threads) and shut down by :meth:`close` (``processes`` ≤ 1: everything in this
    process); or a given ``executor`` (e.g. a Dask cluster's, ``distributed.Client.get_executor``),
    used as it is and never shut down here; ``processes``: how many chunks run at once (twice
    that are in flight; default: this machine's CPUs)."""

    def __init__(self, processes: int | None = None, executor: Executor | None = None) -> None:
        self.processes = _cpus() if processes is None else processes
        self._pool: Executor | None = None
        self._given = executor

    def pool(self) -> Executor | None:
        if self._given is not None:
            return self._given
        if self.processes <= 1:
            return None
        if self._pool is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([__name__])  # imported once by the server, not by each worker
            self._pool = ProcessPoolExecutor(self.processes, mp_context=context, initializer=_one_blas_thread)
        return self._pool

    def running(self) -> bool:
        """Whether sending chunks costs no start: a given executor, or this machine's processes
        started already."""
        return self._given is not None or self._pool is not None

    def task(self) -> Callable[[Chunk], tuple[np.ndarray, FitStats]]:
        """What a chunk is sent to: :func:`fit_chunk` (this machine's processes set BLAS to one
        thread when they start), or on a given executor :func:`fit_chunk_one_blas_thread`."""
        return fit_chunk if self._given is None else fit_chunk_one_blas_thread

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _cpus() -> int:
    """The CPUs this process may run on (Linux), else the machine's."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def _one_blas_thread() -> None:
    """In a worker, for its lifetime: BLAS on one thread (the processes are the parallelism; a
    threaded BLAS on the fit's many small products is up to 10× slower on a busy machine)."""
    threadpool_limits(limits=1, user_api="blas")


Chunk = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # values (n × m), children per block, row sums, column sums


def fit_level(estimate: np.ndarray, zeros: np.ndarray, to_sep: np.ndarray, sep_values: np.ndarray,
              parent: np.ndarray, parent_values: np.ndarray, workers: Workers | None = None
              ) -> tuple[np.ndarray, FitStats]:
    """One table at one level below the root: non-negative integers (places × cells), zero on
    ``zeros``, whose cells inside each separator cell (``to_sep``) sum to ``sep_values`` per
    place and whose children (``parent``: each place's parent) sum to ``parent_values``.
    Assumes the sums agree: per parent and separator cell, its children's separator values and
    its cells there have the same (whole) total."""
    places, cells = estimate.shape
    out = np.zeros((places, cells), dtype=np.int64)
    free = np.flatnonzero(~zeros)
    order = np.argsort(parent, kind="stable")  # children of one parent together
    n_children = np.bincount(parent, minlength=parent_values.shape[0])
    has = np.flatnonzero(n_children)
    by_size = has[np.argsort(n_children[has], kind="stable")]  # parents by their number of children
    start = np.r_[0, np.cumsum(n_children)[:-1]]
    placed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per chunk: its parents, children, cells
    for s in range(sep_values.shape[1]):
        in_s = free[to_sep[free] == s]
        if not in_s.size:
            continue
        occupied = by_size[parent_values[np.ix_(by_size, in_s)].any(axis=1)]  # a block whose parent's cells are
        # all 0 has 0 as its only point (non-negative, zero sums): its cells stay 0, never sent
        for group in _chunks(n_children[occupied], in_s.size):
            ps = occupied[group]
            k = n_children[ps]
            placed.append((ps, order[np.repeat(start[ps] - (np.cumsum(k) - k), k) + np.arange(k.sum())], in_s))
    placed.sort(key=lambda chunk: -int(n_children[chunk[0]].max()) ** 2 * chunk[0].size * chunk[2].size)  # costliest
    # first (padded cells × the most children of a block); stable: ties keep their order

    def task(i: int) -> Chunk:  # built when sent: a chunk's copy of the estimate lives only while it is fitted
        ps, children, in_s = placed[i]
        s = int(to_sep[in_s[0]])
        return (estimate[np.ix_(children, in_s)], n_children[ps], sep_values[children, s].astype(np.float64),
                parent_values[np.ix_(ps, in_s)].astype(np.float64))

    running = workers is not None and workers.running()
    large = free.size * places > (min(RUNNING_CELLS, PARALLEL_CELLS) if running else PARALLEL_CELLS)
    pool = workers.pool() if workers is not None and large else None
    stats = FitStats()
    with threadpool_limits(limits=1, user_api="blas"):  # here too (see _one_blas_thread)
        for i, (ints, chunk_stats) in _fitted(len(placed), task, pool, 2 * (workers.processes if workers else 1), workers):
            _, children, in_s = placed[i]
            out[np.ix_(children, in_s)] = ints
            stats = stats + chunk_stats
    return out, stats


def _fitted(count: int, task: Callable[[int], Chunk], pool: Executor | None, most: int,
            workers: Workers | None = None) -> Iterator[tuple[int, tuple[np.ndarray, FitStats]]]:
    """(i, :func:`fit_chunk` of ``task(i)``) for every chunk, here or on ``pool`` — at most
    ``most`` chunks in flight, so that memory holds a few chunks, not a copy of the level. A pool
    that breaks (its workers could not start, or died) is given up for the rest of the run
    (``workers``): what is left is fitted here, to the same integers."""
    if pool is None:
        yield from ((i, fit_chunk(task(i))) for i in range(count))
        return
    pending: dict[Future[tuple[np.ndarray, FitStats]], int] = {}
    sent = 0
    try:
        while sent < count or pending:
            while sent < count and len(pending) < most:
                pending[pool.submit(workers.task() if workers is not None else fit_chunk, task(sent))] = sent
                sent += 1
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    result = future.result()  # (a broken pool raises here: the chunk stays pending, fitted below)
                except BrokenProcessPool:
                    raise
                except Exception as exc:  # noqa: BLE001 - the run stops here, with what failed
                    for other in pending:
                        other.cancel()
                    raise FitFailed(f"the fit of chunk {pending[future] + 1} of {count} failed on a worker: "
                                    f"{type(exc).__name__}: {exc}") from exc
                yield pending.pop(future), result
    except BrokenProcessPool:  # the workers could not start or died (e.g. a caller's unguarded __main__, re-run in them)
        warnings.warn("the fit's worker processes stopped (a program that calls dprelease without an `if __name__ == "
                      "'__main__':` guard re-runs its body in them); the rest of the level is fitted in this process, "
                      "with the same integers", RuntimeWarning, stacklevel=2)
        if workers is not None:
            workers.close()
            workers.processes = 1
        left = sorted({*pending.values(), *range(sent, count)})
        yield from ((i, fit_chunk(task(i))) for i in left)


def _chunks(sizes: np.ndarray, m: int) -> list[np.ndarray]:
    """Consecutive groups of the (sorted) blocks with at most ``CHUNK_CELLS`` padded cells each
    (the largest children count in the group × m × the group's blocks), at least one block."""
    groups, first = [], 0
    while first < sizes.size:
        last = first + 1
        while last < sizes.size and int(sizes[last]) * m * (last - first + 1) <= CHUNK_CELLS:
            last += 1
        groups.append(np.arange(first, last))
        first = last
    return groups


def fit_chunk_one_blas_thread(task: Chunk) -> tuple[np.ndarray, FitStats]:
    """:func:`fit_chunk` with BLAS on one thread (on a cluster's worker, whose threads and
    processes are the parallelism; see :func:`_one_blas_thread`)."""
    with threadpool_limits(limits=1, user_api="blas"):
        return fit_chunk(task)


def fit_chunk(task: Chunk) -> tuple[np.ndarray, FitStats]:
    """Some blocks of one separator cell: ``values`` (their children's rows, block after block ×
    the cells), ``k`` (children per block), ``r`` (per child its separator value), ``c`` (per
    block its parent's cells). Their exact fit (:func:`.transport.fit_blocks`, padded to the
    largest block), then integers with the same sums (:func:`.integral.round_two_way`)."""
    values, k, r, c = task
    n, m = values.shape
    blocks, most = k.size, int(k.max())
    block_of = np.repeat(np.arange(blocks), k)
    position = np.arange(n) - np.repeat(np.cumsum(k) - k, k)
    v = np.full((blocks, most, m), -np.inf)
    v[block_of, position] = values
    row_sums = np.zeros((blocks, most))
    row_sums[block_of, position] = r
    fit = fit_blocks(v, row_sums, c)
    x = fit.x[block_of, position]
    rows = np.repeat(np.arange(n), m)
    cols = (block_of[:, None] * m + np.arange(m)).ravel()
    ints = round_two_way(x.ravel(), rows, r, cols, c.ravel()).reshape(n, m)
    return ints, FitStats(blocks, fit.iterations, fit.unconverged)
