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

import getpass
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dprelease.accounting import fraction_text, parse_exact
from dprelease.errors import AlreadyReleasedError, LedgerError, OverBudgetError, first_line
from dprelease.ledger.location import LedgerLocation

SCHEMA_VERSION = 3  # 2: δ of caps and charges (approx terms), longer terms; 3: local collections, approvals
LIVE_STATES = ("reserved", "committed", "failed")  # states whose charges count as spent

metadata = sa.MetaData()
meta_t = sa.Table("dprelease_meta", metadata,
                  sa.Column("key", sa.String(64), primary_key=True),
                  sa.Column("value", sa.Text, nullable=False))
datasets_t = sa.Table("datasets", metadata,
                      sa.Column("name", sa.String(100), primary_key=True),
                      sa.Column("definition", sa.String(200), nullable=False),
                      sa.Column("created_at", sa.String(40), nullable=False),
                      sa.Column("created_by", sa.String(200), nullable=False))
caps_t = sa.Table("budget_caps", metadata,
                  sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                  sa.Column("dataset", sa.String(100), sa.ForeignKey("datasets.name"), nullable=False),
                  sa.Column("epsilon", sa.String(200), nullable=False),
                  sa.Column("delta", sa.String(200)),
                  sa.Column("reason", sa.Text, nullable=False),
                  sa.Column("set_by", sa.String(200), nullable=False),
                  sa.Column("set_at", sa.String(40), nullable=False))
runs_t = sa.Table("runs", metadata,
                  sa.Column("run_id", sa.String(64), primary_key=True),
                  sa.Column("dataset", sa.String(100), sa.ForeignKey("datasets.name"), nullable=False),
                  sa.Column("release", sa.String(100), nullable=False),
                  sa.Column("spec_fingerprint", sa.String(80), nullable=False),
                  sa.Column("spec_path", sa.Text),
                  sa.Column("output_dir", sa.Text),
                  sa.Column("created_at", sa.String(40), nullable=False),
                  sa.Column("created_by", sa.String(200), nullable=False),
                  sa.Index("ix_runs_dataset_release", "dataset", "release"))
charges_t = sa.Table("charges", metadata,
                     sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                     sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False),
                     sa.Column("table_name", sa.String(100), nullable=False),
                     sa.Column("epsilon", sa.String(200), nullable=False),
                     sa.Column("delta", sa.String(200)))
local_t = sa.Table("local_collections", metadata,
                   sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                   sa.Column("dataset", sa.String(100), sa.ForeignKey("datasets.name"), nullable=False),
                   sa.Column("collection", sa.String(100), nullable=False),
                   sa.Column("question", sa.String(100), nullable=False),
                   sa.Column("protocol", sa.String(200), nullable=False),
                   sa.Column("epsilon", sa.String(200), nullable=False),  # per respondent, a rational upper bound
                   sa.Column("charged", sa.String(200), nullable=False),  # 0 when memoised or already recorded
                   sa.Column("memoised", sa.Boolean, nullable=False),
                   sa.Column("answers", sa.String(80)),  # fingerprint of the file of answers
                   sa.Column("run_id", sa.String(64), nullable=False),
                   sa.Column("recorded_at", sa.String(40), nullable=False),
                   sa.Column("recorded_by", sa.String(200), nullable=False),
                   sa.UniqueConstraint("dataset", "collection", "question"))
approvals_t = sa.Table("approvals", metadata,
                       sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                       sa.Column("dataset", sa.String(100), nullable=False),  # may not be in datasets yet
                       sa.Column("release", sa.String(100), nullable=False),
                       sa.Column("spec_fingerprint", sa.String(80), nullable=False),
                       sa.Column("spec_path", sa.Text),
                       sa.Column("approved_by", sa.String(200), nullable=False),
                       sa.Column("approved_at", sa.String(40), nullable=False),
                       sa.Index("ix_approvals_fingerprint", "dataset", "spec_fingerprint"))
