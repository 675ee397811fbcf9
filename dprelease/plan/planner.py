"""Spec + ledger state → Plan. Pure: no data, no I/O.

Privacy contract of the plan (pure ε-DP, one row per person):

* each measurement is one histogram over the full declared cross product of its domains (a
  geographic table is measured once per level, each level with its own ε);
  adding or removing one row changes exactly one cell by 1 (or none, if the row is filtered
  out), so the L1 sensitivity is 1 and the discrete Laplace mechanism with scale 1/ε gives
  ε-DP for the whole table (the cells are disjoint: parallel composition);
* a release with invariants (totals published exactly) cannot promise anything between
  datasets of different totals: its relation is change one record (bounded DP), under which a
  row leaves one cell and enters another, so every measurement of that release has L1
  sensitivity 2 and scale 2/ε (``Spec.sensitivity``);
* tables compose sequentially: the release costs the exact sum of its tables' ε (and, under
  approx, of their δ);
* under zcdp (budgets in ρ) counts and sums get the discrete Gaussian with σ² = Δ₂²/(2ρ); under
  approx ((ε, δ) budgets) the discrete Gaussian with the ρ that (ε, δ) allows
  (:func:`~dprelease.accounting.approx_to_zcdp`); a pure ε-DP mechanism in a zcdp release (a
  mode, the truncated geometric, ``mechanism: discrete_laplace``) runs at the largest ε with
  ε²/2 ≤ its ρ, and in an approx release at its ε with δ = 0;
* the release must fit its own budget and the dataset's remaining lifetime budget;
* structural zeros (:mod:`dprelease.plan.structural`): cells the table's own definition (its
  ``where`` and the spec's declared rules) makes impossible are 0 on every allowed dataset, so
  they are not measured (no noise, no margin of error) and published as exact zeros. They are a
  function of the spec alone; sensitivity, scale, ε and margins of the measured cells are those
  of the full histogram (a row that changes a measured cell changes it by the same amount).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Callable, TypeVar

from dprelease.accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    Neighbouring,
    PureDP,
    Terms,
    add,
    amount_text,
    approx_to_zcdp,
    compose,
    fraction_text,
    subtract,
    within,
    zcdp_to_pure,
    zero,
)
from dprelease.errors import InternalError, LedgerError, UserError
from dprelease.ledger import (
    AnswerSet,
    CapChange,
    DatasetState,
    Evaluation,
    RunRecord,
    check_lifetime_matches,
)
from dprelease.mechanisms.gaussian import sigma2_for, zcdp_rho
from dprelease.plan.local import LocalPlan, local_plans, refuse_local_over_central
from dprelease.plan.measurements import (
    DiscreteGaussian,
    DiscreteLaplace,
    Mean,
    MeanPart,
    PermuteAndFlip,
    TablePlan,
    TruncatedGeometric,
    noise_variances,
)
from dprelease.plan.split import Split, apply, choose, resolve
from dprelease.plan.sensitivities import sum_l1, sum_l2_squared, utility_sensitivity
from dprelease.plan.structural import cell_labels, describe, measurement_masks
from dprelease.spec import MeanMeasure, ModeMeasure, Spec, SumMeasure, Table, fingerprint

CONFIDENCE_95 = Fraction(95, 100)


@dataclass(frozen=True, slots=True)
class Plan:
    release: str
    dataset: str
    fingerprint: str
    tables: tuple[TablePlan, ...]
    total: Budget  # the tables' budgets composed, of the spec's kind
    release_budget: Budget  # the spec's budget: block, of the same kind
    confidence: Fraction
    charge: Budget  # what the ledger is charged, of its terms' kind
    lifetime_budget: Budget  # the dataset's cap, of its terms' kind
    lifetime_spent: Budget  # before this release
    lifetime_is_new: bool  # the dataset is not in the ledger yet
    existing_run: RunRecord | None  # a live run of the same release, if any
    data_versions: int  # distinct data fingerprints among earlier releases
    lifetime_caps: tuple[CapChange, ...] = ()  # the ledger's recorded cap decisions
    relation: Neighbouring = Neighbouring()  # the neighbouring relation the plan is made under
    invariants: tuple[str, ...] = ()  # levels whose place totals are published exactly (NOT DP)
    terms: Terms = Terms("pure")  # the dataset's ledger terms this plan is charged under (see ledger_terms)
    guarantee_delta: Fraction | None = None  # zcdp: the δ of the (ε, δ) guarantee the release states
    local: tuple[LocalPlan, ...] = ()
    local_spent: PureDP = PureDP(Fraction(0))  # each respondent's pure ε over the collections recorded before
    evaluations: tuple[Evaluation, ...] = ()  # the dataset's data read in the open (`dprelease evaluate`)
    split: Split | None = None  # epsilon: auto: the planner's split (in the tables' budgets and the fingerprint)

    @property
    def neighbouring(self) -> str:
        """The neighbouring relation in words."""
        return self.relation.text

    @property
    def approx(self) -> bool:
        """Charged in (ε, δ): an approx ledger."""
        return self.terms.kind == "approx"

    @property
    def symbol(self) -> str:
        """Of the spec's budgets (``total``, ``release_budget``): ε, or ρ for zcdp."""
        return self.release_budget.symbol

    @property
    def ledger_symbol(self) -> str:
        """Of the lifetime figures: ε, or ρ for a zCDP ledger."""
        return self.terms.symbol

    @property
    def fits_release(self) -> bool:
        """Within the spec's budget (under approx, in ε and in δ)."""
        return within(self.total, self.release_budget)  # one kind, by construction (TypeError otherwise)

    @property
    def fits_lifetime(self) -> bool:
        """Within the dataset's remaining lifetime budget (under approx terms, in ε and in δ)."""
        return within(self.lifetime_spent_after, self.lifetime_budget)

    @property
    def fits(self) -> bool:
        return self.fits_release and self.fits_lifetime

    @property
    def local_spent_after(self) -> PureDP:
        """Each respondent's pure ε over the local collections once this release's are recorded."""
        after = self.local_spent
        for p in self.local:
            after = after + p.charge
        return after

    @property
    def lifetime_remaining(self) -> Budget:
        return subtract(self.lifetime_budget, self.lifetime_spent)

    @property
    def lifetime_spent_after(self) -> Budget:
        return add(self.lifetime_spent, self.charge)

    @property
    def lifetime_remaining_after(self) -> Budget:
        return subtract(self.lifetime_remaining, self.charge)

    def noise_variances(self) -> dict[tuple[str, str | None], float]:
        """Per measurement of counts or sums, its noise's variance in value units (what consistent
        post-processing weights by); modes and means have none."""
        return noise_variances(self.tables)

    def ledger_charges(self) -> list[tuple[str, Budget]]:
        """(measurement, its charge) per measurement, as :meth:`Ledger.reserve` takes them: each a
        budget of the ledger terms' kind (ρ under zCDP terms, with its δ under approx terms)."""
        return [(t.key, t.ledger_charge) for t in self.tables]


