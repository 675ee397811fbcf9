"""The warm runner (issue 16): ``dprelease server start`` keeps a process with Prefect imported
beside the day's server, and a ``dprelease run`` bound for that server is run in a child forked
from it. The child is the client's ``dprelease`` process in all but its PID: the same release,
manifest and ledger rows as an inline run, the client's streams, directory, environment and exit
code; signals to the client reach the run, a client that dies ends its run (which settles), a
runner that dies does not lose the run; and a runner started for other code or settings, or
another user, is not used."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dprelease.cli import warm
from dprelease.cli.warm import handoff
from dprelease.cli.warm import loop as warm_loop
from tests.conftest import ROOT
from tests.prefect_server import quiet_prefect_env
from tests.test_orchestrators import DATASET, _ledger_rows, _published
from tests.test_run import _spec, child_env, run
from tests.ledgers import make_ledger


FAULTY = "tests.faulty_runner"  # the runner with tests/faulty_runner.py's hook: runs pause where a test says


@pytest.fixture(scope="module")
def warm_env(prefect_server, tmp_path_factory):
    """An environment whose runs go to the session's Prefect server, with a warm runner for it
    (recorded in a data directory of this module's own)."""
    base = tmp_path_factory.mktemp("warm")
    env = child_env({**quiet_prefect_env(base / "prefect-home"), "PREFECT_API_URL": prefect_server,
                     "XDG_DATA_HOME": str(base / "xdg"), "PYTHONPATH": str(ROOT)})
    started = _start(env)
    assert "warm runner: started" in started.stdout, started.stderr + started.stdout
    yield env
    last = _runner(env)
    _python("from dprelease.cli import warm; warm.stop()", env)
    try:  # whatever a failed test left behind: the runner's process group (its runs included)
        os.killpg(last.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _python(f"from dprelease.cli import warm; import os; print(warm.start(os.environ['PREFECT_API_URL'], "
                   f"{FAULTY!r})[1])", env)


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


def _runner(env: dict[str, str]) -> warm.Runner:
    record = json.loads((Path(env["XDG_DATA_HOME"]) / "dprelease" / "runner.json").read_text())
    return warm.Runner(**record)


def _paused_run(tmp_path: Path, env: dict[str, str], release: str, resume: bool = False
                ) -> tuple[subprocess.Popen[str], int, Path, Path]:
    """A handed-over run paused after its reservation (the fault hook at ``histogram``): (its
    client, the run's PID, its ledger, its output directory). ``resume``: it goes on once
    ``tmp_path / "resume"`` exists."""
    flag, ledger, out = tmp_path / "flag", tmp_path / "l.sqlite", tmp_path / "out"
    extra = {"DPRELEASE_LEDGER": str(make_ledger(ledger)), "DPRELEASE_FAULT_AT": "histogram", "DPRELEASE_FAULT_FLAG": str(flag)}
    if resume:
        extra["DPRELEASE_FAULT_RESUME"] = str(tmp_path / "resume")
    client = subprocess.Popen([sys.executable, "-m", "dprelease", "run", str(_spec(tmp_path, release)),
                               "--output-dir", str(out)], cwd=ROOT, env={**env, **extra},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not flag.exists() or not flag.read_text():
        assert client.poll() is None, client.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return client, int(flag.read_text()), ledger, out


def _gone(pid: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


def _runs(ledger: Path) -> list[str]:
    from dprelease.ledger import Ledger, resolve_location

    opened = Ledger.open(resolve_location(str(ledger)))
    if opened is None:
        return []
    with opened:
        state = opened.state(DATASET)
    return [] if state is None else [r.state for r in state.runs]


def test_the_runner_listens_on_an_owner_only_socket(warm_env):
    runner = _runner(warm_env)
    assert runner.running()
    mode = os.stat(runner.socket).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(runner.socket).parent).st_mode) & 0o077 == 0
    record = Path(warm_env["XDG_DATA_HOME"]) / "dprelease" / "runner.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def test_a_run_handed_to_the_runner_publishes_what_an_inline_run_does(tmp_path, warm_env):
    """The same files, manifest (but the run's identifiers) and ledger rows as inline; the client
    process imports neither Prefect nor typer; the run record says it ran in the runner."""
    spec = _spec(tmp_path, "warm-or-inline")
    results = {}
    for mode in ("inline", "auto"):
        ledger, out = tmp_path / mode / "ledger.sqlite", tmp_path / f"out-{mode}"
        script = ("import sys\nfrom dprelease.cli import main\nsys.argv = ['dprelease', *sys.argv[1:]]\ntry:\n    main()\n"
                  "except SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
                  "print('imported:', sorted({m.split('.')[0] for m in sys.modules} & {'prefect', 'typer', 'numpy'}), "
                  "file=sys.stderr)\nsys.exit(code)\n")
        proc = subprocess.run([sys.executable, "-c", script, "run", str(spec), "--output-dir", str(out),
                               "--orchestrator", mode], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                              env={**warm_env, "DPRELEASE_LEDGER": str(make_ledger(ledger))})
        assert proc.returncode == 0, proc.stderr
        record = json.loads((out / "_internal" / "warm-or-inline" / "run.json").read_text())
        results[mode] = (*_published(out, "warm-or-inline"), _ledger_rows(ledger), record, proc.stderr)
    inline, handed = results["inline"], results["auto"]
    assert inline[0] == handed[0] and "manifest.json" in inline[0]
    assert inline[1] == handed[1]
    assert inline[2] == handed[2] and inline[2][0][1] == "committed"
    runner = _runner(warm_env)
    assert handed[3]["orchestrator"] == {"kind": "prefect", "api": warm_env["PREFECT_API_URL"],
                                         "chosen_by": "PREFECT_API_URL", "process": f"warm runner (PID {runner.pid})"}
    assert handed[3]["prefect_flow_run_id"]
    assert f"in its warm runner, PID {runner.pid}" in handed[4]
    assert "imported: []" in handed[4]  # the client loaded none of them: the runner's child did the work
    assert "imported: ['numpy', 'typer']" in inline[4]  # an inline run does its work itself


def test_the_childs_exit_code_and_streams_are_the_clients(tmp_path, warm_env):
    """A refused run (over budget: exit 3) handed over: its message on the client's stderr, its
    exit code the client's, its relative paths resolved in the client's directory; and it ran in
    the runner (the client never imported typer, which parses the command)."""
    spec = _spec(tmp_path, "too-big-warm", epsilon="3.5", lifetime="4")
    script = ("import sys\nfrom dprelease.cli import main\nsys.argv = ['dprelease', *sys.argv[1:]]\ntry:\n    main()\n"
              "except SystemExit as e:\n    code = e.code\nprint('typer' in sys.modules, file=sys.stderr)\n"
              "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", script, "run", spec.name, "--output-dir", "here"], cwd=spec.parent,
                          env={**warm_env, "DPRELEASE_LEDGER": str(make_ledger(tmp_path / "l.sqlite"))}, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 3, proc.stderr
    assert "The data was not read" in proc.stderr and "not using the warm runner" not in proc.stderr
    assert proc.stderr.strip().endswith("False"), proc.stderr  # typer was never imported here
    assert not (spec.parent / "here").exists()


def test_a_client_that_dies_ends_its_run_which_settles(tmp_path, warm_env):
    """SIGKILL to the client of a run paused after its reservation: the runner sees the
    connection close and sends the run SIGTERM, which voids the reservation (no noise was drawn);
    nothing is published; the runner itself is unaffected."""
    client, child, ledger, out = _paused_run(tmp_path, warm_env, "client-killed")
    assert _runs(ledger) == ["reserved"]
    client.kill()
    client.communicate()
    assert _gone(child), "the run went on without its client"
    assert _runs(ledger) == ["voided"]
    assert not (out / "client-killed" / "manifest.json").exists()
    assert _runner(warm_env).running()


def test_ctrl_c_reaches_the_run(tmp_path, warm_env):
    """SIGINT to the client is the run's: it settles (voided, before any noise) and says so on the
    client's stderr; the client exits with the run's exit code, without a traceback of its own."""
    client, child, ledger, out = _paused_run(tmp_path, warm_env, "interrupted")
    client.send_signal(signal.SIGINT)
    _, stderr = client.communicate(timeout=120)
    assert client.returncode == 1, stderr
    assert "interrupted" in stderr and "Nothing was published" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert _gone(child) and _runs(ledger) == ["voided"]
    assert not (out / "interrupted" / "manifest.json").exists()


def test_a_signal_before_the_run_exists_is_kept_for_it():
    """The client's relay keeps a signal that arrives before the run's PID is known and forwards it
    once it is."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    relay = handoff._Relay()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # kept: this test process must not die of it
        assert relay.kept == [signal.SIGTERM]
        relay.forward_to(sleeper.pid)
        assert sleeper.wait(timeout=120) == -signal.SIGTERM
    finally:
        relay.kept.clear()
        relay.restore()
        sleeper.kill()


def test_replacing_the_runner_lets_its_runs_finish(tmp_path, warm_env):
    """``server start`` from a shell with other settings starts a fresh runner; the old one takes
    no new run but finishes the one it has, and reports its exit code; then it exits."""
    client, child, ledger, out = _paused_run(tmp_path, warm_env, "outlives-its-runner", resume=True)
    old = _runner(warm_env)
    replaced = _start({**warm_env, "PREFECT_LOGGING_LEVEL": "ERROR"})
    assert f"the one it replaces (PID {old.pid}) exits once its runs end" in replaced.stdout, replaced.stdout
    deadline = time.monotonic() + 120
    while Path(old.socket).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(old.socket).exists() and old.running()  # no new runs, still running its own
    (tmp_path / "resume").touch()
    _, stderr = client.communicate(timeout=120)
    assert client.returncode == 0, stderr
    assert (out / "outlives-its-runner" / "manifest.json").exists() and _runs(ledger) == ["committed"]
    assert _gone(old.pid)
    again = _start(warm_env)  # back to a runner for this module's settings
    assert "warm runner: started" in again.stdout, again.stderr


def test_a_runner_for_other_settings_is_not_used(tmp_path, warm_env):
    """Prefect read its settings when the runner imported it: a run with other PREFECT_*
    settings runs here, saying why in one line."""
    out = tmp_path / "out"
    proc = run(_spec(tmp_path, "other-settings"), "--output-dir", out,
               env={**warm_env, "DPRELEASE_LEDGER": str(make_ledger(tmp_path / "l.sqlite")), "PREFECT_LOGGING_LEVEL": "ERROR"})
    assert proc.returncode == 0, proc.stderr
    runner = _runner(warm_env)
    assert proc.stderr.count(f"not using the warm runner (PID {runner.pid}): it was started for other dprelease code, "
                             "Python, libraries or Prefect settings") == 1, proc.stderr
    record = json.loads((out / "_internal" / "other-settings" / "run.json").read_text())
    assert "process" not in record["orchestrator"] and record["prefect_flow_run_id"]


def test_only_runs_to_the_runners_server_are_handed_over(tmp_path, warm_env, monkeypatch):
    for key, value in warm_env.items():
        monkeypatch.setenv(key, value)
    assert handoff.orchestrator_of(["run", "s.yaml"]) == "auto"
    assert handoff.orchestrator_of(["run", "s.yaml", "--orchestrator=inline"]) == "inline"
    assert handoff.orchestrator_of(["plan", "s.yaml"]) is None
    assert handoff.hand_off(["run", "s.yaml", "--orchestrator", "inline"]) is None
    assert handoff.hand_off(["plan", "s.yaml"]) is None
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # another server than the runner's
    assert handoff.hand_off(["run", "s.yaml"]) is None


def test_a_stale_record_is_no_runner(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    warm.record_file().parent.mkdir(parents=True)
    warm.record_file().write_text(json.dumps({"pid": dead.pid, "start": "boot:1", "api": "http://127.0.0.1:9/api",
                                              "socket": str(tmp_path / "gone.sock"), "log": "x"}))
    assert warm.recorded() is None
    assert handoff.hand_off(["run", "s.yaml"]) is None
    assert "warm runner: not running" in warm.status_line()


def test_another_users_request_is_refused(tmp_path, monkeypatch):
    """The socket is owner-only; behind it, a peer whose credentials are another user's is refused
    before anything of its request is read."""
    path = tmp_path / "r.sock"
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGCHLD)
    loop = warm_loop.Loop(path, "fingerprint")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))
            handoff.send_message(client, {"ping": True, "fingerprint": "fingerprint"})
            real = os.getuid()
            monkeypatch.setattr(os, "getuid", lambda: real + 1)
            loop._accept()
            monkeypatch.undo()
            assert client.makefile("r").readline().strip() == "refused another user's request"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:  # this user's ping is answered
            client.connect(str(path))
            handoff.send_message(client, {"ping": True, "fingerprint": "fingerprint"})
            loop._accept()
            assert client.makefile("r").readline().strip() == "ready"
    finally:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGCHLD, previous[1])
        loop.listener.close()


def test_the_client_sends_nothing_to_a_process_that_is_not_the_runner(tmp_path, monkeypatch):
    """A socket at the recorded path held by another process than the recorded runner (a stale
    path taken over, say) gets nothing: not the environment, not the terminal."""
    from dprelease.host.processes import process_start

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    path = tmp_path / "r.sock"
    impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    impostor.bind(str(path))
    impostor.listen(1)
    try:
        warm.record_file().parent.mkdir(parents=True)
        warm.record_file().write_text(json.dumps({"pid": bystander.pid, "start": process_start(bystander.pid),
                                                  "api": "http://127.0.0.1:9/api", "socket": str(path), "log": "x"}))
        assert warm.recorded() is not None
        assert handoff.hand_off(["run", "s.yaml"]) is None  # runs here instead
        conn, _ = impostor.accept()
        conn.settimeout(5)
        assert conn.recv(1024) == b""  # the client hung up without a byte
        conn.close()
    finally:
        impostor.close()
        bystander.kill()


def test_a_runner_that_dies_mid_run_does_not_lose_the_run(tmp_path, warm_env):
    """The run goes on (it is no longer the runner's child); the client waits for it to end and
    says that its exit code is unknown. ``start`` then starts a fresh runner."""
    client, child, ledger, out = _paused_run(tmp_path, warm_env, "orphaned", resume=True)
    runner = _runner(warm_env)
    os.kill(runner.pid, signal.SIGKILL)
    assert _gone(runner.pid)
    (tmp_path / "resume").touch()
    _, stderr = client.communicate(timeout=120)
    assert client.returncode == 1 and "the warm runner ended during the run" in stderr, stderr
    assert (out / "orphaned" / "manifest.json").exists() and _runs(ledger) == ["committed"]
    assert "warm runner: started" in _start(warm_env).stdout
