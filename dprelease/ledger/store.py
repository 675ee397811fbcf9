"""The lifetime privacy ledger: an append-only record of budget caps and spends.

One database (SQLite by default, PostgreSQL for a team) through SQLAlchemy Core.

* Rows are only ever inserted. A run's state changes by appending an event
  (``reserved`` → ``committed`` or ``voided``); a cap changes by appending a cap row with
  who and why. Spent amounts are never reduced or reset.
* Amounts are exact fractions stored as text (``"3/4"``). An (ε, δ) dataset (terms ``approx``)
  has a δ beside every cap and charge; the others have none (NULL).
* Reservation is one serialised transaction (``BEGIN IMMEDIATE`` on SQLite, a row lock on
  PostgreSQL): two runs racing for the last of a budget cannot both win.
* A reserved run counts as spent until it is committed or explicitly voided. A run that
  failed after drawing noise is ``failed``: still spent (re-drawing until a result pleases
  would leak), never published.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import replace
from fractions import Fraction
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dprelease.accounting import fraction_text
from dprelease.errors import AlreadyReleasedError, LedgerError, OverBudgetError
from dprelease.ledger import keys, lease, queries, schema
from dprelease.ledger.location import LedgerLocation
from dprelease.ledger.policy import (
    check_lifetime_matches,
    is_approx,
    local_charge,
    memo_honoured,
    over_lifetime_message,
    provenance_of,
    unregistered_message,
)
from dprelease.ledger.records import (
    REGISTERED,
    UNFINISHED,
    AnswerSet,
    Approval,
    DatasetState,
    Evaluation,
    LocalCollection,
    LocalRecord,
    Policy,
    Reservation,
    RunRecord,
    current_user,
    now,
)
from dprelease.ledger.schema import (
    answer_sets_t,
    approvals_t,
    caps_t,
    charges_t,
    datasets_t,
    evaluations_t,
    events_t,
    leases_t,
    local_t,
    meta_t,
    policies_t,
    runs_t,
)


class Ledger:
    """An open ledger. ``Ledger.open(location, create=False)`` never creates anything."""

    def __init__(self, location: LedgerLocation, engine: Engine, created: bool):
        self.location = location
        self.engine = engine
        self.created = created  # True when this call created the database
        self._id: str | None = None
        self._key: bytes | None = None

    # -- opening

    @classmethod
    def open(cls, location: LedgerLocation, *, create: bool) -> Ledger | None:
        """Open the ledger; with ``create=False`` return None where none exists yet.

        A location holds a ledger or nothing: a SQLite ledger is built in a temporary file and
        linked into place whole, so an existing file that is empty, truncated or holds no
        ledger is refused (never taken for a fresh ledger). Never adds ledger tables to a
        database that already holds other tables.
        """
        opened = schema.open_engine(location, create=create)
        return None if opened is None else cls(location, *opened)

    # -- identity

    def _meta(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(meta_t.c.value).where(meta_t.c.key == key)).first()
        return None if row is None else row[0]

    @property
    def id(self) -> str:
        """The random id this ledger was given when it was created (or migrated to schema 4)."""
        if self._id is None:
            self._id = self._meta("ledger_id")
            if self._id is None:
                raise LedgerError(f"the ledger at {self.location.shown} has no id; the ledger is damaged")
        return self._id

    @property
    def key_path(self):  # type: ignore[no-untyped-def]
        return keys.key_path(self.location, self.id)

    def fingerprint(self, plain: str) -> str:
        """The keyed fingerprint (see :mod:`dprelease.ledger.keys`) of a plain ``sha256:`` one."""
        if self._key is None:
            self._key = schema.read_checked_key(self.location, self.id, self._meta("key_check"))
        return keys.keyed(self._key, plain)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One serialised write transaction (see module docstring)."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(dprelease_write=True)
            with conn.begin():
                yield conn

    # -- reading

    def datasets(self) -> list[str]:
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(datasets_t.c.name).order_by(datasets_t.c.name))]

    def state(self, dataset: str) -> DatasetState | None:
        with self.engine.connect() as conn:
            return queries.dataset_state(conn, dataset)

    def find_run(self, run_id: str) -> tuple[str, RunRecord]:
        """(dataset, run) of the run whose id is ``run_id`` or starts with it (at least 8 characters)."""
        if len(run_id) < 8:
            raise LedgerError(f"give at least 8 characters of the run id, not {run_id!r}")
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs_t.c.run_id, runs_t.c.dataset)
                                .where(runs_t.c.run_id.startswith(run_id, autoescape=True))).all()
            if len(rows) != 1:
                raise LedgerError(f"no run {run_id!r} in the ledger at {self.location.shown}" if not rows else
                                  f"{len(rows)} runs start with {run_id!r}; give more of the id")
            state = queries.dataset_state(conn, rows[0].dataset)
        assert state is not None
        return rows[0].dataset, next(r for r in state.runs if r.run_id == rows[0].run_id)

    def approval(self, dataset: str, spec_fingerprint: str) -> Approval | None:
        """The latest approval of this exact plan (spec fingerprint) for ``dataset``, if any."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(approvals_t).where(approvals_t.c.dataset == dataset,
                                                            approvals_t.c.spec_fingerprint == spec_fingerprint)
                               .order_by(approvals_t.c.id.desc())).first()
        return None if row is None else Approval(row.dataset, row.release, row.spec_fingerprint, row.approved_by,
                                                 row.approved_at, row.spec_path)

    def approvals(self, dataset: str) -> list[Approval]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(approvals_t).where(approvals_t.c.dataset == dataset)
                                .order_by(approvals_t.c.id)).all()
        return [Approval(r.dataset, r.release, r.spec_fingerprint, r.approved_by, r.approved_at, r.spec_path)
                for r in rows]

    def approve(self, *, dataset: str, release: str, spec_fingerprint: str, by: str | None = None,
                spec_path: str | None = None) -> Approval:
        """Record that ``by`` approved the plan with this fingerprint (append-only)."""
        by = by or current_user()
        if not by.strip():
            raise LedgerError("say who approves: --by NAME")
        at = now()
        with self._write() as conn:
            conn.execute(approvals_t.insert().values(dataset=dataset, release=release, spec_fingerprint=spec_fingerprint,
                                                     spec_path=spec_path, approved_by=by, approved_at=at))
        return Approval(dataset, release, spec_fingerprint, by, at, spec_path)

    def runs_with_data(self, data_fingerprint: str) -> list[tuple[str, str]]:
        """(dataset, release) of every run, in any state but voided, that read this (keyed) data."""
        with self.engine.connect() as conn:
            return queries.runs_with_data(conn, data_fingerprint)

    def evaluations_of(self, dataset: str, data_fingerprint: str | None = None) -> list[Evaluation]:
        """Evaluations recorded under ``dataset``'s name or of the same (keyed) data."""
        base = dataset.partition("/")[0]
        with self.engine.connect() as conn:
            where = evaluations_t.c.dataset == base
            if data_fingerprint is not None:
                where = sa.or_(where, evaluations_t.c.data_fingerprint == data_fingerprint)
            rows = conn.execute(sa.select(evaluations_t).where(where).order_by(evaluations_t.c.id)).all()
        return [Evaluation(e.dataset, e.data_fingerprint, e.evaluated_at, e.evaluated_by, e.trials, e.spec_path)
                for e in rows]

    def undeclared(self) -> dict[str, tuple[tuple[Policy, ...], tuple[Evaluation, ...]]]:
        """Policies and evaluations recorded under names that have no lifetime budget yet."""
        with self.engine.connect() as conn:
            known = {r[0] for r in conn.execute(sa.select(datasets_t.c.name))}
            names = {r[0] for r in conn.execute(sa.select(policies_t.c.dataset))} | \
                {r[0] for r in conn.execute(sa.select(evaluations_t.c.dataset))}
        out = {}
        for name in sorted(names - known):
            evaluations = tuple(self.evaluations_of(name))
            out[name] = (self.policies(name), tuple(e for e in evaluations if e.dataset == name))
        return out

    def run_ids(self) -> set[str]:
        with self.engine.connect() as conn:
            return {r[0] for r in conn.execute(sa.select(runs_t.c.run_id))}

    # -- writing

    def record_evaluation(self, *, dataset: str, data_fingerprint: str, trials: int, spec_path: str | None = None,
                          by: str | None = None) -> Evaluation:
        """Record that ``dataset``'s data was evaluated in the open (nothing spent; append-only)."""
        at, by = now(), by or current_user()
        with self._write() as conn:
            conn.execute(evaluations_t.insert().values(dataset=dataset.partition("/")[0],
                                                       data_fingerprint=data_fingerprint, spec_path=spec_path,
                                                       trials=trials, evaluated_at=at, evaluated_by=by))
        return Evaluation(dataset, data_fingerprint, at, by, trials, spec_path)

    def set_policy(self, dataset: str, policy: str, value: str, *, reason: str, by: str | None = None) -> Policy:
        """Record a decision about ``dataset`` (and its periods): ``approval`` ``required`` or
        ``optional``. Append-only; the latest holds."""
        if (policy, value) not in (("approval", "required"), ("approval", "optional")):
            raise LedgerError(f"unknown policy {policy}={value}")
        if not reason.strip():
            raise LedgerError("say why: --reason TEXT")
        at, by = now(), by or current_user()
        base = dataset.partition("/")[0]
        with self._write() as conn:
            conn.execute(policies_t.insert().values(dataset=base, policy=policy, value=value, reason=reason,
                                                    set_by=by, set_at=at))
        return Policy(base, policy, value, reason, by, at)

    def policies(self, dataset: str) -> tuple[Policy, ...]:
        with self.engine.connect() as conn:
            return queries.policies(conn, dataset.partition("/")[0])

    # -- answers under local DP (their provenance)

    def answer_sets(self, dataset: str | None = None, answers: str | None = None) -> tuple[AnswerSet, ...]:
        """Registered answer sets, in order: of ``dataset`` and/or of the (keyed) answers file."""
        with self.engine.connect() as conn:
            return queries.answer_sets(conn, dataset, answers)

    def register_answers(self, entries: tuple[AnswerSet, ...], *, by: str | None = None) -> tuple[AnswerSet, ...]:
        """Record the provenance of answer files (append-only, one transaction). Refused: answers
        of a dataset with central releases, or the data of a central release under any name (a
        column of confidential records is never local answers); answers already registered for
        the same collection and question; a registration without a statement of how."""
        by = by or current_user()
        if not by.strip():
            raise LedgerError("say who registers the answers: --by NAME")
        at = now()
        done = tuple(replace(e, registered_by=by, registered_at=at) for e in entries)
        with self._write() as conn:
            if not sa.inspect(conn).has_table(answer_sets_t.name):  # a pre-release schema-4 ledger
                answer_sets_t.create(conn)
            for e in done:
                _lock_dataset(conn, e.dataset.partition("/")[0])
                if not e.answers.startswith(keys.PREFIX):
                    raise LedgerError("an answers file is registered by its keyed fingerprint (Ledger.fingerprint)")
                if e.how == REGISTERED and not (e.statement or "").strip():
                    raise LedgerError("say who randomized the answers, and how: --statement TEXT")
                _refuse_confidential_answers(conn, e.dataset, e.answers, e.question)
                twin = next((a for a in queries.answer_sets(conn, e.dataset, e.answers)
                             if (a.collection, a.question) == (e.collection, e.question)), None)
                if twin is not None:
                    raise LedgerError(f"these answers to {e.question!r} are already registered for collection "
                                      f"{e.collection!r} of dataset {e.dataset!r} ({twin.how}, {twin.registered_at[:19]} "
                                      f"by {twin.registered_by})")
                used = conn.execute(sa.select(local_t.c.answers).where(
                    local_t.c.dataset == e.dataset, local_t.c.collection == e.collection,
                    local_t.c.question == e.question)).first()
                if used is not None and used[0] != e.answers:  # estimated (and published) from other answers
                    raise LedgerError(f"collection {e.collection!r} of {e.question!r} in dataset {e.dataset!r} was already "
                                      "estimated from other answers: one collection has one set of answers. Answers "
                                      "collected anew are a new collection: give them a new collection: name in the "
                                      "spec (each respondent's ε of it is recorded too). Nothing was registered.")
                conn.execute(answer_sets_t.insert().values(
                    dataset=e.dataset, collection=e.collection, question=e.question, protocol=e.protocol,
                    epsilon=fraction_text(e.epsilon), answers=e.answers, memo_of=e.memo_of, how=e.how,
                    statement=e.statement, registered_by=by, registered_at=at))
        return done

    def central_releases(self, dataset: str, data_fingerprint: str | None = None) -> list[tuple[str, str]]:
        """(dataset, release) of every run (not voided) that charged a central budget: of
        ``dataset``'s family by name, or of this (keyed) data under any name."""
        with self.engine.connect() as conn:
            return queries.central_releases(conn, dataset, data_fingerprint)


    def set_budget(self, dataset: str, epsilon: Fraction, *, reason: str, by: str | None = None,
                   definition: str = "pure", delta: Fraction | None = None) -> DatasetState:
        """Record a new lifetime cap for ``dataset`` (creating it if new). Spends are untouched.
        An approx dataset's cap has a δ (kept as it was when ``delta`` is None); others have none."""
        if epsilon <= 0:
            raise LedgerError(f"a lifetime budget must be positive, not {fraction_text(epsilon)}")
        if delta is not None and not 0 < delta < 1:
            raise LedgerError(f"a lifetime δ lies strictly between 0 and 1, not {fraction_text(delta)}")
        if not reason.strip():
            raise LedgerError("say why the cap changes: --reason TEXT")
        by = by or current_user()
        with self._write() as conn:
            _lock_dataset(conn, dataset)
            state = queries.dataset_state(conn, dataset)
            if state is None:
                _insert_dataset(conn, dataset, definition, by)
            terms = state.definition if state else definition
            if is_approx(terms):
                delta = delta if delta is not None else state.delta_budget if state else None
                if delta is None:
                    raise LedgerError(f"dataset {dataset!r} has (ε, δ) terms: its cap needs a δ too (--delta D)")
            elif delta is not None:
                raise LedgerError(f"dataset {dataset!r} has {terms!r} terms, whose budgets have no δ")
            conn.execute(caps_t.insert().values(dataset=dataset, epsilon=fraction_text(epsilon),
                                                delta=None if delta is None else fraction_text(delta),
                                                reason=reason, set_by=by, set_at=now()))
            state = queries.dataset_state(conn, dataset)
        assert state is not None
        return state

    def reserve(self, *, dataset: str, release: str,
                charges: list[tuple[str, Fraction]] | list[tuple[str, Fraction, Fraction | None]],
                spec_fingerprint: str, lifetime_from_spec: Fraction | None,
                spec_path: str | None = None, output_dir: str | None = None,
                definition: str = "pure", by: str | None = None,
                lifetime_delta_from_spec: Fraction | None = None,
                local: tuple[LocalCollection, ...] = (), data_fingerprint: str | None = None,
                approval: Approval | None = None) -> Reservation:
        """Reserve ``charges`` — (measurement, ε or ρ[, δ]) — for ``release`` atomically.

        Refuses (nothing written) when the release already has a live run
        (:class:`AlreadyReleasedError`) or the lifetime budget cannot cover the charges, in ε
        and, under approx terms, in δ (:class:`OverBudgetError`). A dataset seen for the first
        time is created with the spec's lifetime budget. ``data_fingerprint`` (keyed) is refused
        when a live run of another dataset read the same data: one set of people, one lifetime
        budget, whatever the dataset is called. ``approval``: the one the run was checked against.
        """
        by = by or current_user()
        full = [(c[0], c[1], c[2] if len(c) > 2 else None) for c in charges]  # type: ignore[misc]
        total = sum((e for _, e, _ in full), Fraction(0))
        total_delta = sum((d for _, _, d in full if d is not None), Fraction(0))
        if is_approx(definition) and lifetime_delta_from_spec is None and lifetime_from_spec is not None:
            raise LedgerError(f"dataset {dataset!r} has (ε, δ) terms: its lifetime budget needs a δ")
        run_id = uuid.uuid4().hex
        with self._write() as conn:
            _lock_dataset(conn, dataset.partition("/")[0])  # a dataset and its periods: one writer
            if "/" in dataset:
                _lock_dataset(conn, dataset)
            _check_partition_family(conn, dataset)
            if data_fingerprint is not None:
                _lock_dataset(conn, "data:" + data_fingerprint)  # two names, one data: one writer at a time
                other = queries.other_dataset_with(conn, dataset, data_fingerprint)
                if other is not None:
                    raise LedgerError(
                        f"this data was already released as dataset {other!r} in this ledger (id {self.id}); the "
                        f"same people have one lifetime budget, whatever the dataset is called. Release it as "
                        f"dataset.name: {other.partition('/')[0]} (its budget is `dprelease ledger --dataset "
                        f"{other}`). Nothing was spent.")
            state = queries.dataset_state(conn, dataset)
            if state is None:
                if lifetime_from_spec is None:
                    raise LedgerError(f"dataset {dataset!r} is new to this ledger and the spec declares no "
                                      "dataset.lifetime_budget; declare one")
                _insert_dataset(conn, dataset, definition, by)
                conn.execute(caps_t.insert().values(dataset=dataset, epsilon=fraction_text(lifetime_from_spec),
                                                    delta=None if lifetime_delta_from_spec is None
                                                    else fraction_text(lifetime_delta_from_spec),
                                                    reason=f"initial cap from {spec_path or 'the spec'}",
                                                    set_by=by, set_at=now()))
                state = queries.dataset_state(conn, dataset)
                assert state is not None
            check_lifetime_matches(state, lifetime_from_spec, lifetime_delta_from_spec)
            if state.definition != definition:  # checked again here: two first releases may race
                raise LedgerError(f"dataset {dataset!r} is in the ledger under {state.definition!r} terms; this run was "
                                  f"planned under {definition!r}. Plan it again")
            live = state.live_run(release)
            if live is not None:
                raise AlreadyReleasedError(
                    f"release {release!r} of dataset {dataset!r} is already {live.state} in the ledger "
                    f"(run {live.run_id}, {live.created_at}); choose a new release name")
            if state.spent + total > state.budget:
                raise OverBudgetError(over_lifetime_message(state, total))
            if state.delta_budget is not None and state.delta_spent + total_delta > state.delta_budget:
                raise OverBudgetError(over_lifetime_message(state, total_delta, delta=True))
            if state.delta_budget is None and total_delta:
                raise LedgerError(f"dataset {dataset!r} has {state.definition!r} terms, which have no δ to charge")
            _check_answers(conn, dataset, local, bool(full), data_fingerprint)  # local answers carry provenance
            at = now()
            conn.execute(runs_t.insert().values(run_id=run_id, dataset=dataset, release=release,
                                                spec_fingerprint=spec_fingerprint, spec_path=spec_path,
                                                output_dir=output_dir, created_at=at, created_by=by,
                                                data_fingerprint=data_fingerprint,
                                                approved_by=approval.approved_by if approval else None,
                                                approved_at=approval.approved_at if approval else None))
            if full:  # a release of local tables only charges no central budget
                conn.execute(charges_t.insert(), [{"run_id": run_id, "table_name": t, "epsilon": fraction_text(e),
                                                   "delta": None if d is None else fraction_text(d)}
                                                  for t, e, d in full])
            conn.execute(events_t.insert().values(run_id=run_id, state="reserved", at=at, by=by))
            holder = lease.this_process()
            conn.execute(leases_t.insert().values(run_id=run_id, host=holder.host, pid=holder.pid, start=holder.start,
                                                  renewed_at=at))
            records = state.local
            for asked in local:  # recorded now: the respondents spent it when they answered
                charged, known = local_charge(records, asked)
                if known:
                    continue
                conn.execute(local_t.insert().values(
                    dataset=dataset, collection=asked.collection, question=asked.question, protocol=asked.protocol,
                    epsilon=fraction_text(asked.epsilon), charged=fraction_text(charged), memoised=asked.memoised,
                    answers=asked.answers, run_id=run_id, recorded_at=at, recorded_by=by))
                records += (LocalRecord(asked.collection, asked.question, asked.protocol, asked.epsilon, charged,
                                        asked.memoised, run_id, at, by, asked.answers),)
        return Reservation(run_id, state.spent, state.budget, state.delta_spent, state.delta_budget)

    def commit(self, run_id: str, *, data_fingerprint: str | None = None, by: str | None = None,
               reason: str | None = None) -> None:
        """Mark a reserved (or drawing) run as published. Its charges stay spent for ever."""
        self._transition(run_id, "committed", by=by, reason=reason, data_fingerprint=data_fingerprint)

    def fail(self, run_id: str, *, reason: str, data_fingerprint: str | None = None,
             by: str | None = None) -> None:
        """Record that a run drew noise and then failed: spent, never published."""
        self._transition(run_id, "failed", by=by, reason=reason, data_fingerprint=data_fingerprint)

    def void(self, run_id: str, *, reason: str, by: str | None = None) -> None:
        """Release a reservation whose noise was never drawn (an operator's recorded decision).
        A run in the ``drawing`` state is never voided: its noise exists."""
        if not reason.strip():
            raise LedgerError("say why the reservation is voided: --reason TEXT")
        self._transition(run_id, "voided", by=by, reason=reason)

    def begin_drawing(self, run_id: str) -> None:
        """Record, before the first noise draw, that the run is drawing noise: one transaction that
        also checks the reservation is still live. From then on the run can only be committed
        or failed (spent). Raises LedgerError when the reservation was settled without the run
        (voided or failed by an operator): the run must stop before drawing."""
        self._transition(run_id, "drawing", by=None, reason=None)

    def lease_holder(self, run_id: str) -> str | None:
        """Why the run holding ``run_id``'s reservation may still be alive, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(leases_t).where(leases_t.c.run_id == run_id)).first()
        if row is None or row.ended_at is not None:
            return None
        return lease.may_be_alive(lease.Holder(row.host, row.pid, row.start), row.renewed_at)

    def renew_lease(self, run_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(leases_t.update().where(leases_t.c.run_id == run_id, leases_t.c.ended_at.is_(None))
                         .values(renewed_at=now()))

    def end_lease(self, run_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(leases_t.update().where(leases_t.c.run_id == run_id).values(ended_at=now()))

    def _transition(self, run_id: str, state: str, *, by: str | None, reason: str | None,
                    data_fingerprint: str | None = None) -> None:
        allowed = {"drawing": ("reserved",), "voided": ("reserved",)}.get(state, UNFINISHED)
        with self._write() as conn:
            row = conn.execute(sa.select(runs_t.c.dataset).where(runs_t.c.run_id == run_id)).first()
            if row is None:
                raise LedgerError(f"no run {run_id!r} in the ledger at {self.location.shown}")
            _lock_dataset(conn, row[0])
            current = queries.run_state(conn, run_id)
            if current not in allowed:
                why = (" (noise was drawn: its budget is spent; settle it with --fail, or --commit if it was "
                       "published)" if current == "drawing" else "")
                raise LedgerError(f"run {run_id} is {current}; only a {' or '.join(allowed)} run can become "
                                  f"{state}{why}")
            conn.execute(events_t.insert().values(run_id=run_id, state=state, at=now(), by=by or current_user(),
                                                  reason=reason, data_fingerprint=data_fingerprint))


def _lock_dataset(conn: Connection, dataset: str) -> None:
    """Serialise writers of one dataset. SQLite holds a database write lock already."""
    if conn.dialect.name == "postgresql":
        # a transaction-scoped advisory lock also covers a dataset that has no row yet
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": "dprelease:" + dataset})


def _check_partition_family(conn: Connection, dataset: str) -> None:
    """A dataset's periods have budgets of their own (``name/COLUMN=value``, declared disjoint in
    people) only if nothing spends from the whole dataset's budget (``name``) and every period is
    cut by the same column; otherwise one person's releases would spread over unlinked budgets."""
    base, _, part = dataset.partition("/")
    names = [r[0] for r in conn.execute(sa.select(datasets_t.c.name).where(sa.or_(
        datasets_t.c.name == base, datasets_t.c.name.startswith(base + "/", autoescape=True))))]
    others = [n for n in names if n != dataset]
    if part:
        if base in others:
            raise LedgerError(f"dataset {base!r} has releases from its one lifetime budget, so its periods cannot have "
                              "budgets of their own: remove disjoint_units (every period then spends from that budget)")
        column = part.partition("=")[0]
        clash = [n for n in others if n.partition("/")[2].partition("=")[0] != column]
        if clash:
            raise LedgerError(f"dataset {base!r} has per-period budgets by another column ({clash[0]!r}): periods of one "
                              "dataset are cut by one column, or the same people would have two budgets")
    elif any("/" in n for n in others):
        per = next(n for n in others if "/" in n)
        raise LedgerError(f"dataset {base!r} has per-period budgets ({per!r}, declared disjoint in people): a release "
                          "from its whole budget would not be covered by them; release by period too: declare the same "
                          "partition with disjoint_units (each period spends from its own recorded budget)")


