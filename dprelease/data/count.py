"""Every exact count a release measures, in one pass over the data: streamed here, or on Dask.

Histograms are additive: the rows of a batch counted on their own and added to the counts of
the other batches give the counts of all rows. So the local engine reads one batch at a time
(memory: the domain-sized histograms plus one batch, whatever the number of rows), and the
Dask engine counts pieces of the data on the cluster's workers and adds them up here.

Privacy contract: a transformation, no noise. Every histogram is the one
:func:`~dprelease.data.histogram.histogram` gives over all rows, whose sensitivity (1 per row
under add/remove, 2 under change one record, times the contribution bound) the planner uses;
the counts are exact and confidential. Noise is drawn afterwards, once, in the process that
holds the ledger reservation (:mod:`dprelease.measure`), never on a worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from dprelease import __version__
from dprelease.data.histogram import histogram, place_totals
from dprelease.data.load import Encoded, columns_to_read, encode, encode_batch, source
from dprelease.data.scan import Piece
from dprelease.errors import DataError, UserError
from dprelease.faults import checkpoint
from dprelease.spec import MeanMeasure, ModeMeasure, Spec, SumMeasure

Key = tuple[str, "str | None"]  # (table, geographic level)


@dataclass(eq=False)
class ExactCounts:
    """Exact histograms per (table, level), place totals per invariant level, and local
    tables' answers per category, with how many rows were read and dropped. Confidential."""

    histograms: dict[Key, np.ndarray]
    invariants: dict[str, np.ndarray] = field(default_factory=dict)
    local_counts: dict[str, np.ndarray] = field(default_factory=dict)
    rows_read: int = 0
    rows_dropped: int = 0
    rows_over_bound: int = 0

    @property
    def rows(self) -> int:
        return self.rows_read - self.rows_dropped

    def add(self, other: ExactCounts) -> ExactCounts:
        """In place: these counts plus ``other``'s (the counts of disjoint rows)."""
        for parts, more in ((self.histograms, other.histograms), (self.invariants, other.invariants),
                            (self.local_counts, other.local_counts)):
            if parts.keys() != more.keys():
                raise AssertionError("counts of different releases")  # pragma: no cover
            for key, value in more.items():
                parts[key] += value  # type: ignore[index]
        self.rows_read += other.rows_read
        self.rows_dropped += other.rows_dropped
        self.rows_over_bound += other.rows_over_bound
        return self


def count_encoded(spec: Spec, data: Encoded) -> ExactCounts:
    """Every histogram of the release (each level of a geographic table, a mode's categories as
    the last dimension), the invariants' place totals and the local tables' answers, of the rows
    in ``data``."""
    histograms: dict[Key, np.ndarray] = {}
    for table in spec.tables:
        mode = (table.measure.column,) if isinstance(table.measure, ModeMeasure) else ()
        for level, dims, _ in table.measured():
            histograms[(table.name, level)] = histogram(spec, table, data, dims + mode)
    return ExactCounts(histograms, place_totals(spec, data), dict(data.local_counts), data.rows_read,
                       data.rows_dropped, data.rows_over_bound)


def count_piece(spec: Spec, piece: Piece, timings: dict[str, float] | None = None,
                read: Callable[[int], None] | None = None) -> ExactCounts:
    """The counts of one piece of the data, read batch by batch (here or on a Dask worker);
    ``read`` is told the piece's bytes read so far (a progress bar)."""
    src = source(spec)
    names, text = columns_to_read(spec)
    total = None
    clock = time.perf_counter()
    for first_row, batch in src.batches(piece, names, text, read=read):
        data = encode_batch(spec, batch, where=piece.path, first_row=first_row)
        counted = time.perf_counter()
        counts = count_encoded(spec, data)
        total = counts if total is None else total.add(counts)
        checkpoint("histogram")  # a batch counted (fault injection for the crash tests; inert otherwise)
        if timings is not None:
            now = time.perf_counter()
            timings["load"] = timings.get("load", 0.0) + counted - clock
            timings["histogram"] = timings.get("histogram", 0.0) + now - counted
            clock = now
    if timings is not None:
        timings["load"] = timings.get("load", 0.0) + time.perf_counter() - clock
    return total if total is not None else zero_counts(spec)


def zero_counts(spec: Spec) -> ExactCounts:
    """The counts of no rows: every histogram of its declared shape, all zero."""
    names, _ = columns_to_read(spec)
    empty = pa.table({n: pa.array([], pa.string()) for n in names})
    return count_encoded(spec, encode_batch(spec, empty, where="(no rows)", bound=True))


def count_exact(spec: Spec, *, timings: dict[str, float] | None = None,
                read: Callable[[int], None] | None = None) -> ExactCounts:
    """The exact counts of the whole dataset, by the spec's engine: streamed batch by batch on
    this machine, or piece by piece on a Dask cluster. With a contribution bound the data is
    read whole (a person's rows must be seen together; see :func:`dprelease.data.load.encode`).
    ``read`` (streamed data only): told the bytes read so far across the files, for a progress bar."""
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
        counts = _count_on_dask(spec)
        if timings is not None:
            timings["load"] = timings.get("load", 0.0) + time.perf_counter() - start
    else:
        counts = zero_counts(spec)
        done = 0
        for piece in source(spec).files():
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


def _count_on_dask(spec: Spec) -> ExactCounts:
    """Pieces counted on the cluster's workers, added up here as they arrive (one at a time in
    memory). Without an address, a cluster of local worker processes for this run. The
    ``histogram`` checkpoint fires here as each piece arrives: the workers' own checkpoints are
    inert, as fault hooks are installed only in the run's process."""
    from distributed import Client, LocalCluster, as_completed

    src = source(spec)
    pieces = src.split(src.files())
    cluster = None
    if spec.engine.address is None:
        cluster = LocalCluster(processes=True, dashboard_address=None)
    client = Client(spec.engine.address or cluster, set_as_default=False)
    try:
        total = zero_counts(spec)
        futures = client.map(count_on_worker, pieces, spec=spec, pure=False)
        for future in as_completed(futures, loop=client.loop):
            outcome = future.result()
            future.release()
            total.add(_unpack(outcome))
            # a piece counted, seen here: a hook is installed in this process, never on a worker
            checkpoint("histogram")
        return total
    finally:
        client.close()
        if cluster is not None:
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
