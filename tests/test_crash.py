"""Crashes at every step: a run is SIGKILLed (its whole process group: no orphaned Prefect
server) at each fault-injection point of dprelease.faults. After each crash every published
table has a committed ledger entry, the ledger never shows less than what was published, and
the next run does the right thing: it is refused while the reservation is open, runs cleanly
after ``ledger resolve --void`` when the ledger shows no noise drawn, stays refused after
``--fail`` once the ledger recorded the draw (``drawing``: never voided, whatever the files
show), and completes a publication whose ledger commit was made.

The stage × outcome table is a figure of docs/reliability.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dprelease.accounting import PureDP
from tests.conftest import ROOT
from tests.test_run import _killed_at, _spec, child_env, ledger_state, run

DATASET = "nist-acs-national-2019"
SPENT = PureDP(Fraction(5, 4))  # the test spec's four tables: 1/2 + 1/4 + 1/5 + 3/10

# stage → what the operator does next, and what the next run then does
OUTCOMES = {
    "reserved": "void, then a clean run",
    "load": "void, then a clean run",
    "histogram": "void, then a clean run",
    "measure": "void, then a clean run",
    # the ledger records the draw before the first one: from then on never voided (issue 19)
    "drawing": "fail (the ledger recorded the draw), then refused",
    "noise": "fail (the ledger recorded the draw), then refused",  # drawn in memory, never written
    "staging": "fail (noise was written), then refused",
    "publish": "fail (noise was written), then refused",
    "commit": "the next run completes the publication",
}


def published_releases(out: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    """Every release in place under ``out``: its manifest."""
    if not out.exists():
        return {}
    return {d.name: json.loads((d / "manifest.json").read_text()) for d in out.iterdir()
            if d.is_dir() and not d.name.startswith((".", "_"))}


def assert_ledger_covers(out: Path) -> None:
    """Every published table has a committed entry; the ledger shows at least what was published."""
    state = ledger_state(DATASET)
    committed = {r.run_id: r for r in state.runs if r.state == "committed"}
    published = published_releases(out)
    for name, manifest in published.items():
        assert manifest["run_id"] in committed, (name, manifest["run_id"])
    shown = sum(r.charge.amount for r in state.runs if r.state in ("committed", "reserved", "drawing", "failed"))
    assert state.spent == PureDP(shown) and shown >= sum(Fraction(m["budget"]["ledger_charge"]["epsilon"]) for m in published.values())


def resolve(run_id: str, action: str, env) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def, type-arg]
    return subprocess.run([sys.executable, "-m", "dprelease", "ledger", "resolve", run_id, f"--{action}",
                           "--reason", "crash test"], cwd=ROOT, env=child_env(env), capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("stage", list(OUTCOMES))
def test_a_crash_at_every_step_fails_closed(tmp_path, run_env, stage):
    release = f"crash-{stage}"
    spec, out = _spec(tmp_path, release), tmp_path / "out"
    _killed_at(stage, spec, out, run_env, tmp_path)
    assert_ledger_covers(out)
    [record] = ledger_state(DATASET).runs
    assert ledger_state(DATASET).spent == SPENT  # reserved (or committed) before anything was read
    in_place = published_releases(out)
    again = run(spec, "--output-dir", out, env=run_env)
    if stage == "commit":
        assert record.state == "committed" and release not in in_place
        assert again.returncode == 0 and "publication completed now" in again.stderr, again.stderr
        assert published_releases(out)[release]["run_id"] == record.run_id
    else:
        assert record.state == ("drawing" if OUTCOMES[stage].startswith("fail") else "reserved") and not in_place
        assert again.returncode == 4, again.stderr  # refused while the reservation is open
        if OUTCOMES[stage].startswith("void"):
            settled = resolve(record.run_id, "void", run_env)
            assert settled.returncode == 0, settled.stderr
            clean = run(spec, "--output-dir", out, env=run_env)
            assert clean.returncode == 0, clean.stderr
            assert ledger_state(DATASET).spent == SPENT  # the voided run no longer counts; nothing twice
        else:
            staged = any(p.is_file() for p in (out / ".staging").rglob("*"))
            assert staged == (stage in ("staging", "publish"))  # the noise reached the disk
            refused = resolve(record.run_id, "void", run_env)
            assert refused.returncode != 0 and "use --commit (if published) or --fail" in refused.stderr
            settled = resolve(record.run_id, "fail", run_env)
            assert settled.returncode == 0, settled.stderr
            assert not (out / ".staging").exists() and ledger_state(DATASET).spent == SPENT
            assert run(spec, "--output-dir", out, env=run_env).returncode == 4  # spent, never published
    assert_ledger_covers(out)
