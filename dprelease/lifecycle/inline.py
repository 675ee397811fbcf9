"""The inline orchestrator: a reserved run's steps called one after another in this process,
with no Prefect at all. The steps are the ones the Prefect flow runs as tasks
(:meth:`dprelease.lifecycle.release.ReleaseRun.steps`), so both publish the same release; what Prefect
adds (a flow run in its UI, the budget report as artifacts) is what inline runs do without.
"""

from __future__ import annotations

from dprelease.lifecycle.release import ReleaseRun


def run_inline(run: ReleaseRun) -> None:
    """Run every step of ``run`` here, in order; a step's failure propagates to the lifecycle,
    which settles the reservation (:mod:`dprelease.lifecycle.settle`)."""
    steps = run.steps()
    for i, step in enumerate(steps, 1):
        step.run(run)
        run.report_progress(step.done, i, len(steps))
