"""The run lifecycle's own contracts, in-process: a bug found by the post-processing rehearsal is
reported as a bug (exit 1), not blamed on the spec, and nothing is spent; fault-injection
checkpoints do nothing unless a test installed a hook (the environment is never read)."""

from __future__ import annotations

import pytest

from dprelease import faults
from dprelease.errors import ExitCode, InternalError
from tests.test_run import _spec, ledger_state


def test_a_bug_in_the_post_processing_rehearsal_is_an_internal_error(tmp_path, cli, monkeypatch):
    import dprelease.postprocess

    def broken(*args, **kwargs):
        raise ValueError("a broken invariant")

    monkeypatch.setattr(dprelease.postprocess, "postprocess_release", broken)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    result = cli("run", _spec(tmp_path, "rehearsed"), "--output-dir", tmp_path / "out")
    assert result.code == ExitCode.INTERNAL == 1, result
    assert "internal error (a bug in dprelease" in result.stderr and "InternalError" in result.stderr, result.stderr
    assert "post-processing cannot handle this spec (ValueError: a broken invariant)" in result.stderr
    assert ledger_state("nist-acs-national-2019") is None  # refused before the reservation: nothing spent


def test_the_rehearsal_raises_internal_error_not_a_user_error(tmp_path, monkeypatch):
    import dprelease.postprocess
    from dprelease.lifecycle.refusals import _rehearse_postprocessing
    from dprelease.plan import plan_release
    from dprelease.spec import load_spec

    spec = load_spec(_spec(tmp_path, "rehearsed"))
    plan = plan_release(spec, None)
    _rehearse_postprocessing(spec, plan)  # a validated spec: post-processing handles it
    monkeypatch.setattr(dprelease.postprocess, "postprocess_release", lambda *a, **k: 1 / 0)
    with pytest.raises(InternalError, match="ZeroDivisionError"):
        _rehearse_postprocessing(spec, plan)


def test_a_checkpoint_does_nothing_without_a_hook(monkeypatch):
    monkeypatch.setenv("DPRELEASE_FAULT_AT", "load")  # what the crash tests' child reads; dprelease never does
    faults.checkpoint("load")  # returns at once
    reached: list[str] = []
    faults.install(reached.append)
    try:
        faults.checkpoint("load")
        faults.checkpoint("noise")
    finally:
        faults.install(None)
    faults.checkpoint("commit")
    assert reached == ["load", "noise"]
