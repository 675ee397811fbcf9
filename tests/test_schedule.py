"""Scheduled releases on a real Prefect server (`prefect server start`, the session's): `dprelease
schedule` registers and serves a cron deployment; a run triggered through the server names its
release from the spec's template and its scheduled start, publishes, is charged in the ledger,
and its artifacts are readable from the API; an unapproved plan is refused by a scheduled run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from fractions import Fraction

from dprelease.ledger import Ledger, resolve_location
from tests.test_operations import demo_spec
from tests.test_run import child_env


def api(url: str, path: str, body: dict | None = None, method: str | None = None):  # type: ignore[no-untyped-def]
    request = urllib.request.Request(url + path, method=method or ("POST" if body is not None else "GET"),
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def serve(spec, name, ledger, out, env):  # type: ignore[no-untyped-def]
    return subprocess.Popen([sys.executable, "-m", "dprelease", "schedule", str(spec), "--cron", "0 3 1 * *",
                             "--name", name, "--ledger", str(ledger), "--output-dir", str(out)],
                            env=child_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def deployment(url: str, name: str):  # type: ignore[no-untyped-def]
    try:
        return api(url, f"/deployments/name/dprelease-scheduled/{name}")
    except urllib.error.HTTPError:
        return None


def trigger_and_wait(url: str, deployment_id: str) -> dict:  # type: ignore[type-arg]
    run = api(url, f"/deployments/{deployment_id}/create_flow_run", {})
    return wait_for(lambda: (lambda r: r if r["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED") else None)(
        api(url, f"/flow_runs/{run['id']}")), 240, "the scheduled run to finish")


def test_a_scheduled_deployment_runs_through_the_server(tmp_path, run_env, cli):
    url = run_env["PREFECT_API_URL"]
    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out"
    spec = demo_spec(tmp_path)
    spec.write_text(spec.read_text().replace("release: acs-demo-2019", 'release: "acs-monthly-{run_date:%Y-%m}"'))
    approved = cli("plan", spec, "--approve", "--by", "Reviewer", "--ledger", ledger)
    assert approved.code == 0, approved
    unapproved = tmp_path / "unapproved.yaml"
    unapproved.write_text(spec.read_text().replace("acs-monthly-", "acs-monthly-other-"))

    servers = [serve(spec, "monthly-test", ledger, out, run_env), serve(unapproved, "unapproved-test", ledger, out,
                                                                          run_env)]
    try:
        found = wait_for(lambda: deployment(url, "monthly-test"), 120, "the deployment to register")
        assert [s["schedule"]["cron"] for s in found["schedules"]] == ["0 3 1 * *"]
        finished = trigger_and_wait(url, found["id"])
        assert finished["state"]["type"] == "COMPLETED", finished["state"]
        month = datetime.fromisoformat(finished["expected_start_time"].replace("Z", "+00:00")).strftime("%Y-%m")
        release = f"acs-monthly-{month}"
        manifest = json.loads((out / release / "manifest.json").read_text())
        assert manifest["release"] == release and manifest["release_template"] == "acs-monthly-{run_date:%Y-%m}"
        opened = Ledger.open(resolve_location(str(ledger)), create=False)
        state = opened.state("nist-acs-national-2019")
        opened.close()
        assert [(r.release, r.state, r.epsilon) for r in state.runs] == [(release, "committed", Fraction(1))]
        artifacts = api(url, "/artifacts/filter", {"artifacts": {"key": {"any_": [f"budget-report-{release}",
                                                                                  f"budget-table-{release}"]}}})
        assert sorted(a["type"] for a in artifacts) == ["markdown", "table"]
        assert next(a for a in artifacts if a["type"] == "markdown")["data"] == \
            (out / release / "budget_report.md").read_text()

        other = wait_for(lambda: deployment(url, "unapproved-test"), 120, "the second deployment")
        refused = trigger_and_wait(url, other["id"])
        assert refused["state"]["type"] == "FAILED" and "not approved" in refused["state"]["message"], refused["state"]
        assert not any(p.name.startswith("acs-monthly-other") for p in out.iterdir())
        opened = Ledger.open(resolve_location(str(ledger)), create=False)
        assert opened.state("nist-acs-national-2019").spent == 1  # nothing spent by the refusal
        opened.close()
    finally:
        for proc in servers:
            try:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)


def test_schedule_refuses_without_a_server_or_with_a_bad_cron(tmp_path, cli, monkeypatch):
    spec = demo_spec(tmp_path)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    result = cli("schedule", spec, "--cron", "0 3 1 * *")
    assert result.code == 2 and "prefect server start" in result.stderr
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    result = cli("schedule", spec, "--cron", "not a cron")
    assert result.code == 2 and "cron" in result.stderr


def test_release_templates(tmp_path, cli):
    from dprelease.spec import fingerprint, load_spec

    spec = demo_spec(tmp_path)
    spec.write_text(spec.read_text().replace("release: acs-demo-2019", 'release: "acs-monthly-{run_date:%Y-%m}"'))
    march = load_spec(spec, run_date=datetime(2027, 3, 1, 3, 0))
    april = load_spec(spec, run_date=datetime(2027, 4, 1, 3, 0))
    assert (march.release, april.release) == ("acs-monthly-2027-03", "acs-monthly-2027-04")
    assert fingerprint(march) == fingerprint(april)  # one approval covers the schedule
    for bad in ('"acs-{month}"', '"acs-{run_date:%B}"', '"acs-{run_date"'):
        spec.write_text(spec.read_text().replace('"acs-monthly-{run_date:%Y-%m}"', bad))
        result = cli("validate", spec)
        assert result.code == 2 and "release" in result.stderr, (bad, result)
        spec.write_text(spec.read_text().replace(bad, '"acs-monthly-{run_date:%Y-%m}"'))
