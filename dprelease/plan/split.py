"""``epsilon: auto`` (``rho: auto``): the planner's split of what the release's budget leaves
across its auto tables and their levels, minimising the weighted expected squared error of the
*published estimates* (after the GLS consistency step, :mod:`dprelease.postprocess.gls`), not of
the raw noisy measurements (that is :mod:`.allocation`, ``plan --allocate``).

The model, the error of a split and the SVD bound: :mod:`.workload`.

**The split.** The objective is convex in the shares: tr(WᵀW X⁻¹) is convex and
matrix-decreasing in X, and X = Σᵢ xᵢ Bᵢ (zCDP) or Σᵢ xᵢ² Bᵢ (pure) is linear or matrix-convex
in x. It is minimised over {x > 0, Σ x = B} (B: the release budget less the explicit tables')
by the multiplicative algorithm for optimal designs, xᵢ ← xᵢ gᵢ^{1/(d+1)} normalised to B
(gᵢ = −∂f/∂xᵢ, exact: the tree's passes differentiated in reverse, :func:`.workload.tree_adjoint`; Silvey, Titterington and Torsney 1978; for a separable
objective — no consistency — the closed form of :mod:`.allocation`, used as such). Every part
keeps at least B/(``FLOOR``·parts): under pure ε-DP the optimum may starve a level (precision ε²
makes small shares worthless), and a share of 0 has no noise the sampler takes.
Convexity gives a certificate: f(x*) ≥ f(x) − B·maxᵢ gᵢ + Σᵢ gᵢxᵢ, so the iteration stops when
that gap is below ``TOLERANCE`` × f, and the planner refuses (UserError) when it is not reached
within ``MAX_STEPS``: a split never depends on an optimiser's luck. Floats are used in the
search only, in a fixed sequence of numpy operations over fixed shapes (children summed into
parents by ``np.add.at``, in index order), so the same spec gives the same split on the same
software; the committed split is in the fingerprint, so a split that another platform rounds
differently asks for a new approval rather than being spent unseen.

**Cost.** Each step is one evaluation and one gradient: per subspace U, the tree's two passes
forward and once more in reverse, O(|U|·places). On acs_census (2 tables × 3 levels, 20 PUMAs)
154 steps, about 0.05 s; on a synthetic 4-level tree of 80,000 places, 0.08 s a step.

**The committed split.** Each share is rounded *down* to ``DIGITS`` significant digits as an
exact Fraction; the sum is checked exactly against the budget (what rounding leaves is unspent).
A table's budget is the exact sum of its levels'. The chosen split is written into the spec's
tables (:func:`resolve`), so the fingerprint a reviewer approves covers it: a split that changes
needs a new approval.

**Supported**: count and sum tables with the default mechanism (discrete Gaussian under zCDP,
discrete Laplace under pure). Refused at ``validate`` (with the reason): means, modes, quantiles,
the truncated geometric, (ε, δ) releases, releases with invariants, consistency groups mixing
auto and explicit tables. Structural zeros (which get no noise) are counted as measured: the
objective is then an upper bound of their error.

Pure: spec and plan only; numpy; never the data readers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from dprelease.accounting import budget_of, fraction_text, symbol_key
from dprelease.accounting.exact import decimal_text, round_significant
from dprelease.errors import InternalError, UserError
from dprelease.plan.workload import Floats, Objective, Part, auto_tables, problem, svd_bound
from dprelease.spec import Spec


DIGITS = 4  # significant digits of a committed share (rounded down)
TOLERANCE = 1e-10  # relative duality gap the search must reach (well below the 4-digit rounding: shares stable)
MAX_STEPS = 5000
FLOOR = 1000  # every part keeps at least budget/(FLOOR·parts)


@dataclass(frozen=True, slots=True)
class Split:
    """The planner's split: per auto part its committed share, and how it was found."""

    symbol: str
    budget: Fraction  # what the auto tables share (the release's less the explicit tables')
    keys: tuple[str, ...]
    shares: tuple[Fraction, ...]  # committed: rounded down, Σ ≤ budget exactly
    weights: tuple[Fraction, ...]
    error: float  # the objective at the committed shares
    equal_error: float  # at an equal split of ``budget`` across the parts
    separate_error: float  # at the measurements' own closed form (``plan --allocate``'s)
    gap: float  # relative certificate of the search's optimum
    steps: int
    method: str
    bound: float | None = None  # the SVD lower bound at ``budget`` (zcdp, one group), for comparison
    rmse: tuple[float, ...] = ()  # per part, the root mean squared error of one of its published cells

    @property
    def unspent(self) -> Fraction:
        return self.budget - sum(self.shares, Fraction(0))

    def record(self) -> dict[str, object]:
        """The split as plan --json, the manifest and the report state it (shares exact)."""
        return {
            "method": self.method, "shared": fraction_text(self.budget), "unit": symbol_key(self.symbol),
            "shares": [{"measurement": k, "share": fraction_text(s), "weight": fraction_text(w),
                        "published_rmse_per_cell": e}
                       for k, s, w, e in zip(self.keys, self.shares, self.weights, self.rmse)],
            "unspent": fraction_text(self.unspent),
            "objective": "weighted expected squared error of the published (post-processed) estimates",
            "error": self.error, "equal_split_error": self.equal_error, "measurements_closed_form_error": self.separate_error,
            "svd_lower_bound": self.bound, "certified_relative_gap": self.gap, "steps": self.steps,
            "floor": fraction_text(self.budget / (FLOOR * len(self.shares))),
        }

    def lines(self) -> list[str]:
        """The split in words (plan, report)."""
        return split_lines(self.record())


