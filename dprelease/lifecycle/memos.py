"""The answers a memo check needs, read from a file of local answers: for a registration
(``dprelease randomize``, ``dprelease ledger register-answers``) and for a run of memoised local
tables, whose reservation checks them against the collection they repeat
(:mod:`dprelease.ledger.memos`). The values stay in this process's memory; the ledger keeps
(or compares) keyed digests of them only.
"""

from __future__ import annotations

from pathlib import Path

from dprelease.data.load import source
from dprelease.data.respondents import respondent_answers
from dprelease.data.scan import Source
from dprelease.ledger import DatasetState, Ledger, Respondents
from dprelease.plan import Plan
from dprelease.plan.local import LocalPlan
from dprelease.spec import CategoricalColumn, Spec
from dprelease.spec.defaults import data_format, delimiter


def answers_source(spec: Spec, path: Path) -> Source:
    """A file (or directory) of answers to be registered for ``spec``'s dataset: of the format
    its extension says, else the dataset's; the dataset's missing-value markers apply."""
    told = data_format(str(path))
    return Source(path, told or spec.dataset.format, spec.dataset.na_values,
                  delimiter(str(path)) if told else spec.dataset.delimiter)


def read_respondents(spec: Spec, src: Source, id_column: str, questions: list[str]) -> Respondents:
    """Each row's respondent id and answer to each of ``questions`` (local tables' columns of
    ``spec``) in the answers at ``src``, with every question the spec's local tables ask (the
    ledger refuses any of them as the id column). A DataError for an empty id or an undeclared
    answer."""
    ids, answers = respondent_answers(spec, src, id_column, questions)
    domains = {q: column.values for q in questions if isinstance(column := spec.column(q), CategoricalColumn)}
    return Respondents(id_column, ids, answers, domains, frozenset(t.column for t in spec.local_tables))


def run_respondents(spec: Spec, plan: Plan, state: DatasetState | None, ledger: Ledger) -> Respondents | None:
    """The answers of the run's memoised local collections, read from the data with their
    respondent ids, for the reservation to check; None when none is memoised, or no id column
    is known (the reservation then refuses the memo as unverifiable).

    The id column is the one registered with these answers, else the one the repeated
    collection's digests were kept with (answers registered before the check existed)."""
    memoised = [p for p in plan.local if p.collection.memoised]
    if not memoised:
        return None
    column = next((p.provenance.respondent_id for p in memoised if p.provenance and p.provenance.respondent_id),
                  None) or _origin_id_column(spec, memoised, state, ledger)
    if column is None:
        return None
    return read_respondents(spec, source(spec), column, [p.column for p in memoised])


def _origin_id_column(spec: Spec, memoised: list[LocalPlan], state: DatasetState | None, ledger: Ledger) -> str | None:
    for p in memoised:
        recorded = next((r for r in (state.local if state else ()) if (r.collection, r.question)
                         == (p.collection.memo_of, p.column)), None)
        if recorded is not None and recorded.answers:
            found = registered_id_column(ledger, spec.dataset.name, recorded.collection, p.column, recorded.answers)
            if found:
                return found
    return None


def registered_id_column(ledger: Ledger, dataset: str, collection: str, question: str,
                         answers: str | None = None) -> str | None:
    """The respondent id column ``collection``'s answers to ``question`` (randomized afresh; in
    the file ``answers`` if given) were registered with, if any was."""
    return next((a.respondent_id for a in ledger.answer_sets(dataset, answers)
                 if (a.collection, a.question, a.memo_of) == (collection, question, None) and a.respondent_id), None)
