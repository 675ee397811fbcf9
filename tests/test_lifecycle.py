"""The run lifecycle's own contracts, in-process: a bug found by the post-processing rehearsal is
reported as a bug (exit 1), not blamed on the spec, and nothing is spent; fault-injection
checkpoints do nothing unless a test installed a hook (the environment is never read)."""

from __future__ import annotations

import pytest

import dprelease.lifecycle.release as release  # bound here, before a test patches what it imports
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


@pytest.mark.parametrize("writer", ["write_table", "write_measurement"])
def test_a_staging_write_that_fails_in_its_thread_stops_the_run_with_its_error(tmp_path, cli, monkeypatch, writer):
    """Post-processing stages the tables and the noisy measurements in writer threads while it
    computes: a write that fails there fails the run with its own error (never lost in the
    thread), after the noise was drawn (so the run is failed, not voidable), and nothing is
    published."""
    real = getattr(release, writer)
    calls = []

    def failing(*args, **kwargs):  # the second file fails (the first written as usual)
        calls.append(args[1].name)
        if len(calls) == 2:
            raise OSError(28, "No space left on device (a test)")
        return real(*args, **kwargs)

    monkeypatch.setattr(release, writer, failing)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    out = tmp_path / "out"
    result = cli("run", _spec(tmp_path, "staged"), "--output-dir", out, "--orchestrator", "inline")
    assert result.code != 0, result
    assert "No space left on device (a test)" in result.stderr, result.stderr
    assert len(calls) == 2  # nothing written after the failure was seen
    assert not (out / "staged").exists()
    [record] = ledger_state("nist-acs-national-2019").runs
    assert record.state == "failed"  # the noise was drawn: recorded as failed, never voided


def test_every_measurement_is_staged_once_while_post_processing_runs(tmp_path, cli, monkeypatch):
    """The noisy measurements are staged during post-processing (overlapping its computing);
    publish writes none of them again, and the release holds each."""
    real, when = release.write_measurement, []

    def recording(spec, table, dims, plan, noisy, directory):  # type: ignore[no-untyped-def]
        when.append(((table.name, plan.level), run_stage()))
        return real(spec, table, dims, plan, noisy, directory)

    stages = []
    real_postprocess = release.ReleaseRun.postprocess

    def postprocess(self):  # type: ignore[no-untyped-def]
        stages.append(self)
        return real_postprocess(self)

    def run_stage() -> str:
        return stages[-1].stage

    monkeypatch.setattr(release, "write_measurement", recording)
    monkeypatch.setattr(release.ReleaseRun, "postprocess", postprocess)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    out = tmp_path / "out"
    result = cli("run", _spec(tmp_path, "overlapped"), "--output-dir", out, "--orchestrator", "inline")
    assert result.code == 0, result.stderr
    keys = [k for k, _ in when]
    assert len(keys) == len(set(keys)) and {s for _, s in when} == {"postprocess"}
    assert len(list((out / "overlapped").rglob("measurements/*"))) == len(keys) > 0


def test_post_processing_that_stops_stops_the_measurement_writer_and_leaves_no_staging(tmp_path, cli, monkeypatch):
    """Post-processing raises while the measurements' writer is slow: the writer stops before its
    next file, every write has ended when the error comes out (no thread left writing into the
    staging directory settling discards), and nothing of the staging is left."""
    import threading
    import time

    real, written = release.write_measurement, []

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        written.append(args[1].name)
        return real(*args, **kwargs)

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.1)  # the writer has started its first file
        raise RuntimeError("post-processing failed (a test)")

    monkeypatch.setattr(release, "write_measurement", slow)
    monkeypatch.setattr(release, "postprocess_release", failing)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    out = tmp_path / "out"
    result = cli("run", _spec(tmp_path, "stopped"), "--output-dir", out, "--orchestrator", "inline")
    assert result.code != 0 and "post-processing failed (a test)" in result.stderr, result
    assert not [t for t in threading.enumerate() if t.name.startswith("dprelease-staging")]
    assert len(written) == 1  # the file under way when post-processing stopped, and no other
    time.sleep(0.5)  # a writer left running would write its next file meanwhile
    assert len(written) == 1 and not (out / ".staging").exists() and not (out / "stopped").exists()
