"""A SQLite ledger read with the standard library's ``sqlite3``, without SQLAlchemy, for the
commands that only read a ledger (``plan``, whose ``--approve`` writes through the SQLAlchemy
ledger; ``ledger`` with no subcommand; ``report``): SQLAlchemy's import costs more than those
commands' own work.

The model: :func:`open_for_reading` gives a :class:`LedgerReader` only where the location is a
SQLite file that is a ledger of this dprelease's schema, whole (``dprelease_meta`` at
:data:`~dprelease.ledger.meta.SCHEMA_VERSION`, with every part of it, and an id); anything else —
no file, a file that is not SQLite, an older schema to migrate, a damaged ledger, a database
server, any ``sqlite3`` error on the way — goes to :meth:`dprelease.ledger.Ledger.open`, which
creates nothing, migrates, refuses and says why exactly as every other command. The reader opens
the file read-only (``mode=ro``: it cannot write, so it can neither migrate nor record) and reads
each answer in one transaction, through the same queries as the SQLAlchemy ledger
(:mod:`dprelease.ledger.state`), so both read the same state.

Guarantees: what it returns equals what :class:`~dprelease.ledger.Ledger` returns for the same
file (``tests/test_ledger_reader.py``). It decides nothing: a run reserves through the
SQLAlchemy ledger, which checks the budget again under its write lock.
Cost: opening is a header read and three small queries; a dataset's state is
:func:`dprelease.ledger.state.dataset_state`'s.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator
from urllib.parse import quote

from dprelease.ledger import state
from dprelease.ledger.location import LedgerLocation
from dprelease.ledger.meta import SCHEMA_VERSION, SQLITE_HEADER, read_birth
from dprelease.ledger.records import AnswerSet, Birth, DatasetState, Evaluation, Policy

if TYPE_CHECKING:
    from dprelease.ledger.store import Ledger


class LedgerReader:
    """An open SQLite ledger, read-only: the reading part of :class:`~dprelease.ledger.Ledger`
    that ``plan``, ``ledger`` and ``report`` use (``id``, ``birth``, ``location``, ``state``,
    ``evaluations_of``, ``datasets``, ``undeclared``, ``answer_sets``), with the same answers."""

    def __init__(self, location: LedgerLocation, conn: sqlite3.Connection, meta: dict[str, str]):
        self.location = location
        self._conn = conn
        self._meta = meta
        self.id = meta["ledger_id"]

    @classmethod
    def open(cls, location: LedgerLocation) -> LedgerReader | None:
        """The reader of ``location``; None where :meth:`Ledger.open` must open it (see the
        module docstring)."""
        path = location.sqlite_path
        if path is None or not _sqlite_file(path):
            return None
        try:
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=60, isolation_level=None)
        except sqlite3.Error:
            return None
        try:
            meta = _whole_ledger(conn)
        except sqlite3.Error:
            meta = None
        if meta is None:
            conn.close()
            return None
        return cls(location, conn, meta)

    @property
    def birth(self) -> Birth | None:
        return read_birth(self._meta)

    def state(self, dataset: str) -> DatasetState | None:
        with self._reading() as conn:
            return state.dataset_state(conn, dataset)

    def evaluations_of(self, dataset: str, data_fingerprint: str | None = None) -> list[Evaluation]:
        with self._reading() as conn:
            return state.evaluations(conn, dataset.partition("/")[0], data_fingerprint)

    def datasets(self) -> list[str]:
        with self._reading() as conn:
            return state.datasets(conn)

    def undeclared(self) -> dict[str, tuple[tuple[Policy, ...], tuple[Evaluation, ...]]]:
        with self._reading() as conn:
            return state.undeclared(conn)

    def answer_sets(self, dataset: str | None = None, answers: str | None = None) -> tuple[AnswerSet, ...]:
        with self._reading() as conn:
            return state.answer_sets(conn, dataset, answers)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (a consistent snapshot, as each of the ledger's reads)."""
        self._conn.execute("BEGIN")
        try:
            yield self._conn
        finally:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> LedgerReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_for_reading(location: LedgerLocation) -> LedgerReader | Ledger | None:
    """The ledger at ``location`` for a command that only reads it: a :class:`LedgerReader` where
    it is a whole SQLite ledger of this schema, else :meth:`Ledger.open` (None: no ledger there)."""
    reader = LedgerReader.open(location)
    if reader is not None:
        return reader
    from dprelease.ledger.store import Ledger

    return Ledger.open(location)


def _sqlite_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _whole_ledger(conn: sqlite3.Connection) -> dict[str, str] | None:
    """``dprelease_meta`` where the database is a ledger of this schema with every part of it
    (:func:`dprelease.ledger.schema._complete_6`) and an id; else None."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "dprelease_meta" not in tables or "respondent_sets" not in tables:
        return None
    meta: dict[str, Any] = dict(conn.execute("SELECT key, value FROM dprelease_meta").fetchall())
    if meta.get("schema_version") != str(SCHEMA_VERSION) or not meta.get("ledger_id"):
        return None
    if "unique_ids" not in {r[1] for r in conn.execute("PRAGMA table_info(respondent_sets)")}:
        return None
    return meta
