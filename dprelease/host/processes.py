"""Processes and the user's data directory, with the standard library alone: cheap to import,
so the ``dprelease`` command can decide where a run goes before it loads anything heavy.

A PID alone does not name a process (PIDs are reused), so a recorded process is named by its
PID and :func:`process_start`'s token.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

from dprelease.host import files


def data_dir() -> Path:
    """dprelease's per-user data directory: ``$XDG_DATA_HOME/dprelease`` (an absolute
    XDG_DATA_HOME only), else ``~/.local/share/dprelease``. The default ledger, the day
    server's record and secret, the warm runner's socket and served schedules' bindings live here."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "dprelease"


def process_start(pid: int) -> str:
    """A token that differs between two processes that had the same PID (Linux /proc), or ""."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3
    return f"{boot}:{fields[19]}"  # field 22: starttime


def lineage() -> list[int]:
    """This process's PID and its ancestors', nearest first, as far as /proc shows them (Linux);
    where /proc cannot be read, this process and its parent."""
    chain = [os.getpid()]
    while len(chain) < 4096:
        try:
            stat = Path(f"/proc/{chain[-1]}/stat").read_text()
        except OSError:
            break
        parent = int(stat[stat.rindex(")") + 2:].split()[1])  # field 4: the parent's PID
        if parent <= 0 or parent in chain:
            break
        chain.append(parent)
    return chain if len(chain) > 1 else [os.getpid(), os.getppid()]


def pid_exists(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2:].startswith("Z"):  # a zombie: exited, not yet reaped
            return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def alive(pid: int, start: str) -> bool:
    """Whether the process recorded as (``pid``, ``start``) still runs (not a later one that reused the PID)."""
    return pid_exists(pid) and (not start or process_start(pid) == start)


class _Running(Protocol):
    def running(self) -> bool: ...


R = TypeVar("R", bound=_Running)


def read_record(path: Path, make: Callable[..., R]) -> R | None:
    """The process record at ``path`` (JSON of ``make``'s fields), if its process still runs."""
    try:
        record = make(**json.loads(path.read_text("utf-8")))
    except (OSError, ValueError, TypeError):
        return None
    return record if record.running() else None


def write_record(path: Path, record: Any) -> None:
    """Write a process record (a dataclass) to ``path``, whole and owner-only (:mod:`dprelease.host.files`)."""
    files.write_text(path, json.dumps(asdict(record), indent=2))
