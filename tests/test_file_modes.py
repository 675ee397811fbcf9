"""One file-mode rule for everything dprelease writes (``dprelease/host/files.py``): files 0600,
directories 0700, whatever the caller's umask. Each writer runs as a user runs it (a child
process, which inherits the umask): init, evaluate, run, postprocess, report (its default HTML
and ``--output`` into new directories), randomize, and the ledger's own creation; then every
file and directory under the project is checked. See also tests/test_file_safety.py (links)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dprelease.host import files
from tests.conftest import ROOT
from tests.ledgers import make_ledger
from tests.test_local import true_answers, write_spec
from tests.test_run import child_env

NIST = ROOT / "data" / "nist_acs"
RELEASE = "national2019-release-1"  # init's release name for national2019.csv


def dprelease(*args: object, umask: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``dprelease ARGS`` in a child process started under ``umask``; the spec's pinned ledger is
    the one used ($DPRELEASE_LEDGER unset)."""
    return subprocess.run([sys.executable, "-m", "dprelease", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env=child_env({"DPRELEASE_LEDGER": None, "PREFECT_API_URL": None}), timeout=300,
                          preexec_fn=lambda: os.umask(umask))


def ledger_made(where: Path, umask: int) -> None:
    """The ledger made as ``dprelease ledger init`` makes it, under ``umask``."""
    previous = os.umask(umask)
    try:
        make_ledger(where)
    finally:
        os.umask(previous)


def modes(root: Path) -> dict[Path, int]:
    """Every path below ``root`` with its mode bits (links not followed)."""
    return {p: os.lstat(p).st_mode for p in root.rglob("*")}


def breaks_the_rule(mode: int) -> bool:
    wanted = files.DIR_MODE if stat.S_ISDIR(mode) else files.FILE_MODE
    return not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)) or stat.S_IMODE(mode) != wanted


@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-022", "umask-000"])
def test_every_writer_creates_files_0600_and_directories_0700(tmp_path, umask):
    project, inputs = tmp_path / "project", tmp_path / "inputs"
    project.mkdir()
    inputs.mkdir()
    true_answers(inputs / "true.csv", n=500)
    survey = write_spec(inputs)
    spec = project / "configs" / "nist.yaml"
    init = ["init", NIST / "national2019.csv", "--dictionary", NIST / "data_dictionary.json", "--output", spec]
    seen: dict[Path, int] = {}
    created_by: dict[Path, str] = {}

    def step(name: str, args: list[object] | Path) -> None:
        nonlocal seen
        if isinstance(args, Path):
            ledger_made(args, umask)
        else:
            proc = dprelease(*args, umask=umask, cwd=tmp_path)
            assert proc.returncode == 0, (name, proc.stderr)
        now = modes(project)
        created_by.update({p: name for p in now if p not in seen})
        seen = now

    step("init", init)
    pins = yaml.safe_load(spec.read_text())  # wherever init pins them
    release = (spec.parent / pins["output_dir"]).resolve() / RELEASE
    step("ledger", (spec.parent / pins["ledger"]).resolve())
    step("evaluate", ["evaluate", spec, "--trials", "2", "--output", project / "notes" / "evaluations" / "e.md"])
    step("run", ["run", spec, "--orchestrator", "inline"])
    step("postprocess", ["postprocess", release])
    step("report", ["report", release])
    step("report --output", ["report", release, "--format", "md", "--output", project / "report.md"])
    step("ledger", project / "ledgers" / "survey.sqlite")
    step("randomize", ["randomize", survey, "favourite", "--input", inputs / "true.csv", "--output",
                       project / "wave1.csv", "--id", "ID", "--memo", project / "wave1-memo.json",
                       "--ledger", project / "ledgers" / "survey.sqlite"])
    loose = {f"{created_by[p]}: {p.relative_to(project)}": oct(stat.S_IMODE(m)) for p, m in seen.items()
             if breaks_the_rule(m)}
    assert not loose, "\n".join(f"{k} {v}" for k, v in sorted(loose.items()))
    writers = set(created_by.values())
    assert writers == {"init", "ledger", "evaluate", "run", "postprocess", "report", "report --output",
                       "randomize"}, writers  # each step wrote something that was checked
    made = {p.relative_to(project).as_posix() for p in seen}
    assert {"configs", "configs/nist.yaml", "notes/evaluations/e.md", "report.md", "wave1.csv",
            "wave1-memo.json"} <= made
    assert {release / "budget_report.html", release / "postprocessed" / "1-as-specified" / "tables",
            release.parent / "_internal" / RELEASE / "run.json"} <= set(seen)


def test_the_helper_keeps_the_rule_under_a_umask_that_takes_the_owners_bits(tmp_path):
    """umask 0o277 would create files 0400 and directories 0500: the helper sets the rule's
    modes on what it creates, and leaves an existing directory's mode alone."""
    existing = tmp_path / "mine"
    existing.mkdir(mode=0o755)
    os.chmod(existing, 0o755)
    previous = os.umask(0o277)
    try:
        files.write_text(existing / "a" / "b" / "f.txt", "x")
        with files.open_truncated(existing / "c" / "log") as log:
            log.write(b"y")
    finally:
        os.umask(previous)
    got = {p.relative_to(tmp_path).as_posix(): oct(stat.S_IMODE(os.lstat(p).st_mode))
           for p in [existing, *existing.rglob("*")]}
    assert got == {"mine": "0o755", "mine/a": "0o700", "mine/a/b": "0o700", "mine/a/b/f.txt": "0o600",
                   "mine/c": "0o700", "mine/c/log": "0o600"}


def test_the_helper_replaces_a_link_and_refuses_to_log_through_one(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    (tmp_path / "out.txt").symlink_to(target)
    files.write_text(tmp_path / "out.txt", "new")
    assert target.read_text() == "keep me" and not (tmp_path / "out.txt").is_symlink()
    (tmp_path / "log").symlink_to(target)
    with pytest.raises(OSError):
        files.open_truncated(tmp_path / "log")
    assert target.read_text() == "keep me"
