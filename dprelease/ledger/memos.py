"""Memoised collections verified respondent by respondent.

**Model.** A local collection with ``memoised: true, memo_of: C`` is charged no new ε because
each of its answers is the randomized answer the same respondent gave in collection C (a
permanent randomized response): the collection is then a function of C's draws. Taken on trust,
a fresh, independent randomization passed as a memo (each respondent's loss doubled, the ledger
charging 0). So the ledger keeps, when C's answers are registered with their respondent ids
(``dprelease randomize --id``, ``dprelease ledger register-answers --id``), one digest per
distinct (respondent id, answer) of the file::

    digest(id, a) = HMAC-SHA256(key, JSON [salt, question, id, a]), its first 128 bits (hex)

with the ledger's fingerprint key (:mod:`~dprelease.ledger.keys`: never in the ledger) and a salt
drawn for the registration from the OS CSPRNG, beside the id column's name and the salt.

**Ids.** The pairs are only as good as the ids: by a column such as a region (5 values over 400
respondents) or with one respondent on two rows, one id holds several answers, and a fresh
answer matches one of them. So digests are kept, and a memo is checked, only by an id column
that names one respondent a row (:func:`_refuse_unusable_ids`): not an answer column (the
question, or any question the spec's local tables ask), no id blank, none repeated; else the
registration or run is refused, with counts and no id. ``respondent_sets.unique_ids`` records
that a registration's ids were so checked; one kept before (NULL) is no memo's origin (whether
an id had two answers there is unknown), refused as unverifiable like one without digests.

**Padding.** The number of digests would tell the number of respondents, which the ledger holds
nowhere else. The digests are padded with keyed dummies, ``HMAC(key, JSON ["pad", salt, i])``,
to P(n) = max(1024, the least power of two ≥ n) and stored in digest order (not file order, and
dummies not last), 1024 to a row. Without the key a dummy is like any digest; with it, the
checker knows them.

**Algorithm.** A memo's answers (``randomize --memo``, ``register-answers --memo-of``, or the
data of a run) are checked against a registration of C: each row's (id, answer) must be among
C's digests. A row whose id is in C with another answer (one of the question's k − 1 other
values hashes into C's set) *changed*; an id not in C at all is *new*; C's respondents with no
row here are *missing*, which is allowed (a subset of C's draws is still a function of them, and
who answers is not what local DP protects). Changed or new: refused, nothing written. A new
respondent has no earlier draw to repeat: charging the collection its ε instead would charge
every respondent for a few, and hide the fresh draws among the repeats; they belong in a
collection of their own (``dprelease randomize`` refuses them the same way).

**Which registration of C.** At a registration, before C is estimated: any of C's registrations
(non-memoised, with digests); once C is recorded (a release estimated it), only the registration
of the file its estimate read. A run is checked, in its reservation's transaction, against that
recorded one. C registered without digests (before this check existed, or without ``--id``):
a memo of it cannot be verified, and is refused rather than charged 0.

**Cost.** The ids' check: one pass and a counter over the ids. Keeping: P(n) HMACs, P(n)/1024
rows. Checking m rows: m HMACs, and where something differs k − 1 more per row not repeated and
P(n) to recognise the dummies (for the counts); C's P(n) digests in memory.

**What a reader of the ledger without the key learns:** that a registration was kept per
respondent, its id column's name and P(n) (n is at most 1024, or in (P/2, P]); never an id, an
answer or a link between registrations: each digest is a pseudorandom function of the key, and
the salt makes the digests of two registrations, even of the same collection, unrelated (the
number they share would tell how many respondents answered alike in both).

**Assumptions.** The key is the ledger's (checked on reading it: another key would match
nothing, so a memo is refused, never wrongly accepted). Ids are text as written (``001`` is not
``1``); answers are declared values (:class:`~dprelease.ledger.records.Respondents`). A column
of unique ids identifies respondents, the same way in both waves (checked: unique, present, not
an answer; trusted: that it is a respondent id and not, say, reassigned to line answers up).

**Guarantee.** A memoised collection is registered, and a run of it reserved, only when every
answer in it is the answer the same respondent gave in a registration of C (at the run: the one
C's estimate read) whose ids were checked to name one respondent a row, and its own ids are
too; otherwise refused with the counts, nothing registered or spent.

Imports: the ledger's schema and records, the standard library; the values in
``Respondents`` stay in memory.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import Counter
from dataclasses import dataclass
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dprelease.errors import LedgerError
from dprelease.ledger.records import AnswerSet, LocalCollection, Respondents
from dprelease.ledger.schema import answer_sets_t, local_t, respondent_digests_t, respondent_sets_t

MIN_DIGESTS = 1024  # fewer respondents are not told apart at all
DIGEST_HEX = 32  # 128 bits: a chance match among a million digests is about 2^-88

Key = Callable[[], bytes]  # the ledger's fingerprint key, read when first needed


@dataclass(frozen=True, slots=True)
class Comparison:
    """A memo's rows against one registration of the collection it repeats."""

    respondents: int  # distinct ids in the memo
    changed: int  # ids in the origin with another answer here
    new: int  # ids not in the origin
    missing: int | None = None  # the origin's respondents with no row here (allowed); counted where it differs
    origin: int | None = None  # the origin's respondents; likewise

    @property
    def repeats(self) -> bool:
        return self.changed == 0 and self.new == 0


