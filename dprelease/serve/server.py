"""Where a run's steps run: a local Prefect server kept for the working day, and the choice of
orchestrator for each run. Nothing here imports Prefect: the server is a child process
(``python -m prefect server start``), so the run's own process never loads Prefect's server.

``dprelease server start`` starts one server on 127.0.0.1, detached (it outlives the command),
waits until it answers, and records its PID, process start token and URL in
``$XDG_DATA_HOME/dprelease/server.json`` (owner-only). ``stop`` ends it; ``status`` says
whether runs will use it. A recorded server that answers without authentication (one started
before dprelease required it) is never kept: ``start`` stops it and starts one in its place. Its API requires the secret kept beside that record
(:mod:`dprelease.serve.auth`), which :func:`client_env` gives each client process dprelease
runs against it; a temporary server requires a secret of its own, held in memory. A recorded server whose process has gone (or whose PID now belongs
to another process) is treated as absent.

:func:`choose` decides, before anything is spent, how a run's steps run:

* ``inline`` — called one after another in this process (:mod:`dprelease.lifecycle.inline`);
* ``prefect`` — a Prefect flow run, on the server at ``PREFECT_API_URL``, else on the one
  ``dprelease server`` keeps, else on a temporary server started for this run alone
  (:func:`temporary`);
* ``auto`` (the default) — Prefect when a server is up (``PREFECT_API_URL``, or the one
  ``dprelease server`` keeps), otherwise inline.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from dprelease.host import files
from dprelease.serve import auth as server_auth
from dprelease.errors import UserError
from dprelease.host.processes import alive, data_dir, pid_exists, process_start, read_record, write_record

MODES = ("auto", "prefect", "inline")
START_TIMEOUT = 120.0  # seconds: a first start migrates a new PREFECT_HOME's database (~15 s here)
START_ATTEMPTS = 3  # ports tried when another server takes the one chosen as ours starts
DEFAULT_PORT = 4200


@dataclass(frozen=True)
class Server:
    """A local Prefect server started by ``dprelease server start``."""

    pid: int
    start: str  # the process's start token (see dprelease.host.processes.process_start)
    url: str  # its API, e.g. http://127.0.0.1:4200/api
    started_at: str
    log: str
    prefect_home: str

    def running(self) -> bool:
        return alive(self.pid, self.start)


@dataclass(frozen=True)
class Choice:
    """How a run's steps run: ``kind`` inline or prefect; ``api`` the Prefect API (None: a
    temporary server for this run); ``how`` why, in words (said once, recorded in run.json)."""

    kind: str
    api: str | None
    how: str

    def record(self) -> dict[str, str]:
        return {"kind": self.kind, **({"api": self.api} if self.api else {}), "chosen_by": self.how}


def state_file() -> Path:
    return data_dir() / "server.json"


def recorded() -> Server | None:
    """The server ``dprelease server start`` recorded, if its process still runs."""
    return read_record(state_file(), Server)


def api_problem(url: str, timeout: float = 10.0) -> str | None:
    """Why the Prefect API at ``url`` cannot take a run (a phrase), or None when it answers healthy."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as response:
            if response.status == 200:
                return None
            return f"answers {response.status}"
    except OSError as exc:
        return f"does not answer ({exc})"
    except ValueError as exc:  # not a URL at all, e.g. PREFECT_API_URL="localhost:4200"
        return f"is not a URL such as http://127.0.0.1:4200/api ({exc})"


def choose(mode: str, environ: Mapping[str, str] | None = None) -> Choice:
    """The orchestrator a run uses under ``--orchestrator mode`` (see the module's docstring).
    A server named by PREFECT_API_URL is chosen whether or not it answers: the run checks it
    (:func:`check_api`) after the spec's own refusals, and refuses (exit 2, nothing spent)
    rather than silently passing it over: the user asked for it."""
    if mode not in MODES:
        raise UserError(f"--orchestrator {mode!r}: use one of {', '.join(MODES)}")
    env = os.environ if environ is None else environ
    if mode == "inline":
        return Choice("inline", None, "--orchestrator inline")
    url = env.get("PREFECT_API_URL") or None
    if url:
        return Choice("prefect", url, "PREFECT_API_URL")
    profile, url = profile_api_url(env)
    if url:
        return Choice("prefect", url, f"PREFECT_API_URL of Prefect profile {profile!r}")
    server = recorded()
    if server is not None and api_problem(server.url, timeout=5) is None:
        return Choice("prefect", server.url, f"dprelease server (PID {server.pid})")
    if mode == "prefect":
        return Choice("prefect", None, "--orchestrator prefect, no server up: a temporary one for this run")
    return Choice("inline", None, "no Prefect server is up")


