"""The Prefect server `dprelease server start` keeps requires authentication (issue 27, item 8):
Prefect's own basic authentication, with a secret from the OS CSPRNG kept owner-only beside
server.json, handed to the clients dprelease runs in their environment, never on a command line.

The end-to-end check (:func:`check_the_day_server_requires_its_secret`) runs inside
tests/test_orchestrators.py's day-server test, which starts that server once."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dprelease.serve import server
from dprelease.serve import auth as server_auth
from dprelease.errors import UserError
from tests.conftest import ROOT


def test_the_secret_is_made_once_owner_only_and_kept():
    path = server_auth.secret_file()
    assert not path.exists()
    secret = server_auth.kept_secret()
    assert re.fullmatch(r"dprelease:[A-Za-z0-9_-]{43}", secret)  # 32 bytes of secrets.token_urlsafe
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert server_auth.kept_secret() == secret == server_auth.read_secret()
    assert server_auth.new_secret() != secret
    assert not list(path.parent.glob(".server.auth.*"))  # no half-written file left beside it


def test_a_secret_file_open_to_others_or_a_symlink_is_refused(tmp_path):
    path = server_auth.secret_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("dprelease:abc\n")
    path.chmod(0o644)
    with pytest.raises(UserError, match=r"readable by you alone \(mode -rw-r--r--\).*rm "):
        server_auth.kept_secret()
    path.unlink()
    (tmp_path / "elsewhere").write_text("dprelease:abc\n")
    (tmp_path / "elsewhere").chmod(0o600)
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserError, match="a symlink is refused"):
        server_auth.kept_secret()


def test_only_the_kept_servers_clients_get_its_secret(monkeypatch):
    kept = server.Server(os.getpid(), "", "http://127.0.0.1:4999/api", "t", "log", "home")
    monkeypatch.setattr(server, "recorded", lambda: kept)
    secret = server_auth.kept_secret()
    assert server.client_env("http://127.0.0.1:4999/api/") == {"PREFECT_API_AUTH_STRING": secret}
    assert server.client_env("http://127.0.0.1:4200/api") == {}  # another server: its user's business
    monkeypatch.setattr(server, "recorded", lambda: None)
    assert server.client_env("http://127.0.0.1:4999/api") == {}


def _argvs() -> list[bytes]:
    """Every process's command line, as any user can read it."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                found.append((proc / "cmdline").read_bytes())
            except OSError:  # gone meanwhile
                pass
    return found


