"""What both the CLI and the run lifecycle tell the user about a spec and its ledger, in words:
where the ledger is and how it was chosen, a large δ, a table measured again; and the one
check of a ledger choice that every command of a spec's dataset makes
(:func:`refuse_ledger_choice`): no ledger is born by choosing it, and a pin is a pin."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dprelease.accounting import delta_of, decimal_text
from dprelease.errors import LedgerError

if TYPE_CHECKING:  # the ledger (SQLAlchemy) is imported where a ledger is in hand: validate needs none
    from dprelease.ledger import Ledger, LedgerLocation

LARGE_DELTA = Fraction(1, 10**5)
BORN_HERE = "every lifetime budget of the datasets it records starts here"


def init_command(location: LedgerLocation) -> str:
    return f"dprelease ledger init {location.shown} --reason TEXT"


def ledger_line(location: LedgerLocation, exists: bool, created: bool = False, ledger_id: str | None = None) -> str:
    """Where the budget lives: location, how it was chosen, the ledger's id, and whether it exists."""
    if created:
        state = f" — created now: {BORN_HERE}"
    elif exists:
        state = ""
    elif location.may_create:
        state = f" — no ledger there yet: a run given this --ledger creates it, and {BORN_HERE}"
    else:
        state = f" — no ledger there; nothing but `{init_command(location)}` creates one"
    ident = f" id {ledger_id}" if ledger_id else ""
    return f"ledger{ident}: {location.shown} (chosen by {location.how_chosen}){state}"


def start_note(spec: Any, location: LedgerLocation, ledger: Ledger) -> str | None:
    """A dataset new to a ledger that only ``$DPRELEASE_LEDGER`` chose (the spec pins none): its
    lifetime budget would start there on the variable's word, said before it does."""
    from dprelease.ledger import ENV

    if location.source != f"${ENV}" or ledger.state(spec.dataset.name) is not None:
        return None
    return (f"warning: dataset {spec.dataset.name!r} is new to ledger id {ledger.id} at {location.shown}, which only "
            f"${ENV} chose (the spec pins no ledger): its lifetime budget starts there, on a variable's word. Pin the "
            "dataset's ledger in the spec (ledger: PATH), so that no variable decides where its budget lives")


def opened_notes(spec: Any, location: LedgerLocation, ledger: Ledger) -> list[str]:
    """What is said of a spec's ledger once it is open: a copy (:func:`copy_note`), a budget
    started on a variable's word (:func:`start_note`)."""
    return [n for n in (copy_note(ledger), start_note(spec, location, ledger)) if n is not None]


def copy_note(ledger: Ledger) -> str | None:
    """A ledger opened away from where it was created: moved (fine), or copied (each copy would
    spend the same people's lifetime budget afresh): said, so an operator can tell which."""
    birth = ledger.birth
    if birth is None or not birth.where or birth.where == ledger.location.shown:
        return None
    return (f"warning: ledger id {ledger.id} was created at {birth.where} and is opened at {ledger.location.shown}. "
            "If it was moved, fine (pin the new place); if it was copied (a project copied whole, a backup restored "
            "beside the original), each copy spends the same people's lifetime budget on its own: keep one, and "
            "remove the other")


def location_notes(spec: Any, location: LedgerLocation) -> list[str]:
    """A variable the spec's pin overrode: said, so nobody believes it chose the ledger."""
    from dprelease.ledger import ENV

    if location.env_ignored:
        return [f"note: ${ENV} is set but not used: {spec.source} pins its dataset's ledger (ledger: "
                f"{spec.ledger}), and a pin is a pin; unset ${ENV} or pass --ledger to name a ledger that moved"]
    return []


