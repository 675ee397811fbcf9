"""Every exact count a release measures, in one pass over the data: streamed here, or on Dask.

One direction: the pieces to read and, per piece, a stream of encoded batches come from
:mod:`dprelease.data.load` (which reads through :mod:`dprelease.data.scan` and never calls back
here); each batch is counted into partials (:mod:`dprelease.data.histogram`,
:mod:`dprelease.data.partials`: sparse where a histogram is large against the batch) and added.
Histograms are additive: the rows of a batch counted on their own and added to the counts of
the other batches give the counts of all rows. So the local engine reads one batch at a time
(memory: the small histograms, the occupied cells of the large ones, one batch), and the Dask
engine counts pieces of the data on the cluster's workers, which add the pieces' partials
tree-wise among themselves; this process receives one result. A histogram is made dense over its
declared domain when it is first read (:class:`Histograms`), one at a time as the noise step pops
them.

Privacy contract: a transformation, no noise. Every histogram is the one
:func:`~dprelease.data.histogram.histogram` gives over all rows, whose sensitivity (1 per row
under add/remove, 2 under change one record, times the contribution bound) the planner uses;
the counts are exact and confidential. Noise is drawn afterwards, once, in the process that
holds the ledger reservation (:mod:`dprelease.lifecycle.measure`), never on a worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

import numpy as np

from dprelease import __version__
from dprelease.data.cluster import Cluster
from dprelease.data.histogram import histogram_cells, parts, place_partials, table_partials
from dprelease.data.load import Encoded, encode, encoded_batches, pieces
from dprelease.data.partials import Accumulator, Partial
from dprelease.data.scan import Piece
from dprelease.errors import DataError, UserError
from dprelease.faults import checkpoint
from dprelease.spec import ROOT, MeanMeasure, Spec, SumMeasure

Key = tuple[str, "str | None"]  # (table, geographic level)
K = TypeVar("K")


class Histograms(MutableMapping[K, np.ndarray], Generic[K]):
    """Exact histograms by key, each held as an :class:`~dprelease.data.partials.Accumulator`
    (sparse where it is large against the rows) and densified over its declared domain when it
    is first read, one at a time; ``pop`` hands the dense array over and forgets it."""

    def __init__(self, accumulators: dict[K, Accumulator]) -> None:
        self.accumulators = accumulators

    def __getitem__(self, key: K) -> np.ndarray:
        return self.accumulators[key].dense()

    def __setitem__(self, key: K, value: np.ndarray) -> None:
        values = np.asarray(value, dtype=np.int64)
        values = values.reshape(1, -1) if values.ndim == 1 else values
        self.accumulators[key] = Accumulator(values.shape[1], values.shape[0]).add(Partial(values.shape[1], values))

    def __delitem__(self, key: K) -> None:
        del self.accumulators[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self.accumulators)

    def __len__(self) -> int:
        return len(self.accumulators)

    def absorb(self, other: Histograms[K]) -> None:
        """In place: these histograms plus ``other``'s (of disjoint rows)."""
        if self.accumulators.keys() != other.accumulators.keys():
            raise AssertionError("counts of different releases")  # pragma: no cover
        for key, acc in other.accumulators.items():
            self.accumulators[key].absorb(acc)


@dataclass(eq=False)
class ExactCounts:
    """Exact histograms per (table, level), place totals per invariant level, and local
    tables' answers per category, with how many rows were read and dropped. Confidential."""

    histograms: Histograms[Key]
    invariants: Histograms[str] = field(default_factory=lambda: Histograms({}))
    local_counts: dict[str, np.ndarray] = field(default_factory=dict)
    rows_read: int = 0
    rows_dropped: int = 0
    rows_over_bound: int = 0

    @property
    def rows(self) -> int:
        return self.rows_read - self.rows_dropped

    def add(self, other: ExactCounts) -> ExactCounts:
        """In place: these counts plus ``other``'s (the counts of disjoint rows)."""
        self.histograms.absorb(other.histograms)
        self.invariants.absorb(other.invariants)
        if self.local_counts.keys() != other.local_counts.keys():
            raise AssertionError("counts of different releases")  # pragma: no cover
        for key, value in other.local_counts.items():
            self.local_counts[key] += value
        self.rows_read += other.rows_read
        self.rows_dropped += other.rows_dropped
        self.rows_over_bound += other.rows_over_bound
        return self


