"""Operating releases: plan approval (`plan --approve`, `run --require-approval`) and ledger review
(`ledger` burn-down, `ledger resolve RUN_ID --void|--commit|--fail --reason`)."""

from __future__ import annotations

import json
from fractions import Fraction

from dprelease.accounting import PureDP
from dprelease.ledger import Ledger, resolve_location
from tests.conftest import ROOT, unpinned
from tests.test_run import run
from tests.ledgers import init_at


def demo_spec(tmp_path):
    """The shipped demo spec with absolute data paths, in tmp_path."""
    path = tmp_path / "demo.yaml"
    path.write_text(unpinned((ROOT / "configs" / "acs_demo.yaml").read_text())
                    .replace("../data/nist_acs/", str(ROOT / "data" / "nist_acs") + "/")
                    .replace("domains/", str(ROOT / "configs" / "domains") + "/"))
    return path


def state_of(ledger_path, dataset="nist-acs-national-2019"):
    opened = Ledger.open(resolve_location(str(ledger_path)))
    try:
        return opened.state(dataset) if opened else None
    finally:
        if opened:
            opened.close()


def test_an_unapproved_plan_is_refused_and_an_approved_one_runs(tmp_path, release_env, cli):
    spec = demo_spec(tmp_path)
    ledger = tmp_path / "ledger.sqlite"
    refused = run(spec, "--require-approval", "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert refused.returncode == 5 and "not approved" in refused.stderr, refused.stderr
    assert not (tmp_path / "out" / "acs-demo-2019").exists()
    state = state_of(ledger)
    assert state is None or state.spent == PureDP(0)  # nothing reserved, nothing spent

    approved = cli("plan", spec, "--approve", "--by", "Ada Statistician", "--ledger", ledger)
    assert approved.code == 0 and "approved plan sha256:" in approved.stderr and "Ada Statistician" in approved.stderr

    # an edited spec is another plan: its approval does not carry over
    edited = tmp_path / "edited.yaml"
    edited.write_text(spec.read_text().replace("release: acs-demo-2019", "release: acs-demo-2019-edited"))
    again = run(edited, "--require-approval", "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert again.returncode == 5, again.stderr

    done = run(spec, "--require-approval", "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert done.returncode == 0 and "plan approved by Ada Statistician" in done.stderr, done.stderr
    assert (tmp_path / "out" / "acs-demo-2019" / "manifest.json").is_file()
    assert state_of(ledger).spent == PureDP(1)


def test_only_a_plan_that_fits_can_be_approved(tmp_path, cli):
    spec = demo_spec(tmp_path)
    spec.write_text(spec.read_text().replace("lifetime_budget: {epsilon: 4}", "lifetime_budget: {epsilon: 1/2}"))
    ledger = tmp_path / "ledger.sqlite"
    result = cli("plan", spec, "--approve", "--ledger", ledger)
    assert result.code == 3 and "approved" not in result.stderr
    opened = Ledger.open(resolve_location(str(ledger)))
    assert opened is None or opened.approvals("nist-acs-national-2019") == []
    result = cli("plan", spec, "--by", "x", "--ledger", ledger)
    assert result.code == 2 and "--approve" in result.stderr


def _crashed(tmp_path, release="acs-crashed"):
    """A reservation left by a run that died: reserved, with its output directory recorded."""
    ledger_path = tmp_path / "ledger.sqlite"
    ledger = init_at(resolve_location(str(ledger_path)))
    granted = ledger.reserve(dataset="acs", release=release, charges=[("t", PureDP(Fraction(1, 2)))],
                             spec_fingerprint="sha256:s", lifetime_from_spec=PureDP(Fraction(4)),
                             output_dir=str(tmp_path / "out"))
    ledger.end_lease(granted.run_id)  # the reserving process (this one) is gone, as far as the lease knows
    ledger.close()
    (tmp_path / "out").mkdir(exist_ok=True)
    return ledger_path, granted.run_id


def test_resolve_void_only_when_no_output_appeared(tmp_path, cli):
    ledger, run_id = _crashed(tmp_path)
    listed = cli("ledger", "--ledger", ledger)
    assert "reserved (unfinished)" in listed.stdout and "unfinished reservation" in listed.stdout
    refused = cli("ledger", "resolve", run_id[:10], "--commit", "--reason", "x", "--ledger", ledger)
    assert refused.code == 2 and "not published" in refused.stderr
    done = cli("ledger", "resolve", run_id[:10], "--void", "--reason", "killed before any noise (ops ticket 42)",
               "--by", "Ops On Call", "--ledger", ledger)
    assert done.code == 0 and "voided" in done.stdout, done
    state = state_of(ledger, "acs")
    [record] = state.runs
    assert state.spent == PureDP(0) and record.state == "voided"
    assert record.reason == "killed before any noise (ops ticket 42)"
    shown = json.loads(cli("ledger", "--ledger", ledger, "--json").stdout)["datasets"][0]["releases"][0]
    assert shown["state"] == "voided" and shown["reason"].startswith("killed")
    again = cli("ledger", "resolve", run_id, "--void", "--reason", "x", "--ledger", ledger)
    assert again.code == 2 and "voided, not an unfinished reservation" in again.stderr


def test_resolve_refuses_to_void_staged_outputs_and_fails_them(tmp_path, cli):
    ledger, run_id = _crashed(tmp_path)
    staging = tmp_path / "out" / ".staging" / f"acs-crashed.{run_id}"
    (staging / "tables").mkdir(parents=True)
    (staging / "tables" / "t.csv").write_text("count\n12\n")
    refused = cli("ledger", "resolve", run_id, "--void", "--reason", "x", "--ledger", ledger)
    assert refused.code == 2 and "noise was drawn" in refused.stderr and staging.exists()
    failed = cli("ledger", "resolve", run_id, "--fail", "--reason", "killed mid-publication", "--ledger", ledger)
    assert failed.code == 0 and "failed" in failed.stdout and not staging.exists()
    state = state_of(ledger, "acs")
    assert state.spent == PureDP(Fraction(1, 2)) and state.runs[0].state == "failed"


def test_resolve_commits_a_published_release(tmp_path, cli):
    ledger, run_id = _crashed(tmp_path)
    final = tmp_path / "out" / "acs-crashed"
    final.mkdir()
    (final / "manifest.json").write_text(json.dumps({"run_id": "someone-else"}))
    refused = cli("ledger", "resolve", run_id, "--commit", "--reason", "x", "--ledger", ledger)
    assert refused.code == 2  # another run's manifest is no proof
    voided = cli("ledger", "resolve", run_id, "--void", "--reason", "another run published there", "--ledger", ledger)
    assert voided.code == 0, voided  # this run's outputs never appeared
    ledger2, run_id2 = _crashed(tmp_path, release="acs-crashed-2")
    final2 = tmp_path / "out" / "acs-crashed-2"
    final2.mkdir()
    (final2 / "manifest.json").write_text(json.dumps({"run_id": run_id2}))
    voided = cli("ledger", "resolve", run_id2, "--void", "--reason", "x", "--ledger", ledger2)
    assert voided.code == 2 and "outputs" in voided.stderr
    done = cli("ledger", "resolve", run_id2, "--commit", "--reason", "crashed after the rename", "--ledger", ledger2)
    assert done.code == 0 and "committed" in done.stdout, done
    assert next(r for r in state_of(ledger2, "acs").runs if r.run_id == run_id2).state == "committed"


def test_the_listing_shows_the_burn_down(tmp_path, cli):
    ledger = init_at(resolve_location(str(tmp_path / "l.sqlite")))
    for name, eps in (("r1", PureDP(Fraction(1))), ("r2", PureDP(Fraction(1, 2)))):
        run_id = ledger.reserve(dataset="acs", release=name, charges=[("t", eps)], spec_fingerprint="s",
                                lifetime_from_spec=PureDP(Fraction(4))).run_id
        ledger.commit(run_id)
    ledger.close()
    shown = cli("ledger", "--ledger", tmp_path / "l.sqlite")
    rows = [[cell.strip() for cell in line.split("│")] for line in shown.stdout.splitlines()
            if line.strip().startswith(("r1", "r2"))]
    assert [row[2:4] for row in rows] == [["1", "3"], ["3/2 (1.5)", "5/2 (2.5)"]]  # spent after, remaining
