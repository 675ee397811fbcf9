"""The canonical form of a resolved spec, and its fingerprint.

Format 1 names every budget ``epsilon`` whatever its kind (``privacy.definition`` says which:
ρ under zcdp) and keeps an approx release's δ budget as ``privacy.delta``: the typed model
(:class:`dprelease.accounting.Budget`) is written into it and read back from it unchanged, so
that the fingerprints of existing specs, approvals and published releases stay valid.

The fingerprint is what a reviewer approves: SHA-256 over canonical JSON of the *resolved*
spec, with domain files inlined (editing a domain file changes it) and budgets as exact
fractions (``0.1`` and ``"1/10"`` fingerprint alike). Settings that change nothing released are
left out: the ledger location, the output directory (``output_dir:``: where a release is written,
not what it is, so moving a project's outputs keeps its approvals), the confidence level of the
displayed margins, the cell limit.
"""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from dprelease.accounting import ApproxDP, amount_text, budget_of, delta_of, fraction_text
from dprelease.spec.model import (
    AutoSplit,
    BinnedColumn,
    CategoricalColumn,
    Column,
    Condition,
    Dataset,
    LocalTable,
    MeanMeasure,
    ModeMeasure,
    RangeColumn,
    RollupColumn,
    Rule,
    Spec,
    SumMeasure,
    Table,
)

FORMAT_VERSION = 1


def canonical(spec: Spec) -> dict[str, Any]:
    d = spec.dataset
    out = {
        "format": FORMAT_VERSION,
        "release": spec.release,
        "description": spec.description,
        "dataset": {
            "name": d.name, "path": d.path, "format": d.format, "na_values": list(d.na_values),
            "delimiter": d.delimiter,
            "lifetime_epsilon": amount_text(d.lifetime) if d.lifetime else None,
            **({"lifetime_delta": fraction_text(d.lifetime.delta)} if isinstance(d.lifetime, ApproxDP) else {}),
            **({"partition": {"column": d.partition_column, "value": d.partition_value,
                              "disjoint_units": d.disjoint_units}} if d.partition_column else {}),
        },
        "privacy": {"definition": spec.definition,
                    "unit": spec.unit if spec.unit == "row" else {"id": spec.unit_id, "max_rows": spec.max_rows}},
        "budget": {"epsilon": amount_text(spec.budget)},
        "columns": [_column(c) for c in spec.columns],
        "geography": list(spec.geography),
        "tables": [
            {
                "name": t.name, "description": t.description, "group_by": list(t.group_by),
                "levels": list(t.levels), "level_epsilons": [amount_text(b) for b in t.level_budgets],
                "consistency": t.consistency,
                "where": [[c.column, c.op, list(c.operand)] for c in t.where],
                "epsilon": amount_text(t.budget), "post_process": t.post_process,
                # only when not the default: specs without keep their fingerprints
                **({"mechanism": t.mechanism, "upper": t.upper} if t.mechanism != "discrete_laplace" else {}),
                **({"measure": {"sum": t.measure.column, "bounds": [t.measure.low, t.measure.high],
                                "granularity": t.measure.granularity, "missing_as_zero": t.measure.missing_as_zero}}
                   if isinstance(t.measure, SumMeasure) else {}),
                **({"measure": {"mean": t.measure.column, "bounds": [t.measure.low, t.measure.high],
                                "granularity": t.measure.granularity, "missing": t.measure.missing,
                                "sum_share": fraction_text(t.measure.sum_share)}}
                   if isinstance(t.measure, MeanMeasure) else {}),
                **({"delta": fraction_text(t.delta)} if t.delta is not None else {}),
                **({"measure": {t.measure.kind: t.measure.column,
                                **({"q": fraction_text(t.measure.q)} if t.measure.q is not None else {})}}
                   if isinstance(t.measure, ModeMeasure) else {}),
                **({"structural_zeros": t.structural_zeros} if t.structural_zeros != "publish" else {}),
                # epsilon: auto: the weights, and whether the budgets above are the planner's split
                # (they are in every plan's fingerprint: an approval covers the split chosen)
                **({"auto": {"weights": [fraction_text(w) for w in t.auto.weights], "chosen": t.auto.chosen}}
                   if t.auto is not None else {}),
            }
            for t in spec.tables
        ],
    }
    stated = spec.guarantee_delta if spec.guarantee_delta is not None else delta_of(spec.budget)
    if stated is not None:  # format 1 keeps an approx release's δ budget here too
        out["privacy"]["delta"] = fraction_text(stated)
    if spec.local_tables:  # only when declared: specs without keep their fingerprints
        out["local_tables"] = [{"name": t.name, "column": t.column, "protocol": t.protocol,
                                "epsilon_local": None if t.epsilon is None else fraction_text(t.epsilon),
                                "collection": t.collection, "memoised": t.memoised, "memo_of": t.memo_of,
                                "description": t.description}
                               for t in spec.local_tables]
    if spec.invariants:  # only when declared: specs without keep their fingerprints
        out["invariants"] = {"totals": list(spec.invariants)}
    if spec.rules:  # only when declared: specs without keep their fingerprints
        out["rules"] = [{"name": r.name, "description": r.description, "if": _conditions(r.if_),
                         "then": _conditions(r.then), "both_ways": r.both_ways} for r in spec.rules]
    return out


