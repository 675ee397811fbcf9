"""The lifecycle of a release run: everything that can refuse a run happens before anything is spent.

:func:`run_spec` runs its steps in order; the CLI's ``dprelease run`` and the scheduled
Prefect flow both call it, each with its own :class:`Voice` (printing, or logging).

1. :mod:`~dprelease.lifecycle.prepare` — load the spec, plan against the ledger, refuse
   (already released: 4; over budget: 3; not approved: 5; no data file, unwritable output
   directory, data that does not fit the spec (checked before the reservation and before Prefect
   is readied: :func:`~dprelease.lifecycle.refusals.refuse_bad_data`), unreachable Prefect
   server: 2), fingerprint the data;
2. :mod:`~dprelease.lifecycle.reserve` — one ledger transaction (a lost race is 3 or 4);
3. :mod:`~dprelease.lifecycle.execute` — count, measure, post-process and publish, run by the
   orchestrator (the Prefect flow), the ledger commit made before the final rename;
4. :mod:`~dprelease.lifecycle.settle` — after a failure the reservation is voided only if no
   noise was drawn; otherwise the run is recorded as failed and its budget stays spent;
5. :mod:`~dprelease.lifecycle.recover` — a run interrupted between its ledger commit and the
   final rename is completed by the next run of the same spec; a crashed run's reservation is
   settled by an operator (:func:`resolve_run`).

Every file and directory a run creates (outputs, staging, internal record, ledger) is
owner-only: publishing a release to others is a deliberate copy.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dprelease.host import files

if TYPE_CHECKING:
    from dprelease.lifecycle.execute import Orchestrator
    from dprelease.lifecycle.recover import resolve_run
    from dprelease.lifecycle.refusals import budget_overruns, over_budget_message
    from dprelease.lifecycle.settle import RunFailed
    from dprelease.lifecycle.voice import Voice

__all__ = ["Orchestrator", "RunFailed", "Voice", "budget_overruns", "over_budget_message",
           "resolve_run", "run_spec"]
# importing the package (as `dprelease.lifecycle.notices` does, for validate and plan) imports none of
# the steps (the ledger's SQLAlchemy, the data's pyarrow, post-processing's SciPy): each on first use
_LAZY = {"Orchestrator": "execute", "RunFailed": "settle", "Voice": "voice", "budget_overruns": "refusals",
         "over_budget_message": "refusals", "resolve_run": "recover"}


def __getattr__(name: str) -> Any:  # PEP 562
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"dprelease.lifecycle.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'dprelease.lifecycle' has no attribute {name!r}")


def run_spec(spec_path: Path, ledger_url: str | None, output_dir: Path | None, *, orchestrate: Orchestrator,
             voice: Voice, require_approval: bool = False, run_date: datetime | None = None,
             dask_address: str | None = None, typed_ledger: bool = False) -> None:
    """Publish the release a spec describes, or refuse with nothing spent (a user error), or
    settle a failed run and raise :class:`RunFailed`. ``orchestrate`` runs a reserved run's
    steps (``dprelease.serve.orchestrate.run_release``). ``output_dir`` None: the spec's ``output_dir:``,
    else ./outputs (:func:`dprelease.lifecycle.prepare.output_location`). ``typed_ledger``: the
    ``ledger_url`` was typed on ``dprelease run``'s command line, the one source (for a spec
    that pins none) from which a run may create its ledger; a scheduled run never does."""
    previous = os.umask(files.UMASK)  # besides dprelease.host.files: what third-party code creates (SQLite's journal)
    try:
        _run_spec(spec_path, ledger_url, output_dir, orchestrate=orchestrate, voice=voice,
                  require_approval=require_approval, run_date=run_date, dask_address=dask_address,
                  typed_ledger=typed_ledger)
    finally:
        os.umask(previous)


def _run_spec(spec_path: Path, ledger_url: str | None, output_dir: Path | None, *, orchestrate: Orchestrator,
              voice: Voice, require_approval: bool, run_date: datetime | None, dask_address: str | None,
              typed_ledger: bool) -> None:
    from dprelease.errors import UserError
    from dprelease.lifecycle.execute import execute
    from dprelease.lifecycle.notices import ledger_line, opened_notes
    from dprelease.lifecycle.prepare import Completed, load, open_ledger, prepare
    from dprelease.lifecycle.reserve import reserve, reserved_line
    from dprelease.lifecycle.settle import done_lines, finish

    request = load(spec_path, ledger_url, output_dir, run_date=run_date, dask_address=dask_address)
    try:
        ledger, inputs_checked = open_ledger(request, typed_ledger=typed_ledger)
    except BaseException:
        for note in request.notes:
            voice.say(note)
        raise
    with ledger:
        voice.say(ledger_line(request.location, True, created=ledger.created, ledger_id=ledger.id))
        for note in (*request.notes, *opened_notes(request.spec, request.location, ledger)):
            voice.say(note)
        try:
            prepared = prepare(request, ledger, inputs_checked=inputs_checked, require_approval=require_approval,
                               ready=orchestrate.ready, say=voice.say)
        except UserError as refused:
            if ledger.created:  # by this run's typed --ledger: said, since a refusal otherwise means nothing was made
                refused.args = (f"{refused} The ledger this run created at {request.location.shown} stays (empty: "
                                "nothing was reserved in it); every lifetime budget of the datasets it records "
                                "starts there.", *refused.args[1:])
            raise
        if isinstance(prepared, Completed):
            for line in done_lines(request.spec, prepared.plan, prepared.final, spent_now=False):
                voice.show(line)
            return
        run = reserve(prepared, ledger)
    voice.say(reserved_line(run))
    execute(run, orchestrate, voice)
    finish(run, voice)
