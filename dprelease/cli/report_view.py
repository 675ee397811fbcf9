"""``dprelease report``: a published release's budget report (HTML with its figures, markdown or
JSON), read back from its manifest and, when reachable, its ledger. The body, typer-free (run
by typer through :mod:`dprelease.cli.signatures`, or by :mod:`dprelease.cli.fast`)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from dprelease.host import files
from dprelease.cli.common import handled, ledger_if_any, out, usage_error
from dprelease.errors import UserError


@handled
def report(release_dir: Path, fmt: str = "html", output: Path | None = None, ledger: str | None = None) -> None:
    """``dprelease report RELEASE_DIR`` (:func:`dprelease.cli.signatures.report`)."""
    from dprelease.ledger import resolve_location
    from dprelease.publish.manifest_reader import read_manifest
    from dprelease.report import published as reporting
    from dprelease.report.html import page

    if fmt not in ("html", "md", "json"):
        raise usage_error("use html, md or json", param_hint="--format")
    manifest = read_manifest(release_dir)
    recorded = (manifest.get("ledger") or {}).get("location")  # where the release's budget lives
    location = resolve_location(ledger or recorded)  # the release's own ledger, like a pin: never the variable's
    if not ledger and recorded:
        location = dataclasses.replace(location, source="manifest")
    with ledger_if_any(location, reading=True) as opened:
        state = opened.state(manifest["dataset"]) if opened is not None else None
    if fmt == "json":
        text = json.dumps(reporting.report_json(manifest, state), indent=2, ensure_ascii=False) + "\n"
    else:
        markdown = (release_dir / "budget_report.md").read_text("utf-8") if (release_dir / "budget_report.md").is_file() \
            else ""
        text = markdown if fmt == "md" else page(manifest, state)
    if output is None and fmt == "html":
        output = release_dir / "budget_report.html"
    if output is None:
        sys.stdout.write(text)
        return
    try:
        files.write_text(output, text)  # owner-only, like every file dprelease writes
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc}") from None
    out.print(f"wrote {output}", markup=False)
