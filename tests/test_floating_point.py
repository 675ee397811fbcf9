"""Floating point: the paths that publish non-integers (means) or values in units of a
granularity (sums, with Laplace or Gaussian noise) leak nothing through float patterns. The
noise is exact integer noise on integer measurements; every float is computed afterwards from
the noisy integers alone. So events about the representation of an output ("not a multiple
of the published granularity", "the float's last mantissa bit is set", "an integer") have
probabilities on neighbouring inputs within the mechanism's own e^ε, or zero on both."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dprelease.lifecycle.measure import measure_counts, measure_mean
from dprelease.postprocess import mean_values
from dprelease.spec import load_spec
from dprelease.plan import plan_release
from tests.audits import tight
from tests.test_means import _neighbours, write

N = 300_000


def last_bit(x: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(x).view(np.uint64) & np.uint64(1)) == 1


EVENTS = {  # about the representation of a published mean (NaN: published empty)
    "empty (NaN)": lambda v: np.isnan(v),
    "not a whole number": lambda v: ~np.isnan(v) & (np.fmod(v, 1) != 0),
    "last mantissa bit set": lambda v: ~np.isnan(v) & last_bit(v),
    "more than 2 decimals": lambda v: ~np.isnan(v) & (np.round(v, 2) != v),
    "an odd number of hundredths": lambda v: ~np.isnan(v) & (np.round(v * 100) % 2 == 1),
}


def mean_setup(tmp_path, definition: str):  # type: ignore[no-untyped-def]
    """A one-cell mean over [0, 2000] of granularity 1 (published to the hundredth: non-integers), and the exact
    (centred sum, count) parts of two neighbouring datasets: one row at the upper bound more."""
    def edit(text: str) -> str:
        text = text.replace("bounds: [0, 200000], granularity: 1000", "bounds: [0, 2000], granularity: 1")
        if definition == "approx":
            text = text.replace("budget: {epsilon: 2}", "budget: {epsilon: 2, delta: 1e-6}").replace(
                "lifetime_budget: {epsilon: 4}", "lifetime_budget: {epsilon: 4, delta: 1e-5}")
        return text

    parts = _neighbours(tmp_path, (200, 800, 1500), 2000, edit, definition)
    spec = load_spec(tmp_path / "means.yaml")
    plan = plan_release(spec, None).tables[0]
    plan = dataclasses.replace(plan, cells=N)
    return spec.tables[0].measure, plan, parts


@pytest.mark.parametrize("definition", ["pure", "approx"])
def test_representation_events_of_a_published_mean_stay_within_epsilon(tmp_path, definition):
    """Every event's probabilities on the two neighbours are within e^ε of each other (ε the
    mean's; under approx its δ ≤ 1e-6 is negligible at these sample sizes), or zero on both."""
    measure, plan, (small, large) = mean_setup(tmp_path, definition)
    assert plan.mechanism == ("discrete_gaussian" if definition == "approx" else "discrete_laplace")
    outputs = [mean_values(measure_mean(np.repeat(parts, N, axis=1), plan), measure)[0] for parts in (small, large)]
    assert np.nanmax(np.abs(np.fmod(outputs[0], 1))) > 0  # the path really publishes non-integers
    for name, event in EVENTS.items():
        hits = [event(v) for v in outputs]
        p, q = hits[0].mean(), hits[1].mean()
        if p == 0 or q == 0:
            assert p == q == 0, (name, p, q)
            continue
        estimate, se = tight(hits[0], hits[1])
        assert abs(estimate) <= float(plan.budget.amount) + 6 * se, (name, estimate, se)


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
    one = dataclasses.replace(plan, cells=N)
    for exact_units in (150, 350):  # neighbours: one row of 200,000 more
        out = measure_counts(np.full(N, exact_units, np.int64), one)
        assert out.dtype == np.int64 and not (out % 1000).any()
    assert math.isfinite(float(plan.scale))


def event_table() -> str:
    """The figures of docs/reliability.md: each event's probability on both neighbours."""
    import tempfile
    from pathlib import Path

    lines = ["| definition | event | P(neighbour without the row) | P(with it) | ε̂ ± se | table ε |",
             "|---|---|---:|---:|---:|---:|"]
    for definition in ("pure", "approx"):
        measure, plan, (small, large) = mean_setup(Path(tempfile.mkdtemp()), definition)
        outputs = [mean_values(measure_mean(np.repeat(parts, N, axis=1), plan), measure)[0]
                   for parts in (small, large)]
        for name, event in EVENTS.items():
            hits = [event(v) for v in outputs]
            p, q = hits[0].mean(), hits[1].mean()
            shown = "both 0" if p == q == 0 else "{:.4f} ± {:.4f}".format(*tight(hits[0], hits[1]))
            lines.append(f"| {definition} | {name} | {p:.4f} | {q:.4f} | {shown} | {float(plan.budget.amount):g} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(event_table())
