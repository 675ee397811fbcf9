"""File safety: a run creates its outputs, staging, internal record and ledger owner-only; it
never writes through a symbolic link planted in its output directory; names cannot leave the
output directory (the hostile corpus refuses ../, absolute paths and NUL bytes); and no
partial file ever appears under a published path (see also the crash matrix)."""

from __future__ import annotations

import os
import stat

import pytest

from dprelease.accounting import PureDP
from tests.test_run import _spec, ledger_state, run

DATASET = "nist-acs-national-2019"


def modes(root):  # type: ignore[no-untyped-def]
    """Every path under ``root`` (itself included) with its permission bits."""
    paths = [root, *root.rglob("*")]
    return {p: stat.S_IMODE(os.lstat(p).st_mode) for p in paths}


def test_outputs_and_the_ledger_are_owner_only_whatever_the_umask(tmp_path, release_env, isolated_ledger):
    previous = os.umask(0o022)  # a permissive umask in the calling shell
    try:
        spec, out = _spec(tmp_path, "owner-only"), tmp_path / "out"
        proc = run(spec, "--output-dir", out, env=release_env)
    finally:
        os.umask(previous)
    assert proc.returncode == 0, proc.stderr
    written = {**modes(out / "owner-only"), **modes(out / "_internal")}
    assert len(written) > 10
    loose = {str(p): oct(m) for p, m in written.items() if m & 0o077}
    assert not loose, loose  # no group or other bits anywhere
    assert stat.S_IMODE(os.stat(isolated_ledger).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(isolated_ledger.parent).st_mode) == 0o700


@pytest.mark.parametrize("planted", [".staging", "_internal", "_internal/symlinked", "symlinked"])
def test_a_symlink_in_the_output_directory_is_never_written_through(tmp_path, release_env, planted):
    spec, out = _spec(tmp_path, "symlinked"), tmp_path / "out"
    victim = tmp_path / "victim"
    victim.mkdir()
    (out / planted).parent.mkdir(parents=True)
    (out / planted).symlink_to(victim)
    proc = run(spec, "--output-dir", out, env=release_env)
    assert proc.returncode in (2, 4), proc.stderr
    assert "Nothing was spent" in proc.stderr and "Traceback" not in proc.stderr
    assert list(victim.iterdir()) == []  # nothing written through the link
    state = ledger_state(DATASET)
    assert state is None or state.spent == PureDP(0)


def test_a_dangling_release_symlink_is_refused_not_replaced(tmp_path, release_env):
    spec, out = _spec(tmp_path, "dangling"), tmp_path / "out"
    out.mkdir()
    (out / "dangling").symlink_to(tmp_path / "nowhere")
    proc = run(spec, "--output-dir", out, env=release_env)
    assert proc.returncode == 4 and "already exists" in proc.stderr, proc.stderr
    assert (out / "dangling").is_symlink() and not (tmp_path / "nowhere").exists()


def test_a_file_link_inside_the_internal_directory_is_replaced_not_followed(tmp_path, release_env):
    """The run record is written to a fresh temporary file and renamed over its path: a link
    planted at run.json (or at any fixed temporary name) is replaced, its target untouched."""
    spec, out = _spec(tmp_path, "linked-record"), tmp_path / "out"
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (out / "_internal" / "linked-record").mkdir(parents=True)
    for name in ("run.json", "run.json.tmp"):
        (out / "_internal" / "linked-record" / name).symlink_to(target)
    proc = run(spec, "--output-dir", out, env=release_env)
    assert proc.returncode == 0, proc.stderr
    assert target.read_text() == "keep me"
    record = out / "_internal" / "linked-record" / "run.json"
    assert not record.is_symlink() and stat.S_IMODE(os.lstat(record).st_mode) == 0o600


def test_staged_files_are_owner_only(tmp_path, release_env):
    """Killed with its outputs staged (before the ledger commit): the staged noisy tables are
    0600 in 0700 directories, whatever the caller's umask."""
    from tests.test_run import _killed_at

    previous = os.umask(0o022)
    try:
        spec, out = _spec(tmp_path, "staged"), tmp_path / "out"
        _killed_at("publish", spec, out, release_env, tmp_path)
    finally:
        os.umask(previous)
    staged = modes(out / ".staging")
    assert len(staged) > 5
    assert not {str(p): oct(m) for p, m in staged.items() if m & 0o077}
