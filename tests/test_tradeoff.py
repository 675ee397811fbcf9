"""`plan --tradeoff` and `plan --allocate`: the margin of error over a grid of budgets, and the
split of a release budget that minimises the weighted sum of expected squared errors. Both work
from the spec and the plan only (the report's curve from the manifest): nothing reads data or
spends budget. Each point is checked against the planner itself (the spec re-planned at that
budget), the report's curve against the manifest it reads, and the allocator against the closed
form, an independent numerical optimiser, and its own proposal pasted back into the spec."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import yaml

from dprelease.report import published as reporting
from dprelease.accounting import ZCDP, ApproxDP, PureDP
from dprelease.errors import OverBudgetError, UserError
from dprelease.publish.manifest import manifest
from dprelease.plan import plan_release
from dprelease.plan.allocation import allocate, closed_form, round_significant
from dprelease.plan.margins import margin_of
from dprelease.plan.measurements import DiscreteGaussian, DiscreteLaplace
from dprelease.plan.tradeoff import FACTORS, MEAN_AT, MEAN_NOTE, MODE_NOTE, QUANTILE_NOTE, plan_curves, scaled
from dprelease.spec import load_spec
from tests.conftest import ROOT, unpinned
from tests.test_operations import demo_spec
from tests.test_report_budgets import spec_path

C95 = Fraction(95, 100)

SUMS = """\
release: sums-{tag}
dataset:
  name: ds-sums
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{epsilon: 10}}
privacy: {{definition: pure, unit: {unit}}}
budget: {{epsilon: 2}}
columns:
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  AGEP: {{range: [0, 99]}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
tables:
  - {{name: income, group_by: [SEX], measure: {{sum: PINCP, bounds: [0, 200000], granularity: 100}}, epsilon: 0.7}}
  - {{name: capped, group_by: [SEX, AGE_GROUP], mechanism: truncated_geometric, upper: 100000, epsilon: 0.3}}
  - {{name: counts, group_by: [SEX, AGE_GROUP], epsilon: 1/3}}
"""


def sums_spec(tmp_path, unit="row", tag="a"):
    """Pure: a sum (granularity 100), a truncated geometric, a count of ε 1/3 (not a short decimal)."""
    path = tmp_path / f"sums-{tag}.yaml"
    path.write_text(SUMS.format(tag=tag, data=ROOT / "data" / "nist_acs" / "ma2019.csv", unit=unit))
    return path


@pytest.fixture
def specs(tmp_path):
    """Every kind of measurement: the demo and the census spec (geographic levels), pure / zCDP /
    (ε, δ) releases of Gaussian and Laplace counts, means and modes, sums and the truncated
    geometric, with a contribution bound."""
    census = tmp_path / "census.yaml"
    census.write_text(unpinned((ROOT / "configs" / "acs_census.yaml").read_text())
                      .replace("../data/nist_acs/", str(ROOT / "data" / "nist_acs") + "/")
                      .replace("domains/", str(ROOT / "configs" / "domains") + "/"))
    paths = {"demo": demo_spec(tmp_path), "census": census, "sums": sums_spec(tmp_path),
             "sums-bounded": sums_spec(tmp_path, "{id: SERIALNO, max_rows: 3}", "b")}
    paths.update({kind: spec_path(tmp_path, kind) for kind in ("pure", "zcdp", "approx")})
    return {name: load_spec(path) for name, path in paths.items()}


def scaled_spec(spec, factor):
    """The spec with every table's (and level's) ε or ρ times ``factor``; δ kept (approx)."""
    tables = tuple(dataclasses.replace(t, budget=scaled(t.budget, factor),
                                       level_budgets=tuple(scaled(b, factor) for b in t.level_budgets))
                   for t in spec.tables)
    return dataclasses.replace(spec, tables=tables)


# ---------------------------------------------------------------- the trade-off


def test_the_curve_at_the_spec_budget_is_the_plans_margin(specs):
    for name, spec in specs.items():
        plan = plan_release(spec, None)
        for confidence, margin in ((plan.confidence, "moe"), (C95, "moe95")):
            curves = plan_curves(plan, confidence)
            assert [c.key for c in curves] == [t.key for t in plan.tables]
            for c, t in zip(curves, plan.tables):
                assert c.budget == t.budget
                assert c.chosen is not None and c.chosen.budget == t.budget, (name, t.key)
                assert c.chosen.moe == _own_margin(t, confidence, margin), (name, t.key, c.chosen.moe)
                assert (c.note == MEAN_NOTE) == bool(t.parts)
                if t.mechanism == "permute_and_flip":  # a mode's count gap, a quantile's rank error
                    assert c.note in (MODE_NOTE, QUANTILE_NOTE) and c.chosen.moe > 0, (name, t.key)


def _own_margin(t, confidence, margin="moe95"):
    """What the trade-off's point shows for ``t``: its noise margin (counts and sums, the plan's
    ``moe``/``moe95``), a mean's margin at a cell of MEAN_AT rows (rounded up), a mode's gap or a
    quantile's rank error (:func:`dprelease.plan.margins.margin_of`)."""
    own = margin_of(t, confidence)
    if own.kind == "mean":
        return math.ceil(own.at_count(MEAN_AT))
    if own.kind in ("mode", "quantile"):
        return own.value
    return getattr(t, margin)


