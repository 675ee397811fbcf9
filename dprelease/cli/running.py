"""``dprelease run``: everything that can refuse a run happens before anything is spent.

Order: validate → plan against the ledger → refuse (already released: 4; over budget: 3;
no data file, unwritable output directory, unreachable Prefect server: 2) → reserve (one
transaction; a lost race is 3 or 4) → the Prefect flow. After a failure the reservation is
voided only if no noise was drawn; otherwise the run is recorded as failed and its budget
stays spent. Staged outputs of a run that will not be published are deleted (a spent draw
must not stay around to be picked from). A run interrupted between its ledger commit and the
final rename is completed by the next ``dprelease run`` of the same spec.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
import os
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

import numpy as np
import typer
from rich.console import Console

from dprelease.accounting import ApproxDP, budget_of, fraction_text
from dprelease.cli.render import both, ledger_line, pinned_elsewhere
from dprelease.data import DataError
from dprelease.data.rules import check_rules
from dprelease.errors import (
    AlreadyReleasedError,
    ExitCode,
    LedgerError,
    NotApprovedError,
    OverBudgetError,
    UserError,
)
from dprelease.faults import checkpoint
from dprelease.data import file_fingerprint
from dprelease.ledger import Approval, DatasetState, Ledger, LedgerLocation, resolve_location
from dprelease.ledger.lease import Heartbeat
from dprelease.plan import Plan, plan_release, with_provenance
from dprelease.publish import Layout, RunFacts, discard_staging, move_into_place, staged_runs
from dprelease.release import ReleaseRun
from dprelease.spec import ROOT, Engine, Spec, load_spec

Say = Callable[[str], None]


def run_release_command(spec_path: Path, ledger_url: str | None, output_dir: Path, *, say: Say,
                        out: Console, require_approval: bool = False, run_date: datetime | None = None,
                        dask_address: str | None = None) -> None:
    """A release run. Every file and directory it creates (outputs, staging, internal record,
    ledger) is owner-only: publishing a release to others is a deliberate copy."""
    previous = os.umask(0o077)
    try:
        _run_release(spec_path, ledger_url, output_dir, say=say, out=out, require_approval=require_approval,
                     run_date=run_date, dask_address=dask_address)
    finally:
        os.umask(previous)


def _run_release(spec_path: Path, ledger_url: str | None, output_dir: Path, *, say: Say, out: Console,
                 require_approval: bool, run_date: datetime | None, dask_address: str | None) -> None:
    spec = load_spec(spec_path, run_date=run_date)
    if dask_address is not None:  # where the counting runs: not part of the plan (or its approval)
        spec = dataclasses.replace(spec, engine=Engine(kind="dask", address=dask_address))
    from dprelease.cli import large_delta_warnings

    for warning in large_delta_warnings(spec):
        say(f"warning: {spec_path}: {warning}")
    output_dir = output_dir.resolve()
    location = resolve_location(ledger_url, spec.ledger, spec.source.resolve().parent)
    if (elsewhere := pinned_elsewhere(spec, location)) is not None:
        say(elsewhere)
    ledger = Ledger.open(location, create=False)
    inputs_checked = ledger is None
    if inputs_checked:  # a first run: refuse unreadable data before the ledger is even created
        refuse_unpinned_new_ledger(spec, location)
        _refuse_bad_inputs(spec)
        ledger = Ledger.open(location, create=True)
    assert ledger is not None
    say(ledger_line(location, True, created=ledger.created, ledger_id=ledger.id))
    try:
        state = ledger.state(spec.dataset.name)
        if state is None:  # a new lifetime budget starts only in a pinned ledger, never a per-user default
            refuse_unpinned_new_ledger(spec, location)
        plan = plan_release(spec, state)
        _refuse_links(spec, output_dir)
        if _recover_interrupted_publication(spec, plan, say, out):
            return
        _discard_stale_staging(spec, state, output_dir)
        _refuse_before_spending(spec, plan, output_dir, inputs_checked=inputs_checked)
        approval = _approval(spec, plan, ledger, require_approval, say)
        started = time.perf_counter()
        digest = file_fingerprint(spec.dataset.resolved_path)  # plain: in this process's memory only
        fingerprint_seconds = time.perf_counter() - started
        fingerprint = ledger.fingerprint(digest)
        refuse_foreign_outputs(spec, output_dir, ledger, digest)
        if plan.local:  # local answers carry provenance: the data file must be registered answers
            plan = with_provenance(spec, plan, state, ledger.answer_sets(spec.dataset.name, fingerprint), fingerprint)
            _say_provenance(plan, say)
        local = _local_collections(plan, fingerprint)
        evaluations = ledger.evaluations_of(spec.dataset.name, fingerprint)
        granted = ledger.reserve(dataset=spec.dataset.name, release=spec.release,
                                 charges=plan.ledger_charges(),
                                 spec_fingerprint=plan.fingerprint, lifetime_from_spec=spec.dataset.lifetime_epsilon,
                                 lifetime_delta_from_spec=spec.dataset.lifetime_delta,
                                 local=local, data_fingerprint=fingerprint, approval=approval,
                                 spec_path=str(spec.source.resolve()), output_dir=str(output_dir),
                                 terms=plan.terms)
        caps = ledger.state(spec.dataset.name).caps  # type: ignore[union-attr]
        ledger_id = ledger.id
    finally:
        ledger.close()
    # what the manifest states about the lifetime budget comes from the reserving transaction
    kind = plan.terms.kind
    plan = dataclasses.replace(plan, lifetime_spent=budget_of(kind, granted.spent_before, granted.delta_spent_before),
                               lifetime_budget=budget_of(kind, granted.budget, granted.delta_budget))
    charged = f"{plan.ledger_symbol} = {fraction_text(plan.charge.amount)}"
    if isinstance(plan.charge, ApproxDP):
        charged += f", δ = {fraction_text(plan.charge.delta)}"
    say(f"reserved {charged} for {spec.release} (run {granted.run_id})")
    run = ReleaseRun(spec=spec, plan=plan, run_id=granted.run_id, location=location,
                     layout=Layout(output_dir, spec.release, granted.run_id), caps=caps,
                     data_digest=digest, data_fingerprint=fingerprint, check_data_again=bool(local),
                     record=RunFacts(ledger_id=ledger_id, ledger_location=location.shown,
                                     ledger_chosen_by=location.how_chosen, approval=approval,
                                     evaluations=tuple(evaluations)))
    run.timings["fingerprint"] = fingerprint_seconds
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a polite kill settles the reservation too
    progress = _terminal_progress(run)
    heartbeat = Heartbeat(lambda: _with_ledger(location, lambda ledger: ledger.renew_lease(granted.run_id))).start()
    try:
        checkpoint("reserved")
        from dprelease.orchestrate import run_release  # imports Prefect: only now

        run_release(run)
    except BaseException as exc:  # noqa: BLE001 - every failure must settle the reservation
        published = _settle_failure(run, exc, say)
        run.write_internal_record()
        if not published:
            raise typer.Exit(ExitCode.INVALID if isinstance(exc, UserError) else ExitCode.INTERNAL) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        heartbeat.stop()
        _with_ledger(location, lambda ledger: ledger.end_lease(granted.run_id))
        if progress is not None:
            progress.stop()
    record = run.write_internal_record()
    _print_done(spec, plan, run.layout.final, out)
    say(f"internal run record (not for publication): {record}")


def _terminal_progress(run: ReleaseRun):  # type: ignore[no-untyped-def]
    """A rich progress bar on stderr for an interactive terminal (load, each table, publish)."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console as RichConsole
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), console=RichConsole(stderr=True), transient=True)
    task = bar.add_task(f"{run.spec.release}: loading", total=3 + len(run.spec.tables))
    bar.start()
    run.on_progress = lambda what, step, steps: bar.update(task, completed=step, description=f"{run.spec.release}: {what}")
    return bar


