"""What every command shares: the consoles, status lines, the mapping of outcomes to exit
codes, and opening a ledger (saying which one, closing it after).

Typer-free, and the ledger (SQLAlchemy) imported only where a ledger is opened: the bodies of
``validate``, ``plan``, ``ledger`` and ``report`` run from :mod:`dprelease.cli.fast` without
typer (:mod:`dprelease.cli`). The ``--ledger`` and ``--output-dir`` options are declared in
:mod:`dprelease.cli.options`.
"""

from __future__ import annotations

import functools
import sys
import traceback
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, Iterator

from rich.console import Console

from dprelease.errors import DPReleaseError, ExitCode, SpecError, UserError

if TYPE_CHECKING:
    from dprelease.ledger import Ledger, LedgerLocation

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def say(message: str) -> None:
    """A status line on stderr (stdout stays clean for --json)."""
    err.print(message, markup=False)


def show(message: str) -> None:
    """A result line on stdout."""
    out.print(message, markup=False)


def handled(command: Callable[..., None]) -> Callable[..., None]:
    """Map every outcome of a command to a documented exit code, never a raw traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except BrokenPipeError:  # e.g. `dprelease plan --json | head`: the reader left
            sys.stderr.close()
            raise SystemExit(ExitCode.OK) from None
        except SpecError as exc:
            print(exc, file=sys.stderr)
            raise SystemExit(exc.exit_code) from None
        except DPReleaseError as exc:
            if exc.exit_code == ExitCode.INTERNAL:
                _bug(exc)
            else:
                print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(exc.exit_code) from None
        except Exception as exc:
            if _typer_exit(exc):  # typer.Exit or typer.BadParameter of a command typer runs: typer's to show
                raise
            _bug(exc)  # a bug: say so, with the traceback that helps fix it
            raise SystemExit(ExitCode.INTERNAL) from None

    return wrapper


def _typer_exit(exc: Exception) -> bool:
    """Whether ``exc`` is typer's ``Exit`` or ``BadParameter`` (only where typer is imported: a
    command run without typer raises neither)."""
    typer = sys.modules.get("typer")
    return typer is not None and isinstance(exc, (typer.Exit, typer.BadParameter))


def usage_error(message: str, param_hint: str) -> Exception:
    """typer's ``BadParameter`` (a usage error: exit 2, the command's usage line above it). Only
    the commands typer runs raise it: :mod:`dprelease.cli.fast` never takes the options it is
    about."""
    import typer

    return typer.BadParameter(message, param_hint=param_hint)


def _bug(exc: BaseException) -> None:
    traceback.print_exc()
    print(f"internal error (a bug in dprelease; please report it): {type(exc).__name__}: {exc}",
          file=sys.stderr)


# ---------------------------------------------------------------- ledgers


def spec_location(spec: Any, url: str | None) -> LedgerLocation:
    """Where the spec's dataset keeps its budget (:func:`dprelease.ledger.resolve_location`: the
    spec's pin, else --ledger, $DPRELEASE_LEDGER, the per-user default)."""
    from dprelease.ledger import resolve_location

    return resolve_location(url, spec.ledger, spec.source.resolve().parent)


@contextmanager
def ledger_if_any(location: LedgerLocation, reading: bool = False) -> Iterator[Ledger | None]:
    """The ledger at ``location``, or None where there is none (nothing is created); which one it
    is said; closed on leaving. ``reading``: for reads only (a SQLite ledger read without
    SQLAlchemy where it can be: :func:`dprelease.ledger.reader.open_for_reading`)."""
    from dprelease.ledger.reader import open_for_reading
    from dprelease.lifecycle.notices import copy_note, ledger_line

    if reading:
        ledger = open_for_reading(location)
    else:
        from dprelease.ledger import Ledger

        ledger = Ledger.open(location)
    with ledger if ledger is not None else nullcontext():
        say(ledger_line(location, ledger is not None, ledger_id=ledger.id if ledger is not None else None))
        if ledger is not None and (copied := copy_note(ledger)) is not None:
            say(copied)
        yield ledger


@contextmanager
def ledger_at(location: LedgerLocation, *, missing: str | None = None, quiet: bool = False) -> Iterator[Ledger]:
    """The ledger at ``location``; where there is none, a user error saying ``missing`` (nothing is
    created). Which one it is said (unless ``quiet``); closed on leaving."""
    from dprelease.ledger import Ledger
    from dprelease.lifecycle.notices import init_command, ledger_line

    ledger = Ledger.open(location)
    if ledger is None:
        raise UserError(missing or f"there is no ledger at {location.shown}; nothing but `{init_command(location)}` "
                        "creates one. Nothing was created or changed.")
    with ledger:
        if not quiet:
            say(ledger_line(location, True, ledger_id=ledger.id))
        yield ledger


@contextmanager
def spec_ledger(spec: Any, location: LedgerLocation, check: Callable[[], None] = lambda: None,
                quiet: bool = False, found: Ledger | None = None) -> Iterator[Ledger]:
    """The ledger of the spec's dataset, for a command that records something in it: it must
    exist (no command but `ledger init` creates one, and `run --ledger` for a spec that pins
    none), a --ledger away from the spec's pin must name a ledger that records the dataset, and a
    dataset's budget never starts in the per-user default
    (:func:`dprelease.lifecycle.notices.refuse_ledger_choice`). ``check`` runs once the ledger is found.
    ``found``: the ledger at ``location`` already opened by the caller (closed on leaving)."""
    from dprelease.lifecycle.notices import ledger_line, location_notes, opened_notes, refuse_ledger_choice

    if found is None:
        from dprelease.ledger import Ledger

        found = Ledger.open(location)
    for note in location_notes(spec, location):
        say(note)
    with found if found is not None else nullcontext():
        refuse_ledger_choice(spec, location, found)
        assert found is not None
        check()
        if not quiet:
            say(ledger_line(location, True, ledger_id=found.id))
        for note in opened_notes(spec, location, found):
            say(note)
        yield found
