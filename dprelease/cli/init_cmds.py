"""``dprelease init``: a starter spec from a data file and its dictionary. Spends nothing,
creates no ledger, never imports Prefect.

What it finds in the data goes to the terminal only; the spec holds no data value and no count
(:mod:`dprelease.spec.starter`), and is written owner-only (:mod:`dprelease.host.files`). Its ledger
and output directory are pinned in the project's ledgers/ and outputs/ (a git work tree's), else
beside the spec's folder; the terminal says where they resolve,
how to create the ledger deliberately, and whether git would see them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dprelease.host import files
from dprelease.cli.common import handled, say, show
from dprelease.cli.gitcheck import warn_if_not_ignored, work_tree
from dprelease.errors import UserError
from dprelease.ledger import keys


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
    the dataset, a pinned ledger and output directory (the project's ledgers/ and outputs/ in a git
    work tree, else ../ledgers/, ../outputs beside the spec's folder), a release budget and one
    example table. Codes the data uses that the dictionary
    lacks are reported on the terminal, never added and never written to the spec. Spends
    nothing; creates no ledger; writes the spec owner-only (0600)."""
    from dprelease.spec.starter import starter

    target = output if output is not None else Path(f"{data.stem}.yaml")
    if target.exists() and not force:
        raise UserError(f"{target}: already exists; init never overwrites a spec: pass --force to replace it, "
                        "or --output another file")
    if target.exists() and target.is_dir():
        raise UserError(f"{target}: is a directory; pass --output FILE.yaml")
    result = starter(data, target, dictionary, project=work_tree(target))
    try:
        files.write_text(target, result.text)
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
    for f in result.findings:  # the terminal only: never into the spec
        show(f"  reported: {f.column}: {f.rows} row(s) with {f.what}, e.g. {', '.join(repr(v) for v in f.examples)}; "
             "a run refuses them unless you declare them or set on_out_of_domain: drop")
    if not result.complete:
        say("note: the spec has TODOs (columns without a domain): it will not validate until each `COLUMN: {}` "
            "is given domain: [...] or range: [lo, hi]")
    ledger, outputs = _where(target, result.ledger, result.output_dir)
    show(f"ledger: {ledger} (ledger: {result.ledger}; "
         + ("exists: this spec spends from it)" if ledger.exists() else "not created: `dprelease ledger init` below)"))
    show(f"outputs: {outputs} (output_dir: {result.output_dir})")
    warn_if_not_ignored([ledger, keys.beside(ledger), outputs / result.release])
    show("next:")
    show(f"  dprelease validate {target}")
    show(f"  dprelease plan {target}")
    if not ledger.exists():
        show(f'  dprelease ledger init --spec {target} --reason "TEXT: why this dataset\'s lifetime budget starts"')


def _where(spec: Path, ledger: str, output_dir: str) -> tuple[Path, Path]:
    """The pins as a run resolves them: against the spec file's real directory."""
    base = spec.resolve().parent
    return (base / ledger).resolve(), (base / output_dir).resolve()