events_t = sa.Table("run_events", metadata,
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False),
                    sa.Column("state", sa.String(16), nullable=False),
                    sa.Column("at", sa.String(40), nullable=False),
                    sa.Column("by", sa.String(200), nullable=False),
                    sa.Column("reason", sa.Text),
                    sa.Column("data_fingerprint", sa.String(80)))


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (containers): fall back to the uid
        return f"uid:{os.getuid()}"


@dataclass(frozen=True, slots=True)
class CapChange:
    epsilon: Fraction
    reason: str
    set_by: str
    set_at: str
    delta: Fraction | None = None  # approx terms only


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    release: str
    state: str
    epsilon: Fraction
    charges: tuple[tuple[str, Fraction], ...]
    spec_fingerprint: str
    data_fingerprint: str | None
    created_at: str
    created_by: str
    output_dir: str | None = None
    state_at: str | None = None  # when the current state was reached
    reason: str | None = None  # of the latest state change, if one was given
    delta: Fraction = Fraction(0)  # the sum of its charges' δ (approx terms)

    @property
    def unfinished(self) -> bool:
        return self.state == "reserved"


@dataclass(frozen=True, slots=True)
class LocalCollection:
    """One question asked in one collection under local DP: what a release's local table declares."""

    collection: str
    question: str  # the column of randomized answers
    protocol: str  # protocol and ε ("k_rr:1", "coin_flip"): a memoised collection must match the first
    epsilon: Fraction  # per respondent, a rational upper bound
    memoised: bool = False
    answers: str | None = None  # fingerprint of the collected answers (None when planning without data)
    memo_of: str | None = None  # memoised: the collection whose randomized answers are repeated


@dataclass(frozen=True, slots=True)
class LocalRecord:
    collection: str
    question: str
    protocol: str
    epsilon: Fraction
    charged: Fraction
    memoised: bool
    run_id: str
    recorded_at: str
    recorded_by: str
    answers: str | None = None


def local_charge(records: tuple[LocalRecord, ...], asked: LocalCollection) -> tuple[Fraction, bool]:
    """(ε charged per respondent, whether the collection is already recorded) for ``asked``.

    Collections of the same people compose: a new collection of a question costs its ε again.
    A memoised collection repeats, for respondents held in the memo of the collection its
    ``memo_of`` names (``dprelease randomize --memo`` admits no others), their randomized
    answer from that collection, whatever their answer is now: its reports are a function of
    that draw, so it costs nothing new. A collection already recorded with the same answers
    (estimated again in a later release) costs nothing new; with other or unknown answers it is
    refused. Raises LedgerError for a memoised collection whose ``memo_of`` is not a recorded,
    non-memoised collection of the question with the same protocol.
    """
    for r in records:
        if (r.collection, r.question) == (asked.collection, asked.question):
            if r.protocol != asked.protocol:
                raise LedgerError(f"collection {asked.collection!r} of {asked.question!r} is in the ledger with protocol "
                                  f"{r.protocol!r}, not {asked.protocol!r}; one collection has one protocol")
            if asked.answers is not None and r.answers != asked.answers:  # unknown (older) counts as different
                raise LedgerError(f"collection {asked.collection!r} of {asked.question!r} is in the ledger with other "
                                  "answers (another data file, or one recorded without a fingerprint): a new "
                                  "collection needs a new collection: name, and costs its ε")
            return Fraction(0), True
    if not asked.memoised:
        return asked.epsilon, False
    first = next((r for r in records if (r.collection, r.question) == (asked.memo_of, asked.question)), None)
    if first is None or first.memoised:
        raise LedgerError(f"collection {asked.collection!r} says memoised: true with memo_of: {asked.memo_of!r}, but "
                          f"{asked.memo_of!r} is not a recorded, non-memoised collection of {asked.question!r}; record "
                          "it first, or set memoised: false (charged again)")
    if first.protocol != asked.protocol:
        raise LedgerError(f"collection {asked.collection!r} is memoised on {first.collection!r}, whose protocol is "
                          f"{first.protocol!r}, not {asked.protocol!r}: a reused answer keeps its protocol")
    return Fraction(0), False


