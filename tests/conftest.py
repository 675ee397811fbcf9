"""Shared fixtures. Every test gets its own ledger location: none ever touches a real one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SPECS = Path(__file__).resolve().parent / "specs"

pytest_plugins = ["tests.postgres", "tests.prefect_server"]


@pytest.fixture(autouse=True)
def isolated_ledger(tmp_path_factory, monkeypatch):
    """Every test's ledger is a fresh one: $DPRELEASE_LEDGER (a pinned location, where a run may
    create a ledger) names it, and the per-user default and the keys of database ledgers point at
    fresh directories too. Tests of the default location or of a spec's ``ledger:`` unset it."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    monkeypatch.delenv("DPRELEASE_LEDGER_KEY", raising=False)
    path = home / "dprelease" / "ledger.sqlite"
    monkeypatch.setenv("DPRELEASE_LEDGER", str(path))
    return path


class Result:
    def __init__(self, code: int, stdout: str, stderr: str):
        self.code, self.stdout, self.stderr = code, stdout, stderr

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def __repr__(self) -> str:
        return f"Result(code={self.code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


@pytest.fixture
def cli():
    """Run ``dprelease ARGS`` in-process; returns exit code, stdout and stderr separately."""
    from dprelease.cli import app

    def run(*args: str | os.PathLike) -> Result:
        result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
        return Result(result.exit_code, result.stdout, result.stderr)

    return run


@pytest.fixture
def cli_process():
    """Run the installed console script in a child process, as a user would."""

    def run(*args: str | os.PathLike, cwd: Path | None = None, env: dict | None = None) -> Result:
        proc = subprocess.run([sys.executable, "-m", "dprelease", *[str(a) for a in args]],
                              capture_output=True, text=True, cwd=cwd or ROOT,
                              env={**os.environ, **(env or {})}, timeout=120)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


def write_spec(directory: Path, body: str, name: str = "spec.yaml") -> Path:
    path = directory / name
    path.write_text(body)
    return path


def assert_edit_refused(cli, path: Path, old: str, new: str, field: str, words: str) -> None:
    """Edit ``old`` into ``new`` in the spec at ``path`` (``old`` must be there): ``validate``
    exits 2 naming ``field``, with ``words`` in its message."""
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    result = cli("validate", path)
    assert result.code == 2 and field in result.stderr and words in result.stderr, result.stderr
