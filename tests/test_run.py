"""`dprelease run` end to end, in child processes, on the real NIST data."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from fractions import Fraction
from math import prod
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dprelease.accounting import PureDP
from dprelease.ledger import Ledger, resolve_location
from dprelease.plan.planner import measurement_plans
from dprelease.spec import load_spec
from tests.conftest import shipped_project, ROOT, write_spec, unpinned
from tests.ledgers import make_ledger

DEMO = ROOT / "configs" / "acs_demo.yaml"


def run(*args, env, cwd=ROOT, timeout=180):
    proc = subprocess.run([sys.executable, "-m", "dprelease", "run", *[str(a) for a in args]], cwd=cwd,
                          env=child_env(env), capture_output=True, text=True, timeout=timeout)
    return proc


def flow_run_artifacts(run_env: dict[str, str], key: str, flow_run_id: str) -> list[dict]:  # type: ignore[type-arg]
    """The artifacts with ``key`` that one flow run created, read from the server's API."""
    request = urllib.request.Request(run_env["PREFECT_API_URL"] + "/artifacts/filter", method="POST",
                                     data=json.dumps({"artifacts": {"key": {"any_": [key]},
                                                                    "flow_run_id": {"any_": [flow_run_id]}}}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``extra``; a None value removes a variable."""
    env = {**os.environ, **extra}
    return {k: v for k, v in env.items() if v is not None}


def ledger_state(dataset: str, url: str | None = None):
    ledger = Ledger.open(resolve_location(url))
    assert ledger is not None
    try:
        return ledger.state(dataset)
    finally:
        ledger.close()


def test_demo_release_is_published_whole(tmp_path, run_env):
    out = tmp_path / "out"
    demo = shipped_project(tmp_path) / "acs_demo.yaml"  # the shipped spec; its pinned ledger, the copy's
    ledger = str(tmp_path / "ledgers" / "nist-acs.sqlite")
    proc = run(demo, "--output-dir", out, env=run_env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    spec = load_spec(DEMO)
    plans = {p.name: p for p in measurement_plans(spec)}
    release = out / spec.release
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["budget"]["total"] == {"epsilon": "1"} and manifest["release"] == spec.release
    assert manifest["budget"]["lifetime"] == {"cap": {"epsilon": "4"}, "spent_before": {"epsilon": "0"},
                                              "spent_after": {"epsilon": "1"}, "remaining": {"epsilon": "3"}}
    assert sum(Fraction(t["budget"]["epsilon"]) for t in manifest["tables"]) == 1
    for table in spec.tables:
        rows = list(csv.DictReader((release / "tables" / f"{table.name}.csv").open()))
        cells = prod(spec.column(c).size for c in table.group_by)
        assert len(rows) == cells, table.name
        structural = plans[table.name].structural  # impossible cells (where, rules): a last column marks them
        assert list(rows[0]) == [*table.group_by, "count"] + (["structural"] if structural else [])
        counts = [int(r["count"]) for r in rows]  # int() refuses non-integers
        assert min(counts) >= 0
        # every cell of the declared domain, in order, once
        expected = [spec.column(c).categories for c in table.group_by]
        assert rows[0][table.group_by[0]] == expected[0][0]
        assert len({tuple(r[c] for c in table.group_by) for r in rows}) == cells
        raw = pq.read_table(release / "measurements" / f"{table.name}.parquet")
        assert raw.num_rows == cells
        noisy = raw.column("noisy_count").to_pylist()
        assert [max(0, v) for v in noisy] == counts  # clamp of the kept measurement
        entry = next(t for t in manifest["tables"] if t["name"] == table.name)
        assert entry["scale"] == str(1 / table.budget.epsilon).replace(" ", "") or Fraction(entry["scale"]) == 1 / table.budget.epsilon
        assert entry["cells"] == cells and entry["file"] == f"tables/{table.name}.csv"
    report = (release / "budget_report.md").read_text()
    assert "puma_by_sex" in report and "remaining" in report
    internal = json.loads((out / "_internal" / spec.release / "run.json").read_text())
    assert internal["rows"]["read"] == 27253
    assert internal["data_fingerprint"].startswith("hmac-sha256:")  # keyed: see dprelease/ledger/keys.py
    assert set(internal["timings"]) >= {"load", "histogram", "noise", "postprocess", "publish", "total"}
    assert internal["prefect_flow_run_id"]
    # nothing data-dependent in what is published: no row count, no data hash, no timings
    published = "".join(p.read_text(errors="ignore") for p in release.rglob("*.json")) + report
    assert "27253" not in published and internal["data_fingerprint"] not in published
    assert "timings" not in published
    state = ledger_state(spec.dataset.name, ledger)
    assert [(r.release, r.state, r.charge) for r in state.runs] == [(spec.release, "committed", PureDP(1))]
    assert state.runs[0].data_fingerprint == internal["data_fingerprint"]

    # the budget report is also a Prefect markdown artifact
    artifacts = flow_run_artifacts(run_env, "budget-report-acs-demo-2019", internal["prefect_flow_run_id"])
    assert artifacts and artifacts[0]["type"] == "markdown"
    assert artifacts[0]["data"].startswith(report) and "Burn-down of" in artifacts[0]["data"]
    assert "27253" not in json.dumps(artifacts)
    # and its per-measurement figures a table artifact, with the manifest's figures
    [table] = flow_run_artifacts(run_env, "budget-table-acs-demo-2019", internal["prefect_flow_run_id"])
    rows = json.loads(table["data"]) if isinstance(table["data"], str) else table["data"]
    assert table["type"] == "table"
    assert [(r["table"], r["ε"], r["moe95"]) for r in rows] == [(t["name"], t["budget"]["epsilon"], t["moe95"])
                                                                 for t in manifest["tables"]]
    # and its progress a progress artifact, at 100% once published
    [progress] = flow_run_artifacts(run_env, "progress-acs-demo-2019", internal["prefect_flow_run_id"])
    assert progress["type"] == "progress" and float(progress["data"]) == 100.0

    again = run(demo, "--output-dir", out, env=run_env)
    assert again.returncode == 4, again.stderr
    assert str(release) in again.stderr and "Nothing was spent" in again.stderr
    assert ledger_state(spec.dataset.name, ledger).spent == PureDP(1)


def _spec(tmp_path: Path, release: str, epsilon: str = "0.5", lifetime: str = "4", data: str | None = None) -> Path:
    body = (unpinned(DEMO.read_text()).replace("release: acs-demo-2019", f"release: {release}")
            .replace("\nbudget: {epsilon: 1}", "\nbudget: {epsilon: 10}")
            .replace("lifetime_budget: {epsilon: 4}", f"lifetime_budget: {{epsilon: {lifetime}}}")
            .replace("domains/puma.txt", str(ROOT / "configs" / "domains" / "puma.txt"))
            .replace("../data/nist_acs/national2019.csv", data or str(ROOT / "data" / "nist_acs" / "national2019.csv")))
    body = body.replace("epsilon: 0.25\n", f"epsilon: {epsilon}\n", 1)
    return write_spec(tmp_path, body, f"{release}.yaml")


def test_over_budget_is_refused_before_the_data_is_read(tmp_path, run_env):
    spec = _spec(tmp_path, "too-big", epsilon="3.5", lifetime="4")  # 3.5 + 0.75 > 4
    proc = run(spec, "--output-dir", tmp_path / "out", env={**run_env, "PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert proc.returncode == 3, proc.stderr
    assert "lifetime budget" in proc.stderr and "The data was not read" in proc.stderr
    assert not (tmp_path / "out").exists()
    ledger = Ledger.open(resolve_location())
    assert ledger.state("nist-acs-national-2019") is None or ledger.state("nist-acs-national-2019").spent == PureDP(0)


def test_a_data_error_voids_the_reservation_and_publishes_nothing(tmp_path, run_env):
    """Data that fits the spec when checked before the reservation (tests/test_check.py refuses
    it there) but not when counted: the file changed while the run was paused at ``reserved``."""
    data = tmp_path / "bad.csv"
    original = (ROOT / "data" / "nist_acs" / "national2019.csv").read_text().splitlines()
    data.write_text("\n".join(original[:200]))
    spec = _spec(tmp_path, "bad-data", data=str(data))
    proc = _changed_while_reserved(tmp_path, run_env, spec, lambda: data.write_text(
        "\n".join(original[:100] + [original[100].replace("01-01301", "99-99999", 1)] + original[101:200])))
    assert proc.returncode == 2, proc.stderr
    assert "column PUMA" in proc.stderr and "outside the declared domain" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "bad-data").exists()
    state = ledger_state("nist-acs-national-2019")
    assert [(r.release, r.state) for r in state.runs] == [("bad-data", "voided")]
    assert state.spent == PureDP(0)


def test_data_that_changes_while_the_run_reads_it_is_never_published(tmp_path, run_env):
    """Data that still fits the spec but is not the data checked and identified before the
    reservation (a file rewritten while the run was paused at ``reserved``: rows dropped and
    repeated): the run compares the data's bytes once counted with those it checked, voids the
    reservation and publishes nothing (issue 30: the data checked is the data counted)."""
    data = tmp_path / "moving.csv"
    original = (ROOT / "data" / "nist_acs" / "national2019.csv").read_text().splitlines()
    data.write_text("\n".join(original[:2001]))
    spec = _spec(tmp_path, "moving-data", data=str(data))
    proc = _changed_while_reserved(tmp_path, run_env, spec,
                                   lambda: data.write_text("\n".join(original[:1001] + original[1:1001])))
    assert proc.returncode == 2, proc.stderr
    assert "moving.csv changed while this run read it" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "moving-data").exists()
    state = ledger_state("nist-acs-national-2019")
    assert [(r.release, r.state) for r in state.runs] == [("moving-data", "voided")]
    assert state.spent == PureDP(0)


def _changed_while_reserved(tmp_path: Path, run_env, spec: Path, change) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    """Run ``spec`` paused at ``reserved`` (checked, identified and reserved, nothing counted),
    call ``change`` (the data rewritten), resume: the finished run."""
    flag, resume = tmp_path / "flag", tmp_path / "resume"
    env = child_env({**run_env, "DPRELEASE_FAULT_AT": "reserved", "DPRELEASE_FAULT_FLAG": str(flag),
                     "DPRELEASE_FAULT_RESUME": str(resume)})
    paused = subprocess.Popen([sys.executable, "-m", "tests.faulty_cli", "run", str(spec), "--output-dir",
                               str(tmp_path / "out")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert paused.poll() is None and time.monotonic() < deadline, paused.stderr.read() if paused.stderr else ""
        time.sleep(0.1)
    change()
    resume.write_text("go")
    _, stderr = paused.communicate(timeout=120)
    return subprocess.CompletedProcess(paused.args, paused.returncode, "", stderr)


def test_four_racing_runs_for_one_budget_publish_exactly_once(tmp_path, run_env):
    """Lifetime 1, each release needs 3/4: only one fits. Repeated, with real processes."""
    for round_ in range(3):
        dataset_home = tmp_path / f"round{round_}"
        dataset_home.mkdir()
        env = {**run_env, "DPRELEASE_LEDGER": str(make_ledger(dataset_home / "xdg" / "dprelease" / "ledger.sqlite"))}
        specs = [_spec(dataset_home, f"race-{round_}-{i}", epsilon="0.25", lifetime="1") for i in range(4)]
        for path in specs:  # 0.25 + 0.25 + 0.2 + 0.05: each release costs 3/4 of the lifetime 1
            path.write_text(path.read_text().replace("epsilon: 0.3\n", "epsilon: 0.05\n"))
            assert load_spec(path).dataset.lifetime == PureDP(1)
        procs = [subprocess.Popen([sys.executable, "-m", "dprelease", "run", str(p), "--output-dir",
                                   str(dataset_home / "out")], cwd=ROOT, env={**os.environ, **env},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in specs]
        codes = [p.wait(timeout=180) for p in procs]
        errors = [p.stderr.read() for p in procs]
        assert sorted(codes) == [0, 3, 3, 3], (codes, errors)
        published = [d.name for d in (dataset_home / "out").iterdir() if d.name.startswith("race-")]
        assert len(published) == 1
        ledger = Ledger.open(resolve_location(str(dataset_home / "xdg" / "dprelease" / "ledger.sqlite")))
        state = ledger.state("nist-acs-national-2019")
        ledger.close()
        assert state.spent <= state.budget == PureDP(1)
        assert [r.state for r in state.runs] == ["committed"]


def test_sigkill_during_noise_publishes_nothing_and_leaves_the_reservation_counted(tmp_path, run_env):
    spec = _spec(tmp_path, "killed")
    flag = tmp_path / "flag"
    env = {**os.environ, **run_env, "DPRELEASE_FAULT_AT": "noise", "DPRELEASE_FAULT_FLAG": str(flag)}
    victim = subprocess.Popen([sys.executable, "-m", "tests.faulty_cli", "run", str(spec), "--output-dir",
                               str(tmp_path / "out")], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert victim.poll() is None, "the run ended before reaching the noise step"
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=300)
    assert flag.read_text() == "noise"
    assert not (tmp_path / "out" / "killed").exists()
    state = ledger_state("nist-acs-national-2019")
    [record] = state.runs
    assert record.state == "drawing" and record.unfinished  # the ledger recorded the draw before it
    # 1/2 + 1/4 + 1/5 + 3/10, counted although nothing was published
    assert state.spent == record.charge == PureDP(Fraction(5, 4))
    listing = subprocess.run([sys.executable, "-m", "dprelease", "ledger"], cwd=ROOT, capture_output=True,
                             text=True, env={**os.environ, **run_env})
    assert "unfinished" in listing.stdout and record.run_id[:12] in listing.stdout
    rerun = run(spec, "--output-dir", tmp_path / "out", env=run_env)
    assert rerun.returncode == 4 and "dprelease ledger" in rerun.stderr


@pytest.mark.slow
@pytest.mark.parametrize("orchestrator", ["auto", "prefect"])
def test_the_readme_command_runs_in_ephemeral_mode(tmp_path, orchestrator):
    """No server, a fresh PREFECT_HOME, as on a new machine: the default runs inline; forced to
    Prefect, the run starts a temporary server of its own (and stops it)."""
    env = {"PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_API_URL": None}
    demo = shipped_project(tmp_path, ledger=False) / "acs_demo.yaml"  # a fresh clone: its deliberate first step
    born = subprocess.run([sys.executable, "-m", "dprelease", "ledger", "init", "--spec", str(demo), "--reason",
                           "the demo's own budget"], capture_output=True, text=True, env=child_env(env), timeout=120)
    assert born.returncode == 0, born.stderr
    proc = run(demo, "--output-dir", tmp_path / "out", "--orchestrator", orchestrator, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "acs-demo-2019" / "manifest.json").exists()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "analytics" not in proc.stderr.lower() and "telemetry" not in proc.stderr.lower()
    assert "| ERROR" not in proc.stderr, proc.stderr


def _killed_at(stage: str, spec: Path, out: Path, run_env, tmp_path: Path, sig=signal.SIGKILL) -> None:
    flag = tmp_path / f"flag-{stage}"
    env = child_env({**run_env, "DPRELEASE_FAULT_AT": stage, "DPRELEASE_FAULT_FLAG": str(flag)})
    victim = subprocess.Popen([sys.executable, "-m", "tests.faulty_cli", "run", str(spec), "--output-dir", str(out)],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert victim.poll() is None, victim.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    if sig == signal.SIGKILL:
        os.killpg(victim.pid, sig)
    else:
        os.kill(victim.pid, sig)  # only the run itself: it must settle and exit
    try:
        victim.wait(timeout=300)
    except subprocess.TimeoutExpired:  # it did not: fail, leaving no process behind
        os.killpg(victim.pid, signal.SIGKILL)
        raise


def test_a_crash_between_commit_and_rename_is_completed_by_the_next_run(tmp_path, run_env):
    spec, out = _spec(tmp_path, "crash-at-commit"), tmp_path / "out"
    _killed_at("commit", spec, out, run_env, tmp_path)
    state = ledger_state("nist-acs-national-2019")
    assert [r.state for r in state.runs] == ["committed"]
    assert not (out / "crash-at-commit").exists()  # committed, not yet in place
    again = run(spec, "--output-dir", out, env=run_env)
    assert again.returncode == 0, again.stderr
    assert "publication completed now" in again.stderr
    assert (out / "crash-at-commit" / "manifest.json").exists()
    assert ledger_state("nist-acs-national-2019").spent == PureDP(Fraction(5, 4))  # nothing spent twice
    assert not (out / ".staging").exists()


def test_sigterm_after_staging_settles_the_run_as_failed_and_deletes_its_staging(tmp_path, run_env):
    spec, out = _spec(tmp_path, "terminated"), tmp_path / "out"
    _killed_at("publish", spec, out, run_env, tmp_path, sig=signal.SIGTERM)
    state = ledger_state("nist-acs-national-2019")
    assert [r.state for r in state.runs] == ["failed"]  # noise was drawn: stays spent
    assert state.spent == PureDP(Fraction(5, 4))
    assert not (out / "terminated").exists() and not (out / ".staging").exists()


def test_sigint_between_commit_and_rename_still_publishes(tmp_path, run_env):
    spec, out = _spec(tmp_path, "interrupted-commit"), tmp_path / "out"
    _killed_at("commit", spec, out, run_env, tmp_path, sig=signal.SIGINT)
    assert (out / "interrupted-commit" / "manifest.json").exists()
    assert [r.state for r in ledger_state("nist-acs-national-2019").runs] == ["committed"]


@pytest.mark.parametrize("case", ["too-fine-epsilon", "output-dir-is-a-file", "data-path-is-a-directory",
                                  "prefect-unreachable"])
def test_refusals_that_need_no_data_spend_nothing(tmp_path, run_env, case):
    spec, out, env = _spec(tmp_path, case), tmp_path / "out", dict(run_env)
    if case == "too-fine-epsilon":
        spec.write_text(spec.read_text().replace("epsilon: 0.5\n", "epsilon: 0.1234567890123\n", 1))
    elif case == "output-dir-is-a-file":
        out.write_text("not a directory")
    elif case == "data-path-is-a-directory":
        (tmp_path / "dir.csv").mkdir()
        spec.write_text(spec.read_text().replace(str(ROOT / "data" / "nist_acs" / "national2019.csv"),
                                                 str(tmp_path / "dir.csv")))
    else:
        env["PREFECT_API_URL"] = "http://127.0.0.1:9/api"
    proc = run(spec, "--output-dir", out, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    state = Ledger.open(resolve_location())
    dataset = state.state("nist-acs-national-2019") if state else None
    assert dataset is None or (dataset.spent == PureDP(0) and not dataset.runs), case
