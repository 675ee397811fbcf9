"""The suite leaves the user's state alone: their HOME (Prefect's ~/.prefect and its profiles,
the per-user ledger, ``dprelease server``'s record) and the drafts they keep in ``configs/``.

The proof runs a few representative tests (an in-process run, an inline run in a child
process, the same release inline and through the session's Prefect server) in a child pytest
whose "user" has a poisoned HOME and environment: a Prefect profile and a PREFECT_API_URL that
name a dead server, a ledger and a server record that are not what they claim to be. Had the
suite read any of them, the runs would fail; had it written there, the snapshot would differ.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_spec_validate import SHIPPED, shipped_specs

DEAD_API = "http://127.0.0.1:9/api"  # nothing listens on the discard port
REPRESENTATIVE = [
    "tests/test_orchestrators.py::test_inline_and_prefect_publish_the_same_release",
    "tests/test_orchestrators.py::test_auto_without_a_server_runs_inline_and_never_imports_prefect",
    "tests/test_sums.py::test_missing_or_non_numeric_values_are_refused",
]


def snapshot(root: Path) -> list[tuple]:
    """Every path under ``root`` with its mode, size, mtime and content hash."""
    found = []
    for path in sorted([root, *root.rglob("*")]):
        if "__pycache__" in path.parts:
            continue
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        found.append((str(path.relative_to(root)), info.st_mode, info.st_size, info.st_mtime_ns, digest))
    return found


def poisoned_home(home: Path) -> None:
    """A user's HOME that no test may read or write."""
    prefect = home / ".prefect"
    prefect.mkdir(parents=True)
    (prefect / "profiles.toml").write_text(f'active = "user"\n\n[profiles.user]\nPREFECT_API_URL = "{DEAD_API}"\n')
    (prefect / "prefect.db").write_bytes(b"not a database")
    share = home / ".local" / "share" / "dprelease"
    share.mkdir(parents=True)
    (share / "ledger.sqlite").write_bytes(b"not a ledger")
    (share / "server.json").write_text('{"pid": 1, "url": "' + DEAD_API + '"}')
    (home / "ledger-of-the-user.sqlite").write_bytes(b"not a ledger either")


def _make_read_only(root: Path, read_only: bool) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) if read_only else mode | stat.S_IWUSR)


@pytest.mark.slow
def test_the_suite_never_reads_or_writes_the_users_home(tmp_path):
    home = tmp_path / "user-home"
    poisoned_home(home)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "XDG_")) and k not in ("DPRELEASE_LEDGER", "DPRELEASE_LEDGER_KEY")}
    env.update({"HOME": str(home), "PREFECT_API_URL": DEAD_API, "PREFECT_PROFILE": "user",
                "DPRELEASE_LEDGER": str(home / "ledger-of-the-user.sqlite")})
    project = [ROOT / "ledgers", ROOT / "outputs", ROOT / "configs"]  # the project's own state, too
    _make_read_only(home, True)  # read-only for a user who is not root; the snapshot catches root's writes
    try:
        before = snapshot(home), [snapshot(p) for p in project if p.exists()]
        # -n 0: in one process, whose own session set-up is then the only guard (under xdist the
        # workers would inherit the temporary HOME their controller had already put in place)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                               f"--basetemp={tmp_path / 'inner'}", *REPRESENTATIVE],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=500)
        after = snapshot(home), [snapshot(p) for p in project if p.exists()]
    finally:
        _make_read_only(home, False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"{len(REPRESENTATIVE)} passed" in proc.stdout, proc.stdout[-2000:]
    assert after == before


def test_an_untracked_draft_in_configs_is_not_a_shipped_spec():
    draft = ROOT / "configs" / "_draft_xyz.yaml"
    assert not draft.exists()
    draft.write_text("release: [this is not a spec\n")
    try:
        assert draft in sorted((ROOT / "configs").glob("*.yaml"))  # a glob would have picked it up ...
        shipped = shipped_specs()
        assert draft not in shipped  # ... the shipped list does not
        assert ROOT / "configs" / "acs_demo.yaml" in shipped and all(p.parent == ROOT / "configs" for p in shipped)
    finally:
        draft.unlink()
    assert draft not in SHIPPED and set(shipped) <= set(SHIPPED)
