"""Scheduled releases on a real Prefect server (`prefect server start`, the session's): `dprelease
schedule` registers and serves a cron deployment; a run triggered through the server names its
release from the spec's template and its scheduled start, publishes, is charged in the ledger,
and its artifacts are readable from the API; an unapproved plan is refused by a scheduled run."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path

from dprelease.accounting import PureDP
from dprelease.serve.cron import latest_firing
from dprelease.ledger import Ledger, resolve_location
from dprelease.serve.binding import ScheduleBinding, binding_file
from tests.conftest import ROOT
from tests.ledgers import make_ledger
from tests.schedules import MONTHLY, bind_here, run_as, run_logs
from tests.test_operations import demo_spec
from tests.test_run import child_env


def api(url: str, path: str, body: dict | None = None, method: str | None = None,  # type: ignore[no-untyped-def]
        auth: str | None = None):
    """``auth``: the server's secret (user:password), sent as Prefect's clients do (basic authentication)."""
    headers = {"Content-Type": "application/json",
               **({"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {})}
    request = urllib.request.Request(url + path, method=method or ("POST" if body is not None else "GET"),
                                     data=None if body is None else json.dumps(body).encode(), headers=headers)
    for attempt in range(10):  # a busy server (its database locked by the served runs) answers 503: ask again
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == 9:
                raise
            time.sleep(2)


def wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def serve(spec, name, ledger, out, env, *extra):  # type: ignore[no-untyped-def]
    return subprocess.Popen([sys.executable, "-m", "dprelease", "schedule", str(spec), "--cron", "0 3 1 * *",
                             "--name", name, "--ledger", str(ledger), "--output-dir", str(out), *extra],
                            env=child_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def deployment(url: str, name: str):  # type: ignore[no-untyped-def]
    try:
        return api(url, f"/deployments/name/dprelease-scheduled/{name}")
    except urllib.error.HTTPError:
        return None


def demo_spec_with_its_domain(tmp_path: Path) -> Path:
    """:func:`demo_spec` reading a copy of its domain file beside it (``domains/puma.txt``)."""
    (tmp_path / "domains").mkdir()
    (tmp_path / "domains" / "puma.txt").write_text((ROOT / "configs" / "domains" / "puma.txt").read_text())
    spec = demo_spec(tmp_path)
    spec.write_text(spec.read_text().replace(str(ROOT / "configs" / "domains") + "/", "domains/"))
    return spec


def test_a_scheduled_deployment_runs_through_the_server(tmp_path, run_env, cli, cli_process):
    """... and takes no orders (issue 27, case 9: :func:`_takes_no_orders`); the session's server
    requires no authentication, which `schedule` says in one line."""
    url = run_env["PREFECT_API_URL"]
    ledger, out = make_ledger(tmp_path / "ledger.sqlite"), tmp_path / "out"
    spec = demo_spec_with_its_domain(tmp_path)
    spec.write_text(spec.read_text().replace("release: acs-demo-2019", 'release: "acs-monthly-{run_date:%Y-%m}"'))
    approved = cli("plan", spec, "--approve", "--by", "Reviewer", "--ledger", ledger)
    assert approved.code == 0, approved
    unapproved = tmp_path / "unapproved.yaml"
    unapproved.write_text(spec.read_text().replace("acs-monthly-", "acs-monthly-other-"))
    other = tmp_path / "other.yaml"  # another spec, approved: a spec_path override would publish it
    other.write_text(spec.read_text().replace("acs-monthly-", "acs-bypass-"))
    assert cli("plan", other, "--approve", "--by", "Reviewer", "--ledger", ledger).code == 0

    servers = [serve(spec, "monthly-test", ledger, out, run_env), serve(unapproved, "unapproved-test", ledger, out,
                                                                          run_env)]
    try:
        found = wait_for(lambda: (lambda d: d if d and d.get("schedules") else None)(deployment(url, "monthly-test")),
                         120, "the deployment and its schedule to register")
        assert [s["schedule"]["cron"] for s in found["schedules"]] == ["0 3 1 * *"]
        other_deployment = wait_for(lambda: (lambda d: d if d and d.get("schedules") else None)(
            deployment(url, "unapproved-test")), 120, "the second deployment")
        _takes_no_orders(url, found, other_deployment, spec, other, ledger, out, servers[0].pid)

        latest = latest_firing("0 3 1 * *", datetime.now(timezone.utc).replace(tzinfo=None))
        done = finished(url, start_dated(url, found["id"], latest.replace(tzinfo=timezone.utc)))  # a genuine firing
        assert done["state"]["type"] == "COMPLETED", done["state"]
        month = datetime.fromisoformat(done["expected_start_time"].replace("Z", "+00:00")).strftime("%Y-%m")
        assert month == f"{latest:%Y-%m}"
        release = f"acs-monthly-{month}"
        manifest = json.loads((out / release / "manifest.json").read_text())
        assert manifest["release"] == release and manifest["release_template"] == "acs-monthly-{run_date:%Y-%m}"
        opened = Ledger.open(resolve_location(str(ledger)))
        state = opened.state("nist-acs-national-2019")
        opened.close()
        assert [(r.release, r.state, r.charge) for r in state.runs] == [(release, "committed", PureDP(Fraction(1)))]
        artifacts = api(url, "/artifacts/filter", {"artifacts": {"key": {"any_": [f"budget-report-{release}",
                                                                                  f"budget-table-{release}"]}}})
        assert sorted(a["type"] for a in artifacts) == ["markdown", "table"]
        assert next(a for a in artifacts if a["type"] == "markdown")["data"].startswith(
            (out / release / "budget_report.md").read_text())

        triggered = cli_process("trigger", "unapproved-test", env=run_env)  # as docs/commands.md shows it
        assert triggered.code == 0, triggered
        assert "Starting temporary server" not in triggered.output and f"on {url}" in triggered.stdout, triggered
        refused = finished(url, triggered.stdout.split("flow run ")[1].split(" ")[0])  # as the latest firing
        assert refused["state"]["type"] == "FAILED" and "not approved" in refused["state"]["message"], refused["state"]
        assert f"release acs-monthly-other-{month} is not approved" in refused["state"]["message"], refused["state"]
        assert refused["state"]["message"].startswith("refused (exit 5): "), refused["state"]
        logs = wait_for(lambda: (lambda found: found if any(g["level"] >= 40 for g in found) else None)(
            api(url, "/logs/filter", {"logs": {"flow_run_id": {"any_": [refused["id"]]}}})), 60, "the run's logs")
        assert [g["message"] for g in logs if g["level"] >= 40] == [refused["state"]["message"]], logs
        assert not any("Traceback" in g["message"] for g in logs), logs
        assert not any(p.name.startswith("acs-monthly-other") for p in out.iterdir())
        opened = Ledger.open(resolve_location(str(ledger)))
        assert opened.state("nist-acs-national-2019").spent == PureDP(1)  # nothing spent by the refusal
        opened.close()
        assert [p.name for p in out.iterdir() if not p.name.startswith((".", "_"))] == [release]
    finally:
        said = []  # what the serving processes said
        for proc in servers:
            try:
                os.killpg(proc.pid, signal.SIGINT)
                said.append(proc.communicate(timeout=300)[0])
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
                said.append(proc.communicate()[0])
        print("\n".join(text[-3000:] for text in said))  # shown when the test fails
    assert NO_AUTH_WARNING.format(url=url) in said[0].splitlines(), said[0]
    assert (f"bound here ({binding_file('monthly-test')}): a run with other parameters, or after the spec or its "
            "domain files change, or dated other than the latest firing of the cron, is refused") in said[0], said[0]
    assert not binding_file("monthly-test").exists()  # removed when the serving process stopped


def start_run(url: str, deployment_id: str, parameters: dict, job_variables: dict | None = None) -> str:  # type: ignore[type-arg]
    """A flow run of the deployment as `prefect deployment run --param ...` (or the UI's custom run) starts one."""
    body = {"parameters": parameters, **({"job_variables": job_variables} if job_variables else {})}
    return api(url, f"/deployments/{deployment_id}/create_flow_run", body)["id"]


def finished(url: str, run_id: str, auth: str | None = None) -> dict:  # type: ignore[type-arg]
    return wait_for(lambda: (lambda r: r if r["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED") else None)(
        api(url, f"/flow_runs/{run_id}", auth=auth)), 240, "a scheduled run to finish")


def error_lines(url: str, run_id: str) -> tuple[list[str], list[str]]:
    """(the run's ERROR log lines, all its log lines), once its ERROR line has arrived."""
    logs = wait_for(lambda: (lambda found: found if any(g["level"] >= 40 for g in found) else None)(
        api(url, "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}})), 60, "the run's logs")
    return [g["message"] for g in logs if g["level"] >= 40], [g["message"] for g in logs]


NO_AUTH_WARNING = ("warning: the Prefect server at {url} requires no authentication: anyone who reaches it can start, "
                   "pause or delete this deployment and read its runs' logs (runs with other parameters are refused); "
                   "serve it on the server `dprelease server start` keeps, which requires a secret")


def start_dated(url: str, deployment_id: str, when: datetime, then_now: bool = False) -> str:
    """A flow run of the deployment scheduled for ``when``, as `prefect deployment run --start-at`
    starts one; ``then_now``: then rescheduled for now (``POST /flow_runs/{id}/set_state``), which
    the served runner starts at once while the run's expected start, the date a run reads, stays
    ``when``."""
    scheduled = {"type": "SCHEDULED", "state_details": {"scheduled_time": when.isoformat()}}
    run_id = api(url, f"/deployments/{deployment_id}/create_flow_run", {"state": scheduled})["id"]
    if then_now:
        now = {"type": "SCHEDULED", "state_details": {"scheduled_time": datetime.now(timezone.utc).isoformat()}}
        api(url, f"/flow_runs/{run_id}/set_state", {"state": now, "force": True})
    return run_id


def _takes_no_orders(url: str, found: dict, unapproved: dict, spec: Path, other: Path,  # type: ignore[type-arg]
                     ledger: Path, out: Path, serving: int) -> None:
    """Issue 27, case 9 and item 8, before any run of the served deployments ``found`` (of
    ``spec``, approved) and ``unapproved`` (a spec nobody approved), both bound to ``ledger`` and
    ``out``: `dprelease schedule` (process ``serving``) bound the spec (path and file fingerprint,
    and its domain file's), ledger, output directory, approval and cron in an owner-only file of
    its own. A run given another value for any of them — as `prefect deployment run --param`, or
    the UI's custom run, would: each of these published before —, or forging the binding through
    job variables, or started after the spec file or its domain file was edited (a comment: the
    plan, and its approval, unchanged), or dated other than the latest firing of the cron — a
    month of 2001, a moment that is no firing (`--start-at`), the next firing (created for it,
    then rescheduled for now: Prefect keeps the first date as the run's) — each of which published
    a release of its own before, fails with one ERROR line and no traceback, before any ledger is
    opened or created: nothing reserved, published or spent."""
    from dprelease.serve.cron import firings, latest_firing
    from dprelease.serve.binding import binding_file, read_binding

    bound = read_binding(found["name"])
    assert bound is not None and oct(binding_file(found["name"]).stat().st_mode & 0o777) == "0o600"
    assert found["parameters"] == bound.parameters() and bound.cron == "0 3 1 * *" and bound.pid == serving
    domain = spec.parent / "domains" / "puma.txt"
    assert list(bound.side_files) == [str(domain)]
    fresh, elsewhere = out.parent / "x" / "fresh.sqlite", out.parent / "x" / "out"
    forged = {**dataclasses.asdict(bound), "require_approval": False, "ledger": str(fresh)}
    overrides = {"require_approval": (unapproved, {"require_approval": False}, None),
                 "ledger": (found, {"ledger": str(fresh)}, None),
                 "output_dir": (found, {"output_dir": str(elsewhere)}, None),
                 "spec_path": (found, {"spec_path": str(other)}, None),
                 "forged": (found, {"require_approval": False, "ledger": str(fresh)},  # with a binding that agrees
                            {"env": {"DPRELEASE_SCHEDULE_BINDING": json.dumps(forged),
                                     "XDG_DATA_HOME": str(out.parent / "x" / "xdg")}})}
    started = {what: start_run(url, where["id"], parameters, job_variables)
               for what, (where, parameters, job_variables) in overrides.items()}
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    latest = latest_firing("0 3 1 * *", now).replace(tzinfo=timezone.utc)
    following = firings("0 3 1 * *", now, 1)[0].replace(tzinfo=timezone.utc)
    dates = {"past": datetime(2001, 1, 1, 3, tzinfo=timezone.utc), "no firing": latest - timedelta(hours=23, minutes=53),
             "future": following}
    started.update({what: start_dated(url, found["id"], when, then_now=what == "future") for what, when in dates.items()})
    runs = {what: finished(url, run_id) for what, run_id in started.items()}
    for edited in (spec, domain):
        text = edited.read_text()
        edited.write_text(text + "# edited after schedule started\n")
        runs[f"edited {edited.name}"] = finished(url, start_run(url, found["id"], {}))
        edited.write_text(text)  # the bytes it was served with: runs go on

    for what, run in runs.items():
        message = run["state"]["message"]
        name = (unapproved if what == "require_approval" else found)["name"]
        assert run["state"]["type"] == "FAILED" and message.startswith(
            f"refused (exit 2): deployment dprelease-scheduled/{name}"), (what, run["state"])
        assert message.endswith("Nothing was opened, reserved or spent."), (what, message)
        errors, logs = error_lines(url, run["id"])
        assert errors == [message], (what, logs)
        assert not any("Traceback" in line for line in logs), (what, logs)
    for what in ("require_approval", "ledger", "output_dir", "spec_path"):
        given = json.dumps(overrides[what][1][what])
        assert f"this run carries {what}={given}, but `dprelease schedule` bound {what}=" in \
            runs[what]["state"]["message"], runs[what]["state"]["message"]
    assert f"its spec {spec} changed since `dprelease schedule` started serving it" in \
        runs["edited demo.yaml"]["state"]["message"]
    assert f"its domain or mapping file {domain} changed since `dprelease schedule` started serving it" in \
        runs["edited puma.txt"]["state"]["message"]
    for what, why in (("past", "which is older than one period"), ("no firing", "which is not a firing of its cron"),
                      ("future", "which is in the future")):
        assert datetime.fromisoformat(runs[what]["expected_start_time"]) == dates[what]  # the date the run read
        assert f": this run is dated {dates[what]:%Y-%m-%d %H:%M} UTC, {why}" in runs[what]["state"]["message"], \
            runs[what]["state"]["message"]
    print("\n".join(f"{what}: {run['state']['message']}" for what, run in runs.items()))

    assert not fresh.exists() and not fresh.parent.exists() and not elsewhere.exists()
    assert not out.exists() or not [p for p in out.iterdir() if not p.name.startswith((".", "_"))]
    opened = Ledger.open(resolve_location(str(ledger)))
    state = opened.state("nist-acs-national-2019")
    opened.close()
    assert state is None or not state.runs


def test_schedule_refuses_without_a_server_or_with_a_bad_cron(tmp_path, cli, monkeypatch):
    spec = demo_spec(tmp_path)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    result = cli("schedule", spec, "--cron", "0 3 1 * *")
    assert result.code == 2 and "prefect server start" in result.stderr
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    result = cli("schedule", spec, "--cron", "not a cron")
    assert result.code == 2 and "cron" in result.stderr
    for unread in ("0 3 L * *", "0 3 1 * * 0"):  # Prefect takes these; each run's date could not be checked
        result = cli("schedule", spec, "--cron", unread)
        assert result.code == 2 and "is not a cron expression dprelease reads" in result.stderr, result
    result = cli("schedule", spec, "--cron", "0 3 31 2 *")
    assert result.code == 2 and "does not fire in the next ten years" in result.stderr, result


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


PARTITIONED = """\
release: "survey-{{run_date:%Y-%m}}"
dataset:
  name: monthly-survey
  path: data.csv
  lifetime_budget: {{epsilon: 1}}
  partition: {{column: MONTH, value: "{{run_date:%Y-%m}}"{disjoint}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  SEX: {{domain: [1, 2]}}
tables:
  - name: by_sex
    group_by: [SEX]
    epsilon: 1
    post_process: none
"""


def test_periods_of_disjoint_people_have_budgets_of_their_own(tmp_path, run_env, cli):
    """A fresh sample each month (disjoint_units: true): each month's release counts only its rows
    and spends from that month's own lifetime budget (parallel composition), stated in the report.
    Without the declaration, the second month is refused: the periods share one budget."""
    from tests.test_run import run

    rows = [f"2027-03,{1 + i % 2}" for i in range(300)] + [f"2027-04,{1 + i % 2}" for i in range(5000)]
    (tmp_path / "data.csv").write_text("MONTH,SEX\n" + "\n".join(rows) + "\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(PARTITIONED.format(disjoint=", disjoint_units: true"))
    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out"
    for month in ("2027-03", "2027-04"):
        proc = run(spec, "--run-date", f"{month}-01", "--output-dir", out, "--ledger", ledger, env=run_env)
        assert proc.returncode == 0, proc.stderr
    march = (out / "survey-2027-03" / "tables" / "by_sex.csv").read_text().splitlines()[1:]
    assert abs(sum(int(line.split(",")[1]) for line in march) - 300) < 60  # March's rows only, ε = 1
    manifest = json.loads((out / "survey-2027-04" / "manifest.json").read_text())
    assert manifest["partition"]["ledger_dataset"] == "monthly-survey/MONTH=2027-04"
    assert "disjoint units" in (out / "survey-2027-04" / "budget_report.md").read_text()
    shown = json.loads(cli("report", out / "survey-2027-04", "--format", "json", "--ledger", ledger).stdout)
    assert shown["partition"]["disjoint_units"] is True and any(w.startswith("period:") for w in shown["warnings"])
    opened = Ledger.open(resolve_location(str(ledger)))
    assert sorted(opened.datasets()) == ["monthly-survey/MONTH=2027-03", "monthly-survey/MONTH=2027-04"]
    assert all(opened.state(d).spent == PureDP(1) for d in opened.datasets())
    opened.close()

    # the periods' budgets stand alone only while nothing spends from the whole dataset's one budget
    whole = tmp_path / "whole.yaml"
    whole.write_text(PARTITIONED.format(disjoint="").replace('"survey-{run_date:%Y-%m}"', "survey-all"))
    refused = run(whole, "--run-date", "2027-05-01", "--output-dir", out, "--ledger", ledger, env=run_env)
    assert refused.returncode == 2 and "per-period budgets" in refused.stderr and not (out / "survey-all").exists()
    quarterly = tmp_path / "quarterly.yaml"
    quarterly.write_text(spec.read_text().replace("column: MONTH", "column: QUARTER"))
    (tmp_path / "data.csv").write_text("MONTH,QUARTER,SEX\n" + "\n".join(f"{r.split(',')[0]},Q1,{r.split(',')[1]}"
                                                                          for r in rows) + "\n")
    refused = run(quarterly, "--run-date", "2027-06-01", "--output-dir", out, "--ledger", ledger, env=run_env)
    assert refused.returncode == 2 and "another column" in refused.stderr, refused.stderr
    # one approval covers every period of the schedule
    approve = cli("plan", spec, "--approve", "--ledger", ledger)
    assert approve.code == 0, approve
    proc = run(spec, "--run-date", "2027-07-01", "--require-approval", "--output-dir", out, "--ledger", ledger,
               env=run_env)
    assert proc.returncode == 0 and "plan approved" in proc.stderr, proc.stderr

    shared = tmp_path / "shared.yaml"
    shared.write_text(PARTITIONED.format(disjoint=""))
    (tmp_path / "data.csv").write_text("MONTH,SEX\n" + "\n".join(rows) + "\n")
    ledger2 = tmp_path / "ledger2.sqlite"
    assert run(shared, "--run-date", "2027-03-01", "--output-dir", tmp_path / "out2", "--ledger", ledger2,
               env=run_env).returncode == 0
    refused = run(shared, "--run-date", "2027-04-01", "--output-dir", tmp_path / "out2", "--ledger", ledger2,
                  env=run_env)
    assert refused.returncode == 3 and "lifetime budget of monthly-survey" in refused.stderr, refused.stderr
    planned = cli("plan", shared, "--ledger", ledger2)
    assert "every period spends from the dataset's one lifetime budget" in planned.stdout


def test_the_shipped_deployment_points_at_a_valid_spec_and_flow(cli):
    """pipelines/acs-monthly.service: it serves the scheduled flow with `dprelease schedule`
    (which binds every parameter of the flow), its spec validates, its cron is valid and its runs
    require approval. (It replaced pipelines/prefect.yaml, a work-pool deployment: a worker runs
    whatever a flow run's job variables say, so the flow refuses runs no `schedule` bound.)"""
    import inspect
    import shlex

    from prefect.client.schemas.schedules import CronSchedule

    from dprelease.serve.orchestrate import scheduled_release
    from dprelease.serve.binding import PARAMETERS
    from tests.conftest import ROOT

    unit = (ROOT / "pipelines" / "acs-monthly.service").read_text()
    [command] = [line.partition("=")[2] for line in unit.splitlines() if line.startswith("ExecStart=")]
    program, *args = shlex.split(command)
    assert program == "@REPO@/.venv/bin/dprelease" and args[0] == "schedule", command
    assert scheduled_release.name == "dprelease-scheduled"
    assert tuple(inspect.signature(scheduled_release.fn).parameters) == PARAMETERS  # all of them bound
    assert "--no-approval" not in args
    CronSchedule(cron=args[args.index("--cron") + 1])
    result = cli("validate", ROOT / args[1])
    assert result.code == 0, result


def test_a_partition_is_a_plain_data_column_with_a_safe_value(tmp_path, cli):
    spec = tmp_path / "spec.yaml"
    (tmp_path / "data.csv").write_text("MONTH,SEX\n2027-03,1\n")
    spec.write_text(PARTITIONED.format(disjoint=", disjoint_units: true").replace(
        "  SEX: {domain: [1, 2]}", "  SEX: {domain: [1, 2]}\n  MONTH: {domain: [\"2027-03\"]}"))
    result = cli("validate", spec)
    assert result.code == 2 and "dataset.partition.column" in result.stderr, result
    spec.write_text(PARTITIONED.format(disjoint="").replace('value: "{run_date:%Y-%m}"', 'value: "{run_date:%Y/%m}"'))
    result = cli("validate", spec)
    assert result.code == 2 and "dataset.partition.value" in result.stderr, result


def test_releases_scheduled_more_than_once_a_day_name_the_hour_and_minute(tmp_path, cli, monkeypatch):
    """A template may carry the hour and minute (%H%M) when the result is a safe name; a cron
    whose consecutive runs the template names alike (a day-only name fired hourly, a monthly
    name fired daily, an hour without its day...) is warned about before serving."""
    from dprelease.spec import load_spec

    spec = demo_spec(tmp_path)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)

    def with_template(template: str):
        spec.write_text(demo_spec(tmp_path).read_text().replace("release: acs-demo-2019", f'release: "{template}"'))
        return spec

    with_template("acs-{run_date:%Y-%m-%d-%H%M}")
    assert load_spec(spec, run_date=datetime(2027, 3, 1, 14, 30)).release == "acs-2027-03-01-1430"
    cases = (("acs-{run_date:%Y-%m-%d-%H%M}", "0 */6 * * *", False), ("acs-{run_date:%Y-%m-%d-%H%M}", "*/15 * * * *", False),
             ("acs-{run_date:%Y-%m-%d}", "0 */6 * * *", True), ("acs-{run_date:%Y-%m-%d}", "*/15 * * * *", True),
             ("acs-{run_date:%Y-%m-%d}", "0,30 3 * * *", True), ("acs-{run_date:%Y-%m-%d}", "@hourly", True),
             ("acs-{run_date:%Y-%m-%d}", "0 3 * * *", False), ("acs-{run_date:%Y-%m-%d}", "@daily", False),
             ("acs-{run_date:%Y-%m-%d-%H}", "*/30 * * * *", True), ("acs-{run_date:%Y-%m-%d-%M}", "0 * * * *", True),
             ("acs-monthly-{run_date:%Y-%m}", "0 3 * * *", True), ("acs-monthly-{run_date:%Y-%m}", "30 2 1 * *", False),
             ("acs-monthly-{run_date:%Y-%m}", "0 3 1,15 * *", True))
    for template, cron, warned in cases:
        result = cli("schedule", with_template(template), "--cron", cron)  # refused (no server), after its warnings
        assert result.code == 2 and "prefect server start" in result.stderr
        warning = "only the first of such runs can publish, the others are refused as already released"
        assert (warning in result.stderr) == warned, (template, cron, result.stderr)
        if warned:
            assert f"--cron {cron!r} fires at " in result.stderr and "names alike ('acs-" in result.stderr
    bad = tmp_path / "colon.yaml"
    bad.write_text(with_template("acs-{run_date:%Y-%m-%d}").read_text().replace("%Y-%m-%d", "%H:%M"))
    refused = cli("validate", bad)
    assert refused.code == 2 and "not a safe name" in refused.stderr


def test_cron_firings():
    from dprelease.serve.cron import firings

    start = datetime(2027, 3, 1, 2, 59)
    assert firings("0 3 1 * *", start, 2) == [datetime(2027, 3, 1, 3, 0), datetime(2027, 4, 1, 3, 0)]
    assert firings("*/30 * * * *", start, 2) == [datetime(2027, 3, 1, 3, 0), datetime(2027, 3, 1, 3, 30)]
    assert firings("0 3,15 * * MON-FRI", datetime(2027, 3, 5, 16), 1) == [datetime(2027, 3, 8, 3, 0)]  # Fri → Mon
    assert firings("0 0 1 * MON", datetime(2027, 3, 1, 1), 2) == [datetime(2027, 3, 8), datetime(2027, 3, 15)]  # either
    assert firings("0 0 29 2 *", start, 1) == [datetime(2028, 2, 29)]
    assert firings("@weekly", start, 1) == [datetime(2027, 3, 7)]  # Sunday
    for bad in ("bad", "0 3 * *", "61 * * * *", "0 3 * * 8", "0 3 L * *"):
        assert firings(bad, start, 1) is None, bad


def test_a_refused_scheduled_run_logs_one_error_line_and_fails_without_a_traceback(tmp_path, monkeypatch):
    """The flow's body, called directly: a refusal (here: over budget) is one ERROR record with the
    reason and the exit code, no exc_info, and the flow returns a Failed state (so Prefect prints no
    traceback); a bug (exit 1) still raises."""
    import logging

    from prefect.states import State

    import dprelease.lifecycle
    from dprelease.serve import orchestrate
    from dprelease.errors import InternalError, OverBudgetError

    records = run_logs(monkeypatch, "test-scheduled-run")
    raised: list[Exception] = [OverBudgetError("acs-2020 needs ε = 1 but only 1/2 remains")]

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise raised[0]

    monkeypatch.setattr(dprelease.lifecycle, "run_spec", refuse)
    spec = demo_spec(tmp_path)  # what a `dprelease schedule` process (this one) bound
    bind_here(monkeypatch, spec, tmp_path / "out")
    state = orchestrate.scheduled_release.fn(str(spec), None, str(tmp_path / "out"))
    assert isinstance(state, State) and state.is_failed()
    assert state.message == "refused (exit 3): acs-2020 needs ε = 1 but only 1/2 remains"
    errors = [r for r in records if r.levelno >= logging.WARNING]
    assert [(r.levelname, r.getMessage()) for r in errors] == [
        ("ERROR", "refused (exit 3): acs-2020 needs ε = 1 but only 1/2 remains")]
    assert errors[0].exc_info is None and errors[0].exc_text is None

    raised[0] = InternalError("a broken invariant")
    records.clear()
    try:
        orchestrate.scheduled_release.fn(str(spec), None, str(tmp_path / "out"))
    except InternalError:
        pass
    else:
        raise AssertionError("a bug must raise, with its traceback")
    assert not [r for r in records if r.levelno >= logging.ERROR]


def test_a_successful_scheduled_run_logs_at_info_and_its_warnings_at_warning(tmp_path, monkeypatch):
    """Issue 29, point 11: the lifecycle's lines of a successful run are INFO records of the run's
    logger (a child at INFO, so they pass PREFECT_LOGGING_LEVEL=WARNING), a "warning: …" line a
    WARNING; nothing at ERROR. Alerting on WARNING then fires on warnings only."""
    import logging

    import dprelease.lifecycle
    from dprelease.serve import orchestrate

    parent = logging.getLogger("test-scheduled-success")
    records = run_logs(monkeypatch, "test-scheduled-success")
    monkeypatch.setattr(parent, "level", logging.WARNING)  # as PREFECT_LOGGING_LEVEL leaves Prefect's loggers

    def publish(*args, voice, **kwargs):  # type: ignore[no-untyped-def]
        voice.say("ledger id 1234: sqlite:///ledger.sqlite (chosen by the spec's ledger: key)")
        voice.say("warning: ledger id 1234 was created at /elsewhere and is opened here")
        voice.show("published acs-demo-2019: 4 tables, ε = 1 → /out/acs-demo-2019")

    monkeypatch.setattr(dprelease.lifecycle, "run_spec", publish)
    spec = demo_spec(tmp_path)
    bind_here(monkeypatch, spec, tmp_path / "out")
    assert orchestrate.scheduled_release.fn(str(spec), None, str(tmp_path / "out")) is None
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in records] == [
        ("INFO", "ledger id 1234"), ("WARNING", "warning"), ("INFO", "published acs-demo-2019")]
    assert all(r.name == "test-scheduled-success.dprelease" for r in records)


def test_a_scheduled_run_that_no_schedule_process_bound_or_that_differs_at_all_is_refused(tmp_path, monkeypatch):
    """The flow's body, called directly: without a binding kept for its deployment (a worker,
    say) it refuses before the lifecycle is called, and a binding given in its environment
    instead (as a worker's job variables would give it) is no binding; with one, a parameter
    equal only loosely (1 for true, a path spelled otherwise) is a different value, refused too;
    the same values run, dated the latest firing of the bound cron."""
    import logging

    import prefect

    import dprelease.lifecycle
    from dprelease.serve import orchestrate
    from dprelease.serve.cron import latest_firing

    calls: list[tuple] = []  # type: ignore[type-arg]
    monkeypatch.setattr(dprelease.lifecycle, "run_spec", lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setattr(prefect, "get_run_logger", lambda: logging.getLogger("test-unbound"))
    spec, out = demo_spec(tmp_path), tmp_path / "out"
    run_as(monkeypatch, "t", None)
    forged = ScheduleBinding.bind("dprelease-scheduled/t", spec, (), None, out, True, MONTHLY)
    for environ in ({}, {"DPRELEASE_SCHEDULE_BINDING": json.dumps(dataclasses.asdict(forged))}):
        with monkeypatch.context() as m:
            for name, value in environ.items():
                m.setenv(name, value)
            state = orchestrate.scheduled_release.fn(str(spec), None, str(out), True)
        assert state.is_failed() and state.message.startswith(
            "refused (exit 2): this flow run was not started by a `dprelease schedule` process (no binding of "
            "deployment 't' in "), (environ, state.message)
    run_as(monkeypatch, None, None)  # not a deployment's run at all
    state = orchestrate.scheduled_release.fn(str(spec), None, str(out), True)
    assert state.is_failed() and "(no deployment)" in state.message, state.message
    bind_here(monkeypatch, spec, out)
    for loose in ((str(spec), None, str(out), 1), (str(spec), None, str(out) + "/", True),
                  (str(spec), "", str(out), True)):
        state = orchestrate.scheduled_release.fn(*loose)
        assert state.is_failed() and "takes no orders" in state.message, (loose, state.message)
    assert calls == []
    assert orchestrate.scheduled_release.fn(str(spec), None, str(out), True) is None
    [(args, kwargs)] = calls
    assert args == (spec, None, out)
    due = latest_firing(MONTHLY, datetime.now(timezone.utc).replace(tzinfo=None))
    assert kwargs["run_date"] == due.replace(tzinfo=timezone.utc) and kwargs["require_approval"] is True


def test_schedule_shows_the_next_runs_warnings_and_runway_and_refuses_what_it_would_refuse(tmp_path, cli, monkeypatch):
    """Issue 29, point 4, before anything is served (no server here: the checks come first): the
    next run's plan warnings (a table the dataset already published), the budget's runway (how
    many more runs and the date of the last), an unapproved plan said but not refused (a reviewer
    may approve it before it fires); a next run that would be refused as already released (exit
    4) or over budget (exit 3) is not served."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    spec = demo_spec(tmp_path)
    assert cli("run", spec, "--output-dir", tmp_path / "out", "--orchestrator", "inline").code == 0  # ε 1 of 4
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    from dprelease.serve.cron import firings

    first, _, third = firings("0 3 1 * *", now, 3)
    same = cli("schedule", spec, "--cron", "0 3 1 * *")  # acs-demo-2019 again: refused, nothing served
    assert same.code == 4 and f"the next run ({first:%Y-%m-%d %H:%M} UTC, release acs-demo-2019) would be " \
        "refused: release 'acs-demo-2019' is already committed" in same.stderr, same
    assert "Nothing was served." in same.stderr and "prefect server start" not in same.stderr
    monthly = tmp_path / "monthly.yaml"
    monthly.write_text(spec.read_text().replace("release: acs-demo-2019", 'release: "acs-monthly-{run_date:%Y-%m}"'))
    served = cli("schedule", monthly, "--cron", "0 3 1 * *")
    assert served.code == 2 and "prefect server start" in served.stderr  # every check passed: the server is next
    assert f"the next run ({first:%Y-%m-%d %H:%M} UTC, release acs-monthly-{first:%Y-%m}): table puma_by_sex was " \
        "already released in release acs-demo-2019" in served.stderr
    assert f"budget runway: each run charges ε = 1; 3 of 4 remain for nist-acs-national-2019: that covers 3 more " \
        f"run(s), the last on {third:%Y-%m-%d} 03:00 UTC" in served.stderr, served.stderr
    assert "will be refused unless its plan is approved before it fires" in served.stderr
    assert cli("plan", monthly, "--approve", "--by", "Reviewer").code == 0
    approved = cli("schedule", monthly, "--cron", "0 3 1 * *")
    assert approved.code == 2 and "approved before it fires" not in approved.stderr
    over = tmp_path / "over.yaml"
    over.write_text(monthly.read_text().replace("lifetime_budget: {epsilon: 4}", "lifetime_budget: {epsilon: 1}"))
    assert cli("ledger", "set-budget", "nist-acs-national-2019", "--epsilon", "1", "--reason", "spent").code == 0
    refused = cli("schedule", over, "--cron", "0 3 1 * *")
    assert refused.code == 3 and "would be refused: the release needs ε = 1, over the lifetime budget" in refused.stderr


def test_trigger_never_starts_a_temporary_server(tmp_path, cli_process):
    """Issue 29, point 2: `prefect deployment run 'dprelease-scheduled/NAME'`, as the docs gave
    it, started a throwaway server and ended in a traceback. `dprelease trigger NAME` talks to the
    server in use or refuses, clearly: no server (none kept, no PREFECT_API_URL), or one that does
    not answer. (Its run through a served deployment: the test above.)"""
    env = {"PREFECT_API_URL": "", "XDG_DATA_HOME": str(tmp_path / "xdg")}
    none = cli_process("trigger", "monthly", env=env)
    assert none.code == 2 and "a triggered run needs the server its schedule is served on: start one with " \
        "`dprelease server start`" in none.stderr, none
    dead = cli_process("trigger", "monthly", env={**env, "PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert dead.code == 2 and "the Prefect server at http://127.0.0.1:9/api does not answer" in dead.stderr, dead
    for result in (none, dead):
        assert "Traceback" not in result.output and "temporary server" not in result.output.lower()