def test_every_point_is_what_the_planner_builds_at_that_budget(specs):
    """The spec re-planned with every budget scaled by each factor gives each point's margin; where
    the planner refuses the budget (no Gaussian noise at that (ε, δ)), the point has none."""
    refused = 0
    for name, spec in specs.items():
        curves = plan_curves(plan_release(spec, None), C95)
        for i, factor in enumerate(FACTORS):
            try:
                replanned = plan_release(scaled_spec(spec, factor), None).tables
            except UserError:
                assert any(c.points[i].moe is None for c in curves), (name, factor)
                refused += 1
                continue
            for c, t in zip(curves, replanned):
                assert c.points
                assert c.points[i].budget == t.budget
                assert c.points[i].moe == _own_margin(t, C95), (name, t.key, factor)
    assert refused == 1  # the approx mean at ε/8: its sum part's (ε, δ) leaves no room for Gaussian noise


def test_margins_shrink_as_the_budget_grows(specs):
    for spec in specs.values():
        for c in plan_curves(plan_release(spec, None)):
            moes = [p.moe for p in c.points if p.moe is not None]
            amounts = [p.budget.amount for p in c.points]
            assert amounts == sorted(amounts) and len(set(amounts)) == len(amounts)
            assert all(a >= b for a, b in zip(moes, moes[1:])), (c.key, moes)
            if moes:
                assert moes[0] > 4 * moes[-1] or moes[-1] == 0, (c.key, moes)  # 64× the budget: far smaller


def test_an_approx_curve_moves_epsilon_at_the_tables_own_delta(specs):
    curves = plan_curves(plan_release(specs["approx"], None))
    gaussian = next(c for c in curves if c.mechanism == "discrete_gaussian")
    assert {p.budget.delta for p in gaussian.points} == {gaussian.budget.delta} and gaussian.budget.delta > 0
    assert [p.budget.epsilon for p in gaussian.points] == [gaussian.budget.epsilon * f for f in FACTORS]


