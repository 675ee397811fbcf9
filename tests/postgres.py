"""A throw-away PostgreSQL server for ledger tests (Debian's binaries, on 127.0.0.1).

Skipped with a reason where no server binaries exist, except under CI (CI=true), where
``.ci/run`` installs them and a missing server is a failure, not a skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest


def _binaries() -> str | None:
    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(path, "initdb")):
            return path
    found = shutil.which("initdb")
    return os.path.dirname(found) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url():
    bindir = _binaries()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("no PostgreSQL server binaries; .ci/run should have installed them")
        pytest.skip("no PostgreSQL server binaries (apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'dprelease[postgres]')")
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    root = tempfile.mkdtemp(prefix="dprelease-pg-")
    data, sockets = os.path.join(root, "data"), os.path.join(root, "sock")
    os.makedirs(sockets)
    if as_root:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
    port = _free_port()
    subprocess.run(prefix + [f"{bindir}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run(prefix + [f"{bindir}/pg_ctl", "-D", data, "-w", "-t", "60", "-l", os.path.join(root, "log"),
                             "-o", f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off",
                             "start"], check=True, capture_output=True)
    try:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        _wait(url)
        yield url
    finally:
        subprocess.run(prefix + [f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _wait(url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    for _ in range(100):
        try:
            with engine.connect():
                return
        except sa.exc.OperationalError:
            time.sleep(0.1)
    raise RuntimeError("PostgreSQL did not accept connections")


@pytest.fixture
def fresh_postgres(postgres_url):
    """A new, empty database on the session's server."""
    import sqlalchemy as sa

    name = f"ledger_{os.getpid()}_{time.monotonic_ns()}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return postgres_url.rsplit("/", 1)[0] + "/" + name
