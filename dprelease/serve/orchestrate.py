"""Prefect orchestration: the only module of the library that imports Prefect.

The flow adds nothing to the privacy logic. Its tasks take a run id and a table name, never
data: the confidential records and counts stay in this process's memory (``_RUNS``), so
nothing confidential reaches Prefect's parameters, results, cache or logs. Every task sets
``retries=0`` (a retry would re-draw noise) and ``cache_policy=NO_CACHE`` with
``persist_result=False`` (a cache could replay noise; a stored result could leak data).
A failing step's message may quote a data value, so tasks raise a bare :class:`StepFailed`
to Prefect and keep the real exception for the operator's terminal.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

# An empty PREFECT_API_URL means "no server" to a user, but breaks Prefect's event worker.
if os.environ.get("PREFECT_API_URL", None) == "":
    del os.environ["PREFECT_API_URL"]
# Quiet, offline defaults, set before Prefect is imported; the user's environment wins. An
# ephemeral server is an implementation detail of this process: its shutdown chatter (event
# flushes racing the exit) is not the operator's business, so it logs only critical errors.
_EPHEMERAL = not os.environ.get("PREFECT_API_URL")
for _key, _value in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
                     "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL" if _EPHEMERAL else "WARNING"}.items():
    os.environ.setdefault(_key, _value)

from prefect import flow, task  # noqa: E402
from prefect.artifacts import (  # noqa: E402
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.client.schemas.objects import State  # noqa: E402
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings  # noqa: E402

from dprelease.accounting import amount_text, fraction_text  # noqa: E402
from dprelease.plan.margins import margin_of  # noqa: E402
from dprelease.lifecycle.release import ReleaseRun, Step  # noqa: E402
from dprelease.serve.binding import (  # noqa: E402
    ScheduleBinding,
    ScheduledRun,
    read_binding,
    unbound_refusal,
)

_RUNS: dict[str, ReleaseRun] = {}


class _NoRunTracebacks(logging.Filter):
    """Keep Prefect's run-failure reports off the terminal: the CLI explains failures itself.

    They still reach the Prefect API (and UI), where they hold only the sanitised StepFailed.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        run_logger = record.name.startswith(("prefect.flow_runs", "prefect.task_runs"))
        # the event worker racing process exit on a busy machine, and the in-process ephemeral
        # server's consumers cancelled at shutdown: Prefect's bookkeeping, not ours
        internal = record.name.startswith(("prefect._internal.concurrency", "prefect.events", "prefect.server"))
        return not ((run_logger or internal) and (record.exc_info or record.levelno >= logging.ERROR))


def _quiet_terminal() -> None:
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs", "prefect.server", ""):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not any(
                    isinstance(f, _NoRunTracebacks) for f in handler.filters):
                handler.addFilter(_NoRunTracebacks())


_TASK = {"retries": 0, "cache_policy": NO_CACHE, "persist_result": False, "log_prints": False}


class StepFailed(RuntimeError):
    """What Prefect sees of a failed step: the step, never the message."""


def _step(run_id: str, action: Callable[[ReleaseRun], None], what: str = "a step") -> None:
    run = _RUNS[run_id]
    try:
        action(run)
    except Exception as exc:
        run.error = exc
        raise StepFailed(f"{what} failed ({type(exc).__name__}); details on the operator's "
                         "terminal") from None


@task(name="load", **_TASK)
def load_task(run_id: str, step: Step) -> None:
    _step(run_id, step.run, step.name)


@task(name="measure", task_run_name="measure-{step.table}", **_TASK)
def measure_task(run_id: str, step: Step) -> None:
    _step(run_id, step.run, step.name)


@task(name="postprocess", **_TASK)
def postprocess_task(run_id: str, step: Step) -> None:
    _step(run_id, step.run, step.name)


@task(name="publish", **_TASK)
def publish_task(run_id: str, step: Step) -> None:
    _step(run_id, step.run, step.name)


PROGRESS_SECONDS = 1.0  # the progress artifact is updated at most this often (and once done)
_TASKS = {"load": load_task, "measure": measure_task, "postprocess": postprocess_task, "publish": publish_task}


@flow(name="dprelease-release", flow_run_name="{release}", retries=0, persist_result=False,
      validate_parameters=False, log_prints=False)
