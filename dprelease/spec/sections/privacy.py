"""The ``privacy:``, ``budget:`` and ``accuracy:`` sections: the privacy definition (and the
unit its budgets are written in), the privacy unit, the release budget and its δ, and the
confidence of the published margins of error."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dprelease.accounting import KINDS, Budget, budget_of, NotANumber, parse_budget
from dprelease.spec.model import DEFAULT_CONFIDENCE, Column
from dprelease.spec.sections.reader import Reader
from dprelease.spec.yamlsource import Path_


@dataclass(frozen=True, slots=True)
class Definition:
    """The privacy definition and the key and symbol its budgets are written with."""

    name: str  # pure | approx | zcdp (anything else, the schema has reported)
    cost: str  # the budget key: epsilon, or rho under zcdp
    other: str  # the other definitions' key, refused
    symbol: str  # ε or ρ


@dataclass(frozen=True, slots=True)
class Guarantee:
    """The privacy unit and the stated δ of a zcdp release (None otherwise: an approx release's δ
    is its budget's, split by :func:`dprelease.spec.defaults.split_delta`)."""

    unit_id: object  # the person identifier as written, or None (unit: row)
    max_rows: int
    delta: Fraction | None


def definition(r: Reader) -> Definition:
    name = r.get(("privacy", "definition"), str, "pure")
    cost, other = ("rho", "epsilon") if name == "zcdp" else ("epsilon", "rho")
    return Definition(name, cost, other, "ρ" if name == "zcdp" else "ε")


def check_budget_units(r: Reader, d: Definition) -> None:
    """No budget in the other definition's unit: the release's, the lifetime's, each central table's."""
    _wrong_unit(r, d, ("budget",))
    _wrong_unit(r, d, ("dataset", "lifetime_budget"))
    for i, body in enumerate(r.get(("tables",), list, [])):
        if not (isinstance(body, dict) and body.get("kind") == "local"):
            _wrong_unit(r, d, ("tables", i))


def _wrong_unit(r: Reader, d: Definition, at: Path_) -> None:
    """A budget in the other definition's unit (ε in a zcdp release, ρ in a pure one)."""
    body = r.get(at, dict)
    if body is not None and d.other in body:
        r.fail(at + (d.other,), f"this release is {d.name} (privacy.definition), so its budgets are "
               f"{d.symbol}: write {d.cost}: instead of {d.other}: (one release cannot mix "
               "definitions)", at_key=True)


def release_budget(r: Reader, d: Definition) -> Fraction | None:
    """The release's ε (ρ under zcdp); None if absent or invalid (reported)."""
    if isinstance(r.get(("budget",), dict), dict) and not r.written(("budget", d.cost)) \
            and not r.written(("budget", d.other)):  # e.g. {delta: D} alone: the schema lets it through
        r.fail(("budget",), f"missing required key {d.cost!r} (the release's {d.symbol})")
        return None
    return r.fraction(("budget", d.cost), d.symbol)


def delta_beside(r: Reader, d: Definition, at: Path_, what: str) -> Fraction | None:
    """The δ beside a budget's ε: required under approx (0 < δ < 1), refused otherwise."""
    if d.name not in ("pure", "zcdp", "approx") or r.get(at, dict) is None:
        return None  # the schema has reported the definition or the budget
    if d.name != "approx":
        if r.written(at + ("delta",)):
            r.fail(at + ("delta",), f"a {what} δ is for privacy.definition: approx; this release is "
                   f"{d.name} (δ = 0{' in every budget; zcdp states its δ as privacy.delta' if d.name == 'zcdp' else ''})",
                   at_key=True)
        return None
    if not r.written(at + ("delta",)):
        r.fail(at, f"an approx release's {what} budget has a δ beside its ε: add delta: (e.g. 1e-6, well "
               "below 1/number of persons)")
        return None
    delta = r.fraction(at + ("delta",), f"{what} δ")
    if delta is not None and not delta < 1:
        r.fail(at + ("delta",), "δ must lie strictly between 0 and 1")
        return None
    return delta


def confidence(r: Reader) -> Fraction:
    """The confidence level of every published margin of error."""
    path = ("accuracy", "confidence")
    node = r.get(path[:-1], dict, {})
    if "confidence" not in node:
        return DEFAULT_CONFIDENCE
    try:
        value = parse_budget(r.text(path), node["confidence"], what="confidence")
    except NotANumber as exc:
        r.fail(path, str(exc))
        return DEFAULT_CONFIDENCE
    if not 0 < value < 1:
        r.fail(path, f"confidence must lie strictly between 0 and 1 (e.g. 0.95 or 0.90), "
               f"not {r.text(path)}")
        return DEFAULT_CONFIDENCE
    return value


def margin_columns(r: Reader) -> bool:
    """``accuracy.margin_columns``: publish a margin-of-error column beside each estimate."""
    return bool(r.get(("accuracy", "margin_columns"), bool, False))


def person_id(r: Reader) -> object:
    """``privacy.unit.id`` as written (None for unit: row): read to bound contributions, never published."""
    unit = r.get(("privacy", "unit"), dict)
    return unit.get("id") if unit else None


def guarantee(r: Reader, d: Definition, columns: list[Column], has_local: bool) -> Guarantee | None:
    """The privacy unit and the stated δ, checked against the columns and the local tables;
    None at the first problem (reported)."""
    unit = r.get(("privacy", "unit"), dict)
    unit_id = person_id(r)
    max_rows = unit.get("max_rows", 1) if unit else 1
    if type(max_rows) is not int:  # JSON Schema counts 2.0 as an integer
        r.fail(("privacy", "unit", "max_rows"), "max_rows must be a whole number written without a decimal "
               "point (e.g. 2, not 2.0)")
        return None
    if unit_id is not None and any(c.name == unit_id for c in columns):
        r.fail(("privacy", "unit", "id"), f"{unit_id!r} is a declared column; the person identifier is read to "
               "bound contributions and never published, so it cannot be a table column")
        return None
    delta = r.fraction(("privacy", "delta"), "δ")
    if d.name == "zcdp":
        if delta is None and not r.written(("privacy", "delta")):
            r.fail(("privacy",), "a zcdp release states its implied (ε, δ)-DP guarantee: add delta: (e.g. "
                   "delta: 1e-6, well below 1/number of persons)")
            return None
        if delta is not None and not delta < 1:
            r.fail(("privacy", "delta"), "δ must lie strictly between 0 and 1")
            return None
    elif r.written(("privacy", "delta")):
        r.fail(("privacy", "delta"), "privacy.delta is for definition: zcdp (the δ of its stated guarantee); "
               + ("an approx release's δ is a budget: budget: {epsilon: E, delta: D}" if d.name == "approx"
                  else "pure ε-DP has δ = 0"), at_key=True)
        return None
    if has_local and unit_id is not None:
        r.fail(("privacy", "unit"), "local tables count one answer per row, each row one respondent: use "
               "unit: row (a person's several rows would each carry an answer, charged once)")
        return None
    return Guarantee(unit_id, max_rows, delta)


def typed(d: Definition, amount: Fraction, delta: Fraction | None = None) -> Budget | None:
    """``amount`` (with ``delta`` under approx) as a budget of the release's kind; None when the
    definition itself is invalid, or an approx budget lacks its δ (both already reported)."""
    if d.name not in KINDS or (d.name == "approx" and delta is None):
        return None
    return budget_of(d.name, amount, delta)  # type: ignore[arg-type]
