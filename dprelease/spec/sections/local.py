"""A ``kind: local`` table: answers randomized by the respondents themselves (local DP), checked
against the declared column of answers and the protocol's ε."""

from __future__ import annotations

from typing import Any

from dprelease.spec import defaults
from dprelease.spec.model import CategoricalColumn, Column, LocalTable
from dprelease.spec.sections.reader import Reader
from dprelease.spec.yamlsource import Path_


def local_table(r: Reader, at: Path_, body: dict[str, Any], columns: dict[str, Column],
                release: str | None) -> LocalTable | None:
    """The protocol, its ε, and a declared column of randomized answers; None if invalid (reported).
    ``release`` is the release name as written (a collection's default)."""
    name, column, protocol = body.get("name"), body.get("column"), body.get("protocol")
    if not all(isinstance(v, str) for v in (name, column, protocol)) or protocol not in ("k_rr", "coin_flip"):
        return None  # the schema has reported it
    declared = columns.get(column)  # type: ignore[arg-type]
    if not isinstance(declared, CategoricalColumn):
        r.fail(at + ("column",), f"{column!r} is not a declared column with a domain: the randomized answers "
               "are a categorical column under columns:, whose domain is the protocol's")
        return None
    if declared.missing is not None:
        r.fail(at + ("column",), f"column {column!r} declares a missing value; every randomized answer is one "
               "of the domain's values: remove missing: from the column")
        return None
    k = len(declared.values)
    epsilon = None
    if protocol == "coin_flip":
        if r.written(at + ("epsilon_local",)):
            r.fail(at + ("epsilon_local",), "the coin-flip protocol's ε is ln 3 (truth with probability 3/4); "
                   "remove epsilon_local:, or use protocol: k_rr", at_key=True)
            return None
        if k != 2:
            r.fail(at + ("protocol",), f"the coin-flip protocol is for yes/no questions; column {column!r} has "
                   f"{k} values: use protocol: k_rr with epsilon_local:")
            return None
    else:
        if not r.written(at + ("epsilon_local",)):
            r.fail(at, "protocol: k_rr needs each respondent's ε: add epsilon_local: (e.g. 1)")
            return None
        epsilon = r.fraction(at + ("epsilon_local",), "ε_local")
        if epsilon is None:
            return None
        if epsilon.denominator > 10**12 or epsilon.numerator > 10**12:
            r.fail(at + ("epsilon_local",), "epsilon_local needs at most 12 significant digits")
            return None
    if declared.on_out_of_domain == "drop":
        r.fail(at + ("column",), f"column {column!r} says on_out_of_domain: drop; the number of answers is "
               "published, so every answer must be a declared value: remove on_out_of_domain: drop")
        return None
    memoised = body.get("memoised", False) is True
    memo_of = body.get("memo_of")
    collection = defaults.collection(body.get("collection"), release)
    if memoised and not isinstance(memo_of, str):
        r.fail(at, "a memoised collection repeats the randomized answers of an earlier collection: add "
               "memo_of: COLLECTION (the collection whose memo the respondents reuse)")
        return None
    if memo_of is not None and not memoised:
        r.fail(at + ("memo_of",), "memo_of: is for memoised: true collections", at_key=True)
        return None
    if memo_of == collection:
        r.fail(at + ("memo_of",), "a collection cannot repeat itself: memo_of: names an earlier collection")
        return None
    return LocalTable(name, column, protocol, epsilon, collection,  # type: ignore[arg-type]
                      memoised, body.get("description"), memo_of)