def _conditions(conditions: tuple[Condition, ...]) -> list[list[Any]]:
    return [[c.column, c.op, list(c.operand)] for c in conditions]


def _conditions_from(items: list[list[Any]]) -> tuple[Condition, ...]:
    return tuple(Condition(c, op, tuple(operand)) for c, op, operand in items)


def _column(c: Column) -> dict[str, Any]:
    match c:
        case CategoricalColumn():
            return {"name": c.name, "kind": "categorical", "values": list(c.values),
                    "labels": list(c.labels) if c.labels else None, "missing": c.missing,
                    "on_out_of_domain": c.on_out_of_domain}
        case RangeColumn():
            return {"name": c.name, "kind": "range", "low": c.low, "high": c.high, "missing": c.missing,
                    "on_out_of_domain": c.on_out_of_domain}
        case BinnedColumn():
            return {"name": c.name, "kind": "bins", "from": c.source, "edges": list(c.edges),
                    "labels": list(c.labels), "missing": c.missing}
        case RollupColumn():
            return {"name": c.name, "kind": "rollup", "from": c.source, "values": list(c.values),
                    "parent_of": list(c.parent_of)}
    raise AssertionError(c)  # pragma: no cover


def fingerprint(spec: Spec) -> str:
    """SHA-256 of the canonical spec. A recurring release is fingerprinted by its template, not
    its resolved name: one approval covers every run of the schedule."""
    data = canonical(spec)
    if spec.release_template:
        data["release"] = spec.release_template
    if spec.dataset.partition_column:  # every period of a schedule is the same plan
        data["dataset"]["partition"]["value"] = spec.dataset.partition_template
        data["dataset"]["name"] = spec.dataset.base_name or spec.dataset.name
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def spec_from_canonical(data: dict[str, Any], source: Path) -> Spec:
    """Rebuild the typed spec from its canonical form (as saved beside a release).

    Used to re-run post-processing without the original YAML or domain files; the data path
    it names is never opened.
    """
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(f"canonical spec format {data.get('format')!r} is not {FORMAT_VERSION}")
    d, kind = data["dataset"], data["privacy"]["definition"]
    stated = Fraction(data["privacy"]["delta"]) if "delta" in data["privacy"] else None
    dataset = Dataset(name=d["name"], path=d["path"], resolved_path=source.parent / d["path"], format=d["format"],
                      na_values=tuple(d["na_values"]), delimiter=d["delimiter"],
                      lifetime=budget_of(kind, Fraction(d["lifetime_epsilon"]),
                                         Fraction(d["lifetime_delta"]) if "lifetime_delta" in d else None)
                      if d["lifetime_epsilon"] else None)
    columns = tuple(_column_from(c) for c in data["columns"])
    tables = tuple(_table_from(t, kind) for t in data["tables"])
    unit = data["privacy"]["unit"]
    return Spec(source=source, release=data["release"], dataset=dataset, definition=data["privacy"]["definition"],
                unit="row" if unit == "row" else "person", unit_id=None if unit == "row" else unit["id"],
                max_rows=1 if unit == "row" else unit["max_rows"],
                budget=budget_of(kind, Fraction(data["budget"]["epsilon"]), stated if kind == "approx" else None),
                columns=columns,
                tables=tables, geography=tuple(data["geography"]), description=data["description"],
                invariants=tuple(data.get("invariants", {}).get("totals", ())),
                guarantee_delta=stated if kind == "zcdp" else None,
                local_tables=tuple(LocalTable(t["name"], t["column"], t["protocol"],
                                              None if t["epsilon_local"] is None else Fraction(t["epsilon_local"]),
                                              t["collection"], t["memoised"], t["description"], t.get("memo_of"))
                                   for t in data.get("local_tables", ())),
                rules=tuple(Rule(r["name"], _conditions_from(r["if"]), _conditions_from(r["then"]), r["both_ways"],
                                 r["description"]) for r in data.get("rules", ())))


