"""The secret that the day's Prefect server (:mod:`dprelease.serve.server`) requires of every client.

Model. Prefect 3's self-hosted server checks HTTP basic authentication on every API route but
``GET /health`` and ``GET /ready`` when its process has the setting ``server.api.auth_string``
(environment ``PREFECT_SERVER_API_AUTH_STRING``); a Prefect client sends it when its process has
``api.auth_string`` (``PREFECT_API_AUTH_STRING``). Without them anyone who reaches the port — any
local user, for a server on 127.0.0.1 — can start a deployment's runs, read their logs or delete
it. (Checked in prefect 3.9.1: ``prefect/settings/models/server/api.py`` and
``prefect/settings/models/api.py`` define the two settings, ``prefect/server/api/server.py``'s
``token_validation`` middleware answers 401 without them; docs.prefect.io/v3/advanced/security-settings.)

The secret is ``dprelease:`` and 256 bits of the OS CSPRNG (:func:`secrets.token_urlsafe`),
in the ``user:password`` form Prefect's UI asks for. The first ``dprelease server start`` creates it
in ``server.auth`` beside ``server.json`` in the owner-only data directory: written to a fresh file
created exclusively with mode 0600, then linked into place whole. It is kept across restarts (a
long-running ``dprelease schedule`` keeps reaching a restarted server); delete it while no server
runs to change it.

Guarantees: the secret travels only in process environments — the server's, and those of the
clients dprelease starts or runs against that server (``run``'s flow run, ``schedule``'s serve and
the flow runs it starts, the warm runner) — which only their user and root can read
(``/proc/PID/environ`` is mode 0400); never in a command line (``/proc/PID/cmdline`` is readable
by every user), a log, a record or anything printed. A secret file that is not this user's, is a
symlink or is open to others is refused, never used.

Standard library only: the warm runner's client reads it on the path of every command.
"""

from __future__ import annotations

import os
import secrets
import stat
import urllib.error
import urllib.request
from pathlib import Path

from dprelease.host import files
from dprelease.errors import UserError
from dprelease.host.processes import data_dir

SERVER_VARIABLE = "PREFECT_SERVER_API_AUTH_STRING"  # read by `prefect server start`
CLIENT_VARIABLE = "PREFECT_API_AUTH_STRING"  # read by every Prefect client


def secret_file() -> Path:
    return data_dir() / "server.auth"


def read_secret(path: Path | None = None) -> str | None:
    """The secret at ``path`` (default :func:`secret_file`), or None where there is none."""
    path = secret_file() if path is None else path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot read the Prefect server's secret at {path}: {exc.strerror or exc} (a symlink is "
                        f"refused); remove it (`rm {path}`) while no server runs, and `dprelease server start` "
                        "makes a new one") from None
    with os.fdopen(fd, encoding="ascii", errors="replace") as f:
        info = os.fstat(f.fileno())
        text = f.read().strip()
    if not files.owner_only(info):
        raise UserError(f"{path}, the Prefect server's secret, is not a file of yours readable by you alone "
                        f"(mode {stat.filemode(info.st_mode)}); remove it (`dprelease server stop`, then "
                        f"`rm {path}`) and `dprelease server start` makes a new one, owner-only")
    if ":" not in text:
        raise UserError(f"{path} is not a Prefect server secret (user:password); remove it while no server runs, "
                        "and `dprelease server start` makes a new one")
    return text


def new_secret() -> str:
    """A fresh secret: ``dprelease:`` and 256 bits of the OS CSPRNG."""
    return "dprelease:" + secrets.token_urlsafe(32)


def kept_secret() -> str:
    """The server's secret: the one kept in :func:`secret_file`, else a new one written there."""
    path = secret_file()
    existing = read_secret(path)
    if existing is not None:
        return existing
    secret = new_secret()
    if files.write_new(path, (secret + "\n").encode("ascii")):  # 0600, its missing directories 0700
        return secret
    return read_secret(path) or secret  # another start won the race: its secret


def answers(api: str, secret: str | None = None, timeout: float = 5.0) -> int | None:
    """The HTTP status with which the Prefect API at ``api`` answers ``GET /admin/version`` sent
    with ``secret`` (None: no credentials): 200 served, 401 refused (a server that requires
    authentication refuses every route but its health probes); None when it cannot be asked."""
    import base64

    headers = {"Authorization": "Basic " + base64.b64encode(secret.encode()).decode()} if secret else {}
    try:
        request = urllib.request.Request(api.rstrip("/") + "/admin/version", headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None
