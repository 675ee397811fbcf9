"""Where a run's steps run (issue 16): inline when no Prefect server is up (and then Prefect is
never imported), as a flow run on the server at PREFECT_API_URL or the one ``dprelease server``
keeps, or on a temporary server with ``--orchestrator prefect``. Both paths run one lifecycle
and publish the same release: the same files, the same manifest (but its run's identifiers),
the same ledger rows; only the internal run record says which orchestrator ran it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dprelease.serve import server
from dprelease.serve import auth as server_auth
from dprelease.cli import warm
from dprelease.errors import UserError
from dprelease.ledger import Ledger, resolve_location
from tests.conftest import ROOT
from tests.prefect_server import quiet_prefect_env
from tests.test_server_auth import check_the_day_server_requires_its_secret
from tests.test_run import _spec, child_env, run
from tests.ledgers import make_ledger

DATASET = "nist-acs-national-2019"
RUN_SPECIFIC = ("run_id", "created_at")  # the manifest's keys that name the run itself


def _published(out: Path, release: str) -> tuple[list[str], dict]:  # type: ignore[type-arg]
    root = out / release
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    manifest = json.loads((root / "manifest.json").read_text())
    for key in RUN_SPECIFIC:
        manifest.pop(key)
    manifest["ledger"].pop("id")  # each run here has a ledger of its own (its id and time of birth) ...
    manifest["ledger"]["born"].pop("at")
    manifest["ledger"]["born"].pop("where")
    manifest["ledger"]["location"] = Path(manifest["ledger"]["location"]).name  # ... in a directory of its own
    return files, manifest


def _ledger_rows(ledger_path: Path) -> list[tuple]:  # type: ignore[type-arg]
    ledger = Ledger.open(resolve_location(str(ledger_path)))
    assert ledger is not None
    with ledger:
        state = ledger.state(DATASET)
    return [(r.release, r.state, r.charge, r.charges) for r in state.runs] + [(state.budget, state.spent)]


def test_inline_and_prefect_publish_the_same_release(tmp_path, run_env):
    spec = _spec(tmp_path, "same-either-way")
    results = {}
    for mode in ("inline", "prefect"):
        ledger = tmp_path / mode / "ledger.sqlite"
        out = tmp_path / f"out-{mode}"
        proc = run(spec, "--output-dir", out, "--orchestrator", mode, env={**run_env, "DPRELEASE_LEDGER": str(make_ledger(ledger))})
        assert proc.returncode == 0, proc.stderr
        record = json.loads((out / "_internal" / "same-either-way" / "run.json").read_text())
        results[mode] = (*_published(out, "same-either-way"), _ledger_rows(ledger), record)
    inline, prefect = results["inline"], results["prefect"]
    assert inline[0] == prefect[0] and "manifest.json" in inline[0] and len(inline[0]) > 5  # the same files
    assert inline[1] == prefect[1]  # the same manifest, but for the run's own identifiers
    assert inline[2] == prefect[2] and inline[2][0][1] == "committed"  # the same ledger rows
    assert inline[3]["orchestrator"] == {"kind": "inline", "chosen_by": "--orchestrator inline"}
    assert inline[3]["prefect_flow_run_id"] is None
    assert prefect[3]["orchestrator"] == {"kind": "prefect", "api": run_env["PREFECT_API_URL"],
                                          "chosen_by": "PREFECT_API_URL"}
    assert prefect[3]["prefect_flow_run_id"]


def test_auto_without_a_server_runs_inline_and_never_imports_prefect(tmp_path):
    """The default on a machine with no server: one line says so, and Prefect is not imported."""
    out = tmp_path / "out"
    script = ("import sys\nfrom dprelease.cli import main\nsys.argv = ['dprelease', 'run', sys.argv[1], '--output-dir', "
              "sys.argv[2]]\ntry:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
              "print('PREFECT IMPORTED' if any(m.split('.')[0] == 'prefect' for m in sys.modules) else 'no prefect',"
              " file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(_spec(tmp_path, "inline-auto")), str(out)], cwd=ROOT,
                          env=child_env({"PREFECT_API_URL": None, "PREFECT_HOME": str(tmp_path / "no-home")}),
                          capture_output=True, text=True, timeout=180)
    assert (out / "inline-auto" / "manifest.json").exists(), proc.stderr
    assert proc.stderr.count("running inline: no Prefect server is up") == 1, proc.stderr
    assert proc.stderr.strip().endswith("no prefect"), proc.stderr
    assert not (tmp_path / "no-home").exists()  # nothing of Prefect's was even created
    record = json.loads((out / "_internal" / "inline-auto" / "run.json").read_text())
    assert record["orchestrator"] == {"kind": "inline", "chosen_by": "no Prefect server is up"}


def test_choose(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert server.choose("inline", {"PREFECT_API_URL": "http://127.0.0.1:9/api"}).kind == "inline"  # never asks
    assert server.choose("auto") == server.Choice("inline", None, "no Prefect server is up")
    forced = server.choose("prefect")
    assert forced.kind == "prefect" and forced.api is None  # a temporary server for the run
    named = server.choose("auto", {"PREFECT_API_URL": "http://127.0.0.1:9/api"})  # chosen, checked by the run
    assert named == server.Choice("prefect", "http://127.0.0.1:9/api", "PREFECT_API_URL")
    with pytest.raises(UserError, match=r"PREFECT_API_URL=http://127.0.0.1:9/api does not answer .* Nothing was spent"):
        server.check_api(named.api)
    with pytest.raises(UserError, match="use one of auto, prefect, inline"):
        server.choose("sometimes")


def test_a_recorded_server_whose_process_is_gone_is_absent(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    server.state_file().parent.mkdir(parents=True, exist_ok=True)
    server.state_file().write_text(json.dumps({"pid": dead.pid, "start": "boot:1", "url": "http://127.0.0.1:9/api",
                                               "started_at": "x", "log": "x", "prefect_home": "x"}))
    assert server.recorded() is None
    assert server.choose("auto").kind == "inline"
    assert server.stop() is None and not server.state_file().exists()  # the stale record is cleared


@pytest.mark.slow
def test_the_day_server_starts_is_used_and_stops(tmp_path, monkeypatch):
    """``dprelease server start`` keeps a detached server; runs use it (recorded in run.json);
    ``status`` says so; ``stop`` ends its process and its record. Its API requires the secret
    dprelease keeps, which the run (in the warm runner) and ``schedule`` have and nothing prints
    (tests/test_server_auth.py)."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    env = child_env({**quiet_prefect_env(tmp_path / "prefect-home"), "PREFECT_API_URL": None})
    (tmp_path / "prefect-home").mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dprelease", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=240)

    started = cli("server", "start")
    try:
        assert started.returncode == 0, started.stderr
        kept = server.recorded()
        assert kept is not None and kept.url.startswith("http://127.0.0.1:") and f"PID {kept.pid}" in started.stdout
        assert oct(server.state_file().stat().st_mode & 0o777) == "0o600"
        runner = warm.recorded()  # and a warm runner beside it, for the same server
        assert runner is not None and runner.api == kept.url and f"warm runner: started (PID {runner.pid}" in started.stdout
        again = cli("server", "start")
        assert again.returncode == 0 and "already running" in again.stdout and server.recorded() == kept
        status = cli("server", "status")
        assert f"runs (--orchestrator auto): Prefect at {kept.url} (dprelease server (PID {kept.pid}))" in status.stdout
        out = tmp_path / "out"
        proc = run(_spec(tmp_path, "on-the-day-server"), "--output-dir", out, env=env)
        assert proc.returncode == 0, proc.stderr
        assert f"running as a Prefect flow run at {kept.url}" in proc.stderr
        assert f"in its warm runner, PID {runner.pid}" in proc.stderr
        record = json.loads((out / "_internal" / "on-the-day-server" / "run.json").read_text())
        assert record["orchestrator"]["chosen_by"] == f"dprelease server (PID {kept.pid})"
        assert record["orchestrator"]["process"] == f"warm runner (PID {runner.pid})"
        assert f"warm runner: PID {runner.pid}" in status.stdout
        assert record["prefect_flow_run_id"]
        assert (f"server API: requires authentication; its secret is in {server_auth.secret_file()} (owner-only; "
                "docs/commands.md says how to trigger a deployment with it)") in status.stdout.splitlines()
        check_the_day_server_requires_its_secret(kept, env, tmp_path, "".join(
            [started.stdout, started.stderr, again.stdout, status.stdout, proc.stdout, proc.stderr]))
    finally:
        stopped = cli("server", "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert server.recorded() is None and not server.state_file().exists()
    assert warm.recorded() is None and not warm.record_file().exists() and not Path(runner.socket).exists()
    assert not os.path.exists(f"/proc/{kept.pid}") or "Z" in Path(f"/proc/{kept.pid}/stat").read_text().split()[2]
    assert "runs (--orchestrator auto): inline" in cli("server", "status").stdout


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["histogram", "noise"])
def test_an_inline_run_killed_fails_closed_as_a_flow_run_does(tmp_path, stage):
    """The fault checkpoints are in the steps, so an inline run stops at them too: killed before
    noise, the reservation stays counted until voided; killed after, it can only be failed."""
    from tests.test_crash import resolve
    from tests.test_run import _killed_at, ledger_state

    spec, out = _spec(tmp_path, f"inline-crash-{stage}"), tmp_path / "out"
    env = {"PREFECT_API_URL": None, "PREFECT_HOME": str(tmp_path / "no-home")}
    _killed_at(stage, spec, out, env, tmp_path)
    [record] = ledger_state(DATASET).runs
    assert record.state == ("reserved" if stage == "histogram" else "drawing")
    assert run(spec, "--output-dir", out, env=env).returncode == 4  # refused while the reservation is open
    settled = resolve(record.run_id, "void" if stage == "histogram" else "fail", env)
    assert settled.returncode == 0, settled.stderr
    again = run(spec, "--output-dir", out, env=env)
    assert again.returncode == (0 if stage == "histogram" else 4), again.stderr
    assert not (tmp_path / "no-home").exists()


