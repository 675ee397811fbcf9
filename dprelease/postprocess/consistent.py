"""Census-style consistent post-processing of a consistency group's noisy measurements.

One job: turn one group's noisy measurements (every table at every level) and the declared
invariants into published tables that are non-negative integers, whose parents' cells are the
sums of their children's, and that agree on every marginal two tables share — in three steps,
each its own module, working from the tables' own cells (never the cross product of the group's
domains, which for a few tables of a census is millions of cells per place):

1. :mod:`.gls` — the generalised least-squares estimate of every published cell from every
   measurement that informs it: every level, every table sharing a marginal, weighted by the
   exact noise variances; the invariants as exact measurements.
2. :mod:`.nonnegative` — top-down, table by table in a junction order
   (:func:`dprelease.spec.junction.fitting_scopes`), the nearest non-negative values keeping the
   sums fixed before them.
3. :mod:`.integral` — integers keeping those sums exactly.

:mod:`.topdown` runs steps 2 and 3 over the hierarchy. A group whose tables form no junction
tree (A×B, B×C, C×A) gets a hidden table per uncovered clique (here A×B×C), estimated and fitted
like the others and never published; the spec limits its size.

What it sees of the confidential data is the declared invariants (exact totals published
outside DP, :class:`.invariants.Invariants`) when the caller passes them, and nothing else.
May import its siblings, numpy, scipy and :mod:`dprelease.spec`; never :mod:`dprelease.data`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dprelease.postprocess import gls
from dprelease.postprocess.hierarchy import group_levels
from dprelease.postprocess.invariants import Invariants
from dprelease.postprocess.parents import Workers
from dprelease.postprocess.topdown import consistent_levels, forced_zeros
from dprelease.spec import ROOT, Spec, Table
from dprelease.spec.junction import fitting_scopes

Key = tuple[str, str | None]


def consistent_group(spec: Spec, tables: list[Table], noisy: dict[Key, np.ndarray], variances: dict[Key, float],
                     invariants: Invariants | None = None,
                     structural: dict[Key, np.ndarray | None] | None = None,
                     timings: dict[str, float] | None = None, workers: Workers | int | None = None,
                     sink: Callable[[Key, np.ndarray], None] | None = None) -> dict[Key, np.ndarray]:
    """Published (non-negative, integer, consistent) values for every measurement of the group.

    Assumes: each measurement's noise independent, mean zero, with the variance ``variances``
    states (the plan's); ``noisy[(table, level)]`` places × the table's cells.

    ``structural``: per measurement, its structural cells (:mod:`dprelease.plan.structural`; the
    same cells of the non-geographic dimensions in every place and level). They are known zeros:
    they, and the cells of other tables they force to zero, are held at zero in the estimate
    (their published values are zeros, no noise drawn) and published as exact zeros.

    ``invariants``: exact place totals per level (the root's as ``ROOT``), published outside
    DP and checked against the spec by the caller, who passes them only for a group whose
    tables count every row (no ``where``). Each place's total then equals its invariant exactly.
    They are the only values of the confidential data this sees; all else is noisy.

    ``timings`` and ``workers``: as :func:`.topdown.consistent_levels` takes them. ``sink``: each
    measurement's published values are handed to it as soon as they are final (level by level,
    from the root; its structural cells exact zeros), and are not in the returned dict: a
    caller that writes them out and drops them holds about two levels of the group at a time.
    """
    dims = list(dict.fromkeys(c for t in tables for c in t.group_by))
    sizes = tuple(spec.column(c).size for c in dims)
    levels = group_levels(spec, tables[0])
    index = {level.name: i for i, level in enumerate(levels)}
    tree = gls.Tree(tuple(level.units for level in levels), tuple(level.parent for level in levels))
    own = [tuple(dims.index(c) for c in t.group_by) for t in tables]
    scopes, order = fitting_scopes(own, sizes)
    measurements = [gls.Measurement(scope, index[name], noisy[(t.name, name)].reshape(tree.units[index[name]], -1),
                                    variances[(t.name, name)])
                    for t, scope in zip(tables, own) for name, _, _ in t.measured()]
    fixed: dict[int, np.ndarray] = {}
    for name, i in index.items():
        exact = None if invariants is None else invariants.get(name or ROOT)
        if exact is not None:
            fixed[i] = np.asarray(exact, dtype=np.int64).reshape(-1)
            measurements.append(gls.Measurement((), i, fixed[i].reshape(-1, 1).astype(np.float64), 0.0))
    masks = []
    for k, scope in enumerate(scopes):
        cells = math.prod(sizes[d] for d in scope)
        mask = (structural or {}).get((tables[k].name, levels[0].name)) if k < len(tables) else None
        masks.append(np.zeros(cells, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(-1)[:cells])
    zeros = forced_zeros(scopes, sizes, masks)
    known = {i: zeros[own.index(m.dims)] for i, m in enumerate(measurements) if m.dims in own and m.variance > 0}
    measured = {(k, index[name]) for k, t in enumerate(tables) for name, _, _ in t.measured()}
    out: dict[Key, np.ndarray] = {}
    for k, level, values in consistent_levels(tree, sizes, scopes, measurements, zeros, order, fixed, known, timings,
                                              workers):
        if (k, level) in measured:  # (a hidden table, or a level a table is not measured at, is never published)
            key = (tables[k].name, levels[level].name)
            if sink is None:
                out[key] = values.reshape(-1)
            else:
                sink(key, values.reshape(-1))
    return out
