"""``epsilon: auto`` (:mod:`dprelease.plan.split`): the published estimates' error and the SVD
bound against dense matrices on a small uneven tree, the split against the equal one and the
measurements' closed form, determinism, and the approval covering the split."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dprelease.plan import split, workload
from dprelease.plan.planner import plan_release
from dprelease.spec import fingerprint, load_spec

PLACES = ["0101", "0102", "0103", "0201", "0202"]  # STATE 01 has three PUMAs, 02 two: an uneven tree


def tiny_spec(directory: Path, *, definition: str = "zcdp", tables: str | None = None, budget: str = "1") -> Path:
    cost = "rho" if definition == "zcdp" else "epsilon"
    privacy = "{definition: zcdp, unit: row, delta: 1e-6}" if definition == "zcdp" else "{definition: pure, unit: row}"
    tables = tables or f"""  - name: by_a
    group_by: [geography, A]
    consistency: g
    {cost}: auto
    weight: {{root: 1, STATE: 2, PUMA: 3}}
  - name: by_b
    group_by: [geography, B]
    consistency: g
    {cost}: auto
"""
    path = directory / "tiny.yaml"
    path.write_text(f"""release: tiny
dataset:
  name: tiny
  path: data.csv
  lifetime_budget: {{{cost}: 10}}
privacy: {privacy}
budget: {{{cost}: {budget}}}
columns:
  PUMA: {{domain: {PLACES}, geographic: true}}
  A: {{domain: [1, 2]}}
  B: {{domain: [1, 2, 3]}}
geography:
  levels: [STATE, PUMA]
  STATE: {{from: PUMA, prefix: 2}}
