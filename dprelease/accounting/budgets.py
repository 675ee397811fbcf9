"""Privacy budgets as types: pure ε, zCDP ρ and approximate (ε, δ), never mixed by accident.

A budget is an exact amount of one kind of guarantee. Budgets of one kind add (sequential
composition) and compare; budgets of different kinds refuse to: a ρ is not an ε, and adding
one to the other is the silent error this module exists to prevent (a :class:`TypeError`,
a bug, never a user mistake). Crossing kinds is always an explicit conversion
(:meth:`PureDP.as_zcdp`, :meth:`PureDP.as_approx`; the others in
:mod:`dprelease.accounting.conversions`), each sound in the direction it goes.

What each guarantee protects is stated for neighbouring datasets D, D′ under the release's
neighbouring relation (:class:`dprelease.accounting.relations.Neighbouring`): the published
outputs change little whether or not one privacy unit's data is in (or changed).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Iterable, Literal, Mapping, Union

from dprelease.accounting.exact import exact_and_decimal, fraction_text, parse_exact

Kind = Literal["pure", "zcdp", "approx"]
KINDS: tuple[Kind, ...] = ("pure", "zcdp", "approx")


def _exact(value: Fraction, name: str) -> Fraction:
    """``value`` as a Fraction; floats (and anything inexact) are refused. A negative amount is
    allowed: it is what remains after an overrun (``cap − spent − charge``); the parser and the
    ledger refuse negative budgets where they come in."""
    if isinstance(value, bool) or not isinstance(value, (Fraction, int)):
        raise TypeError(f"{name} must be an exact Fraction, not {type(value).__name__} {value!r}")
    return Fraction(value)


def _same_kind(a: object, b: object, verb: str) -> None:
    if type(a) is not type(b):
        kind_a = getattr(a, "kind", type(a).__name__)
        kind_b = getattr(b, "kind", type(b).__name__)
        raise TypeError(f"cannot {verb} a {kind_a} budget and a {kind_b} one: convert one explicitly first")


@dataclass(frozen=True, slots=True)
class PureDP:
    """ε-differential privacy.

    Protects: for neighbouring datasets D, D′ and every set S of outputs,
    P[M(D) ∈ S] ≤ e^ε · P[M(D′) ∈ S]. Pure budgets add under sequential composition, and a
    histogram's disjoint cells cost their ε once (parallel composition)."""

    epsilon: Fraction
    kind: ClassVar[Kind] = "pure"
    symbol: ClassVar[str] = "ε"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _exact(self.epsilon, "ε"))

    @property
    def amount(self) -> Fraction:
        """The budget's one figure, in its own unit (ε)."""
        return self.epsilon

    def __add__(self, other: PureDP) -> PureDP:
        _same_kind(self, other, "add")
        return PureDP(self.epsilon + other.epsilon)

    def __sub__(self, other: PureDP) -> PureDP:
        _same_kind(self, other, "subtract")
        return PureDP(self.epsilon - other.epsilon)

    def __le__(self, other: PureDP) -> bool:
        _same_kind(self, other, "compare")
        return self.epsilon <= other.epsilon

    def __lt__(self, other: PureDP) -> bool:
        _same_kind(self, other, "compare")
        return self.epsilon < other.epsilon

    def scaled(self, share: Fraction) -> PureDP:
        """``share`` of this budget (a split of a table's budget across its parts or levels)."""
        return PureDP(self.epsilon * share)

    def as_zcdp(self) -> ZCDP:
        """ε-DP implies (ε²/2)-zCDP (Bun and Steinke 2016, Proposition 1.4). Exact."""
        return ZCDP(self.epsilon * self.epsilon / 2)

    def as_approx(self) -> ApproxDP:
        """ε-DP is (ε, 0)-DP."""
        return ApproxDP(self.epsilon, Fraction(0))

    def __str__(self) -> str:
        return f"ε = {exact_and_decimal(self.epsilon)}"


