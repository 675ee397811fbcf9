"""Hand a ``dprelease run`` to the warm runner (:mod:`dprelease.cli.warm`) that ``dprelease
server start`` keeps beside the day's Prefect server: a process that has Prefect and the
library imported already and forks a child per run, so the run does not pay the ~1–2 s of
importing them. This module is the client, on the path of every ``dprelease`` command: it
imports the standard library and :mod:`dprelease.serve.server` only (no typer, no Prefect, no
SQLAlchemy), and decides in milliseconds.

A run is handed over only when all of these hold, and otherwise runs here exactly as before:

* the command is ``run`` with ``--orchestrator auto`` (the default) or ``prefect``, and this
  process is not itself a warm runner's child;
* the run would go to the day server anyway (:func:`dprelease.serve.server.choose` picks a Prefect
  API, and it is the one the runner was started for);
* the process listening on the recorded socket is the recorded runner, of this user (the
  kernel's peer credentials, checked before anything is sent), and it accepts the request:
  same user, and the same :func:`fingerprint` — Python, dprelease code, libraries, and the
  settings Python and Prefect read at start-up (Prefect read its own when the runner imported
  it). A refusal says why, in one line, and the run runs here.

The child runs the command as this process would: it takes this process's stdin, stdout and
stderr (passed over the Unix socket), its working directory, umask, environment and arguments.
This process waits, forwards SIGINT, SIGTERM and SIGHUP to the child (one that arrives before
the child exists is kept and forwarded once it does), and exits with the child's exit code; if
this process dies, the runner sends the child SIGTERM, which settles the run like any
interrupted run.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from dprelease.cli.warm.protocol import CHILD_FLAG, fingerprint, send_message

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


def hand_off(args: list[str]) -> int | None:
    """Run ``dprelease ARGS`` in the warm runner and return its exit code, or None when the
    command is to run in this process (see the module's docstring)."""
    mode = orchestrator_of(args)
    if mode not in HANDED_MODES or os.environ.get(CHILD_FLAG):
        return None
    from dprelease.serve import server
    from dprelease.cli.warm import connect, recorded

    runner = recorded()
    if runner is None:
        return None
    choice = server.choose(mode)
    if choice.kind != "prefect" or choice.api != runner.api:
        return None
    relay = _Relay()  # from here on a signal to this process is kept for the run, not lost
    try:
        sock = connect(runner)
        send_message(sock, {"argv": ["dprelease", *args], "cwd": os.getcwd(), "env": dict(os.environ),
                            "umask": _umask(), "fingerprint": fingerprint(os.environ)}, (0, 1, 2))
        reader = sock.makefile("r", encoding="utf-8")
        first = reader.readline().strip()
    except OSError as exc:
        relay.restore()
        print(f"not using the warm runner (PID {runner.pid}): {exc}; running here", file=sys.stderr)
        return None
    kind, _, rest = first.partition(" ")
    if kind != "pid" or not rest.isdigit():
        sock.close()
        relay.restore()
        reason = rest if kind == "refused" else f"it answered {first!r}"
        print(f"not using the warm runner (PID {runner.pid}): {reason}; running here", file=sys.stderr)
        return None
    relay.forward_to(int(rest))
    sock.settimeout(None)
    return _wait(reader, int(rest))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class _Relay:
    """SIGINT, SIGTERM and SIGHUP to this process, kept until the run's PID is known, then
    forwarded to it (and from then on as they come); restored, and a kept one acted on as this
    process would have, when the run stays here."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.child: int | None = None
        self.kept: list[int] = []
        self.previous = {s: signal.signal(s, self._on) for s in self.SIGNALS}

    def _on(self, signum: int, frame: object) -> None:
        if self.child is None:
            self.kept.append(signum)
            return
        try:
            os.kill(self.child, signum)
        except ProcessLookupError:
            pass

    def forward_to(self, child: int) -> None:
        self.child = child
        for signum in self.kept:
            self._on(signum, None)
        self.kept.clear()

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        for signum in self.kept:
            signal.raise_signal(signum)


def _wait(reader, child: int) -> int:  # type: ignore[no-untyped-def]
    """Until the runner reports the child's exit code (signals go to the child meanwhile)."""
    while True:
        line = reader.readline()
        if not line:
            break
        kind, _, code = line.strip().partition(" ")
        if kind == "exit" and code.lstrip("-").isdigit():
            return int(code)
    from dprelease.host.processes import pid_exists

    while pid_exists(child):  # the runner ended first: wait for the run itself to end
        time.sleep(0.2)
    print(f"the warm runner ended during the run (its child PID {child}), so its exit code is unknown; "
          "`dprelease ledger` shows whether the release was committed", file=sys.stderr)
    return 1
