"""What the warm runner and its clients share (:mod:`dprelease.cli.warm`, :mod:`.loop`,
:mod:`.handoff`): the fingerprint a runner must share with a client to run its command, the
message format on their socket, and the variable that marks a runner's child. Standard library
only: the client imports it on the path of every ``dprelease`` command.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import sys
from pathlib import Path
from typing import Mapping

CHILD_FLAG = "DPRELEASE_WARM_RUNNER_CHILD"  # set in a runner's child: it never hands over again
LIBRARIES = ("prefect", "numpy", "pandas", "pyarrow", "scipy", "typer", "rich", "sqlalchemy", "pydantic")
SETTINGS_FILES = ("prefect.toml", ".env", "pyproject.toml")  # Prefect reads them from the working directory
# The runner is matched on its API by itself, and was given that API's secret (dprelease.serve.server.client_env)
MATCHED_APART = ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING")


def fingerprint(environ: Mapping[str, str], cwd: Path | None = None) -> str:
    """What a runner's child must share with the process it runs for, since the runner read it
    at its start: the interpreter; the dprelease code (each module's path, size and mtime); the
    installed libraries a run uses (their package's ``__init__`` size and mtime); the
    environment Python and Prefect read at start-up (``PYTHON*``, ``LANG``, ``LC_*``, ``TZ``,
    ``HOME``, ``PREFECT_*`` but the API URL, which the runner is matched on by itself, and its
    secret, which the runner was given with it); Prefect's
    profiles file; and the Prefect settings in the working directory's ``prefect.toml``,
    ``.env`` (its ``PREFECT_`` lines) and ``pyproject.toml`` (``[tool.prefect]``), which the
    runner, started in the data directory, does not have."""
    import importlib.util

    import dprelease

    package = Path(dprelease.__file__).resolve().parent
    digest = hashlib.sha256()
    for part in (sys.executable, sys.version, dprelease.__version__, str(package)):
        digest.update(part.encode() + b"\0")
    for module in sorted(package.rglob("*.py")):
        info = module.stat()
        digest.update(f"{module.relative_to(package)}:{info.st_size}:{info.st_mtime_ns}\0".encode())
    for name in LIBRARIES:
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        info = origin.stat() if origin is not None and origin.exists() else None
        digest.update(f"{name}:{origin}:{info and info.st_size}:{info and info.st_mtime_ns}\0".encode())
    read_at_start = sorted((k, v) for k, v in environ.items()
                           if (k.startswith(("PREFECT_", "PYTHON", "LC_")) and k not in MATCHED_APART)
                           or k in ("LANG", "TZ", "HOME"))
    digest.update(json.dumps(read_at_start).encode())
    home = Path(environ.get("PREFECT_HOME") or Path(environ.get("HOME") or "~").expanduser() / ".prefect")
    profiles = Path(environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    digest.update(_read(profiles))
    here = Path.cwd() if cwd is None else cwd
    for name in SETTINGS_FILES:
        text = _read(here / name).decode("utf-8", "replace")
        if name == ".env":
            text = "\n".join(line for line in text.splitlines() if line.strip().startswith(("PREFECT_", "export PREFECT_")))
        elif name == "pyproject.toml":
            text = text if "[tool.prefect" in text else ""
        digest.update(f"{name}:{text}\0".encode())
    return digest.hexdigest()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def send_message(sock: socket.socket, message: dict[str, object], fds: tuple[int, ...] = ()) -> None:
    """One length-prefixed JSON message (with ``fds`` passed alongside, SCM_RIGHTS)."""
    payload = json.dumps(message).encode()
    data = struct.pack("!I", len(payload)) + payload
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])
