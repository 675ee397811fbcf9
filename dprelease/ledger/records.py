"""The ledger's record types: frozen values read from or written to it, and their states.

Nothing here touches the database; every type is an immutable snapshot of rows.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction

from dprelease.accounting import Terms

LIVE_STATES = ("reserved", "drawing", "committed", "failed")  # states whose charges count as spent
UNFINISHED = ("reserved", "drawing")  # drawing: noise is being drawn; never voided from then on
RANDOMIZED = "dprelease randomize"  # AnswerSet.how: answers written by `dprelease randomize`
REGISTERED = "registered"  # AnswerSet.how: answers randomized elsewhere, registered with a statement


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
    approved_by: str | None = None  # the approval of its plan recorded at its reservation
    approved_at: str | None = None

    @property
    def unfinished(self) -> bool:
        return self.state in UNFINISHED

    @property
    def noise_drawn(self) -> bool:
        """The ledger recorded that noise was (being) drawn: spent, published or not."""
        return self.state in ("drawing", "failed") or self.state == "committed"


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



@dataclass(frozen=True, slots=True)
class AnswerSet:
    """The provenance of one file of answers to one question of one local collection: what a
    ``kind: local`` table may read. Written by ``dprelease randomize`` (``how``) for its output,
    or registered with a statement of who randomized the answers and how (on the respondents'
    devices). ``answers`` is the file's keyed fingerprint (never a plain hash)."""

    dataset: str
    collection: str
    question: str
    protocol: str  # as LocalCollection.protocol ("k_rr:1/k=10")
    epsilon: Fraction  # per respondent, a rational upper bound
    answers: str  # keyed fingerprint of the answers file
    how: str  # RANDOMIZED or REGISTERED
    memo_of: str | None = None  # the collection whose memo (first randomized answers) was reused
    statement: str | None = None
    registered_by: str = ""
    registered_at: str = ""



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
class Evaluation:
    """A `dprelease evaluate` of a dataset's data: read in the open (NOT private), nothing spent."""

    dataset: str
    data_fingerprint: str  # keyed
    evaluated_at: str
    evaluated_by: str
    trials: int
    spec_path: str | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """A recorded decision about a dataset (``approval: required``), with who and why."""

    dataset: str
    policy: str
    value: str
    reason: str
    set_by: str
    set_at: str


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
    """A dataset's lifetime record: its terms, its cap and what its runs spent, every amount in
    the unit of its terms (ε; ρ under zCDP terms; under approx terms the ε, beside the δ)."""

    name: str
    terms: Terms
    budget: Fraction
    spent: Fraction
    caps: tuple[CapChange, ...]
    runs: tuple[RunRecord, ...] = field(default=())
    delta_budget: Fraction | None = None  # approx terms: the lifetime δ
    delta_spent: Fraction = Fraction(0)
    local: tuple[LocalRecord, ...] = ()  # collections under local DP, in order
    evaluations: tuple[Evaluation, ...] = ()  # evaluations recorded under this dataset's name
    policies: tuple[Policy, ...] = ()  # every recorded decision, in order

    @property
    def approval_required(self) -> Policy | None:
        """The latest approval policy of the dataset (or of its whole family, for a period), if
        it requires approval."""
        latest = next((p for p in reversed(self.policies) if p.policy == "approval"), None)
        return latest if latest is not None and latest.value == "required" else None

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
