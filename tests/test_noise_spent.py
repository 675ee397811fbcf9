"""Noise drawn is spent (issue 19, item 1): the ledger records, before the first draw and in a
transaction that checks the reservation is still live, that a run is drawing noise; from then
on its reservation is committed or failed, never voided. A live run's reservation cannot be
settled by hand (its lease), a run whose reservation was settled without it stops before
drawing, and a run whose commit fails leaves no noisy file behind.

Each scenario is a reproducer of the outside review: it failed on the code before this change.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dprelease.accounting import PureDP
from dprelease.ledger import Ledger, resolve_location
from tests.conftest import ROOT
from tests.test_crash import SPENT, resolve
from tests.test_run import _killed_at, _spec, child_env, ledger_state

DATASET = "nist-acs-national-2019"


def paused_at(stage: str, spec: Path, out: Path, run_env, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A run paused at ``stage`` (dprelease.faults), resumed when the returned file is created."""
    flag, resume = tmp_path / f"flag-{stage}", tmp_path / f"resume-{stage}"
    env = child_env({**run_env, "DPRELEASE_FAULT_AT": stage, "DPRELEASE_FAULT_FLAG": str(flag),
                     "DPRELEASE_FAULT_RESUME": str(resume)})
    victim = subprocess.Popen([sys.executable, "-m", "tests.faulty_cli", "run", str(spec), "--output-dir", str(out)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert victim.poll() is None, victim.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return victim, resume


def settle_behind_its_back(run_id: str, action: str) -> None:
    """What an operator could do if the lease guard were wrong (another host, a lapsed heartbeat)."""
    ledger = Ledger.open(resolve_location())
    try:
        getattr(ledger, action)(run_id, reason="behind the run's back")
    finally:
        ledger.close()


def test_void_is_refused_while_the_paused_run_lives(tmp_path, run_env):
    spec, out = _spec(tmp_path, "paused"), tmp_path / "out"
    victim, _ = paused_at("reserved", spec, out, run_env, tmp_path)
    try:
        [record] = ledger_state(DATASET).runs
        refused = resolve(record.run_id, "void", run_env)
        assert refused.returncode == 2 and "may still be running" in refused.stderr, refused.stderr
        assert f"its process {victim.pid}" in refused.stderr
        assert ledger_state(DATASET).runs[0].state == "reserved"
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=300)
    settled = resolve(record.run_id, "void", run_env)  # its process is gone: the lease lapsed at once
    assert settled.returncode == 0, settled.stderr
    assert ledger_state(DATASET).spent == PureDP(0)


def test_a_run_voided_behind_its_back_stops_before_drawing(tmp_path, run_env):
    spec, out = _spec(tmp_path, "voided-live"), tmp_path / "out"
    victim, resume = paused_at("reserved", spec, out, run_env, tmp_path)
    [record] = ledger_state(DATASET).runs
    settle_behind_its_back(record.run_id, "void")
    resume.write_text("go")
    stdout, stderr = victim.communicate(timeout=120)
    assert victim.returncode == 2, stderr
    assert "settled without it, so it stops before drawing any noise" in stderr
    assert [r.state for r in ledger_state(DATASET).runs] == ["voided"]
    assert not (out / ".staging").exists() and not (out / "voided-live").exists()


def test_killed_while_staging_then_staging_deleted_is_still_spent(tmp_path, run_env):
    spec, out = _spec(tmp_path, "staged"), tmp_path / "out"
    _killed_at("staging", spec, out, run_env, tmp_path)
    [record] = ledger_state(DATASET).runs
    assert record.state == "drawing"  # recorded before the first draw
    import shutil

    shutil.rmtree(out / ".staging")  # the files that used to be the only evidence
    refused = resolve(record.run_id, "void", run_env)
    assert refused.returncode == 2 and "drew noise (the ledger recorded it before the first draw)" in refused.stderr
    settled = resolve(record.run_id, "fail", run_env)
    assert settled.returncode == 0, settled.stderr
    state = ledger_state(DATASET)
    assert [r.state for r in state.runs] == ["failed"] and state.spent == SPENT


def test_a_failed_commit_leaves_no_noisy_file(tmp_path, run_env):
    """Staged, then the reservation is settled as failed behind the run's back: its commit fails,
    and no staged table stays on disk; the budget stays spent."""
    spec, out = _spec(tmp_path, "no-commit"), tmp_path / "out"
    victim, resume = paused_at("publish", spec, out, run_env, tmp_path)
    assert any((out / ".staging").rglob("*.csv"))  # the noisy tables are staged
    [record] = ledger_state(DATASET).runs
    assert record.state == "drawing"
    settle_behind_its_back(record.run_id, "fail")
    resume.write_text("go")
    stdout, stderr = victim.communicate(timeout=120)
    assert victim.returncode != 0, stderr
    assert not (out / "no-commit").exists()
    left = [p for p in out.rglob("*") if p.is_file() and "_internal" not in p.parts]
    assert left == [], left
    state = ledger_state(DATASET)
    assert [r.state for r in state.runs] == ["failed"] and state.spent == SPENT
    assert SPENT.epsilon > 0


def test_a_commit_without_its_ledger_leaves_no_noisy_file(tmp_path, run_env):
    """Staged, then the ledger file disappears: the commit fails (exit 2, no traceback), the
    staged tables are deleted all the same."""
    spec, out = _spec(tmp_path, "ledger-gone"), tmp_path / "out"
    victim, resume = paused_at("publish", spec, out, run_env, tmp_path)
    ledger = resolve_location().sqlite_path
    ledger.rename(ledger.with_name("moved.sqlite"))
    resume.write_text("go")
    stdout, stderr = victim.communicate(timeout=120)
    assert victim.returncode == 2 and "Traceback" not in stderr, stderr
    assert "disappeared during the run" in stderr
    left = [p for p in out.rglob("*") if p.is_file() and "_internal" not in p.parts]
    assert left == [], left