def plan_release(spec: Spec, state: DatasetState | None) -> Plan:
    """Plan ``spec`` against the dataset's ledger state (None: not in the ledger yet).

    Raises :class:`LedgerError` when the spec's lifetime budget disagrees with the ledger's,
    or when a new dataset declares none. Over-budget is not an error here: it is the plan's
    verdict (``fits``), so a reviewer sees by how much.
    """
    chosen = choose(spec) if any(t.auto is not None and not t.auto.chosen for t in spec.tables) else None
    spec = spec if chosen is None else apply(spec, chosen)  # epsilon: auto: the split is the plan's, fingerprinted
    declared = spec.dataset.lifetime  # the spec's lifetime budget (of its kind), if it declares one
    if state is None and declared is None:
        raise LedgerError(f"{spec.source}: dataset {spec.dataset.name!r} is not in the ledger yet, so the "
                          "spec must declare dataset.lifetime_budget: {epsilon: E}")
    refuse_local_over_central(spec, state)  # before the terms: the provenance is what is wrong
    terms, relation = ledger_terms(spec, state)
    if state is None:
        if declared is None:
            raise InternalError("a new dataset planned without its lifetime budget")
        lifetime, spent = declared, zero(terms.kind)
    else:
        if terms.kind == spec.definition:  # a pure spec's lifetime ε says nothing about a ρ or (ε, δ) cap
            check_lifetime_matches(state, declared)
        lifetime, spent = state.budget, state.spent
    tables = measurement_plans(spec, terms, relation)
    return Plan(
        release=spec.release, dataset=spec.dataset.name, fingerprint=fingerprint(spec), tables=tables,
        total=compose((t.budget for t in tables), spec.definition), release_budget=spec.budget,
        confidence=spec.confidence, charge=compose((t.ledger_charge for t in tables), terms.kind),
        lifetime_budget=lifetime, lifetime_spent=spent,
        lifetime_is_new=state is None, existing_run=state.live_run(spec.release) if state else None,
        data_versions=state.data_versions if state else 0, lifetime_caps=state.caps if state else (),
        relation=relation, invariants=spec.invariant_levels, terms=terms,
        guarantee_delta=spec.guarantee_delta,
        local=local_plans(spec, state), local_spent=state.local_epsilon if state else PureDP(Fraction(0)),
        evaluations=state.evaluations if state else (), split=chosen,
    )


