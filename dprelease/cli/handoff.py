"""Hand a ``dprelease run`` to the warm runner (:mod:`dprelease.cli.warm`) that ``dprelease
server start`` keeps beside the day's Prefect server: a process that has Prefect and the
library imported already and forks a child per run, so the run does not pay the ~1–2 s of
importing them. This module is the client, on the path of every ``dprelease`` command: it
imports the standard library and :mod:`dprelease.server` only (no typer, no Prefect, no
SQLAlchemy), and decides in milliseconds.

A run is handed over only when all of these hold, and otherwise runs here exactly as before:

* the command is ``run`` with ``--orchestrator auto`` (the default) or ``prefect``, and this
  process is not itself a warm runner's child;
* the run would go to the day server anyway (:func:`dprelease.server.choose` picks a Prefect
  API, and it is the one the runner was started for);
* the runner answers on its socket and accepts the request: same user (the kernel's peer
  credentials), same Python, same dprelease code (every module's path, size and mtime) and the
  same Prefect settings (every ``PREFECT_*`` variable but the API URL, ``HOME``, the profiles
  file), since Prefect read its settings when the runner imported it. A refusal says why, in
  one line, and the run runs here.

The child runs the command as this process would: it takes this process's stdin, stdout and
stderr (passed over the Unix socket), its working directory, umask, environment and arguments.
This process waits, forwards SIGINT, SIGTERM and SIGHUP to the child, and exits with the
child's exit code; if this process dies, the runner sends the child SIGTERM, which settles the
run like any interrupted run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Mapping

CHILD_FLAG = "DPRELEASE_WARM_RUNNER_CHILD"  # set in a runner's child: it never hands over again
HANDED_MODES = ("auto", "prefect")


def orchestrator_of(args: list[str]) -> str | None:
    """The ``--orchestrator`` value of a ``run`` command line (``auto`` when absent), or None
    when ``args`` is not a run (or asks for help)."""
    if not args or args[0] != "run" or "--help" in args:
        return None
    mode = "auto"
    for i, arg in enumerate(args):
        if arg == "--orchestrator" and i + 1 < len(args):
            mode = args[i + 1]
        elif arg.startswith("--orchestrator="):
            mode = arg.partition("=")[2]
    return mode


def fingerprint(environ: Mapping[str, str]) -> str:
    """What a runner's child must share with the process it runs for: the interpreter, the
    dprelease code (each module's path, size and mtime), the Prefect settings Prefect read at
    import (``PREFECT_*`` but the API URL, which the runner is matched on by itself; ``HOME``;
    the profiles file)."""
    import dprelease

    package = Path(dprelease.__file__).resolve().parent
    digest = hashlib.sha256()
    for part in (sys.executable, sys.version, dprelease.__version__, str(package)):
        digest.update(part.encode() + b"\0")
    for module in sorted(package.rglob("*.py")):
        stat = module.stat()
        digest.update(f"{module.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    settings = sorted((k, v) for k, v in environ.items() if k.startswith("PREFECT_") and k != "PREFECT_API_URL")
    digest.update(json.dumps([settings, environ.get("HOME", "")]).encode())
    home = Path(environ.get("PREFECT_HOME") or Path(environ.get("HOME") or "~").expanduser() / ".prefect")
    profiles = Path(environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        digest.update(profiles.read_bytes())
    except OSError:
        digest.update(b"no profiles")
    return digest.hexdigest()


def send_message(sock: socket.socket, message: dict[str, object], fds: tuple[int, ...] = ()) -> None:
    """One length-prefixed JSON message (with ``fds`` passed alongside, SCM_RIGHTS)."""
    payload = json.dumps(message).encode()
    data = struct.pack("!I", len(payload)) + payload
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def hand_off(args: list[str]) -> int | None:
    """Run ``dprelease ARGS`` in the warm runner and return its exit code, or None when the
    command is to run in this process (see the module's docstring)."""
    mode = orchestrator_of(args)
    if mode not in HANDED_MODES or os.environ.get(CHILD_FLAG):
        return None
    from dprelease import server
    from dprelease.cli.warm import recorded

    runner = recorded()
    if runner is None:
        return None
    choice = server.choose(mode)
    if choice.kind != "prefect" or choice.api != runner.api:
        return None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(runner.socket)
        send_message(sock, {"argv": ["dprelease", *args], "cwd": os.getcwd(), "env": dict(os.environ),
                            "umask": _umask(), "fingerprint": fingerprint(os.environ)}, (0, 1, 2))
        reader = sock.makefile("r", encoding="utf-8")
        first = reader.readline().strip()
    except OSError as exc:
        print(f"not using the warm runner (PID {runner.pid}): it does not answer ({exc}); running here",
              file=sys.stderr)
        return None
    kind, _, rest = first.partition(" ")
    if kind != "pid" or not rest.isdigit():
        reason = rest if kind == "refused" else f"it answered {first!r}"
        print(f"not using the warm runner (PID {runner.pid}): {reason}; running here", file=sys.stderr)
        return None
    return _wait(sock, reader, int(rest))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _wait(sock: socket.socket, reader, child: int) -> int:  # type: ignore[no-untyped-def]
    """Until the runner reports the child's exit code; signals to this process go to the child."""
    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    sock.settimeout(None)
    while True:
        line = reader.readline()
        if not line:
            break
        kind, _, code = line.strip().partition(" ")
        if kind == "exit" and code.lstrip("-").isdigit():
            return int(code)
    from dprelease.processes import pid_exists

    while pid_exists(child):  # the runner ended first: wait for the run itself to end
        time.sleep(0.2)
    print(f"the warm runner ended during the run (its child PID {child}), so its exit code is unknown; "
          "`dprelease ledger` shows whether the release was committed", file=sys.stderr)
    return 1
