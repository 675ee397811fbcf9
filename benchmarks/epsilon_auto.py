"""``rho: auto`` (dprelease/plan/split.py) on configs/acs_census.yaml's two tables under zCDP at
ρ = 0.5 (geography nation > STATE > PUMA, both tables in one consistency group), against the
matrix-mechanism SVD lower bound computed here (issue 29: goal ≤ 1.01× the bound).

    python benchmarks/epsilon_auto.py [--rho 0.5] [--trials 200] [--epsilon 1]   # ~15 s

The spec is acs_census.yaml with ``privacy: zcdp`` and ``budget: {rho: RHO}``; each row writes the
tables' ρ per level (or ``rho: auto``) into a copy under ``benchmarks/data/epsilon_auto/``
(git-ignored) and plans it (``plan_release``: no data is read). Rows:

* equal: ρ/6 to each of the 6 measurements (2 tables × 3 levels);
* spec's levels: ρ/2 per table, split over root/STATE/PUMA as the shipped spec splits its ε
  (0.05 : 0.15 : 0.3);
* ``plan --allocate``: the measurements' own closed form (``allocation.allocate``, what the
  command proposes), rounded as it rounds;
* auto: ``rho: auto``, the planner's split;

each with the weighted expected squared error of the *published* (GLS) estimates, summed over
every published cell of both tables at every level, from the plan's own noise variances (σ² as
the sampler draws it) and the closed form of ``split.py``, and as a ratio to the SVD bound
(Δ₂²·(Σσᵢ(W))²/(2ρ·n) over the domain PUMA × SEX × AGE_GROUP × RAC1P × HISP). A check of the
closed form against the estimator the release runs: ``--trials`` draws of Gaussian noise at
each measurement's variance (numpy, seeded: a simulation, not a release) through
``postprocess.gls.estimate``; the empirical mean squared error over the formula's (its standard
error beside it). Then the same rows under pure ε-DP at ``--epsilon`` (no bound: it is an L2
bound), as ratios to the auto split.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dprelease.plan import split, workload  # noqa: E402
from dprelease.plan.allocation import allocate  # noqa: E402
from dprelease.plan.planner import plan_release  # noqa: E402
from dprelease.postprocess import gls  # noqa: E402
from dprelease.spec import load_spec  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "epsilon_auto"
TABLES = ("persons_by_sex_age_group", "persons_by_race_hispanic")
LEVELS = ("root", "STATE", "PUMA")


def spec_text(rho: Fraction, budgets: dict[str, dict[str, Fraction]] | None, pure: bool = False) -> str:
    """acs_census.yaml under zCDP at ``rho`` (pure: ε-DP at ε = ``rho``), each table's budget per
    level as given (None: auto)."""
    text = (ROOT / "configs" / "acs_census.yaml").read_text()
    text = text.replace("domain_file: domains/", f"domain_file: {ROOT / 'configs' / 'domains'}/")
    text = text.replace("path: ../data/", f"path: {ROOT / 'data'}/")
    cost = "epsilon" if pure else "rho"
    if not pure:
        text = re.sub(r"privacy: \{definition: pure, unit: row\}", "privacy: {definition: zcdp, unit: row, delta: 1e-6}",
                      text)
    text = re.sub(r"budget: \{epsilon: 1\}", f"budget: {{{cost}: {rho}}}", text)
    text = re.sub(r"lifetime_budget: \{epsilon: 4\}", f"lifetime_budget: {{{cost}: 100}}", text)
    parts = re.split(r"(    epsilon: \{root: 0.05, STATE: 0.15, PUMA: 0.3\})", text)
    out, k = [], 0
    for piece in parts:
        if piece.startswith("    epsilon: {root"):
            name = TABLES[k]
            k += 1
            if budgets is None:
                out.append(f"    {cost}: auto")
            else:
                levels = ", ".join(f'{lv}: "{budgets[name][lv]}"' for lv in LEVELS)
                out.append(f"    {cost}: {{{levels}}}")
        else:
            out.append(piece)
    return "".join(out)


def planned(name: str, rho: Fraction, budgets: dict[str, dict[str, Fraction]] | None,  # type: ignore[no-untyped-def]
            pure: bool = False):
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"{name}{'_pure' if pure else ''}.yaml"
    path.write_text(spec_text(rho, budgets, pure))
    spec = load_spec(path)
    return spec, plan_release(spec, None)


def published_error(spec, plan) -> tuple[float, dict[tuple[str, str], float]]:  # type: ignore[no-untyped-def]
    """The weighted (all 1) expected squared error of the published estimates at the plan's own
    variances: split.py's closed form, with x chosen so that k/x is each variance."""
    variances = {(t.name, t.level): float(t.noise.variance()) for t in plan.tables}
    auto = spec if all(t.auto for t in spec.tables) else None
    if auto is None:  # the same objective over the same tables: mark them auto to build it
        from dataclasses import replace

        from dprelease.spec import AutoSplit

        auto = replace(spec, tables=tuple(replace(t, auto=AutoSplit((Fraction(1),) * 3, chosen=True))
                                          for t in spec.tables))
    parts, groups, _, d = workload.problem(auto)
    f = workload.Objective(parts, groups, d)
    x = np.array([(p.k / variances[tuple(p.key.split("/"))]) ** (1 / d) for p in parts])  # k/xᵈ = the variance
    return f(x), variances