def _with_ledger(location: LedgerLocation, act: Callable[[Ledger], None]) -> None:
    """Open the ledger, act on it, close it; a failure here (the lease's bookkeeping) is not the run's."""
    try:
        ledger = Ledger.open(location, create=False)
        if ledger is not None:
            try:
                act(ledger)
            finally:
                ledger.close()
    except Exception:  # noqa: BLE001 - the lease only guards; the ledger's states decide
        pass


def _interrupt(signum, frame):  # type: ignore[no-untyped-def]
    raise KeyboardInterrupt(f"signal {signum}")


def _refuse_before_spending(spec: Spec, plan: Plan, output_dir: Path, *, inputs_checked: bool = False) -> None:
    """Every refusal that needs no data: nothing is reserved, nothing spent."""
    existing = plan.existing_run
    if existing is not None:
        where = (f"its outputs: {Path(existing.output_dir) / spec.release}"
                 if existing.state == "committed" and existing.output_dir else "see `dprelease ledger`")
        raise AlreadyReleasedError(f"release {spec.release!r} of dataset {spec.dataset.name!r} is already "
                                   f"{existing.state} (run {existing.run_id}, {existing.created_at}); {where}. "
                                   "Nothing was spent.")
    if os.path.lexists(output_dir / spec.release):  # a dangling symlink too: nothing is written through one
        raise AlreadyReleasedError(f"{output_dir / spec.release} already exists; refusing to overwrite a "
                                   "published release. Nothing was spent.")
    if not plan.fits:
        raise OverBudgetError(over_budget_message(spec, plan))
    if spec.local_tables and spec.tables:
        raise UserError(f"{spec.source}: central tables and kind: local tables over one data file: a file of answers "
                        "the respondents randomized is never also released as confidential records. Publish the "
                        "local tables from the registered answers file in a release of their own, and the central "
                        "tables from the confidential data under its own dataset. Nothing was spent.")
    if not inputs_checked:  # a first run checked them before creating its ledger
        _refuse_bad_inputs(spec)
    _check_writable(output_dir)
    _rehearse_postprocessing(spec, plan)
    _check_prefect_server()
    check_rules(spec)  # the data against the spec's declared rules (structural zeros rely on them); no rules: no pass


