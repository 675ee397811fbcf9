"""The warm runner process (``python -m dprelease.cli.warm.loop SOCKET``, started by
:func:`dprelease.cli.warm.start`): Prefect and the library imported once, then one child forked
per ``dprelease run`` handed over (:mod:`dprelease.cli.warm.handoff`).

Why forking is safe here: the runner only imports — it never starts a flow run, an event loop
or a Python thread (native libraries' own thread pools, OpenBLAS's and jemalloc's, register
fork handlers) — and it is single-threaded (one ``selectors`` loop; SIGCHLD and SIGTERM wake
it through a socket pair). Signals are blocked around ``fork`` so that none is lost or handled
by the runner's handlers in the child. A child resets the signal handlers, closes every
descriptor of the runner's (its listening socket, other runs' connections), takes the client's
stdin, stdout and stderr, working directory, umask, environment and arguments, and runs the
command as ``dprelease`` would; it ends through the interpreter's normal exit (atexit handlers,
Prefect's log flush) and never returns into the runner's loop. The runner reports its exit code
to the client; a client whose connection closes (killed, say) has its run sent SIGTERM, which
settles the run like any interrupted run.

Who gets in: a connection whose peer is another user is refused before anything is read; a
request whose fingerprint (:func:`dprelease.cli.warm.protocol.fingerprint`: code, Python, libraries,
Prefect settings) differs from the runner's is refused, and the client runs the command itself.
On SIGTERM the runner stops accepting, removes its socket, and exits once its runs have ended.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path

MAX_REQUEST = 1 << 22  # bytes: a request is the arguments and the environment
BLOCKED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD}
PRELOAD = (  # what a run imports beyond the library, found by diffing sys.modules around a flow run
    "prefect.engine", "prefect.flow_engine", "prefect.task_engine", "prefect.concurrency.v1.context",
    "prefect.concurrency._sync", "prefect.telemetry.run_telemetry", "prefect.utilities.visualization",
    "prefect._internal.control_listener", "prefect._internal.attempt_control", "anyio._backends._asyncio",
    "fastapi", "typer", "rich.progress", "pandas", "pyarrow.csv", "sqlite3",
)


def _preload() -> None:
    """Import what a run needs, so that a forked child finds it imported (imports only)."""
    import importlib
    import pkgutil

    import dprelease
    import dprelease.serve.orchestrate  # noqa: F401 - Prefect, and the flow

    for module in pkgutil.walk_packages(dprelease.__path__, "dprelease."):
        if not module.name.startswith(("dprelease.cli", "dprelease.__main__")):
            importlib.import_module(module.name)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # another Prefect version: that run imports what it needs
            pass


class Loop:
    """The runner's single-threaded accept/fork/reap loop."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        import selectors

        self.owner = os.getpid()
        self.fingerprint = fingerprint
        self.path = path
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
        self.draining = False
        signal.set_wakeup_fd(self.wake_w.fileno())
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGTERM, self._drain)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.children: dict[int, socket.socket | None] = {}  # a run's PID: its client's connection

    def serve(self) -> None:
        try:
            while not (self.draining and not self.children):
                for key, _ in self.selector.select():
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj is self.wake_r:
                        self._drain_wakeups_and_reap()
                    else:
                        self._client_spoke(key.data)
        finally:
            if os.getpid() == self.owner:  # a child leaves through here too: the socket is the runner's
                self.path.unlink(missing_ok=True)

    def _drain(self, signum: int, frame: object) -> None:
        """SIGTERM: accept no more runs; the loop ends once the running ones have."""
        if not self.draining:
            self.draining = True
            self.selector.unregister(self.listener)
            self.listener.close()
            self.path.unlink(missing_ok=True)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(5)
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            struct.calcsize("3i")))
            if uid != os.getuid():
                conn.sendall(b"refused another user's request\n")
                return conn.close()
            request, fds = _receive(conn)
            if request.get("fingerprint") != self.fingerprint:
                conn.sendall(b"refused it was started for other dprelease code, Python, libraries or Prefect "
                             b"settings (`dprelease server start` replaces it with a fresh one)\n")
                return conn.close()
            if request.get("ping"):
                conn.sendall(b"ready\n")
                return conn.close()
            if len(fds) != 3:
                conn.sendall(b"refused the request did not pass stdin, stdout and stderr\n")
                return conn.close()
            self._fork(conn, fds, request)
        except (OSError, ValueError) as exc:
            print(f"a request failed: {exc!r}", file=sys.stderr, flush=True)
            conn.close()
        finally:
            if os.getpid() == self.owner:
                for fd in fds:
                    os.close(fd)

    def _fork(self, conn: socket.socket, fds: list[int], request: dict[str, object]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
        try:
            child = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
            raise
        if child == 0:
            try:
                code = self._child(conn, fds, request)
            except KeyboardInterrupt:  # Ctrl-C before the command began
                os._exit(130)
            except BaseException:  # noqa: BLE001 - never return into the runner's loop
                os._exit(1)
            raise SystemExit(code)  # the interpreter's normal exit: atexit handlers, buffers flushed
        signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
        self.children[child] = conn
        self.selector.register(conn, 1, data=child)

    def _drain_wakeups_and_reap(self) -> None:
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
        from dprelease.cli.warm.protocol import CHILD_FLAG

        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        os.environ[CHILD_FLAG] = str(self.owner)
        try:
            os.chdir(str(request["cwd"]))
            conn.sendall(f"pid {os.getpid()}\n".encode())
        except OSError:
            return 1  # the client is gone (or its directory is): it said nothing more to anyone
        finally:
            conn.close()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)  # a signal sent meanwhile is handled now
        os.umask(int(str(request["umask"])))
        argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        sys.argv = argv
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
    """One request (length-prefixed JSON) and the descriptors passed with it; on any failure the
    descriptors are closed before the error is raised."""
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    try:
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
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, list(fds)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dprelease.cli.warm.loop SOCKET (started by `dprelease server start`)",
              file=sys.stderr)
        return 2
    from dprelease.cli.warm.protocol import fingerprint

    settings = fingerprint(os.environ)  # before Prefect's import, which sets defaults in the environment
    _preload()
    loop = Loop(Path(argv[0]), settings)
    print(f"warm runner PID {os.getpid()} listening on {argv[0]} for {os.environ.get('PREFECT_API_URL')}",
          file=sys.stderr, flush=True)
    loop.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