def test_the_report_curve_is_computed_from_the_manifest_alone(specs):
    """From the manifest's mechanism, sensitivity, scale and granularity: at the published budget
    it is the manifest's moe95, and at every budget the plan's curve; a manifest whose figures
    do not come back (altered) shows no curve rather than a wrong one."""
    for name, spec in specs.items():
        plan = plan_release(spec, None)
        published = manifest(spec, plan, "run-1", "2026-11-26T00:00:00+00:00")
        curves = reporting.tradeoff_curves(published)
        for c, entry, t in zip(curves, published["tables"], plan.tables):
            assert c.chosen is not None and c.chosen.moe == _own_margin(t, C95), (name, c.key)
            if entry["mechanism"] != "permute_and_flip" and "parts" not in entry:
                assert c.chosen.moe == entry["moe95"], (name, c.key)
        assert curves == list(plan_curves(plan, C95)), name
        assert reporting.tradeoff_curves(published, plan.confidence) == list(plan_curves(plan)), name  # the spec's
    altered = manifest(specs["demo"], plan_release(specs["demo"], None), "run-1", "2026-11-26T00:00:00+00:00")
    altered["tables"][0]["scale"] = "3"  # not the noise its ε = 1/4 gives
    altered["tables"][1]["moe95"] = 11  # not its noise's margin
    first, second, third = reporting.tradeoff_curves(altered)[:3]
    assert first.points == () and second.points == () and first.note == reporting.NOT_REPRODUCIBLE
    assert third.chosen is not None and third.chosen.moe == altered["tables"][2]["moe95"]


def test_plan_tradeoff_adds_a_section_and_changes_nothing_else(specs, cli, tmp_path):
    path = demo_spec(tmp_path)
    plain, shown = cli("plan", path), cli("plan", path, "--tradeoff")
    assert plain.code == shown.code == 0
    assert shown.stdout.startswith(plain.stdout) and "Privacy–accuracy trade-off" not in plain.stdout
    section = shown.stdout[len(plain.stdout):].splitlines()
    plan = plan_release(load_spec(path), None)
    for t in plan.tables:
        at = section.index(f"  {t.key} ({t.mechanism})")
        budgets, moes = section[at + 1].split(), section[at + 2].split()
        assert budgets[0] == "ε" and moes[:2] == ["±", "MoE"]
        assert budgets[4] == f"[{t.budget.amount.numerator / t.budget.amount.denominator:g}]"  # the spec's: marked
        assert moes[5] == f"[{t.moe}]"
    as_json, both = json.loads(cli("plan", path, "--json").stdout), json.loads(cli("plan", path, "--json",
                                                                                    "--tradeoff").stdout)
    tradeoff = both.pop("tradeoff")
    assert both == as_json
    assert [t["moe"] for t in tradeoff["tables"]] == [t.moe for t in plan.tables]
    assert [p["budget"] for p in tradeoff["tables"][2]["points"]] == [
        {"epsilon": str(Fraction(1, 5) * f)} for f in FACTORS]


# ---------------------------------------------------------------- the allocator


def _ideal(plan, weights=None):
    """The closed form, computed here in floats from the plan: εᵢ ∝ (wᵢcᵢΔᵢ²)^(1/3) (pure),
    ρᵢ ∝ (wᵢcᵢkᵢ)^(1/2) (zCDP), over the measurements that are not kept."""
    weights = weights or {}
    zcdp = plan.release_budget.kind == "zcdp"
    split = {}
    for key, coefficient in _coefficients(plan).items():
        split[key] = float(weights.get(key.split("/")[0], 1) * coefficient)
    kept = sum(float(t.budget.amount) for t in plan.tables if t.key not in split)
    left = float(plan.release_budget.amount) - kept
    p = 1 / 2 if zcdp else 1 / 3
    total = sum(a ** p for a in split.values())
    return {key: left * a ** p / total for key, a in split.items()}, left


@pytest.mark.parametrize("name,weights", [("demo", {}), ("demo", {"race_by_hispanic_origin": Fraction(5, 2)}),
                                          ("census", {}), ("zcdp", {}), ("approx", {}), ("sums", {}),
                                          ("sums-bounded", {"income": Fraction(1, 10**6)})])
def test_the_split_fits_exactly_and_is_the_closed_form_rounded_down(specs, name, weights):
    plan = plan_release(specs[name], None)
    a = allocate(plan, weights)
    assert a.total.amount <= plan.release_budget.amount  # exact Fractions
    assert sum((s.budget.amount for s in a.shares), Fraction(0)) == a.total.amount
    if isinstance(plan.release_budget, ApproxDP):  # δ is untouched: the Gaussian tables keep theirs
        assert a.total.delta == plan.total.delta
    ideal, _ = _ideal(plan, weights)
    for s in a.shares:
        if s.key not in ideal:
            assert s.role == "kept" and s.budget == s.spec_budget and s.why
            continue
        assert s.role == "formula"
        amount = s.budget.amount
        unit = Fraction(10) ** (math.floor(math.log10(amount)) - 2)  # one in the 3rd significant digit
        assert round_significant(amount, 3, up=False) == amount  # a short decimal
        assert amount <= ideal[s.key] * (1 + 1e-12) and ideal[s.key] - float(amount) < float(unit), (s.key, amount)