def with_provenance(spec: Spec, plan: Plan, state: DatasetState | None, registered: tuple[AnswerSet, ...],
                    answers: str) -> Plan:
    """``plan`` with its local tables checked against the registrations of the data file (keyed
    fingerprint ``answers``) and charged accordingly (see :func:`local_plans`)."""
    return replace(plan, local=local_plans(spec, state, registered, answers))


def measurement_plans(spec: Spec, terms: Terms | None = None,
                      relation: Neighbouring | None = None) -> tuple[TablePlan, ...]:
    """The plan of every measurement (mechanism, sensitivity, scale), in spec order. Without
    ledger ``terms``: those of a dataset new to the ledger (what ``evaluate`` simulates)."""
    spec = resolve(spec)  # epsilon: auto: the planner's split (a no-op once chosen)
    if terms is None or relation is None:
        terms, relation = ledger_terms(spec, None)
    masks = measurement_masks(spec)
    return tuple(_with_structural(spec, _plan_one(spec, t, budget, spec.dims_cells(dims), level, terms, relation),
                                  dims, masks[(t.name, level)])
                 for t in spec.tables for level, dims, budget in t.measured())


def _with_structural(spec: Spec, plan: TablePlan, dims: tuple[str, ...], mask: Any) -> TablePlan:
    """The plan with its structural cells (a mean's are its parts' too: they count the same rows).
    The sensitivity, scale, ε and margins stay the full histogram's: see the module docstring."""
    from dataclasses import replace

    if mask is None:
        return plan
    cells = tuple(int(i) for i in mask.nonzero()[0])
    return replace(plan, structural=cells, structural_summary=tuple(describe(spec, dims, mask)),
                   structural_labels=tuple(map(tuple, cell_labels(spec, dims, mask.nonzero()[0]))))


def _plan_one(spec: Spec, t: Table, budget: Budget, cells: int, level: str | None, terms: Terms,
              relation: Neighbouring) -> TablePlan:
    """One measurement of table ``t`` that spends ``budget`` (of the spec's kind)."""
    if isinstance(t.measure, MeanMeasure):
        return _plan_mean(spec, t, budget, cells, level, terms, relation)
    if isinstance(t.measure, ModeMeasure):
        return _plan_mode(spec, t, budget, cells, level, terms, relation)
    if t.mechanism == "discrete_gaussian":
        return _plan_gaussian(spec, t, budget, cells, level, relation)
    return _plan_table(spec, t, budget, cells, level, terms, relation)