@dataclass(frozen=True, slots=True)
class _Origin:
    answer_set: int
    salt: str | None  # None: kept without digests (a memoised registration) or not at all
    id_column: str | None
    unique_ids: bool  # its ids were checked to name one respondent a row (False: kept before that check)


def _json(text: str) -> str:
    """``text`` as a JSON string, as ``json.dumps(text, ensure_ascii=False)`` writes it."""
    return encode_basestring(text)


def padded_size(n: int) -> int:
    """How many digests a registration of ``n`` distinct (id, answer) pairs stores."""
    return max(MIN_DIGESTS, 1 << max(n - 1, 0).bit_length())


class _Digests:
    """``digest(id, a)`` of one registration and question: the HMAC's state after the message's
    constant prefix is computed once and copied per respondent (the message is exactly
    ``json.dumps([salt, question, id, a])`` with compact separators), and likewise the dummies'."""

    def __init__(self, key: bytes, salt: str, question: str):
        self._prefix = hmac.new(key, f"[{_json(salt)},{_json(question)},".encode(), hashlib.sha256)
        self._pad = hmac.new(key, f'["pad",{_json(salt)},'.encode(), hashlib.sha256)

    def of(self, respondent: str, answer: str) -> str:
        h = self._prefix.copy()
        h.update(f"{_json(respondent)},{_json(answer)}]".encode())
        return h.hexdigest()[:DIGEST_HEX]

    def each(self, respondent: str, answers: list[str]) -> list[str]:
        """The digests of ``respondent`` with each of ``answers``."""
        state = self._prefix.copy()
        state.update(f"{_json(respondent)},".encode())
        out = []
        for answer in answers:
            h = state.copy()
            h.update(f"{_json(answer)}]".encode())
            out.append(h.hexdigest()[:DIGEST_HEX])
        return out

    def pad(self, i: int) -> str:
        h = self._pad.copy()
        h.update(f"{i}]".encode())
        return h.hexdigest()[:DIGEST_HEX]


def keep(conn: Connection, key: bytes, answer_set: int, question: str, respondents: Respondents) -> None:
    """Store the padded, keyed digests of ``respondents``' answers to ``question`` for the
    registration ``answer_set`` (a collection randomized afresh: a later memo's origin),
    :data:`MIN_DIGESTS` to a row."""
    salt = secrets.token_hex(16)
    digest = _Digests(key, salt, question)
    real = {digest.of(r, a) for r, a in zip(respondents.ids, respondents.answers[question], strict=True)}
    digests = sorted(real | {digest.pad(i) for i in range(padded_size(len(real)) - len(real))})
    conn.execute(respondent_sets_t.insert().values(answer_set=answer_set, id_column=respondents.id_column, salt=salt,
                                                   unique_ids=True))
    rows = ["".join(digests[i:i + MIN_DIGESTS]) for i in range(0, len(digests), MIN_DIGESTS)]
    conn.execute(respondent_digests_t.insert(), [{"answer_set": answer_set, "digests": row} for row in rows])


def keep_checked(conn: Connection, answer_set: int, respondents: Respondents) -> None:
    """Record that the memoised registration ``answer_set`` was checked, and its id column
    (what a run of it reads); no digests: a memoised collection is never a memo's origin."""
    conn.execute(respondent_sets_t.insert().values(answer_set=answer_set, id_column=respondents.id_column, salt=None,
                                                   unique_ids=True))


def compare(key: bytes, salt: str, stored: set[str], question: str, respondents: Respondents) -> Comparison:
    """``respondents``' answers to ``question`` against one registration's digests. The
    dummies are told apart (to count the origin's respondents) only where something differs."""
    digest = _Digests(key, salt, question)
    domain = list(respondents.domains[question])
    found: set[str] = set()
    changed: set[str] = set()
    for r, a in zip(respondents.ids, respondents.answers[question], strict=True):
        if digest.of(r, a) in stored:
            found.add(r)
        elif not stored.isdisjoint(digest.each(r, [b for b in domain if b != a])):
            found.add(r)
            changed.add(r)
    ids = set(respondents.ids)
    if not changed and found == ids:  # a memo: how many of the origin's are absent is not needed
        return Comparison(len(ids), 0, 0)
    origin = len(stored - {digest.pad(i) for i in range(len(stored))})
    return Comparison(len(ids), len(changed), len(ids - found), max(origin - len(found), 0), origin)