def simulate(spec, variances: dict[tuple[str, str], float], trials: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Mean and standard error of Σ (estimate − truth)² over every published cell, through the
    release's estimator (truth 0: the GLS estimate is linear and unbiased)."""
    units, parents = workload.tree(spec, True)
    tree = gls.Tree(units, parents)
    sex_age, race_hisp = spec.tables
    dims = list(dict.fromkeys(sex_age.group_by + race_hisp.group_by))
    sizes = tuple(spec.column(c).size for c in dims)
    scopes = [tuple(dims.index(c) for c in t.group_by) for t in spec.tables]
    rng = np.random.default_rng(29)
    totals = []
    for _ in range(trials):
        measurements = []
        for t, scope in zip(spec.tables, scopes):
            cells = math.prod(sizes[i] for i in scope)
            for lv, level in enumerate(LEVELS):
                v = variances[(t.name, level)]
                measurements.append(gls.Measurement(scope, lv, rng.normal(0, math.sqrt(v), (units[lv], cells)), v))
        est = gls.estimate(tree, sizes, measurements)
        totals.append(sum(float(np.sum(e ** 2)) for e in est.values()))
    return float(np.mean(totals)), float(np.std(totals, ddof=1) / math.sqrt(trials))


def plan_seconds(spec) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(7):
        started = time.perf_counter()
        plan_release(spec, None)
        times.append(time.perf_counter() - started)
    return sorted(times)[3]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rho", default="0.5")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--epsilon", default="1", help="the pure ε-DP rows' ε")
    args = ap.parse_args()
    rho = Fraction(args.rho)
    load = os.getloadavg()
    auto_spec, auto_plan = planned("auto", rho, None)
    assert auto_plan.split is not None
    bound = workload.svd_bound(auto_spec)
    assert bound is not None
    rows: list[tuple[str, object, object]] = []
    sixth = rho / 6
    rows.append(("equal (ρ/6 each)", *planned("equal", rho, {t: {lv: sixth for lv in LEVELS} for t in TABLES})))
    ratio = {"root": Fraction(1, 10), "STATE": Fraction(3, 10), "PUMA": Fraction(6, 10)}
    rows.append(("ρ/2 per table, spec's levels 1:3:6",
                 *planned("spec_levels", rho, {t: {lv: rho / 2 * ratio[lv] for lv in LEVELS} for t in TABLES})))
    _, base_plan = rows[0][1], rows[0][2]
    proposal = allocate(base_plan)  # type: ignore[arg-type]
    allocated = {t: {s.level: s.budget.amount for s in proposal.shares if s.name == t} for t in TABLES}
    rows.append(("plan --allocate", *planned("allocate", rho, allocated)))
    rows.append(("rho: auto (the planner)", auto_spec, auto_plan))
    print(f"acs_census.yaml's two tables under zCDP at ρ = {rho}: one consistency group, nation > STATE > PUMA "
          f"({auto_spec.column('PUMA').size} PUMAs); load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"SVD lower bound (every matrix-mechanism strategy, σ² = 1/(2ρ)): {bound:,.2f}")
    print()
    print("| split | ρ spent | expected squared error of the published estimates | × the SVD bound | simulated / formula |")
    print("|---|---:|---:|---:|---:|")
    for label, spec, plan in rows:
        error, variances = published_error(spec, plan)
        mean, se = simulate(spec, variances, args.trials) if args.trials else (math.nan, math.nan)
        spent = float(sum((t.budget.amount for t in plan.tables), Fraction(0)))  # type: ignore[attr-defined]
        print(f"| {label} | {spent:.5f} | {error:,.2f} | {error / bound:.4f} | {mean / error:.4f} ± {se / error:.4f} |")
    print(f"| SVD lower bound | {float(rho):.5f} | {bound:,.2f} | 1.0000 | |")
    print()
    chosen = auto_plan.split
    parts, groups, budget, d = workload.problem(auto_spec)
    objective = workload.Objective(parts, groups, d)
    unrounded, _, _ = split._search(objective, split._separate(parts, budget, d), budget, d)
    print(f"auto: {chosen.method}, {chosen.steps} steps, certified relative gap {chosen.gap:.1e}; the search's "
          f"optimum before rounding {objective(unrounded) / bound:.5f}× the bound (ideal σ² = 1/(2ρ)), committed "
          f"{chosen.error / bound:.5f}×")
    auto_s, written_s = plan_seconds(rows[3][1]), plan_seconds(split.apply(rows[3][1], chosen))  # type: ignore[arg-type]
    print(f"plan_release (no ledger; load_spec not timed), median of 7: rho: auto {auto_s * 1000:.1f} ms, the same "
          f"split written {written_s * 1000:.1f} ms ({auto_s / written_s:.0f}×)")
    for line in chosen.lines():
        print(line)
    pure_rows(Fraction(args.epsilon))


def pure_rows(epsilon: Fraction) -> None:
    """The same under pure ε-DP (discrete Laplace, variance ≈ 2/ε²; ε's add): no SVD bound here
    (it is an L2 bound); ratios to the auto split."""
    auto_spec, auto_plan = planned("auto", epsilon, None, pure=True)
    equal = {t: {lv: epsilon / 6 for lv in LEVELS} for t in TABLES}
    ratio = {"root": Fraction(1, 10), "STATE": Fraction(3, 10), "PUMA": Fraction(6, 10)}
    rows = [("equal (ε/6 each)", *planned("equal", epsilon, equal, pure=True)),
            ("ε/2 per table, spec's levels 1:3:6 (the shipped spec at this ε)",
             *planned("spec_levels", epsilon, {t: {lv: epsilon / 2 * ratio[lv] for lv in LEVELS} for t in TABLES},
                      pure=True))]
    proposal = allocate(rows[0][2])  # type: ignore[arg-type]
    allocated = {t: {s.level: s.budget.amount for s in proposal.shares if s.name == t} for t in TABLES}
    rows.append(("plan --allocate", *planned("allocate", epsilon, allocated, pure=True)))
    rows.append(("epsilon: auto (the planner)", auto_spec, auto_plan))
    base, _ = published_error(auto_spec, auto_plan)
    print()
    print(f"The same two tables under pure ε-DP at ε = {epsilon} (discrete Laplace): published estimates' error "
          "from each plan's exact discrete Laplace variances")
    print()
    print("| split | ε spent | expected squared error of the published estimates | × auto |")
    print("|---|---:|---:|---:|")
    for label, spec, plan in rows:
        error, _ = published_error(spec, plan)
        spent = float(sum((t.budget.amount for t in plan.tables), Fraction(0)))  # type: ignore[attr-defined]
        print(f"| {label} | {spent:.5f} | {error:,.2f} | {error / base:.4f} |")
    assert auto_plan.split is not None
    print()
    for line in auto_plan.split.lines():
        print(line)


if __name__ == "__main__":
    main()