@dataclass(frozen=True, slots=True)
class Approval:
    """A reviewer's approval of one plan: the spec fingerprint it covers, who and when."""

    dataset: str
    release: str
    spec_fingerprint: str
    approved_by: str
    approved_at: str
    spec_path: str | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """A granted reservation and the lifetime state it was checked against (in its transaction)."""

    run_id: str
    spent_before: Fraction
    budget: Fraction
    delta_spent_before: Fraction = Fraction(0)  # approx terms only
    delta_budget: Fraction | None = None


@dataclass(frozen=True, slots=True)
class DatasetState:
    name: str
    definition: str
    budget: Fraction
    spent: Fraction
    caps: tuple[CapChange, ...]
    runs: tuple[RunRecord, ...] = field(default=())
    delta_budget: Fraction | None = None  # approx terms: the lifetime δ
    delta_spent: Fraction = Fraction(0)
    local: tuple[LocalRecord, ...] = ()  # collections under local DP, in order

    @property
    def local_epsilon(self) -> Fraction:
        """Each respondent's ε over every recorded local collection (sequential composition)."""
        return sum((r.charged for r in self.local), Fraction(0))

    @property
    def remaining(self) -> Fraction:
        return self.budget - self.spent

    @property
    def delta_remaining(self) -> Fraction | None:
        return None if self.delta_budget is None else self.delta_budget - self.delta_spent

    def live_run(self, release: str) -> RunRecord | None:
        """The reserved or committed run of ``release``, if any."""
        return next((r for r in self.runs if r.release == release and r.state in LIVE_STATES), None)

    @property
    def data_versions(self) -> int:
        return len({r.data_fingerprint for r in self.runs if r.data_fingerprint})