tables:
{tables}""")
    return path


def dense(spec, x):  # type: ignore[no-untyped-def]
    """The workload W (every published cell, rows × √ω), the measurements A (rows × 1/√v) over
    the full domain (places × A × B), and the domain size."""
    parts, _, _, d = workload.problem(spec)
    states = sorted({p[:2] for p in PLACES})
    levels = {"root": [[1] * len(PLACES)],
              "STATE": [[int(p[:2] == s) for p in PLACES] for s in states],
              "PUMA": np.eye(len(PLACES)).tolist()}
    sizes = {"A": 2, "B": 3}
    w_rows, a_rows = [], []
    for i, p in enumerate(parts):
        table = spec.tables[p.table]
        level = table.levels[p.level]
        v = p.k / x[i] ** d
        (attr,) = table.group_by
        for place in levels[level]:
            for cell in range(sizes[attr]):
                row = []
                for leaf, a, b in itertools.product(range(len(PLACES)), range(2), range(3)):
                    row.append(place[leaf] * int((a if attr == "A" else b) == cell))
                w_rows.append(np.sqrt(p.weight) * np.array(row, dtype=float))
                a_rows.append(np.array(row, dtype=float) / np.sqrt(v))
    return np.array(w_rows), np.array(a_rows), len(PLACES) * 6


def test_the_published_estimates_error_is_the_dense_gls_error(tmp_path):
    spec = load_spec(tiny_spec(tmp_path))
    parts, groups, _, d = workload.problem(spec)
    x = np.array([0.05, 0.1, 0.2, 0.15, 0.3, 0.2])
    w, a, _ = dense(spec, x)
    expected = np.trace(w @ np.linalg.pinv(a.T @ a) @ w.T)  # tr(W (AᵀΣ⁻¹A)⁺ Wᵀ)
    assert workload.Objective(parts, groups, d)(x) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("definition", ["zcdp", "pure"])
def test_each_measurement_s_published_error_per_cell_is_the_dense_one(tmp_path, definition):
    """What plan states beside each auto measurement: the mean squared error of one of its
    published cells (the GLS estimate's, not its own noise), against the dense computation."""
    spec = load_spec(tiny_spec(tmp_path, definition=definition))
    parts, groups, _, d = workload.problem(spec)
    x = np.array([0.05, 0.1, 0.2, 0.15, 0.3, 0.2])
    w, a, _ = dense(spec, x)
    rows = np.einsum("ij,jk,ik->i", w, np.linalg.pinv(a.T @ a), w)  # each published cell's variance × weight
    expected, at = [], 0
    for p in parts:
        expected.append(rows[at:at + p.cells].mean() / p.weight)
        at += p.cells
    assert at == len(rows)
    found = workload.Objective(parts, groups, d).per_cell(x, parts)
    assert found == pytest.approx(np.array(expected), rel=1e-9)
    assert not np.allclose(found, [p.k / v ** d for p, v in zip(parts, x)])  # not the measurements' own noise


def test_the_published_estimates_error_under_pure_is_the_dense_one(tmp_path):
    spec = load_spec(tiny_spec(tmp_path, definition="pure"))
    parts, groups, _, d = workload.problem(spec)
    assert d == 2 and parts[0].k == 2  # the Laplace's 2Δ²/ε²
    x = np.array([0.05, 0.1, 0.2, 0.15, 0.3, 0.2])
    w, a, _ = dense(spec, x)
    assert workload.Objective(parts, groups, d)(x) == pytest.approx(np.trace(w @ np.linalg.pinv(a.T @ a) @ w.T),
                                                                   rel=1e-9)


@pytest.mark.parametrize("definition", ["zcdp", "pure"])
def test_the_gradient_is_the_central_differences_one(tmp_path, definition):
    tables = """  - name: by_a
    group_by: [geography, A]
    consistency: g
    COST: auto
    weight: {root: 1, STATE: 2, PUMA: 3}
  - name: by_b
    group_by: [geography, B]
    consistency: g
    COST: auto
  - name: plain
    group_by: [A, B]
    COST: auto
""".replace("COST", "rho" if definition == "zcdp" else "epsilon")
    spec = load_spec(tiny_spec(tmp_path, definition=definition, tables=tables))
    parts, groups, _, d = workload.problem(spec)
    f = workload.Objective(parts, groups, d)
    x = np.linspace(0.05, 0.2, len(parts))
    h = x * 1e-6
    central = [(f(x - h[i] * np.eye(len(x))[i]) - f(x + h[i] * np.eye(len(x))[i])) / (2 * h[i]) for i in range(len(x))]
    assert f.gradient(x) == pytest.approx(central, rel=1e-6)


def test_the_svd_bound_is_the_dense_one_and_below_every_split(tmp_path):
    spec = load_spec(tiny_spec(tmp_path))
    parts, groups, budget, d = workload.problem(spec)
    w, _, n = dense(spec, np.ones(len(parts)))
    singular = np.linalg.svd(w, compute_uv=False)
    expected = 0.5 * singular.sum() ** 2 / (float(budget) * n)  # Δ₂²/(2ρ) · (Σσ)²/n
    bound = workload.svd_bound(spec)
    assert bound == pytest.approx(expected, rel=1e-9)
    chosen = split.choose(spec)
    assert bound < chosen.error < chosen.equal_error


def test_the_tree_eigenvalues_are_the_dense_ones():
    parents = (None, np.array([0, 0]), np.array([0, 0, 0, 1, 1]))
    w = [1.5, 2.0, 3.0]
    t = [np.ones((1, 5)), np.array([[1, 1, 1, 0, 0], [0, 0, 0, 1, 1]]), np.eye(5)]
    h = sum(wl * tl.T @ tl for wl, tl in zip(w, t))
    assert np.sort(workload.tree_eigenvalues((1, 2, 5), parents, w)) == pytest.approx(np.linalg.eigvalsh(h))


@pytest.mark.parametrize("definition", ["zcdp", "pure"])
def test_the_split_beats_equal_and_the_measurements_closed_form_and_is_certified(tmp_path, definition):
    spec = load_spec(tiny_spec(tmp_path, definition=definition))
    chosen = split.choose(spec)
    assert chosen.gap <= split.TOLERANCE
    assert chosen.error < chosen.separate_error < chosen.equal_error
    assert sum(chosen.shares, Fraction(0)) <= chosen.budget  # exactly
    assert chosen.unspent < chosen.budget / 1000  # rounded down to 4 significant digits only
    # a perturbation of the optimum (moving budget between any two parts, keeping each part's
    # floor) is never better
    parts, groups, _, d = workload.problem(spec)
    f = workload.Objective(parts, groups, d)
    x = np.array([float(s) for s in chosen.shares])
    floor = float(chosen.budget) / (split.FLOOR * len(x))
    for i, j in itertools.permutations(range(len(x)), 2):
        if x[j] - 0.01 * x[i] < floor:
            continue
        moved = x.copy()
        moved[i] += 0.01 * x[i]
        moved[j] -= 0.01 * x[i]
        assert f(moved) > f(x)


def test_without_consistency_the_split_is_the_closed_form(tmp_path):
    tables = """  - name: by_a
    group_by: [A]
    rho: auto
    weight: 4
  - name: by_b
    group_by: [B]
    rho: auto
"""
    chosen = split.choose(load_spec(tiny_spec(tmp_path, tables=tables)))
    assert chosen.method == "closed form"
    # ρᵢ ∝ √(ωᵢcᵢkᵢ): √(4·2) : √(1·3)
    ratio = float(chosen.shares[0] / chosen.shares[1])
    assert ratio == pytest.approx(np.sqrt(8 / 3), rel=1e-3)


def test_the_split_is_deterministic_and_in_the_fingerprint(tmp_path):
    path = tiny_spec(tmp_path)
    first = plan_release(load_spec(path), None)
    second = plan_release(load_spec(path), None)
    assert [t.budget for t in first.tables] == [t.budget for t in second.tables]
    assert first.fingerprint == second.fingerprint
    resolved = split.resolve(load_spec(path))
    assert fingerprint(resolved) == first.fingerprint  # the approval's fingerprint covers the split chosen
    other = split.apply(load_spec(path), split.Split(**{**_fields(split.choose(resolved_spec := load_spec(path))),
                                                       "shares": tuple(s / 2 for s in split.choose(resolved_spec).shares)}))
    assert fingerprint(other) != first.fingerprint  # another split: another fingerprint, a new approval
    assert sum((t.budget.amount for t in first.tables), Fraction(0)) <= 1


def _fields(s):  # type: ignore[no-untyped-def]
    return {name: getattr(s, name) for name in s.__slots__}


def test_an_approval_covers_the_split_chosen_and_no_other(tmp_path, monkeypatch):
    from dprelease.ledger import Ledger, resolve_location
    from tests.ledgers import make_ledger

    path = tiny_spec(tmp_path)
    where = make_ledger(tmp_path / "ledger.sqlite")
    ledger = Ledger.open(resolve_location(str(where)))
    assert ledger is not None
    approved = plan_release(load_spec(path), None)
    ledger.approve(dataset="tiny", release="tiny", spec_fingerprint=approved.fingerprint, by="reviewer")
    assert ledger.approval("tiny", plan_release(load_spec(path), None).fingerprint) is not None
    monkeypatch.setattr(split, "DIGITS", 3)  # the same spec, another split (as another optimiser might give)
    changed = plan_release(load_spec(path), None)
    assert [t.budget for t in changed.tables] != [t.budget for t in approved.tables]
    assert ledger.approval("tiny", changed.fingerprint) is None  # needs a new approval
    ledger.close()


def test_a_run_publishes_the_chosen_split_in_spec_json(tmp_path):
    """What a release saves (canonical spec) holds the split, marked chosen: post-processing
    re-run from it and its fingerprint agree with the plan's."""
    from dprelease.spec.canonical import canonical, spec_from_canonical

    path = tiny_spec(tmp_path)
    plan = plan_release(load_spec(path), None)
    resolved = split.apply(load_spec(path), plan.split)
    saved = canonical(resolved)
    assert all(t["auto"]["chosen"] for t in saved["tables"])
    again = spec_from_canonical(saved, path)
    assert fingerprint(again) == plan.fingerprint
    assert split.resolve(again) is again  # chosen: never re-split


def test_plan_shows_the_split_and_plan_json_states_it(tmp_path, cli):
    import json

    path = tiny_spec(tmp_path)
    shown = cli("plan", path)
    assert shown.code == 0, shown
    assert "ρ chosen by the planner" in shown.stdout and "× the SVD lower bound" in shown.stdout
    stated = cli("plan", path, "--json")
    assert stated.code == 0, stated
    record = json.loads(stated.stdout)
    chosen = record["auto_split"]
    shares = {s["measurement"]: Fraction(s["share"]) for s in chosen["shares"]}
    assert sum(shares.values()) + Fraction(chosen["unspent"]) == Fraction(chosen["shared"]) == 1
    assert {f"{t['name']}/{t['level']}": Fraction(t["rho"]) for t in record["tables"]} == shares
    assert record["fingerprint"] == plan_release(load_spec(path), None).fingerprint


def test_the_manifest_and_the_report_state_the_split(tmp_path):
    from dprelease.publish.manifest import manifest
    from dprelease.report.markdown import budget_report_md

    path = tiny_spec(tmp_path)
    plan = plan_release(load_spec(path), None)
    written = manifest(split.apply(load_spec(path), plan.split), plan, "run", "2026-11-27T00:00:00Z")
    assert written["auto_split"]["shares"][0]["measurement"] == "by_a/root"
    from dprelease.report.published import report_json

    assert report_json(written, None)["auto_split"] == written["auto_split"]
    report = budget_report_md(written)
    assert "## Budget split chosen by the planner" in report
    assert f"- by_a/PUMA: ρ = {split.decimal_text(plan.split.shares[2], 8)} (weight 3)" in report


def test_the_same_spec_gives_the_same_split_in_other_processes(tmp_path, cli_process):
    """Two processes (each with its own hash seed) plan the same split and fingerprint."""
    import json

    path = tiny_spec(tmp_path)
    seen = []
    for seed in ("1", "2"):
        result = cli_process("plan", path, "--json", env={"PYTHONHASHSEED": seed})
        assert result.code == 0, result
        record = json.loads(result.stdout)
        seen.append((record["fingerprint"], record["auto_split"]["shares"]))
    assert seen[0] == seen[1]
    assert seen[0][0] == plan_release(load_spec(path), None).fingerprint


@pytest.mark.parametrize("definition", ["zcdp", "pure"])
def test_the_split_beats_what_plan_allocate_proposes(tmp_path, definition):
    from dprelease.plan.allocation import allocate

    cost = "rho" if definition == "zcdp" else "epsilon"

    def tables(budget: str) -> str:
        return "".join(f"""  - name: by_{a}
    group_by: [geography, {a.upper()}]
    consistency: g
    {cost}: {budget}
""" for a in "ab")

    (tmp_path / "auto").mkdir()
    (tmp_path / "written").mkdir()
    auto = load_spec(tiny_spec(tmp_path / "auto", definition=definition, tables=tables("auto")))
    written = load_spec(tiny_spec(tmp_path / "written", definition=definition,
                                  tables=tables('{root: "1/6", STATE: "1/6", PUMA: "1/6"}')))
    proposal = {s.key: float(s.budget.amount) for s in allocate(plan_release(written, None)).shares}
    parts, groups, _, d = workload.problem(auto)
    f = workload.Objective(parts, groups, d)
    chosen = split.choose(auto)
    assert chosen.error < f(np.array([proposal[p.key] for p in parts]))
    assert chosen.error < f(np.full(len(parts), 1 / 6))  # the equal split


def test_a_run_of_an_auto_spec_spends_the_split_it_showed_and_reprocesses(tmp_path, cli):
    """End to end, inline: the plan's split is approved, reserved and spent; spec.json and the
    manifest hold it; post-processing re-run from the release agrees with its fingerprint."""
    import json

    root = Path(__file__).resolve().parent.parent
    path = tmp_path / "auto.yaml"
    path.write_text(f"""release: auto-run
dataset:
  name: auto-run
  path: {root / "data" / "nist_acs" / "national2019.csv"}
  na_values: ["N"]
  lifetime_budget: {{rho: 10}}
privacy: {{definition: zcdp, unit: row, delta: 1e-6}}
budget: {{rho: 1}}
columns:
  PUMA: {{domain_file: {root / "configs" / "domains" / "puma.txt"}, geographic: true}}
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  HISP: {{domain: [0, 1, 2, 3, 4]}}
geography:
  levels: [STATE, PUMA]
  STATE: {{from: PUMA, prefix: 2}}
tables:
  - name: by_sex
    group_by: [geography, SEX]
    consistency: persons
    rho: auto
  - name: by_hisp
    group_by: [geography, HISP]
    consistency: persons
    rho: auto
""")
    planned = json.loads(cli("plan", path, "--json").stdout)
    assert cli("plan", path, "--approve", "--by", "reviewer").code == 0
    ran = cli("run", path, "--orchestrator", "inline", "--require-approval", "--output-dir", tmp_path / "out")
    assert ran.code == 0, ran
    release = tmp_path / "out" / "auto-run"
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["spec_fingerprint"] == planned["fingerprint"]
    assert manifest["auto_split"]["shares"] == planned["auto_split"]["shares"]
    assert [t["budget"]["rho"] for t in manifest["tables"]] == [t["rho"] for t in planned["tables"]]
    saved = json.loads((release / "spec.json").read_text())
    assert all(t["auto"]["chosen"] for t in saved["tables"])
    assert cli("postprocess", release).code == 0


def test_evaluate_simulates_the_split_the_release_spends(tmp_path, monkeypatch):
    """`evaluate` leaves modes and means out of its count errors; the split is chosen before,
    with every table, so what it simulates is what a run of the spec would spend (a mode's
    written budget is part of what the auto tables share)."""
    from dprelease.evaluate import accuracy
    from dprelease.plan.planner import measurement_plans

    path = tiny_spec(tmp_path, tables="""  - name: by_a
    group_by: [geography, A]
    consistency: g
    rho: auto
  - name: by_b
    group_by: [geography, B]
    consistency: g
    rho: auto
  - name: modal_a
    group_by: [B]
    measure: {mode: A}
    rho: 0.25
""")
    spec = load_spec(path)
    released = {(p.name, p.level): p.budget for p in measurement_plans(spec) if p.name != "modal_a"}
    seen = {}

    def counted(s):  # type: ignore[no-untyped-def]
        seen.update({(p.name, p.level): p.budget for p in measurement_plans(s)})
        raise StopIteration  # the plans are what is checked: no data is read

    monkeypatch.setattr(accuracy, "count_exact", counted)
    with pytest.raises(StopIteration):
        accuracy.evaluate(spec, 1)
    assert seen == released and sum(b.amount for b in released.values()) <= Fraction(3, 4)
