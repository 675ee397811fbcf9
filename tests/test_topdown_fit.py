"""Issue 28 item 4: the per-parent top-down fit keeps every guarantee of the published tables on a
small six-level census (nation > STATE > COUNTY > TRACT > BG > BLOCK, three tables in one
consistency group of the census's shape), each block's fit is the exact nearest non-negative
point (KKT with the solver's duals, and the nearest point computed exactly in Fractions and
certified by its own KKT conditions: no reference solver whose convergence could fail), and an
iteration cap reached is reported."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from dprelease.evaluate.accuracy import plan_variances
from dprelease.plan import plan_release
from dprelease.postprocess import FitWarning, Invariants, postprocess_release
from dprelease.postprocess import parents, transport
from dprelease.postprocess.transport import fit_blocks, kkt_violation
from dprelease.publish.layout import Layout
from dprelease.lifecycle.release import ReleaseRun
from dprelease.spec import load_spec
from tests.projection import exact_projection

LEVELS = ("STATE", "COUNTY", "TRACT", "BG", "BLOCK")
PREFIX = {"STATE": 2, "COUNTY": 5, "TRACT": 11, "BG": 12, "BLOCK": 15}
SIZES = {"VOTING_AGE": 2, "HISP": 2, "RACE": 3, "SEX": 2, "AGE_GROUP": 4, "HHGQ": 3}
TABLES = {"va_hisp_race": ("VOTING_AGE", "HISP", "RACE"), "sex_age": ("SEX", "AGE_GROUP"),
          "hhgq_va": ("HHGQ", "VOTING_AGE")}
STRUCTURAL = ("hhgq_va", 2 * 2 + 0)  # HHGQ 2 (say, adult correctional) under 18: impossible


def _blocks() -> list[str]:
    """48 block codes: 2 states, 2 counties each, 2 tracts, 2 block groups (one tract has 1), 1-3 blocks."""
    rng = np.random.default_rng(6)  # test geography
    codes = []
    for s in (6, 48):
        for c in (1, 3):
            for t in (100, 200):
                for g in ((1, 2) if t == 100 else (1,)):
                    codes += [f"{s:02d}{c:03d}{t:06d}{g}{b:03d}" for b in range(int(rng.integers(1, 4)))]
    return codes


def _spec(tmp_path):  # type: ignore[no-untyped-def]
    (tmp_path / "blocks.txt").write_text("\n".join(_blocks()) + "\n")
    (tmp_path / "persons.csv").write_text("BLOCK," + ",".join(SIZES) + "\n")
    columns = "".join(f"  {c}: {{domain: [{', '.join(str(i) for i in range(n))}]}}\n" for c, n in SIZES.items())
    geo = "".join(f"  {lv}: {{from: {LEVELS[i + 1]}, prefix: {PREFIX[lv]}}}\n" for i, lv in enumerate(LEVELS[:-1]))
    tables = "".join(f"  - {{name: {n}, group_by: [geography, {', '.join(cols)}], consistency: persons, "
                     "post_process: consistent, epsilon: {root: 1/10, STATE: 1/10, COUNTY: 1/10, TRACT: 1/10, "
                     "BG: 1/10, BLOCK: 1/10}}\n" for n, cols in TABLES.items())
    (tmp_path / "spec.yaml").write_text(
        "release: six-levels\nledger: ledger.sqlite\noutput_dir: outputs\n"
        "dataset: {name: six, path: persons.csv, format: csv, lifetime_budget: {epsilon: 10}}\n"
        "privacy: {definition: pure, unit: row}\nbudget: {epsilon: 2}\n"
        f"columns:\n  BLOCK: {{domain_file: blocks.txt, geographic: true}}\n{columns}"
        f"geography:\n  levels: [{', '.join(LEVELS)}]\n{geo}invariants: {{totals: [root, STATE]}}\ntables:\n{tables}")
    return load_spec(tmp_path / "spec.yaml")


def _parents(codes: list[str]) -> dict[str, tuple[np.ndarray, int]]:
    """Per level, each place's parent index one level up, and the number of places up there."""
    out = {}
    for coarse, fine in zip(("root", *LEVELS), LEVELS):
        fine_codes = sorted({c[:PREFIX[fine]] for c in codes})
        up = [""] if coarse == "root" else sorted({c[:PREFIX[coarse]] for c in codes})
        out[fine] = (np.array([up.index("" if coarse == "root" else f[:PREFIX[coarse]]) for f in fine_codes]), len(up))
    return out


