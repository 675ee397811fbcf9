"""A real Prefect server on 127.0.0.1 for the tests that run whole releases in child processes.

With a server, a run costs ~3 s instead of the ~10 s of an ephemeral one; one test still runs
in ephemeral mode, as the README does. Here too, the children's environments: ``run_env`` (a
flow run on this server) and ``release_env`` (no server: the steps run inline). One server serves every worker of the session
(:func:`prefect_server`); it runs in its own process group and is killed with it.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quiet_prefect_env(home) -> dict[str, str]:
    """A child's Prefect settings: its own home, no analytics, warnings only; and a served
    deployment (``dprelease schedule``) that asks the server for runs every second, not every
    10 s (Prefect's default): a test waits for each run it starts to be picked up."""
    return {"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_RUNNER_POLL_FREQUENCY": "1"}


def _shared_root(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The directory the session's workers share (xdist gives each worker ROOT/popen-gwN), or the
    session's own without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / "prefect-server.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return response.read().strip() == b"true"
    except OSError:
        return False


def _start(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, **quiet_prefect_env(home)}
    env.pop("PREFECT_API_URL", None)
    with open(home / "server.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    try:
        if not _answers(url, proc.pid, proc):
            raise RuntimeError(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
    except BaseException:  # a Ctrl-C while it starts too: never a server left behind (it is in no record yet)
        _stop(proc.pid, proc)
        raise
    return proc, url


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return not stat.read_text().split(") ")[-1].startswith("Z")
    except OSError:
        return False


def _answers(url: str, pid: int, proc: subprocess.Popen[bytes] | None = None, wait: float = 90) -> bool:
    """Whether the server at ``url`` (process ``pid``) answers its health check within ``wait``
    seconds while it runs: a busy server may answer slowly, or 503, for a while (test_schedule)."""
    deadline = time.monotonic() + wait
    while not _healthy(url):
        if (proc is not None and proc.poll() is not None) or not _alive(pid) or time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


def _stop(pid: int, proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM to the server's process group, SIGKILL after 20 s; reaped by the worker that
    started it (``proc``), by init once that worker has gone."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return
        if proc is None and not _alive(pid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if proc is not None:
        proc.wait()


_started: dict[int, subprocess.Popen[bytes]] = {}  # the servers this process started, by PID


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):  # type: ignore[no-untyped-def]
    """One server for the whole session, shared by its xdist workers: the first worker that needs
    it starts it, each user is counted in ``prefect-server.json`` beside the workers' temporary
    directories (under a lock), and the last user to finish stops it (a worker that needs one
    after that starts another). Started once instead of once per worker: ~7 s of CPU and its
    idle services' ~1 s a minute, each time. Every test's flows, deployments and artifacts are
    its own (their names, releases and flow-run ids), so sharing changes nothing they read.
    ``pytest_sessionfinish`` (below) stops a server a crashed worker left."""
    root = _shared_root(tmp_path_factory)
    record = root / "prefect-server.json"
    with _locked(root):
        shared = json.loads(record.read_text()) if record.exists() else None
        if shared is None or not _answers(shared["url"], shared["pid"], _started.get(shared["pid"])):
            if shared is not None:
                _stop(shared["pid"], _started.pop(shared["pid"], None))
            home = Path(tempfile.mkdtemp(prefix="prefect-server-", dir=root))
            proc, url = _start(home)
            _started[proc.pid] = proc
            shared = {"pid": proc.pid, "url": url, "users": 0}
        shared["users"] += 1
        record.write_text(json.dumps(shared))
    try:
        yield shared["url"]
    finally:
        with _locked(root):
            now = json.loads(record.read_text())
            now["users"] -= 1
            if now["users"] == 0:
                _stop(now["pid"], _started.pop(now["pid"], None))
                record.unlink()
            else:
                record.write_text(json.dumps(now))


def pytest_sessionfinish(session) -> None:  # type: ignore[no-untyped-def]
    """In the controller (or a session without xdist), after every worker has finished: a shared
    server still recorded was left by a worker that crashed before its teardown: stop it."""
    if hasattr(session.config, "workerinput"):
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or factory._basetemp is None:
        return
    record = factory.getbasetemp() / "prefect-server.json"
    if record.exists():
        _stop(json.loads(record.read_text())["pid"], None)
        record.unlink()


@pytest.fixture
def run_env(prefect_server, tmp_path):
    """Environment for a child ``dprelease run`` against the session's server."""
    client_home = tmp_path / "prefect-client"
    return {**quiet_prefect_env(client_home), "PREFECT_API_URL": prefect_server}


@pytest.fixture(scope="module")
def run_env_module(prefect_server, tmp_path_factory):
    """``run_env`` for module-scoped fixtures (one release shared by a module's tests)."""
    client_home = tmp_path_factory.mktemp("prefect-client")
    return {**quiet_prefect_env(client_home), "PREFECT_API_URL": prefect_server}


@pytest.fixture
def release_env(tmp_path):
    """Environment for a child ``dprelease run`` on the path of a machine with no Prefect server
    (the README's command on a fresh clone): ``auto`` runs the reserved run's steps inline, in
    the child. What a release publishes, spends and refuses is the same either way, because both
    orchestrators run one list of steps (:meth:`dprelease.lifecycle.release.ReleaseRun.steps`);
    ``test_orchestrators.py::test_inline_and_prefect_publish_the_same_release`` shows the same
    files, manifest and ledger rows. The end-to-end tests of a feature (a measure, a definition, a
    reading, the ledger's refusals) use this, and save a child ~1.2 s of CPU a run (Prefect's
    import and its flow run) where Prefect is not the subject; the tests of the Prefect path
    itself use ``run_env`` (tests/README.md lists them)."""
    return quiet_prefect_env(tmp_path / "prefect-client")  # PREFECT_API_URL: unset for every test


@pytest.fixture(scope="module")
def release_env_module(tmp_path_factory):
    """``release_env`` for module-scoped fixtures (one release shared by a module's tests)."""
    return quiet_prefect_env(tmp_path_factory.mktemp("prefect-client"))
