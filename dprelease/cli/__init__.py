"""The ``dprelease`` command line.

Exit codes, the same for every command: 0 ok; 1 internal error (a bug); 2 invalid usage,
spec or data; 3 over budget; 4 already released or reserved; 5 not approved.

``validate``, ``plan`` and ``ledger`` never import Prefect (it costs over a second).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import sys
import traceback
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from rich.console import Console

from dprelease.accounting import Terms, NotANumber, decimal_text, fraction_text, parse_budget
from dprelease.errors import DPReleaseError, ExitCode, SpecError, UserError
from dprelease.ledger import Ledger, LedgerLocation, resolve_location

app = typer.Typer(name="dprelease", add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Declarative, census-style releases of differentially private tables.")
ledger_app = typer.Typer(invoke_without_command=True, no_args_is_help=False,
                         help="Show lifetime budgets and releases per dataset, or change a cap.")
app.add_typer(ledger_app, name="ledger")

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)

LedgerOpt = Annotated[Optional[str], typer.Option(
    "--ledger", metavar="URL", help="Ledger database: a path or SQLAlchemy URL. Default: $DPRELEASE_LEDGER, "
    "then the spec's ledger:, then ~/.local/share/dprelease/ledger.sqlite.")]


def say(message: str) -> None:
    """A status line on stderr (stdout stays clean for --json)."""
    err.print(message, markup=False)


def handled(command: Callable[..., None]) -> Callable[..., None]:
    """Map every outcome of a command to a documented exit code, never a raw traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except (typer.Exit, typer.BadParameter):
            raise
        except BrokenPipeError:  # e.g. `dprelease plan --json | head`: the reader left
            sys.stderr.close()
            raise typer.Exit(ExitCode.OK) from None
        except SpecError as exc:
            print(exc, file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except DPReleaseError as exc:
            if exc.exit_code == ExitCode.INTERNAL:
                _bug(exc)
            else:
                print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:  # a bug: say so, with the traceback that helps fix it
            _bug(exc)
            raise typer.Exit(ExitCode.INTERNAL) from None

    return wrapper


def _bug(exc: BaseException) -> None:
    traceback.print_exc()
    print(f"internal error (a bug in dprelease; please report it): {type(exc).__name__}: {exc}",
          file=sys.stderr)


# ---------------------------------------------------------------- validate


@app.command()
@handled
def validate(specs: Annotated[list[Path], typer.Argument(metavar="SPEC...", help="Release spec files.")]) -> None:
    """Check release specs against the schema and the semantic rules. Never opens the data."""
    from dprelease.spec import load_spec

    failed = 0
    for path in specs:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            failed += 1
            print(exc, file=sys.stderr)
            continue
        total = sum((t.epsilon for t in spec.tables), Fraction(0))
        local = f" and {len(spec.local_tables)} local" if spec.local_tables else ""
        out.print(f"ok {path}: release {spec.release}, {len(spec.tables)} tables{local}, total {spec.symbol} = "
                  f"{fraction_text(total)} of {fraction_text(spec.budget_epsilon)}", markup=False)
        if spec.invariants:
            say(f"note: {path}: invariants — the number of persons per place at {', '.join(spec.invariant_levels)} "
                "is published EXACTLY, not protected by differential privacy; every sensitivity is "
                f"{spec.sensitivity} (change one record)")
        if spec.unit == "person":
            say(f"note: {path}: at most {spec.max_rows} rows per {spec.unit_id} are kept; every sensitivity is "
                f"{spec.sensitivity}")
        for warning in large_delta_warnings(spec):
            say(f"warning: {path}: {warning}")
        if total > spec.budget_epsilon:
            say(f"warning: {path}: the tables' ε sum to {fraction_text(total)}, over the release budget of "
                f"{fraction_text(spec.budget_epsilon)} by {fraction_text(total - spec.budget_epsilon)}; "
                "`dprelease plan` and `run` will refuse it")
    if failed:
        say(f"{failed} of {len(specs)} spec(s) invalid")
        raise typer.Exit(ExitCode.INVALID)


LARGE_DELTA = Fraction(1, 10**5)


def large_delta_warnings(spec) -> list[str]:  # type: ignore[no-untyped-def]
    """δ above 1e-5: (ε, δ)-DP allows a total failure (e.g. publishing one person's record) with
    probability δ per person, so δ should be well below 1/(number of persons)."""
    out = []
    for what, delta in (("the release's δ", spec.delta if spec.definition == "approx" else None),
                        ("the stated δ", spec.delta if spec.definition == "zcdp" else None),
                        ("the lifetime δ", spec.dataset.lifetime_delta)):
        if delta is not None and delta > LARGE_DELTA:
            out.append(f"{what} = {decimal_text(delta)} is large: (ε, δ)-DP may fail outright with probability δ per person; "
                       "choose δ well below 1/(number of persons), e.g. 1e-6 or less")
    return out


# ---------------------------------------------------------------- plan


@app.command()
@handled
def plan(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file.")],
    ledger: LedgerOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    target_moe: Annotated[Optional[int], typer.Option(
        "--target-moe", min=0, metavar="N", help="Print the ε each table needs for a margin of error of N.")] = None,
    confidence: Annotated[Optional[str], typer.Option(
        metavar="C", help="Confidence level of the margins, e.g. 0.90 (default: the spec's, else 0.95).")] = None,
    approve: Annotated[bool, typer.Option(
        "--approve", help="Record in the ledger that this plan (its fingerprint) is approved; only a plan that "
        "fits.")] = False,
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who approves (default: the login name).")] = None,
) -> None:
    """Show what a release would spend and how accurate it would be. Never opens the data.

    Exit 0 if it fits, 3 if it exceeds the release or the lifetime budget, 4 if the release
    already exists in the ledger, 2 if the spec is invalid. With --approve, a plan that fits
    is recorded as approved: `run --require-approval` and scheduled runs need that.
    """
    if approve and (confidence is not None or target_moe is not None):
        raise typer.BadParameter("approve the plan as the spec states it, without --confidence or --target-moe",
                                 param_hint="--approve")
    if by is not None and not approve:
        raise typer.BadParameter("--by names who approves: use it with --approve", param_hint="--by")
    import dataclasses

    from dprelease.plan import plan_release
    from dprelease.spec import load_spec

    spec = load_spec(spec_path)
    if confidence is not None:
        spec = dataclasses.replace(spec, confidence=_confidence(confidence))
    location = resolve_location(ledger, spec.ledger, spec.source.resolve().parent)
    from dprelease.cli.render import pinned_elsewhere

    if (elsewhere := pinned_elsewhere(spec, location)) is not None:
        say(elsewhere)
    opened = Ledger.open(location, create=False)
    say(_ledger_line(location, opened))
    ledger_id = opened.id if opened else None
    try:
        state = opened.state(spec.dataset.name) if opened else None
        evaluations = tuple(opened.evaluations_of(spec.dataset.name)) if opened else ()
    finally:
        if opened:
            opened.close()
    if state is None and not location.pinned:  # a run would refuse it: so does its plan
        from dprelease.cli.running import refuse_unpinned_new_ledger

        refuse_unpinned_new_ledger(spec, location)
    the_plan = dataclasses.replace(plan_release(spec, state), evaluations=evaluations)
    for warning in large_delta_warnings(spec):
        say(f"warning: {spec_path}: {warning}")
    if target_moe is not None:
        _print_target(spec, the_plan, target_moe, as_json)
        return
    from dprelease.cli.render import plan_json, print_plan

    if as_json:
        print(json.dumps(plan_json(the_plan, location, opened is not None, ledger_id), indent=2))
    else:
        print_plan(out, the_plan, str(spec_path), spec.dataset.partition_note, _ledger_line(location, opened))
    if the_plan.existing_run is not None:
        raise typer.Exit(ExitCode.ALREADY_RELEASED)
    if not the_plan.fits:
        if not as_json:
            from dprelease.cli.running import over_budget_message

            say("plan exceeds the " + over_budget_message(spec, the_plan).split(", over the ", 1)[1].split(". The data")[0])
        raise typer.Exit(ExitCode.OVER_BUDGET)
    if approve:
        if opened is None and not location.pinned:
            raise UserError(f"no ledger exists at the per-user default {location.shown}, and an approval would start "
                            "one there; pin the dataset's ledger in the spec (`ledger: PATH`) or pass --ledger")
        approver = Ledger.open(location, create=True)
        assert approver is not None
        try:
            granted = approver.approve(dataset=spec.dataset.base_name or spec.dataset.name, release=spec.release,
                                       spec_fingerprint=the_plan.fingerprint, by=by,
                                       spec_path=str(spec.source.resolve()))
        finally:
            approver.close()
        say(f"approved plan {granted.spec_fingerprint} of release {spec.release} by {granted.approved_by} "
            f"({granted.approved_at[:19]} UTC)" + (f", with its EXACT publications (NOT differentially private): "
                                                  f"persons per place at {', '.join(spec.invariant_levels)}"
                                                  if spec.invariants else ""))


def _confidence(text: str) -> Fraction:
    try:
        value = parse_budget(text, text, what="confidence")
    except NotANumber as exc:
        raise typer.BadParameter(str(exc), param_hint="--confidence") from None
    if not 0 < value < 1:
        raise typer.BadParameter("must lie strictly between 0 and 1, e.g. 0.90", param_hint="--confidence")
    return value


def _print_target(spec, the_plan, target: int, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    from dprelease.cli.render import both, pct
    from dprelease.plan import epsilon_for_target

    needs = epsilon_for_target(the_plan, spec.confidence, target)
    total = sum((e for _, e in needs), Fraction(0))
    if as_json:
        print(json.dumps({"target_moe": target, "confidence": fraction_text(spec.confidence),
                          "total_epsilon": fraction_text(total),
                          "tables": [{"name": n, "epsilon": fraction_text(e),
                                      "current_epsilon": fraction_text(t.budget.amount), "current_moe": t.moe}
                                     for (n, e), t in zip(needs, the_plan.tables)]}, indent=2))
        return
    out.print(f"ε per table for a margin of error of ±{target} at {pct(spec.confidence)} "
              "(rounded up to 3 significant digits, so the target is met):", markup=False)
    for (name, need), t in zip(needs, the_plan.tables):
        out.print(f"  {name}: ε = {both(need)} (now {both(t.budget.amount)}, ±{t.moe})", markup=False)
    out.print(f"  total: ε = {both(total)} (release budget {both(spec.budget_epsilon)})", markup=False)


def _ledger_line(location: LedgerLocation, opened: Ledger | None, created: bool = False) -> str:
    from dprelease.cli.render import ledger_line

    return ledger_line(location, opened is not None, created, opened.id if opened is not None else None)


# ---------------------------------------------------------------- run


@app.command()
@handled
def run(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file.")],
    ledger: LedgerOpt = None,
    output_dir: Annotated[Path, typer.Option("--output-dir", metavar="DIR",
                                             help="Where releases land (default: ./outputs).")] = Path("outputs"),
    require_approval: Annotated[bool, typer.Option(
        "--require-approval", help="Refuse (exit 5, nothing spent) unless `plan --approve` approved this exact "
        "plan.")] = False,
    run_date: Annotated[Optional[str], typer.Option(
        "--run-date", metavar="DATE", help="The date (UTC) that {run_date:...} templates in the spec resolve with, "
        "e.g. 2027-03-01 (default: now).")] = None,
    dask_address: Annotated[Optional[str], typer.Option(
        "--dask-address", metavar="ADDRESS", help="Count the data on this Dask cluster (e.g. tcp://scheduler:8786) "
        "instead of streaming it here; noise is still drawn here. Overrides the spec's engine:.")] = None,
) -> None:
    """Publish a release: plan, reserve in the ledger, then measure and publish with Prefect.

    Exit 0 published; 2 invalid spec or data (nothing spent); 3 over budget (data not read);
    4 already released or reserved; 5 not approved (with --require-approval; nothing spent);
    1 any other failure (nothing published).
    """
    from dprelease.cli.running import run_release_command

    when = None
    if run_date is not None:
        from datetime import datetime, timezone

        try:
            when = datetime.fromisoformat(run_date)
        except ValueError:
            raise typer.BadParameter(f"{run_date!r} is not a date, e.g. 2027-03-01", param_hint="--run-date") from None
        when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    if dask_address is not None and not re.fullmatch(r"(tcp|tls)://[^\s/]+:[0-9]{1,5}", dask_address):
        raise typer.BadParameter(f"{dask_address!r} is not a Dask scheduler address, e.g. tcp://scheduler:8786",
                                 param_hint="--dask-address")
    run_release_command(spec_path, ledger, output_dir, say=say, out=out, require_approval=require_approval,
                        run_date=when, dask_address=dask_address)


# ---------------------------------------------------------------- postprocess


@app.command()
@handled
def postprocess(
    release_dir: Annotated[Path, typer.Argument(metavar="RELEASE_DIR", help="A published release directory.")],
    method: Annotated[Optional[str], typer.Option(
        metavar="METHOD", help="clamp | none | consistent (default: what the spec says per table).")] = None,
) -> None:
    """Re-run post-processing from the saved noisy measurements: no data read, no budget spent.

    Writes a new version of the tables beside the old ones, under RELEASE_DIR/postprocessed/.
    """
    if method not in (None, "clamp", "none", "consistent"):
        raise typer.BadParameter("use clamp, none or consistent", param_hint="--method")
    from dprelease.cli.postprocessing import postprocess_release_dir

    final = postprocess_release_dir(release_dir, method)
    out.print(f"new tables in {final} (no data read, no budget spent)", markup=False)


# ---------------------------------------------------------------- schedule


@app.command()
@handled
def schedule(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file.")],
    cron: Annotated[str, typer.Option(metavar="CRON", help="When to run, e.g. \"0 3 1 * *\" (03:00 UTC on the 1st).")],
    name: Annotated[Optional[str], typer.Option(metavar="NAME", help="Deployment name (default: the spec's "
                                                "file name).")] = None,
    ledger: LedgerOpt = None,
    output_dir: Annotated[Path, typer.Option("--output-dir", metavar="DIR",
                                             help="Where releases land (default: ./outputs).")] = Path("outputs"),
    no_approval: Annotated[bool, typer.Option(
        "--no-approval", help="Run plans that were not approved with `plan --approve` (default: refuse them).")] = False,
) -> None:
    """Register a cron-scheduled deployment of SPEC on the Prefect server at PREFECT_API_URL and
    serve it (runs until interrupted). Each run names its release from the spec's template, e.g.
    release: "acs-monthly-{run_date:%Y-%m}", with its scheduled start (UTC), and by default
    refuses a plan that is not approved (nothing spent)."""
    import os

    from dprelease.spec import load_spec

    spec = load_spec(spec_path)  # a broken spec fails now, not at 03:00
    if not os.environ.get("PREFECT_API_URL"):
        raise UserError("schedules need a Prefect server: start one with `prefect server start` and set "
                        "PREFECT_API_URL (e.g. http://127.0.0.1:4200/api), then run this again")
    if spec.release_template is None:
        say(f"warning: {spec_path}: release {spec.release!r} has no {{run_date:...}} template, so only the first "
            "scheduled run can publish; later runs are refused as already released")
    location = resolve_location(ledger, spec.ledger, spec.source.resolve().parent)  # where each run will look
    from dprelease.orchestrate import scheduled_release
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except ValueError:
        raise typer.BadParameter(f"{cron!r} is not a cron expression, e.g. \"0 3 1 * *\"", param_hint="--cron") from None

    deployment = name or spec_path.stem
    say(f"serving deployment dprelease-scheduled/{deployment} ({cron}) against {os.environ['PREFECT_API_URL']}; "
        f"ledger {location.shown}; approval {'not required' if no_approval else 'required'}. Ctrl-C stops it.")
    scheduled_release.serve(name=deployment, cron=cron, parameters={
        "spec_path": str(spec.source.resolve()), "ledger": ledger, "output_dir": str(output_dir.resolve()),
        "require_approval": not no_approval}, print_starting_message=False)


# ---------------------------------------------------------------- report


@app.command()
@handled
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
    from dprelease import reporting

    if fmt not in ("html", "md", "json"):
        raise typer.BadParameter("use html, md or json", param_hint="--format")
    manifest = reporting.read_manifest(release_dir)
    recorded = (manifest.get("ledger") or {}).get("location")  # where the release's budget lives
    location = resolve_location(ledger or (None if os.environ.get("DPRELEASE_LEDGER") else recorded))
    if not ledger and recorded and not os.environ.get("DPRELEASE_LEDGER"):
        location = dataclasses.replace(location, source="manifest")
    opened = Ledger.open(location, create=False)
    say(_ledger_line(location, opened))
    try:
        state = opened.state(manifest["dataset"]) if opened else None
    finally:
        if opened:
            opened.close()
    if fmt == "json":
        text = json.dumps(reporting.report_json(manifest, state), indent=2, ensure_ascii=False) + "\n"
    else:
        markdown = (release_dir / "budget_report.md").read_text("utf-8") if (release_dir / "budget_report.md").is_file() \
            else ""
        text = markdown if fmt == "md" else reporting.report_html(manifest, state, markdown)
    if output is None and fmt == "html":
        output = release_dir / "budget_report.html"
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc}") from None
    out.print(f"wrote {output}", markup=False)


# ---------------------------------------------------------------- randomize


@app.command()
@handled
def randomize(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="The release spec declaring the local table.")],
    table: Annotated[str, typer.Argument(metavar="TABLE", help="A table of kind: local in the spec.")],
    input_path: Annotated[Path, typer.Option("--input", metavar="FILE", help="CSV of true answers.")],
    output_path: Annotated[Path, typer.Option("--output", metavar="FILE", help="CSV to write (never overwritten).")],
    id_column: Annotated[Optional[str], typer.Option("--id", metavar="COLUMN", help="Respondent id column.")] = None,
    memo: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="Keep and reuse each respondent's first randomized answer (needs --id); "
        "respondent-side state, written owner-only.")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Randomize answers as the respondents would, with the local table's protocol.

    For simulations and field tools: the output is what a collection receives. Writes the
    input's columns with the table's column replaced by randomized answers, and registers the
    output in the dataset's ledger (its keyed fingerprint, collection, protocol, ε and the memo
    reused): a kind: local table reads only registered answers. Spends nothing centrally; the
    release that estimates from the answers records the collection's ε.
    """
    from dprelease.cli.randomizing import randomize_file
    from dprelease.spec import load_spec

    spec = load_spec(spec_path)
    opened = _spec_ledger(spec, ledger, "the answers are registered")
    try:
        written, reused, registered = randomize_file(spec, table, input_path, output_path, id_column, memo, opened)
    finally:
        opened.close()
    local = next(t for t in spec.local_tables if t.name == table)
    out.print(f"randomized {written:,} answers of {local.column} with {local.protocol} (ε = {local.epsilon_shown} "
              f"per respondent) → {output_path}" + (f"; {reused:,} reused from {memo}" if memo else ""),
              markup=False)
    for a in registered:
        say(f"registered {output_path} as the answers to {a.question} of collection {a.collection} of dataset "
            f"{a.dataset} ({a.protocol}" + (f", from the memo of {a.memo_of}" if a.memo_of else "") + ")")


def _spec_ledger(spec, url: str | None, what: str) -> Ledger:  # type: ignore[no-untyped-def]
    """The spec's ledger, as `run` finds it; created only where it is pinned (never at the
    per-user default, where another user would start the dataset afresh)."""
    location = resolve_location(url, spec.ledger, spec.source.resolve().parent)
    opened = Ledger.open(location, create=False)
    if opened is None and not location.pinned:
        raise UserError(f"{spec.source}: {what} in the dataset's ledger, and none exists at the per-user default "
                        f"{location.shown}; pin it in the spec (`ledger: PATH`) or pass --ledger")
    opened = opened or Ledger.open(location, create=True)
    assert opened is not None
    say(_ledger_line(location, opened, created=opened.created))
    return opened


# ---------------------------------------------------------------- evaluate


@app.command()
@handled
def evaluate(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file (test data only).")],
    trials: Annotated[int, typer.Option(min=1, max=10_000, metavar="N", help="Simulated releases.")] = 20,
    ledger: LedgerOpt = None,
    output: Annotated[Optional[Path], typer.Option(metavar="FILE", help="Also write the report here.")] = None,
) -> None:
    """NOT PRIVATE: simulate releases on test data and compare clamp with consistent post-processing.

    Reads the data and reports errors against it, so its output is confidential. Refuses data
    released under any dataset name in the ledger (and a dataset name with releases); records
    the evaluation in the ledger (who, when, which data; nothing spent) and publishes nothing.
    """
    from dprelease.evaluate import NOT_PRIVATE, evaluate as run_evaluation, report_md
    from dprelease.spec import load_spec

    spec = load_spec(spec_path)
    location = resolve_location(ledger, spec.ledger, spec.source.resolve().parent)
    if spec.ledger and location.url != resolve_location(None, spec.ledger, spec.source.resolve().parent).url:
        raise UserError(f"{spec.source}: the spec pins the dataset's ledger (ledger: {spec.ledger}); an evaluation is "
                        f"recorded there, not in {location.shown}. Drop --ledger (and $DPRELEASE_LEDGER).")
    opened = Ledger.open(location, create=False)
    if opened is None and not location.pinned:
        raise UserError(f"{spec.source}: an evaluation is recorded in the dataset's ledger, and none exists at the "
                        f"per-user default {location.shown}; pin it in the spec (`ledger: PATH`) or pass --ledger")
    if not spec.dataset.resolved_path.is_file():
        raise UserError(f"{spec.source}: dataset.path {spec.dataset.path!r} is not a file")
    opened = opened or Ledger.open(location, create=True)
    assert opened is not None
    say(_ledger_line(location, opened, created=opened.created))
    try:
        from dprelease.data import file_fingerprint

        fingerprint = opened.fingerprint(file_fingerprint(spec.dataset.resolved_path))
        state = opened.state(spec.dataset.name)
        released = sorted(set(opened.runs_with_data(fingerprint))
                          | {(spec.dataset.name, r.release) for r in (state.runs if state else ())})
        if released:
            dataset, release = released[0]
            raise UserError(f"dataset {dataset!r} (release {release!r}) was released from this data or under this "
                            f"name in the ledger at {location.shown}: data under protection is not evaluated in the "
                            "open. Evaluate test data.")
        opened.record_evaluation(dataset=spec.dataset.name, data_fingerprint=fingerprint, trials=trials,
                                 spec_path=str(spec.source.resolve()))
    finally:
        opened.close()
    say(f"{NOT_PRIVATE}: {trials} simulated releases of {spec.release}; recorded in the ledger as an evaluation in "
        "the open (a later release of this data will say so)")
    command = " ".join(["dprelease evaluate", str(spec_path), "--trials", str(trials)])
    text = report_md(spec, run_evaluation(spec, trials), trials, command)
    print(text)
    if output is not None:
        _write_private(output, text)
        say(f"report written to {output} (owner-only; not for publication)")


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new or replaced owner-only file (it describes the exact data)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


# ---------------------------------------------------------------- ledger


@ledger_app.callback()
@handled
def ledger_show(
    ctx: typer.Context,
    ledger: LedgerOpt = None,
    dataset: Annotated[Optional[str], typer.Option(metavar="NAME", help="Only this dataset.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    spec_path: Annotated[Optional[Path], typer.Option(
        "--spec", metavar="SPEC", help="The ledger this spec pins (its ledger:), and only its dataset.")] = None,
) -> None:
    """List lifetime spend per dataset and its releases."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = ledger
        return
    from dprelease.cli.render import ledger_json, print_ledger

    if spec_path is not None:
        from dprelease.spec import load_spec

        spec = load_spec(spec_path)
        location = resolve_location(ledger, spec.ledger, spec.source.resolve().parent)
        dataset = dataset or spec.dataset.name
    else:
        location = resolve_location(ledger)
    opened = Ledger.open(location, create=False)
    say(_ledger_line(location, opened))
    ledger_id = opened.id if opened is not None else None
    states, undeclared, answer_sets = [], {}, ()
    if opened is not None:
        try:
            names = [dataset] if dataset else opened.datasets()
            states = [s for s in (opened.state(n) for n in names) if s is not None]
            undeclared = {n: r for n, r in opened.undeclared().items() if not dataset or n == dataset}
            answer_sets = opened.answer_sets(dataset)
        finally:
            opened.close()
    if dataset and not states and not undeclared and not answer_sets:
        raise UserError(f"dataset {dataset!r} is not in the ledger at {location.shown}")
    if as_json:
        print(json.dumps(ledger_json(states, location, opened is not None, ledger_id, undeclared, answer_sets),
                         indent=2))
    else:
        print_ledger(out, states, undeclared, answer_sets)