def _insert_dataset(conn: Connection, dataset: str, definition: str, by: str) -> None:
    conn.execute(datasets_t.insert().values(name=dataset, definition=definition, created_at=now(),
                                            created_by=by))


# ---------------------------------------------------------------- answers under local DP: provenance


def _refuse_confidential_answers(conn: Connection, dataset: str, answers: str | None, question: str) -> None:
    """A column of a dataset with central releases (by name, or the same data under any name) is
    never accepted as local answers: its exact counts would go out with central ε = 0."""
    central = queries.central_releases(conn, dataset, answers)
    if central:
        name, release = central[0]
        same = "this dataset" if name.partition("/")[0] == dataset.partition("/")[0] else "this very data file"
        raise LedgerError(
            f"dataset {name!r} ({same}) has central releases (release {release!r}, charged to its lifetime budget): "
            f"its records are confidential data, never answers the respondents randomized, so {question!r} is not "
            f"read as local answers. Publish {question!r} as a central table of dataset {name!r} (charged to its "
            "lifetime budget; `dprelease ledger set-budget` records a cap change), or estimate it from a registered "
            "collection of answers the respondents randomized themselves. Nothing was spent.")


def _check_answers(conn: Connection, dataset: str, local: tuple[LocalCollection, ...], central: bool,
                   data_fingerprint: str | None) -> None:
    """In the reservation's transaction: every local table's answers are registered (collection,
    question, protocol, answers file) and come from no dataset with central releases; a memoised
    collection's registration says its answers came from that memo. A central release is refused
    over a file registered as local answers, and in a dataset that holds local collections."""
    if local and central:
        raise LedgerError(
            f"this release of dataset {dataset!r} has central tables and kind: local tables over one data file: a file "
            "of answers the respondents randomized is never also released as confidential records. Publish the local "
            "tables from the registered answers file in a release of their own, and the central tables from the "
            "confidential data under its own dataset. Nothing was spent.")
    if central:
        base = dataset.partition("/")[0]
        held = conn.execute(sa.select(local_t.c.dataset, local_t.c.collection).where(sa.or_(
            local_t.c.dataset == base, local_t.c.dataset.startswith(base + "/", autoescape=True)))).first()
        registered = queries.answer_sets(conn, None, data_fingerprint) if data_fingerprint else ()
        if held is not None or registered:
            name, collection = held if held is not None else (registered[0].dataset, registered[0].collection)
            raise LedgerError(
                f"dataset {name!r} holds local collections (collection {collection!r}: answers the respondents "
                f"randomized{', this very file' if held is None else ''}): its answers are estimated by kind: local "
                "tables, never released as confidential records. Release central tables from the confidential data "
                "under its own dataset. Nothing was spent.")
        return
    for asked in local:
        _refuse_confidential_answers(conn, dataset, asked.answers, asked.question)
        found = provenance_of(queries.answer_sets(conn, dataset, asked.answers), asked) if asked.answers else None
        if found is None:
            raise LedgerError(unregistered_message(dataset, asked))
        if asked.memoised and not memo_honoured(found, asked):
            raise LedgerError(
                f"collection {asked.collection!r} says memoised: true with memo_of: {asked.memo_of!r}, but its "
                f"registered answers were {'produced from the memo of ' + repr(found.memo_of) if found.memo_of else 'randomized afresh'}"
                f" ({found.how}, {found.registered_at[:19]} by {found.registered_by}): they are a fresh collection, "
                "charged its ε. Plan the run again.")
