"""Where the ledger lives. Never a function of the working directory alone.

Precedence: ``--ledger URL`` > ``$DPRELEASE_LEDGER`` > the spec's ``ledger:`` key (a path
relative to the spec file) > ``$XDG_DATA_HOME/dprelease/ledger.sqlite`` (by default
``~/.local/share/dprelease/ledger.sqlite``). Plain paths become absolute SQLite URLs, so
the same ledger is found whichever directory a command is run from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from dprelease.errors import LedgerError

ENV = "DPRELEASE_LEDGER"


@dataclass(frozen=True, slots=True)
class LedgerLocation:
    url: URL
    source: str  # "--ledger", "$DPRELEASE_LEDGER", "spec ledger:", or "default"

    @property
    def shown(self) -> str:
        return self.url.render_as_string(hide_password=True)

    @property
    def sqlite_path(self) -> Path | None:
        if self.url.get_backend_name() != "sqlite":
            return None
        return Path(self.url.database) if self.url.database else None


def default_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "dprelease" / "ledger.sqlite"


def resolve_location(cli: str | None = None, spec_value: str | None = None,
                     spec_dir: Path | None = None) -> LedgerLocation:
    if cli:
        return LedgerLocation(_to_url(cli, Path.cwd()), "--ledger")
    if os.environ.get(ENV):
        return LedgerLocation(_to_url(os.environ[ENV], Path.cwd()), f"${ENV}")
    if spec_value:
        return LedgerLocation(_to_url(spec_value, spec_dir or Path.cwd()), "spec ledger:")
    return LedgerLocation(_to_url(str(default_path()), Path.cwd()), "default")


def _to_url(value: str, base: Path) -> URL:
    if "\0" in value:
        raise LedgerError("the ledger location contains a NUL byte")
    if "://" not in value:
        path = Path(value).expanduser()
        return make_url("sqlite://").set(database=str((base / path).resolve()))
    try:
        url = make_url(value)
    except ArgumentError:
        raise LedgerError(f"{value!r} is not a database URL; write e.g. sqlite:////abs/path/ledger.sqlite "
                          "or postgresql://user@host/dbname") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise LedgerError("an in-memory SQLite ledger would forget every spend; give a file path")
        return url.set(database=str((base / Path(url.database).expanduser()).resolve()))
    if backend == "postgresql":
        if url.drivername == "postgresql":  # prefer psycopg 3, which the postgres extra installs
            url = url.set(drivername="postgresql+psycopg")
        return url
    raise LedgerError(f"ledger backend {backend!r} is not supported; use SQLite or PostgreSQL")