def check_origin(entry: AnswerSet, respondents: Respondents) -> None:
    """Refuse (LedgerError, nothing registered) to keep the registration ``entry`` (answers
    randomized afresh: a later memo's origin) by an id column that does not name one respondent
    a row (:func:`_refuse_unusable_ids`)."""
    _refuse_unusable_ids(
        f"the answers to {entry.question!r} of collection {entry.collection!r} cannot be kept respondent by "
        "respondent", entry.question, respondents,
        f"Name the column that identifies each respondent (--id COLUMN), one row per respondent, or register the "
        f"answers without --id (then no memo of {entry.collection!r} can be charged 0). Nothing was registered or "
        "spent.")


def check_registration(conn: Connection, key: Key, entry: AnswerSet, respondents: Respondents | None) -> None:
    """Refuse (LedgerError, nothing registered) the registration ``entry`` of a memoised
    collection unless its answers repeat a registration of ``entry.memo_of``."""
    assert entry.memo_of is not None
    recorded = _recorded_answers(conn, entry.dataset, entry.memo_of, entry.question)
    claim = _Claim(entry.dataset, entry.collection, entry.memo_of, entry.question,
                   f"these answers to {entry.question!r} for collection {entry.collection!r}",
                   "Nothing was registered or spent.")
    _check(conn, key, claim, _origins(conn, entry.dataset, entry.memo_of, entry.question, recorded), respondents)


def check_run(conn: Connection, key: Key, dataset: str, asked: LocalCollection,
              respondents: Respondents | None) -> None:
    """Refuse (LedgerError, nothing spent) a reservation of the memoised collection ``asked``
    unless the run's answers repeat those of the registration ``asked.memo_of``'s estimate read.
    An origin not yet recorded is left to :func:`~dprelease.ledger.policy.local_charge`."""
    assert asked.memo_of is not None
    recorded = _recorded_answers(conn, dataset, asked.memo_of, asked.question)
    if recorded is None:
        return
    claim = _Claim(dataset, asked.collection, asked.memo_of, asked.question,
                   f"collection {asked.collection!r} says memoised: true with memo_of: {asked.memo_of!r}, but the "
                   f"answers to {asked.question!r} in this data file", "Nothing was spent.")
    _check(conn, key, claim, _origins(conn, dataset, asked.memo_of, asked.question, recorded), respondents)


@dataclass(frozen=True, slots=True)
class _Claim:
    dataset: str
    collection: str
    memo_of: str
    question: str
    what: str  # the answers checked, for messages
    nothing: str  # what was not done


def _check(conn: Connection, key: Key, claim: _Claim, origins: list[_Origin], respondents: Respondents | None) -> None:
    kept = [o for o in origins if o.salt is not None]
    if not kept:
        raise LedgerError(_unverifiable(claim, NO_ORIGIN if not origins else NO_DIGESTS))
    checked = [o for o in kept if o.unique_ids]
    if not checked:
        raise LedgerError(_unverifiable(claim, UNCHECKED_IDS.format(column=kept[0].id_column)))
    column = next(o.id_column for o in checked)
    if respondents is None or claim.question not in respondents.answers:
        raise LedgerError(f"{claim.what} are checked against collection {claim.memo_of!r} respondent by respondent, "
                          f"which needs each answer's respondent id: name the id column (--id COLUMN; the answers of "
                          f"{claim.memo_of!r} were registered with {column!r}). {claim.nothing}")
    _refuse_unusable_ids(
        f"{claim.what} cannot be checked respondent by respondent", claim.question, respondents,
        f"A memo of {claim.memo_of!r} has one row per respondent, identified by the column {claim.memo_of!r} was kept "
        f"by ({column!r}; --id COLUMN); else publish collection {claim.collection!r} as a collection of its own "
        f"(memoised: false, charged its ε). {claim.nothing}")
    secret = key()
    best, origin = min(((compare(secret, o.salt, _digests(conn, o.answer_set), claim.question, respondents), o)
                        for o in checked if o.salt is not None), key=lambda c: c[0].changed + c[0].new)
    if not best.repeats:
        ids = (f" Respondents are matched by id: column {respondents.id_column!r} here, {origin.id_column!r} in "
               f"{claim.memo_of!r}." if best.new and origin.id_column != respondents.id_column else "")
        raise LedgerError(_mismatch(claim, best, ids))


NO_ORIGIN = "has no registered answers randomized afresh"
NO_DIGESTS = ("was registered without per-respondent digests (before dprelease kept them, or without a respondent id "
              "column, --id)")
UNCHECKED_IDS = ("was kept per respondent (by column {column!r}) before dprelease checked that an id column names one "
                 "respondent a row: an id on two rows with two answers there would match either")