def test_a_bad_spec_or_budget_is_refused_before_any_prefect_server_is_asked_or_started(tmp_path, run_env):
    """The spec's own refusals come first: an over-budget run with an unreachable server named is
    refused as over budget (exit 3), and a forced Prefect run of it never starts a server."""
    spec = _spec(tmp_path, "too-big", epsilon="3.5", lifetime="4")
    forced = run(spec, "--output-dir", tmp_path / "out", "--orchestrator", "prefect",
                 env={**run_env, "PREFECT_API_URL": None})
    assert forced.returncode == 3, forced.stderr
    assert "temporary Prefect server" not in forced.stderr and "The data was not read" in forced.stderr


def test_a_temporary_server_is_the_runs_own_and_never_outlives_it(tmp_path, prefect_server):
    """Another server answering on the port is not taken for the run's own (two forced-Prefect
    runs at once each wait on their own); a run SIGKILLed while its temporary server runs leaves
    no server behind (the server gets SIGTERM when its parent dies), and its log is cleared by
    the next run's start."""
    import signal
    import time

    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    log = tmp_path / "server.log"
    log.write_text("address already in use\n")
    with pytest.raises(UserError, match="exited .* before answering"):
        server._wait_healthy(exited, prefect_server, log, 10)  # prefect_server answers: not this process's

    out, env = tmp_path / "out", {"PREFECT_API_URL": None, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    (tmp_path / "prefect-home").mkdir()
    victim = subprocess.Popen([sys.executable, "-m", "dprelease", "run", str(_spec(tmp_path, "killed-forced")),
                               "--output-dir", str(out), "--orchestrator", "prefect"], cwd=ROOT, env=child_env(env),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, child = time.monotonic() + 120, None
    while child is None and time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(victim.pid), "-f", "prefect server start"], capture_output=True,
                               text=True).stdout.split()
        child = int(found[0]) if found else None
        time.sleep(0.2)
    assert child is not None and victim.poll() is None
    os.kill(victim.pid, signal.SIGKILL)  # the run alone, not its process group
    victim.wait()
    deadline = time.monotonic() + 120
    while os.path.exists(f"/proc/{child}") and "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the temporary server outlived its run"
        time.sleep(0.2)
    assert (server.state_file().parent / f"server-{victim.pid}.log").exists()  # a SIGKILL runs no cleanup ...
    proc = run(_spec(tmp_path, "after-the-kill"), "--output-dir", out, "--orchestrator", "prefect", env=env)
    assert proc.returncode == 0, proc.stderr
    assert not list(server.state_file().parent.glob("server-*.log"))  # ... the next start clears it


