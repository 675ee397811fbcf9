"""``dprelease server start|stop|status``: one local Prefect server kept for the working day,
so runs are flow runs without paying a server's start-up each time (:mod:`dprelease.serve.server`)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from dprelease.cli.common import handled, out, say


@handled
def server_start(
    port: Annotated[Optional[int], typer.Option(metavar="PORT", help="Port on 127.0.0.1 (default: 4200 if free, "
                                                "else any free port).")] = None,
) -> None:
    """Start a local Prefect server (on 127.0.0.1, detached) that `dprelease run` uses until it is stopped."""
    from dprelease.serve import server
    from dprelease.cli import warm

    if server.recorded() is None:
        say("starting a Prefect server on 127.0.0.1 (the first start on a new PREFECT_HOME migrates its database) ...")
    running, replaced, already = server.start(port)
    if replaced is not None:
        say(f"warning: the Prefect server at {replaced.url} (PID {replaced.pid}) answered WITHOUT authentication "
            "(started before dprelease required it: anyone who reached it could start runs); it was stopped, and "
            "one that requires the secret replaces it (restart any `dprelease schedule` that served on the old one)")
        warm.stop()  # its runner was the old server's client, without the secret
    out.print(f"{'already running' if already else 'replaced' if replaced else 'started'}: {running.url} "
              f"(PID {running.pid}, log {running.log})", markup=False)
    _, said = warm.start(running.url)
    out.print(said, markup=False)
    out.print("dprelease run now runs releases as flow runs there; `dprelease server stop` ends it", markup=False)


@handled
def server_stop() -> None:
    """Stop the server `dprelease server start` started."""
    from dprelease.serve import server
    from dprelease.cli import warm

    warm.stop()
    stopped = server.stop()
    out.print(f"stopped {stopped.url} (PID {stopped.pid})" if stopped else "no server was running", markup=False)


@handled
def server_status() -> None:
    """Whether the server runs, and what `dprelease run` will use (Prefect there, or inline)."""
    from dprelease.serve import server
    from dprelease.cli import warm

    for line in server.status_lines():
        out.print(line, markup=False)
    out.print(warm.status_line(), markup=False)
