"""Errors and the exit codes every command shares.

User mistakes raise a :class:`UserError` subclass and reach the terminal as a short
message with no traceback. A broken internal invariant raises :class:`InternalError`,
which the CLI reports as a bug (exit 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1
    INVALID = 2  # invalid usage, spec or data
    OVER_BUDGET = 3
    ALREADY_RELEASED = 4  # already released, or reserved by another run
    NOT_APPROVED = 5


class DPReleaseError(Exception):
    exit_code: ExitCode = ExitCode.INTERNAL


class InternalError(DPReleaseError):
    """A broken invariant inside dprelease: a bug, never the user's fault."""

    exit_code = ExitCode.INTERNAL


class UserError(DPReleaseError):
    """A mistake the user can fix; shown without a traceback."""

    exit_code = ExitCode.INVALID


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a spec, located at a YAML node."""

    file: Path
    line: int  # 1-based; 0 when no position is known
    column: int  # 1-based
    field: str  # e.g. "tables[1].epsilon"
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else f"{self.file}"
        field = self.field or "(document)"
        return f"{where}: {field}: {self.message}"


class SpecError(UserError):
    """A spec that does not validate; carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=lambda p: (str(p.file), p.line, p.column, p.field))
        super().__init__("\n".join(str(p) for p in self.problems))


class OverBudgetError(UserError):
    exit_code = ExitCode.OVER_BUDGET


class AlreadyReleasedError(UserError):
    exit_code = ExitCode.ALREADY_RELEASED


class NotApprovedError(UserError):
    exit_code = ExitCode.NOT_APPROVED


class LedgerError(UserError):
    """The ledger refuses an operation (unknown dataset, conflicting cap, bad URL)."""


class DataError(UserError):
    """The data does not match the spec (exit 2). May quote a value: terminal only."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (or its type), for one-line user errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