def _refuse_links(spec: Spec, output_dir: Path) -> None:
    """The directories a run writes into below the output directory must be real directories:
    nothing is ever written (or deleted) through a symbolic link planted there."""
    for part in (output_dir / ".staging", output_dir / "_internal", output_dir / "_internal" / spec.release):
        if part.is_symlink() or (part.exists() and not part.is_dir()):
            raise UserError(f"{part} is a symbolic link or not a directory; dprelease writes its staged and internal "
                            "files only into real directories under the output directory. Remove it. Nothing was "
                            "spent.")


def _refuse_bad_inputs(spec: Spec) -> None:
    """The data path and the engine, checked without reading the data."""
    from dprelease.data.count import engine_problem
    from dprelease.data.load import source

    path = spec.dataset.resolved_path
    if not (path.is_file() or path.is_dir()):
        what = "is not a file or directory" if path.exists() else "does not exist"
        raise DataError(f"{spec.source}: dataset.path {spec.dataset.path!r} {what} (resolved to {path}). "
                        "Nothing was spent.")
    try:
        source(spec).files()  # a directory must hold data files
    except DataError as exc:
        raise DataError(f"{exc}. Nothing was spent.") from None
    problem = engine_problem(spec)
    if problem:
        raise UserError(f"{problem}. Nothing was spent.")


