"""Where the ledger lives. Never a function of the working directory alone.

Precedence: ``--ledger URL`` > ``$DPRELEASE_LEDGER`` > the spec's ``ledger:`` key (a path
relative to the spec file) > ``$XDG_DATA_HOME/dprelease/ledger.sqlite`` (by default
``~/.local/share/dprelease/ledger.sqlite``; a relative ``XDG_DATA_HOME`` is ignored, as the
XDG spec says). A relative ``ledger:`` resolves against the spec file's real path (a symbolic
link to a spec finds the spec's ledger, not one beside the link).

The per-user default is a fallback for reading, never a place where a lifetime budget starts
silently: a run that would have to create the ledger there is refused (see :attr:`pinned`),
since another user, account or container would start the same data from a fresh budget. ``--ledger`` and ``$DPRELEASE_LEDGER`` must be absolute paths or URLs:
resolving them against the working directory could silently mean a fresh budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from dprelease.errors import LedgerError
from dprelease.processes import data_dir

ENV = "DPRELEASE_LEDGER"


@dataclass(frozen=True, slots=True)
class LedgerLocation:
    url: URL
    source: str  # "--ledger", "$DPRELEASE_LEDGER", "spec ledger:", or "default"

    @property
    def pinned(self) -> bool:
        """Chosen by the spec, a flag or the environment: a place where a ledger may be created."""
        return self.source != "default"

    @property
    def how_chosen(self) -> str:
        return {"--ledger": "the --ledger option", f"${ENV}": f"the ${ENV} environment variable",
                "spec ledger:": "the spec's ledger: key", "manifest": "the release's manifest",
                "default": "the per-user default (not pinned by the spec)"}.get(self.source, self.source)

    @property
    def shown(self) -> str:
        return self.url.render_as_string(hide_password=True)

    @property
    def sqlite_path(self) -> Path | None:
        if self.url.get_backend_name() != "sqlite":
            return None
        return Path(self.url.database) if self.url.database else None


def default_path() -> Path:
    return data_dir() / "ledger.sqlite"


def resolve_location(cli: str | None = None, spec_value: str | None = None,
                     spec_dir: Path | None = None) -> LedgerLocation:
    if cli:
        return LedgerLocation(_to_url(cli, None, "--ledger"), "--ledger")
    if os.environ.get(ENV):
        return LedgerLocation(_to_url(os.environ[ENV], None, f"${ENV}"), f"${ENV}")
    if spec_value:
        if spec_dir is None:
            raise LedgerError("a spec's ledger: path needs the spec's directory")  # pragma: no cover
        return LedgerLocation(_to_url(spec_value, spec_dir.resolve(), "ledger:"), "spec ledger:")
    return LedgerLocation(_to_url(str(default_path()), None, "default"), "default")


def _to_url(value: str, base: Path | None, what: str) -> URL:
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
        return make_url("sqlite://").set(database=str(path.resolve()))
    try:
        url = make_url(value)
    except ArgumentError:
        raise LedgerError(f"{value!r} is not a database URL; write e.g. sqlite:////abs/path/ledger.sqlite "
                          "or postgresql://user@host/dbname") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise LedgerError("an in-memory SQLite ledger would forget every spend; give a file path")
        return _to_url(url.database, base, what)
    if backend == "postgresql":
        if url.drivername == "postgresql":  # prefer psycopg 3, which the postgres extra installs
            url = url.set(drivername="postgresql+psycopg")
        if url.drivername not in ("postgresql+psycopg", "postgresql+psycopg2"):
            raise LedgerError(f"{what}: use a synchronous PostgreSQL driver (postgresql:// or "
                              f"postgresql+psycopg://), not {url.drivername}")
        return url
    raise LedgerError(f"ledger backend {backend!r} is not supported; use SQLite or PostgreSQL")