def _case(tmp_path, seed: int = 28):  # type: ignore[no-untyped-def]
    """The spec, noisy measurements (truth + Laplace noise of scale 2, heavy at these counts),
    the invariants (exact totals at root and STATE) and the structural masks."""
    spec = _spec(tmp_path)
    rng = np.random.default_rng(seed)  # test data and test noise, not a release's
    codes, ups = _blocks(), _parents(_blocks())
    persons = 400
    block = rng.integers(0, len(codes), persons)
    values = {c: rng.integers(0, n, persons) for c, n in SIZES.items()}
    values["HHGQ"] = np.where((values["HHGQ"] == 2) & (values["VOTING_AGE"] == 0), 0, values["HHGQ"])
    noisy, structural, truth_totals = {}, {}, {}
    for name, cols in TABLES.items():
        cells = math.prod(SIZES[c] for c in cols)
        mask = np.zeros(cells, dtype=bool)
        if name == STRUCTURAL[0]:
            mask[STRUCTURAL[1]] = True
        counts = np.bincount(block * cells + np.ravel_multi_index([values[c] for c in cols], [SIZES[c] for c in cols]),
                             minlength=len(codes) * cells).reshape(len(codes), cells)
        for level in reversed(("root", *LEVELS)):
            places = counts.shape[0]
            noisy[(name, level)] = np.where(np.tile(mask, places), 0,
                                            counts.ravel() + rng.laplace(0, 2, counts.size)).astype(np.float64)
            structural[(name, level)] = np.tile(mask, places)
            truth_totals[level] = counts.sum(axis=1)
            if level != "root":
                up, n_up = ups[level]
                coarser = np.zeros((n_up, cells), dtype=np.int64)
                np.add.at(coarser, up, counts)
                counts = coarser
    invariants = Invariants.from_totals({"root": truth_totals["root"], "STATE": truth_totals["STATE"]})
    return spec, noisy, invariants, structural, ups


def _published(tmp_path, workers: "int | parents.Workers" = 1, **kw):  # type: ignore[no-untyped-def]
    spec, noisy, invariants, structural, ups = _case(tmp_path, **kw)
    out = postprocess_release(spec, noisy, plan_variances(spec), invariants=invariants, structural=structural,
                              workers=workers)
    return out, invariants, ups


def _cube(values: np.ndarray, name: str) -> np.ndarray:
    return values.reshape(-1, *(SIZES[c] for c in TABLES[name]))


def test_six_levels_every_guarantee_holds(tmp_path):
    out, invariants, ups = _published(tmp_path)
    for key, values in out.items():  # non-negative integers; the structural cell an exact zero
        assert values.dtype.kind == "i" and values.min() >= 0, key
        if key[0] == STRUCTURAL[0]:
            assert (values.reshape(-1, 6)[:, STRUCTURAL[1]] == 0).all()
    for name in TABLES:  # children sum to parents at every level
        for level in LEVELS:
            up, n_up = ups[level]
            child = _cube(out[(name, level)], name).reshape(len(up), -1)
            summed = np.zeros((n_up, child.shape[1]), dtype=np.int64)
            np.add.at(summed, up, child)
            coarser = "root" if level == "STATE" else LEVELS[LEVELS.index(level) - 1]
            assert np.array_equal(summed, out[(name, coarser)].reshape(n_up, -1)), (name, level)
    for level in ("root", *LEVELS):  # the tables agree on what they share: totals, and VOTING_AGE
        totals = [_cube(out[(n, level)], n).reshape(-1, math.prod(SIZES[c] for c in TABLES[n])).sum(axis=1)
                  for n in TABLES]
        assert all(np.array_equal(totals[0], t) for t in totals[1:]), level
        va_first = _cube(out[("va_hisp_race", level)], "va_hisp_race").sum(axis=(2, 3))
        va_third = _cube(out[("hhgq_va", level)], "hhgq_va").sum(axis=1)
        assert np.array_equal(va_first, va_third), level
    for level, exact in invariants.as_dict().items():  # invariants exact
        assert np.array_equal(out[("sex_age", level)].reshape(exact.size, -1).sum(axis=1), exact), level


def test_worker_processes_publish_what_this_process_does(tmp_path, monkeypatch):
    monkeypatch.setattr(parents, "CHUNK_CELLS", 40)  # in many chunks (the same in both runs)
    alone, _, _ = _published(tmp_path, workers=1)
    monkeypatch.setattr(parents, "PARALLEL_CELLS", 0)  # every level below the root to the workers
    spread, _, _ = _published(tmp_path, workers=2)
    assert all(np.array_equal(alone[k], spread[k]) for k in alone)


