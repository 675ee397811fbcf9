"""Floating point: the paths that publish non-integers (means) or values in units of a
granularity (sums, with Laplace or Gaussian noise) leak nothing through float patterns. The
noise is exact integer noise on integer measurements; every float is computed afterwards from
the noisy integers alone. So events about the representation of an output ("not a multiple
of the published granularity", "the float's last mantissa bit is set", "an integer") have
probabilities on neighbouring inputs within the mechanism's own e^ε, or zero on both."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprelease.measure import measure_counts, measure_mean
from dprelease.postprocess import mean_values
from dprelease.spec import load_spec
from dprelease.plan import plan_release
from tests.audits import tight
from tests.test_means import _neighbours, _single_cell_plan, write

N = 300_000


def last_bit(x: np.ndarray) -> np.ndarray:
    return (x.view(np.uint64) & np.uint64(1)) == 1


EVENTS = {
    "not a multiple of the granularity": lambda v, g: np.fmod(v, g) != 0,
    "last mantissa bit set": lambda v, g: last_bit(np.ascontiguousarray(v)),
    "an integer": lambda v, g: v == np.floor(v),
    "a hundredth of the granularity is not enough": lambda v, g: np.round(v, 2) != v,
}


@pytest.mark.parametrize("event", list(EVENTS))
def test_representation_events_of_a_published_mean_stay_within_epsilon(tmp_path, event):
    plan = _single_cell_plan(tmp_path, N)
    measure = load_spec(write(tmp_path)).tables[0].measure
    small, large = _neighbours(tmp_path)
    outputs = []
    for parts in (small, large):
        noisy = measure_mean(np.repeat(parts, N, axis=1), plan)
        means = mean_values(noisy, measure)[0]
        outputs.append(means[~np.isnan(means)])
    hits = [EVENTS[event](v, measure.granularity) for v in outputs]
    p, q = hits[0].mean(), hits[1].mean()
    if p == 0 or q == 0:
        assert p == q == 0, (event, p, q)  # impossible on both, or possible on both
        return
    estimate, se = tight(hits[0], hits[1])
    assert abs(estimate) <= float(plan.epsilon) + 6 * se, (event, estimate, se)


@pytest.mark.parametrize("definition", ["pure", "approx"])
def test_published_sums_are_multiples_of_the_granularity_on_every_input(tmp_path, definition):
    """A sum's noise is drawn in units of its granularity: every output is a multiple of it on
    both neighbours (probability 0 of the event on each), whatever the mechanism."""
    text = write(tmp_path).read_text()
    text = text.replace("measure: {mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip}",
                        "measure: {sum: PINCP, bounds: [0, 200000], granularity: 1000, missing: zero}")
    if definition == "approx":
        text = text.replace("definition: pure", "definition: approx").replace("budget: {epsilon: 2}",
                                                                               "budget: {epsilon: 2, delta: 1e-6}")
        text = text.replace("lifetime_budget: {epsilon: 4}", "lifetime_budget: {epsilon: 4, delta: 1e-5}")
    (tmp_path / "sums.yaml").write_text(text)
    spec = load_spec(tmp_path / "sums.yaml")
    plan = plan_release(spec, None).tables[0]
    assert plan.mechanism == ("discrete_gaussian" if definition == "approx" else "discrete_laplace")
    import dataclasses

    one = dataclasses.replace(plan, cells=N)
    for exact_units in (150, 350):  # neighbours: one row of 200,000 more
        out = measure_counts(np.full(N, exact_units, np.int64), one)
        assert out.dtype == np.int64 and not (out % 1000).any()
    assert math.isfinite(float(plan.scale))
