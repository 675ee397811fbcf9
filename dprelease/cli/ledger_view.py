"""``dprelease ledger`` with no subcommand: the lifetime spend per dataset and its releases, or
where there is none, which ledger this was and the ledgers the specs nearby pin. The body,
typer-free (run by typer through :mod:`dprelease.cli.signatures`, or by :mod:`dprelease.cli.fast`);
the ledger (SQLAlchemy) is imported where one is opened."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from dprelease.cli.common import handled, ledger_if_any, out, say, spec_location
from dprelease.errors import UserError

if TYPE_CHECKING:
    from dprelease.ledger import LedgerLocation


@handled
def ledger_show(ledger: str | None = None, dataset: str | None = None, as_json: bool = False,
                spec_path: Path | None = None) -> None:
    """``dprelease ledger`` (:func:`dprelease.cli.signatures.ledger_show`)."""
    from dprelease.ledger import resolve_location
    from dprelease.cli.render import ledger_json, print_ledger

    if spec_path is not None:
        from dprelease.spec import load_spec

        spec = load_spec(spec_path)
        location = spec_location(spec, ledger)
        dataset = dataset or spec.dataset.name
    else:
        location = resolve_location(ledger)
    states, undeclared, answer_sets = [], {}, ()
    birth = None
    with ledger_if_any(location, reading=True) as opened:
        exists = opened is not None
        ledger_id = opened.id if opened is not None else None
        if opened is not None:
            birth = opened.birth
            say(f"ledger id {opened.id}: " + (birth.shown if birth is not None else
                                              "made before births were recorded (no record of who created it, or why)"))
            names = [dataset] if dataset else opened.datasets()
            states = [s for s in (opened.state(n) for n in names) if s is not None]
            undeclared = {n: r for n, r in opened.undeclared().items() if not dataset or n == dataset}
            answer_sets = opened.answer_sets(dataset)
    if dataset and not exists:
        raise UserError(f"there is no ledger at {location.shown} ({location.how_chosen}), so no dataset {dataset!r}; "
                        f"nothing but `dprelease ledger init` creates one")
    if dataset and not states and not undeclared and not answer_sets:
        raise UserError(f"dataset {dataset!r} is not in the ledger at {location.shown}")
    if as_json:
        print(json.dumps(ledger_json(states, location, exists, ledger_id, undeclared, answer_sets, birth),
                         indent=2))
    elif not states and not undeclared and not answer_sets:
        _nothing_here(location, exists)
    else:
        print_ledger(out, states, undeclared, answer_sets)


def _nothing_here(location: LedgerLocation, exists: bool) -> None:
    """An empty (or absent) ledger, said where the answer is read (stdout): which ledger this was
    and why, and the ledgers the specs in this folder (and its ``configs/``) pin, which is where
    a project's releases are recorded."""
    head = "No datasets with releases in this ledger yet" if exists else "There is no ledger"
    out.print(f"{head} at {location.shown}, chosen by {location.how_chosen}.", markup=False, highlight=False)
    pinned = _pinned_nearby(Path.cwd())
    if pinned:
        out.print("The specs here pin ledgers of their own; `dprelease ledger --spec SPEC` shows a spec's:",
                  markup=False, highlight=False)
        for where, (specs, there) in pinned.items():
            named = ", ".join(specs[:3]) + (f" and {len(specs) - 3} more" if len(specs) > 3 else "")
            out.print(f"  {where} (pinned by {named})" + ("" if there is not False else ": not created yet, `dprelease "
                                                                        f"ledger init --spec {specs[0]} --reason TEXT`"),
                      markup=False, highlight=False)


def _there(location: LedgerLocation) -> bool | None:
    """Whether a SQLite ledger is at ``location`` (only its file is looked at: a hint opens no
    database, and a damaged one is not this command's to report); None for a database server."""
    path = location.sqlite_path
    return None if path is None else path.is_file()


def _pinned_nearby(folder: Path, most: int = 50) -> dict[str, tuple[list[str], bool | None]]:
    """Per ledger that the YAML files of ``folder`` and its ``configs/`` pin (``ledger:``), the
    specs that pin it and whether a ledger is there; read as YAML only (a file that is not a
    spec is passed over)."""
    import yaml

    from dprelease.ledger import resolve_location

    found: dict[str, tuple[list[str], bool | None]] = {}
    paths = sorted([*folder.glob("*.y*ml"), *(folder / "configs").glob("*.y*ml")])[:most]
    for path in paths:
        try:
            pin = yaml.safe_load(path.read_text(encoding="utf-8")).get("ledger")
            if not isinstance(pin, str) or not pin:
                continue
            location = resolve_location(None, pin, path.resolve().parent)
        except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError, UserError, ValueError):
            continue
        if location.shown not in found:
            found[location.shown] = ([], _there(location))
        found[location.shown][0].append(str(path.relative_to(folder)))
    return found