def count_encoded(spec: Spec, data: Encoded) -> ExactCounts:
    """Every histogram of the release (each level of a geographic table, a mode's categories as
    the last dimension), the invariants' place totals and the local tables' answers, of the rows
    in ``data``: partials, sparse where a histogram is large against the rows."""
    histograms: dict[Key, Accumulator] = {}
    for table in spec.tables:
        cells = histogram_cells(spec, table)
        for level, partial in table_partials(spec, table, data).items():
            histograms[(table.name, level)] = Accumulator(cells[level], parts(table)).add(partial)
    invariants = {level: Accumulator(p.cells).add(p) for level, p in place_partials(spec, data).items()}
    return ExactCounts(Histograms(histograms), Histograms(invariants), dict(data.local_counts), data.rows_read,
                       data.rows_dropped, data.rows_over_bound)


def count_piece(spec: Spec, piece: Piece, timings: dict[str, float] | None = None,
                read: Callable[[int], None] | None = None) -> ExactCounts:
    """The counts of one piece of the data, batch by batch as they come scanned and encoded
    (here or on a Dask worker); ``read`` is told the piece's bytes read so far (a progress bar)."""
    total = zero_counts(spec)
    clock = time.perf_counter()
    for data in encoded_batches(spec, piece, read=read):
        counted = time.perf_counter()
        total.add(count_encoded(spec, data))
        checkpoint("histogram")  # a batch counted (fault injection for the crash tests; inert otherwise)
        if timings is not None:
            now = time.perf_counter()
            timings["load"] = timings.get("load", 0.0) + counted - clock
            timings["histogram"] = timings.get("histogram", 0.0) + now - counted
            clock = now
    if timings is not None:
        timings["load"] = timings.get("load", 0.0) + time.perf_counter() - clock
    return total


def zero_counts(spec: Spec) -> ExactCounts:
    """The counts of no rows: every histogram of its declared shape, all zero (from the spec
    alone: nothing is read)."""
    histograms: dict[Key, Accumulator] = {}
    for table in spec.tables:
        for level, cells in histogram_cells(spec, table).items():
            histograms[(table.name, level)] = Accumulator(cells, parts(table))
    invariants = {level: Accumulator(1 if level == ROOT else spec.column(level).size)
                  for level in spec.invariant_levels}
    local = {t.name: np.zeros(spec.column(t.column).size, dtype=np.int64) for t in spec.local_tables}
    return ExactCounts(Histograms(histograms), Histograms(invariants), local)


def count_exact(spec: Spec, *, timings: dict[str, float] | None = None,
                read: Callable[[int], None] | None = None, cluster: Cluster | None = None) -> ExactCounts:
    """The exact counts of the whole dataset, by the spec's engine: streamed batch by batch on
    this machine, or piece by piece on a Dask cluster. With a contribution bound the data is
    read whole (a person's rows must be seen together; see :func:`dprelease.data.load.encode`).
    ``read`` (streamed data only): told the bytes read so far across the files, for a progress bar.
    ``cluster`` (the Dask engine): the run's cluster, left open (else one for this count only)."""
    problem = engine_problem(spec)
    if problem:
        raise UserError(problem)
    if spec.unit_id:
        start = time.perf_counter()
        data = encode(spec)
        loaded = time.perf_counter()
        counts = count_encoded(spec, data)
        if timings is not None:
            timings["load"] = timings.get("load", 0.0) + loaded - start
            timings["histogram"] = timings.get("histogram", 0.0) + time.perf_counter() - loaded
    elif spec.engine.kind == "dask":
        start = time.perf_counter()
        counts = _count_on_dask(spec, cluster)
        if timings is not None:
            timings["load"] = timings.get("load", 0.0) + time.perf_counter() - start
    else:
        counts = zero_counts(spec)
        done = 0
        for piece in pieces(spec):
            counts.add(count_piece(spec, piece, timings, None if read is None else lambda n, base=done: read(base + n)))
            done += _size(piece)
    _check_sums_fit(spec, counts)
    return counts


def engine_problem(spec: Spec) -> str | None:
    """Why the spec's engine cannot count this release (checked before anything is spent)."""
    if spec.engine.kind != "dask":
        return None
    where = f"{spec.source}: engine"
    if spec.unit_id:
        return (f"{where}: kind dask cannot apply privacy.unit's contribution bound (every row of a person must be "
                "seen together); use the local engine (remove engine:, or --dask-address) for this release")
    try:
        import distributed  # noqa: F401
    except ImportError:
        return f"{where}: kind dask needs the dask extra: python -m pip install 'dprelease[dask]'"
    if spec.engine.address is not None:
        return _unreachable(spec.engine.address, where)
    return None


