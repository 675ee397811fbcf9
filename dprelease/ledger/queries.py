"""Reading the ledger inside a transaction: a dataset's whole state, a run's state, policies
(those three in plain SQL, shared with the SQLite reader: :mod:`dprelease.ledger.state`),
answer sets, and which runs read some data or charged a central budget. Functions of an open
Connection (the caller holds the transaction and any lock); nothing here writes.
"""

from __future__ import annotations

import hmac
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dprelease.ledger.records import (
    AnswerSet,
    RecordIdentity,
)
from dprelease.ledger import state
from dprelease.ledger.state import dataset_state, policies, run_state  # noqa: F401  (read through here too)
from dprelease.ledger.schema import (
    answer_sets_t,
    charges_t,
    events_t,
    identities_t,
    runs_t,
)


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
    return state.answer_sets(conn, dataset, answers)


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