def _local_collections(plan: Plan, fingerprint: str) -> tuple:  # type: ignore[type-arg]
    """What the ledger records of the local tables, with the (keyed) fingerprint of the answers'
    file (so that new answers under an old collection name are refused rather than recorded as
    free)."""
    return tuple(dataclasses.replace(p.collection, answers=fingerprint) for p in plan.local)


def _say_provenance(plan: Plan, say: Say) -> None:
    for p in plan.local:
        if p.provenance is None:
            continue
        how = p.provenance.how + (f": {p.provenance.statement}" if p.provenance.statement else "")
        say(f"local table {p.name}: answers registered {p.provenance.registered_at[:19]} UTC by "
            f"{p.provenance.registered_by} ({how})")
        if p.memo_not_honoured:
            say(f"warning: local table {p.name} says memoised: true, but its registered answers were not produced "
                "from the memo of the collection it names: charged as a fresh collection (ε = "
                f"{fraction_text(p.collection.epsilon)} per respondent)")


def refuse_unpinned_new_ledger(spec: Spec, location: LedgerLocation) -> None:
    """A lifetime budget never starts silently in a per-user default ledger: another user, a CI
    account or a container (another HOME) would start the same data from a fresh budget."""
    if location.pinned:
        return
    raise LedgerError(
        f"{spec.source}: dataset {spec.dataset.name!r} has no lifetime budget in the per-user default ledger "
        f"{location.shown}, and the spec does not say where its lifetime budget lives. A run never starts a budget there: another user "
        "or machine would start the same data from a fresh budget. Pin it in the spec with `ledger: PATH` (relative "
        "to the spec file, e.g. ledger: ../ledgers/ledger.sqlite, or a database URL such as "
        "postgresql://host/ledger) — or pass --ledger / set $DPRELEASE_LEDGER to the one ledger of this dataset. "
        "Nothing was spent.")


def _approval(spec: Spec, plan: Plan, ledger: Ledger, required_by_flag: bool, say: Say) -> Approval | None:
    """The approval of this exact plan, if any; refused (exit 5) when the flag, the spec's
    ``approval: required`` or the dataset's recorded policy requires one and there is none."""
    approval = ledger.approval(spec.dataset.base_name or spec.dataset.name, plan.fingerprint)  # every period
    policy = next((p for p in reversed(ledger.policies(spec.dataset.name)) if p.policy == "approval"), None)
    policy = policy if policy is not None and policy.value == "required" else None  # a dataset new to it too
    why = ("--require-approval" if required_by_flag else f"the spec ({spec.source.name}: approval: required)"
           if spec.approval_required else f"the ledger's policy for {policy.dataset} (set {policy.set_at[:10]} by "
           f"{policy.set_by}: {policy.reason})" if policy is not None else
           f"its exact publication of the invariants ({', '.join(spec.invariant_levels)} totals, outside differential "
           "privacy)" if spec.invariants else None)
    if approval is None and why is not None:
        raise NotApprovedError(f"{spec.source}: this plan ({plan.fingerprint}) of release {spec.release} is not "
                               f"approved, and {why} requires approval; review it with `dprelease plan SPEC` and "
                               "approve it with `dprelease plan SPEC --approve --by NAME`. Nothing was spent.")
    if approval is not None:
        say(f"plan approved by {approval.approved_by} ({approval.approved_at[:19]} UTC)")
    return approval


def refuse_foreign_outputs(spec: Spec, output_dir: Path, ledger: Ledger, digest: str) -> None:
    """Refuse to publish beside releases of this dataset (by name, or of the same data) that the
    ledger in use does not record: they were spent from another ledger's budget, and a fresh
    ledger here would restart it. Nothing is reserved."""
    from dprelease.publish import foreign_releases

    known = ledger.run_ids()
    for found in foreign_releases(output_dir, known, spec.dataset.name, digest):
        raise LedgerError(
            f"{output_dir} holds release {found.release!r} of {found.why}, which the ledger in use ({ledger.id} at "
            f"{ledger.location.shown}) does not record: it was spent from the ledger {found.ledger}. One dataset has "
            f"one ledger: run with that ledger (--ledger, or `ledger:` in the spec). Nothing was spent.")