def test_the_closed_form_is_the_minimum(specs):
    """The closed form is the minimum of Σ wᵢcᵢ·2Δᵢ²/εᵢ² (pure; Σ cᵢkᵢ/ρᵢ under zCDP) subject to
    Σ εᵢ = E, shown twice: exactly, by its optimality conditions (the objective is strictly convex
    on the positive orthant and the constraint linear, so a positive feasible point where every
    ∂f/∂xᵢ is the same multiplier is the unique minimum), and by an independent optimiser that
    reads the objective's values only (:func:`_minimum_by_bisection`: bracketing methods whose
    convergence is guaranteed, not an iterative solver's luck: SLSQP, used here before, stopped
    early under scipy 1.17); and no exchange of budget between two tables lowers the objective."""

    for name, exponent in (("census", Fraction(1, 3)), ("zcdp", Fraction(1, 2)), ("demo", Fraction(1, 3))):
        plan = plan_release(specs[name], None)
        _, left = _ideal(plan)
        coefficients = {k: v * (3 if k.startswith("persons_by_race_hispanic") else 1)  # a weight
                        for k, v in _coefficients(plan).items()}
        power = 2 if exponent == Fraction(1, 3) else 1  # variance ∝ 1/ε² (pure), 1/ρ (zCDP)
        keys = list(coefficients)
        budget = Fraction(left).limit_denominator(10**12)
        exact = closed_form(coefficients, budget, exponent)

        # Exactly (Fractions): feasible, positive, and ∂f/∂xᵢ = -power·aᵢ/xᵢ^(power+1) the same for
        # every i. closed_form works to 60 significant digits, so both hold to 1e-50 relative.
        assert all(exact[k] > 0 for k in keys)
        assert abs(sum(exact.values()) - budget) <= budget * Fraction(1, 10**50)
        multipliers = [power * coefficients[k] / exact[k] ** (power + 1) for k in keys]
        assert max(multipliers) - min(multipliers) <= min(multipliers) * Fraction(1, 10**50), name
        # and the conditions are not vacuous: the equal split violates them (its multipliers differ)
        equal = [power * coefficients[k] / (budget / len(keys)) ** (power + 1) for k in keys]
        assert max(equal) - min(equal) > min(equal) * Fraction(1, 100), name

        # Independently, from the objective's values only (no derivative, no closed form)
        a = np.array([float(coefficients[k]) for k in keys])

        def objective(x):
            return float((a / x ** power).sum())

        found = _minimum_by_bisection([lambda x, ai=ai: ai / x ** power for ai in a], left)
        assert abs(found.sum() - left) <= 1e-6 * left and (found > 0).all(), (name, found)
        best = np.array([float(exact[k]) for k in keys])
        assert np.allclose(found, best, rtol=1e-4), (name, found, best)
        feasible = found * (left / found.sum())
        assert objective(best) <= objective(feasible) * (1 + 1e-12), name  # nothing found is lower
        for i in range(len(keys)):
            for j in range(len(keys)):
                if i != j:
                    moved = best.copy()
                    moved[i] += 1e-4 * left
                    moved[j] -= 1e-4 * left
                    assert objective(moved) > objective(best)


