"""A dataset's whole state read from the ledger (:class:`~dprelease.ledger.records.DatasetState`:
its terms, caps, runs with their charges and events, local collections, evaluations and
policies), in plain SQL, from either connection that reads a ledger: SQLAlchemy's (inside the
transactions of :mod:`dprelease.ledger.store`, SQLite or PostgreSQL) or the standard library's
``sqlite3`` (:mod:`dprelease.ledger.reader`, which reads a SQLite ledger without importing
SQLAlchemy). One implementation, so both read the same state.

The model: rows are only ever inserted (see :mod:`dprelease.ledger.store`); a run's state is its
latest event; the dataset's budget is its latest cap; its spend composes the charges of the runs
whose state counts as spent (``LIVE_STATES``), in the terms' kind, exactly (``Fraction``).
Cost: one query per table, and one per run for its charges and its events.
Nothing here writes; the caller holds the transaction (and any lock).
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from typing import Any

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
    RunRecord,
    budget_from_row,
)

EVENTS = 'SELECT id, run_id, state, at, "by", reason, data_fingerprint FROM run_events WHERE run_id = :run_id ORDER BY id'


def rows(conn: Any, sql: str, **params: Any) -> list[Any]:
    """The rows of ``sql`` (``:name`` parameters), each with its columns as attributes, from a
    ``sqlite3`` connection or a SQLAlchemy one."""
    if isinstance(conn, sqlite3.Connection):
        cursor = conn.execute(sql, params)
        row = namedtuple("row", [d[0] for d in cursor.description])  # type: ignore[misc]
        return [row(*r) for r in cursor.fetchall()]
    import sqlalchemy as sa

    return list(conn.execute(sa.text(sql), params))


def events(conn: Any, run_id: str) -> list[Any]:
    return rows(conn, EVENTS, run_id=run_id)


def run_state(conn: Any, run_id: str) -> str:
    return events(conn, run_id)[-1].state


def dataset_state(conn: Any, dataset: str) -> DatasetState | None:
    found = rows(conn, "SELECT guarantee, change_one_record, unit_id, definition FROM datasets WHERE name = :name",
                 name=dataset)
    if not found:
        return None
    row = found[0]
    if row.guarantee is None:
        raise LedgerError(f"dataset {dataset!r} has ledger terms {row.definition!r}, which this version of dprelease "
                          "does not know")
    terms = Terms(row.guarantee, bool(row.change_one_record), row.unit_id)
    kind = terms.kind
    try:
        caps = tuple(CapChange(budget_from_row(kind, c.amount, c.delta), c.reason, c.set_by, c.set_at)
                     for c in rows(conn, "SELECT amount, delta, reason, set_by, set_at FROM budget_caps "
                                   "WHERE dataset = :dataset ORDER BY id", dataset=dataset))
    except ValueError as exc:  # an (ε, δ) cap without its δ: never written by dprelease
        raise LedgerError(f"dataset {dataset!r}: {exc} in the ledger; the ledger is damaged") from None
    if not caps:
        raise LedgerError(f"dataset {dataset!r} has no lifetime cap in the ledger; the ledger is damaged")
    runs = []
    for run in rows(conn, "SELECT run_id, release, spec_fingerprint, data_fingerprint, created_at, created_by, "
                    "output_dir, approved_by, approved_at FROM runs WHERE dataset = :dataset ORDER BY created_at",
                    dataset=dataset):
        charged = rows(conn, "SELECT table_name, amount, delta FROM charges WHERE run_id = :run_id ORDER BY id",
                       run_id=run.run_id)
        charges = tuple((c.table_name, _charge(kind, c.amount, c.delta)) for c in charged)
        its = events(conn, run.run_id)
        data = run.data_fingerprint or next((e.data_fingerprint for e in reversed(its) if e.data_fingerprint), None)
        runs.append(RunRecord(run.run_id, run.release, its[-1].state, compose((b for _, b in charges), kind),
                              charges, run.spec_fingerprint, data, run.created_at, run.created_by,
                              run.output_dir, its[-1].at, its[-1].reason, run.approved_by, run.approved_at))
    spent = compose((r.charge for r in runs if r.state in LIVE_STATES), kind)
    local = tuple(LocalRecord(r.collection, r.question, r.protocol, parse_exact(r.epsilon),
                              PureDP(parse_exact(r.charged)), bool(r.memoised), r.run_id, r.recorded_at,
                              r.recorded_by, r.answers)
                  for r in rows(conn, "SELECT collection, question, protocol, epsilon, charged, memoised, run_id, "
                                "recorded_at, recorded_by, answers FROM local_collections WHERE dataset = :dataset "
                                "ORDER BY id", dataset=dataset))
    base = dataset.partition("/")[0]  # a period shares its dataset's evaluations and policies
    return DatasetState(dataset, terms, caps[-1].budget, spent, caps, tuple(runs), local,
                        tuple(evaluations(conn, base)), policies(conn, base))


def evaluations(conn: Any, base: str, data_fingerprint: str | None = None) -> list[Evaluation]:
    """Evaluations recorded under ``base``'s name or, given one, of the same (keyed) data."""
    sql = ("SELECT dataset, data_fingerprint, evaluated_at, evaluated_by, trials, spec_path FROM evaluations "
           "WHERE dataset = :base" + (" OR data_fingerprint = :data" if data_fingerprint is not None else "")
           + " ORDER BY id")
    return [Evaluation(e.dataset, e.data_fingerprint, e.evaluated_at, e.evaluated_by, e.trials, e.spec_path)
            for e in rows(conn, sql, base=base, data=data_fingerprint)]