def check_the_day_server_requires_its_secret(kept: server.Server, env: dict[str, str], tmp_path: Path,
                                             said: str) -> None:
    """With the server `dprelease server start` started (``kept``; ``said``: all that start and
    the runs on it printed): it refuses a client without the secret (401) and serves one with it;
    the secret is 0600 and in no process's command line, no log and no output; `schedule` serves
    against it without the no-authentication warning, and a deployment run triggered by hand as
    docs/commands.md says (the secret in the environment, read from its file) publishes, while the
    same command without the secret is refused."""
    from tests.ledgers import make_ledger
    from tests.test_operations import demo_spec
    from tests.test_schedule import finished, serve, wait_for

    path = server_auth.secret_file()
    assert oct(path.stat().st_mode & 0o777) == "0o600" and path.parent == server.state_file().parent
    secret = server_auth.read_secret()
    assert secret and secret.startswith("dprelease:")
    assert server.api_problem(kept.url) is None  # its health probe stays open (Prefect's rule): runs find it
    assert server_auth.answers(kept.url) == 401 and server_auth.answers(kept.url, "dprelease:wrong") == 401
    assert server_auth.answers(kept.url, secret) == 200
    saved = os.environ.pop(server_auth.CLIENT_VARIABLE, None)
    try:  # a run or `schedule` that lacks the secret is refused before anything is spent, not with a traceback
        with pytest.raises(UserError, match=r"requires authentication and refuses this process's credentials \(401"):
            server.check_access(kept.url)
        os.environ[server_auth.CLIENT_VARIABLE] = secret
        server.check_access(kept.url)
    finally:
        os.environ.pop(server_auth.CLIENT_VARIABLE, None)
        os.environ.update({server_auth.CLIENT_VARIABLE: saved} if saved is not None else {})

    ledger, out = tmp_path / "sched-ledger.sqlite", tmp_path / "sched-out"
    make_ledger(ledger)
    spec = demo_spec(tmp_path)
    spec.write_text(spec.read_text().replace("release: acs-demo-2019", 'release: "acs-authed-{run_date:%Y-%m}"'))
    served = serve(spec, "authed", ledger, out, {**env, "PREFECT_API_URL": None}, "--no-approval")
    try:
        # `schedule` registers the deployment: with the secret, or the server would not have let it in
        wait_for(lambda: served.poll() is not None or _authed_deployment(kept.url, secret, "authed"), 120,
                 "the deployment to register")
        assert served.poll() is None, served.communicate()
        assert all(secret.encode() not in argv for argv in _argvs())  # server, runner, serve, its flow runs
        assert secret in (Path(f"/proc/{kept.pid}/environ").read_bytes().decode("utf-8", "replace"))

        by_hand = (f"PREFECT_API_URL={kept.url} PREFECT_API_AUTH_STRING=\"$(cat {shlex.quote(str(path))})\" "
                   f"{shlex.quote(sys.executable)} -m prefect deployment run 'dprelease-scheduled/authed'")
        refused = subprocess.run(["sh", "-c", by_hand.replace("PREFECT_API_AUTH_STRING=", "NOT_THE_SECRET=")],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "401" in refused.stdout + refused.stderr, refused
        triggered = subprocess.run(["sh", "-c", by_hand], cwd=ROOT, env=env, capture_output=True, text=True,
                                   timeout=120)
        assert triggered.returncode == 0, triggered.stdout + triggered.stderr
        run_id = re.search(r"UUID: ([0-9a-f-]{36})", triggered.stdout).group(1)
        assert all(secret.encode() not in argv for argv in _argvs())  # again, with the run's process started
        run = finished(kept.url, run_id, secret)
        assert run["state"]["type"] == "COMPLETED", run["state"]
        assert any(p.name.startswith("acs-authed-") for p in out.iterdir())
        said += triggered.stdout + triggered.stderr
    finally:
        os.killpg(served.pid, signal.SIGINT)
        said += served.communicate(timeout=300)[0]
    assert "requires no authentication" not in said, said
    assert secret not in said and secret not in Path(kept.log).read_text()


def _authed_deployment(url: str, secret: str, name: str) -> dict | None:  # type: ignore[type-arg]
    from tests.test_schedule import api

    try:
        found = api(url, f"/deployments/name/dprelease-scheduled/{name}", auth=secret)
    except urllib.error.HTTPError:
        return None
    return found if found.get("schedules") else None


def test_check_access_asks_with_the_credentials_prefect_will_use(monkeypatch):
    """A run or `schedule` is refused up front (nothing spent) when its server answers 401 to the
    credentials Prefect will send: PREFECT_API_AUTH_STRING of the environment, else of the active
    profile. With an API key (Prefect Cloud) it does not ask."""
    asked: list[str | None] = []
    monkeypatch.setattr(server_auth, "answers", lambda url, secret=None: asked.append(secret) or 401)
    monkeypatch.delenv("PREFECT_API_AUTH_STRING", raising=False)
    with pytest.raises(UserError, match="refuses this process's credentials"):
        server.check_access("http://127.0.0.1:9/api")
    Path(os.environ["PREFECT_PROFILES_PATH"]).write_text(
        'active = "mine"\n[profiles.mine]\nPREFECT_API_AUTH_STRING = "me:from-profile"\n')
    with pytest.raises(UserError):
        server.check_access("http://127.0.0.1:9/api")
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "me:from-env")
    with pytest.raises(UserError):
        server.check_access("http://127.0.0.1:9/api")
    assert asked == [None, "me:from-profile", "me:from-env"]
    monkeypatch.setenv("PREFECT_API_KEY", "pnu_cloud")
    server.check_access("http://127.0.0.1:9/api")
    assert len(asked) == 3