def test_a_prefect_api_url_that_is_not_a_url_is_refused_cleanly(tmp_path):
    assert server.api_problem("not a url").startswith("is not a URL")
    proc = run(_spec(tmp_path, "bad-url"), "--output-dir", tmp_path / "out", env={"PREFECT_API_URL": "not a url"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "PREFECT_API_URL=not a url is not a URL" in proc.stderr and "Nothing was spent" in proc.stderr


def test_the_active_prefect_profiles_api_url_counts_as_set(tmp_path, monkeypatch):
    """`prefect config set PREFECT_API_URL=...` writes the active profile: runs use it as Prefect
    itself would (read from profiles.toml without importing Prefect)."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_PROFILE", raising=False)
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    assert server.choose("auto").kind == "inline"  # no profiles.toml
    (tmp_path / "profiles.toml").write_text('active = "local"\n\n[profiles.ephemeral]\n\n[profiles.local]\n'
                                            'PREFECT_API_URL = "http://127.0.0.1:9/api"\n')
    assert server.choose("auto") == server.Choice("prefect", "http://127.0.0.1:9/api",
                                                  "PREFECT_API_URL of Prefect profile 'local'")
    monkeypatch.setenv("PREFECT_PROFILE", "ephemeral")  # another profile active: none set there
    assert server.choose("auto").kind == "inline"