def test_each_block_of_the_six_levels_is_fitted_to_its_exact_nearest_point(tmp_path, monkeypatch):
    """Every block the fit solved (recorded at the solver's door), checked two ways: the KKT
    conditions with the solver's duals, and the exact nearest point on the fit's support
    (certified by its own KKT conditions in Fractions, no solver's convergence involved)."""
    seen = []

    def recording(v, r, c, max_iterations=None):  # type: ignore[no-untyped-def]
        fit = fit_blocks(v, r, c, max_iterations)
        seen.append((v, r, c, fit))
        return fit

    monkeypatch.setattr(parents, "fit_blocks", recording)
    _published(tmp_path)
    blocks = 0
    for v, r, c, fit in seen:
        assert fit.unconverged == 0
        for b in range(v.shape[0]):
            rows, cols = np.isfinite(v[b]).any(axis=1), np.isfinite(v[b]).any(axis=0)
            vb, x = v[b][np.ix_(rows, cols)], fit.x[b][np.ix_(rows, cols)]
            rb, cb = r[b][rows], c[b][cols]
            assert kkt_violation(vb, x, rb, cb, fit.alpha[b][rows], fit.beta[b][cols]) < 1e-8
            exact = exact_projection(vb, rb, cb, x > 0)
            assert 0.5 * ((x - vb) ** 2).sum() <= 0.5 * ((exact - vb) ** 2).sum() + 1e-6
            assert np.abs(x - exact).max() < 1e-5
            blocks += 1
    assert blocks > 100  # every level below the root, every table and separator cell


def test_the_solver_meets_kkt_on_padded_blocks_of_every_shape():
    rng = np.random.default_rng(5)  # test data
    for _ in range(40):
        count, k, m = (int(n) for n in rng.integers(1, 12, 3))
        truth = rng.poisson(rng.choice([0.05, 1.0, 50.0]), size=(count, k, m)).astype(np.float64)
        v = truth + rng.laplace(0, rng.choice([0.5, 5.0]), truth.shape)
        real_k, real_m = rng.integers(1, k + 1, count), rng.integers(1, m + 1, count)
        for b in range(count):  # padding: rows and columns that are no variables
            truth[b, real_k[b]:], truth[b, :, real_m[b]:] = 0, 0
            v[b, real_k[b]:], v[b, :, real_m[b]:] = -np.inf, -np.inf
        fit = fit_blocks(v, truth.sum(axis=2), truth.sum(axis=1))
        assert fit.unconverged == 0
        for b in range(count):
            kb, mb = real_k[b], real_m[b]
            assert fit.x[b, kb:].sum() == 0 and fit.x[b, :, mb:].sum() == 0
            scale = max(1.0, truth[b].sum(axis=1).max(), truth[b].sum(axis=0).max())
            assert kkt_violation(v[b, :kb, :mb], fit.x[b, :kb, :mb], truth[b, :kb].sum(axis=1),
                                 truth[b, :, :mb].sum(axis=0), fit.alpha[b, :kb], fit.beta[b, :mb]) < 1e-9 * scale


def test_a_block_left_at_its_iteration_cap_is_reported_and_its_sums_still_hold(tmp_path, monkeypatch):
    monkeypatch.setattr(transport, "MAX_ITERATIONS", 1)
    with pytest.warns(FitWarning, match="cap of 1 Newton iterations"):
        out, invariants, ups = _published(tmp_path)
    for name in TABLES:  # the rounding still meets every sum exactly
        up, n_up = ups["BLOCK"]
        child = out[(name, "BLOCK")].reshape(len(up), -1)
        summed = np.zeros((n_up, child.shape[1]), dtype=np.int64)
        np.add.at(summed, up, child)
        assert np.array_equal(summed, out[(name, "BG")].reshape(n_up, -1)) and child.min() >= 0


def test_the_run_record_carries_the_fit_timings_and_a_cap_reached(tmp_path, monkeypatch):
    spec, noisy, invariants, structural, _ = _case(tmp_path)
    plan = plan_release(spec, None)
    layout = Layout(tmp_path / "out", spec.release, "run")  # (post-processing stages each table as it is final)
    release = ReleaseRun(spec, plan, "run", SimpleNamespace(shown="ledger"), layout)  # type: ignore[arg-type]
    release.noisy = {k: np.rint(v).astype(np.int64) for k, v in noisy.items()}  # integers, as a release's are (its
    # measurements are staged too while post-processing runs)
    release.invariants = invariants.as_dict()
    release.postprocess()
    assert sorted(p.relative_to(layout.staging).as_posix() for p in layout.staging.rglob("*.csv")) == sorted(
        f"tables/{name}/{level}.csv" for name in TABLES for level in ("root", *LEVELS))  # staged as they came
    assert release.published_values == {}  # (none held besides)
    record = release.internal_record()
    assert record["postprocess_warnings"] == []
    timings = record["timings"]
    assert timings["postprocess_estimate"] > 0 and timings["postprocess_fit"] > 0
    assert timings["postprocess_estimate"] + timings["postprocess_fit"] <= timings["postprocess"]
    monkeypatch.setattr(transport, "MAX_ITERATIONS", 1)
    release.postprocess()
    assert any("cap of 1 Newton iterations" in w for w in release.internal_record()["postprocess_warnings"])