def split_lines(record: dict[str, object]) -> list[str]:
    """A split's record (:meth:`Split.record`, as plan --json and the manifest hold it) in words."""
    symbol = "ρ" if record["unit"] == "rho" else "ε"
    shares = record["shares"]
    error, equal, separate, bound = (record[k] for k in ("error", "equal_split_error",
                                                          "measurements_closed_form_error", "svd_lower_bound"))
    if not (isinstance(shares, list) and isinstance(error, float) and isinstance(equal, float)
            and isinstance(separate, float)):  # a manifest's record, altered: said, never an assertion
        raise UserError("the auto_split record does not state its shares and errors: the manifest was altered")
    out = [f"{symbol} chosen by the planner ({symbol}: auto; {record['method']}): "
           f"{decimal_text(Fraction(str(record['shared'])), 8)} shared so as to minimise the weighted expected "
           "squared error of the published (post-processed) estimates"]
    out += [f"  {s['measurement']}: {symbol} = {decimal_text(Fraction(s['share']), 8)}"
            + ("" if s["weight"] == "1" else f" (weight {s['weight']})")
            + (f"; its published cells ±{s['published_rmse_per_cell']:,.3g} (root mean squared error per cell)"
               if isinstance(s.get("published_rmse_per_cell"), float) else "") for s in shares]
    out.append(f"  expected error: {error:,.6g}; an equal split: {equal / error:.4f}×; the measurements' own "
               f"closed form (plan --allocate): {separate / error:.4f}×"
               + (f"; {error / bound:.4f}× the SVD lower bound" if isinstance(bound, float) else ""))
    floor = Fraction(str(record["floor"]))
    starved = [str(s["measurement"]) for s in shares if Fraction(s["share"]) <= floor * Fraction(1001, 1000)]
    if starved:
        out.append(f"  at the floor ({symbol} = {decimal_text(floor, 8)}, the least any measurement gets): "
                   f"{', '.join(starved)}; where the tables are post-processed consistently, their published estimates "
                   "draw on the other measurements of the group, so their own noise (the plan's margin for them) is "
                   "not what their readers get: the published error per cell is the one stated beside each")
    unspent = Fraction(str(record["unspent"]))
    if unspent:
        out.append(f"  unspent by rounding down: {symbol} = {decimal_text(unspent, 8)}")
    return out


def resolve(spec: Spec) -> Spec:
    """``spec`` with its auto tables' budgets replaced by the planner's split (unchanged when it
    has none, or when they are chosen already: a saved spec's). Raises UserError when no split
    with a certified optimum is found."""
    todo = [i for i in auto_tables(spec) if not spec.tables[i].auto.chosen]  # type: ignore[union-attr]
    if not todo:
        return spec
    return apply(spec, choose(spec))


def apply(spec: Spec, split: Split) -> Spec:
    """The spec with ``split``'s shares in its auto tables, marked chosen."""
    by_key = dict(zip(split.keys, split.shares))
    tables = list(spec.tables)
    for i in auto_tables(spec):
        t = spec.tables[i]
        auto = t.auto
        assert auto is not None
        if t.levels:
            levels = tuple(budget_of(spec.definition, by_key[f"{t.name}/{lv}"]) for lv in t.levels)
            total = sum((b.amount for b in levels), Fraction(0))
            tables[i] = replace(t, budget=budget_of(spec.definition, total), level_budgets=levels,
                                auto=replace(auto, chosen=True))
        else:
            tables[i] = replace(t, budget=budget_of(spec.definition, by_key[t.name]), auto=replace(auto, chosen=True))
    return replace(spec, tables=tuple(tables))


