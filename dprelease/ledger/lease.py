"""A run's lease on its reservation: who holds it, and whether that process may still be alive.

A reservation is settled by hand (``dprelease ledger resolve``) only once its run is certainly
gone: voiding a live run's reservation would let it draw noise on a budget the ledger no
longer counts. The lease names the process (host, PID, and the process's start time and the
machine's boot, so a reused PID is not mistaken for the run) and carries a heartbeat the run
renews. On the same host the process table decides at once; from another host (a team's
PostgreSQL ledger) the lease lapses only when its heartbeat is older than ``TTL``.

The lease is a guard, not the accounting: whether noise was drawn is recorded in the ledger
itself (the ``drawing`` state), and a run whose reservation was settled without it stops
before drawing.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable

from dprelease.host.processes import pid_exists, process_start

HEARTBEAT_SECONDS = 5.0
TTL = timedelta(seconds=60)  # a lease from another host lapses this long after its last heartbeat


@dataclass(frozen=True, slots=True)
class Holder:
    host: str
    pid: int
    start: str  # boot id and the process's start time in clock ticks; "" where unknown


def this_process() -> Holder:
    return Holder(socket.gethostname(), os.getpid(), process_start(os.getpid()))


def may_be_alive(holder: Holder, renewed_at: str, now: datetime | None = None) -> str | None:
    """Why the holder may still be running (a sentence), or None when it certainly is not."""
    if holder.host == socket.gethostname():
        if not pid_exists(holder.pid):
            return None
        if holder.start and process_start(holder.pid) != holder.start:
            return None  # the PID now belongs to another process
        return f"its process {holder.pid} on {holder.host} is still running"
    now = now or datetime.now(timezone.utc)
    last = datetime.fromisoformat(renewed_at)
    if now - last < TTL:
        return (f"its process {holder.pid} on {holder.host} renewed its lease at {renewed_at[:19]} UTC; "
                f"it lapses {int(TTL.total_seconds())} s after the last renewal")
    return None


class Heartbeat:
    """Renews a lease every ``HEARTBEAT_SECONDS`` in a daemon thread until stopped."""

    def __init__(self, renew: Callable[[], None]):
        self._renew = renew
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dprelease-lease", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self._renew()
            except Exception:  # noqa: BLE001 - a missed renewal only shortens the lease (the state decides)
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