def profile_api_url(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the active Prefect profile, its PREFECT_API_URL) as ``prefect config set`` left them in
    ``$PREFECT_PROFILES_PATH`` (default ``$PREFECT_HOME/profiles.toml``), read without importing
    Prefect; (None, None) when there is none."""
    return profile_setting("PREFECT_API_URL", environ)


def profile_setting(name: str, environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the active Prefect profile, its setting ``name``), as :func:`profile_api_url`."""
    import tomllib

    env = os.environ if environ is None else environ
    home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(env.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        profiles = tomllib.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None, None
    active = env.get("PREFECT_PROFILE") or profiles.get("active")
    chosen = (profiles.get("profiles") or {}).get(active) if isinstance(active, str) else None
    value = chosen.get(name) if isinstance(chosen, dict) else None
    return (active, value) if isinstance(value, str) and value else (None, None)


def check_api(url: str) -> None:
    """Refuse a run (a user error: nothing is spent) whose Prefect server does not answer."""
    problem = api_problem(url)
    if problem:
        raise UserError(f"the Prefect server at PREFECT_API_URL={url} {problem}; start it, unset PREFECT_API_URL "
                        "(or run with --orchestrator inline) to run without it. Nothing was spent.")


def check_access(url: str) -> None:
    """Refuse (a user error: nothing is spent) a run or schedule whose Prefect server turns away
    this process's credentials (``PREFECT_API_AUTH_STRING`` of the environment, else of the active
    Prefect profile, or none). With an API key (Prefect Cloud's credentials) it does not ask."""
    if os.environ.get("PREFECT_API_KEY") or profile_setting("PREFECT_API_KEY")[1]:
        return
    secret = os.environ.get(server_auth.CLIENT_VARIABLE) or profile_setting(server_auth.CLIENT_VARIABLE)[1]
    if server_auth.answers(url, secret) == 401:
        raise UserError(f"the Prefect server at {url} requires authentication and refuses this process's "
                        f"credentials (401 Unauthorized): set {server_auth.CLIENT_VARIABLE} to its user:password in "
                        "the environment or your Prefect profile (for the server `dprelease server start` keeps, "
                        "dprelease does that itself), or unset PREFECT_API_URL. Nothing was spent.")


def _free_port(preferred: int | None) -> int:
    """``preferred`` if no one listens there (else refused), or 4200 if free, or any free port.
    Probed as the server binds (SO_REUSEADDR, as uvicorn through asyncio does): the closed
    connections of a server just stopped on that port (TIME_WAIT) do not make it taken."""
    for port in ([preferred] if preferred else [DEFAULT_PORT]) + [0]:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                if preferred:
                    raise UserError(f"port {preferred} on 127.0.0.1 is taken; choose another --port") from None
                continue
            return int(probe.getsockname()[1])
    raise UserError("no free port on 127.0.0.1")  # pragma: no cover - bind to port 0 does not fail


def _any_free_port() -> int:
    """A port on 127.0.0.1 free now, chosen by the system (two runs never pick the same one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _prefect_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    return env


def _spawn(port: int, log: Path, *, with_parent: bool = False,
           extra_env: Mapping[str, str] = {}) -> subprocess.Popen[bytes]:
    """``prefect server start`` on 127.0.0.1:port in a process group of its own; with
    ``with_parent`` it is also sent SIGTERM if this process dies (Linux), so a run killed even
    with SIGKILL leaves no server behind."""
    with files.open_truncated(log) as sink:  # 0600, in a 0700 directory
        return subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port)], stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                env={**_prefect_env(), **extra_env}, start_new_session=True,
                                preexec_fn=_die_with_parent if with_parent and sys.platform.startswith("linux")
                                else None)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> None:
    """Until the server at ``url`` answers; it must be ``process``'s own (another server that
    took the port first, and answers there, is not)."""
    deadline = time.monotonic() + timeout
    while api_problem(url, timeout=2) is not None or process.poll() is not None:
        if process.poll() is not None:
            tail = log.read_text("utf-8", "replace").strip().splitlines()[-5:]
            raise UserError(f"the Prefect server exited ({process.returncode}) before answering; its log "
                            f"({log}) ends:\n  " + "\n  ".join(tail))
        if time.monotonic() > deadline:
            _end(process.pid)
            raise UserError(f"the Prefect server did not answer at {url} within {timeout:.0f} s (log: {log})")
        time.sleep(0.25)


def _its_own(process: subprocess.Popen[bytes], url: str, secret: str) -> bool:
    """Whether the server answering at ``url`` is ``process``'s: the process still runs, and the
    server refuses a request without the secret and serves one with it (a server another user or
    an earlier session left on the port answers otherwise: without authentication, or with a
    secret of its own)."""
    return (process.poll() is None and server_auth.answers(url) == 401
            and server_auth.answers(url, secret) == 200 and process.poll() is None)


def start(port: int | None = None) -> tuple[Server, Server | None, bool]:
    """Start the day's server, or find it running: (the server, the one it replaced, whether it
    was already up). A recorded server that answers without authentication (started before
    dprelease required it) is never kept: it is stopped, and a new one that requires the secret
    takes its place (on its port, unless ``port`` says otherwise)."""
    running = recorded()
    if running is not None and server_auth.answers(running.url) != 200:
        return running, None, True
    if running is not None:
        stop()
        port = port or urllib.parse.urlsplit(running.url).port
    secret = server_auth.kept_secret()
    log = state_file().parent / "server.log"
    chosen = _free_port(port)
    for attempt in range(START_ATTEMPTS):
        url = f"http://127.0.0.1:{chosen}/api"
        process = _spawn(chosen, log, extra_env={server_auth.SERVER_VARIABLE: secret})
        try:
            _wait_healthy(process, url, log, START_TIMEOUT)
        except UserError:
            if process.poll() is None or api_problem(url, timeout=2) is not None:
                raise
            # it exited while another server answers on its port: the port was taken (below)
        if _its_own(process, url, secret):
            break
        if process.poll() is None:
            _end(process.pid)  # another server took the port as ours started: ours cannot bind it
        if port is not None or attempt == START_ATTEMPTS - 1:
            raise UserError(f"another server answers at {url}: port {chosen} was taken as the Prefect server started "
                            f"(its log: {log}); nothing was recorded. "
                            + ("Choose another --port." if port is not None else "Run `dprelease server start` again."))
        chosen = _any_free_port()
    home = os.environ.get("PREFECT_HOME") or str(Path.home() / ".prefect")
    server = Server(process.pid, process_start(process.pid), url, time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                    str(log), home)
    path = state_file()
    write_record(path, server)
    return server, running, False


def stop() -> Server | None:
    """Stop the recorded server (None: none was running); the record is removed either way."""
    server = recorded()
    if server is not None:
        _end(server.pid)
    state_file().unlink(missing_ok=True)
    return server


def _end(pid: int, grace: float = 20.0) -> None:
    """SIGTERM the server's process group (it leads one), then SIGKILL after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_exists(pid):
                return
            time.sleep(0.1)