def release_flow(run_id: str, release: str) -> None:
    """The run's steps (:meth:`ReleaseRun.steps`), one task each, then the budget report's artifacts."""
    from prefect.runtime import flow_run

    run = _RUNS[run_id]
    run.flow_run_id = str(flow_run.id) if flow_run.id else None
    steps = run.steps()
    progress = create_progress_artifact(progress=0.0, key=artifact_key(release, "progress"),
                                        description=f"Progress of release {release}")
    shown = time.monotonic()
    for i, step in enumerate(steps, 1):
        _TASKS[step.name](run_id, step)
        if i == len(steps) or time.monotonic() - shown >= PROGRESS_SECONDS:  # each update is an API call
            update_progress_artifact(progress, 100.0 * i / len(steps), description=f"{release}: {step.done}")
            shown = time.monotonic()
        run.report_progress(step.done, i, len(steps))
    create_markdown_artifact(key=artifact_key(release), markdown=(run.report_md or "") + burn_down_md(run),
                             description=f"Budget report of release {release}")
    create_table_artifact(key=artifact_key(release, "budget-table"), table=budget_rows(run),
                          description=f"Spend per measurement of release {release}")


SCHEDULED_FLOW = "dprelease-scheduled"  # the flow every deployment of `dprelease schedule` runs


@flow(name=SCHEDULED_FLOW, retries=0, persist_result=False, validate_parameters=False, log_prints=False)
def scheduled_release(spec_path: str, ledger: str | None, output_dir: str | None = None,
                      require_approval: bool = True) -> State | None:
    """One scheduled run of a release spec: the release is named from the spec's template with the
    run's date; the plan must be approved unless the deployment says otherwise. First of all, the
    run must be what the ``dprelease schedule`` process serving it bound (:mod:`dprelease.serve.binding`):
    its binding read from this user's owner-only data directory (never the environment), its
    process this run's ancestor, the run's parameters and spec and side files the bound ones, and
    its scheduled start the latest firing of the bound cron (or a trigger for "now", run as that
    firing). A run carrying anything else (another ledger, output directory, spec, approval or
    date, from the API, the CLI or the UI's custom run), or started by anything but ``dprelease
    schedule``, is refused before any spec is loaded or ledger opened; the run then uses the
    bound values. Every refusal (those, not approved, over budget, already released, a bad spec
    or data) fails the run with nothing spent: one ERROR line "refused (exit N): reason" in the
    run's logs, no traceback (the flow returns a Failed state instead of raising); a data
    error's own message, which may quote the data, goes to standard error only, never to the
    logs. A bug (exit 1) still raises."""
    import sys
    from datetime import datetime, timezone

    from prefect import get_run_logger
    from prefect.states import Failed

    from dprelease.errors import DataError, DPReleaseError, ExitCode
    from dprelease.lifecycle import Orchestrator, RunFailed, Voice, run_spec

    logger = get_run_logger()
    lines = _lines_logger(logger)
    say = lambda text: (lines.warning if text.lower().startswith("warning") else lines.info)(text)  # noqa: E731
    voice = Voice(say=say, show=lines.info, error=lambda text: print(text, file=sys.stderr))
    record = {"kind": "prefect", "api": os.environ.get("PREFECT_API_URL", ""), "chosen_by": "schedule"}
    try:
        run = this_run()
        bound = read_binding(run.deployment) if run.deployment else None
        if bound is None:
            raise unbound_refusal(run.deployment)
        bound.check_process()
        bound.check({"spec_path": spec_path, "ledger": ledger, "output_dir": output_dir,
                     "require_approval": require_approval})
        run_date = bound.run_date(run, datetime.now(timezone.utc))
        run_spec(Path(bound.spec_path), bound.ledger, Path(bound.output_dir),
                 orchestrate=Orchestrator(run_release, record), voice=voice,
                 require_approval=bound.require_approval, run_date=run_date)
    except (DPReleaseError, RunFailed) as exc:
        if exc.exit_code == ExitCode.INTERNAL:
            raise
        what = "failed" if isinstance(exc, RunFailed) else "refused"  # RunFailed: reserved, then voided
        reason = str(exc)
        if isinstance(exc, DataError):  # it may quote the data's values and counts: the worker's terminal only
            voice.error(f"error: {exc}")
            reason = ("the data was refused (why, which may quote the data, is on the worker's standard error; "
                      "`dprelease check SPEC` shows it too). Nothing was reserved or spent.")
        message = f"{what} (exit {int(exc.exit_code)}): {reason}"
        logger.error(message)
        return Failed(message=message)
    return None


def _lines_logger(run_logger: Any) -> Any:
    """The run's logger for the lifecycle's own lines, at INFO: a child of the run logger's
    logger (``….dprelease``, level INFO), so its records reach the run logger's handlers — the
    run's logs in the API, the worker's terminal — while Prefect's own chatter keeps
    ``PREFECT_LOGGING_LEVEL`` (WARNING by default). So a successful run logs INFO lines only,
    a warning is a WARNING and a refusal an ERROR: alerting on WARNING fires on what needs a look."""
    import logging

    base = run_logger.logger if isinstance(run_logger, logging.LoggerAdapter) else run_logger
    child = base.getChild("dprelease")
    child.setLevel(logging.INFO)
    return type(run_logger)(child, run_logger.extra) if isinstance(run_logger, logging.LoggerAdapter) else child


