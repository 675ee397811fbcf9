"""Fault injection points for the crash tests: inert unless a test installs a hook.

Production code marks each point a run may be stopped at with :func:`checkpoint`; it does
nothing unless :func:`install` was called, which only test code does (``tests/faulty_cli.py``,
the CLI the crash tests start in a child process). Nothing here reads the environment.
Stages, in order: ``reserved``, ``load``, ``histogram`` (a batch counted), ``measure`` (before
a table's noise), ``drawing`` (the ledger records that noise is being drawn; none drawn yet),
``noise`` (noise drawn for the first table), ``staging`` (the first table file staged),
``publish`` (outputs staged, ledger not yet committed), ``commit`` (ledger committed, outputs
not yet moved into place).
"""

from __future__ import annotations

from typing import Callable

_hook: Callable[[str], None] | None = None


def install(hook: Callable[[str], None] | None) -> None:
    """Test only: call ``hook(stage)`` at every checkpoint of this process (None removes it)."""
    global _hook
    _hook = hook


def checkpoint(stage: str) -> None:
    """A point a crash test may stop the run at; nothing happens unless a test installed a hook."""
    if _hook is not None:
        _hook(stage)
