"""The suite's own layout (tests/README.md): the inner loop (``-m "not slow"``) keeps tests of
every module except the wholly end-to-end ones named here. Read from pytest's own collection,
in a child process (no test runs): one collection with ``-m "not slow"``, which tells both what
it keeps and what it leaves out."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from tests.conftest import ROOT

# Every test of these runs whole releases (their module fixtures or their tests need the
# Prefect server, or child processes racing), or, this module, a whole pytest collection:
# nothing of theirs is in the inner loop.
WHOLLY_SLOW = {"test_crash.py", "test_file_safety.py", "test_noise_spent.py", "test_races.py", "test_report.py",
               "test_run.py", "test_suite_layout.py"}


def collected(tmp_path) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    """(every test, the inner loop's tests): one collection with ``-m "not slow"``, the tests it
    left out written by tests/deselected.py (every test = those kept + those left out)."""
    deselected = tmp_path / "deselected.txt"
    deselected.touch()
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "-p", "tests.deselected", "-m", "not slow"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "DPRELEASE_TEST_DESELECTED": str(deselected)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    fast = [line for line in proc.stdout.splitlines() if "::" in line]
    return fast + deselected.read_text().splitlines(), fast


@pytest.mark.slow
def test_the_inner_loop_keeps_every_modules_unit_tests_but_the_wholly_end_to_end_ones(tmp_path):
    every, fast = collected(tmp_path)
    modules = Counter(test.split("::")[0].removeprefix("tests/") for test in every)
    kept = Counter(test.split("::")[0].removeprefix("tests/") for test in fast)
    assert {m for m in modules if kept[m] == 0} == WHOLLY_SLOW, "update WHOLLY_SLOW and tests/README.md"
    assert set(fast) < set(every)
    deselected = every[len(fast):]
    assert deselected and not set(deselected) & set(fast)  # -m left some out, and only those
    from tests.conftest import LONGEST_FIRST

    assert set(LONGEST_FIRST) <= set(modules), "a module in conftest.LONGEST_FIRST is not collected: renamed?"
