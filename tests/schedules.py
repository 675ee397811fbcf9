"""For tests that call the scheduled flow's body directly (``scheduled_release.fn``): a binding
kept as ``dprelease schedule`` keeps one, by this process (so the "run" descends from its
serving process), and the run the flow sees (:func:`dprelease.serve.orchestrate.this_run`)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

from dprelease.host import files
from dprelease.serve.binding import ScheduleBinding, ScheduledRun, binding_file

MONTHLY = "0 3 1 * *"


def bind_here(monkeypatch, spec: Path, out: Path, *, ledger: str | None = None,  # type: ignore[no-untyped-def]
              require_approval: bool = True, side_files: tuple[str, ...] = (), name: str = "t",
              cron: str = MONTHLY) -> ScheduleBinding:
    """Keep a binding of deployment ``name`` for this process, and make the flow's run one of that
    deployment triggered now (it runs as the cron's latest firing)."""
    binding = ScheduleBinding.bind(f"dprelease-scheduled/{name}", Path(spec), side_files, ledger, Path(out),
                                   require_approval, cron)
    files.write_text(binding_file(name), json.dumps(asdict(binding)))
    run_as(monkeypatch, name, None)
    return binding


def run_as(monkeypatch, name: str | None, scheduled: datetime | None,  # type: ignore[no-untyped-def]
           created: datetime | None = None) -> None:
    """The flow's run: of deployment ``name``, scheduled for ``scheduled`` (None: triggered now,
    at the moment the flow asks) and created at ``created`` (default: a day before it starts)."""
    from dprelease.serve import orchestrate

    def this_run() -> ScheduledRun:
        start = scheduled or datetime.now(timezone.utc)
        return ScheduledRun(name, start, created or (start if scheduled is None else start - timedelta(days=1)))

    monkeypatch.setattr(orchestrate, "this_run", this_run)


def run_logs(monkeypatch, name: str) -> list[logging.LogRecord]:  # type: ignore[no-untyped-def]
    """What the flow logs through its run logger (``prefect.get_run_logger``), captured in a list
    (and nowhere else) for the test's duration."""
    import prefect

    logger = logging.getLogger(name)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(prefect, "get_run_logger", lambda: logger)
    return records