def test_the_secrets_directories_are_owner_only_whatever_the_umask(tmp_path, monkeypatch):
    """Issue 27, item 8 (review 4): the secret's missing parent directories are made by the one
    file-mode rule (dprelease.host.files.make_dirs), 0700 each, even under umask 000."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "new" / "data"))
    previous = os.umask(0)
    try:
        server_auth.kept_secret()
    finally:
        os.umask(previous)
    made = [tmp_path / "new", tmp_path / "new" / "data", tmp_path / "new" / "data" / "dprelease"]
    assert [oct(d.stat().st_mode & 0o777) for d in made] == ["0o700"] * 3
    assert oct(server_auth.secret_file().stat().st_mode & 0o777) == "0o600"


FAKE_PREFECT_SERVER = """
import http.server, os, sys
AUTH = bool(os.environ.get("PREFECT_SERVER_API_AUTH_STRING"))  # as Prefect: every route but its probes wants it
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        probe = self.path.endswith(("/health", "/ready"))
        self.send_response(401 if AUTH and not probe and "Authorization" not in self.headers else 200)
        self.end_headers()
        self.wfile.write(b"true")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_day_server_without_authentication_is_replaced_never_kept_silently(tmp_path, monkeypatch, cli):
    """Issue 27, item 8 (review 5): a day server started before dprelease required authentication
    (an upgrade; the shipped systemd unit runs `server start` first) answers without the secret.
    `server start` does not call it "already running": it says so in a warning, stops it, and
    starts one that requires the secret on the same port. (Two stand-ins for Prefect's server,
    answering as it does with and without ``PREFECT_SERVER_API_AUTH_STRING``.)"""
    from dprelease.cli import warm
    from dprelease.host.processes import process_start, write_record

    def fake(port: int, log: Path, *, with_parent: bool = False,  # type: ignore[no-untyped-def]
             extra_env: dict[str, str] | None = None):
        environ = {k: v for k, v in os.environ.items() if k != server_auth.SERVER_VARIABLE}
        return subprocess.Popen([sys.executable, "-c", FAKE_PREFECT_SERVER, str(port)], env={**environ, **(extra_env or {})},
                                start_new_session=True)

    port = server._any_free_port()
    old = fake(port, tmp_path / "old.log")
    url = f"http://127.0.0.1:{port}/api"
    try:
        server._wait_healthy(old, url, tmp_path / "old.log", 30)
        write_record(server.state_file(), server.Server(old.pid, process_start(old.pid), url, "t", "log", "home"))
        assert server_auth.answers(url) == 200  # no secret asked: anyone who reaches it can start runs
        monkeypatch.setattr(server, "_spawn", fake)
        stopped_runners: list[bool] = []
        monkeypatch.setattr(warm, "stop", lambda: stopped_runners.append(True))
        monkeypatch.setattr(warm, "start", lambda api: (None, "warm runner: not started (a test)"))
        result = cli("server", "start")
        assert result.code == 0, result
        assert (f"warning: the Prefect server at {url} (PID {old.pid}) answered WITHOUT authentication (started before "
                "dprelease required it: anyone who reached it could start runs); it was stopped, and one that requires "
                "the secret replaces it") in result.stderr, result
        new = server.recorded()
        assert new is not None and new.pid != old.pid and new.url == url  # the same port: its clients find it
        assert result.stdout.startswith(f"replaced: {url} (PID {new.pid}"), result.stdout
        assert old.wait(timeout=300) is not None and stopped_runners == [True]
        assert server_auth.answers(url) == 401 and server_auth.answers(url, server_auth.read_secret()) == 200
        again = cli("server", "start")  # a server that requires the secret is kept
        assert again.code == 0 and again.stdout.startswith(f"already running: {url} (PID {new.pid}"), again
        assert "WITHOUT" not in again.stderr
    finally:
        server.stop()
        old.kill()
        old.wait()


def test_server_start_never_reports_another_servers_answer_as_its_own(tmp_path, monkeypatch, cli):
    """Issue 29, point 3: `server start` reported success for a server that had died ("Port 4200
    is already in use"): another server, taking the port as ours started, answered the health
    check. Now the answering server must be ours (it refuses without the secret, serves with it,
    and our process runs); if not, ours is stopped and another free port is tried (with --port:
    refused). The other server is left alone. (Stand-ins for Prefect's server, as above.)"""
    from dprelease.cli import warm

    def fake(port: int, log: Path, *, with_parent: bool = False,  # type: ignore[no-untyped-def]
             extra_env: dict[str, str] | None = None):
        environ = {k: v for k, v in os.environ.items() if k != server_auth.SERVER_VARIABLE}
        return subprocess.Popen([sys.executable, "-c", FAKE_PREFECT_SERVER, str(port)], env={**environ, **(extra_env or {})},
                                start_new_session=True, stderr=subprocess.DEVNULL)

    taken = server._any_free_port()
    other = fake(taken, tmp_path / "other.log")  # someone else's, without authentication
    url = f"http://127.0.0.1:{taken}/api"
    try:
        server._wait_healthy(other, url, tmp_path / "other.log", 30)
        monkeypatch.setattr(server, "_spawn", fake)
        monkeypatch.setattr(server, "_free_port", lambda preferred: taken)  # free when probed, taken as ours starts
        monkeypatch.setattr(warm, "stop", lambda: None)
        monkeypatch.setattr(warm, "start", lambda api: (None, "warm runner: not started (a test)"))
        pinned = cli("server", "start", "--port", str(taken))
        assert pinned.code == 2 and f"another server answers at {url}: port {taken} was taken" in pinned.stderr, pinned
        assert "Choose another --port" in pinned.stderr and server.recorded() is None
        result = cli("server", "start")
        assert result.code == 0, result
        ours = server.recorded()
        assert ours is not None and ours.url != url and ours.pid != other.pid
        assert result.stdout.startswith(f"started: {ours.url} (PID {ours.pid}") or ours.url in result.stdout, result
        assert server_auth.answers(ours.url) == 401 and server_auth.answers(ours.url, server_auth.read_secret()) == 200
        assert other.poll() is None and server_auth.answers(url) == 200  # the other server left alone
    finally:
        server.stop()
        other.kill()
        other.wait()
