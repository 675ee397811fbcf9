"""The binding of a served deployment (issue 27, item 8; :mod:`dprelease.serve.binding`),
without a Prefect server: a run's date must be the latest firing of the bound cron; the binding
is trusted only from this user's owner-only data directory, written by a running `dprelease
schedule` that started the run; the spec's domain and mapping files are bound with it. The
scheduled flow's body is called directly (:mod:`tests.schedules`); tests/test_schedule.py serves
real deployments on the session's Prefect server."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dprelease.serve.binding import ScheduleBinding
from tests.schedules import MONTHLY, bind_here, run_as, run_logs
from tests.test_operations import demo_spec
from tests.test_schedule import demo_spec_with_its_domain


def test_a_scheduled_runs_date_is_the_latest_firing_of_its_bound_cron():
    """Issue 27, item 8 (review 1): a run's scheduled start comes from the API, and names its
    release. It is taken only when it is the latest firing of the bound cron at or before now
    (give or take a minute of clock skew); a run triggered for "now" (scheduled within a minute of
    its creation) runs as the latest firing at or before then; a date older than one period, in
    the future or that is no firing is refused."""
    from dprelease.serve.binding import NotBound, ScheduledRun

    binding = ScheduleBinding.bind("dprelease-scheduled/m", Path(__file__), (), None, Path("/o"), True, MONTHLY)
    utc = lambda *args: datetime(*args, tzinfo=timezone.utc)  # noqa: E731
    march, now, day = utc(2027, 3, 1, 3, 0), utc(2027, 3, 15, 12, 0), timedelta(days=1)

    def date(scheduled: datetime | None, created: datetime | None, at: datetime = now) -> datetime:
        return binding.run_date(ScheduledRun("m", scheduled, created), at)

    assert date(march, march - day) == march  # the schedule's own run
    assert date(march, march - day, utc(2027, 3, 1, 2, 59, 30)) == march  # a little early: the clocks differ
    assert date(march, march - day, utc(2027, 4, 1, 2, 59)) == march  # late, but before the next firing
    assert date(march.astimezone(timezone(timedelta(hours=-5))), march - day) == march  # the same instant
    triggered = utc(2027, 3, 15, 11, 59, 58)  # `prefect deployment run` without --start-at
    assert date(triggered, triggered - timedelta(seconds=1)) == march
    assert date(triggered, triggered + timedelta(seconds=30)) == march
    older = "which is older than one period of its cron '0 3 1 * *' (the next firing, {} UTC, has come)"
    refused = {  # (scheduled, created, now): why
        (utc(2027, 2, 1, 3, 0), utc(2027, 1, 31), now): "2027-02-01 03:00 UTC, " + older.format("2027-03-01 03:00"),
        (march, march - day, utc(2027, 4, 1, 3, 0)): "2027-03-01 03:00 UTC, " + older.format("2027-04-01 03:00"),
        (utc(2001, 1, 1, 3, 0), now - day, now): "2001-01-01 03:00 UTC, " + older.format("2001-02-01 03:00"),
        (utc(2027, 4, 1, 3, 0), now - day, now): "2027-04-01 03:00 UTC, which is in the future",
        (utc(2027, 3, 10, 12, 34), utc(2027, 3, 10), now): "2027-03-10 12:34 UTC, which is not a firing of its cron "
                                                              "'0 3 1 * *'",
        (utc(2027, 3, 1, 3, 0, 1), march - day, now): "2027-03-01 03:00:01 UTC, which is not a firing",
        (triggered, triggered - timedelta(minutes=2), now): "2027-03-15 11:59:58 UTC, which is not a firing",
    }
    for (scheduled, created, at), why in refused.items():
        with pytest.raises(NotBound) as caught:
            date(scheduled, created, at)
        due = "2027-04-01 03:00 UTC" if at.month == 4 else "2027-03-01 03:00 UTC"
        assert str(caught.value).startswith(f"deployment dprelease-scheduled/m: this run is dated {why}"), caught.value
        assert f": a scheduled run releases the period of the latest firing at or before now ({due}) and no other; " \
               "trigger it without a start time to run that one" in str(caught.value), caught.value
        assert str(caught.value).endswith("Nothing was opened, reserved or spent."), caught.value
    with pytest.raises(NotBound, match="has no scheduled start"):
        date(None, None)


def test_a_forged_date_is_refused_by_the_flow_before_anything_is_opened(tmp_path, monkeypatch):
    """The flow's body, called directly, with a binding of this process: a run dated a month of
    2001, the next firing (in the future) or a moment that is no firing fails with one ERROR line
    and the lifecycle is never called; the latest firing, and a trigger for now, run dated it."""
    import logging

    import dprelease.lifecycle
    from dprelease.serve import orchestrate
    from dprelease.serve.cron import firings, latest_firing

    records = run_logs(monkeypatch, "test-forged-dates")
    calls: list[dict] = []  # type: ignore[type-arg]
    monkeypatch.setattr(dprelease.lifecycle, "run_spec", lambda *args, **kwargs: calls.append(kwargs))
    spec, out = demo_spec(tmp_path), tmp_path / "out"
    bind_here(monkeypatch, spec, out)
    naive_now = datetime.now(timezone.utc).replace(tzinfo=None)
    latest = latest_firing(MONTHLY, naive_now).replace(tzinfo=timezone.utc)
    following = firings(MONTHLY, naive_now, 1)[0].replace(tzinfo=timezone.utc)
    forged = {"2001-01-01 03:00 UTC, which is older than one period": datetime(2001, 1, 1, 3, tzinfo=timezone.utc),
              f"{following:%Y-%m-%d %H:%M} UTC, which is in the future": following,
              f"{latest - timedelta(hours=23, minutes=53):%Y-%m-%d %H:%M} UTC, which is not a firing":
                  latest - timedelta(hours=23, minutes=53)}
    for said, when in forged.items():
        records.clear()
        run_as(monkeypatch, "t", when)
        state = orchestrate.scheduled_release.fn(str(spec), None, str(out), True)
        assert state.is_failed() and state.message.startswith(
            f"refused (exit 2): deployment dprelease-scheduled/t: this run is dated {said}"), state.message
        assert [(r.levelname, r.getMessage()) for r in records if r.levelno >= logging.WARNING] == [
            ("ERROR", state.message)]
    assert calls == [] and not out.exists()
    for when in (latest, None):  # the firing itself, and a trigger for now
        run_as(monkeypatch, "t", when)
        assert orchestrate.scheduled_release.fn(str(spec), None, str(out), True) is None
    assert [c["run_date"] for c in calls] == [latest, latest]


def test_a_binding_is_trusted_only_from_this_users_owner_only_data_directory(tmp_path, monkeypatch):
    """Issue 27, item 8 (review 2): the binding is read from dprelease's data directory, never
    the environment; it, ``schedules`` and the data directory must be this user's, open to no one
    else, and no symlink — else the run is refused (what a run whose HOME or XDG_DATA_HOME points
    at another user's directory meets); and the process that wrote it must still run and have
    started this one (a worker's run, or a copy of an old binding, is refused)."""
    import logging
    import re

    import prefect

    import dprelease.lifecycle
    from dprelease.host import files
    from dprelease.serve import orchestrate
    from dprelease.host.processes import data_dir, process_start
    from dprelease.serve.binding import NotBound, binding_file, read_binding

    calls: list[tuple] = []  # type: ignore[type-arg]
    monkeypatch.setattr(dprelease.lifecycle, "run_spec", lambda *args, **kwargs: calls.append(args))
    monkeypatch.setattr(prefect, "get_run_logger", lambda: logging.getLogger("test-binding-files"))
    spec, out = demo_spec(tmp_path), tmp_path / "out"
    binding = bind_here(monkeypatch, spec, out)
    path = binding_file("t")
    assert read_binding("t") == binding and path.parent.parent == data_dir()
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"

    def run_refused(match: str) -> None:
        state = orchestrate.scheduled_release.fn(str(spec), None, str(out), True)
        assert state.is_failed() and state.message.startswith("refused (exit 2): ")
        assert re.search(match, state.message.removeprefix("refused (exit 2): ")), state.message
        assert state.message.endswith("Nothing was opened, reserved or spent.")

    def refused(match: str) -> None:
        with pytest.raises(NotBound, match=match):
            read_binding("t")
        run_refused(match)

    for where, kind in ((path, "file"), (path.parent, "directory"), (data_dir(), "directory")):
        mode = where.stat().st_mode & 0o777
        where.chmod(mode | 0o044 if kind == "file" else 0o755)
        refused(rf"^{re.escape(str(where))} is not a {kind} of yours open to you alone \(owner uid {os.getuid()}, mode "
                rf"{'-rw-r--r--' if kind == 'file' else 'drwxr-xr-x'}\)")
        where.chmod(mode)
    with monkeypatch.context() as m:  # as another user sees them (or this user, given another's directory)
        m.setattr(os, "getuid", lambda: os.stat(path).st_uid + 1)
        refused(rf"^{re.escape(str(data_dir()))} is not a directory of yours open to you alone \(owner uid "
                rf"{os.stat(path).st_uid}")
    real = path.with_name("real.json")
    path.rename(real)
    path.symlink_to(real)
    refused(r"cannot read the binding of deployment 't' at .*: Too many levels of symbolic links \(a symbolic link is "
            "refused\\)")
    path.unlink()
    real.rename(path)
    path.write_text(path.read_text().replace('"dprelease-scheduled/t"', '"dprelease-scheduled/other"'))
    path.chmod(0o600)
    refused(r"is not the binding of deployment 't'")

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # a binding of a live process that did not start this one (a worker's run, say)
        files.write_text(path, json.dumps(dataclasses.asdict(dataclasses.replace(
            binding, pid=sleeper.pid, start=process_start(sleeper.pid)))))
        run_refused(rf"^deployment dprelease-scheduled/t: this flow run was not started by the `dprelease schedule` "
                    rf"process serving it \(PID {sleeper.pid}\), e\.g\. by a Prefect worker")
    finally:
        sleeper.kill()
        sleeper.wait()
    run_refused(rf"^deployment dprelease-scheduled/t: the `dprelease schedule` process that bound it \(PID "
                rf"{sleeper.pid}\) no longer runs")  # a copy of an old binding, say
    assert calls == []


def test_the_spec_s_domain_and_mapping_files_are_bound_too(tmp_path, monkeypatch):
    """Issue 27, item 8 (review 2): a domain file or a geography mapping file shapes the release
    as much as the spec: `schedule` binds their bytes (``Spec.side_files``) and a run after either
    changed is refused, naming it; nothing else runs."""
    import logging

    import prefect

    import dprelease.lifecycle
    from dprelease.serve import orchestrate
    from dprelease.spec import load_spec
    from tests.conftest import SPECS

    calls: list[tuple] = []  # type: ignore[type-arg]
    monkeypatch.setattr(dprelease.lifecycle, "run_spec", lambda *args, **kwargs: calls.append(args))
    monkeypatch.setattr(prefect, "get_run_logger", lambda: logging.getLogger("test-side-files"))
    spec = demo_spec_with_its_domain(tmp_path)
    geo = tmp_path / "geo.yaml"
    geo.write_text((SPECS / "bad" / "geo_mapping_incomplete.yaml").read_text().replace("partial_mapping", "mapping"))
    (tmp_path / "mapping.csv").write_text("01001,010\n01002,010\n01101,011\n02001,020\n")
    assert load_spec(spec).side_files == ("domains/puma.txt",) and load_spec(geo).side_files == ("mapping.csv",)
    out = tmp_path / "out"
    for served, side in ((spec, tmp_path / "domains" / "puma.txt"), (geo, tmp_path / "mapping.csv")):
        bind_here(monkeypatch, served, out, side_files=load_spec(served).side_files)
        assert orchestrate.scheduled_release.fn(str(served), None, str(out), True) is None
        side.write_text(side.read_text() + "# edited after schedule started\n")
        state = orchestrate.scheduled_release.fn(str(served), None, str(out), True)
        assert state.is_failed() and state.message.startswith(
            f"refused (exit 2): deployment dprelease-scheduled/t: its domain or mapping file {side} changed since "
            "`dprelease schedule` started serving it"), state.message
        side.unlink()
        state = orchestrate.scheduled_release.fn(str(served), None, str(out), True)
        assert state.is_failed() and f"its domain or mapping file {side} cannot be read now" in state.message
    assert len(calls) == 2


def test_a_binding_is_kept_while_its_schedule_serves_and_by_one_schedule_only(tmp_path):
    """`schedule` keeps its binding owner-only for as long as it serves (removed after), refuses a
    data directory open to others before serving (not at the first run), and refuses to serve a
    deployment another running `schedule` serves."""
    from dprelease.errors import UserError
    from dprelease.host.processes import data_dir, process_start
    from dprelease.serve.binding import binding_file, read_binding, serving

    spec = demo_spec(tmp_path)
    binding = ScheduleBinding.bind("dprelease-scheduled/kept", spec, (), None, tmp_path / "out", True, MONTHLY)
    with serving(binding) as path:
        assert path == binding_file("kept") and read_binding("kept") == binding
        assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert not path.exists()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = dataclasses.replace(binding, pid=sleeper.pid, start=process_start(sleeper.pid))
        with serving(other):
            with pytest.raises(UserError, match=rf"already served by `dprelease schedule` \(PID {sleeper.pid}\)"):
                with serving(binding):
                    pass
            assert read_binding("kept") == other
    finally:
        sleeper.kill()
        sleeper.wait()
    data_dir().chmod(0o755)
    try:
        with pytest.raises(UserError, match="is not a directory of yours open to you alone"):
            with serving(binding):
                pass
        assert not binding_file("kept").exists()
    finally:
        data_dir().chmod(0o700)
