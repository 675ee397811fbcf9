"""A reserved run's steps — count, measure, post-process, publish (with the ledger commit) —
run by the orchestrator, which is passed in: the Prefect flow (``dprelease.serve.orchestrate.run_release``,
so that Prefect is imported only once the run is reserved and the library never imports it) or
the same steps inline (:func:`dprelease.lifecycle.inline.run_inline`). While the
steps run, the run holds a lease in the ledger (a heartbeat) and a SIGTERM settles it like a
failure. Any failure is settled (:mod:`dprelease.lifecycle.settle`) before the lease ends.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dprelease.faults import checkpoint
from dprelease.lifecycle.progress import SHOWN_FROM_BYTES
from dprelease.ledger import Ledger, LedgerLocation
from dprelease.ledger.lease import Heartbeat
from dprelease.lifecycle.settle import settle_failure
from dprelease.lifecycle.voice import Voice
from dprelease.lifecycle.release import ReleaseRun
from dprelease.spec import Spec

@dataclass(frozen=True)
class Orchestrator:
    """How a reserved run's steps run (chosen by :func:`dprelease.serve.server.choose`): ``steps``
    runs them all; ``record`` says how, in the run's internal record (``run.json``); ``ready``
    is called once every refusal that needs no data has passed, before anything is reserved
    (a Prefect server is checked, or a temporary one started, there: a refused run never
    waits for one)."""

    steps: Callable[[ReleaseRun], None]
    record: dict[str, str] = field(default_factory=dict)
    ready: Callable[[], None] | None = None


def execute(run: ReleaseRun, orchestrate: Orchestrator, voice: Voice) -> None:
    """Run the steps; return once the release is published. A failure is settled, and raises
    :class:`~dprelease.lifecycle.settle.RunFailed` unless the release got published after all."""
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a polite kill settles the reservation too
    progress = _terminal_progress(run)
    heartbeat = Heartbeat(lambda: _with_ledger(run.location, lambda ledger: ledger.renew_lease(run.run_id))).start()
    try:
        checkpoint("reserved")
        run.orchestrator = dict(orchestrate.record)
        orchestrate.steps(run)
    except BaseException as exc:  # noqa: BLE001 - every failure must settle the reservation
        settle_failure(run, exc, voice)
    finally:
        run.close()  # (its Dask cluster, if it opened one)
        signal.signal(signal.SIGTERM, previous)
        heartbeat.stop()
        _with_ledger(run.location, lambda ledger: ledger.end_lease(run.run_id))
        if progress is not None:
            progress.stop()


def _terminal_progress(run: ReleaseRun):  # type: ignore[no-untyped-def]
    """A rich progress bar on stderr for an interactive terminal (load, each table, publish)."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console as RichConsole
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), console=RichConsole(stderr=True), transient=True)
    task = bar.add_task(f"{run.spec.release}: loading", total=3 + len(run.spec.tables))
    bar.start()
    run.on_progress = lambda what, step, steps: bar.update(task, completed=step, description=f"{run.spec.release}: {what}")
    size = data_bytes(run.spec)
    if size >= SHOWN_FROM_BYTES:  # a large file: how much of it is counted so far
        run.on_bytes = lambda done: bar.update(task, description=f"{run.spec.release}: counting the data, "
                                                                 f"{min(done, size) >> 20:,} of {size >> 20:,} MiB")
    return bar


def data_bytes(spec: Spec) -> int:
    """The bytes of the spec's data files (0 where unknown, e.g. on a cluster's storage)."""
    from dprelease.data.load import source

    try:
        return sum(Path(piece.path).stat().st_size for piece in source(spec).files())
    except Exception:  # noqa: BLE001 - only a progress bar's size: without it, no byte count is shown
        return 0


def _with_ledger(location: LedgerLocation, act: Callable[[Ledger], None]) -> None:
    """Open the ledger, act on it, close it; a failure here (the lease's bookkeeping) is not the run's."""
    try:
        ledger = Ledger.open(location)
        if ledger is not None:
            with ledger:
                act(ledger)
    except Exception:  # noqa: BLE001 - the lease only guards; the ledger's states decide
        pass


def _interrupt(signum, frame):  # type: ignore[no-untyped-def]
    raise KeyboardInterrupt(f"signal {signum}")
