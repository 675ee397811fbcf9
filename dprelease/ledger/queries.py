"""Reading the ledger inside a transaction: a dataset's whole state, a run's state, policies,
answer sets, and which runs read some data or charged a central budget. Functions of an open
Connection (the caller holds the transaction and any lock); nothing here writes.
"""

from __future__ import annotations

import hmac
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dprelease.accounting import Budget, Kind, PureDP, Terms, compose, parse_exact
from dprelease.errors import LedgerError
from dprelease.ledger.records import (
    LIVE_STATES,
    AnswerSet,
    CapChange,
    DatasetState,
    Evaluation,
    LocalRecord,
    Policy,
    RecordIdentity,
    RunRecord,
    budget_from_row,
)
from dprelease.ledger.schema import (
    answer_sets_t,
    caps_t,
    charges_t,
    datasets_t,
    evaluations_t,
    events_t,
    identities_t,
    local_t,
    policies_t,
    respondent_sets_t,
    runs_t,
)


def run_state(conn: Connection, run_id: str) -> str:
    return _events(conn, run_id)[-1].state


def _events(conn: Connection, run_id: str) -> list:  # type: ignore[type-arg]
    return list(conn.execute(sa.select(events_t).where(events_t.c.run_id == run_id).order_by(events_t.c.id)))


def dataset_state(conn: Connection, dataset: str) -> DatasetState | None:
    row = conn.execute(sa.select(datasets_t).where(datasets_t.c.name == dataset)).first()
    if row is None:
        return None
    if row.guarantee is None:
        raise LedgerError(f"dataset {dataset!r} has ledger terms {row.definition!r}, which this version of dprelease "
                          "does not know")
    terms = Terms(row.guarantee, bool(row.change_one_record), row.unit_id)
    kind = terms.kind
    try:
        caps = tuple(CapChange(budget_from_row(kind, c.amount, c.delta), c.reason, c.set_by, c.set_at)
                     for c in conn.execute(sa.select(caps_t).where(caps_t.c.dataset == dataset).order_by(caps_t.c.id)))
    except ValueError as exc:  # an (ε, δ) cap without its δ: never written by dprelease
        raise LedgerError(f"dataset {dataset!r}: {exc} in the ledger; the ledger is damaged") from None
    if not caps:
        raise LedgerError(f"dataset {dataset!r} has no lifetime cap in the ledger; the ledger is damaged")
    runs = []
    for run in conn.execute(sa.select(runs_t).where(runs_t.c.dataset == dataset).order_by(runs_t.c.created_at)):
        rows = list(conn.execute(sa.select(charges_t).where(charges_t.c.run_id == run.run_id).order_by(charges_t.c.id)))
        charges = tuple((c.table_name, _charge(kind, c.amount, c.delta)) for c in rows)
        events = _events(conn, run.run_id)
        data = run.data_fingerprint or next((e.data_fingerprint for e in reversed(events) if e.data_fingerprint), None)
        runs.append(RunRecord(run.run_id, run.release, events[-1].state, compose((b for _, b in charges), kind),
                              charges, run.spec_fingerprint, data, run.created_at, run.created_by,
                              run.output_dir, events[-1].at, events[-1].reason, run.approved_by, run.approved_at))
    spent = compose((r.charge for r in runs if r.state in LIVE_STATES), kind)
    local = tuple(LocalRecord(r.collection, r.question, r.protocol, parse_exact(r.epsilon),
                              PureDP(parse_exact(r.charged)), bool(r.memoised), r.run_id, r.recorded_at,
                              r.recorded_by, r.answers)
                  for r in conn.execute(sa.select(local_t).where(local_t.c.dataset == dataset).order_by(local_t.c.id)))
    base = dataset.partition("/")[0]  # a period shares its dataset's evaluations and policies
    evaluations = tuple(Evaluation(e.dataset, e.data_fingerprint, e.evaluated_at, e.evaluated_by, e.trials, e.spec_path)
                        for e in conn.execute(sa.select(evaluations_t).where(evaluations_t.c.dataset == base)
                                              .order_by(evaluations_t.c.id)))
    return DatasetState(dataset, terms, caps[-1].budget, spent, caps, tuple(runs), local, evaluations,
                        policies(conn, base))


def _charge(kind: Kind, amount: str, delta: str | None) -> Budget:
    """A charge row as a budget of the terms' kind. An (ε, δ) charge written without its δ (by a
    caller of the untyped API of before, never by a run) charged no δ: every earlier version
    counted it as 0, and so does this one."""
    if kind == "approx" and delta is None:
        delta = "0"
    return budget_from_row(kind, amount, delta)


def policies(conn: Connection, base: str) -> tuple[Policy, ...]:
    return tuple(Policy(p.dataset, p.policy, p.value, p.reason, p.set_by, p.set_at)
                 for p in conn.execute(sa.select(policies_t).where(policies_t.c.dataset == base)
                                       .order_by(policies_t.c.id)))


def _read_data(data_fingerprint: str):  # type: ignore[no-untyped-def]
    """Runs that read this (keyed) data: recorded at their reservation (schema 4) or, before
    that, at their commit or failure (the only events that carry it)."""
    recorded = sa.select(events_t.c.run_id).where(events_t.c.data_fingerprint == data_fingerprint)
    return sa.or_(runs_t.c.data_fingerprint == data_fingerprint, runs_t.c.run_id.in_(recorded))


