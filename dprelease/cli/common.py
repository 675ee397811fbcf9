"""What every command shares: the consoles, status lines, the mapping of outcomes to exit
codes, the ``--ledger`` option, and opening a ledger (saying which one, closing it after)."""

from __future__ import annotations

import functools
import sys
import traceback
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Optional

import typer
from rich.console import Console

from dprelease.errors import DPReleaseError, ExitCode, SpecError, UserError
from dprelease.ledger import Ledger, LedgerLocation, resolve_location
from dprelease.lifecycle.notices import copy_note, init_command, ledger_line, location_notes, opened_notes, refuse_ledger_choice

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)

LedgerOpt = Annotated[Optional[str], typer.Option(
    "--ledger", metavar="URL", help="Ledger database: an absolute path or SQLAlchemy URL. Default: the spec's "
    "ledger: (a pin: --ledger may name another location only where that ledger records the dataset), else "
    "$DPRELEASE_LEDGER, else ~/.local/share/dprelease/ledger.sqlite. Only `dprelease ledger init` creates a ledger "
    "(and `run --ledger` for a spec that pins none).")]
OutputDirOpt = Annotated[Optional[Path], typer.Option(
    "--output-dir", metavar="DIR", help="Where releases land. Default: the spec's output_dir: (relative to the spec "
    "file), then ./outputs of the working directory.")]


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
        except (typer.Exit, typer.BadParameter):
            raise
        except BrokenPipeError:  # e.g. `dprelease plan --json | head`: the reader left
            sys.stderr.close()
            raise typer.Exit(ExitCode.OK) from None
        except SpecError as exc:
            print(exc, file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except DPReleaseError as exc:
            if exc.exit_code == ExitCode.INTERNAL:
                _bug(exc)
            else:
                print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:  # a bug: say so, with the traceback that helps fix it
            _bug(exc)
            raise typer.Exit(ExitCode.INTERNAL) from None

    return wrapper


def _bug(exc: BaseException) -> None:
    traceback.print_exc()
    print(f"internal error (a bug in dprelease; please report it): {type(exc).__name__}: {exc}",
          file=sys.stderr)


# ---------------------------------------------------------------- ledgers


def spec_location(spec: Any, url: str | None) -> LedgerLocation:
    """Where the spec's dataset keeps its budget (:func:`dprelease.ledger.resolve_location`: the
    spec's pin, else --ledger, $DPRELEASE_LEDGER, the per-user default)."""
    return resolve_location(url, spec.ledger, spec.source.resolve().parent)


@contextmanager
def ledger_if_any(location: LedgerLocation) -> Iterator[Ledger | None]:
    """The ledger at ``location``, or None where there is none (nothing is created); which one it
    is said; closed on leaving."""
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
    found = found or Ledger.open(location)
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