def over_budget_message(spec: Spec, plan: Plan) -> str:
    """Which budget the plan overruns, in ε (or ρ) and, for (ε, δ) terms, in δ, and by how much."""
    over = []
    total, cap = plan.total, plan.release_budget
    if total.amount > cap.amount:
        over.append(f"release budget by {fraction_text(total.amount - cap.amount)} {plan.symbol}")
    if isinstance(total, ApproxDP) and isinstance(cap, ApproxDP) and total.delta > cap.delta:
        over.append(f"release δ budget by {fraction_text(total.delta - cap.delta)}")
    after, life = plan.lifetime_spent_after, plan.lifetime_budget
    if after.amount > life.amount:
        over.append(f"lifetime budget of {spec.dataset.name} by "
                    f"{fraction_text(after.amount - life.amount)} {plan.ledger_symbol} "
                    f"(remaining {fraction_text(plan.lifetime_remaining.amount)})")
    if isinstance(after, ApproxDP) and isinstance(life, ApproxDP) and after.delta > life.delta:
        remaining = plan.lifetime_remaining
        assert isinstance(remaining, ApproxDP)
        over.append(f"lifetime δ budget of {spec.dataset.name} by "
                    f"{fraction_text(after.delta - life.delta)} "
                    f"(remaining {fraction_text(remaining.delta)})")
    needs = f"{plan.symbol} = {fraction_text(total.amount)}"
    if isinstance(plan.charge, ApproxDP):
        needs += f", δ = {fraction_text(plan.charge.delta)}"
    return f"the release needs {needs}, over the {' and the '.join(over)}. The data was not read; nothing spent."


def _rehearse_postprocessing(spec: Spec, plan: Plan) -> None:
    """Run post-processing once on all-zero measurements (no data): a spec that post-processing
    cannot handle fails here, before any budget is reserved, not after the noise is drawn."""
    from dprelease.postprocess import Invariants, postprocess_release

    scales = {(t.name, t.level): t.scale for t in plan.tables}
    invariants = {level: np.zeros(1 if level == ROOT else spec.column(level).size, dtype=np.int64)
                  for level in spec.invariant_levels}
    try:
        zeros = {(t.name, t.level): np.zeros((2, t.cells) if t.parts else t.cells, dtype=np.int64)
                 for t in plan.tables}
    except MemoryError:
        cells = sum(t.cells * (2 if t.parts else 1) for t in plan.tables)
        raise UserError(f"{spec.source}: the release's tables ({cells:,} cells in all) do not fit in this machine's "
                        "memory; publish fewer or coarser tables (limits.max_cells bounds a table's cells). "
                        "Nothing was spent.") from None
    try:
        postprocess_release(spec, zeros, scales, invariants=Invariants.from_totals(invariants))
        from dprelease.mechanisms.local import estimate_local

        for p in plan.local:  # the local estimates too: one answer per value, and all on one value
            estimate_local(np.ones(p.categories, dtype=np.int64), p.keep_probability)
            estimate_local(np.eye(p.categories, 1, dtype=np.int64).ravel() * 1000, p.keep_probability)
    except Exception as exc:  # noqa: BLE001 - whatever it is, nothing may be spent on it
        raise UserError(f"{spec.source}: post-processing cannot handle this spec ({type(exc).__name__}: {exc}); "
                        "nothing was spent. Please report it, with the spec.") from None


def _check_writable(output_dir: Path) -> None:
    for directory in (output_dir, output_dir / ".staging", output_dir / "_internal"):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
                pass
        except OSError as exc:
            raise UserError(f"cannot write to {directory}: {exc.strerror or exc}; choose another --output-dir. "
                            "Nothing was spent.") from None