def _minimum_by_bisection(terms, total: float, tolerance: float = 1e-12) -> np.ndarray:
    """argmin Σᵢ fᵢ(xᵢ) subject to Σ xᵢ = ``total``, x > 0, for strictly convex, decreasing fᵢ, by
    methods that cannot fail to converge: for a price λ each xᵢ(λ) = argmin fᵢ(x) + λx is found by
    golden-section search on (0, total] (a convex function of one variable: the bracket shrinks by
    0.618 a step, whatever the function), and Σ xᵢ(λ), decreasing in λ, is brought to ``total`` by
    bisection on log λ. Only fᵢ's values are read. Each xᵢ to ``tolerance`` × ``total``."""
    def argmin(f, price: float) -> float:
        lo, hi = total * 1e-15, total
        golden = (math.sqrt(5) - 1) / 2
        while hi - lo > tolerance * total:
            left, right = hi - golden * (hi - lo), lo + golden * (hi - lo)
            if f(left) + price * left <= f(right) + price * right:
                hi = right
            else:
                lo = left
        return (lo + hi) / 2

    def spent(log_price: float) -> float:
        return sum(argmin(f, math.exp(log_price)) for f in terms)

    low, high = -1.0, 1.0  # a bracket: Σ xᵢ too large at low (cheap budget), too small at high
    while spent(low) < total:
        low *= 2
    while spent(high) > total:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if spent(middle) > total:
            low = middle
        else:
            high = middle
        if high - low < 1e-13:
            break
    return np.array([argmin(f, math.exp((low + high) / 2)) for f in terms])


def _coefficients(plan):
    """cᵢΔᵢ² (pure; the Laplace tables of an approx release), cᵢkᵢ (zCDP: kᵢ = Δ₂ᵢ²/2 for the
    Gaussian, Δᵢ² for a pure mechanism) of every measurement that is not a mode or a mean."""
    zcdp = plan.release_budget.kind == "zcdp"
    return {t.key: t.measured_cells * (Fraction(t.shown_sensitivity, 2) if t.mechanism == "discrete_gaussian"
                                       else Fraction(t.shown_sensitivity) ** 2)
            for t in plan.tables if t.mechanism != "permute_and_flip" and not t.parts
            and (zcdp or t.mechanism != "discrete_gaussian")}


def _pasted(spec_file, allocation, tmp_path, symbol="epsilon"):
    """The spec with the proposal's fragment pasted in (its tables' budgets replaced), loaded."""
    text = yaml.safe_load(spec_file.read_text())
    proposed = {}
    for s in allocation.shares:
        proposed.setdefault(s.name, {})[s.level] = str(s.budget.amount)
    for t in text["tables"]:
        levels = proposed[t["name"]]
        t.pop("epsilon", None), t.pop("rho", None)
        t[symbol] = levels[None] if None in levels else dict(levels)
    out = tmp_path / ("pasted-" + spec_file.name)
    out.write_text(yaml.safe_dump(text, sort_keys=False))
    return load_spec(out)


@pytest.mark.parametrize("name", ["demo", "census", "zcdp", "sums"])
def test_the_proposal_pasted_into_the_spec_fits_and_beats_the_specs_split(specs, name, tmp_path):
    """The weighted squared error Σ wᵢcᵢ·Varᵢ, recomputed from the plan of the spec with the
    proposal pasted in, is below the spec's own split's and an equal split's (neither of these
    specs splits optimally), and the proposal's margins are that plan's."""
    spec = specs[name]
    plan = plan_release(spec, None)
    a = allocate(plan)
    replanned = plan_release(_pasted(spec.source, a, tmp_path, "rho" if name == "zcdp" else "epsilon"), None)
    assert replanned.fits_release and replanned.total.amount == a.total.amount
    split = {s.key for s in a.shares if s.role != "kept"}

    def error(p):
        return sum(t.measured_cells * t.noise.variance() for t in p.tables if t.key in split)

    assert error(replanned) == pytest.approx(a.error, rel=1e-12)
    assert error(plan) == pytest.approx(a.spec_error, rel=1e-12)
    assert a.error < a.spec_error and a.error < a.equal_error
    assert [s.moe for s in a.shares] == [_own_margin(t, replanned.confidence, "moe") for t in replanned.tables]
    assert [s.moe for s in a.shares if s.role != "kept"] == [t.moe for t in replanned.tables if t.key in split]