def test_a_pool_that_breaks_leaves_the_fit_to_this_process_with_the_same_integers(tmp_path, monkeypatch):
    """Review of issue 28: a caller without a main guard re-runs its body in each forkserver
    worker and the pool breaks; the fit then finishes here (a warning says why), to the same
    integers, and the pool is given up for the rest of the run."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    class Broken:
        def submit(self, fn, *args):  # type: ignore[no-untyped-def]
            future: Future = Future()
            future.set_exception(BrokenProcessPool("a worker re-ran an unguarded __main__"))
            return future

        def shutdown(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            pass

    monkeypatch.setattr(parents, "CHUNK_CELLS", 40)
    alone, _, _ = _published(tmp_path, workers=1)
    monkeypatch.setattr(parents, "PARALLEL_CELLS", 0)
    given: list[parents.Workers] = []
    monkeypatch.setattr(parents.Workers, "pool", lambda self: given.append(self) or (Broken() if self.processes > 1 else None))
    with pytest.warns(RuntimeWarning, match="fitted in this process, with the same integers"):
        broken, _, _ = _published(tmp_path, workers=2)
    assert all(np.array_equal(alone[k], broken[k]) for k in alone)
    assert given and all(w.processes == 1 for w in given)


def test_a_cap_reached_in_a_run_is_said_to_the_operator(tmp_path, cli, monkeypatch):
    """Review of issue 28: a block left at its iteration cap was written to run.json only; the
    run now says it after its summary (the release is still published: its sums hold)."""
    from tests.conftest import shipped

    monkeypatch.setattr(transport, "MAX_ITERATIONS", 1)
    result = cli("run", shipped(tmp_path, "acs_census.yaml"), "--output-dir", tmp_path / "out", "--orchestrator", "inline")
    assert result.code == 0, result
    assert "published acs-census-2019" in result.stdout
    assert "warning: post-processing: " in result.stderr and "cap of 1 Newton iterations" in result.stderr, result


def test_the_sink_gets_every_table_level_once_from_the_root_down_and_the_same_values(tmp_path):
    """Streaming (issue 28): with a sink, each published table level is handed over as soon as it
    is final, level by level from the root, and nothing is returned: the same values."""
    spec, noisy, invariants, structural, _ = _case(tmp_path)
    held = postprocess_release(spec, noisy, plan_variances(spec), invariants=invariants, structural=structural,
                               workers=1)
    handed: list[tuple[str, str | None]] = []
    streamed: dict = {}

    def sink(key, values):  # type: ignore[no-untyped-def]
        handed.append(key)
        streamed[key] = values

    returned = postprocess_release(spec, noisy, plan_variances(spec), invariants=invariants, structural=structural,
                                   workers=1, sink=sink)
    assert len(held) == len(TABLES) * (1 + len(LEVELS))  # every table at every level
    assert returned == {} and sorted(handed) == sorted(held) and len(handed) == len(set(handed))
    depth = [("root", *LEVELS).index(level) for _, level in handed]
    assert depth == sorted(depth)  # a level's tables only once every coarser level's are out
    assert all(np.array_equal(streamed[k], held[k]) for k in held)


def test_a_dask_cluster_fits_what_this_process_does(tmp_path, monkeypatch):
    """Issue 28: with ``engine: {kind: dask}`` the fit's chunks go to the cluster's workers
    (through its ``concurrent.futures`` executor): the same chunks, so the same integers."""
    distributed = pytest.importorskip("distributed", reason="the dask extra: pip install -e '.[dask]'")
    from dprelease.data.cluster import Cluster

    monkeypatch.setattr(parents, "CHUNK_CELLS", 40)
    alone, _, _ = _published(tmp_path, workers=1)
    monkeypatch.setattr(parents, "PARALLEL_CELLS", 0)  # every level below the root to the cluster
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as local:  # not 8787
        cluster = Cluster(local.scheduler_address)
        try:
            on_cluster, _, _ = _published(tmp_path, workers=parents.Workers(cluster.threads(), cluster.executor()))
            fitted_there = cluster.client().run(lambda: "dprelease.postprocess.parents" in __import__("sys").modules)
        finally:
            cluster.close()
    assert all(np.array_equal(alone[k], on_cluster[k]) for k in alone)
    assert all(fitted_there.values())  # every worker fitted chunks


def test_a_chunk_that_fails_on_a_worker_stops_the_fit_with_what_failed(tmp_path, monkeypatch):
    """A chunk whose fit raises (here on a pool of threads; on a cluster alike) stops the fit at
    once with an error naming the chunk and the failure; the chunks still pending are cancelled."""
    from concurrent.futures import ThreadPoolExecutor

    def boom(chunk):  # type: ignore[no-untyped-def]
        raise ValueError("a broken chunk")

    class Failing(parents.Workers):
        def task(self):  # type: ignore[no-untyped-def]
            return boom

    monkeypatch.setattr(parents, "CHUNK_CELLS", 40)
    monkeypatch.setattr(parents, "PARALLEL_CELLS", 0)
    with ThreadPoolExecutor(2) as pool, pytest.raises(parents.FitFailed, match=r"chunk \d+ of \d+ failed on a worker: "
                                                                               r"ValueError: a broken chunk"):
        _published(tmp_path, workers=Failing(2, pool))


def test_a_block_whose_parent_cells_are_all_zero_is_zero_and_not_fitted():
    """Its only non-negative point with zero sums is 0: never sent to the solver (a rehearsal on
    zeros fits nothing); the other blocks are fitted as before."""
    rng = np.random.default_rng(4)  # test values
    parent = np.repeat(np.arange(4), 3)  # 4 parents of 3 children each, 5 cells, one separator cell
    parent_values = rng.integers(0, 6, size=(4, 5))
    parent_values[[1, 3]] = 0
    sep_values = np.zeros((12, 1), dtype=np.int64)
    for p in range(4):  # each parent's total over its children, the first child taking it
        sep_values[3 * p, 0] = parent_values[p].sum()
    estimate = rng.normal(1, 3, size=(12, 5))
    out, stats = parents.fit_level(estimate, np.zeros(5, dtype=bool), np.zeros(5, dtype=np.int64), sep_values,
                                   parent, parent_values)
    assert stats.blocks == 2 and not out[np.isin(parent, [1, 3])].any()
    summed = np.zeros((4, 5), dtype=np.int64)
    np.add.at(summed, parent, out)
    assert np.array_equal(summed, parent_values) and np.array_equal(out.sum(axis=1), sep_values[:, 0])


def test_running_workers_take_smaller_levels_costliest_chunk_first(tmp_path, monkeypatch):
    """Workers already running (a cluster's executor; the local processes once started) are sent
    every level over RUNNING_CELLS, where workers not yet started get only those over
    PARALLEL_CELLS; each level's chunks go the costliest first (padded cells × the most children
    of a block), and the integers are those of one process."""
    from concurrent.futures import ThreadPoolExecutor

    from dprelease.postprocess import topdown

    sent: list[int | None] = []  # per chunk sent its cost; None where a table level begins
    level = topdown.fit_level

    def marked(*args, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(None)
        return level(*args, **kwargs)

    monkeypatch.setattr(topdown, "fit_level", marked)

    class Counting(ThreadPoolExecutor):
        def submit(self, fn, chunk, *args, **kwargs):  # type: ignore[no-untyped-def, override]
            values, k, _, _ = chunk
            sent.append(int(k.max()) * k.size * values.shape[1] * int(k.max()))
            return super().submit(fn, chunk, *args, **kwargs)

    monkeypatch.setattr(parents, "CHUNK_CELLS", 40)
    alone, _, _ = _published(tmp_path, workers=1)
    monkeypatch.setattr(parents, "PARALLEL_CELLS", 10**9)  # no level is that large
    monkeypatch.setattr(parents, "RUNNING_CELLS", 0)
    not_started = parents.Workers(2)
    _published(tmp_path, workers=not_started)
    assert not not_started.running()  # nothing was large enough to start them
    sent.clear()
    with Counting(2) as pool:
        running = parents.Workers(2, pool)
        assert running.running()
        spread, _, _ = _published(tmp_path, workers=running)
    assert all(np.array_equal(alone[k], spread[k]) for k in alone)
    levels, costs = [], None
    for cost in sent:
        if cost is None:
            levels.append(costs := [])
        else:
            costs.append(cost)
    assert sum(len(c) > 1 for c in levels) >= 5  # table levels of several chunks, all sent
    assert all(c == sorted(c, reverse=True) for c in levels)  # the costliest first
    assert any(len(set(c)) > 1 for c in levels)