def _check_prefect_server() -> None:
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return  # ephemeral mode
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=10) as response:
            if response.status == 200:
                return
    except OSError as exc:
        raise UserError(f"the Prefect server at PREFECT_API_URL={url} does not answer ({exc}); start it, or unset "
                        "PREFECT_API_URL to run without a server. Nothing was spent.") from None
    raise UserError(f"the Prefect server at PREFECT_API_URL={url} is not healthy. Nothing was spent.")


def _discard_stale_staging(spec: Spec, state: DatasetState | None, output_dir: Path) -> None:
    """Staged outputs of settled, unpublished runs (failed or voided): never to be published.

    A ``reserved`` run's staging is left alone: that run may be alive in another process.
    """
    settled = {r.run_id for r in state.runs if r.state in ("failed", "voided")} if state else set()
    for run_id in staged_runs(output_dir, spec.release):
        if run_id in settled:
            discard_staging(Layout(output_dir, spec.release, run_id))


def _recover_interrupted_publication(spec: Spec, plan: Plan, say: Say, out: Console) -> bool:
    """A committed run whose outputs are still staged: finish the rename it was interrupted in."""
    existing = plan.existing_run
    if existing is None or existing.state != "committed" or not existing.output_dir:
        return False
    layout = Layout(Path(existing.output_dir), spec.release, existing.run_id)
    if layout.final.exists() or not layout.staging.is_dir():
        return False
    move_into_place(layout)
    say(f"run {existing.run_id} was committed in the ledger but interrupted before its outputs were moved "
        "into place; publication completed now, with the noise drawn then (nothing new was drawn or spent)")
    _print_done(spec, plan, layout.final, out, spent_now=False)
    return True