def _charge(kind: Kind, amount: str, delta: str | None) -> Budget:
    """A charge row as a budget of the terms' kind. An (ε, δ) charge written without its δ (by a
    caller of the untyped API of before, never by a run) charged no δ: every earlier version
    counted it as 0, and so does this one."""
    if kind == "approx" and delta is None:
        delta = "0"
    return budget_from_row(kind, amount, delta)


def policies(conn: Any, base: str) -> tuple[Policy, ...]:
    return tuple(Policy(p.dataset, p.policy, p.value, p.reason, p.set_by, p.set_at)
                 for p in rows(conn, "SELECT dataset, policy, value, reason, set_by, set_at FROM policies "
                               "WHERE dataset = :base ORDER BY id", base=base))


def datasets(conn: Any) -> list[str]:
    """The names of the datasets with a lifetime budget, in order."""
    return [r.name for r in rows(conn, "SELECT name FROM datasets ORDER BY name")]


def undeclared(conn: Any) -> dict[str, tuple[tuple[Policy, ...], tuple[Evaluation, ...]]]:
    """Policies and evaluations recorded under names that have no lifetime budget yet."""
    known = set(datasets(conn))
    names = {r.dataset for r in rows(conn, "SELECT dataset FROM policies")} | \
        {r.dataset for r in rows(conn, "SELECT dataset FROM evaluations")}
    out = {}
    for name in sorted(names - known):
        base = name.partition("/")[0]
        out[name] = (policies(conn, base), tuple(e for e in evaluations(conn, base) if e.dataset == name))
    return out


def answer_sets(conn: Any, dataset: str | None, answers: str | None) -> tuple[AnswerSet, ...]:
    """Registered answer sets, in order (with the id column of a registration kept per
    respondent): of ``dataset`` and/or of the (keyed) answers file."""
    where = [w for w, given in (("a.dataset = :dataset", dataset), ("a.answers = :answers", answers))
             if given is not None]
    sql = ("SELECT a.dataset, a.collection, a.question, a.protocol, a.epsilon, a.answers, a.how, a.memo_of, "
           "a.statement, a.registered_by, a.registered_at, k.id_column FROM answer_sets a "
           "LEFT OUTER JOIN respondent_sets k ON k.answer_set = a.id"
           + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY a.id")
    return tuple(AnswerSet(r.dataset, r.collection, r.question, r.protocol, parse_exact(r.epsilon), r.answers, r.how,
                           r.memo_of, r.statement, r.registered_by, r.registered_at, r.id_column)
                 for r in rows(conn, sql, dataset=dataset, answers=answers))
