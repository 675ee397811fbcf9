"""Test helper: a ledger made on purpose. Every test that runs against a ledger location other
than the autouse ``$DPRELEASE_LEDGER`` one (which tests/conftest.py creates) creates it here
first, the way an operator would with ``dprelease ledger init``: no other command creates one."""

from __future__ import annotations

import os
from pathlib import Path

from dprelease.ledger import Birth, Ledger, LedgerLocation, resolve_location
from dprelease.ledger.records import now


def birth(reason: str = "a test's ledger") -> Birth:
    return Birth(now(), "tests", reason, "dprelease ledger init")


def init_at(location: LedgerLocation) -> Ledger:
    """The ledger at ``location``, created now (as ``dprelease ledger init`` would) if none is there."""
    return Ledger.init(location, birth())


def make_ledger(where: str | os.PathLike[str]) -> Path | str:
    """Create the ledger at ``where`` (an absolute path or a database URL); return ``where``."""
    init_at(resolve_location(str(where))).close()
    return Path(where) if "://" not in str(where) else str(where)


def remove_ledger(path: Path) -> Path:
    """Take away the SQLite ledger at ``path`` and its key (e.g. the autouse one, for a test of a
    location that holds no ledger); return ``path``."""
    path.unlink()
    path.with_name(path.name + ".key").unlink()
    return path
