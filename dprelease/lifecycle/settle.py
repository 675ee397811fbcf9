"""The end of a reserved run. A published run was committed in the ledger by its publish step
(the commit comes between staging and the final rename); here its internal record is written
and the outcome said. A failed run's reservation is settled: voided if no noise was drawn,
otherwise recorded as failed with its budget spent; its staged outputs are deleted (a spent
draw must not stay around to be picked from). A run that failed after its ledger commit is
published all the same.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from dprelease.accounting import amount_text
from dprelease.errors import ExitCode, LedgerError, UserError
from dprelease.ledger import Ledger
from dprelease.lifecycle.voice import Voice
from dprelease.plan import Plan
from dprelease.publish.layout import discard_staging, move_into_place
from dprelease.lifecycle.release import ReleaseRun
from dprelease.spec import Spec


class RunFailed(Exception):
    """A reserved run failed and was not published; its error and its settlement were already
    said. ``exit_code``: 2 for a user error (e.g. the data), 1 for anything else."""

    def __init__(self, message: str, exit_code: ExitCode):
        super().__init__(message)
        self.exit_code = exit_code


def finish(run: ReleaseRun, voice: Voice) -> None:
    """A published run: its internal record written, what was published shown."""
    record = run.write_internal_record()
    for line in done_lines(run.spec, run.plan, run.layout.final):
        voice.show(line)
    for warning in run.postprocess_warnings:  # e.g. a fit's iteration cap reached: never passed silently
        voice.say(f"warning: post-processing: {warning}")
    voice.say(f"internal run record (not for publication): {record}")


def done_lines(spec: Spec, plan: Plan, final: Path, spent_now: bool = True) -> list[str]:
    """What was published, where, and (when this run spent it) the dataset's lifetime budget after it."""
    local = f" and {len(spec.local_tables)} local" if spec.local_tables else ""
    lines = [(f"published {spec.release}: {len(spec.tables)} tables{local}, {plan.symbol} = "
              f"{amount_text(plan.total, decimal=True)} → {final}")]
    if spent_now:
        lines.append(f"lifetime budget of {plan.dataset}: spent {amount_text(plan.lifetime_spent_after, decimal=True)} "
                     f"of {amount_text(plan.lifetime_budget, decimal=True)}, remaining "
                     f"{amount_text(plan.lifetime_remaining_after, decimal=True)}")
    return lines


def settle_failure(run: ReleaseRun, exc: BaseException, voice: Voice) -> None:
    """Settle the reservation of a failed run and write its internal record; raise
    :class:`RunFailed` unless the release is (or now gets) published."""
    published = _publish_or_settle(run, exc, voice)
    run.write_internal_record()
    if not published:
        raise RunFailed(f"run {run.run_id} of {run.spec.release} failed at {run.stage}",
                        ExitCode.INVALID if isinstance(exc, UserError) else ExitCode.INTERNAL) from None


def _publish_or_settle(run: ReleaseRun, exc: BaseException, voice: Voice) -> bool:
    """True if the release is (or now gets) published; otherwise the ledger settles the run."""
    if run.committed and not run.published:
        try:
            move_into_place(run.layout)
            run.published = True
        except OSError as move_error:
            voice.say(f"the ledger commit of run {run.run_id} was made but its outputs could not be moved into place "
                      f"({move_error}); they are in {run.layout.staging}, and the next `dprelease run` of this spec "
                      "completes the move")
            return False
    if run.published:
        voice.say(f"warning: release {run.spec.release} was published and committed; a step after publication "
                  f"failed: {type(exc).__name__}: {exc}")
        return True
    try:
        spent = _settle_in_ledger(run, exc)
    finally:
        # whatever the ledger said (or if it could not be opened): the ledger recorded the draw
        # (drawing) before any noise existed, so staged noise is spent; it never stays on disk
        discard_staging(run.layout)
    if isinstance(exc, UserError):
        voice.error(f"error: {exc}")
    elif isinstance(exc, KeyboardInterrupt):
        voice.error("interrupted")
    else:
        voice.error("".join(traceback.format_exception(exc)).rstrip("\n"))
        voice.error(f"internal error (a bug in dprelease, or the environment): {type(exc).__name__}: {exc}")
    voice.say(f"run {run.run_id} of {run.spec.release} failed at {run.stage}: {spent}. Nothing was published.")
    return False


def _settle_in_ledger(run: ReleaseRun, exc: BaseException) -> str:
    """Void (no noise drawn) or fail (drawn) the run's reservation; what happened, in words."""
    try:
        ledger = Ledger.open(run.location)
        if ledger is None:
            raise LedgerError(f"the ledger at {run.location.shown} is gone")
    except LedgerError as gone:
        return f"the ledger could not record the outcome ({gone}); its reservation still counts"
    with ledger:
        try:
            if not run.noise_drawn:
                ledger.void(run.run_id, reason=f"failed before any noise was drawn ({type(exc).__name__})")
                return "the reservation was voided; nothing was spent"
            ledger.fail(run.run_id, reason=f"failed after noise was drawn ({type(exc).__name__})",
                        data_fingerprint=run.data_fingerprint)
            return (f"noise had been drawn, so {run.plan.ledger_symbol} = {amount_text(run.plan.charge)} stays "
                    "spent (run recorded as failed); publish under a new release name")
        except LedgerError as settled:  # settled already (by an operator), or the ledger refused: say so
            return f"the ledger did not take this run's settlement ({settled})"
