"""Test helper: a ledger made on purpose. Every test that runs against a ledger location other
than the autouse ``$DPRELEASE_LEDGER`` one (which tests/conftest.py creates) creates it here
first, the way an operator would with ``dprelease ledger init``: no other command creates one."""

from __future__ import annotations

import os
from pathlib import Path

import hashlib

from dprelease.ledger import Birth, Ledger, LedgerLocation, resolve_location
from dprelease.ledger.records import now

_MADE: dict[Path, str] = {}  # the digest of each SQLite ledger make_ledger created, as created


def birth(reason: str = "a test's ledger") -> Birth:
    return Birth(now(), "tests", reason, "dprelease ledger init")


def init_at(location: LedgerLocation) -> Ledger:
    """The ledger at ``location``, created now (as ``dprelease ledger init`` would) if none is there."""
    return Ledger.init(location, birth())


def make_ledger(where: str | os.PathLike[str]) -> Path | str:
    """Create the ledger at ``where`` (an absolute path or a database URL); return ``where``."""
    init_at(resolve_location(str(where))).close()
    if "://" in str(where):
        return str(where)
    _MADE[Path(where)] = _digest(Path(where))
    return Path(where)


def untouched(path: Path) -> bool:
    """Nothing was written to the ledger ``make_ledger`` created at ``path`` (byte for byte as it
    was made; no ledger there at all counts too): what "nothing spent, nothing recorded" means for
    a test's own ledger."""
    return not path.exists() or _digest(path) == _MADE[path]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def remove_ledger(path: Path) -> Path:
    """Take away the SQLite ledger at ``path`` and its key (e.g. the autouse one, for a test of a
    location that holds no ledger); return ``path``."""
    path.unlink()
    path.with_name(path.name + ".key").unlink()
    return path
