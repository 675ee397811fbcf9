"""The typer options several commands share: ``--ledger`` and ``--output-dir``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

LedgerOpt = Annotated[Optional[str], typer.Option(
    "--ledger", metavar="URL", help="Ledger database: an absolute path or SQLAlchemy URL. Default: the spec's "
    "ledger: (a pin: --ledger may name another location only where that ledger records the dataset), else "
    "$DPRELEASE_LEDGER, else ~/.local/share/dprelease/ledger.sqlite. Only `dprelease ledger init` creates a ledger "
    "(and `run --ledger` for a spec that pins none).")]
OutputDirOpt = Annotated[Optional[Path], typer.Option(
    "--output-dir", metavar="DIR", help="Where releases land. Default: the spec's output_dir: (relative to the spec "
    "file), then ./outputs of the working directory.")]