def _unverifiable(claim: _Claim, why: str) -> str:
    return (f"{claim.what} cannot be verified: collection {claim.memo_of!r} of {claim.question!r} in dataset "
            f"{claim.dataset!r} {why}, so whether each respondent repeats their {claim.memo_of!r} answer cannot be "
            f"checked, and an unverified memo is never charged 0. Publish collection {claim.collection!r} as a "
            f"collection of its own (memoised: false, charged its ε), or repeat a collection whose answers were "
            f"registered with --id. {claim.nothing}")


def _mismatch(claim: _Claim, c: Comparison, ids: str) -> str:
    return (f"{claim.what} do not repeat collection {claim.memo_of!r}: of {c.respondents} respondents, "
            f"{c.changed} answer otherwise than in {claim.memo_of!r} and {c.new} are not in {claim.memo_of!r} "
            f"({c.missing} of its {c.origin} respondents have no answer here, which is allowed).{ids} A memoised "
            f"collection repeats each respondent's randomized answer from {claim.memo_of!r} exactly (`dprelease "
            f"randomize --memo` with the memo of {claim.memo_of!r} does); other answers are fresh draws, which cost "
            f"each respondent ε again. Publish collection {claim.collection!r} as a collection of its own (memoised: "
            f"false, charged its ε), or produce its answers from the memo of {claim.memo_of!r}; respondents new since "
            f"{claim.memo_of!r} go in a collection of their own. {claim.nothing}")


def _refuse_unusable_ids(what: str, question: str, respondents: Respondents, fix: str) -> None:
    """Refuse (LedgerError: ``what``, the problem, ``fix``) an id column that does not name one
    respondent a row: an answer column (``question``, or any question the spec asks), an id that
    is empty (or blank) on some row, or an id on more than one row. Digests of (id, answer) by
    such a column hold several answers under one id, and a memo's row would match any of them.

    Assumes ``respondents`` holds every row of the file. Guarantees that nothing passes unless
    each row has an id of its own; the message gives counts only, never an id or an answer."""
    column = respondents.id_column
    if column == question:
        problem = "it is the question itself (its answers are not respondent ids)"
    elif column in respondents.questions or column in respondents.answers:
        problem = "it is a question the spec asks (a local table's column), and answers are not respondent ids"
    else:
        empty = sum(1 for i in respondents.ids if not i.strip())
        shared = [n for i, n in Counter(respondents.ids).items() if n > 1 and i.strip()]
        problems = ([f"{empty} row{'s' if empty != 1 else ''} {'have' if empty != 1 else 'has'} no id"] if empty else [])
        problems += ([f"{len(shared)} id{'s' if len(shared) != 1 else ''} appear{'' if len(shared) != 1 else 's'} more "
                      f"than once (on {sum(shared)} of its {len(respondents.ids)} rows)"] if shared else [])
        if not problems:
            return
        problem = " and ".join(problems)
    raise LedgerError(f"{what} by column {column!r}: {problem}. A memo is matched to its origin by respondent id, so the "
                      f"id column must name each respondent on one row of their own; otherwise a fresh answer could "
                      f"match another row's answer and be charged 0. {fix}")


def _recorded_answers(conn: Connection, dataset: str, collection: str, question: str) -> str | None:
    """The (keyed) answers file the recorded estimate of ``collection`` read, if it is recorded."""
    row = conn.execute(sa.select(local_t.c.answers).where(
        local_t.c.dataset == dataset, local_t.c.collection == collection, local_t.c.question == question)).first()
    return None if row is None else (row[0] or "")  # "": recorded before fingerprints: no registration matches


def _origins(conn: Connection, dataset: str, collection: str, question: str, answers: str | None) -> list[_Origin]:
    """The registrations of ``collection``'s answers to ``question`` randomized afresh (of the
    file ``answers`` only, where its estimate is recorded), with what each keeps."""
    a, s = answer_sets_t, respondent_sets_t
    query = (sa.select(a.c.id, s.c.salt, s.c.id_column, s.c.unique_ids).select_from(a.outerjoin(s, s.c.answer_set == a.c.id))
             .where(a.c.dataset == dataset, a.c.collection == collection, a.c.question == question,
                    a.c.memo_of.is_(None)).order_by(a.c.id))
    if answers is not None:
        query = query.where(a.c.answers == answers)
    return [_Origin(r[0], r[1], r[2], bool(r[3])) for r in conn.execute(query)]


def _digests(conn: Connection, answer_set: int) -> set[str]:
    table = respondent_digests_t
    rows = conn.execute(sa.select(table.c.digests).where(table.c.answer_set == answer_set))
    return {text[i:i + DIGEST_HEX] for (text,) in rows for i in range(0, len(text), DIGEST_HEX)}
