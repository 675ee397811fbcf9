"""What both the CLI and the run lifecycle tell the user about a spec and its ledger, in words:
where the ledger is, a ledger chosen away from the one the spec pins, a large δ. Text only; no
decisions are made here."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dprelease.accounting import delta_of, decimal_text
from dprelease.ledger import LedgerLocation, resolve_location

LARGE_DELTA = Fraction(1, 10**5)


def ledger_line(location: LedgerLocation, exists: bool, created: bool = False, ledger_id: str | None = None) -> str:
    """Where the budget lives: location, how it was chosen, the ledger's id, and whether it exists."""
    if created:
        state = " — created now"
    elif exists:
        state = ""
    elif location.pinned:
        state = " — none yet; the first run creates it"
    else:
        state = " — none yet; a run will not create one here (pin `ledger:` in the spec)"
    ident = f" id {ledger_id}" if ledger_id else ""
    return f"ledger{ident}: {location.shown} (chosen by {location.how_chosen}){state}"


def pinned_elsewhere(spec: Any, location: LedgerLocation) -> str | None:
    """A warning when --ledger or $DPRELEASE_LEDGER points away from the ledger the spec pins."""
    if not spec.ledger or location.source not in ("--ledger", "$DPRELEASE_LEDGER"):
        return None
    pinned = resolve_location(None, spec.ledger, spec.source.resolve().parent)
    if pinned.url == location.url:
        return None
    return (f"warning: {spec.source} pins its dataset's ledger at {pinned.shown}; this uses {location.shown} "
            f"({location.how_chosen}). What is spent or recorded there does not count in the spec's ledger.")


def large_delta_warnings(spec: Any) -> list[str]:
    """δ above 1e-5: (ε, δ)-DP allows a total failure (e.g. publishing one person's record) with
    probability δ per person, so δ should be well below 1/(number of persons)."""
    out = []
    for what, delta in (("the release's δ", delta_of(spec.budget)),
                        ("the stated δ", spec.guarantee_delta),
                        ("the lifetime δ", None if spec.dataset.lifetime is None else delta_of(spec.dataset.lifetime))):
        if delta is not None and delta > LARGE_DELTA:
            out.append(f"{what} = {decimal_text(delta)} is large: (ε, δ)-DP may fail outright with probability δ per person; "
                       "choose δ well below 1/(number of persons), e.g. 1e-6 or less")
    return out


REPEATED_STATES = ("committed", "reserved", "drawing")  # published, or being published


def repeated_table_warnings(release: str, tables: Any, state: Any) -> list[str]:
    """Tables of ``release`` (names) that an earlier release of the same dataset (``state``, the
    ledger's ``DatasetState``, or None) already published or is publishing, under another release
    name: the ledger's charges name each measurement ``table`` or ``table/level``. Publishing a
    table again is a new measurement of the same people: it spends again, and the two noisy copies
    average to a more accurate one than either."""
    if state is None:
        return []
    names, out, seen = set(tables), [], set()
    for run in state.runs:
        if run.release == release or run.state not in REPEATED_STATES:
            continue
        for key, _ in run.charges:
            table = key.partition("/")[0]
            if table in names and (table, run.release) not in seen:
                seen.add((table, run.release))
                out.append(f"table {table} was already released in release {run.release} ({run.state}): publishing "
                           "it again spends again (the same people measured twice); drop it from the spec unless "
                           "a second measurement is intended")
    return out