def test_an_optimal_spec_is_left_as_it_is(tmp_path):
    """Two tables alike: the equal split is optimal, and the proposal is that split."""
    path = tmp_path / "twins.yaml"
    path.write_text(sums_spec(tmp_path).read_text().replace(
        "  - {name: income, group_by: [SEX], measure: {sum: PINCP, bounds: [0, 200000], granularity: 100}, epsilon: 0.7}\n"
        "  - {name: capped, group_by: [SEX, AGE_GROUP], mechanism: truncated_geometric, upper: 100000, epsilon: 0.3}\n"
        "  - {name: counts, group_by: [SEX, AGE_GROUP], epsilon: 1/3}\n",
        "  - {name: one, group_by: [SEX, AGE_GROUP], epsilon: 1}\n  - {name: two, group_by: [AGE_GROUP, SEX], epsilon: 1}\n"))
    a = allocate(plan_release(load_spec(path), None))
    assert [s.budget for s in a.shares] == [PureDP(Fraction(1))] * 2 and a.unspent == 0
    assert a.error == a.spec_error == a.equal_error


def test_targets_are_met_with_the_least_budget_and_the_rest_share_what_remains(specs):
    plan = plan_release(specs["demo"], None)
    a = allocate(plan, targets={"puma_by_sex": 8}, weights={"race_by_hispanic_origin": Fraction(2)})
    target = next(s for s in a.shares if s.name == "puma_by_sex")
    assert target.role == "target" and target.moe <= 8
    less = DiscreteLaplace(1, target.budget.amount - Fraction(1, 1000))
    assert less.margin(plan.confidence) > 8  # the least ε to 3 significant digits
    rest = {k: v for k, v in _ideal(plan, {"race_by_hispanic_origin": 2})[0].items() if k != "puma_by_sex"}
    scale = float(plan.release_budget.amount - target.budget.amount) / sum(rest.values())
    for s in a.shares:
        if s.role == "formula":
            assert 0 <= rest[s.key] * scale - float(s.budget.amount) < 1e-3
    assert a.total.amount <= 1

    every = allocate(plan, targets={t.name: 12 for t in plan.tables})  # targets only: the rest is left unspent
    assert {s.role for s in every.shares} == {"target"} and all(s.moe <= 12 for s in every.shares)
    assert 0 < every.unspent == 1 - sum(s.budget.amount for s in every.shares)

    z = plan_release(specs["zcdp"], None)  # a Gaussian's target: the least ρ, 3 significant digits
    b = allocate(z, targets={"by_sex_age": 2})
    gaussian = next(s for s in b.shares if s.name == "by_sex_age")
    noise = next(t for t in z.tables if t.name == "by_sex_age").noise
    assert isinstance(noise, DiscreteGaussian) and gaussian.moe <= 2 and gaussian.budget.amount < Fraction(3, 10)
    unit = Fraction(10) ** (math.floor(math.log10(gaussian.budget.amount)) - 2)
    from dprelease.plan.tradeoff import noise_at

    assert noise_at(noise, ZCDP(gaussian.budget.amount - unit)).margin(z.confidence) > 2
    assert b.total.amount <= z.release_budget.amount


def test_refusals(specs):
    demo, z = plan_release(specs["demo"], None), plan_release(specs["zcdp"], None)
    with pytest.raises(OverBudgetError, match=r"the targets alone need ε = .* over by"):
        allocate(demo, targets={"puma_by_sex": 2, "marital_status_by_sex": 1})
    every = {t.name: 10 for t in demo.tables}
    with pytest.raises(OverBudgetError, match="over by"):  # ±10 needs ε ≈ 0.3 each: 1.2 in all
        allocate(demo, targets=every)
    with pytest.raises(UserError, match="no table 'nope'.*its tables: puma_by_sex"):
        allocate(demo, weights={"nope": Fraction(1)})
    with pytest.raises(UserError, match="mode_race keeps its spec ρ: a mode or quantile"):
        allocate(z, weights={"mode_race": Fraction(2)})
    with pytest.raises(UserError, match="mean_income keeps its spec ρ: a mean"):
        allocate(z, targets={"mean_income": 1000})
    only_kept = dataclasses.replace(z, tables=tuple(t for t in z.tables if t.parts or t.mechanism == "permute_and_flip"))
    with pytest.raises(UserError, match="nothing to allocate"):
        allocate(only_kept)
    squeezed = dataclasses.replace(z, release_budget=ZCDP(Fraction(15, 100)))  # the mean and the mode: ρ 0.15
    with pytest.raises(OverBudgetError, match="nothing is left to split"):
        allocate(squeezed)