def _plan_mean(spec: Spec, t: Table, budget: Budget, cells: int, level: str | None, terms: Terms,
               relation: Neighbouring) -> TablePlan:
    """A mean = a noisy sum of centred values over a noisy count of the same rows: two
    measurements on the same rows, composed sequentially — the sum gets ``sum_share`` of the
    budget (ε, ρ, and under approx the δ with it), the count the rest. Each part is planned as
    a table of its own (:meth:`MeanMeasure.centred_sum`, and a count), with the table's mechanism;
    the plan's noise is the :class:`Mean` of the two, and it is charged their total. Its row
    shows the sum part's margins (:attr:`TablePlan.shown_noise`)."""
    if not isinstance(t.measure, MeanMeasure):
        raise InternalError(f"table {t.name}: planned as a mean without one")
    for_sum = budget.scaled(t.measure.sum_share)
    mean = Mean(_mean_part(_plan_one(spec, replace(t, measure=t.measure.centred_sum), for_sum, cells, level, terms,
                                     relation)),
                _mean_part(_plan_one(spec, replace(t, measure=None), subtract(budget, for_sum), cells, level, terms,
                                     relation)),
                half_width=max(t.measure.centre - t.measure.low, t.measure.high - t.measure.centre))
    return TablePlan(name=t.name, budget=mean.budget, noise=mean, cells=cells, moe=mean.sum.moe,
                     moe95=mean.sum.moe95, level=level, charge=mean.charge)


def _mean_part(part: TablePlan) -> MeanPart:
    """A mean's sum or count, planned as a measurement of its own, as its part."""
    if not isinstance(part.noise, (DiscreteLaplace, DiscreteGaussian)):
        raise InternalError(f"{part.key}: a mean's part measured with the {part.mechanism}")
    return MeanPart(part.noise, part.budget, part.ledger_charge, part.moe, part.moe95, part.pure_epsilon)


def ledger_terms(spec: Spec, state: DatasetState | None) -> tuple[Terms, Neighbouring]:
    """The ledger terms a release of ``spec`` is charged under on its dataset, and the
    neighbouring relation it is planned under.

    A dataset's lifetime budget is one guarantee, in one unit, under one neighbouring relation,
    fixed when the dataset enters the ledger: terms ``pure``, ``zcdp`` or ``approx``, bounded
    (change one record) when invariants are public. A release with invariants needs bounded
    terms; once a dataset is bounded (its invariants are public for ever), every later release
    of it is planned under change one record too, sensitivity 2, invariants or not. A dataset
    whose ledger holds add/remove releases cannot take a release with invariants: exact totals
    are not DP under add/remove, and its earlier budget would double under the bounded
    relation. A pure release may be charged to a zCDP ledger (ε-DP implies ε²/2-zCDP); a zCDP
    release cannot be charged to a pure one.
    """
    relation = spec.relation
    wanted = Terms(spec.definition, relation.change, relation.unit.id)
    held = None if state is None else state.terms
    if held is None or held == wanted:
        return wanted, relation
    if held.unit_id != wanted.unit_id:
        def shown(unit_id: str | None) -> str:
            return f"one person = one {unit_id}" if unit_id else "one row = one person"

        raise LedgerError(f"{spec.source}: dataset {spec.dataset.name!r} is in the ledger with privacy unit "
                          f"({shown(held.unit_id)}), this spec uses ({shown(wanted.unit_id)}); budgets spent "
                          "per row and per person do not add up. Keep the dataset's privacy unit: the same people have "
                          "one lifetime budget, spent in one unit")
    if held.kind != wanted.kind and wanted.kind != "pure":  # pure ε-DP is ε²/2-zCDP and (ε, 0)-DP; nothing else converts
        raise LedgerError(f"{spec.source}: dataset {spec.dataset.name!r} is in the ledger under {held.shown} "
                          f"terms; a {wanted.kind} release cannot be charged there. Release it as {held.shown}"
                          + (" or pure ε-DP" if held.kind != "pure" else "") + ", charged to this dataset's lifetime "
                          "budget (terms are fixed when a dataset enters the ledger)")
    if wanted.change and not held.change:
        what = "invariants" if spec.invariants else "local tables (the number of answers)"
        raise LedgerError(
            f"{spec.source}: dataset {spec.dataset.name!r} is in the ledger under add/remove-one-row terms, but "
            f"this spec publishes {what}, which need change-one-record terms for the whole dataset (its "
            f"earlier budget would double). Drop them from this release: the dataset keeps its terms and its one "
            "lifetime budget")
    if held.change and not wanted.change:
        return held, Neighbouring(relation.unit, True, "ledger")
    return held, relation


