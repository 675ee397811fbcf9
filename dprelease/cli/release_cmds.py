"""``dprelease run``, ``schedule``, ``postprocess`` and ``report``: publish a release (now, or on
a cron schedule), re-run its post-processing, report on it. The run's lifecycle lives in
:mod:`dprelease.lifecycle` and Prefect in :mod:`dprelease.serve.orchestrate`; this module parses
arguments and prints."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dprelease.cli.options import LedgerOpt, OutputDirOpt
from dprelease.cli.common import (
    handled,
    spec_ledger,
    out,
    say,
    show,
    spec_location,
)
from dprelease.cli.warm.protocol import CHILD_FLAG
from dprelease.errors import UserError


@handled
def run(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file.")],
    ledger: LedgerOpt = None,
    output_dir: OutputDirOpt = None,
    require_approval: Annotated[bool, typer.Option(
        "--require-approval", help="Refuse (exit 5, nothing spent) unless `plan --approve` approved this exact "
        "plan.")] = False,
    run_date: Annotated[Optional[str], typer.Option(
        "--run-date", metavar="DATE", help="The date or date-time (UTC unless it names its offset) that "
        "{run_date:...} templates in the spec resolve with, e.g. 2027-03-01 or 2027-03-01T14:30 (default: now).")] = None,
    dask_address: Annotated[Optional[str], typer.Option(
        "--dask-address", metavar="ADDRESS", help="Count the data on this Dask cluster (e.g. tcp://scheduler:8786) "
        "instead of streaming it here; noise is still drawn here. Overrides the spec's engine:.")] = None,
    orchestrator: Annotated[str, typer.Option(
        "--orchestrator", metavar="auto|prefect|inline", help="How the reserved run's steps run: auto (default) "
        "uses the Prefect server at PREFECT_API_URL or the one `dprelease server` keeps, else runs them inline "
        "here; prefect forces a Prefect flow run (a temporary server when none is up); inline never uses "
        "Prefect.")] = "auto",
) -> None:
    """Publish a release: plan, reserve in the ledger, then measure and publish (inline, or as a
    Prefect flow run when a Prefect server is up; see --orchestrator).

    Exit 0 published; 2 invalid spec or data (nothing spent); 3 over budget (data not read);
    4 already released or reserved; 5 not approved (with --require-approval; nothing spent);
    1 any other failure (nothing published).
    """
    from dprelease.lifecycle import Orchestrator, RunFailed, Voice, run_spec

    when = None
    if run_date is not None:
        try:
            when = datetime.fromisoformat(run_date)
        except ValueError:
            raise typer.BadParameter(f"{run_date!r} is not a date, e.g. 2027-03-01", param_hint="--run-date") from None
        when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    if dask_address is not None and not re.fullmatch(r"(tcp|tls)://[^\s/]+:[0-9]{1,5}", dask_address):
        raise typer.BadParameter(f"{dask_address!r} is not a Dask scheduler address, e.g. tcp://scheduler:8786",
                                 param_hint="--dask-address")
    from dprelease.serve import server
    from dprelease.serve import auth as server_auth

    choice = server.choose(orchestrator)
    runner = os.environ.get(CHILD_FLAG)  # this process is a warm runner's child (dprelease.cli.warm.handoff)
    voice = Voice(say=say, show=show, error=_error)
    record = choice.record()
    with contextlib.ExitStack() as stack:
        if choice.kind == "inline":
            from dprelease.lifecycle.inline import run_inline

            def say_inline() -> None:
                """After the refusals (so after the ledger's line), before the reservation."""
                if orchestrator == "auto":
                    say("running inline: no Prefect server is up (`dprelease server start` keeps one for the day; "
                        "--orchestrator prefect forces a flow run)")

            chosen = Orchestrator(run_inline, record, say_inline)
        else:
            def ready() -> None:
                """After the spec's refusals, before the reservation: the server answers (or a
                temporary one is up), and Prefect will talk to it (set before Prefect is imported)."""
                api = choice.api
                if api is None:
                    say("starting a temporary Prefect server for this run (`dprelease server start` keeps one for "
                        "the day)")
                    with _spinner("starting a temporary Prefect server"):
                        api, secret = stack.enter_context(server.temporary())
                    os.environ[server_auth.CLIENT_VARIABLE] = secret
                else:
                    server.check_api(api)
                    if orchestrator == "auto" or runner:
                        say(f"running as a Prefect flow run at {api} ({choice.how}" +
                            (f"; in its warm runner, PID {runner})" if runner else ")"))
                    os.environ.update(server.client_env(api))  # the secret of the server dprelease keeps
                    server.check_access(api)
                os.environ["PREFECT_API_URL"] = api
                record["api"] = api
                if runner:
                    record["process"] = f"warm runner (PID {runner})"

            chosen = Orchestrator(_orchestrate, record, ready)
        try:
            run_spec(spec_path, ledger, output_dir, orchestrate=chosen, voice=voice, require_approval=require_approval,
                     run_date=when, dask_address=dask_address, typed_ledger=ledger is not None)
        except RunFailed as failed:  # its error and its settlement were said
            raise typer.Exit(failed.exit_code) from None


def _orchestrate(run) -> None:  # type: ignore[no-untyped-def]
    """The Prefect flow of a reserved run: Prefect is imported only now."""
    with _spinner("importing Prefect"):
        from dprelease.serve.orchestrate import run_release

    run_release(run)


@contextlib.contextmanager
def _spinner(what: str):  # type: ignore[no-untyped-def]
    """A spinner with the elapsed time on an interactive terminal's stderr while ``what`` goes on
    (Prefect starting or being imported: seconds with nothing else to show); nothing elsewhere."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(f"{what} ..."):
        yield


def _error(text: str) -> None:
    print(text, file=sys.stderr)


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


@handled
def schedule(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file.")],
    cron: Annotated[str, typer.Option(metavar="CRON", help="When to run, e.g. \"0 3 1 * *\" (03:00 UTC on the 1st).")],
    name: Annotated[Optional[str], typer.Option(metavar="NAME", help="Deployment name (default: the spec's "
                                                "file name).")] = None,
    ledger: LedgerOpt = None,
    output_dir: OutputDirOpt = None,
    no_approval: Annotated[bool, typer.Option(
        "--no-approval", help="Run plans that were not approved with `plan --approve` (default: refuse them).")] = False,
) -> None:
    """Register a cron-scheduled deployment of SPEC on the Prefect server at PREFECT_API_URL (or
    the one `dprelease server` keeps) and serve it (runs until interrupted). Each run names its
    release from the spec's template, e.g. release: "acs-monthly-{run_date:%Y-%m}", with its
    firing of the cron (UTC): the latest at or before now, no other; by default it refuses a plan
    that is not approved (nothing spent)."""
    from dprelease.serve import auth as server_auth
    from dprelease.lifecycle.prepare import output_location
    from dprelease.serve.binding import ScheduleBinding, serving
    from dprelease.spec import load_spec

    spec = load_spec(spec_path)  # a broken spec fails now, not at 03:00
    _check_cron(cron)
    location = spec_location(spec, ledger)  # where each run will look
    with spec_ledger(spec, location, quiet=True) as opened:  # so does a ledger that is not there
        _next_run(spec_path, cron, opened, require_approval=not no_approval)
    clash = _name_clash(spec.release_template, cron)
    if clash is not None:
        first, second, alike = clash  # (not `name`: that is the deployment's)
        say(f"warning: {spec_path}: --cron {cron!r} fires at {first:%Y-%m-%d %H:%M} and {second:%Y-%m-%d %H:%M} UTC, "
            f"which release {spec.release_template!r} names alike ({alike!r}): only the first of such runs can "
            "publish, the others are refused as already released; name every run apart, e.g. with the hour and "
            "minute: release: \"acs-{run_date:%Y-%m-%d-%H%M}\"")
    api = _server_in_use("schedules need a Prefect server")
    if server_auth.answers(api) == 200:
        say(f"warning: the Prefect server at {api} requires no authentication: anyone who reaches it can start, "
            "pause or delete this deployment and read its runs' logs (runs with other parameters are refused); "
            "serve it on the server `dprelease server start` keeps, which requires a secret")
    if spec.release_template is None:
        say(f"warning: {spec_path}: release {spec.release!r} has no {{run_date:...}} template, so only the first "
            "scheduled run can publish; later runs are refused as already released")
    from dprelease.serve import orchestrate  # imports Prefect: only now

    if not orchestrate.is_cron(cron):
        raise typer.BadParameter(f"{cron!r} is not a cron expression, e.g. \"0 3 1 * *\"", param_hint="--cron")
    deployment = name or spec_path.stem
    outputs = output_location(output_dir, spec)  # fixed now: the served runs' working directory is this one
    binding = ScheduleBinding.bind(f"dprelease-scheduled/{deployment}", spec.source.resolve(), spec.side_files,
                                   ledger, outputs, not no_approval, cron)
    with serving(binding) as kept:  # for the runs to check themselves against, while this process serves
        say(f"serving deployment {binding.deployment} ({cron}) against {os.environ['PREFECT_API_URL']}; "
            f"ledger {location.shown}; releases land in {outputs}; approval "
            f"{'not required' if no_approval else 'required'}; bound here ({kept}): a run with other parameters, or "
            "after the spec or its domain files change, or dated other than the latest firing of the cron, is "
            "refused. Ctrl-C stops it.")
        orchestrate.serve_schedule(binding)


def _server_in_use(need: str) -> str:
    """The Prefect server schedules use (``PREFECT_API_URL``, the active profile's, or the one
    `dprelease server start` keeps), made this process's before Prefect is imported, with its
    credentials; never a temporary one: without a server, a user error saying how to start one."""
    from dprelease.serve import server

    kept = server.recorded()
    api = (os.environ.get("PREFECT_API_URL") or server.profile_api_url()[1]
           or (kept.url if kept is not None else None))
    if api is None:
        raise UserError(f"{need}: start one with `dprelease server start` (or `prefect server start` and set "
                        "PREFECT_API_URL, e.g. http://127.0.0.1:4200/api), then run this again")
    os.environ["PREFECT_API_URL"] = api  # before Prefect is imported
    os.environ.update(server.client_env(api))  # the secret of the server dprelease keeps (never shown)
    problem = server.api_problem(api)
    if problem is not None:
        raise UserError(f"the Prefect server at {api} {problem}; start it with `dprelease server "
                        "start`, or set PREFECT_API_URL to the one in use. Nothing was started.")
    server.check_access(api)
    return api


@handled
def trigger(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The deployment's name, as `schedule --name` gave it "
                                        "(default there: the spec's file name).")],
) -> None:
    """Start a run of a scheduled deployment now, on the server in use (the one `dprelease server
    start` keeps, or PREFECT_API_URL): never a temporary one. The run checks itself against what
    `schedule` bound, as every run does, and runs as the cron's latest firing; the serving process
    (`dprelease schedule`) must be running to pick it up."""
    api = _server_in_use("a triggered run needs the server its schedule is served on")
    from dprelease.serve import orchestrate  # imports Prefect: only now

    run_id, run_name = orchestrate.trigger(name)
    out.print(f"triggered {orchestrate.SCHEDULED_FLOW}/{name}: flow run {run_id} ({run_name}) on {api}; the serving "
              "`dprelease schedule` process runs it as the cron's latest firing (its logs: the Prefect UI, or "
              f"`prefect flow-run logs {run_id}`)", markup=False, highlight=False)


def _next_run(spec_path: Path, cron: str, ledger: Any, *, require_approval: bool) -> None:
    """What the schedule's next run will meet, before serving it: the warnings `plan` shows of that
    run's plan (its release named for the next firing), the budget's runway (how many more runs
    the lifetime budget covers, and the date of the last), and a refusal (exit 3 or 4, nothing
    served) where that run would be refused as over budget or already released. An unapproved plan
    is said, not refused: a reviewer may approve it before it fires (each run checks then)."""
    from dprelease.serve.cron import firings
    from dprelease.accounting import amount_text
    from dprelease.errors import AlreadyReleasedError, NotApprovedError, OverBudgetError
    from dprelease.lifecycle import over_budget_message
    from dprelease.lifecycle.refusals import approval_of
    from dprelease.lifecycle.notices import context_warnings
    from dprelease.plan import plan_release
    from dprelease.plan.review import plan_facts, review_warnings
    from dprelease.spec import load_spec

    now = datetime.now(timezone.utc).replace(tzinfo=None)
    upcoming = (firings(cron, now, 1) or [now])[0]
    spec = load_spec(spec_path, run_date=upcoming.replace(tzinfo=timezone.utc))
    state = ledger.state(spec.dataset.name)
    plan = plan_release(spec, state)
    when = f"the next run ({upcoming:%Y-%m-%d %H:%M} UTC, release {spec.release})"
    for warning in context_warnings(spec, state) + review_warnings(plan_facts(plan, spec.dataset.partition_note), state):
        say(f"warning: {spec_path}: {when}: {warning}")
    if plan.existing_run is not None:
        held = plan.existing_run
        fix = (f"An unfinished run holds it: once none is in progress, settle it with `dprelease ledger resolve "
               f"{held.run_id}`" if held.state in ("reserved", "drawing") else
               "Name each run apart with a template, e.g. release: \"acs-{run_date:%Y-%m}\"")
        raise AlreadyReleasedError(f"{spec_path}: {when} would be refused: release {spec.release!r} is already "
                                   f"{held.state} (run {held.run_id}). {fix}. Nothing was served.")
    if not plan.fits:
        raise OverBudgetError(f"{spec_path}: {when} would be refused: {over_budget_message(spec, plan)} Nothing was "
                              "served.")
    runs = _runway(plan)
    if runs is not None:
        dates = firings(cron, now, min(runs, 1000)) or []
        last = f", the last on {dates[-1]:%Y-%m-%d %H:%M} UTC" if dates and len(dates) == runs else ""
        say(f"{spec_path}: budget runway: each run charges {plan.charge}; {amount_text(plan.lifetime_remaining)} of "
            f"{amount_text(plan.lifetime_budget)} remain for {spec.dataset.name}: that covers {runs} more run(s){last}; "
            "later runs are refused as over budget (nothing spent)")
    try:
        approval_of(spec, plan, ledger, require_approval, lambda _: None)  # as the run will check it
    except NotApprovedError as exc:
        say(f"warning: {spec_path}: {when} will be refused unless its plan is approved before it fires: {exc}")


def _runway(plan: Any) -> int | None:
    """How many runs of this plan's charge the remaining lifetime budget covers (exact), or None
    where a run charges nothing."""
    from fractions import Fraction

    from dprelease.accounting import ApproxDP

    charge, remaining = plan.charge, plan.lifetime_remaining
    counts = []
    if charge.amount > 0:
        counts.append(int(Fraction(remaining.amount) // Fraction(charge.amount)))
    if isinstance(charge, ApproxDP) and isinstance(remaining, ApproxDP) and charge.delta > 0:
        counts.append(int(Fraction(remaining.delta) // Fraction(charge.delta)))
    return min(counts) if counts else None


def _check_cron(cron: str) -> None:
    """Refuse a cron that :mod:`dprelease.serve.cron` cannot read (each run's date is checked against
    it) or that never fires."""
    from dprelease.serve.cron import firings

    found = firings(cron, datetime.now(timezone.utc).replace(tzinfo=None), 1)
    if found is None:
        raise typer.BadParameter(f"{cron!r} is not a cron expression dprelease reads, e.g. \"0 3 1 * *\": five "
                                 "fields of numbers, *, ranges a-b, steps */s, lists a,b and month or day names, or "
                                 "@daily, @weekly, @monthly... (each run's date is checked against it)",
                                 param_hint="--cron")
    if not found:
        raise typer.BadParameter(f"{cron!r} does not fire in the next ten years", param_hint="--cron")


def _name_clash(template: str | None, cron: str) -> tuple[datetime, datetime, str] | None:
    """Two consecutive firings of ``cron`` (among its next 500) that ``template`` gives the same
    release name, with the name; None if there are none (or the cron is not understood here)."""
    from dprelease.serve.cron import firings

    if template is None:
        return None
    times = firings(cron, datetime.now(timezone.utc).replace(tzinfo=None), 500) or []
    names = [template.format(run_date=t.replace(tzinfo=timezone.utc)) for t in times]
    for (a, name_a), (b, name_b) in zip(zip(times, names), zip(times[1:], names[1:])):
        if name_a == name_b:
            return a, b, name_a
    return None