def _unreachable(address: str, where: str) -> str | None:
    import socket

    host, _, port = address.split("://", 1)[-1].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            return None
    except (OSError, ValueError) as exc:
        return (f"{where}: cannot reach the Dask scheduler at {address} ({exc}); start it (dask scheduler) or fix "
                "engine.address / --dask-address")


def _count_on_dask(spec: Spec, cluster: Cluster | None = None) -> ExactCounts:
    """Pieces counted on the cluster's workers into partials, combined there tree-wise: as two
    results are ready (pieces or sums of pieces) a worker adds them (:func:`combine_on_worker`),
    so the driver receives one result, not every piece's histograms. ``cluster``: the run's
    (:class:`.cluster.Cluster`, left open for the fit), else one for this count only. The
    ``histogram`` checkpoint fires here as each piece is counted: the workers' own checkpoints
    are inert, as fault hooks are installed only in the run's process."""
    from distributed import as_completed

    work = pieces(spec, split=True)
    own = cluster is None
    cluster = Cluster(spec.engine.address) if cluster is None else cluster
    client = cluster.client()
    try:
        futures = client.map(count_on_worker, work, spec=spec, pure=False)
        counted = {f.key for f in futures}
        ready = as_completed(futures, loop=client.loop)
        del futures  # as_completed holds each until it is combined: a piece's partials are freed once added
        waiting = None
        for future in ready:
            if future.key in counted:
                # a piece counted, seen here: a hook is installed in this process, never on a worker
                checkpoint("histogram")
            if waiting is None:
                waiting = future
            else:
                ready.add(client.submit(combine_on_worker, waiting, future, pure=False))
                waiting = None
        if waiting is None:
            return zero_counts(spec)
        outcome = waiting.result()
        waiting.release()
        return _unpack(outcome)
    finally:
        if own:
            cluster.close()


def count_on_worker(piece: Piece, spec: Spec) -> tuple[str, Any]:
    """On a worker: the piece's counts, or a failure as a value: a raised exception would be
    logged by the worker, and its message may quote confidential values. A data error's message
    goes to the operator's terminal (as on this machine); of any other failure only its type."""
    try:
        return "counts", (__version__, count_piece(spec, piece))
    except DataError as exc:
        return "data error", str(exc)
    except Exception as exc:  # noqa: BLE001 - reported by type, never by message, on the driver
        return "failure", f"{type(exc).__name__} while counting {piece.path}"


def combine_on_worker(a: tuple[str, Any], b: tuple[str, Any]) -> tuple[str, Any]:
    """On a worker: two outcomes of :func:`count_on_worker` (or of this) as one. Counts add (their
    partials merged); a failure wins over counts (the first one found is kept), as a value; two
    versions of dprelease are reported as both. Consumes its inputs (``a``'s counts are added to
    in place and ``b``'s arrays taken over): each outcome is combined once and never read again
    (the driver drops its references as it goes, :func:`_count_on_dask`)."""
    for outcome in (a, b):
        if outcome[0] != "counts":
            return outcome
    (va, ca), (vb, cb) = a[1], b[1]
    if va != vb:
        return "counts", (f"{va} and {vb}", ca)
    try:
        return "counts", (va, ca.add(cb))
    except Exception as exc:  # noqa: BLE001 - reported by type, never by message, on the driver
        return "failure", f"{type(exc).__name__} while adding counts"


def _unpack(outcome: tuple[str, Any]) -> ExactCounts:
    kind, value = outcome
    if kind == "data error":
        raise DataError(value)
    if kind == "failure":
        raise RuntimeError(f"a Dask worker failed: {value} (see the worker's environment; its message is not "
                           "reported, as it may quote data)")
    version, counts = value
    if version != __version__:
        raise UserError(f"a Dask worker runs dprelease {version}, this process {__version__}: install the same "
                        "version on every worker")
    return counts


def _check_sums_fit(spec: Spec, counts: ExactCounts) -> None:
    """Sums add int64 partial sums across batches: refuse data that could overflow them."""
    for table in spec.tables:
        if isinstance(table.measure, (SumMeasure, MeanMeasure)):
            m = table.measure
            units = max(abs(m.low), abs(m.high)) // m.granularity + 1
            if units * max(counts.rows_read, 1) >= 2**63:
                raise DataError(f"a sum of {m.column} could exceed 2^63 units of the granularity {m.granularity}: "
                                "raise the granularity or narrow the bounds")


def _size(piece: Piece) -> int:
    try:
        return Path(piece.path).stat().st_size
    except (OSError, TypeError):
        return 0
