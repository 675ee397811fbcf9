"""Writing the ledger: the bodies of its write transactions (a reservation, a cap change, a
run's state change, registered answers) and the checks and locks they take inside them.
Functions of an open Connection in a serialised write transaction (``Ledger._write``): they
read what they check and write in that same transaction, so two writers never both pass.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dprelease.accounting import ApproxDP, Budget, Terms, add, compose, fraction_text, within
from dprelease.errors import AlreadyReleasedError, InternalError, LedgerError, OverBudgetError
from dprelease.ledger import keys, lease, memos, queries
from dprelease.ledger.location import LedgerLocation
from dprelease.ledger.policy import (
    check_lifetime_matches,
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
    LocalCollection,
    LocalRecord,
    Respondents,
    current_user,
    now,
    of_terms,
    row_figures,
)
from dprelease.ledger.schema import (
    answer_sets_t,
    caps_t,
    charges_t,
    datasets_t,
    events_t,
    identities_t,
    leases_t,
    local_t,
    runs_t,
)


def lock_for_reservation(conn: Connection, dataset: str, data_fingerprint: str | None) -> None:
    """Take a reservation's locks (the dataset's family, the dataset, the data) and check the
    dataset's place in its family of periods."""
    _lock_dataset(conn, dataset.partition("/")[0])  # a dataset and its periods: one writer
    if "/" in dataset:
        _lock_dataset(conn, dataset)
    _check_partition_family(conn, dataset)
    if data_fingerprint is not None:
        _lock_dataset(conn, "data:" + data_fingerprint)  # two names, one data: one writer at a time


def lock_records(conn: Connection) -> None:
    """Serialise reservations that compare data by its records (any dataset may match any)."""
    _lock_dataset(conn, "data:records")


def record_identity(conn: Connection, run_id: str, dataset: str, records: str, sealed: str | None) -> None:
    """A reserved run's data by its records: the keyed digest, and the sealed sketch unless the
    dataset holds these records' already."""
    if not records.startswith(keys.PREFIX) or (sealed is not None and not sealed.startswith(keys.SEALED)):
        raise InternalError("a data identity is recorded keyed and sealed only (Ledger.fingerprint, Ledger.seal)")
    keep = None if queries.has_sketch(conn, dataset, records) else sealed
    conn.execute(identities_t.insert().values(run_id=run_id, dataset=dataset, records=records, sketch=keep))


def reserve(conn: Connection, run_id: str, *, dataset: str, release: str,
            charges: list[tuple[str, Budget]], spec_fingerprint: str,
            lifetime_from_spec: Budget | None, spec_path: str | None, output_dir: str | None,
            terms: Terms, by: str, local: tuple[LocalCollection, ...], data_fingerprint: str | None,
            approval: Approval | None, respondents: Respondents | None = None,
            key: memos.Key | None = None) -> DatasetState:
    """The body of :meth:`dprelease.ledger.store.Ledger.reserve` after its locks: check, then
    record the run, its charges, its lease and its local collections. ``charges`` and
    ``lifetime_from_spec`` are of ``terms``' kind (checked by the caller). ``respondents``: the
    run's answers, checked against the digests of what a memoised collection repeats (``key``:
    the ledger's fingerprint key). Returns the dataset's state the reservation was checked
    against."""
    total = compose((b for _, b in charges), terms.kind)
    state = queries.dataset_state(conn, dataset)
    if state is None:
        if lifetime_from_spec is None:
            raise LedgerError(f"dataset {dataset!r} is new to this ledger and the spec declares no "
                              "dataset.lifetime_budget; declare one")
        _insert_dataset(conn, dataset, terms, by)
        conn.execute(caps_t.insert().values(dataset=dataset, **row_figures(lifetime_from_spec),
                                            reason=f"initial cap from {spec_path or 'the spec'}",
                                            set_by=by, set_at=now()))
        state = queries.dataset_state(conn, dataset)
        if state is None:
            raise InternalError(f"dataset {dataset!r} vanished inside its creating transaction")
    if state.terms != terms:  # checked again here: two first releases may race
        raise LedgerError(f"dataset {dataset!r} is in the ledger under {state.terms.text!r} terms; this run was "
                          f"planned under {terms.text!r}. Plan it again")
    check_lifetime_matches(state, lifetime_from_spec)
    live = state.live_run(release)
    if live is not None:
        raise AlreadyReleasedError(
            f"release {release!r} of dataset {dataset!r} is already {live.state} in the ledger "
            f"(run {live.run_id}, {live.created_at}); choose a new release name")
    if not within(add(state.spent, total), state.budget):  # one kind: under approx, ε and δ
        raise OverBudgetError(over_lifetime_message(state, total))
    _check_answers(conn, dataset, local, bool(charges), data_fingerprint)  # local answers carry provenance
    for asked in local:  # a memo repeats its origin's answers, respondent by respondent
        if asked.memoised:
            memos.check_run(conn, _needed(key), dataset, asked, respondents)
    at = now()
    conn.execute(runs_t.insert().values(run_id=run_id, dataset=dataset, release=release,
                                        spec_fingerprint=spec_fingerprint, spec_path=spec_path,
                                        output_dir=output_dir, created_at=at, created_by=by,
                                        data_fingerprint=data_fingerprint,
                                        approved_by=approval.approved_by if approval else None,
                                        approved_at=approval.approved_at if approval else None))
    if charges:  # a release of local tables only charges no central budget
        conn.execute(charges_t.insert(), [{"run_id": run_id, "table_name": t, **row_figures(b)} for t, b in charges])
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
            epsilon=fraction_text(asked.epsilon), charged=fraction_text(charged.epsilon), memoised=asked.memoised,
            answers=asked.answers, run_id=run_id, recorded_at=at, recorded_by=by))
        records += (LocalRecord(asked.collection, asked.question, asked.protocol, asked.epsilon, charged,
                                asked.memoised, run_id, at, by, asked.answers),)
    return state