@dataclass(frozen=True, slots=True)
class ZCDP:
    """ρ-zero-concentrated differential privacy (Bun and Steinke 2016).

    Protects: for neighbouring D, D′ and every α > 1, the Rényi divergence of order α between
    M(D) and M(D′) is at most ρα. It implies (ε, δ)-DP for every δ > 0
    (:func:`dprelease.accounting.conversions.zcdp_epsilon`). ρ adds under composition."""

    rho: Fraction
    kind: ClassVar[Kind] = "zcdp"
    symbol: ClassVar[str] = "ρ"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", _exact(self.rho, "ρ"))

    @property
    def amount(self) -> Fraction:
        """The budget's one figure, in its own unit (ρ)."""
        return self.rho

    def __add__(self, other: ZCDP) -> ZCDP:
        _same_kind(self, other, "add")
        return ZCDP(self.rho + other.rho)

    def __sub__(self, other: ZCDP) -> ZCDP:
        _same_kind(self, other, "subtract")
        return ZCDP(self.rho - other.rho)

    def __le__(self, other: ZCDP) -> bool:
        _same_kind(self, other, "compare")
        return self.rho <= other.rho

    def __lt__(self, other: ZCDP) -> bool:
        _same_kind(self, other, "compare")
        return self.rho < other.rho

    def scaled(self, share: Fraction) -> ZCDP:
        return ZCDP(self.rho * share)

    def __str__(self) -> str:
        return f"ρ = {exact_and_decimal(self.rho)}"


@dataclass(frozen=True, slots=True)
class ApproxDP:
    """(ε, δ)-differential privacy.

    Protects: for neighbouring D, D′ and every set S of outputs,
    P[M(D) ∈ S] ≤ e^ε · P[M(D′) ∈ S] + δ. Composed here by basic composition: ε and δ each
    add (a sound upper bound)."""

    epsilon: Fraction
    delta: Fraction
    kind: ClassVar[Kind] = "approx"
    symbol: ClassVar[str] = "ε"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _exact(self.epsilon, "ε"))
        object.__setattr__(self, "delta", _exact(self.delta, "δ"))

    @property
    def amount(self) -> Fraction:
        """The budget's ε (its δ is :attr:`delta`)."""
        return self.epsilon

    def __add__(self, other: ApproxDP) -> ApproxDP:
        _same_kind(self, other, "add")
        return ApproxDP(self.epsilon + other.epsilon, self.delta + other.delta)

    def __sub__(self, other: ApproxDP) -> ApproxDP:
        _same_kind(self, other, "subtract")
        return ApproxDP(self.epsilon - other.epsilon, self.delta - other.delta)

    def __le__(self, other: ApproxDP) -> bool:
        """Within ``other`` in both ε and δ."""
        _same_kind(self, other, "compare")
        return self.epsilon <= other.epsilon and self.delta <= other.delta

    def __lt__(self, other: ApproxDP) -> bool:
        _same_kind(self, other, "compare")
        return self <= other and self != other

    def scaled(self, share: Fraction) -> ApproxDP:
        return ApproxDP(self.epsilon * share, self.delta * share)

    def __str__(self) -> str:
        return f"ε = {exact_and_decimal(self.epsilon)}, δ = {fraction_text(self.delta)}"


Budget = Union[PureDP, ZCDP, ApproxDP]


def delta_of(budget: Budget) -> Fraction | None:
    """The δ of an (ε, δ) budget; None for the other kinds (their δ is not a budget)."""
    return budget.delta if isinstance(budget, ApproxDP) else None


def zero(kind: Kind) -> Budget:
    """The empty budget of ``kind``."""
    match kind:
        case "pure":
            return PureDP(Fraction(0))
        case "zcdp":
            return ZCDP(Fraction(0))
        case "approx":
            return ApproxDP(Fraction(0), Fraction(0))
    raise ValueError(f"unknown kind of guarantee {kind!r}")


def budget_of(kind: Kind, amount: Fraction, delta: Fraction | None = None) -> Budget:
    """A budget of ``kind`` from its figures as stored (the ledger's ``amount`` and ``delta``).
    An (ε, δ) budget needs its δ (ValueError without: a missing δ is never taken for 0); the
    other kinds have none."""
    match kind:
        case "pure":
            return PureDP(amount)
        case "zcdp":
            return ZCDP(amount)
        case "approx":
            if delta is None:
                raise ValueError(f"an (ε, δ) budget of ε = {amount} without its δ")
            return ApproxDP(amount, delta)
    raise ValueError(f"unknown kind of guarantee {kind!r}")


def amount_text(budget: Budget, *, decimal: bool = False) -> str:
    """A budget's one figure (ε, or ρ) for display beside its unit's symbol (``budget.symbol``,
    ``Terms.symbol``): exact text (``"3/4"``), or with ``decimal`` the exact text and its decimal
    (``"3/4 (0.75)"``). An (ε, δ) budget's δ is shown on its own (:func:`delta_of`)."""
    return exact_and_decimal(budget.amount) if decimal else fraction_text(budget.amount)