def refuse_ledger_choice(spec: Any, location: LedgerLocation, ledger: Ledger | None) -> None:
    """Refuse (LedgerError, nothing created or spent) a command of ``spec``'s dataset whose ledger
    is not there (no command but ``dprelease ledger init`` creates one from a spec's pin,
    ``$DPRELEASE_LEDGER`` or the default), whose ``--ledger`` points away from the spec's pin
    to a ledger that does not record the dataset (only a ledger that moved may be named so), or
    that would start the dataset's lifetime budget in the per-user default ledger (another user,
    a CI account or a container, with another HOME, would start the same data afresh)."""
    from dprelease.ledger import ENV

    if location.pin is not None:
        if ledger is None or ledger.state(spec.dataset.name) is None:
            there = "there is no ledger there" if ledger is None else \
                f"the ledger there (id {ledger.id}) does not record dataset {spec.dataset.name!r}"
            raise LedgerError(
                f"{spec.source} pins its dataset's ledger at {location.pin_shown}; --ledger {location.shown} points "
                f"elsewhere, and {there}. A pin is a pin: --ledger may name another location only where the dataset's "
                "ledger moved (a ledger that records it). To move the budget's home, edit ledger: in the spec. "
                "Nothing was created or spent.")
        return
    if ledger is not None:
        if location.source == "default" and ledger.state(spec.dataset.name) is None:
            raise LedgerError(
                f"{spec.source}: dataset {spec.dataset.name!r} has no lifetime budget in the per-user default ledger "
                f"{location.shown}, and the spec does not say where its lifetime budget lives. A dataset's budget "
                "never starts there: another user or machine would start the same data from a fresh budget. Pin it "
                "in the spec with `ledger: PATH` (relative to the spec file, e.g. ledger: ../ledgers/ledger.sqlite, "
                "or a database URL such as postgresql://host/ledger) and create that ledger with `dprelease ledger "
                "init --spec SPEC --reason TEXT`. Nothing was created or spent.")
        return
    left = _key_left(location)
    if left is not None:
        raise LedgerError(
            f"there is no ledger at {location.shown} (chosen by {location.how_chosen}), but its fingerprint key {left} "
            "is there: the ledger was moved or deleted, and a fresh one there would restart every lifetime budget it "
            "held. Restore it from a backup, or point the spec's ledger: (or --ledger) to where it is now. Nothing was "
            "created or spent.")
    if location.spec_pinned:
        folder = spec.source.resolve().parent
        raise LedgerError(
            f"{spec.source} pins its dataset's ledger at {location.shown} (ledger: {spec.ledger}"
            + (f", relative to the spec's folder {folder}" if "://" not in str(spec.ledger)
               and not str(spec.ledger).startswith(("/", "~")) else "")
            + "), and there is no ledger there. No command but `dprelease ledger init` creates one: a copied spec or "
            "a second clone would start the same people from a fresh lifetime budget. If this spec was copied or "
            "moved, pin the dataset's existing ledger (an absolute path or a database URL); to start its lifetime "
            f"budget there deliberately: dprelease ledger init --spec {spec.source} --reason TEXT. "
            "Nothing was created or spent.")
    why = {f"${ENV}": "a variable never creates one: a profile left from another project would start the same "
                      "people from a fresh lifetime budget",
           "default": "the per-user default never gets one by a command: another user, account or container would "
                      "start the same people from a fresh lifetime budget",
           }.get(location.source, "a ledger is born only by `dprelease ledger init` (or by `dprelease run --ledger` "
                                  "of a spec that pins none)")
    create = ("create one there with `dprelease ledger init --spec SPEC --reason TEXT`" if location.source == "default"
              else f"create one deliberately: {init_command(location)}")  # (a dataset never starts at the default)
    raise LedgerError(
        f"there is no ledger at {location.shown} (chosen by {location.how_chosen}), and {why}. Pin it in the spec "
        f"with `ledger: PATH` (relative to the spec file, or a database URL) where the dataset's ledger is, or "
        f"{create}. Nothing was created or spent.")


def _key_left(location: LedgerLocation) -> Path | None:
    """The key file a SQLite ledger left beside its location when it was moved or deleted."""
    from dprelease.ledger import keys

    path = location.sqlite_path
    key = None if path is None else keys.beside(path)
    return key if key is not None and key.exists() else None


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


def context_warnings(spec: Any, state: Any) -> list[str]:
    """What `plan` warns of beyond the plan's own review, in its order: a large δ, then tables an
    earlier release of the dataset already published (``state``: the ledger's ``DatasetState``, or
    None). `plan`, `schedule` and the manifest (so every report) say the same."""
    return large_delta_warnings(spec) + repeated_table_warnings(spec.release, [t.name for t in spec.tables], state)


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