def client_env(api: str) -> dict[str, str]:
    """What a Prefect client of ``api`` needs in its environment (before it imports Prefect) to
    be let in: the secret, when ``api`` is the server ``dprelease server start`` keeps; else
    nothing (another server's credentials are its user's business)."""
    kept = recorded()
    if kept is None or kept.url.rstrip("/") != api.rstrip("/"):
        return {}
    secret = server_auth.read_secret()
    return {server_auth.CLIENT_VARIABLE: secret} if secret else {}


@contextmanager
def temporary() -> Iterator[tuple[str, str]]:
    """A Prefect server for one run (``--orchestrator prefect`` with none up): started on a free
    port as a child of this process (which it does not outlive: see :func:`_spawn`), requiring a
    fresh secret of its own; (its API URL, the secret) yielded; stopped on the way out, a SIGTERM
    to the run included."""
    secret = server_auth.new_secret()
    port = _any_free_port()
    url = f"http://127.0.0.1:{port}/api"
    log = state_file().parent / f"server-{os.getpid()}.log"
    for stale in log.parent.glob("server-*.log"):  # of runs killed outright (their server died with them)
        pid = stale.stem.partition("-")[2]
        if pid.isdigit() and not pid_exists(int(pid)):
            stale.unlink(missing_ok=True)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so the finally below runs
    process = _spawn(port, log, with_parent=True, extra_env={"PREFECT_UI_ENABLED": "false",
                                                             server_auth.SERVER_VARIABLE: secret})
    try:
        _wait_healthy(process, url, log, START_TIMEOUT)
        yield url, secret
    finally:
        _end(process.pid)
        process.wait()
        log.unlink(missing_ok=True)
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _auth_line(url: str) -> str:
    if server_auth.answers(url) == 200:
        return ("server API: answers WITHOUT authentication (started before dprelease required it): anyone who "
                "reaches it can start runs; `dprelease server start` replaces it with one that requires a secret")
    return (f"server API: requires authentication; its secret is in {server_auth.secret_file()} (owner-only; "
            "docs/commands.md says how to trigger a deployment with it)")


def status_lines(environ: Mapping[str, str] | None = None) -> list[str]:
    """What ``dprelease server status`` says: the recorded server, and what runs will use."""
    env = os.environ if environ is None else environ
    server = recorded()
    lines = []
    if server is None:
        lines.append("no server kept by dprelease server is running (dprelease server start keeps one for the day)")
    else:
        problem = api_problem(server.url, timeout=5)
        lines.append(f"server: {server.url} (PID {server.pid}, started {server.started_at} UTC, log {server.log}, "
                     f"PREFECT_HOME {server.prefect_home}){'' if problem is None else '; it ' + problem}")
        if problem is None:
            lines.append(_auth_line(server.url))
    choice = choose("auto", env)
    if choice.kind == "prefect" and choice.api is not None and (problem := api_problem(choice.api, timeout=5)):
        lines.append(f"runs (--orchestrator auto): refused: the Prefect server at {choice.api} ({choice.how}) {problem}")
    else:
        lines.append(f"runs (--orchestrator auto): {'Prefect at ' + str(choice.api) if choice.kind == 'prefect' else 'inline'}"
                     f" ({choice.how})")
    return lines
