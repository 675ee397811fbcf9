"""The lifetime privacy ledger: an append-only record of budget caps and spends.

One database (SQLite by default, PostgreSQL for a team) through SQLAlchemy Core.

* Rows are only ever inserted. A run's state changes by appending an event
  (``reserved`` → ``committed`` or ``voided``); a cap changes by appending a cap row with
  who and why. Spent amounts are never reduced or reset.
* Amounts are exact fractions stored as text (``"3/4"``). An (ε, δ) dataset (terms ``approx``)
  has a δ beside every cap and charge; the others have none (NULL). In Python every cap, charge
  and spend is a typed budget of the dataset's terms' kind (see ``records``); a budget of
  another kind is refused (TypeError), never recorded.
* Reservation is one serialised transaction (``BEGIN IMMEDIATE`` on SQLite, a row lock on
  PostgreSQL): two runs racing for the last of a budget cannot both win.
* A reserved run counts as spent until it is committed or explicitly voided. A run that
  failed after drawing noise is ``failed``: still spent (re-drawing until a result pleases
  would leak), never published.

This module is the :class:`Ledger` itself, the one way in. Its parts: the tables and opening
(``schema``), the record types (``records``), the pure rules (``policy``), reads inside a
transaction (``queries``) and the bodies of its write transactions (``transactions``).
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dprelease.accounting import ZCDP, ApproxDP, Budget, PureDP, Terms, amount_text, delta_of, fraction_text
from dprelease.errors import InternalError, LedgerError
from dprelease.ledger import keys, lease, queries, schema, state, transactions
from dprelease.ledger.location import LedgerLocation
from dprelease.ledger.policy import same_people_message
from dprelease.ledger.records import (
    Birth,
    AnswerSet,
    Approval,
    DatasetState,
    Evaluation,
    LocalCollection,
    Policy,
    RecordIdentity,
    Reservation,
    Respondents,
    RunRecord,
    current_user,
    now,
    of_terms,
)
from dprelease.ledger.schema import (
    approvals_t,
    evaluations_t,
    leases_t,
    meta_t,
    policies_t,
    runs_t,
)


class Ledger:
    """An open ledger. :meth:`open` never creates anything; :meth:`init` is the one way a ledger
    is born, with its :class:`~dprelease.ledger.records.Birth` recorded."""

    def __init__(self, location: LedgerLocation, engine: Engine, created: bool):
        self.location = location
        self.engine = engine
        self.created = created  # True when this call created the database
        self._id: str | None = None
        self._key: bytes | None = None
        self._meta_rows: dict[str, str] | None = None

    # -- opening

    @classmethod
    def open(cls, location: LedgerLocation) -> Ledger | None:
        """Open the ledger at ``location``; None where none exists (nothing is created).

        A location holds a ledger or nothing: an existing file that is empty, truncated or holds
        no ledger is refused (never taken for a fresh ledger), as is a location beside the key
        file of a ledger that was deleted or moved.
        """
        opened = schema.open_engine(location)
        return None if opened is None else cls(location, *opened)

    @classmethod
    def init(cls, location: LedgerLocation, birth: Birth) -> Ledger:
        """The ledger at ``location``, created now with ``birth`` recorded where none exists
        (``created`` says which). A SQLite ledger is built in a temporary file and linked into
        place whole; ledger tables are never added to a database that holds other tables."""
        opened = schema.open_engine(location, birth=replace(birth, where=location.shown))
        if opened is None:  # pragma: no cover - open_engine creates or raises
            raise LedgerError(f"no ledger could be created at {location.shown}")
        return cls(location, *opened)

    @property
    def key_check(self) -> str | None:
        """The check value of this ledger's fingerprint key (an HMAC of a constant: nothing of any
        data), which a run record carries so that another ledger's run tries only this key."""
        return self._meta("key_check")

    @property
    def birth(self) -> Birth | None:
        """How this ledger was born (None: before births were recorded)."""
        return schema.read_birth(self._all_meta())

    # -- identity

    def _all_meta(self) -> dict[str, str]:
        """``dprelease_meta``, read once: only creating or migrating the ledger writes it, and both
        happen before an open ledger exists."""
        if self._meta_rows is None:
            with self.engine.connect() as conn:
                self._meta_rows = dict(conn.execute(sa.select(meta_t.c.key, meta_t.c.value)).all())
        return self._meta_rows

    def _meta(self, key: str) -> str | None:
        return self._all_meta().get(key)

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

    def _fingerprint_key(self) -> bytes:
        if self._key is None:
            self._key = schema.read_checked_key(self.location, self.id, self._meta("key_check"))
        return self._key

    def fingerprint(self, plain: str) -> str:
        """The keyed fingerprint (see :mod:`dprelease.ledger.keys`) of a plain ``sha256:`` one."""
        return keys.keyed(self._fingerprint_key(), plain)

    def seal(self, plain: bytes) -> str:
        """``plain`` sealed under this ledger's key (:func:`dprelease.ledger.keys.seal`)."""
        return keys.seal(self._fingerprint_key(), self.id, plain)

    def unseal(self, sealed: str) -> bytes | None:
        return keys.unseal(self._fingerprint_key(), self.id, sealed)

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
            return state.datasets(conn)

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
        if state is None:
            raise InternalError("a dataset vanished inside its own transaction")
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

    def same_people(self, identity: RecordIdentity, dataset: str | None = None) -> tuple[str, str] | None:
        """(dataset, why) of a run, not voided, whose data is the same people as ``identity``'s
        (:meth:`RecordIdentity.matches`), among datasets outside ``dataset``'s family (None: any)."""
        keyed = self.fingerprint(identity.digest)
        with self.engine.connect() as conn:
            return queries.same_people(conn, identity, keyed, dataset, self.unseal)

    def output_dirs(self) -> list[str]:
        """Every output directory a run of this ledger published (or would publish) to."""
        with self.engine.connect() as conn:
            return queries.output_dirs(conn)

    def evaluations_of(self, dataset: str, data_fingerprint: str | None = None) -> list[Evaluation]:
        """Evaluations recorded under ``dataset``'s name or of the same (keyed) data."""
        with self.engine.connect() as conn:
            return state.evaluations(conn, dataset.partition("/")[0], data_fingerprint)

    def undeclared(self) -> dict[str, tuple[tuple[Policy, ...], tuple[Evaluation, ...]]]:
        """Policies and evaluations recorded under names that have no lifetime budget yet."""
        with self.engine.connect() as conn:
            return state.undeclared(conn)

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

    def register_answers(self, entries: tuple[AnswerSet, ...], *, by: str | None = None,
                         respondents: Respondents | None = None) -> tuple[AnswerSet, ...]:
        """Record the provenance of answer files (append-only, one transaction). Refused: answers
        of a dataset with central releases, or the data of a central release under any name (a
        column of confidential records is never local answers); answers already registered for
        the same collection and question; a registration without a statement of how.

        ``respondents``: the file's answers with their respondent ids (in memory only). A
        registration randomized afresh keeps their keyed, padded digests (what a later memo of
        it is checked against); a memoised one (``memo_of``) is refused unless every answer
        repeats the same respondent's in a registration of ``memo_of`` with digests
        (:mod:`dprelease.ledger.memos`)."""
        by = by or current_user()
        if not by.strip():
            raise LedgerError("say who registers the answers: --by NAME")
        at = now()
        done = tuple(replace(e, registered_by=by, registered_at=at) for e in entries)
        with self._write() as conn:
            transactions.register_answers(conn, done, respondents, self._fingerprint_key)
        return done

    def central_releases(self, dataset: str, data_fingerprint: str | None = None) -> list[tuple[str, str]]:
        """(dataset, release) of every run (not voided) that charged a central budget: of
        ``dataset``'s family by name, or of this (keyed) data under any name."""
        with self.engine.connect() as conn:
            return queries.central_releases(conn, dataset, data_fingerprint)


    def set_budget(self, dataset: str, budget: Budget, *, reason: str, by: str | None = None,
                   terms: Terms = Terms("pure"), keep_delta: bool = False) -> DatasetState:
        """Record a new lifetime cap for ``dataset`` (creating it if new, under ``terms``). Spends are
        untouched. ``budget`` is of the dataset's terms' kind (``ZCDP`` under zCDP terms; an
        ``ApproxDP`` with its δ under approx terms): another kind is refused with a TypeError
        (a bug in the caller), nothing written. With ``keep_delta`` an (ε, δ) cap keeps the δ of
        the cap it replaces, read inside the write transaction (a concurrent change of δ is
        never undone by a change of ε alone)."""
        if not isinstance(budget, (PureDP, ZCDP, ApproxDP)):
            raise TypeError(f"a lifetime cap is a budget (PureDP, ZCDP or ApproxDP), not {type(budget).__name__} "
                            f"{budget!r}")
        if budget.amount <= 0:
            raise LedgerError(f"a lifetime budget must be positive, not {amount_text(budget)}")
        delta = delta_of(budget)
        if delta is not None and not 0 < delta < 1:
            raise LedgerError(f"a lifetime δ lies strictly between 0 and 1, not {fraction_text(delta)}")
        if not reason.strip():
            raise LedgerError("say why the cap changes: --reason TEXT")
        by = by or current_user()
        with self._write() as conn:
            state = transactions.set_budget(conn, dataset, budget, reason=reason, by=by, terms=terms,
                                            keep_delta=keep_delta)
        if state is None:
            raise InternalError("a dataset vanished inside its own transaction")
        return state

    def reserve(self, *, dataset: str, release: str, charges: Sequence[tuple[str, Budget]],
                spec_fingerprint: str, lifetime_from_spec: Budget | None,
                spec_path: str | None = None, output_dir: str | None = None,
                terms: Terms = Terms("pure"), by: str | None = None,
                local: tuple[LocalCollection, ...] = (), data_fingerprint: str | None = None,
                approval: Approval | None = None, respondents: Respondents | None = None,
                identity: RecordIdentity | None = None) -> Reservation:
        """Reserve ``charges`` — (measurement, its charge) — for ``release`` atomically.

        Every charge, and the spec's lifetime budget (recorded as the cap of a dataset new to the
        ledger, else checked against its cap), is a budget of ``terms``' kind: ``PureDP``,
        ``ZCDP`` (ρ) under zCDP terms, ``ApproxDP`` with its δ under approx terms. Another kind is
        a bug in the caller: refused with a TypeError before anything is written.

        Refuses (nothing written) when the release already has a live run
        (:class:`AlreadyReleasedError`) or the lifetime budget cannot cover the charges, in ε
        and, under approx terms, in δ (:class:`OverBudgetError`). A dataset seen for the first
        time is created with the spec's lifetime budget. ``data_fingerprint`` (keyed) is refused
        when a live run of another dataset read the same data: one set of people, one lifetime
        budget, whatever the dataset is called; so is an ``identity`` (the data's records) that is
        the same people as the data of a live run of another dataset (rows reordered, another
        format, a column more or less, most records shared: :mod:`dprelease.data.identity`),
        recorded with the run (keyed, sealed). ``approval``: the one the run was checked against.
        ``respondents``: the answers of the run's data with their ids (in memory only); a
        memoised local collection is refused unless each repeats the same respondent's answer
        in the registration its ``memo_of``'s estimate read (:mod:`dprelease.ledger.memos`).
        """
        by = by or current_user()
        records = None if identity is None else self.fingerprint(identity.digest)
        sealed = None if identity is None else self.seal(identity.plain())
        typed = [_typed_charge(item, terms) for item in charges]
        if lifetime_from_spec is not None:
            of_terms(lifetime_from_spec, terms, "the spec's lifetime budget")
        run_id = uuid.uuid4().hex
        with self._write() as conn:
            transactions.lock_for_reservation(conn, dataset, data_fingerprint)
            if data_fingerprint is not None:
                other = queries.other_dataset_with(conn, dataset, data_fingerprint)
                if other is not None:
                    raise LedgerError(same_people_message((other, "the same file, byte for byte"), self.id))
            if identity is not None and records is not None:
                transactions.lock_records(conn)
                same = queries.same_people(conn, identity, records, dataset, self.unseal)
                if same is not None:
                    raise LedgerError(same_people_message(same, self.id))
            state = transactions.reserve(
                conn, run_id, dataset=dataset, release=release, charges=typed, spec_fingerprint=spec_fingerprint,
                lifetime_from_spec=lifetime_from_spec, spec_path=spec_path, output_dir=output_dir,
                terms=terms, by=by, local=local, data_fingerprint=data_fingerprint, approval=approval,
                respondents=respondents, key=self._fingerprint_key)
            if records is not None:
                transactions.record_identity(conn, run_id, dataset, records, sealed)
        return Reservation(run_id, state.spent, state.budget, records, sealed)

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
        with self._write() as conn:
            transactions.transition(conn, self.location, run_id, state, by=by, reason=reason,
                                    data_fingerprint=data_fingerprint)


def _typed_charge(item: object, terms: Terms) -> tuple[str, Budget]:
    """A charge ``(measurement, budget)`` with its budget of ``terms``' kind; TypeError otherwise."""
    if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
        raise TypeError(f"a charge is (measurement, budget), not {item!r}")
    return item[0], of_terms(item[1], terms, f"the charge of {item[0]!r}")