def set_budget(conn: Connection, dataset: str, budget: Budget, *, reason: str, by: str,
               terms: Terms, keep_delta: bool = False) -> DatasetState | None:
    """Append a cap row for ``dataset`` (creating it under ``terms`` if new); its state after.
    ``budget`` is of the dataset's terms' kind (TypeError otherwise: the caller's bug; nothing
    written). With ``keep_delta`` an (ε, δ) cap keeps the current cap's δ, read under the lock."""
    _lock_dataset(conn, dataset)
    state = queries.dataset_state(conn, dataset)
    terms = state.terms if state else terms
    if keep_delta and state is not None and isinstance(budget, ApproxDP) and isinstance(state.budget, ApproxDP):
        budget = ApproxDP(budget.epsilon, state.budget.delta)
    of_terms(budget, terms, f"the new lifetime cap of dataset {dataset!r}")
    if state is None:
        _insert_dataset(conn, dataset, terms, by)
    conn.execute(caps_t.insert().values(dataset=dataset, **row_figures(budget), reason=reason, set_by=by,
                                        set_at=now()))
    return queries.dataset_state(conn, dataset)


def transition(conn: Connection, location: LedgerLocation, run_id: str, state: str, *, by: str | None,
               reason: str | None, data_fingerprint: str | None) -> None:
    """Append the event that moves ``run_id`` to ``state``, if its current state allows it."""
    allowed = {"drawing": ("reserved",), "voided": ("reserved",)}.get(state, UNFINISHED)
    row = conn.execute(sa.select(runs_t.c.dataset).where(runs_t.c.run_id == run_id)).first()
    if row is None:
        raise LedgerError(f"no run {run_id!r} in the ledger at {location.shown}")
    _lock_dataset(conn, row[0])
    current = queries.run_state(conn, run_id)
    if current not in allowed:
        why = (" (noise was drawn: its budget is spent; settle it with --fail, or --commit if it was "
               "published)" if current == "drawing" else "")
        raise LedgerError(f"run {run_id} is {current}; only a {' or '.join(allowed)} run can become "
                          f"{state}{why}")
    conn.execute(events_t.insert().values(run_id=run_id, state=state, at=now(), by=by or current_user(),
                                          reason=reason, data_fingerprint=data_fingerprint))


def register_answers(conn: Connection, done: tuple[AnswerSet, ...], respondents: Respondents | None = None,
                     key: memos.Key | None = None) -> None:
    """Append the registrations ``done`` (already stamped with who and when), or refuse them all.
    With ``respondents`` (the file's answers, in memory) a registration randomized afresh keeps
    their keyed digests, and a memoised one must repeat its origin's (:mod:`~dprelease.ledger.memos`;
    ``key``: the ledger's fingerprint key)."""
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
        kept = respondents if respondents is not None and e.question in respondents.answers else None
        if e.memo_of is not None:
            memos.check_registration(conn, _needed(key), e, respondents)
        elif kept is not None:  # an origin: its ids must name one respondent a row
            memos.check_origin(e, kept)
        inserted = conn.execute(answer_sets_t.insert().values(
            dataset=e.dataset, collection=e.collection, question=e.question, protocol=e.protocol,
            epsilon=fraction_text(e.epsilon), answers=e.answers, memo_of=e.memo_of, how=e.how,
            statement=e.statement, registered_by=e.registered_by, registered_at=e.registered_at))
        if kept is not None:
            answer_set = inserted.inserted_primary_key[0]
            if e.memo_of is None:
                memos.keep(conn, _needed(key)(), answer_set, e.question, kept)
            else:
                memos.keep_checked(conn, answer_set, kept)


def _needed(key: memos.Key | None) -> memos.Key:
    if key is None:
        raise InternalError("a per-respondent check without the ledger's fingerprint key")
    return key


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


def _insert_dataset(conn: Connection, dataset: str, terms: Terms, by: str) -> None:
    conn.execute(datasets_t.insert().values(name=dataset, definition=terms.text, guarantee=terms.kind,
                                            change_one_record=terms.change, unit_id=terms.unit_id, created_at=now(),
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
