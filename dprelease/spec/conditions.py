"""What a row filter means, on codes: the one definition the data layer (filtering rows) and
the planner (structural zeros, reasoning over every possible code) share."""

from __future__ import annotations

import numpy as np

from dprelease.spec.model import BinnedColumn, CategoricalColumn, Column, Condition, RangeColumn


def holds(column: Column, condition: Condition, codes: np.ndarray) -> np.ndarray:
    """Per code of ``column`` in ``codes`` (its values, then its missing category), whether a row
    with that code satisfies ``condition``: a missing value satisfies none but ``missing``."""
    present = codes != column.size - 1 if column.missing is not None else np.ones(codes.size, dtype=bool)
    operand = [code_of(column, v) for v in condition.operand]
    match condition.op:
        case "missing":  # rules only: the value is missing
            return ~present
        case "present":  # rules only: the value is not missing
            return present
        case "eq":
            hit = codes == operand[0]
        case "ne":
            hit = codes != operand[0]
        case "in":
            hit = np.isin(codes, operand)
        case "not_in":
            hit = ~np.isin(codes, operand)
        case "ge":
            hit = codes >= operand[0]
        case "gt":
            hit = codes > operand[0]
        case "le":
            hit = codes <= operand[0]
        case "lt":
            hit = codes < operand[0]
        case _:
            raise AssertionError(condition.op)  # pragma: no cover
    return hit & present


def code_of(column: Column, value: str | int) -> int:
    """The code of a declared value (a range value, a category, a bin's label)."""
    match column:
        case RangeColumn(low=low):
            return int(value) - low  # codes keep the order of values
        case CategoricalColumn(values=values):
            return values.index(str(value))
        case BinnedColumn(labels=labels):
            return labels.index(str(value))
    raise AssertionError(column)  # pragma: no cover
