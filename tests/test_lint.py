"""ruff and mypy, as configured in pyproject.toml, pass: part of the README's test command (and so
of .ci/run). mypy is strict on the privacy-critical packages (accounting, mechanisms, plan)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_ruff_finds_nothing():
    """The ruff of this interpreter's environment (the test extra's, whatever PATH says); no cache
    written into the project (it checks the whole tree in about a second)."""
    found = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True)
    assert found.returncode == 0, "ruff is missing: pip install -e '.[test]'"
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "dprelease", "tests", "pipelines",
                          "benchmarks"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict_packages_type_check():
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout, out.stdout
