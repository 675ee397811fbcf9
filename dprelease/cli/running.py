"""``dprelease run``: everything that can refuse a run happens before Prefect starts.

Order: validate → plan against the ledger → refuse (already released: 4; over budget: 3;
no data file: 2) → reserve (one transaction; a lost race is 3 or 4) → the Prefect flow.
After a failure the reservation is voided only if no noise was drawn; otherwise the run is
recorded as failed and its budget stays spent.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import typer
from rich.console import Console

from dprelease.accounting import fraction_text
from dprelease.cli.render import both, ledger_line
from dprelease.data import DataError
from dprelease.errors import AlreadyReleasedError, ExitCode, OverBudgetError
from dprelease.faults import checkpoint
from dprelease.ledger import Ledger, resolve_location
from dprelease.plan import plan_release
from dprelease.publish import Layout, discard_staging
from dprelease.release import ReleaseRun
from dprelease.spec import load_spec


def run_release_command(spec_path: Path, ledger_url: str | None, output_dir: Path, *,
                        say: Callable[[str], None], out: Console) -> None:
    spec = load_spec(spec_path)
    location = resolve_location(ledger_url, spec.ledger, spec.source.parent)
    ledger = Ledger.open(location, create=True)
    assert ledger is not None
    say(ledger_line(location, True, created=ledger.created))
    try:
        state = ledger.state(spec.dataset.name)
        plan = plan_release(spec, state)
        existing = plan.existing_run
        if existing is not None:
            where = (f"its outputs: {existing.output_dir}/{spec.release}" if existing.state == "committed"
                     and existing.output_dir else "see `dprelease ledger`")
            raise AlreadyReleasedError(f"release {spec.release!r} of dataset {spec.dataset.name!r} is already "
                                       f"{existing.state} (run {existing.run_id}, {existing.created_at}); "
                                       f"{where}. Nothing was spent.")
        output_dir = output_dir.resolve()
        if (output_dir / spec.release).exists():
            raise AlreadyReleasedError(f"{output_dir / spec.release} already exists; refusing to overwrite a "
                                       "published release. Nothing was spent.")
        if not plan.fits:
            over = [f"release budget by {fraction_text(plan.total_epsilon - plan.release_budget)}"
                    if not plan.fits_release else None,
                    f"lifetime budget of {spec.dataset.name} by "
                    f"{fraction_text(plan.lifetime_spent + plan.total_epsilon - plan.lifetime_budget)} "
                    f"(remaining {fraction_text(plan.lifetime_remaining)})" if not plan.fits_lifetime else None]
            raise OverBudgetError(f"the release needs ε = {fraction_text(plan.total_epsilon)}, over the "
                                  f"{' and the '.join(o for o in over if o)}. The data was not read; nothing spent.")
        if not spec.dataset.resolved_path.exists():
            raise DataError(f"{spec.source}: dataset.path {spec.dataset.path!r} does not exist (resolved to "
                            f"{spec.dataset.resolved_path}). Nothing was spent.")
        run_id = ledger.reserve(dataset=spec.dataset.name, release=spec.release,
                                charges=[(t.name, t.epsilon) for t in plan.tables],
                                spec_fingerprint=plan.fingerprint, lifetime_from_spec=spec.dataset.lifetime_epsilon,
                                spec_path=str(spec.source.resolve()), output_dir=str(output_dir))
        caps = ledger.state(spec.dataset.name).caps  # type: ignore[union-attr]
    finally:
        ledger.close()
    say(f"reserved ε = {fraction_text(plan.total_epsilon)} for {spec.release} (run {run_id})")
    run = ReleaseRun(spec=spec, plan=plan, run_id=run_id, location=location,
                     layout=Layout(output_dir, spec.release, run_id), caps=caps)
    checkpoint("reserved")
    try:
        from dprelease.orchestrate import run_release  # imports Prefect: only now

        run_release(run)
    except BaseException as exc:  # noqa: BLE001 - every failure must settle the reservation
        _settle_failure(run, exc, say)
        run.write_internal_record()
        raise typer.Exit(ExitCode.INVALID if isinstance(exc, DataError) else ExitCode.INTERNAL) from None
    record = run.write_internal_record()
    _print_done(run, out)
    say(f"internal run record (not for publication): {record}")


def _settle_failure(run: ReleaseRun, exc: BaseException, say: Callable[[str], None]) -> None:
    ledger = Ledger.open(run.location, create=False)
    assert ledger is not None
    try:
        if run.published:
            say(f"error after publication: {exc}")
            return
        if not run.noise_drawn:
            discard_staging(run.layout)
            ledger.void(run.run_id, reason=f"failed before any noise was drawn ({type(exc).__name__})")
            spent = "the reservation was voided; nothing was spent"
        else:
            ledger.fail(run.run_id, reason=f"failed after noise was drawn ({type(exc).__name__})",
                        data_fingerprint=run.data_fingerprint)
            spent = (f"noise had been drawn, so ε = {fraction_text(run.plan.total_epsilon)} stays spent "
                     "(run recorded as failed); publish under a new release name")
    finally:
        ledger.close()
    if isinstance(exc, DataError):
        print(f"error: {exc}", file=sys.stderr)
    elif isinstance(exc, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
    else:
        import traceback

        traceback.print_exception(exc)
        print(f"internal error (a bug in dprelease, or the environment): {type(exc).__name__}: {exc}",
              file=sys.stderr)
    say(f"run {run.run_id} of {run.spec.release} failed at {run.stage}: {spent}. Nothing was published.")


def _print_done(run: ReleaseRun, out: Console) -> None:
    plan = run.plan
    out.print(f"published {run.spec.release}: {len(plan.tables)} tables, ε = {both(plan.total_epsilon)} → "
              f"{run.layout.final}", markup=False)
    out.print(f"lifetime budget of {plan.dataset}: spent {both(plan.lifetime_spent + plan.total_epsilon)} of "
              f"{both(plan.lifetime_budget)}, remaining {both(plan.lifetime_remaining_after)}", markup=False)
