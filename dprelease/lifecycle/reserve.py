"""The reservation: one ledger transaction charges the plan against the dataset's lifetime
budget (a lost race is refused: 3 or 4, nothing spent) and returns the run's id; from here on
the budget counts until the run is settled. The run's state in this process is built from it.
"""

from __future__ import annotations

import dataclasses

from dprelease.accounting import ApproxDP, amount_text, fraction_text
from dprelease.errors import InternalError
from dprelease.ledger import Ledger, LocalCollection
from dprelease.lifecycle.prepare import Prepared
from dprelease.plan import Plan
from dprelease.publish.manifest import RunFacts
from dprelease.publish.layout import Layout
from dprelease.lifecycle.notices import context_warnings
from dprelease.lifecycle.release import ReleaseRun


def reserve(prepared: Prepared, ledger: Ledger) -> ReleaseRun:
    """Reserve the plan's charge in the ledger; the run, with the lifetime figures the
    reserving transaction saw (what its manifest states)."""
    request, plan = prepared.request, prepared.plan
    spec = request.spec
    local = _local_collections(plan, prepared.data_fingerprint)
    evaluations = ledger.evaluations_of(spec.dataset.name, prepared.data_fingerprint)
    # the spec's lifetime budget, recorded if the dataset is new and checked against the cap if not;
    # only when it is of the ledger terms' kind: a pure spec's ε says nothing about a ρ or (ε, δ) cap
    declared = spec.dataset.lifetime
    life = declared if declared is not None and declared.kind == plan.terms.kind else None
    granted = ledger.reserve(dataset=spec.dataset.name, release=spec.release,
                             charges=plan.ledger_charges(),
                             spec_fingerprint=plan.fingerprint, lifetime_from_spec=life,
                             local=local, data_fingerprint=prepared.data_fingerprint, approval=prepared.approval,
                             spec_path=str(spec.source.resolve()), output_dir=str(request.output_dir),
                             terms=plan.terms, respondents=prepared.respondents,
                             identity=prepared.checked.identity)
    state = ledger.state(spec.dataset.name)
    if state is None:
        raise InternalError(f"dataset {spec.dataset.name!r} is not in the ledger that just reserved run {granted.run_id}")
    # what the manifest states about the lifetime budget comes from the reserving transaction
    plan = dataclasses.replace(plan, lifetime_spent=granted.spent_before, lifetime_budget=granted.budget)
    location = request.location
    run = ReleaseRun(spec=spec, plan=plan, run_id=granted.run_id, location=location,
                     layout=Layout(request.output_dir, spec.release, granted.run_id), caps=state.caps,
                     data_digest=prepared.data_digest, data_fingerprint=prepared.data_fingerprint,
                     data_records=granted.records, data_identity=granted.sealed, key_check=ledger.key_check,
                     check_data_again=bool(local),
                     record=RunFacts(ledger_id=ledger.id, ledger_location=location.shown,
                                     ledger_chosen_by=location.how_chosen, ledger_birth=ledger.birth,
                                     approval=prepared.approval,
                                     evaluations=tuple(evaluations), warnings=tuple(context_warnings(spec, state))))
    run.timings["fingerprint"] = prepared.fingerprint_seconds
    run.timings["check"] = prepared.checked.check_seconds
    run.timings["identity"] = prepared.checked.identity_seconds
    return run


def reserved_line(run: ReleaseRun) -> str:
    """What was reserved, for whom, under which run id."""
    plan = run.plan
    charged = f"{plan.ledger_symbol} = {amount_text(plan.charge)}"
    if isinstance(plan.charge, ApproxDP):
        charged += f", δ = {fraction_text(plan.charge.delta)}"
    return f"reserved {charged} for {run.spec.release} (run {run.run_id})"


def _local_collections(plan: Plan, fingerprint: str) -> tuple[LocalCollection, ...]:
    """What the ledger records of the local tables, with the (keyed) fingerprint of the answers'
    file (so that new answers under an old collection name are refused rather than recorded as
    free)."""
    return tuple(dataclasses.replace(p.collection, answers=fingerprint) for p in plan.local)
