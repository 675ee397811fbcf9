"""The first step of a run, before anything is reserved: load the spec, find (or, for a first
run, create) the dataset's ledger, plan against it, complete or clean up what earlier runs left
(:mod:`dprelease.lifecycle.recover`), refuse whatever can be refused without spending
(:mod:`dprelease.lifecycle.refusals`, which also takes the data's identity by its records), and
fingerprint the data. The ledger is only read here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from dprelease.accounting import fraction_text
from dprelease.errors import InternalError
from dprelease.ledger import Approval, Birth, Ledger, LedgerLocation, Respondents, resolve_location
from dprelease.ledger.records import current_user, now
from dprelease.lifecycle.memos import run_respondents
from dprelease.lifecycle.recover import (
    complete_interrupted_publication,
    discard_stale_staging,
)
from dprelease.lifecycle.refusals import (
    Checked,
    approval_of,
    refuse_bad_inputs,
    refuse_before_spending,
    refuse_foreign_outputs,
    refuse_links,
)
from dprelease.lifecycle.voice import Say
from dprelease.lifecycle.notices import large_delta_warnings, location_notes, refuse_ledger_choice
from dprelease.plan.split import apply as apply_split
from dprelease.plan import Plan, plan_release, with_provenance
from dprelease.spec import Engine, Spec, load_spec


@dataclass(frozen=True)
class Request:
    """What a run was asked to publish, and where: the spec, its ledger's location, the output directory."""

    spec: Spec
    location: LedgerLocation
    output_dir: Path  # resolved
    notes: tuple[str, ...] = ()  # warnings and notes to say once the ledger line is said


@dataclass(frozen=True)
class Prepared:
    """A run that passed every refusal: ready to be reserved."""

    request: Request
    plan: Plan
    approval: Approval | None
    data_digest: str  # plain SHA-256 of the data: this process's memory only
    data_fingerprint: str  # keyed with the ledger's key: what the ledger and the run record hold
    fingerprint_seconds: float
    checked: Checked  # the data's identity by its records (plain: memory only), and the checks' timings
    respondents: Respondents | None = None  # memoised local tables' answers and ids: this process's memory only


@dataclass(frozen=True)
class Completed:
    """Nothing to reserve: an earlier run's interrupted publication was completed now."""

    plan: Plan
    final: Path


def output_location(chosen: Path | None, spec: Spec) -> Path:
    """Where a release of ``spec`` lands, absolute: ``chosen`` (--output-dir) if given, else the
    spec's ``output_dir:`` (relative to the spec file), else ./outputs of the working directory."""
    if chosen is not None:
        return chosen.expanduser().resolve()
    return spec.output_path or (Path.cwd() / "outputs").resolve()


def load(spec_path: Path, ledger_url: str | None, output_dir: Path | None, *,
         run_date: datetime | None = None, dask_address: str | None = None) -> Request:
    """The spec (with the Dask cluster to count on, if given), where its ledger is, and the
    output directory (:func:`output_location`); warnings about a large δ or a variable the
    spec's pin overrode are kept in ``notes``, to be said after the ledger line."""
    spec = load_spec(spec_path, run_date=run_date)
    if dask_address is not None:  # where the counting runs: not part of the plan (or its approval)
        spec = dataclasses.replace(spec, engine=Engine(kind="dask", address=dask_address))
    output_dir = output_location(output_dir, spec)
    location = resolve_location(ledger_url, spec.ledger, spec.source.resolve().parent)
    notes = [f"warning: {spec_path}: {warning}" for warning in large_delta_warnings(spec)]
    return Request(spec, location, output_dir, tuple(notes + location_notes(spec, location)))


def open_ledger(request: Request, *, typed_ledger: bool = False) -> tuple[Ledger, bool]:
    """The dataset's ledger, open; and whether the data's path and engine were checked. No ledger
    is created, but where ``typed_ledger`` (``dprelease run --ledger LOCATION`` typed on the
    command line, for a spec that pins none) names a location that holds none: then the data's
    path and engine are checked first, and the ledger's birth is recorded (who, when, why).
    Anything else that finds no ledger, or a ``--ledger`` away from the spec's pin to a ledger
    that does not record the dataset, is refused with nothing created or spent."""
    spec, location = request.spec, request.location
    ledger = Ledger.open(location)
    if ledger is not None:
        try:
            refuse_ledger_choice(spec, location, ledger)
        except BaseException:
            ledger.close()
            raise
        return ledger, False
    if not (typed_ledger and location.may_create):
        refuse_ledger_choice(spec, location, None)
        raise InternalError(f"no ledger at {location.shown}, and no refusal")  # pragma: no cover
    refuse_bad_inputs(spec)
    birth = Birth(now(), current_user(), f"the first run of {spec.source.resolve()} (dataset {spec.dataset.name}, "
                  "a spec that pins no ledger) named this location with --ledger", "dprelease run --ledger")
    return Ledger.init(location, birth), True


def prepare(request: Request, ledger: Ledger, *, inputs_checked: bool, require_approval: bool,
            say: Say, ready: Callable[[], None] | None = None) -> Prepared | Completed:
    """Plan against the ledger, recover what earlier runs left, refuse (nothing spent) or return
    what the reservation needs; the data's fingerprint is taken here, before anything is spent."""
    spec, output_dir = request.spec, request.output_dir
    state = ledger.state(spec.dataset.name)  # (never a new one in the per-user default: open_ledger refused it)
    plan = plan_release(spec, state)
    if plan.split is not None:  # epsilon: auto: from here on the spec holds the planner's split (spec.json, manifest)
        spec = apply_split(spec, plan.split)
        request = dataclasses.replace(request, spec=spec)
    refuse_links(spec, output_dir)
    final = complete_interrupted_publication(spec, plan, say)
    if final is not None:
        return Completed(plan, final)
    discard_stale_staging(spec, state, output_dir)
    checked = refuse_before_spending(spec, plan, output_dir, inputs_checked=inputs_checked, ready=ready)
    approval = approval_of(spec, plan, ledger, require_approval, say)
    digest, fingerprint_seconds = checked.digest, checked.digest_seconds  # taken before the check read the data
    fingerprint = ledger.fingerprint(digest)
    refuse_foreign_outputs(spec, output_dir, ledger, digest, checked.identity)
    respondents = None
    if plan.local:  # local answers carry provenance: the data file must be registered answers
        plan = with_provenance(spec, plan, state, ledger.answer_sets(spec.dataset.name, fingerprint), fingerprint)
        _say_provenance(plan, say)
        respondents = run_respondents(spec, plan, state, ledger)  # a memo is checked at the reservation
    return Prepared(request, plan, approval, digest, fingerprint, fingerprint_seconds, checked, respondents)


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
