"""How the run lifecycle tells its caller what happens: the CLI prints, a scheduled flow logs.

The lifecycle composes every message itself; where each one goes is the caller's choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

Say = Callable[[str], None]


@dataclass(frozen=True)
class Voice:
    """Three kinds of words, each a ``print``-like function of one string."""

    say: Say  # a status line (the CLI: standard error, so that standard output stays clean)
    show: Say  # the outcome: what was published (the CLI: standard output)
    error: Say  # a failed run's error, or its traceback, before its settlement is said (the CLI: standard error)
