"""Races for the last of a lifetime budget: 8 processes × 50 trials through the reservation path
(the ledger API in separate processes), on SQLite and on PostgreSQL, and a few rounds through
the CLI. Zero overspends: in every trial exactly as many racers win as the remaining budget
covers, and no dataset's spend ever exceeds its cap.

The trial and overspend counts are figures of docs/reliability.md.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from fractions import Fraction

import pytest

from dprelease.accounting import PureDP
from dprelease.errors import OverBudgetError
from dprelease.ledger import Ledger, resolve_location
from tests.conftest import ROOT
from tests.test_ledger import open_ledger, reserve, url  # noqa: F401 - the sqlite/postgres fixture
from tests.test_run import _spec, child_env, ledger_state

RACERS, TRIALS = 8, 50


def trial_plan(trial: int) -> tuple[Fraction, int]:
    """(each racer's charge, how many can win): the cap is 1 and 1/2 is already spent."""
    return (Fraction(1, 2), 1) if trial % 2 == 0 else (Fraction(1, 4), 2)


def _racer(url: str, racer: int, barrier) -> list[str]:  # noqa: F811 - url is a value here
    ledger = Ledger.open(resolve_location(url))
    outcomes = []
    try:
        for trial in range(TRIALS):
            charge, _ = trial_plan(trial)
            barrier.wait()  # every racer starts each trial together
            try:
                ledger.reserve(dataset=f"race-{trial}", release=f"racer-{racer}", charges=[("t", PureDP(charge))],
                               spec_fingerprint="sha256:x", lifetime_from_spec=PureDP(Fraction(1)))
                outcomes.append("won")
            except OverBudgetError:
                outcomes.append("refused")
    finally:
        ledger.close()
    return outcomes


@pytest.mark.slow
def test_eight_processes_race_fifty_times_and_never_overspend(url):  # noqa: F811
    ledger = open_ledger(url)
    for trial in range(TRIALS):
        reserve(ledger, release="first", charges=[("t", PureDP(Fraction(1, 2)))], cap=PureDP(1),
                dataset=f"race-{trial}")
    ledger.close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(RACERS)
        with ctx.Pool(RACERS) as pool:
            per_racer = pool.starmap(_racer, [(url, i, barrier) for i in range(RACERS)])
    ledger = open_ledger(url)
    overspends = 0
    try:
        for trial in range(TRIALS):
            charge, winners = trial_plan(trial)
            won = sum(outcomes[trial] == "won" for outcomes in per_racer)
            state = ledger.state(f"race-{trial}")
            overspends += state.spent > state.budget
            assert won == winners and state.spent == PureDP(Fraction(1, 2) + winners * charge) == state.budget, \
                (trial, won)
    finally:
        ledger.close()
    assert overspends == 0


def _cli_run(spec: str, out: str, env: dict) -> int:  # type: ignore[type-arg]
    return subprocess.run([sys.executable, "-m", "dprelease", "run", spec, "--output-dir", out], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300).returncode


@pytest.mark.parametrize("round_", range(3))
def test_racing_cli_runs_for_the_last_of_a_budget(tmp_path, release_env, round_):
    """Three `dprelease run`s of different releases at once; the budget (2) holds one of them
    (5/4 each): one publishes, the others are refused before reading the data (exit 3)."""
    specs = [_spec(tmp_path, f"cli-race-{round_}-{i}", lifetime="2") for i in range(3)]
    env = child_env(release_env)
    procs = [subprocess.Popen([sys.executable, "-m", "dprelease", "run", str(s), "--output-dir",
                               str(tmp_path / "out")], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for s in specs]
    codes = sorted(p.wait(timeout=300) for p in procs)
    assert codes == [0, 3, 3], [p.stderr.read() for p in procs]
    state = ledger_state("nist-acs-national-2019")
    assert state.spent == PureDP(Fraction(5, 4)) <= state.budget
    assert len([d for d in (tmp_path / "out").iterdir() if not d.name.startswith((".", "_"))]) == 1
