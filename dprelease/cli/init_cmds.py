"""``dprelease init``: a starter spec from a data file and its dictionary. Spends nothing,
creates no ledger, never imports Prefect."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dprelease.cli.common import handled, say, show
from dprelease.errors import UserError


@handled
def init(
    data: Annotated[Path, typer.Argument(metavar="DATA", help="The data file (.csv, .tsv or .parquet).")],
    dictionary: Annotated[Optional[Path], typer.Option(
        "--dictionary", metavar="FILE", help="The data dictionary (JSON: per column a description and values: "
        "codes → labels, or min and max).")] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", metavar="SPEC", help="Where to write the spec (default: <data stem>.yaml here).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing SPEC.")] = False,
) -> None:
    """Write a starter release spec: every dictionary column with its domain and labels or range,
    the dataset, a pinned ledger, a release budget and one example table. Codes the data uses that
    the dictionary lacks are reported, never added. Spends nothing; creates no ledger."""
    from dprelease.spec.starter import starter

    target = output if output is not None else Path(f"{data.stem}.yaml")
    if target.exists() and not force:
        raise UserError(f"{target}: already exists; init never overwrites a spec: pass --force to replace it, "
                        "or --output another file")
    if target.exists() and target.is_dir():
        raise UserError(f"{target}: is a directory; pass --output FILE.yaml")
    result = starter(data, target, dictionary)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(result.text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{target}: cannot write the spec ({exc.strerror}); pass --output a writable path") from None
    declared = [c for c in result.columns if c.skipped is None]
    show(f"wrote {target.resolve()}")
    show(f"  {len(declared)} column(s) declared from the dictionary" if dictionary is not None
         else "  no dictionary: every column is a TODO")
    for c in result.columns:
        if c.skipped is not None:
            show(f"  not declared: {c.name}: {c.skipped}")
    for note in result.notes:
        show(f"  note: {note}")
    for f in result.findings:
        show(f"  reported: {f.column}: {f.rows} row(s) with {f.what}, e.g. {', '.join(repr(v) for v in f.examples)}")
    if not result.complete:
        say("note: the spec has TODOs (columns without a domain): it will not validate until each `COLUMN: {}` "
            "is given domain: [...] or range: [lo, hi]")
    show("next:")
    show(f"  dprelease validate {target}")
    show(f"  dprelease plan {target}")