def _measure_from(m: dict[str, Any] | None) -> SumMeasure | ModeMeasure | MeanMeasure | None:
    if m is None:
        return None
    if "mean" in m:
        return MeanMeasure(m["mean"], m["bounds"][0], m["bounds"][1], m["granularity"], m["missing"],
                           Fraction(m["sum_share"]))
    if "mode" in m:
        return ModeMeasure(m["mode"])
    if "quantile" in m:
        return ModeMeasure(m["quantile"], Fraction(m["q"]))
    return SumMeasure(m["sum"], m["bounds"][0], m["bounds"][1], m["granularity"], m["missing_as_zero"])


def _column_from(c: dict[str, Any]) -> Column:
    match c["kind"]:
        case "categorical":
            return CategoricalColumn(c["name"], tuple(c["values"]), tuple(c["labels"]) if c["labels"] else None,
                                     c["missing"], c["on_out_of_domain"])
        case "range":
            return RangeColumn(c["name"], c["low"], c["high"], c["missing"], c["on_out_of_domain"])
        case "bins":
            return BinnedColumn(c["name"], c["from"], tuple(c["edges"]), tuple(c["labels"]), c["missing"])
        case "rollup":
            return RollupColumn(c["name"], c["from"], tuple(c["values"]), tuple(c["parent_of"]))
    raise ValueError(f"unknown column kind {c['kind']!r}")


def _table_from(t: dict[str, Any], kind: Any) -> Table:
    no_delta = Fraction(0) if kind == "approx" else None  # a Gaussian table's δ is in t["delta"]
    table = Table(name=t["name"], group_by=tuple(t["group_by"]),
                  where=tuple(Condition(c, op, tuple(operand)) for c, op, operand in t["where"]),
                  budget=budget_of(kind, Fraction(t["epsilon"]), no_delta), post_process=t["post_process"],
                  description=t["description"], levels=tuple(t["levels"]),
                  level_budgets=tuple(budget_of(kind, Fraction(e), no_delta) for e in t["level_epsilons"]),
                  consistency=t["consistency"], mechanism=t.get("mechanism", "discrete_laplace"),
                  upper=t.get("upper"), measure=_measure_from(t.get("measure")),
                  structural_zeros=t.get("structural_zeros", "publish"),
                  auto=AutoSplit(tuple(Fraction(w) for w in t["auto"]["weights"]), t["auto"]["chosen"])
                  if "auto" in t else None)
    return table.with_delta(Fraction(t["delta"])) if "delta" in t else table
