"""The warm runner: a process ``dprelease server start`` keeps beside the day's Prefect server,
with Prefect and the library imported once, that runs each handed-over ``dprelease run``
(:mod:`dprelease.cli.handoff`) in a child forked for it. A run then costs its own work and
its flow run's API calls, not the ~1–2 s of importing Prefect, typer and the library.

How it is safe to fork: the runner only imports (it never starts a flow run, an event loop
or a thread of its own), and it is single-threaded (one ``selectors`` loop; SIGCHLD wakes it
through a socket pair). A child resets the signal handlers, closes every descriptor of the
runner's (its listening socket, other runs' connections), takes the client's stdin, stdout
and stderr, working directory, umask, environment and arguments, and runs the command as the
``dprelease`` command would; it ends through the interpreter's normal exit (atexit handlers,
Prefect's log flush), and the runner reports its exit code to the client.

Who may use it: the socket is the client's only way in. It lives in the owner-only data
directory (or, when that path is too long for a Unix socket, in ``$XDG_RUNTIME_DIR`` or an
owner-only ``/tmp/dprelease-UID``), is created mode 0600, and every connection's peer
credentials (SO_PEERCRED) must be this user's. A request whose fingerprint
(:func:`dprelease.cli.handoff.fingerprint`: code, interpreter, Prefect settings) differs from
the runner's is refused, and the client runs the command itself.

This module's top level imports the standard library only: the client reads the runner's record here.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from dprelease.processes import alive, data_dir, process_start

START_TIMEOUT = 60.0  # seconds for the runner to import Prefect and answer
MAX_REQUEST = 1 << 22  # bytes: a request is the arguments and the environment
PRELOAD = (  # what a run imports beyond the library, found by diffing sys.modules around a flow run
    "prefect.engine", "prefect.flow_engine", "prefect.task_engine", "prefect.concurrency.v1.context",
    "prefect.concurrency._sync", "prefect.telemetry.run_telemetry", "prefect.utilities.visualization",
    "prefect._internal.control_listener", "prefect._internal.attempt_control", "anyio._backends._asyncio",
    "fastapi", "typer", "rich.progress", "pandas", "pyarrow.csv", "sqlite3",
)


@dataclass(frozen=True)
class Runner:
    """A warm runner, as ``dprelease server start`` recorded it."""

    pid: int
    start: str  # its process start token (dprelease.processes.process_start)
    api: str  # the Prefect API its flow runs go to (Prefect read it at import)
    socket: str
    log: str

    def running(self) -> bool:
        return alive(self.pid, self.start)


def record_file() -> Path:
    return data_dir() / "runner.json"


def recorded() -> Runner | None:
    """The warm runner ``dprelease server start`` recorded, if its process still runs."""
    try:
        runner = Runner(**json.loads(record_file().read_text("utf-8")))
    except (OSError, ValueError, TypeError):
        return None
    return runner if runner.running() else None


def socket_path() -> Path:
    """Where the runner listens: in the data directory when the path fits a Unix socket's
    108 bytes, else in an owner-only directory of the runtime or temporary directory."""
    home = data_dir()
    path = home / "runner.sock"
    if len(os.fsencode(path)) < 100:
        return path
    tag = hashlib.sha256(os.fsencode(home)).hexdigest()[:12]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path("/tmp") / f"dprelease-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    info = base.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise OSError(f"{base} is not owned by this user with mode 0700; the warm runner will not use it")
    return base / f"runner-{tag}.sock"


def start(api: str) -> tuple[Runner | None, str]:
    """Start a warm runner for the Prefect API ``api`` (or find one running for it): (the runner
    or None, a line saying what happened). A runner that fails to start is not an error: runs
    then import Prefect themselves."""
    running = recorded()
    if running is not None and running.api == api and _answers(Path(running.socket)):
        return running, f"warm runner: already running (PID {running.pid})"
    if running is not None:  # for another server, or for other code or settings than this command's
        stop()
    try:
        path = socket_path()
    except OSError as exc:
        return None, f"warm runner: not started ({exc}); runs import Prefect themselves"
    log = data_dir() / "runner.log"
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as sink:
        process = subprocess.Popen([sys.executable, "-m", "dprelease.cli.warm", str(path)],
                                   stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PREFECT_API_URL": api}, start_new_session=True)
    runner = Runner(process.pid, process_start(process.pid), api, str(path), str(log))
    deadline = time.monotonic() + START_TIMEOUT
    while not _answers(path):
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            tail = log.read_text("utf-8", "replace").strip().splitlines()[-3:]
            return None, ("warm runner: did not start (runs import Prefect themselves); its log ends: "
                          + " / ".join(tail))
        time.sleep(0.05)
    fd = os.open(record_file(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        json.dump(asdict(runner), f, indent=2)
    return runner, f"warm runner: started (PID {runner.pid}; Prefect imported once, each run forked from it)"


def _answers(path: Path) -> bool:
    """Whether the runner at ``path`` answers, and would take this process's runs (the same
    code, Python and Prefect settings)."""
    from dprelease.cli.handoff import fingerprint, send_message

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(2)
            probe.connect(str(path))
            send_message(probe, {"ping": True, "fingerprint": fingerprint(os.environ)})
            return probe.makefile("r").readline().strip() == "ready"
    except OSError:
        return False


def stop() -> Runner | None:
    """Stop the recorded runner (runs it is running get SIGTERM and settle as interrupted runs)."""
    runner = recorded()
    if runner is not None:
        try:
            os.killpg(runner.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + 20
        while runner.running() and time.monotonic() < deadline:
            time.sleep(0.05)
    record_file().unlink(missing_ok=True)
    return runner


def status_line() -> str:
    runner = recorded()
    if runner is None:
        return "warm runner: not running (runs import Prefect themselves; `dprelease server start` starts one)"
    return (f"warm runner: PID {runner.pid}, for {runner.api}, socket {runner.socket}, log {runner.log} "
            "(runs are handed to it when they go to that server)")


# --- the runner process (python -m dprelease.cli.warm SOCKET) --------------------------------------


def _preload() -> None:
    """Import what a run needs, so that a forked child finds it imported. Only imports:
    nothing here starts a thread or an event loop (forking would not be safe after that)."""
    import importlib
    import pkgutil

    import dprelease
    import dprelease.orchestrate  # noqa: F401 - Prefect, and the flow

    for module in pkgutil.walk_packages(dprelease.__path__, "dprelease."):
        if not module.name.startswith(("dprelease.cli", "dprelease.__main__")):
            importlib.import_module(module.name)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # another Prefect version: that run imports what it needs
            pass


class _Loop:
    """The runner's single-threaded accept/fork/reap loop."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        import selectors

        self.owner = os.getpid()
        self.fingerprint = fingerprint
        self.path = path
        path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous = os.umask(0o177)
        try:
            self.listener.bind(str(path))  # created 0600
        finally:
            os.umask(previous)
        self.listener.listen(16)
        self.wake_r, self.wake_w = socket.socketpair()
        for end in (self.wake_r, self.wake_w):
            end.setblocking(False)
        signal.set_wakeup_fd(self.wake_w.fileno())
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGTERM, _exit)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.children: dict[int, socket.socket | None] = {}  # a run's PID: its client's connection

    def serve(self) -> None:
        try:
            while True:
                for key, _ in self.selector.select():
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj is self.wake_r:
                        self._drain_and_reap()
                    else:
                        self._client_spoke(key.data)
        finally:
            if os.getpid() == self.owner:  # a child leaves through here too: the socket is the runner's
                self.path.unlink(missing_ok=True)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(5)
            pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                 struct.calcsize("3i")))
            if uid != os.getuid():
                conn.sendall(b"refused another user's request\n")
                return conn.close()
            request, fds = _receive(conn)
            if request.get("fingerprint") != self.fingerprint:
                conn.sendall(b"refused it was started for other dprelease code, Python or Prefect settings "
                             b"(`dprelease server start` replaces it with a fresh one)\n")
                return conn.close()
            if request.get("ping"):
                conn.sendall(b"ready\n")
                return conn.close()
            if len(fds) != 3:
                conn.sendall(b"refused the request did not pass stdin, stdout and stderr\n")
                return conn.close()
            sys.stdout.flush()
            sys.stderr.flush()
            child = os.fork()
            if child == 0:
                raise SystemExit(self._run_child(conn, fds, request))
            self.children[child] = conn
            self.selector.register(conn, 1, data=child)
        except (OSError, ValueError) as exc:
            print(f"a request failed: {exc!r}", file=sys.stderr, flush=True)
            conn.close()
        finally:
            if os.getpid() == self.owner:
                for fd in fds:
                    os.close(fd)

    def _drain_and_reap(self) -> None:
        try:
            while self.wake_r.recv(512):
                pass
        except BlockingIOError:
            pass
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            conn = self.children.pop(pid, None)
            if conn is not None:
                self.selector.unregister(conn)
                try:
                    conn.sendall(f"exit {128 - code if code < 0 else code}\n".encode())
                except OSError:
                    pass
                conn.close()

    def _client_spoke(self, child: int) -> None:
        """The client's end said something or closed: a closed client (killed, say) ends its run."""
        conn = self.children.get(child)
        if conn is None:
            return
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(conn)
            conn.close()
            self.children[child] = None  # reaped later, reported to no one
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _run_child(self, conn: socket.socket, fds: list[int], request: dict[str, object]) -> int:
        """The child's exit code, whatever happens: it never returns into the runner's loop."""
        try:
            return self._child(conn, fds, request)
        except BaseException:  # noqa: BLE001 - e.g. the client's working directory is gone
            import traceback

            traceback.print_exc()
            return 1

    def _child(self, conn: socket.socket, fds: list[int], request: dict[str, object]) -> int:
        """In the forked child: become the client's ``dprelease`` process and run its command."""
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.selector.close()
        for other in (self.listener, self.wake_r, self.wake_w,
                      *(c for c in self.children.values() if c is not None)):
            other.close()
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        fds.clear()
        from dprelease.cli.handoff import CHILD_FLAG

        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        os.environ[CHILD_FLAG] = str(self.owner)
        os.chdir(str(request["cwd"]))
        os.umask(int(str(request["umask"])))
        argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        sys.argv = argv
        conn.sendall(f"pid {os.getpid()}\n".encode())
        conn.close()
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=stream.isatty())  # type: ignore[union-attr]
        from dprelease.cli.commands import app

        try:
            app(args=argv[1:], prog_name="dprelease")
        except SystemExit as done:
            code = done.code
            if code is None or isinstance(code, int):
                return code or 0
            print(code, file=sys.stderr)
            return 1
        return 0


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    if len(data) < 4:
        raise ValueError("a request shorter than its length")
    (size,) = struct.unpack("!I", data[:4])
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes")
    body = data[4:]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ValueError("a request cut short")
        body += more
    request = json.loads(body)
    if not isinstance(request, dict):
        raise ValueError("a request that is not an object")
    return request, list(fds)


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dprelease.cli.warm SOCKET (started by `dprelease server start`)", file=sys.stderr)
        return 2
    from dprelease.cli.handoff import fingerprint

    settings = fingerprint(os.environ)  # before Prefect's import, which sets defaults in the environment
    _preload()
    loop = _Loop(Path(argv[0]), settings)
    print(f"warm runner PID {os.getpid()} listening on {argv[0]} for {os.environ.get('PREFECT_API_URL')}",
          file=sys.stderr, flush=True)
    loop.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
