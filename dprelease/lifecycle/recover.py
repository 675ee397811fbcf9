"""What happens to a half-finished run: the next run of its spec completes a publication whose
ledger commit was made (it was interrupted before the final rename) and deletes the staged
outputs of settled, unpublished runs; an operator settles a crashed run's reservation with
``dprelease ledger resolve`` (:func:`resolve_run`), only once its process is certainly gone.
"""

from __future__ import annotations

import json
from pathlib import Path

from dprelease.errors import UserError
from dprelease.ledger import DatasetState, Ledger
from dprelease.lifecycle.voice import Say
from dprelease.plan import Plan
from dprelease.publish.layout import Layout, discard_staging, move_into_place, staged_runs
from dprelease.spec import Spec


def complete_interrupted_publication(spec: Spec, plan: Plan, say: Say) -> Path | None:
    """A committed run whose outputs are still staged: finish the rename it was interrupted in;
    where the release now is, or None if there was nothing to finish."""
    existing = plan.existing_run
    if existing is None or existing.state != "committed" or not existing.output_dir:
        return None
    layout = Layout(Path(existing.output_dir), spec.release, existing.run_id)
    if layout.final.exists() or not layout.staging.is_dir():
        return None
    move_into_place(layout)
    say(f"run {existing.run_id} was committed in the ledger but interrupted before its outputs were moved "
        "into place; publication completed now, with the noise drawn then (nothing new was drawn or spent)")
    return layout.final


def discard_stale_staging(spec: Spec, state: DatasetState | None, output_dir: Path) -> None:
    """Staged outputs of settled, unpublished runs (failed or voided): never to be published.

    A ``reserved`` run's staging is left alone: that run may be alive in another process.
    """
    settled = {r.run_id for r in state.runs if r.state in ("failed", "voided")} if state else set()
    for run_id in staged_runs(output_dir, spec.release):
        if run_id in settled:
            discard_staging(Layout(output_dir, spec.release, run_id))


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
    published = _published_by(manifest_path, record.run_id)
    staged = layout.staging.exists() or _recorded_noise(layout.internal / "run.json", record.run_id)
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


def _published_by(manifest_path: Path, run_id: str) -> bool:
    """Whether the release directory holds this run's manifest."""
    if not manifest_path.is_file():
        return False
    try:
        return json.loads(manifest_path.read_text("utf-8")).get("run_id") == run_id
    except (OSError, ValueError):
        return False


def _recorded_noise(internal: Path, run_id: str) -> bool:
    """Runs reserved before the ledger recorded drawing: their own record says whether noise was drawn."""
    if not internal.is_file():
        return False
    try:
        record_file = json.loads(internal.read_text("utf-8"))
        return record_file.get("run_id") == run_id and bool(record_file.get("noise_drawn"))
    except (OSError, ValueError):
        return False
