"""The warm runner (a package of its own: why it is kept, and its threat model claim by claim,
``docs/warm_runner.md``), as the other commands see it: its record, how ``dprelease server start``
starts it, how it is stopped or replaced. The runner itself (the process: preload, accept,
fork, reap) is :mod:`dprelease.cli.warm.loop`; the client that hands it a run is
:mod:`dprelease.cli.warm.handoff`.

A warm runner is a process kept beside the day's Prefect server with Prefect and the library
imported once; each ``dprelease run`` bound for that server is run in a child forked from it, so
the run does not pay the ~1–2 s of imports. Only this user reaches it: its socket (a fresh name
per runner) lives in the owner-only data directory — or, when that path is too long for a Unix
socket, in ``$XDG_RUNTIME_DIR`` or an owner-only, non-symlink ``/tmp/dprelease-UID`` — is
created mode 0600, and each side checks the other's peer credentials.

Stopping or replacing a runner never cuts its runs short: it is sent SIGTERM (its PID alone,
not its process group), stops accepting, and exits once its runs have ended, reporting each
one's exit code to its client. ``stop`` waits for that up to ``STOP_WAIT`` seconds.

This module's top level imports the standard library only: the client reads the record here.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dprelease.host import files
from dprelease.host.processes import alive, data_dir, process_start, read_record, write_record

START_TIMEOUT = 60.0  # seconds for the runner to import Prefect and answer
STOP_WAIT = 60.0  # seconds ``stop`` waits for a runner to finish its runs and exit


@dataclass(frozen=True)
class Runner:
    """A warm runner, as ``dprelease server start`` recorded it."""

    pid: int
    start: str  # its process start token (dprelease.host.processes.process_start)
    api: str  # the Prefect API its flow runs go to (Prefect read it at import)
    socket: str
    log: str

    def running(self) -> bool:
        return alive(self.pid, self.start)


def record_file() -> Path:
    return data_dir() / "runner.json"


def recorded() -> Runner | None:
    """The warm runner ``dprelease server start`` recorded, if its process still runs."""
    return read_record(record_file(), Runner)


def socket_path() -> Path:
    """A fresh path for a new runner's socket: in the data directory when it fits a Unix
    socket's 108 bytes, else in an owner-only directory of the runtime or temporary directory
    (refused, OSError, when that is a symlink, not this user's, or open to others)."""
    home = data_dir()
    name = f"runner-{secrets.token_hex(4)}.sock"
    if len(os.fsencode(home / name)) < 100:
        return home / name
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path("/tmp") / f"dprelease-{os.getuid()}"
    files.make_dirs(base)  # 0700 when new; an existing one is checked:
    info = os.lstat(base)
    if not files.owner_only(info, directory=True):  # (lstat: a symlink is no directory)
        raise OSError(f"{base} is not a directory of this user's with mode 0700 (or is a symlink); the warm runner "
                      "will not use it")
    tag = hashlib.sha256(os.fsencode(home)).hexdigest()[:8]
    return base / f"runner-{tag}-{secrets.token_hex(4)}.sock"


def start(api: str, module: str = "dprelease.cli.warm.loop") -> tuple[Runner | None, str]:
    """Start a warm runner for the Prefect API ``api`` (or find one running for it that would
    take this process's runs): (the runner or None, a line saying what happened). A runner for
    another server, or for other code or settings, is replaced (its runs finish first, see the
    module's docstring). A runner that fails to start is not an error: runs then import Prefect
    themselves. The runner gets the secret of ``api`` when that is the server dprelease keeps
    (:func:`dprelease.serve.server.client_env`), in its environment: Prefect reads it at import.
    ``module``: the runner's module (tests start one with a fault hook installed)."""
    from dprelease.serve.server import client_env

    running = recorded()
    if running is not None and running.api == api and _answers(running):
        return running, f"warm runner: already running (PID {running.pid})"
    try:
        path = socket_path()
    except OSError as exc:
        return None, f"warm runner: not started ({exc}); runs import Prefect themselves"
    home = data_dir()
    log = home / "runner.log"
    with files.open_truncated(log) as sink:  # 0600, in a 0700 directory
        process = subprocess.Popen([sys.executable, "-m", module, str(path)], cwd=home,
                                   stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PREFECT_API_URL": api, **client_env(api)},
                                   start_new_session=True)
    runner = Runner(process.pid, process_start(process.pid), api, str(path), str(log))
    deadline = time.monotonic() + START_TIMEOUT
    while not _answers(runner):
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            tail = log.read_text("utf-8", "replace").strip().splitlines()[-3:]
            return None, ("warm runner: did not start (runs import Prefect themselves); its log ends: "
                          + " / ".join(tail))
        time.sleep(0.05)
    write_record(record_file(), runner)
    said = f"warm runner: started (PID {runner.pid}; Prefect imported once, each run forked from it)"
    if running is not None:
        _retire(running)
        said += f"; the one it replaces (PID {running.pid}) exits once its runs end"
    return runner, said


def connect(runner: Runner, timeout: float = 10.0) -> socket.socket:
    """A connection to ``runner``'s socket, after checking that the process listening there is
    the recorded runner itself (OSError otherwise): nothing is sent to anyone else."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(runner.socket)
        pid, uid, _ = peer(sock)
        if uid != os.getuid() or pid != runner.pid:
            raise OSError(f"the process at {runner.socket} (PID {pid}, uid {uid}) is not the warm runner")
    except BaseException:
        sock.close()
        raise
    return sock


def peer(sock: socket.socket) -> tuple[int, int, int]:
    """The (pid, uid, gid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    import struct

    return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))


def _answers(runner: Runner) -> bool:
    """Whether ``runner`` answers, and would take this process's runs (the same code, Python
    and Prefect settings)."""
    from dprelease.cli.warm.protocol import fingerprint, send_message

    try:
        with connect(runner, timeout=5) as probe:
            send_message(probe, {"ping": True, "fingerprint": fingerprint(os.environ)})
            return probe.makefile("r").readline().strip() == "ready"
    except OSError:
        return False


def _retire(runner: Runner) -> None:
    """SIGTERM to the runner's PID alone: it stops accepting and exits once its runs have ended."""
    try:
        os.kill(runner.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def stop() -> Runner | None:
    """Stop the recorded runner: it exits once its runs have ended, which this waits for up to
    ``STOP_WAIT`` seconds."""
    runner = recorded()
    if runner is not None:
        _retire(runner)
        deadline = time.monotonic() + STOP_WAIT
        while runner.running() and time.monotonic() < deadline:
            time.sleep(0.05)
    record_file().unlink(missing_ok=True)
    return runner


def status_line() -> str:
    runner = recorded()
    if runner is None:
        return "warm runner: not running (runs import Prefect themselves; `dprelease server start` starts one)"
    return (f"warm runner: PID {runner.pid}, for {runner.api}, socket {runner.socket}, log {runner.log} "
            "(runs are handed to it when they go to that server)")
