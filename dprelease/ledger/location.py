"""Where the ledger lives, and which sources may choose it. Never a function of the working
directory alone, and never where a lifetime budget would start without anyone deciding it.

The precedence, written once (every source is tested in tests/test_ledger_birth.py):

1. A spec that pins its ledger (``ledger:``, a path relative to the spec file's real path, or a
   database URL) uses the pin. ``$DPRELEASE_LEDGER`` never overrides a pin (it is noted as
   ignored). ``--ledger`` naming another location is allowed only to a ledger that already
   records the spec's dataset (a ledger that moved; the caller checks, see :attr:`pin`).
2. Otherwise (no spec, or a spec that pins none): ``--ledger``, else ``$DPRELEASE_LEDGER``, else
   the per-user default ``$XDG_DATA_HOME/dprelease/ledger.sqlite`` (by default
   ``~/.local/share/dprelease/ledger.sqlite``; a relative ``XDG_DATA_HOME`` is ignored, as the XDG
   spec says).

Choosing is not creating. A ledger is born only by ``dprelease ledger init`` (who, when and why
recorded), or by ``dprelease run --ledger LOCATION`` typed for a spec that pins none
(:attr:`LedgerLocation.may_create`); never from a spec's pin, ``$DPRELEASE_LEDGER`` or the
default, where a copied spec, a second clone or a stray variable would start the same people
from a fresh budget. ``--ledger`` and ``$DPRELEASE_LEDGER`` must be absolute paths or URLs:
resolving them against the working directory could silently mean another ledger.

A SQLite location (a path) is a :class:`SqliteURL`, built without importing SQLAlchemy (its
import costs more than ``dprelease plan``'s own work, and a SQLite ledger is read without it:
:mod:`dprelease.ledger.reader`); a URL typed as a URL is parsed by SQLAlchemy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union
from urllib.parse import quote, unquote

from dprelease.errors import LedgerError
from dprelease.host.processes import data_dir

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

ENV = "DPRELEASE_LEDGER"
SOURCES = {"--ledger": "the --ledger option", f"${ENV}": f"the ${ENV} environment variable",
           "spec ledger:": "the spec's ledger: key", "manifest": "the release's manifest",
           "default": "the per-user default (not pinned by the spec)", "ledger init": "dprelease ledger init"}


@dataclass(frozen=True, slots=True)
class SqliteURL:
    """A SQLite ledger's URL: its absolute file path, read as SQLAlchemy's ``URL`` of it is
    (``sqlite:///`` and the path, quoted as SQLAlchemy renders it); :meth:`sqlalchemy` is that URL."""

    database: str

    drivername = "sqlite"

    def get_backend_name(self) -> str:
        return "sqlite"

    def render_as_string(self, hide_password: bool = True) -> str:
        return "sqlite:///" + quote(self.database, safe=" +/")

    def __str__(self) -> str:
        return self.render_as_string()

    def set(self, *, database: str) -> SqliteURL:
        return SqliteURL(database)

    def sqlalchemy(self) -> Any:
        from sqlalchemy.engine import make_url

        return make_url("sqlite://").set(database=self.database)


LedgerURL = Union[SqliteURL, "URL"]


@dataclass(frozen=True, slots=True)
class LedgerLocation:
    url: LedgerURL
    source: str  # a key of SOURCES
    pin: LedgerURL | None = None  # the spec's pinned location, where --ledger points away from it
    env_ignored: bool = False  # $DPRELEASE_LEDGER is set, and the spec's pin took precedence

    @property
    def may_create(self) -> bool:
        """Typed on the command line (``--ledger``) and not away from a spec's pin: the one
        source from which ``dprelease run`` may create a ledger (for a spec that pins none)."""
        return self.source == "--ledger" and self.pin is None

    @property
    def spec_pinned(self) -> bool:
        return self.source == "spec ledger:"

    @property
    def how_chosen(self) -> str:
        return SOURCES.get(self.source, self.source)

    @property
    def shown(self) -> str:
        return self.url.render_as_string(hide_password=True)

    @property
    def pin_shown(self) -> str | None:
        return None if self.pin is None else self.pin.render_as_string(hide_password=True)

    @property
    def sqlite_path(self) -> Path | None:
        if self.url.get_backend_name() != "sqlite":
            return None
        return Path(self.url.database) if self.url.database else None


def default_path() -> Path:
    return data_dir() / "ledger.sqlite"


def resolve_location(cli: str | None = None, spec_value: str | None = None,
                     spec_dir: Path | None = None) -> LedgerLocation:
    """The ledger's location by the precedence of the module docstring: ``cli`` is what
    ``--ledger`` says, ``spec_value`` the spec's ``ledger:`` (relative to ``spec_dir``)."""
    env = os.environ.get(ENV)
    if spec_value:
        if spec_dir is None:
            raise LedgerError("a spec's ledger: path needs the spec's directory")  # pragma: no cover
        pinned = _to_url(spec_value, spec_dir.resolve(), "ledger:")
        typed = _to_url(cli, None, "--ledger") if cli else None
        if typed is not None and typed != pinned:
            return LedgerLocation(typed, "--ledger", pin=pinned)
        return LedgerLocation(pinned, "spec ledger:", env_ignored=bool(env) and typed is None)
    if cli:
        return LedgerLocation(_to_url(cli, None, "--ledger"), "--ledger")
    if env:
        return LedgerLocation(_to_url(env, None, f"${ENV}"), f"${ENV}")
    return LedgerLocation(_to_url(str(default_path()), None, "default"), "default")


def typed_location(value: str) -> LedgerLocation:
    """A location named on ``dprelease ledger init``'s command line (an absolute path or a URL)."""
    return LedgerLocation(_to_url(value, None, "LOCATION"), "ledger init")


def _to_url(value: str, base: Path | None, what: str) -> LedgerURL:
    """An absolute URL; relative paths only against ``base`` (the spec's directory)."""
    if "\0" in value:
        raise LedgerError(f"{what}: the ledger location contains a NUL byte")
    if "://" not in value:
        path = Path(value).expanduser()
        if not path.is_absolute():
            if base is None:
                raise LedgerError(f"{what}: {value!r} is a relative path, which would depend on the working "
                                  f"directory; give an absolute path, e.g. {Path.cwd() / path}")
            path = base / path
        return SqliteURL(str(path.resolve()))
    if value.startswith("sqlite:////") and "?" not in value and "#" not in value:  # an absolute path, as
        return _to_url(unquote(value[len("sqlite:///"):]), base, what)  # SQLAlchemy parses it (a manifest's)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(value)
    except ArgumentError:
        raise LedgerError(f"{value!r} is not a database URL; write e.g. sqlite:////abs/path/ledger.sqlite "
                          "or postgresql://user@host/dbname") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise LedgerError("an in-memory SQLite ledger would forget every spend; give a file path")
        if base is None and not Path(url.database).expanduser().is_absolute():
            raise LedgerError(f"{what}: {value!r} names the relative path {url.database!r} (three slashes), which "
                              "would depend on the working directory; an absolute path takes four: "
                              f"sqlite:////{url.database}")
        return _to_url(url.database, base, what)
    if backend == "postgresql":
        if url.drivername == "postgresql":  # prefer psycopg 3, which the postgres extra installs
            url = url.set(drivername="postgresql+psycopg")
        if url.drivername not in ("postgresql+psycopg", "postgresql+psycopg2"):
            raise LedgerError(f"{what}: use a synchronous PostgreSQL driver (postgresql:// or "
                              f"postgresql+psycopg://), not {url.drivername}")
        return url
    raise LedgerError(f"ledger backend {backend!r} is not supported; use SQLite or PostgreSQL")