def choose(spec: Spec) -> Split:
    """The split of the budget the explicit tables leave, minimising the weighted error of the
    published estimates (module docstring)."""
    parts, groups, budget, d = problem(spec)
    keys = tuple(p.key for p in parts)
    weights = tuple(_weights(spec)[p.key] for p in parts)
    objective = Objective(parts, groups, d)
    separate = _separate(parts, budget, d)
    exact = _closed_form(parts, budget, d) if all(not g.consistent for g in groups) else None
    if exact is not None:  # no consistency: the measurements' error is the published one's, in closed form
        x, steps, gap = np.array([float(v) for v in exact]), 0, 0.0
    else:
        x, steps, gap = _search(objective, separate, budget, d)
    if gap > TOLERANCE:
        raise UserError(f"{spec.source}: {spec.symbol}: auto: the planner's search did not certify an optimum "
                        f"within {MAX_STEPS} steps (relative gap {gap:.1e}); write the tables' budgets explicitly "
                        "(``dprelease plan --allocate`` proposes a split)")
    shares = tuple(round_significant(v if exact is not None else Fraction(float(v)), DIGITS, up=False)
                   for v in (exact if exact is not None else x))
    if sum(shares, Fraction(0)) > budget:
        raise InternalError("the auto split sums over its budget after rounding down")
    committed = np.array([float(s) for s in shares])
    rmse = tuple(float(e) for e in np.sqrt(objective.per_cell(committed, parts)))
    return Split(spec.symbol, budget, keys, shares, weights, objective(committed),
                 # the errors of the other splits, for comparison only (floats: never a budget that is spent)
                 objective(np.full(len(parts), float(budget) / len(parts))), objective(separate), gap, steps,
                 "closed form" if exact is not None else "convex search, certified", svd_bound(spec), rmse)


def _weights(spec: Spec) -> dict[str, Fraction]:
    out = {}
    for t in spec.tables:
        if t.auto is None:
            continue
        for j, (level, _, _) in enumerate(t.measured()):
            out[t.name if level is None else f"{t.name}/{level}"] = t.auto.weights[j]
    return out


def _separate(parts: Sequence[Part], budget: Fraction, d: int) -> Floats:
    """The measurements' own closed form (``plan --allocate``'s): xᵢ = B·(ωᵢcᵢkᵢ)^(1/(d+1)) / Σⱼ …,
    which minimises the raw measurements' error Σ ωᵢcᵢkᵢ/xᵢᵈ (cᵢ the part's cells)."""
    roots = np.array([(p.weight * p.cells * p.k) ** (1.0 / (d + 1)) for p in parts])
    # a point for the search and a split to compare with, in floats: what is committed is
    # :func:`choose`'s shares, exact Fractions rounded down and summed exactly
    return roots * (float(budget) / math.fsum(roots.tolist()))


def _closed_form(parts: Sequence[Part], budget: Fraction, d: int) -> list[Fraction] | None:
    """Without consistency, xᵢ = B·(ωᵢcᵢkᵢ)^(1/(d+1)) / Σⱼ … exactly (60-digit roots, as
    ``plan --allocate``'s :func:`~dprelease.plan.allocation.closed_form`); None when a share
    falls below the floor (then the search, which keeps it)."""
    from dprelease.plan.allocation import closed_form

    coefficients = {str(i): Fraction(p.weight) * p.cells * Fraction(p.k) for i, p in enumerate(parts)}
    shares = closed_form(coefficients, budget, Fraction(1, d + 1))
    out = [shares[str(i)] for i in range(len(parts))]
    return None if min(out) < budget / (FLOOR * len(parts)) else out


def _search(f: Objective, start: Floats, budget: Fraction, d: int) -> tuple[Floats, int, float]:
    """The multiplicative algorithm from ``start`` until the convexity gap is below TOLERANCE·f,
    over x = m + y (y ≥ 0, Σ x = B): every part keeps at least m = B/(FLOOR·parts), so a level
    the optimum would starve (under pure ε-DP a precision ε² makes small shares worthless) still
    gets noise the exact sampler takes. The certificate is the convexity bound over that set."""
    b = float(budget)
    m = b / (FLOOR * len(start))
    free = b - m * len(start)
    y = np.maximum(start - m, free * 1e-3 / len(start))
    y = y * (free / math.fsum(y.tolist()))
    gap = math.inf
    for step in range(MAX_STEPS):
        x = m + y
        value, g = f(x), f.gradient(x)
        gap = (free * float(np.max(g)) - math.fsum((g * y).tolist())) / value
        if gap <= TOLERANCE:
            return x, step, max(gap, 0.0)
        moved = y * np.power(np.maximum(g, 1e-300), 1.0 / (d + 1))
        y = moved * (free / math.fsum(moved.tolist()))
    return m + y, MAX_STEPS, gap