def this_run() -> ScheduledRun:
    """This flow run as the Prefect API has it: its deployment's name, scheduled start and creation
    time, read from the run's context and the API (not from ``prefect.runtime``, whose values
    environment variables such as ``PREFECT__RUNTIME__FLOW_RUN__SCHEDULED_START_TIME`` replace)."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return ScheduledRun(None, None, None)
    flow_run = context.flow_run
    name = None
    if flow_run.deployment_id is not None:
        with get_client(sync_client=True) as client:
            name = client.read_deployment(flow_run.deployment_id).name
    return ScheduledRun(name, flow_run.expected_start_time, flow_run.created)


def is_cron(cron: str) -> bool:
    """Whether Prefect takes ``cron`` as a cron expression, e.g. "0 3 1 * *"."""
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except ValueError:
        return False
    return True


def trigger(deployment: str) -> tuple[str, str]:
    """A flow run of the deployment ``dprelease-scheduled/DEPLOYMENT``, created now on the server
    at PREFECT_API_URL (set by the caller: never an ephemeral one); (its id, its name). Raises
    UserError where the server has no such deployment."""
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    from dprelease.errors import UserError

    try:
        run = run_deployment(name=f"{SCHEDULED_FLOW}/{deployment}", timeout=0)
    except ObjectNotFound:
        raise UserError(f"no deployment {SCHEDULED_FLOW}/{deployment} on the Prefect server at "
                        f"{os.environ.get('PREFECT_API_URL')}: `dprelease schedule SPEC --name {deployment}` serves one "
                        "(the default name is the spec's file name). Nothing was started.") from None
    return str(run.id), str(run.name)


def serve_schedule(binding: ScheduleBinding) -> None:
    """Register the deployment ``binding`` names, of :func:`scheduled_release`, on the Prefect
    server at PREFECT_API_URL, with ``binding``'s cron (UTC) and values as its schedule and
    parameters, and serve it until interrupted. The caller keeps the binding for the runs meanwhile
    (:func:`dprelease.serve.binding.serving`): each run started here checks itself against it."""
    scheduled_release.serve(name=binding.name, cron=binding.cron, parameters=binding.parameters(),
                            print_starting_message=False)


def artifact_key(release: str, kind: str = "budget-report") -> str:
    """Prefect artifact keys allow lower-case letters, digits and dashes only."""
    return f"{kind}-" + re.sub(r"[^a-z0-9-]", "-", release)


def burn_down_md(run: ReleaseRun) -> str:
    """The dataset's burn-down across releases (from the ledger), as in `dprelease report`."""
    from dprelease.ledger import Ledger
    from dprelease.publish.manifest_reader import read_manifest, release_budgets
    from dprelease.report.published import burn_down

    ledger = Ledger.open(run.location)
    if ledger is None:
        return ""
    with ledger:
        state = ledger.state(run.spec.dataset.name)
    manifest = read_manifest(run.layout.final)
    rows = [f"| {p.release} | {p.state} | {fraction_text(p.spent_after)} |" for p in burn_down(manifest, state)]
    cap = fraction_text(release_budgets(manifest).cap.amount)
    return "\n".join(["", f"## Burn-down of {run.spec.dataset.name} (cap {cap})", "",
                      "| release | state | spent after |", "|---|---|---:|", *rows, ""])


def budget_rows(run: ReleaseRun) -> list[dict[str, str | int | None]]:
    """The budget report's per-measurement figures (the same as its table), for a table artifact."""
    plan = run.plan
    return [{"table": t.name, "level": t.level, plan.symbol: amount_text(t.budget), "mechanism": t.mechanism,
             "sensitivity": t.shown_sensitivity, "noise scale": fraction_text(t.shown_scale), "cells": t.cells,
             "structural cells": len(t.structural),
             "moe95": t.moe95 if margin_of(t, plan.confidence).kind == "cell" else None} for t in plan.tables]


def run_release(run: ReleaseRun) -> None:
    """Run the flow in this process (ephemeral Prefect, or the server at PREFECT_API_URL)."""
    _RUNS[run.run_id] = run
    _quiet_terminal()
    try:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            release_flow(run.run_id, run.spec.release)
    except StepFailed:
        raise run.error if run.error is not None else RuntimeError("a release step failed") from None
    finally:
        _RUNS.pop(run.run_id, None)