class Ledger:
    """An open ledger. ``Ledger.open(location, create=False)`` never creates anything."""

    def __init__(self, location: LedgerLocation, engine: Engine, created: bool):
        self.location = location
        self.engine = engine
        self.created = created  # True when this call created the database

    # -- opening

    @classmethod
    def open(cls, location: LedgerLocation, *, create: bool) -> Ledger | None:
        """Open the ledger; with ``create=False`` return None where none exists yet.

        Never adds ledger tables to a database that already holds other tables.
        """
        path = location.sqlite_path
        created = False
        try:
            if path is not None and not path.exists():
                if not create:
                    return None
                _create_private_file(path)
                created = True
        except OSError as exc:
            raise LedgerError(f"cannot create the ledger at {location.shown}: {exc.strerror or exc}") from None
        engine = _engine(location)
        try:
            if sa.inspect(engine).has_table("dprelease_meta"):
                cls._check_version(engine, location)
            elif not create:
                engine.dispose()
                return None
            else:
                created = cls._create_schema(engine, location) or created
        except sa.exc.DBAPIError as exc:
            engine.dispose()
            raise LedgerError(f"cannot open the ledger at {location.shown}: {first_line(exc.orig)}") from None
        except LedgerError:
            engine.dispose()
            raise
        return cls(location, engine, created)

    @staticmethod
    def _create_schema(engine: Engine, location: LedgerLocation) -> bool:
        """Create the tables in one locked transaction; False if another process won the race."""
        with engine.connect() as conn:
            conn = conn.execution_options(dprelease_write=True)
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('dprelease:schema'))"))
                inspector = sa.inspect(conn)
                if inspector.has_table("dprelease_meta"):
                    return False
                others = inspector.get_table_names()
                if others:
                    raise LedgerError(f"{location.shown} is a database with other tables ({', '.join(others[:5])}) "
                                      "and no dprelease ledger; refusing to add one there")
                metadata.create_all(conn)
                conn.execute(meta_t.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
        return True

    @staticmethod
    def _check_version(engine: Engine, location: LedgerLocation) -> None:
        with engine.connect() as conn:
            row = conn.execute(sa.select(meta_t.c.value).where(meta_t.c.key == "schema_version")).first()
        version = int(row[0]) if row else 0
        if version in (1, 2):
            _migrate(engine)
            version = SCHEMA_VERSION
        if version != SCHEMA_VERSION:
            raise LedgerError(f"the ledger at {location.shown} has schema version {version}; this dprelease "
                              f"reads version {SCHEMA_VERSION}. Use the dprelease that wrote it.")

    def close(self) -> None:
        self.engine.dispose()

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
            return _state(conn, dataset)

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
            state = _state(conn, rows[0].dataset)
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

    # -- writing

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
            state = _state(conn, dataset)
            if state is None:
                _insert_dataset(conn, dataset, definition, by)
            terms = state.definition if state else definition
            if _is_approx(terms):
                delta = delta if delta is not None else state.delta_budget if state else None
                if delta is None:
                    raise LedgerError(f"dataset {dataset!r} has (ε, δ) terms: its cap needs a δ too (--delta D)")
            elif delta is not None:
                raise LedgerError(f"dataset {dataset!r} has {terms!r} terms, whose budgets have no δ")
            conn.execute(caps_t.insert().values(dataset=dataset, epsilon=fraction_text(epsilon),
                                                delta=None if delta is None else fraction_text(delta),
                                                reason=reason, set_by=by, set_at=now()))
            state = _state(conn, dataset)
        assert state is not None
        return state

    def reserve(self, *, dataset: str, release: str,
                charges: list[tuple[str, Fraction]] | list[tuple[str, Fraction, Fraction | None]],
                spec_fingerprint: str, lifetime_from_spec: Fraction | None,
                spec_path: str | None = None, output_dir: str | None = None,
                definition: str = "pure", by: str | None = None,
                lifetime_delta_from_spec: Fraction | None = None,
                local: tuple[LocalCollection, ...] = ()) -> Reservation:
        """Reserve ``charges`` — (measurement, ε or ρ[, δ]) — for ``release`` atomically.

        Refuses (nothing written) when the release already has a live run
        (:class:`AlreadyReleasedError`) or the lifetime budget cannot cover the charges, in ε
        and, under approx terms, in δ (:class:`OverBudgetError`). A dataset seen for the first
        time is created with the spec's lifetime budget.
        """
        by = by or current_user()
        full = [(c[0], c[1], c[2] if len(c) > 2 else None) for c in charges]  # type: ignore[misc]
        total = sum((e for _, e, _ in full), Fraction(0))
        total_delta = sum((d for _, _, d in full if d is not None), Fraction(0))
        if _is_approx(definition) and lifetime_delta_from_spec is None and lifetime_from_spec is not None:
            raise LedgerError(f"dataset {dataset!r} has (ε, δ) terms: its lifetime budget needs a δ")
        run_id = uuid.uuid4().hex
        with self._write() as conn:
            _lock_dataset(conn, dataset.partition("/")[0])  # a dataset and its periods: one writer
            if "/" in dataset:
                _lock_dataset(conn, dataset)
            _check_partition_family(conn, dataset)
            state = _state(conn, dataset)
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
                state = _state(conn, dataset)
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
            at = now()
            conn.execute(runs_t.insert().values(run_id=run_id, dataset=dataset, release=release,
                                                spec_fingerprint=spec_fingerprint, spec_path=spec_path,
                                                output_dir=output_dir, created_at=at, created_by=by))
            if full:  # a release of local tables only charges no central budget
                conn.execute(charges_t.insert(), [{"run_id": run_id, "table_name": t, "epsilon": fraction_text(e),
                                                   "delta": None if d is None else fraction_text(d)}
                                                  for t, e, d in full])
            conn.execute(events_t.insert().values(run_id=run_id, state="reserved", at=at, by=by))
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
        """Mark a reserved run as published. Its charges stay spent for ever."""
        self._transition(run_id, "committed", by=by, reason=reason, data_fingerprint=data_fingerprint)

    def fail(self, run_id: str, *, reason: str, data_fingerprint: str | None = None,
             by: str | None = None) -> None:
        """Record that a run drew noise and then failed: spent, never published."""
        self._transition(run_id, "failed", by=by, reason=reason, data_fingerprint=data_fingerprint)

    def void(self, run_id: str, *, reason: str, by: str | None = None) -> None:
        """Release a reservation whose noise was never drawn (an operator's recorded decision)."""
        if not reason.strip():
            raise LedgerError("say why the reservation is voided: --reason TEXT")
        self._transition(run_id, "voided", by=by, reason=reason)

    def _transition(self, run_id: str, state: str, *, by: str | None, reason: str | None,
                    data_fingerprint: str | None = None) -> None:
        with self._write() as conn:
            row = conn.execute(sa.select(runs_t.c.dataset).where(runs_t.c.run_id == run_id)).first()
            if row is None:
                raise LedgerError(f"no run {run_id!r} in the ledger at {self.location.shown}")
            _lock_dataset(conn, row[0])
            current = _run_state(conn, run_id)
            if current != "reserved":
                raise LedgerError(f"run {run_id} is {current}; only a reserved run can become {state}")
            conn.execute(events_t.insert().values(run_id=run_id, state=state, at=now(), by=by or current_user(),
                                                  reason=reason, data_fingerprint=data_fingerprint))


def check_lifetime_matches(state: DatasetState, from_spec: Fraction | None,
                           delta_from_spec: Fraction | None = None) -> None:
    """A spec may restate the ledger's cap, never silently ask for a different one."""
    if from_spec is not None and delta_from_spec is not None and delta_from_spec != state.delta_budget:
        last = state.caps[-1]
        raise LedgerError(
            f"dataset {state.name!r} has a lifetime δ of {fraction_text(state.delta_budget or Fraction(0))} in the "
            f"ledger (set {last.set_at[:10]} by {last.set_by}: {last.reason}); the spec asks "
            f"{fraction_text(delta_from_spec)}. Make dataset.lifetime_budget.delta match, or change the cap with "
            f"`dprelease ledger set-budget {state.name} --epsilon E --delta D --reason TEXT`")
    if from_spec is not None and from_spec != state.budget:
        last = state.caps[-1]
        raise LedgerError(
            f"dataset {state.name!r} has a lifetime budget of ε = {fraction_text(state.budget)} in the ledger "
            f"(set {last.set_at[:10]} by {last.set_by}: {last.reason}); the spec asks "
            f"{fraction_text(from_spec)}. Make dataset.lifetime_budget match, or change the cap with "
            f"`dprelease ledger set-budget {state.name} --epsilon E --reason TEXT`")


def over_lifetime_message(state: DatasetState, requested: Fraction, *, delta: bool = False) -> str:
    if delta:
        assert state.delta_budget is not None
        return (f"over the lifetime δ of dataset {state.name!r}: requested δ = {fraction_text(requested)}, remaining "
                f"{fraction_text(state.delta_budget - state.delta_spent)} (cap {fraction_text(state.delta_budget)}, "
                f"spent {fraction_text(state.delta_spent)})")
    over = state.spent + requested - state.budget
    return (f"over the lifetime budget of dataset {state.name!r}: requested ε = {fraction_text(requested)}, "
            f"remaining {fraction_text(state.remaining)} (cap {fraction_text(state.budget)}, spent "
            f"{fraction_text(state.spent)}); over by {fraction_text(over)}")


# ---------------------------------------------------------------- internals


def _migrate(engine: Engine) -> None:
    """Schema 1 or 2 → 3, in one locked transaction; nothing recorded changes, and a second
    process finds it done. 1 → 2: the (NULL) δ columns of caps and charges, a wider terms column.
    2 → 3: the tables of plan approvals and of local collections, or, where a pre-release 2
    had the latter, its answers fingerprint (NULL: such a collection counts as having unknown
    answers)."""
    with engine.connect() as conn:
        conn = conn.execution_options(dprelease_write=True)
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('dprelease:schema'))"))
            row = conn.execute(sa.select(meta_t.c.value).where(meta_t.c.key == "schema_version")).first()
            if row is None or row[0] not in ("1", "2"):
                return
            if row[0] == "1":
                conn.execute(sa.text("ALTER TABLE budget_caps ADD COLUMN delta VARCHAR(200)"))
                conn.execute(sa.text("ALTER TABLE charges ADD COLUMN delta VARCHAR(200)"))
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("ALTER TABLE datasets ALTER COLUMN definition TYPE VARCHAR(200)"))
            if not sa.inspect(conn).has_table("approvals"):
                approvals_t.create(conn)
            if not sa.inspect(conn).has_table("local_collections"):
                local_t.create(conn)
            elif "answers" not in {c["name"] for c in sa.inspect(conn).get_columns("local_collections")}:
                conn.execute(sa.text("ALTER TABLE local_collections ADD COLUMN answers VARCHAR(80)"))
            conn.execute(meta_t.update().where(meta_t.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))


