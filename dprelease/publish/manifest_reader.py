"""The one reader of a published manifest: its JSON, its format, and its budgets typed.

Every reader of a release — :mod:`dprelease.publish.reading` (``dprelease.read_release``), the
reports (:mod:`dprelease.report`), ``dprelease postprocess`` and the scheduled flow — reads a
manifest here, so there is one answer to "what does this release state". A manifest states
every budget as a record that names its unit (:func:`dprelease.publish.manifest.budget_record`:
``{"epsilon": "1/4"}``, ``{"rho": "3/10"}``, ``{"epsilon": "1/2", "delta": "1/1000000"}``),
read back exactly (never through a float) into the typed budgets of
:mod:`dprelease.accounting`.

Two places read ``manifest.json`` without this reader, on purpose: the check that an output
directory holds no other dataset's release (:mod:`dprelease.publish.layout`) and the recovery of
an interrupted publication (:mod:`dprelease.lifecycle.recover`) must see a release of any format,
and read only its identifiers.

Format. :data:`MANIFEST_FORMAT` (2) has the typed records only. Format 1, written by dprelease
before typed records replaced them, named every figure ``epsilon`` whatever its unit; nothing
outside this project reads it, and this version refuses it with the version that wrote it (read
such a release with that version). Ledger-free and data-free: imports the accounting and the
errors only, so ``read_release`` and the reports stay light.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dprelease.accounting import Budget, budget_from_record, subtract
from dprelease.errors import UserError

MANIFEST_FORMAT = 2  # typed budget records only (format 1 had the untyped figures beside them, or alone)


class NotARelease(UserError):
    """The path is not a published release this version can read, or the release was altered."""


def read_json(path: Path) -> Any:
    """A JSON file of a published release (``manifest.json``, ``spec.json``), or a clear error."""
    try:
        return json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise NotARelease(f"{path} not found: is {path.parent} a published release directory?") from None
    except (OSError, ValueError) as exc:
        raise NotARelease(f"cannot read {path} ({exc}); the release directory has been altered") from None


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of the release in ``directory``, checked to be one this version reads."""
    manifest = read_json(directory / "manifest.json")
    if not isinstance(manifest, dict) or "format" not in manifest or "tables" not in manifest:
        raise NotARelease(f"{directory}/manifest.json is not a dprelease manifest (it has no format and tables); "
                          "give the directory of a release published by `dprelease run`")
    if manifest["format"] != MANIFEST_FORMAT:
        from dprelease import __version__

        written = manifest.get("software", {}).get("version", "unknown") if isinstance(manifest.get("software"),
                                                                                       dict) else "unknown"
        raise NotARelease(f"{directory}/manifest.json is of manifest format {manifest['format']!r}; dprelease "
                          f"{__version__} reads format {MANIFEST_FORMAT}: read it with the version that wrote it "
                          f"(dprelease {written})")
    return manifest


def read_budget(record: Any) -> Budget:
    """One budget record of a manifest as a typed budget, exactly: ``{"epsilon": …}`` is ε-DP,
    ``{"rho": …}`` ρ-zCDP and ``{"epsilon": …, "delta": …}`` (ε, δ)-DP. Anything else is a
    UserError (the manifest was altered)."""
    if not isinstance(record, Mapping):
        raise NotARelease(f"manifest budget {record!r} is not a record such as {{\"epsilon\": \"1/4\"}}: "
                          "the manifest was altered")
    try:
        return budget_from_record(record)
    except ValueError as exc:
        raise NotARelease(f"manifest budget: {exc}") from None


@dataclass(frozen=True, slots=True)
class ReleaseBudgets:
    """A published release's budgets as its manifest states them, typed (:func:`release_budgets`)."""

    total: Budget  # the tables' budgets composed, of the spec's kind
    release: Budget  # the spec's budget: block, of the same kind
    ledger_charge: Budget  # what the dataset's ledger was charged, of its terms' kind
    cap: Budget  # the dataset's lifetime budget, of its terms' kind
    spent_before: Budget  # of the lifetime budget, before this release
    spent_after: Budget

    @property
    def remaining(self) -> Budget:
        """What remained of the lifetime budget after this release: exactly cap − spent after."""
        return subtract(self.cap, self.spent_after)  # one kind: checked by release_budgets


def release_budgets(manifest: Mapping[str, Any]) -> ReleaseBudgets:
    """A manifest's release and lifetime budgets, typed; a manifest whose budgets mix kinds (the
    release's, or its ledger's) was altered."""
    try:
        typed = manifest["budget"]
        life = typed["lifetime"]
        found = ReleaseBudgets(*(read_budget(r) for r in (typed["total"], typed["release"], typed["ledger_charge"],
                                                           life["cap"], life["spent_before"], life["spent_after"])))
    except (KeyError, TypeError) as exc:
        raise NotARelease(f"the manifest has no {exc.args[0]!r} budget record: it was altered") from None
    spec_kinds = {found.total.kind, found.release.kind}
    ledger_kinds = {b.kind for b in (found.ledger_charge, found.cap, found.spent_before, found.spent_after)}
    if len(spec_kinds) > 1 or len(ledger_kinds) > 1:
        raise NotARelease(f"the manifest's budgets mix kinds (the release's: {', '.join(sorted(spec_kinds))}; its "
                          f"ledger's: {', '.join(sorted(ledger_kinds))}; each is one kind): it was altered")
    return found


def entry_budget(entry: Mapping[str, Any]) -> Budget:
    """A table's (or a mean's part's) budget in a manifest, of the spec's kind."""
    if "budget" not in entry:
        raise NotARelease(f"the manifest's entry {entry.get('name', entry.get('part'))!r} has no budget record: "
                          "it was altered")
    return read_budget(entry["budget"])