def _not_voided():  # type: ignore[no-untyped-def]
    return runs_t.c.run_id.not_in(sa.select(events_t.c.run_id).where(events_t.c.state == "voided"))


def runs_with_data(conn: Connection, data_fingerprint: str) -> list[tuple[str, str]]:
    """(dataset, release) of every run, in any state but voided, that read this (keyed) data."""
    rows = conn.execute(sa.select(runs_t.c.dataset, runs_t.c.release).where(
        _read_data(data_fingerprint), _not_voided())).all()
    return sorted({(r[0], r[1]) for r in rows})


def other_dataset_with(conn: Connection, dataset: str, data_fingerprint: str) -> str | None:
    """A dataset (not ``dataset`` or one of its periods) with a live run that read this data."""
    base = dataset.partition("/")[0]
    return next((d for d, _ in runs_with_data(conn, data_fingerprint) if d.partition("/")[0] != base), None)


def identities(conn: Connection, base: str | None) -> list[tuple[str, str, str]]:
    """(dataset, keyed records digest, sealed sketch) of the data of every run not voided, once
    per dataset and data, of datasets outside ``base``'s family (periods included; None: all)."""
    if not sa.inspect(conn).has_table(identities_t.name):
        return []
    live = identities_t.c.run_id.not_in(sa.select(events_t.c.run_id).where(events_t.c.state == "voided"))
    pairs = set(conn.execute(sa.select(identities_t.c.dataset, identities_t.c.records).where(live)).all())
    if base is not None:
        pairs = {(d, r) for d, r in pairs if d.partition("/")[0] != base}
    sketches = {}
    for d, r, sketch in conn.execute(sa.select(identities_t.c.dataset, identities_t.c.records, identities_t.c.sketch)
                                     .where(identities_t.c.sketch.is_not(None)).order_by(identities_t.c.run_id)):
        if (d, r) in pairs:
            sketches.setdefault((d, r), sketch)
    return sorted((d, r, s) for (d, r), s in sketches.items())


def same_people(conn: Connection, identity: RecordIdentity, keyed: str, dataset: str | None,
                unseal: Callable[[str], bytes | None]) -> tuple[str, str] | None:
    """(dataset, why) of the first stored identity, of a run not voided, of a dataset outside
    ``dataset``'s family (None: any), that is the same people as ``identity`` (whose records'
    digest is ``keyed``): the same records' digest, or what its sealed sketch (``unseal``-ed)
    matches. A sketch that cannot be compared (not unsealed, or of an earlier version of the
    identity) is passed over: that run's data is recognised by its bytes only."""
    for other, records, sealed in identities(conn, None if dataset is None else dataset.partition("/")[0]):
        if hmac.compare_digest(records, keyed):
            return other, "the same records exactly"
        plain = unseal(sealed)
        try:
            why = None if plain is None else identity.matches(plain)
        except ValueError:  # an identity of another version
            why = None
        if why is not None:
            return other, why
    return None


def has_sketch(conn: Connection, dataset: str, records: str) -> bool:
    """Whether a sketch of these records of ``dataset`` is stored already."""
    return conn.execute(sa.select(identities_t.c.run_id).where(
        identities_t.c.dataset == dataset, identities_t.c.records == records,
        identities_t.c.sketch.is_not(None))).first() is not None


def output_dirs(conn: Connection) -> list[str]:
    """Every output directory a run of this ledger published (or would publish) to."""
    return sorted({r[0] for r in conn.execute(sa.select(runs_t.c.output_dir).where(runs_t.c.output_dir.is_not(None)))})


def answer_sets(conn: Connection, dataset: str | None, answers: str | None) -> tuple[AnswerSet, ...]:
    if not sa.inspect(conn).has_table(answer_sets_t.name):  # a pre-release schema-4 ledger: none yet
        return ()
    kept = respondent_sets_t  # schema 6: the id column of a registration kept per respondent
    query = (sa.select(answer_sets_t, kept.c.id_column).select_from(
        answer_sets_t.outerjoin(kept, kept.c.answer_set == answer_sets_t.c.id)).order_by(answer_sets_t.c.id))
    if dataset is not None:
        query = query.where(answer_sets_t.c.dataset == dataset)
    if answers is not None:
        query = query.where(answer_sets_t.c.answers == answers)
    return tuple(AnswerSet(r.dataset, r.collection, r.question, r.protocol, parse_exact(r.epsilon), r.answers, r.how,
                           r.memo_of, r.statement, r.registered_by, r.registered_at, r.id_column)
                 for r in conn.execute(query))


def central_releases(conn: Connection, dataset: str, data_fingerprint: str | None) -> list[tuple[str, str]]:
    """(dataset, release) of the runs, not voided, that charged a central budget: of the dataset's
    family (the dataset and its periods) by name, or that read this (keyed) data under any name."""
    base = dataset.partition("/")[0]
    where = sa.or_(runs_t.c.dataset == base, runs_t.c.dataset.startswith(base + "/", autoescape=True))
    if data_fingerprint is not None:
        where = sa.or_(where, _read_data(data_fingerprint))
    rows = conn.execute(sa.select(runs_t.c.dataset, runs_t.c.release).where(
        where, runs_t.c.run_id.in_(sa.select(charges_t.c.run_id)), _not_voided())).all()
    return sorted({(r[0], r[1]) for r in rows})
