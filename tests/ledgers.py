"""Test helper: a ledger made on purpose. Every test that runs against a ledger location other
than the autouse ``$DPRELEASE_LEDGER`` one creates it here first, the way an operator would with
``dprelease ledger init`` (no command but that one creates a ledger)."""

from __future__ import annotations

import os
from pathlib import Path

from dprelease.ledger import Ledger, resolve_location


def make_ledger(where: str | os.PathLike[str]) -> Path | str:
    """Create the ledger at ``where`` (an absolute path or a database URL); return ``where``."""
    ledger = Ledger.open(resolve_location(str(where)), create=True)
    assert ledger is not None
    ledger.close()
    return Path(where) if not str(where).count("://") else str(where)
