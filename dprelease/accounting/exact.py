"""Exact numbers for budgets: parsing the text the user wrote, and showing fractions.

No floats enter here. ε is parsed from the text the user wrote, so ``0.1`` is exactly 1/10.
Conversions between guarantees are in :mod:`dprelease.accounting.conversions`; the budget
types in :mod:`dprelease.accounting.budgets`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Iterable

_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # ASCII only
_RATIO = re.compile(r"[+-]?[0-9]+\s*/\s*[0-9]+")
_MAX_DIGITS = 40  # a budget written with more digits than this is a slip, not a need
_MAX_EXPONENT = 400


class NotANumber(ValueError):
    """Raised with a message that tells the user how to write the number."""


def parse_exact(text: str, *, what: str = "ε") -> Fraction:
    """Parse a decimal (``0.1``), scientific (``1e-1``) or fraction (``1/10``) string exactly."""
    s = text.strip()
    if len(s) > 2 * _MAX_DIGITS + 8:
        raise NotANumber(f"{what} {text!r} is too long to be a budget")
    if _RATIO.fullmatch(s):
        num, den = (int(p) for p in s.split("/"))
        if den == 0:
            raise NotANumber(f"{what} {text!r} divides by zero")
        return Fraction(num, den)
    if _DECIMAL.fullmatch(s):
        mantissa, _, exponent = s.lower().partition("e")
        if exponent and abs(int(exponent)) > _MAX_EXPONENT:
            raise NotANumber(f"{what} {text!r} has an exponent out of range")
        return Fraction(s)
    if s.lower().lstrip("+-.") in {"inf", "infinity", "nan"}:
        raise NotANumber(f"{what} must be a finite number, not {text!r}")
    raise NotANumber(f"{what} {text!r} is not a decimal or a fraction; write e.g. 0.1 or \"1/10\"")


def parse_budget(text: str | None, value: object, *, what: str = "ε") -> Fraction:
    """Read a positive budget from a YAML scalar's source ``text`` and its typed ``value``.

    Booleans, nulls, lists, ``.inf``, ``.nan``, zero and negatives are refused.
    """
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        raise NotANumber(f"{what} must be a positive number such as 0.5 or \"1/2\", not {text or value!r}")
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise NotANumber(f"{what} must be a finite number, not {text!r}")
    result = parse_exact(text if text is not None else str(value), what=what)
    if result <= 0:
        raise NotANumber(f"{what} must be greater than 0, not {text!r}")
    return result


def compose_sequential(epsilons: Iterable[Fraction]) -> Fraction:
    """Sequential composition under pure DP: the total privacy loss is the exact sum."""
    return sum(epsilons, Fraction(0))


def fraction_text(x: Fraction) -> str:
    """The exact text stored in the ledger and JSON outputs: ``"3/4"``, or ``"2"`` for integers."""
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def decimal_text(x: Fraction, digits: int = 6) -> str:
    """A display form: exact when it terminates within ``digits`` decimals, else ≈ rounded."""
    scaled = x * 10**digits
    if scaled.denominator == 1:
        return _exact_decimal(x, digits)
    approx = round(scaled) / Fraction(10**digits)
    return "≈" + _exact_decimal(approx, digits)


def _exact_decimal(x: Fraction, digits: int) -> str:
    sign = "-" if x < 0 else ""
    x = abs(x)
    whole, rest = divmod(x.numerator * 10**digits // x.denominator, 10**digits)
    frac = str(rest).rjust(digits, "0").rstrip("0")
    return f"{sign}{whole}" + (f".{frac}" if frac else "")


def exact_and_decimal(x: Fraction) -> str:
    """For people: ``3/4 (0.75)``, ``1/3 (≈0.3333)``, ``2``; exact first, decimal for reading."""
    exact = fraction_text(x)
    if x != 0 and abs(x) < Fraction(1, 1000):
        return f"{exact} (≈{float(x):.4g})"  # display only
    dec = decimal_text(x, 4)
    return exact if exact == dec else f"{exact} ({dec})"


def percent_text(x: Fraction) -> str:
    """``95%``, ``≈33.33%``: a share for display."""
    return decimal_text(x * 100, 2) + "%"


def round_significant(x: Fraction, digits: int, *, up: bool) -> Fraction:
    """``x`` (> 0) rounded to ``digits`` significant decimal digits, up or down, exactly (the one
    rounding of budgets and scales to short decimals: conservative callers round up)."""
    if x <= 0:
        raise ValueError("only a positive amount is rounded")
    exponent = len(str(x.numerator // x.denominator)) if x >= 1 else -_leading_zeros(x)
    unit = Fraction(10) ** (exponent - digits)
    steps = -(-x // unit) if up else x // unit
    return steps * unit


def _leading_zeros(x: Fraction) -> int:
    """The zeros between the decimal point and the first significant digit of ``x`` (0 < x < 1)."""
    n = 0
    while x * 10 ** (n + 1) < 1:
        n += 1
    return n
