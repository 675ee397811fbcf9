"""A reference for the top-down fit that cannot fail to converge: the nearest point of the
transportation polytope {x ≥ 0, row sums r, column sums c} to v, computed exactly in Fractions
on a given support and certified by its own KKT conditions (tests/README.md, "Luck").

Model: minimise ½‖x − v‖² over that polytope. Its KKT conditions: x = max(0, v + α_i + β_j) for
some duals (α, β), with the sums met. The problem is strictly convex, so a point meeting them is
THE nearest point, whoever found it.

Algorithm, every step finite and exact (every float is a rational): with the cells off the
support held at 0, x = v + α_i + β_j on the support, (α, β) solving the sums' linear system
(Gauss–Jordan elimination; unique up to a shift of each connected component of the support's
row–column graph, which leaves x unchanged). Then checked exactly: x ≥ 0 on the support, and
shifts of the components that price every cell off the support at v + α_i + β_j ≤ 0, found by
Bellman–Ford on difference constraints (a negative cycle: no such duals). A support that is not
the optimum's fails an assertion; an answer returned is exact. The row and column sums must agree
exactly as given (binary floats): sums that differ in their last bits are refused as "cannot be
met" (a false failure, never a false pass; the top-down blocks' parent sums are integers). Cost: (k + m)³ Fraction
operations a block, for the small blocks of the tests."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

Cell = tuple[int, int]


def exact_projection(v: np.ndarray, r: np.ndarray, c: np.ndarray, support: np.ndarray) -> np.ndarray:
    """The nearest point to ``v`` (k × m; ``-inf`` or nan: not a variable, held at 0) with row
    sums ``r``, column sums ``c`` and positive cells ``support`` (a guess, such as the fit's
    own), exactly (returned as floats); an AssertionError if the guess is not the optimum's."""
    k, m = v.shape
    value = {(i, j): Fraction(float(v[i, j])) for i in range(k) for j in range(m) if np.isfinite(v[i, j])}
    on = [cell for cell in value if support[cell]]
    dual = _duals(value, on, [Fraction(float(s)) for s in (*r, *c)], k, m)
    x = {(i, j): value[i, j] + dual[i] + dual[k + j] for i, j in on}
    assert all(x_ij >= 0 for x_ij in x.values()), "a cell of the support is negative at the projection"
    _price_off_support(value, x, dual, k, m)
    out = np.zeros((k, m))
    for cell, x_ij in x.items():
        out[cell] = float(x_ij)
    return out


def _duals(value: dict[Cell, Fraction], on: list[Cell], sums: list[Fraction], k: int, m: int) -> list[Fraction]:
    """(α_0 … α_k−1, β_0 … β_m−1) meeting every sum with x = v + α_i + β_j on the support ``on``
    (a free unknown left at 0), by Gauss–Jordan elimination in Fractions."""
    rows = [[Fraction(0)] * (k + m) + [s] for s in sums]  # the unknowns, then the right side
    for i, j in on:
        for eq in (i, k + j):
            rows[eq][i] += 1
            rows[eq][k + j] += 1
            rows[eq][-1] -= value[i, j]
    pivots: list[int] = []
    for col in range(k + m):
        at = len(pivots)
        found = next((q for q in range(at, k + m) if rows[q][col] != 0), None)
        if found is None:
            continue
        rows[at], rows[found] = rows[found], rows[at]
        rows[at] = [a / rows[at][col] for a in rows[at]]
        for q in range(k + m):
            if q != at and rows[q][col] != 0:
                f = rows[q][col]
                rows[q] = [a - f * b for a, b in zip(rows[q], rows[at])]
        pivots.append(col)
    assert all(row[-1] == 0 for row in rows[len(pivots):]), "the sums cannot be met on this support"
    dual = [Fraction(0)] * (k + m)
    for q, col in enumerate(pivots):
        dual[col] = rows[q][-1]
    return dual


def _price_off_support(value: dict[Cell, Fraction], x: dict[Cell, Fraction], dual: list[Fraction],
                       k: int, m: int) -> None:
    """Assert that shifts of the support's components price every cell off it at or below 0. A
    shift t of a component adds t to its rows' α and takes it from its columns' β (x unchanged);
    an off cell (i, j) of reduced price w = v + α_i + β_j then needs w + t_A − t_B ≤ 0 (A: i's
    component, B: j's), i.e. t_A ≤ t_B − w: shortest paths, by Bellman–Ford from every component
    at 0."""
    parent = list(range(k + m))  # rows 0 … k−1, columns k … k+m−1

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, j in x:
        parent[root(i)] = root(k + j)
    edges = []
    for (i, j), v_ij in value.items():
        if (i, j) in x:
            continue
        w, a, b = v_ij + dual[i] + dual[k + j], root(i), root(k + j)
        if a == b:
            assert w <= 0, f"cell {(i, j)} off the support is priced above 0 within its component"
        else:
            edges.append((b, a, -w))
    t = {root(a): Fraction(0) for a in range(k + m)}
    for _ in range(len(t)):
        changed = False
        for b, a, w in edges:
            if t[b] + w < t[a]:
                t[a], changed = t[b] + w, True
        if not changed:
            return
    raise AssertionError("no shifts of the components price every cell off the support at or below 0")
