"""A real Prefect server on 127.0.0.1 for the tests that run whole releases in child processes.

With a server, a run costs ~3 s instead of the ~10 s of an ephemeral one; one test still runs
in ephemeral mode, as the README does. The server runs in its own process group and is
killed with it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quiet_prefect_env(home) -> dict[str, str]:
    return {"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "WARNING"}


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = {**os.environ, **quiet_prefect_env(home)}
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.read().strip() == b"true":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


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