def test_the_allocate_command_prints_a_spec_fragment(cli, tmp_path):
    path = demo_spec(tmp_path)
    shown = cli("plan", path, "--allocate", "--weights", "race_by_hispanic_origin=2", "--target-moe", "puma_by_sex=8")
    assert shown.code == 0, shown
    fragment = yaml.safe_load(shown.stdout)  # the whole text is YAML: the rest are comments
    a = allocate(plan_release(load_spec(path), None), {"race_by_hispanic_origin": Fraction(2)}, {"puma_by_sex": 8})
    assert fragment == {"tables": [{"name": s.name, "epsilon": float(s.budget.amount)} for s in a.shares]}
    assert "nothing is written or spent" in shown.stdout and "target ±8" in shown.stdout
    as_json = json.loads(cli("plan", path, "--allocate", "--json").stdout)
    assert Fraction(as_json["total"]["epsilon"]) <= 1 and as_json["exponent"] == "1/3"
    census = tmp_path / "census.yaml"
    census.write_text(unpinned((ROOT / "configs" / "acs_census.yaml").read_text())
                      .replace("../data/nist_acs/", str(ROOT / "data" / "nist_acs") + "/")
                      .replace("domains/", str(ROOT / "configs" / "domains") + "/"))
    levels = yaml.safe_load(cli("plan", census, "--allocate").stdout)["tables"][0]["epsilon"]
    assert set(levels) == {"root", "STATE", "PUMA"}  # a geographic table: per level


@pytest.mark.parametrize("args,words,code", [
    (["--allocate", "--target-moe", "puma_by_sex=2,marital_status_by_sex=1"], "over by", 3),
    (["--allocate", "--target-moe", "10"], "name the tables", 2),
    (["--target-moe", "puma_by_sex=10"], "are for --allocate", 2),
    (["--weights", "puma_by_sex=2"], "weights are for --allocate", 2),
    (["--allocate", "--weights", "puma_by_sex"], "is not TABLE=VALUE", 2),
    (["--allocate", "--weights", "puma_by_sex=0"], "greater than 0", 2),
    (["--allocate", "--weights", "puma_by_sex=1,puma_by_sex=2"], "named twice", 2),
    (["--allocate", "--weights", "nope=1"], "no table 'nope'", 2),
    (["--allocate", "--approve"], "without --confidence, --target-moe or --allocate", 2),
    (["--tradeoff", "--allocate"], "trade-off alone", 2),
    (["--target-moe", "x"], "not a margin of error", 2),
])
def test_the_commands_refuse_clearly(cli, tmp_path, args, words, code):
    result = cli("plan", demo_spec(tmp_path), *args)
    assert result.code == code and words in result.output, result


def test_round_significant():
    assert round_significant(Fraction(26967, 100000), 3, up=False) == Fraction(269, 1000)
    assert round_significant(Fraction(26967, 100000), 3, up=True) == Fraction(27, 100)
    assert round_significant(Fraction(1, 3), 3, up=False) == Fraction(333, 1000)
    assert round_significant(Fraction(1, 3), 3, up=True) == Fraction(334, 1000)
    assert round_significant(Fraction(24690, 10), 3, up=False) == 2460
    assert round_significant(Fraction(5, 10000), 3, up=True) == Fraction(5, 10000)  # already short: unchanged
    with pytest.raises(ValueError):
        round_significant(Fraction(0), 3, up=False)
