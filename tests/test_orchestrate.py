"""The Prefect layer: no retries, no cache, no stored results, nothing confidential in errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dprelease.plan.measurements import DiscreteLaplace
from dprelease.lifecycle.measure import measure_counts
from dprelease.postprocess import clamp_or_none as post_process
from dprelease.plan import TablePlan


@pytest.fixture(scope="module")
def orchestrate():
    from dprelease.serve import orchestrate

    return orchestrate


def test_every_task_and_the_flow_refuse_retries_caching_and_result_storage(orchestrate):
    from prefect.cache_policies import NO_CACHE

    for task in (orchestrate.load_task, orchestrate.measure_task, orchestrate.postprocess_task,
                 orchestrate.publish_task):
        assert task.retries == 0, task.name
        assert task.cache_policy is NO_CACHE, task.name
        assert task.persist_result is False, task.name
    assert orchestrate.release_flow.retries == 0
    assert orchestrate.release_flow.persist_result is False


def test_a_failing_step_shows_prefect_no_data(orchestrate):
    class Run:
        error = None

    def leaky(run):
        raise ValueError("row 17 has AGEP='123-45-6789'")

    orchestrate._RUNS["x"] = Run()
    try:
        with pytest.raises(orchestrate.StepFailed) as info:
            orchestrate._step("x", leaky)
    finally:
        run = orchestrate._RUNS.pop("x")
    assert "123-45-6789" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert "123-45-6789" in str(run.error)  # kept for the operator's terminal


def test_artifact_keys_are_valid(orchestrate):
    assert orchestrate.artifact_key("acs-demo_2019.v2") == "budget-report-acs-demo-2019-v2"


def test_measure_adds_noise_of_the_planned_scale_and_checks_the_shape():
    plan = TablePlan("t", Fraction(1), DiscreteLaplace(1, Fraction(1)), 200_000, 3, 3)
    counts = np.full(200_000, 50, dtype=np.int64)
    noisy = measure_counts(counts, plan)
    assert noisy.dtype == np.int64 and not np.array_equal(noisy, counts)
    assert abs(float(np.var(noisy - counts)) - 2 * np.exp(-1) / (1 - np.exp(-1)) ** 2) < 0.05
    with pytest.raises(ValueError, match="cells"):
        measure_counts(counts[:10], plan)
    with pytest.raises(TypeError):
        measure_counts(counts.astype(float), plan)


def test_post_processing():
    noisy = np.array([-3, 0, 5], dtype=np.int64)
    assert post_process(noisy, "clamp").tolist() == [0, 0, 5]
    assert post_process(noisy, "none").tolist() == [-3, 0, 5]
    assert noisy.tolist() == [-3, 0, 5]  # the raw measurement is never modified


def test_prefect_shutdown_chatter_stays_off_the_terminal():
    """An ephemeral server's consumer cancelled at exit logs a traceback on a prefect.server
    logger (seen once on a clean clone after a successful release): filtered, like run failures;
    our own warnings are not."""
    import logging

    from dprelease.serve.orchestrate import _NoRunTracebacks

    keep = _NoRunTracebacks()

    def record(name, level, exc=False):
        try:
            raise RuntimeError("cancelled")
        except RuntimeError:
            info = __import__("sys").exc_info() if exc else None
        return logging.LogRecord(name, level, __file__, 1, "Failed in consume_loop", None, info)

    assert not keep.filter(record("prefect.server.utilities.messaging.memory", logging.ERROR, exc=True))
    assert not keep.filter(record("prefect.events.worker", logging.ERROR, exc=True))
    assert keep.filter(record("prefect.server.api", logging.INFO))
    assert keep.filter(record("dprelease", logging.ERROR, exc=True))


def test_the_budget_artifact_has_a_row_for_every_kind_of_measurement(orchestrate, tmp_path):
    """The table artifact of a flow run (``budget_rows``) for a release of each kind that the
    feature modules publish inline (``release_env``, tests/README.md): pure counts at every
    geographic level with structural zeros and invariants, ρ (zCDP), (ε, δ), means, modes and
    sums. One row per measured table and level, each with its budget under the definition's
    symbol and its mechanism, and JSON as Prefect stores it."""
    import json
    from types import SimpleNamespace

    from dprelease.plan.planner import plan_release
    from dprelease.spec import load_spec
    from tests import test_approx, test_means, test_mode, test_sums, test_zcdp
    from tests.conftest import ROOT

    specs = [ROOT / "configs" / name for name in ("acs_demo.yaml", "acs_census.yaml", "acs_census_invariants.yaml")]
    for module in (test_means, test_mode, test_zcdp, test_approx, test_sums):
        directory = tmp_path / module.__name__.rsplit(".", 1)[1]
        directory.mkdir()
        specs.append(module.write(directory))
    symbols, mechanisms = set(), set()
    for path in specs:
        plan = plan_release(load_spec(path), None)
        rows = orchestrate.budget_rows(SimpleNamespace(plan=plan))
        assert len(rows) == len(plan.tables) > 0, path
        assert json.loads(json.dumps(rows)) == rows, path
        assert all(row[plan.symbol] and row["mechanism"] and row["cells"] for row in rows), (path, rows)
        symbols.add(plan.symbol)
        mechanisms.update(str(row["mechanism"]) for row in rows)
    assert symbols == {"ε", "ρ"} and mechanisms == {"discrete_laplace", "discrete_gaussian", "permute_and_flip"}