def _settle_failure(run: ReleaseRun, exc: BaseException, say: Say) -> bool:
    """Settle the reservation of a failed run; True if the release is (or now gets) published."""
    if run.committed and not run.published:
        try:
            move_into_place(run.layout)
            run.published = True
        except OSError as move_error:
            say(f"the ledger commit of run {run.run_id} was made but its outputs could not be moved into place "
                f"({move_error}); they are in {run.layout.staging}, and the next `dprelease run` of this spec "
                "completes the move")
            return False
    if run.published:
        say(f"warning: release {run.spec.release} was published and committed; a step after publication failed: "
            f"{type(exc).__name__}: {exc}")
        return True
    try:
        spent = _settle_in_ledger(run, exc)
    finally:
        # whatever the ledger said (or if it could not be opened): the ledger recorded the draw
        # (drawing) before any noise existed, so staged noise is spent; it never stays on disk
        discard_staging(run.layout)
    if isinstance(exc, UserError):
        print(f"error: {exc}", file=sys.stderr)
    elif isinstance(exc, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
    else:
        import traceback

        traceback.print_exception(exc)
        print(f"internal error (a bug in dprelease, or the environment): {type(exc).__name__}: {exc}",
              file=sys.stderr)
    say(f"run {run.run_id} of {run.spec.release} failed at {run.stage}: {spent}. Nothing was published.")
    return False


def _settle_in_ledger(run: ReleaseRun, exc: BaseException) -> str:
    """Void (no noise drawn) or fail (drawn) the run's reservation; what happened, in words."""
    try:
        ledger = Ledger.open(run.location, create=False)
        if ledger is None:
            raise LedgerError(f"the ledger at {run.location.shown} is gone")
    except LedgerError as gone:
        return f"the ledger could not record the outcome ({gone}); its reservation still counts"
    try:
        if not run.noise_drawn:
            ledger.void(run.run_id, reason=f"failed before any noise was drawn ({type(exc).__name__})")
            return "the reservation was voided; nothing was spent"
        ledger.fail(run.run_id, reason=f"failed after noise was drawn ({type(exc).__name__})",
                    data_fingerprint=run.data_fingerprint)
        return (f"noise had been drawn, so {run.plan.ledger_symbol} = {fraction_text(run.plan.charge.amount)} stays spent "
                "(run recorded as failed); publish under a new release name")
    except LedgerError as settled:  # settled already (by an operator), or the ledger refused: say so
        return f"the ledger did not take this run's settlement ({settled})"
    finally:
        ledger.close()


def resolve_run(ledger: Ledger, run_id: str, action: str, reason: str, by: str | None) -> str:
    """Settle an unfinished run after a crash, only once its process is certainly gone (its
    lease: host, PID and start time, or a heartbeat from another host). ``void`` only when the
    ledger shows no noise drawn (state ``reserved``) and no output of the run ever appeared (no
    release directory of it, nothing staged). ``commit`` only when the release directory is in
    place with this run's manifest. ``fail`` records it as spent and never published, and
    removes its staged outputs."""
    dataset, record = ledger.find_run(run_id)
    if not record.unfinished:
        raise UserError(f"run {record.run_id} ({record.release}) is {record.state}, not an unfinished reservation")
    alive = ledger.lease_holder(record.run_id)
    if alive is not None:
        raise UserError(f"run {record.run_id} ({record.release}) may still be running: {alive}. A live run's "
                        "reservation is settled by the run itself; wait for it to end (or stop it), then resolve.")
    if record.output_dir is None:
        raise UserError(f"run {record.run_id} did not record its output directory; it cannot be checked")
    layout = Layout(Path(record.output_dir), record.release, record.run_id)
    manifest_path = layout.final / "manifest.json"
    published = False
    if manifest_path.is_file():
        import json

        try:
            published = json.loads(manifest_path.read_text("utf-8")).get("run_id") == record.run_id
        except (OSError, ValueError):
            published = False
    staged = layout.staging.exists()
    internal = layout.internal / "run.json"
    if internal.is_file():  # runs reserved before the ledger recorded drawing: their own record
        import json

        try:
            record_file = json.loads(internal.read_text("utf-8"))
            staged = staged or (record_file.get("run_id") == record.run_id and bool(record_file.get("noise_drawn")))
        except (OSError, ValueError):
            pass
    if action == "void":
        if record.state == "drawing":
            raise UserError(f"run {record.run_id} drew noise (the ledger recorded it before the first draw): its "
                            "budget is spent whatever the files show; use --commit (if published) or --fail")
        if published or staged:
            where = layout.final if published else layout.staging
            raise UserError(f"run {record.run_id} has outputs at {where}: its noise was drawn and written, so its "
                            "budget is spent; use --commit (if published) or --fail")
        ledger.void(record.run_id, reason=reason, by=by)
        return f"voided run {record.run_id} of {record.release} ({dataset}): its reservation no longer counts"
    if action == "commit":
        if not published:
            raise UserError(f"run {record.run_id} is not published: no {manifest_path} with its run id; use --fail or "
                            "--void")
        ledger.commit(record.run_id, by=by, reason=reason)
        return f"committed run {record.run_id} of {record.release} ({dataset}): published at {layout.final}"
    ledger.fail(record.run_id, reason=reason, by=by)  # recorded as spent first, then the files go
    discard_staging(layout)
    return (f"recorded run {record.run_id} of {record.release} ({dataset}) as failed: spent, never published"
            + (" (its staged outputs were removed)" if staged else ""))


def _print_done(spec: Spec, plan: Plan, final: Path, out: Console, spent_now: bool = True) -> None:
    local = f" and {len(spec.local_tables)} local" if spec.local_tables else ""
    out.print(f"published {spec.release}: {len(spec.tables)} tables{local}, {plan.symbol} = {both(plan.total.amount)} "
              f"→ {final}", markup=False)
    if spent_now:
        out.print(f"lifetime budget of {plan.dataset}: spent {both(plan.lifetime_spent_after.amount)} of "
                  f"{both(plan.lifetime_budget.amount)}, remaining {both(plan.lifetime_remaining_after.amount)}",
                  markup=False)