def _plan_table(spec: Spec, t: Table, budget: Budget, cells: int, level: str | None, terms: Terms,
                relation: Neighbouring) -> TablePlan:
    """A pure ε-DP mechanism (discrete Laplace, truncated geometric) on a count or sum histogram:
    sensitivity a count's (:attr:`Neighbouring.count_l1`) or a sum's (:func:`sum_l1`), in
    published units; the noise is drawn in units of the granularity (1 for counts), with scale
    (sensitivity/granularity)/ε. In a zcdp release (``budget`` is then ρ) it runs at the largest
    ε with ε²/2 ≤ ρ and is charged ε²/2, as is a pure release on a zCDP ledger (:func:`_pure_charge`)."""
    if isinstance(t.measure, SumMeasure):
        g, sensitivity = t.measure.granularity, sum_l1(t.measure.low, t.measure.high, relation, cells)
    else:
        g, sensitivity = 1, relation.count_l1

    def noise(run_at: Fraction) -> DiscreteLaplace:
        if t.mechanism == "truncated_geometric":
            if t.upper is None:
                raise InternalError(f"table {t.name}: the truncated geometric without its upper bound")
            return TruncatedGeometric(sensitivity, run_at, g, upper=t.upper)
        return DiscreteLaplace(sensitivity, run_at, g)

    made, pure_epsilon = _pure_noise(spec, t.name, budget, noise)
    return TablePlan(name=t.name, budget=budget, noise=made, cells=cells, moe=made.margin(spec.confidence),
                     moe95=made.margin(CONFIDENCE_95), level=level, pure_epsilon=pure_epsilon,
                     charge=_pure_charge(budget, made.epsilon, terms))


def _pure_charge(budget: Budget, run_at: Fraction, terms: Terms) -> Budget:
    """The ledger's charge for a pure ε-DP mechanism run at ``run_at``: on zCDP terms ε²/2
    (ε-DP implies ε²/2-zCDP; a zcdp release's own pure tables, or a pure release there),
    otherwise the measurement's budget (on (ε, δ) terms with δ = 0)."""
    if terms.kind == "zcdp":
        return PureDP(run_at).as_zcdp()
    return budget.as_approx() if terms.kind == "approx" and isinstance(budget, PureDP) else budget


N = TypeVar("N", DiscreteLaplace, PermuteAndFlip)


def pure_epsilons(budget: Budget) -> list[Fraction]:
    """The ε a pure ε-DP mechanism may run at on ``budget``, best first (the first whose noise the
    exact sampler takes is the one): its ε under pure and approx (δ = 0); under zcdp the largest ε
    with ε²/2 ≤ ρ, rounded down to 12 significant digits, then to fewer (rounding ε down only
    lowers the privacy loss)."""
    match budget:
        case ZCDP(rho=rho):
            return [zcdp_to_pure(rho, digits) for digits in range(12, 3, -1)]
        case PureDP(epsilon=epsilon) | ApproxDP(epsilon=epsilon):  # under approx, a pure mechanism's δ is 0
            return [epsilon]
    raise InternalError(f"not a budget: {budget!r}")


def _pure_noise(spec: Spec, name: str, budget: Budget, noise: Callable[[Fraction], N]) -> tuple[N, Fraction | None]:
    """The pure mechanism ``noise(ε)`` at the ε it runs at, and that ε in a zcdp release (None
    otherwise). The mechanism checks its scale against the exact sampler (parts below 2^40)
    when built — here, so that a run never fails on it after reserving. Under zcdp the largest
    ε with ε²/2 ≤ ρ is rounded down to 12 significant digits, or fewer where the scale would not
    fit (rounding ε down only lowers the privacy loss). Raises UserError (exit 2) where no
    rounding helps: a pure spec's ε with too many digits."""
    zcdp = isinstance(budget, ZCDP)
    for run_at in pure_epsilons(budget):
        try:
            return noise(run_at), (run_at if zcdp else None)
        except ValueError:
            continue
    raise UserError(  # exit 2, before anything is spent
        f"{spec.source}: table {name}: {spec.symbol} = {amount_text(budget)} has too many digits for the exact "
        "sampler (the noise scale must be a fraction with parts below 2^40); round it to at most 12 significant "
        "digits")


