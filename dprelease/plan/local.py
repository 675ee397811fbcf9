"""Local tables: estimates from answers the respondents randomized themselves (local DP).

A local table spends no central budget: its answers were randomized before they were
collected, and the ledger records each collection's per-respondent ε. Planning one checks
the answers' provenance (the ledger's registrations) and what recording the collection costs
each respondent. Pure: no data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dprelease.accounting import PureDP
from dprelease.errors import InternalError, LedgerError
from dprelease.ledger import (
    AnswerSet,
    DatasetState,
    LocalCollection,
    LocalRecord,
    local_charge,
    memo_honoured,
    provenance_of,
    unregistered_message,
)
from dprelease.plan.randomizers import CoinFlip, KRandomizedResponse, LocalRandomizer
from dprelease.spec import LocalTable, Spec


@dataclass(frozen=True, slots=True)
class LocalPlan:
    """A local table: estimated from answers the respondents randomized (no central budget)."""

    name: str
    column: str
    randomizer: LocalRandomizer  # the respondents' mechanism and its parameters
    collection: LocalCollection  # what the ledger records
    charge: PureDP  # each respondent's pure ε, new in this release: 0 if memoised or already recorded
    already_recorded: bool
    provenance: AnswerSet | None = None  # the registration of the answers read (known once the data is)
    memo_not_honoured: bool = False  # memoised: true, but the answers were not produced from that memo

    @property
    def protocol(self) -> str:
        """``k_rr`` or ``coin_flip``."""
        return self.randomizer.kind

    @property
    def epsilon_shown(self) -> str:
        """``1``, or ``ln 3``."""
        return self.randomizer.epsilon_shown

    @property
    def categories(self) -> int:
        return self.randomizer.k

    @property
    def keep_probability(self) -> float:
        """The probability of reporting the truth: e^ε/(e^ε + k − 1); 3/4 for the coin flip."""
        return self.randomizer.keep_probability


def local_plans(spec: Spec, state: DatasetState | None, registered: tuple[AnswerSet, ...] | None = None,
                answers: str | None = None) -> tuple[LocalPlan, ...]:
    """Each local table's collection and what recording it costs each respondent (see
    :func:`~dprelease.ledger.policy.local_charge`; raises LedgerError where the ledger refuses).

    Local answers carry provenance. A dataset with central releases has confidential records,
    never local answers: refused. With ``registered`` (the answer sets registered for the data
    file, whose keyed fingerprint is ``answers``): every table's answers must match a
    registration (else refused), and ``memoised: true`` is honoured only when the registration
    says the answers were produced from the memo of ``memo_of``; otherwise the collection is
    planned as a fresh one, charged its ε (``memo_not_honoured``). Without ``registered`` (a plan
    that reads no data) the spec's claim is planned, and the run checks it."""
    records = state.local if state else ()
    refuse_local_over_central(spec, state)
    out = []
    for t in spec.local_tables:
        categories = len(spec.column(t.column).categories)
        asked = LocalCollection(t.collection, t.column, f"{t.protocol_key}/k={categories}", t.epsilon_bound,
                                t.memoised, memo_of=t.memo_of)
        found, not_honoured = None, False
        if registered is not None:
            found = provenance_of(registered, replace(asked, answers=answers))
            if found is None:
                raise LedgerError(f"{spec.source}: " + unregistered_message(spec.dataset.name, asked, t.name))
            if asked.memoised and not memo_honoured(found, asked):  # charged as the fresh collection it is
                asked, not_honoured = replace(asked, memoised=False, memo_of=None), True
        charge, known = local_charge(records, asked)
        if not known:
            records += (LocalRecord(asked.collection, asked.question, asked.protocol, asked.epsilon, charge,
                                    asked.memoised, "", "", ""),)
        randomizer = randomizer_of(t, categories)
        out.append(LocalPlan(t.name, t.column, randomizer, asked, charge, known,
                             found, not_honoured))
    return tuple(out)


def refuse_local_over_central(spec: Spec, state: DatasetState | None) -> None:
    """A dataset with central releases (runs that charged its budget) holds confidential records,
    never answers the respondents randomized: its columns are no kind: local tables."""
    central = [r for r in state.runs if r.charges and r.state != "voided"] if state and spec.local_tables else []
    if central:
        raise LedgerError(
            f"{spec.source}: dataset {spec.dataset.name!r} has central releases ({central[0].release!r}, charged to "
            "its lifetime budget): its records are confidential data, never answers the respondents randomized, so "
            "its columns are not read as kind: local tables. Publish them as central tables of this dataset (charged "
            "to its lifetime budget; `dprelease ledger set-budget` records a cap change), or estimate them from a "
            "registered collection of answers the respondents randomized themselves")


def randomizer_of(table: LocalTable, categories: int) -> LocalRandomizer:
    """The respondents' mechanism of a local table over ``categories`` answers."""
    if table.protocol == "coin_flip":
        return CoinFlip()
    if table.epsilon is None:
        raise InternalError(f"local table {table.name}: k-RR without its ε")
    return KRandomizedResponse(categories, table.epsilon)
