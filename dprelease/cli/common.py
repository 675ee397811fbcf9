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
from dprelease.notices import ledger_line

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)

LedgerOpt = Annotated[Optional[str], typer.Option(
    "--ledger", metavar="URL", help="Ledger database: a path or SQLAlchemy URL. Default: $DPRELEASE_LEDGER, "
    "then the spec's ledger:, then ~/.local/share/dprelease/ledger.sqlite.")]
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
    """Where the spec's dataset keeps its budget: --ledger, $DPRELEASE_LEDGER, the spec's
    ``ledger:`` (relative to the spec file), or the per-user default."""
    return resolve_location(url, spec.ledger, spec.source.resolve().parent)


@contextmanager
def ledger_if_any(location: LedgerLocation) -> Iterator[Ledger | None]:
    """The ledger at ``location``, or None where there is none yet (nothing is created); which
    one it is said; closed on leaving."""
    ledger = Ledger.open(location, create=False)
    with ledger if ledger is not None else nullcontext():
        say(ledger_line(location, ledger is not None, ledger_id=ledger.id if ledger is not None else None))
        yield ledger


@contextmanager
def ledger_at(location: LedgerLocation, *, create: bool = False, missing: str | None = None,
              quiet: bool = False) -> Iterator[Ledger]:
    """The ledger at ``location`` (created there if ``create``); where there is none, a user
    error saying ``missing``. Which one it is said (unless ``quiet``); closed on leaving."""
    ledger = Ledger.open(location, create=create)
    if ledger is None:
        raise UserError(missing or f"there is no ledger at {location.shown}")
    with ledger:
        if not quiet:
            say(ledger_line(location, True, created=ledger.created, ledger_id=ledger.id))
        yield ledger


@contextmanager
def spec_ledger(spec: Any, location: LedgerLocation, what: str,
                check: Callable[[], None] = lambda: None) -> Iterator[Ledger]:
    """The spec's ledger, as `run` finds it; created only where it is pinned (never at the
    per-user default, where another user would start the dataset afresh). ``check`` runs once
    the ledger is found, before one is created."""
    found = Ledger.open(location, create=False)
    if found is None and not location.pinned:
        raise UserError(f"{spec.source}: {what} in the dataset's ledger, and none exists at the per-user default "
                        f"{location.shown}; pin it in the spec (`ledger: PATH`) or pass --ledger")
    if found is None:
        check()
        with ledger_at(location, create=True) as created:
            yield created
        return
    with found:
        check()
        say(ledger_line(location, True, ledger_id=found.id))
        yield found
