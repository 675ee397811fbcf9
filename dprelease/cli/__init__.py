"""The ``dprelease`` command line. :func:`main` first offers a ``run`` to the warm runner that
``dprelease server start`` keeps (:mod:`dprelease.cli.warm.handoff`: Prefect already imported there,
so the run does not pay for the import); then runs ``validate``, ``plan``, ``ledger`` and
``report`` in their plain forms without typer (:mod:`dprelease.cli.fast`); otherwise, and for
every other command, it builds the typer app (:mod:`dprelease.cli.commands`) here.

Exit codes, the same for every command: 0 ok; 1 internal error (a bug); 2 invalid usage,
spec or data; 3 over budget; 4 already released or reserved; 5 not approved.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dprelease.cli.commands import app as app


def main() -> None:
    from dprelease.cli.warm.handoff import hand_off

    code = hand_off(sys.argv[1:])
    if code is not None:
        raise SystemExit(code)
    from dprelease.cli.fast import run

    code = run(sys.argv[1:])
    if code is not None:
        raise SystemExit(code)
    from dprelease.cli.commands import app

    app()


def __getattr__(name: str) -> Any:  # PEP 562: the typer app is built on first use
    if name == "app":
        from dprelease.cli.commands import app

        return app
    raise AttributeError(f"module 'dprelease.cli' has no attribute {name!r}")
