"""The ledger's pure rules: what a local collection costs, whose answers a local table may read,
and the refusals a spec's lifetime budget and an overrun get. No database here: every function
decides from record values (see :mod:`dprelease.ledger.records`) alone.
"""

from __future__ import annotations

from fractions import Fraction

from dprelease.accounting import ApproxDP, Budget, PureDP, add, amount_text, delta_of, fraction_text, subtract
from dprelease.errors import LedgerError
from dprelease.ledger.records import AnswerSet, DatasetState, LocalCollection, LocalRecord


def local_charge(records: tuple[LocalRecord, ...], asked: LocalCollection) -> tuple[PureDP, bool]:
    """(the pure ε charged per respondent, whether the collection is already recorded) for ``asked``.

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
            return PureDP(Fraction(0)), True
    if not asked.memoised:
        return PureDP(asked.epsilon), False
    first = next((r for r in records if (r.collection, r.question) == (asked.memo_of, asked.question)), None)
    if first is None or first.memoised:
        raise LedgerError(f"collection {asked.collection!r} says memoised: true with memo_of: {asked.memo_of!r}, but "
                          f"{asked.memo_of!r} is not a recorded, non-memoised collection of {asked.question!r}; record "
                          "it first, or set memoised: false (charged again)")
    if first.protocol != asked.protocol:
        raise LedgerError(f"collection {asked.collection!r} is memoised on {first.collection!r}, whose protocol is "
                          f"{first.protocol!r}, not {asked.protocol!r}: a reused answer keeps its protocol")
    return PureDP(Fraction(0)), False


def provenance_of(registered: tuple[AnswerSet, ...], asked: LocalCollection) -> AnswerSet | None:
    """The registration of ``asked``'s answers (its collection, question, protocol and answers
    file), or None: a ``kind: local`` table reads no other answers."""
    return next((a for a in registered if (a.collection, a.question, a.protocol, a.answers)
                 == (asked.collection, asked.question, asked.protocol, asked.answers)), None)


def memo_honoured(provenance: AnswerSet, asked: LocalCollection) -> bool:
    """``memoised: true`` costs nothing new only for answers produced from the memo its
    ``memo_of`` names; any others are a fresh collection (charged their ε)."""
    return asked.memoised and provenance.memo_of is not None and provenance.memo_of == asked.memo_of


def unregistered_message(dataset: str, asked: LocalCollection, table: str | None = None) -> str:
    what = f"table {table} ({asked.question!r})" if table else repr(asked.question)
    return (f"the answers to {what} in this data file match no registered answers of collection "
            f"{asked.collection!r} of dataset {dataset!r} ({asked.protocol}): a kind: local table reads only answers "
            "whose provenance the ledger records. Randomize the true answers with `dprelease randomize SPEC TABLE "
            "--input TRUE.csv --output ANSWERS.csv` (it registers its output), or register answers randomized "
            "elsewhere (on the respondents' devices) with `dprelease ledger register-answers SPEC TABLE --answers "
            "FILE --statement TEXT` (who randomized them, and how). A file changed after its registration matches "
            "none. Nothing was spent.")


def check_lifetime_matches(state: DatasetState, from_spec: Budget | None) -> None:
    """A spec may restate the ledger's cap (a budget of the terms' kind), never silently ask for a
    different one."""
    if from_spec is None or from_spec == state.budget:
        return
    last = state.caps[-1]
    if isinstance(from_spec, ApproxDP) and isinstance(state.budget, ApproxDP) and from_spec.delta != state.budget.delta:
        raise LedgerError(
            f"dataset {state.name!r} has a lifetime δ of {fraction_text(state.budget.delta)} in the "
            f"ledger (set {last.set_at[:10]} by {last.set_by}: {last.reason}); the spec asks "
            f"{fraction_text(from_spec.delta)}. Make dataset.lifetime_budget.delta match, or change the cap with "
            f"`dprelease ledger set-budget {state.name} --epsilon E --delta D --reason TEXT`")
    option = "--rho R" if state.terms.kind == "zcdp" else "--epsilon E"
    raise LedgerError(
        f"dataset {state.name!r} has a lifetime budget of {state.terms.symbol} = {amount_text(state.budget)} in "
        f"the ledger (set {last.set_at[:10]} by {last.set_by}: {last.reason}); the spec asks "
        f"{amount_text(from_spec)}. Make dataset.lifetime_budget match, or change the cap with "
        f"`dprelease ledger set-budget {state.name} {option} --reason TEXT`")


def over_lifetime_message(state: DatasetState, requested: Budget) -> str:
    """Why ``requested`` (of the terms' kind) does not fit: in the terms' unit if that is over,
    else, under (ε, δ) terms, in δ."""
    over = subtract(add(state.spent, requested), state.budget)  # one kind, by construction
    delta, cap, spent = delta_of(requested), delta_of(state.budget), delta_of(state.spent)
    if over.amount <= 0 and delta is not None and cap is not None and spent is not None:
        return (f"over the lifetime δ of dataset {state.name!r}: requested δ = {fraction_text(delta)}, remaining "
                f"{fraction_text(cap - spent)} (cap {fraction_text(cap)}, spent {fraction_text(spent)})")
    return (f"over the lifetime budget of dataset {state.name!r}: requested {state.terms.symbol} = "
            f"{amount_text(requested)}, remaining {amount_text(state.remaining)} (cap {amount_text(state.budget)}, "
            f"spent {amount_text(state.spent)}); over by {amount_text(over)}")


def same_people_message(same: tuple[str, str], ledger_id: str) -> str:
    """The refusal of data that is the same people as an earlier dataset's: which, why (words with
    no figure of the data: a scheduled run logs this line to Prefect), the fix."""
    other, why = same
    return (f"this data was already released as dataset {other!r} in this ledger (id {ledger_id}): {why}. The same "
            "people have one lifetime budget, whatever the dataset is called and however its file is written (rows "
            "reordered or repeated, another format, a column or two more or less, column names in other case, some "
            "rows dropped or added). Release it as "
            f"dataset.name: {other.partition('/')[0]}, which shares that budget (`dprelease ledger --dataset {other}`)."
            " Nothing was reserved or spent.")