def _plan_gaussian(spec: Spec, table: Table, budget: Budget, cells: int, level: str | None,
                   relation: Neighbouring) -> TablePlan:
    """The discrete Gaussian on a count or sum histogram, in units of the granularity.

    Δ₂²: a count histogram's :attr:`Neighbouring.count_l2_squared` (K² under add/remove, 2K²
    under change one record), a sum's :func:`sum_l2_squared`. zcdp (``budget`` is ρ):
    σ² = Δ₂²/(2ρ), rounded up, charged the ρ that σ² gives. approx (``budget`` is ε, with the
    table's δ): σ² for the largest ρ whose (ε, δ) bound (CKS 2020, Proposition 12) is within
    them; charged (ε, δ)."""
    m = table.measure
    g = m.granularity if isinstance(m, SumMeasure) else 1
    l2 = sum_l2_squared(m.low, m.high, g, relation, cells) if isinstance(m, SumMeasure) else relation.count_l2_squared
    if isinstance(budget, ApproxDP):
        if not budget.delta:
            raise InternalError(f"table {table.name}: a discrete Gaussian table of an approx release without its δ")
        try:
            rho = approx_to_zcdp(budget.epsilon, budget.delta)
        except ValueError:
            raise UserError(f"{spec.source}: table {table.name}{'' if level is None else ' at ' + level}: ε = "
                            f"{fraction_text(budget.epsilon)} at δ = {fraction_text(budget.delta)} leaves no room for "
                            "Gaussian noise; raise its ε or δ, or use mechanism: discrete_laplace") from None
    elif isinstance(budget, ZCDP):
        rho = budget.rho
    else:
        raise InternalError(f"table {table.name}: the discrete Gaussian in a pure ε-DP release")
    try:
        sigma2 = sigma2_for(rho, l2)
    except ValueError:
        raise UserError(f"{spec.source}: table {table.name}: {spec.symbol} = {amount_text(budget)} asks for a noise variance "
                        "the exact sampler cannot take; use a larger budget or coarser granularity") from None
    noise = DiscreteGaussian(l2, sigma2, g)
    return TablePlan(name=table.name, budget=budget, noise=noise, cells=cells,
                     moe=noise.margin(spec.confidence), moe95=noise.margin(CONFIDENCE_95), level=level,
                     charge=ZCDP(zcdp_rho(sigma2, l2)) if isinstance(budget, ZCDP) else budget)


def _plan_mode(spec: Spec, table: Table, budget: Budget, cells: int, level: str | None, terms: Terms,
               relation: Neighbouring) -> TablePlan:
    """A mode or quantile per cell by permute-and-flip (:class:`PermuteAndFlip`): utilities are
    the cell's category counts (or quantile utilities), Δu = :func:`utility_sensitivity` (the
    contribution bound K for a mode). Monotone (temperature Δu/ε) for a mode under add/remove
    one row, where every count moves the same way; 2Δu/ε otherwise (quantile utilities are
    never monotone). No noise margin (moe = 0): the output is a category, not a count; its
    margin is a count gap or a rank error (:mod:`dprelease.plan.margins`, over its ``candidates``,
    the column's declared categories). In a zcdp release it runs at the largest ε with ε²/2 ≤ its ρ."""
    if not isinstance(table.measure, ModeMeasure):
        raise InternalError(f"table {table.name}: planned as a mode without one")
    q, candidates = table.measure.q, spec.dims_cells((table.measure.column,))
    monotone = q is None and not relation.change
    du = utility_sensitivity(q, relation)
    made, pure_epsilon = _pure_noise(spec, table.name, budget,
                                     lambda run_at: PermuteAndFlip(du, run_at, monotone, candidates, q))
    return TablePlan(name=table.name, budget=budget, noise=made, cells=cells, moe=0, moe95=0, level=level,
                     pure_epsilon=pure_epsilon, charge=_pure_charge(budget, made.epsilon, terms))