def unit_key(budget: Budget) -> str:
    """The JSON key of a budget's one figure (:func:`amount_text`), named by its unit: ``"rho"``
    for ρ-zCDP, ``"epsilon"`` for pure ε and (ε, δ) (whose δ has a key of its own). Every JSON
    output names an untyped figure so, as :func:`budget_from_record`'s records do: a ρ is never
    written under ``"epsilon"``."""
    return symbol_key(budget.symbol)


def symbol_key(symbol: str) -> str:
    """:func:`unit_key` for a unit known by its symbol (``Terms.symbol``, ``Plan.symbol``): ``"rho"``
    for ρ, ``"epsilon"`` for ε."""
    return "rho" if symbol == "ρ" else "epsilon"


def budget_from_record(record: Mapping[str, object]) -> Budget:
    """A budget from the record that names its own unit, as manifests, ``plan --json`` and
    ``ledger --json`` state it: ``{"epsilon": "1/4"}`` (pure), ``{"rho": "3/10"}`` (zCDP) or
    ``{"epsilon": "1/2", "delta": "1/1000000"}`` (approximate). Each figure is exact text
    (a fraction or a decimal, never a float); anything else is a ValueError naming what is wrong."""
    if not isinstance(record, Mapping):
        raise ValueError(f"a budget record is an object such as {{\"epsilon\": \"1/4\"}}, not {record!r}")
    figures = {}
    for key, value in record.items():
        if key not in ("epsilon", "rho", "delta"):
            raise ValueError(f"a budget record has no key {key!r} (it names epsilon, rho, or epsilon and delta)")
        if not isinstance(value, str):  # a JSON number would be a float: budgets are written as exact text
            raise ValueError(f"budget record {dict(record)!r}: {key} must be exact text such as \"1/4\", not {value!r}")
        figures[key] = parse_exact(value, what=key)
    match sorted(figures):
        case ["epsilon"]:
            return PureDP(figures["epsilon"])
        case ["rho"]:
            return ZCDP(figures["rho"])
        case ["delta", "epsilon"]:
            return ApproxDP(figures["epsilon"], figures["delta"])
    raise ValueError(f"budget record {dict(record)!r} names {sorted(figures) or 'nothing'}: it must name epsilon, "
                     "rho, or epsilon and delta")


def compose(budgets: Iterable[Budget], kind: Kind) -> Budget:
    """Sequential composition: the exact sum of budgets, all of ``kind`` (TypeError otherwise)."""
    total = zero(kind)
    for b in budgets:
        total = add(total, b)
    return total


# Budgets typed as the union ``Budget`` (a plan's, whose kind is the spec's or the ledger's, known
# only at run time) add, subtract and compare through these: each case is one kind, which mypy
# checks, and mixed kinds raise TypeError here, at run time. Budgets of a known type use the
# operators, which mypy checks statically.


def add(a: Budget, b: Budget) -> Budget:
    """``a + b`` (sequential composition) of one kind; TypeError across kinds."""
    match a, b:
        case PureDP(), PureDP():
            return a + b
        case ZCDP(), ZCDP():
            return a + b
        case ApproxDP(), ApproxDP():
            return a + b
    raise _mixed(a, b, "add")


def subtract(a: Budget, b: Budget) -> Budget:
    """``a − b`` (what remains of a cap, or a table's budget less one part's share) of one kind;
    TypeError across kinds."""
    match a, b:
        case PureDP(), PureDP():
            return a - b
        case ZCDP(), ZCDP():
            return a - b
        case ApproxDP(), ApproxDP():
            return a - b
    raise _mixed(a, b, "subtract")


def within(used: Budget, cap: Budget) -> bool:
    """``used ≤ cap``, of one kind (an (ε, δ) budget in ε and in δ); TypeError across kinds."""
    match used, cap:
        case PureDP(), PureDP():
            return used <= cap
        case ZCDP(), ZCDP():
            return used <= cap
        case ApproxDP(), ApproxDP():
            return used <= cap
    raise _mixed(used, cap, "compare")


def _mixed(a: Budget, b: Budget, verb: str) -> TypeError:
    return TypeError(f"cannot {verb} a {a.kind} budget and a {b.kind} one: convert one explicitly first")
