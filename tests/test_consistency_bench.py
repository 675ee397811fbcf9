"""The harness of benchmarks/consistency.py (issue 21): its verdicts and its repeatable simulated
releases. On the shipped national 2019 excerpt only (the 2018 concatenation is never read here)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from consistency import METHODS, SeededWords, accuracy_lines, goals_met, simulate  # noqa: E402
from consistency_data import hierarchy  # noqa: E402

from dprelease.spec import load_spec  # noqa: E402


def _result(ours_cells: float, ours_totals: float) -> dict:
    rows = []
    for method, cells, totals in (("clamp", 5.0, 50.0), ("consistent", ours_cells, ours_totals),
                                  ("baseline", 3.0, 9.0)):
        rows.append({"table": "t", "level": "PUMA", "method": method, "cell_mae": cells, "total_mae": totals})
    return {"trials": 1, "seed": 1, "rows": rows, "seconds": {m: 0.0 for m in METHODS},
            "dataset": {"persons": 1000, "states": 2, "pumas": 3}}


def test_goal_is_met_only_when_ours_is_no_worse_than_baseline_and_clamp():
    assert goals_met(_result(3.0, 9.0)) == []
    assert goals_met(_result(3.5, 8.0)) == ["t PUMA cells > baseline"]
    assert goals_met(_result(2.0, 60.0)) == ["t PUMA totals > baseline/clamp"]


def test_the_table_prints_ratios_ours_over_baseline():
    text = "\n".join(accuracy_lines("x", _result(1.5, 4.5)))
    assert "| t | PUMA | 5.00 | 1.50 | 3.00 | 0.50 | 50.00 | 4.50 | 9.00 | 0.50 |" in text
    assert "Goal (ours ≤ baseline and ≤ clamp, cells and totals, every table and level): met" in text


def test_seeded_words_repeat():
    assert (SeededWords(4).words(5) == SeededWords(4).words(5)).all()
    assert (SeededWords(4).words(5) != SeededWords(5).words(5)).any()


def test_hierarchy_of_the_census_spec():
    names, parents = hierarchy(load_spec(ROOT / "configs" / "acs_census.yaml"))
    assert names == ["root", "STATE", "PUMA"]
    assert parents[0] is None and (parents[1] == 0).all()
    assert parents[2].max() == parents[1].size - 1  # every state has a PUMA


def test_simulated_releases_repeat_with_a_seed_and_cover_every_method_table_and_level():
    spec = load_spec(ROOT / "configs" / "acs_census.yaml")
    first, again = simulate(spec, 1, seed=9), simulate(spec, 1, seed=9)
    assert first["rows"] == again["rows"]
    keys = {(r["table"], r["level"], r["method"]) for r in first["rows"]}
    assert keys == {(t.name, lv, m) for t in spec.tables for lv in ("root", "STATE", "PUMA") for m in METHODS}
    assert all(np.isfinite(r["cell_mae"]) and r["cell_mae"] > 0 for r in first["rows"])
