"""The typer declarations (arguments, options, help texts) of the commands whose bodies are
typer-free — ``validate``, ``plan`` (:mod:`dprelease.cli.plan_cmds`), ``ledger`` with no
subcommand (:mod:`dprelease.cli.ledger_view`) and ``report`` (:mod:`dprelease.cli.report_view`) —
so that :mod:`dprelease.cli.fast` can run those bodies without importing typer (and the
pydantic it builds each parameter's converter with). Each function here only hands its values
to the body; :mod:`dprelease.cli.commands` registers them. ``tests/test_fast_cli.py`` checks that
the fast path's table of options matches these declarations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dprelease.cli import ledger_view, plan_cmds, report_view
from dprelease.cli.options import LedgerOpt


def validate(specs: Annotated[list[Path], typer.Argument(metavar="SPEC...", help="Release spec files.")]) -> None:
    """Check release specs against the schema and the semantic rules, and the columns they read
    against the data files' headers where the files are there (no row is read)."""
    plan_cmds.validate(specs)


def plan(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file.")],
    ledger: LedgerOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    target_moe: Annotated[Optional[str], typer.Option(
        "--target-moe", metavar="N|TABLE=N,...", help="Print the ε each table needs for a margin of error of N; "
        "with --allocate, the tables that must meet a margin: TABLE=N,...")] = None,
    confidence: Annotated[Optional[str], typer.Option(
        metavar="C", help="Confidence level of the margins, e.g. 0.90 (default: the spec's, else 0.95).")] = None,
    approve: Annotated[bool, typer.Option(
        "--approve", help="Record in the ledger that this plan (its fingerprint) is approved; only a plan that "
        "fits.")] = False,
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who approves (default: the login name).")] = None,
    tradeoff: Annotated[bool, typer.Option(
        "--tradeoff", help="Also show, per table, the margin of error over a range of ε (ρ) around the spec's.")] = False,
    allocate: Annotated[bool, typer.Option(
        "--allocate", help="Propose a split of the release budget that minimises the weighted sum of expected "
        "squared errors, as a spec fragment (nothing is written or spent).")] = False,
    weights: Annotated[Optional[str], typer.Option(
        metavar="TABLE=W,...", help="With --allocate: each table's weight (default 1).")] = None,
) -> None:
    """Show what a release would spend and how accurate it would be. Reads the data's header only
    (the columns the spec names), never a row.

    Exit 0 if it fits, 3 if it exceeds the release or the lifetime budget, 4 if the release
    already exists in the ledger, 2 if the spec is invalid. With --approve, a plan that fits
    is recorded as approved: `run --require-approval` and scheduled runs need that. --tradeoff
    adds the margins over a range of budgets; --allocate prints a proposed split instead of the
    plan (exit 3 if the targets alone exceed the budget).
    """
    plan_cmds.plan(spec_path, ledger, as_json, target_moe, confidence, approve, by, tradeoff, allocate, weights)


def ledger_show(
    ctx: typer.Context,
    ledger: LedgerOpt = None,
    dataset: Annotated[Optional[str], typer.Option(metavar="NAME", help="Only this dataset.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    spec_path: Annotated[Optional[Path], typer.Option(
        "--spec", metavar="SPEC", help="The ledger this spec pins (its ledger:), and only its dataset.")] = None,
) -> None:
    """List lifetime spend per dataset and its releases."""
    if ctx.invoked_subcommand is not None:  # a subcommand reads the group's --ledger from ctx.obj
        ctx.obj = ledger
        return
    ledger_view.ledger_show(ledger, dataset, as_json, spec_path)


def report(
    release_dir: Annotated[Path, typer.Argument(metavar="RELEASE_DIR", help="A published release directory.")],
    fmt: Annotated[str, typer.Option("--format", metavar="html|md|json", help="Default: html.")] = "html",
    output: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="Where to write it (html default: RELEASE_DIR/budget_report.html; md and json: "
        "standard output).")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """A reviewable budget report: ε allocation, the dataset's burn-down, margins of error, warnings.

    Reads the release's manifest and, when reachable, the ledger (burn-down across releases,
    unfinished reservations). The HTML is one self-contained file with its plots inlined.
    """
    report_view.report(release_dir, fmt, output, ledger)