@ledger_app.command("set-budget")
@handled
def ledger_set_budget(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: Annotated[str, typer.Option(metavar="E", help="The new lifetime cap, e.g. 6 or \"11/2\".")],
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why the cap changes; shown in every report.")],
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who decided (default: the login name).")] = None,
    create: Annotated[bool, typer.Option("--create", help="Add the dataset if the ledger does not have it.")] = False,
    delta: Annotated[Optional[str], typer.Option(
        metavar="D", help="The lifetime δ of an (ε, δ) dataset, e.g. 1e-6 (kept as it was if omitted).")] = None,
    terms: Annotated[Optional[str], typer.Option(
        metavar="pure|zcdp|approx", help="With --create: the new dataset's terms (default: pure; approx with "
        "--delta). --epsilon is then an ε, a ρ or an ε.")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Change a dataset's lifetime cap: an explicit, recorded decision. Spends are never reduced."""
    import re

    try:
        cap = parse_budget(epsilon, epsilon, what="--epsilon")
    except NotANumber as exc:
        raise typer.BadParameter(str(exc), param_hint="--epsilon") from None
    try:
        cap_delta = None if delta is None else parse_budget(delta, delta, what="--delta")
    except NotANumber as exc:
        raise typer.BadParameter(str(exc), param_hint="--delta") from None
    if cap_delta is not None and not 0 < cap_delta < 1:
        raise typer.BadParameter("δ lies strictly between 0 and 1, e.g. 1e-6", param_hint="--delta")
    if terms is not None and terms not in ("pure", "zcdp", "approx"):
        raise typer.BadParameter(f"{terms!r} is not one of pure, zcdp, approx", param_hint="--terms")
    new_terms = Terms("zcdp" if terms == "zcdp" else "approx" if terms == "approx" or cap_delta is not None else "pure")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}(/[^/\x00]{1,100})?", dataset):
        raise typer.BadParameter(f"{dataset!r} is not a dataset name (lower-case letters, digits, '.', '_', '-')",
                                 param_hint="DATASET")
    if not reason.strip():
        raise typer.BadParameter("say why the cap changes", param_hint="--reason")
    location = resolve_location(ledger or ctx.obj)
    opened = Ledger.open(location, create=create)
    if opened is None:
        raise UserError(f"there is no ledger at {location.shown} yet; to start one with dataset {dataset!r}, "
                        "add --create")
    say(_ledger_line(location, opened, created=opened.created))
    try:
        before = opened.state(dataset)
        if before is None and not create:
            known = ", ".join(opened.datasets()) or "none"
            raise UserError(f"dataset {dataset!r} is not in the ledger (known: {known}); to add it with this "
                            "cap, add --create")
        if before is not None and terms is not None and before.terms.kind != terms:
            raise UserError(f"dataset {dataset!r} already has {before.terms.text!r} terms; a ledger's terms are fixed "
                            "when the dataset is created")
        state = opened.set_budget(dataset, cap, reason=reason, by=by, terms=new_terms, delta=cap_delta)
    finally:
        opened.close()
    was = f"from {fraction_text(before.budget)} " if before else "(new dataset) "
    out.print(f"lifetime cap of {dataset} set {was}to {fraction_text(state.budget)}; spent "
              f"{fraction_text(state.spent)}, remaining {fraction_text(state.remaining)}", markup=False)
    if state.delta_budget is not None:
        out.print(f"lifetime δ of {dataset}: cap {fraction_text(state.delta_budget)}, spent "
                  f"{fraction_text(state.delta_spent)}, remaining {fraction_text(state.delta_remaining)}", markup=False)
    if state.remaining < 0:
        say("warning: the new cap is below what is already spent; no further release can run")


def _existing_ledger(url: str | None) -> Ledger:
    """The ledger at ``url`` (or the usual location), which must exist; its line said."""
    location = resolve_location(url)
    opened = Ledger.open(location, create=False)
    if opened is None:
        raise UserError(f"there is no ledger at {location.shown}")
    say(_ledger_line(location, opened))
    return opened


@ledger_app.command("register-answers")
@handled
def ledger_register_answers(
    ctx: typer.Context,
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="The release spec declaring the local table.")],
    table: Annotated[str, typer.Argument(metavar="TABLE", help="A table of kind: local in the spec.")],
    answers: Annotated[Path, typer.Option("--answers", metavar="FILE", help="The file of randomized answers.")],
    statement: Annotated[str, typer.Option(metavar="TEXT", help="Who randomized the answers, and how (e.g. the "
                                           "device app and its version); kept in the ledger and every manifest.")],
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who registers (default: the login name).")] = None,
    memo_of: Annotated[Optional[str], typer.Option(
        "--memo-of", metavar="COLLECTION", help="The answers repeat each respondent's first randomized answer from "
        "this collection (a memoised collection: no new ε).")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Register answers randomized elsewhere (on the respondents' devices) for a local table:
    a recorded statement of who randomized them and how. A kind: local table reads only
    registered answers; `dprelease randomize` registers its own output."""
    from dprelease.cli.randomizing import protocol_key
    from dprelease.data import file_fingerprint
    from dprelease.ledger import REGISTERED, AnswerSet
    from dprelease.spec import load_spec

    if not statement.strip():
        raise typer.BadParameter("say who randomized the answers, and how", param_hint="--statement")
    spec = load_spec(spec_path)
    local = next((t for t in spec.local_tables if t.name == table), None)
    if local is None:
        known = ", ".join(t.name for t in spec.local_tables) or "none"
        raise UserError(f"{spec.source}: no local table {table!r} (local tables: {known})")
    if memo_of is not None and memo_of != local.memo_of:
        raise UserError(f"{spec.source}: table {table} {'repeats collection ' + repr(local.memo_of) if local.memo_of else 'is not memoised'}"
                        f", not {memo_of!r}: --memo-of names the collection whose memo the answers were produced from")
    if not (answers.is_file() or answers.is_dir()):  # a directory of answer files, as dataset.path may be
        raise UserError(f"--answers {answers} is not a file or directory")
    opened = _spec_ledger(spec, ledger or ctx.obj, "answers are registered")
    try:
        keyed = opened.fingerprint(file_fingerprint(answers))
        done = opened.register_answers((AnswerSet(spec.dataset.name, local.collection, local.column,
                                                  protocol_key(spec, local), local.epsilon_bound, keyed, REGISTERED,
                                                  memo_of=memo_of, statement=statement.strip()),), by=by)
    finally:
        opened.close()
    a = done[0]
    out.print(f"registered {answers} as the answers to {a.question} of collection {a.collection} of dataset "
              f"{a.dataset} ({a.protocol}" + (f", from the memo of {a.memo_of}" if a.memo_of else "")
              + f"), by {a.registered_by}: {a.statement}", markup=False)


@ledger_app.command("require-approval")
@handled
def ledger_require_approval(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(metavar="DATASET")],
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why; kept in the ledger and shown in listings.")],
    off: Annotated[bool, typer.Option("--off", help="Lift the requirement (recorded too).")] = False,
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who decided (default: the login name).")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Require (or, with --off, stop requiring) an approved plan for every run of DATASET and its
    periods, scheduled runs included: a recorded decision, shown in `dprelease ledger`."""
    if not reason.strip():
        raise typer.BadParameter("say why", param_hint="--reason")
    opened = _existing_ledger(ledger or ctx.obj)
    try:
        policy = opened.set_policy(dataset, "approval", "optional" if off else "required", reason=reason, by=by)
    finally:
        opened.close()
    out.print(f"approval {policy.value} for every run of {policy.dataset} (set by {policy.set_by}: {policy.reason})",
              markup=False)


@ledger_app.command("resolve")
@handled
def ledger_resolve(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The run (its id, or the first 8+ characters).")],
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why; kept in the ledger and shown in listings.")],
    void: Annotated[bool, typer.Option("--void", help="Release the reservation: only when its outputs never "
                                       "appeared (nothing published, nothing staged).")] = False,
    commit: Annotated[bool, typer.Option("--commit", help="Record it as published: only when its release "
                                         "directory is in place with this run's manifest.")] = False,
    fail: Annotated[bool, typer.Option("--fail", help="Record it as failed: spent, never published (its staged "
                                       "outputs are removed).")] = False,
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who decided (default: the login name).")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Settle an unfinished (crashed) run's reservation, with who and why."""
    from dprelease.cli.running import resolve_run

    if [void, commit, fail].count(True) != 1:
        raise typer.BadParameter("choose one of --void, --commit, --fail", param_hint="--void/--commit/--fail")
    if not reason.strip():
        raise typer.BadParameter("say why", param_hint="--reason")
    opened = _existing_ledger(ledger or ctx.obj)
    try:
        outcome = resolve_run(opened, run_id, "void" if void else "commit" if commit else "fail", reason, by)
    finally:
        opened.close()
    out.print(outcome, markup=False)


# ---------------------------------------------------------------- entry point


def main() -> None:
    app()
