"""Whether a consistency group's tables form a junction tree, and in what order to fit them.

The tables of a group are marginals over subsets of the group's dimensions. When each table
meets the tables before it inside one of them (a running intersection order: ``sex × age``,
``sex × marital status``, ``race × Hispanic origin`` do; ``A×B``, ``B×C``, ``C×A`` do not),
consistent post-processing fits them one after another from their own cells
(:mod:`dprelease.postprocess.topdown`) and never builds the cross product of the group's
domains; otherwise it needs that detail, and the spec limits its size.
"""

from __future__ import annotations

import math

Scope = tuple[int, ...]  # a table's dimensions (indices into the group's), in the table's order


def junction_order(scopes: list[Scope], sizes: tuple[int, ...]) -> list[tuple[int, int | None]] | None:
    """An order of the tables in which each table's dimensions shared with the tables before it
    (its separator) lie inside one earlier table: [(table, that earlier table or None)], or None
    when the tables form no junction tree (e.g. A×B, B×C, C×A). Larger tables come first."""
    remaining = list(range(len(scopes)))
    peeled: list[tuple[int, int]] = []
    while len(remaining) > 1:
        for t in sorted(remaining, key=lambda i: (math.prod(sizes[d] for d in scopes[i]), -i)):
            others = [o for o in remaining if o != t]
            shared = set(scopes[t]) & set().union(*(set(scopes[o]) for o in others))
            host = next((o for o in others if shared <= set(scopes[o])), None)
            if host is not None:
                peeled.append((t, host))
                remaining.remove(t)
                break
        else:
            return None
    order: list[tuple[int, int | None]] = [(remaining[0], None)]
    for t, host in reversed(peeled):
        order.append((t, host))
    return order


def cliques(scopes: list[Scope], sizes: tuple[int, ...]) -> list[Scope]:
    """The maximal cliques of a chordal completion of the tables' interaction graph (two
    dimensions joined when a table has both), by min-fill elimination (ties: the smaller clique
    in cells), each in increasing order. Every table lies inside one of them."""
    adjacent: dict[int, set[int]] = {d: set() for s in scopes for d in s}
    for s in scopes:
        for d in s:
            adjacent[d] |= set(s) - {d}
    found: list[frozenset[int]] = []
    left = set(adjacent)
    while left:
        def cost(v: int) -> tuple[int, int, int]:
            around = adjacent[v] & left
            fill = sum(1 for a in around for b in around if a < b and b not in adjacent[a])
            return fill, math.prod(sizes[d] for d in around | {v}), v
        v = min(left, key=cost)
        around = adjacent[v] & left
        for a in around:
            adjacent[a] |= around - {a}
        found.append(frozenset(around | {v}))
        left.remove(v)
    maximal = [c for c in found if not any(c < other for other in found)]
    return [tuple(sorted(c)) for c in dict.fromkeys(maximal)]


def fitting_scopes(scopes: list[Scope], sizes: tuple[int, ...]) -> tuple[list[Scope], list[tuple[int, int | None]]]:
    """The tables to fit: the group's own, then a hidden one per maximal clique of the chordal
    completion that no table covers (none when the tables form a junction tree; one over A, B, C
    for A×B, B×C, C×A), and the order to fit them in (:func:`junction_order`, which always exists
    with the cliques added). The hidden tables are estimated, fitted and never published."""
    hidden = [c for c in cliques(scopes, sizes) if not any(set(c) <= set(s) for s in scopes)]
    every = [*scopes, *hidden]
    order = junction_order(every, sizes)
    assert order is not None  # tables inside the cliques of a chordal graph: a junction tree
    return every, order