def _create_private_file(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:  # another process created it first: fine
        return
    os.close(fd)


def _engine(location: LedgerLocation) -> Engine:
    url = location.url
    if url.get_backend_name() == "sqlite":
        engine = sa.create_engine(url, connect_args={"timeout": 60}, poolclass=sa.pool.NullPool)

        @sa.event.listens_for(engine, "connect")
        def _no_implicit_transactions(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            dbapi_conn.execute("PRAGMA foreign_keys = ON")

        @sa.event.listens_for(engine, "begin")
        def _begin(conn):  # type: ignore[no-untyped-def]
            # writers take the write lock before they read what they check
            write = conn.get_execution_options().get("dprelease_write")
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    try:
        return sa.create_engine(url, poolclass=sa.pool.NullPool)
    except ModuleNotFoundError as exc:
        raise LedgerError(f"the ledger URL needs the {exc.name!r} driver: "
                          "pip install 'dprelease[postgres]'") from None


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
                          "from its whole budget would not be covered by them; declare the same partition with "
                          "disjoint_units, or use a new dataset name")


def _insert_dataset(conn: Connection, dataset: str, definition: str, by: str) -> None:
    conn.execute(datasets_t.insert().values(name=dataset, definition=definition, created_at=now(),
                                            created_by=by))


def _run_state(conn: Connection, run_id: str) -> str:
    return _events(conn, run_id)[-1].state


def _events(conn: Connection, run_id: str) -> list:  # type: ignore[type-arg]
    return list(conn.execute(sa.select(events_t).where(events_t.c.run_id == run_id).order_by(events_t.c.id)))


def _state(conn: Connection, dataset: str) -> DatasetState | None:
    row = conn.execute(sa.select(datasets_t).where(datasets_t.c.name == dataset)).first()
    if row is None:
        return None
    caps = tuple(CapChange(parse_exact(c.epsilon), c.reason, c.set_by, c.set_at,
                           None if c.delta is None else parse_exact(c.delta)) for c in conn.execute(
        sa.select(caps_t).where(caps_t.c.dataset == dataset).order_by(caps_t.c.id)))
    if not caps:
        raise LedgerError(f"dataset {dataset!r} has no lifetime cap in the ledger; the ledger is damaged")
    runs = []
    for run in conn.execute(sa.select(runs_t).where(runs_t.c.dataset == dataset).order_by(runs_t.c.created_at)):
        rows = list(conn.execute(sa.select(charges_t).where(charges_t.c.run_id == run.run_id).order_by(charges_t.c.id)))
        charges = tuple((c.table_name, parse_exact(c.epsilon)) for c in rows)
        run_delta = sum((parse_exact(c.delta) for c in rows if c.delta is not None), Fraction(0))
        events = _events(conn, run.run_id)
        data = next((e.data_fingerprint for e in reversed(events) if e.data_fingerprint), None)
        runs.append(RunRecord(run.run_id, run.release, events[-1].state, sum((e for _, e in charges), Fraction(0)),
                              charges, run.spec_fingerprint, data, run.created_at, run.created_by,
                              run.output_dir, events[-1].at, events[-1].reason, run_delta))
    spent = sum((r.epsilon for r in runs if r.state in LIVE_STATES), Fraction(0))
    delta_spent = sum((r.delta for r in runs if r.state in LIVE_STATES), Fraction(0))
    local = tuple(LocalRecord(r.collection, r.question, r.protocol, parse_exact(r.epsilon), parse_exact(r.charged),
                              bool(r.memoised), r.run_id, r.recorded_at, r.recorded_by, r.answers)
                  for r in conn.execute(sa.select(local_t).where(local_t.c.dataset == dataset).order_by(local_t.c.id)))
    return DatasetState(dataset, row.definition, caps[-1].epsilon, spent, caps, tuple(runs), caps[-1].delta,
                        delta_spent, local)


def _is_approx(terms: str) -> bool:
    return terms.startswith("approx")
