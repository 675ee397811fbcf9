"""Issue 28's benchmark: a census-style release down to blocks, per size, against a plain numpy count.

    python benchmarks/census_scale.py                                  # 400k/10k 1M/25k 10M/25k 10M/250k, local
    python benchmarks/census_scale.py --sizes 100k/2.5k --timeout 600  # one size
    python benchmarks/census_scale.py --engine dask                   # counting on a LocalCluster of 2 workers
    python benchmarks/census_scale.py --sizes 100k/2.5k --readme --label before   # and its README section

Per size (persons / blocks; data by benchmarks/census_data.py, written once under
benchmarks/data/census/, git-ignored): the three tables of one consistency group measured at
all six levels, ``post_process: consistent``.

1. The plain count (the baseline, same data, same run): a child process reads the Parquet file
   (pyarrow), encodes the blocks to their positions in the declared domain and every coarser
   level by prefix, and counts each table at each level with one ``np.bincount`` over
   place × cells + cell (dense, with ``minlength``). Its compute (read + encode + count, timed
   inside) is what the ratio divides by.
2. ``dprelease run --orchestrator inline`` in a child process with a fresh ledger (``dprelease
   ledger init``) and output directory, through benchmarks/peak_rss.py (peak RSS of the run's
   process), its address space capped (``--memory-limit``: a run over it fails rather than taking
   the shared machine down), killed with its whole session past ``--timeout`` ("did not finish in
   N s"). The sum of the RSS of its processes (and of the cluster's workers) is sampled every
   0.2 s, and the run's CPU seconds (user + system, of the run's process; not the workers') are
   taken from the kernel: on a shared machine they move less with the load than the wall time.
   From the run record (``_internal/<release>/run.json`` ``timings``): counting (load +
   histogram), noise, post-processing and, where post-processing records them, its estimate
   (``postprocess_estimate``) and fit (``postprocess_fit``), and publish. ``--engine dask``: a
   LocalCluster of 2 worker processes (1 thread each) is started here for the size and the run is
   pointed at it (``--dask-address``); each worker's memory limit is half of ``--memory-limit``
   (Dask's own, by RSS: it pauses, then restarts the worker).

Then a cost model of the full census from the largest size that finished (its assumptions are
printed with it). Published cells are (1 + places at every level) × 314, from the block domain.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from census_data import ATTRIBUTES, CELLS_PER_PLACE, CENSUS, LEVELS, PREFIX, TABLES, generate, parse_size, write_spec  # noqa: E402
from consistency_scale import _peak_so_far  # noqa: E402
from suite import child, last_json  # noqa: E402

DEFAULT_SIZES = ["400k/10k", "1M/25k", "10M/25k", "10M/250k"]
RESULTS = HERE / "results"
STAGES = ("counting", "noise", "postprocess", "postprocess_estimate", "postprocess_fit", "publish")


def place_codes(blocks: list[str]) -> dict[str, tuple[int, np.ndarray]]:
    """Per level, (its number of places, each block's place index), by prefix of the block codes."""
    out = {}
    for level in LEVELS:
        prefixes = np.array([b[: PREFIX[level]] for b in blocks])
        unique, inverse = np.unique(prefixes, return_inverse=True)
        out[level] = (len(unique), inverse)
    return out


def published_cells(data_dir: Path) -> tuple[int, dict[str, int]]:
    places = {lv: n for lv, (n, _) in place_codes((data_dir / "blocks.txt").read_text().split()).items()}
    return (1 + sum(places.values())) * CELLS_PER_PLACE, places


def plain_histograms(data_dir: Path) -> tuple[dict[tuple[str, str], np.ndarray], dict[str, float]]:
    """The three tables at all six levels by a plain bincount, keyed (table, level), and the
    seconds of its read, encode and count."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    start = time.perf_counter()
    blocks = (data_dir / "blocks.txt").read_text().split()
    levels = place_codes(blocks)
    table = pq.read_table(data_dir / "persons.parquet")
    read = time.perf_counter()
    domain = pa.array(blocks)
    block = np.concatenate([pc.index_in(c.dictionary, value_set=domain).to_numpy(zero_copy_only=False)
                            .astype(np.int64)[c.indices.to_numpy()] for c in table["BLOCK"].chunks])
    place = {"root": (1, np.zeros(len(block), dtype=np.int64)),
             **{lv: (n, inverse[block]) for lv, (n, inverse) in levels.items()}}
    attrs = {c: table[c].to_numpy().astype(np.int64) for c in ATTRIBUTES}
    encoded = time.perf_counter()
    out = {}
    for name, cols in TABLES.items():
        sizes = [ATTRIBUTES[c] for c in cols]  # the declared domains' sizes
        cell = np.ravel_multi_index([attrs[c] for c in cols], sizes)
        k = math.prod(sizes)
        for level, (n, codes) in place.items():
            out[(name, level)] = np.bincount(codes * k + cell, minlength=n * k)
    done = time.perf_counter()
    return out, {"compute": done - start, "read": read - start, "encode": encoded - read, "count": done - encoded}


def plain_count(data_dir: Path) -> None:
    """In a child process: the plain count, timed; prints its JSON."""
    counts, seconds = plain_histograms(data_dir)
    print(json.dumps({**seconds, "cells": sum(v.size for v in counts.values()),
                      "rows": int(counts[("hhgq_va", "root")].sum())}))


class TreeRss:
    """The largest sum of the RSS of a process tree (and of extra processes) seen, sampled every 0.2 s."""

    def __init__(self, root: int, extra: list[int]) -> None:
        import psutil

        self.psutil, self.root, self.extra, self.peak = psutil, root, extra, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            total = 0
            for pid in [self.root, *self.extra]:
                try:
                    proc = self.psutil.Process(pid)
                    for p in [proc, *proc.children(recursive=True)]:
                        total += p.memory_info().rss
                except self.psutil.Error:
                    continue
            self.peak = max(self.peak, total)

    def close(self) -> float:
        self.stop.set()
        self.thread.join()
        return self.peak / 2**20


def run_release(data_dir: Path, persons: int, blocks: int, timeout: float, memory_gb: float,
                dask: tuple[str, list[int]] | None) -> dict[str, Any]:
    """One ``dprelease run`` (inline, a fresh ledger) as a capped, timed child: status and figures."""
    release = f"census-{os.getpid()}-{time.time_ns() % 10**9}"
    spec = write_spec(data_dir, persons, blocks, release)
    limit = int(memory_gb * 2**30)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with tempfile.TemporaryDirectory(dir=CENSUS) as tmp:
        try:
            child([sys.executable, "-m", "dprelease", "ledger", "init", f"{tmp}/ledger.sqlite", "--reason",
                   "the census benchmark's run"], env={**os.environ})
            env = {**os.environ, "XDG_DATA_HOME": f"{tmp}/xdg", "PREFECT_HOME": f"{tmp}/prefect"}
            env.pop("PREFECT_API_URL", None)
            env.pop("MALLOC_TRIM_THRESHOLD_", None)  # a Dask nanny's setting (fixes glibc's mmap threshold): never the run's
            cmd = [sys.executable, "-S", str(HERE / "peak_rss.py"), f"{tmp}/rss.txt", sys.executable, "-m", "dprelease",
                   "run", str(spec), "--output-dir", f"{tmp}/out", "--ledger", f"{tmp}/ledger.sqlite",
                   "--orchestrator", "inline", *(["--dask-address", dask[0]] if dask else [])]
            load_before = os.getloadavg()[0]
            cpu_before = _children_cpu()
            started = time.perf_counter()
            proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=cap, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            tree = TreeRss(proc.pid, dask[1] if dask else [])
            try:
                _, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                so_far = _peak_so_far(proc.pid)
                os.killpg(proc.pid, signal.SIGKILL)  # this run's session only: the launcher and the run
                proc.communicate()
                return {"status": f"did not finish in {timeout:.0f} s", "wall": time.perf_counter() - started,
                        "cpu": _children_cpu() - cpu_before, "tree_rss_mb": tree.close(),
                        "load": (load_before, os.getloadavg()[0]),
                        **({"peak_rss_mb": so_far} if so_far else {})}
            wall = time.perf_counter() - started
            result: dict[str, Any] = {"wall": wall, "cpu": _children_cpu() - cpu_before, "tree_rss_mb": tree.close(),
                                      "load": (load_before, os.getloadavg()[0])}
            if Path(f"{tmp}/rss.txt").exists():
                result["peak_rss_mb"] = int(Path(f"{tmp}/rss.txt").read_text()) / 1024
            record_path = Path(f"{tmp}/out/_internal/{release}/run.json")
            if proc.returncode != 0 or not record_path.exists():
                last = ([ln for ln in err.strip().splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"])[0]
                return {**result, "status": f"failed (exit {proc.returncode}): {last[:300]}"}
            record = json.loads(record_path.read_text())
        finally:
            spec.unlink()
    timings = record["timings"]
    assert record["rows"]["read"] == persons, record["rows"]
    stages = {"counting": timings.get("load", 0.0) + timings.get("histogram", 0.0),
              **{k: timings[k] for k in STAGES[1:] if k in timings},
              "checks": sum(timings.get(k, 0.0) for k in ("fingerprint", "check", "identity"))}
    return {**result, "status": "ok", **stages, "timings": timings}


def _children_cpu() -> float:
    """User + system CPU seconds of this process's reaped children (and theirs, where waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_cluster(memory_gb: float) -> tuple[Any, str, list[int]]:
    """A LocalCluster of 2 worker processes, 1 thread each, ``memory_gb`` / 2 each: (cluster,
    address, worker pids). Started as dprelease starts one for a run without an address
    (``local_cluster``: workers without Dask's ``MALLOC_TRIM_THRESHOLD_``, which this process's
    environment does not keep either, so the run started from here does not inherit it)."""
    from distributed import Client, LocalCluster

    try:
        from dprelease.data.cluster import local_cluster
    except ImportError:  # a checkout from before the run's cluster (data/cluster.py)
        try:
            from dprelease.data.count import local_cluster  # type: ignore[attr-defined, no-redef]
        except ImportError:  # a checkout from before it
            def local_cluster(make, **options):  # type: ignore[no-untyped-def]
                return make(processes=True, dashboard_address=None, **options)
    cluster = local_cluster(LocalCluster, n_workers=2, threads_per_worker=1, memory_limit=f"{memory_gb / 2}GiB",
                            security=None)  # the two within the cap; no TLS: the run connects by address
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)  # (an older local_cluster leaves it here: the run would inherit it)
    with Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
    return cluster, cluster.scheduler_address, pids


def measure_size(size: str, engine: str, timeout: float, memory_gb: float) -> dict[str, Any]:
    persons, blocks = parse_size(size)
    print(f"{size}: data ...", flush=True)
    data_dir = generate(persons, blocks)
    cells, places = published_cells(data_dir)
    child([sys.executable, str(Path(__file__)), "--plain", str(data_dir)])  # warm the page cache
    wall, rss, out = child([sys.executable, str(Path(__file__)), "--plain", str(data_dir)])
    plain = {**last_json(out), "wall": wall, "rss_mb": rss}
    assert plain["cells"] == cells, (plain["cells"], cells)
    print(f"  plain count {plain['compute']:.2f} s; dprelease run ({engine}) ...", flush=True)
    cluster = None
    try:
        dask = None
        if engine == "dask":
            cluster, address, pids = start_cluster(memory_gb)
            dask = (address, pids)
        run = run_release(data_dir, persons, blocks, timeout, memory_gb, dask)
    finally:
        if cluster is not None:
            cluster.close()
    print(f"  {run['status']} {run['wall']:.1f} s", flush=True)
    return {"size": size, "persons": persons, "blocks": blocks, "places": places, "published_cells": cells,
            "engine": engine, "plain": plain, "run": run}


def dash(value: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if value is None else fmt.format(value)


def size_lines(results: list[dict[str, Any]]) -> list[str]:
    lines = ["| persons / blocks | engine | published cells | status | whole run s | CPU s of the run's process "
             "| peak RSS MB (run; all processes) "
             "| counting s | noise s | post-processing s | estimate s | fit s | publish s | plain count s | "
             "whole run ÷ plain | load (1 min) before / after |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        run, plain = r["run"], r["plain"]
        ok = run["status"] == "ok"
        whole = f"{run['wall']:.1f}" if ok else run["status"]
        rss = f"{dash(run.get('peak_rss_mb'), '{:,.0f}')}; {run['tree_rss_mb']:,.0f}"
        lines.append(f"| {r['persons']:,} / {r['blocks']:,} | {r['engine']} | {r['published_cells']:,} | "
                     f"{'ok' if ok else 'not finished' if 'did not finish' in run['status'] else 'failed'} | "
                     f"{whole} | {dash(run.get('cpu'), '{:.1f}')} | {rss} | {dash(run.get('counting'))} | {dash(run.get('noise'))} | "
                     f"{dash(run.get('postprocess'), '{:.1f}')} | {dash(run.get('postprocess_estimate'), '{:.1f}')} | "
                     f"{dash(run.get('postprocess_fit'), '{:.1f}')} | {dash(run.get('publish'), '{:.1f}')} | "
                     f"{plain['compute']:.2f} | {dash(run['wall'] / plain['compute'] if ok else None, '{:.0f}×')} | "
                     f"{run['load'][0]:.2f} / {run['load'][1]:.2f} |")
    return lines


FULL_PERSONS, FULL_BLOCKS, WORKERS = 330_000_000, 8_000_000, (1, 16, 64)


def full_places() -> dict[str, float]:
    """The full census's places by the generator's mean fan-outs (33 blocks per BG, 3 BGs per tract,
    27 tracts per county) and 51 states."""
    bgs = FULL_BLOCKS / 33
    return {"STATE": 51, "COUNTY": bgs / 3 / 27, "TRACT": bgs / 3, "BG": bgs, "BLOCK": FULL_BLOCKS}


def memory_per_cell(done: list[dict[str, Any]]) -> tuple[float, str]:
    """Bytes of peak RSS per published cell: the slope between the smallest and the largest size
    that finished (what a cell adds, without the interpreter's and the libraries' floor), or with
    one size only, its peak over its cells (an upper bound)."""
    def peak(r: dict[str, Any]) -> float:
        return float(r["run"].get("peak_rss_mb", r["run"]["tree_rss_mb"])) * 2**20

    small, large = min(done, key=lambda r: r["published_cells"]), max(done, key=lambda r: r["published_cells"])
    if large["published_cells"] > 2 * small["published_cells"] and peak(large) > peak(small):
        return ((peak(large) - peak(small)) / (large["published_cells"] - small["published_cells"]),
                f"the slope of peak RSS between {small['size']} and {large['size']}")
    return peak(large) / large["published_cells"], f"peak RSS over published cells at {large['size']} (the " \
                                                   "interpreter's floor included: an upper bound)"


def cost_model(r: dict[str, Any], memory: tuple[float, str]) -> list[str]:
    """The full census on N Dask workers from the measured rates of ``r`` (a size that finished)
    and ``memory``, bytes per published cell and how they were measured."""
    run, cells = r["run"], r["published_cells"]
    parents = 1 + sum(n for lv, n in r["places"].items() if lv != "BLOCK")
    split = "postprocess_estimate" in run and "postprocess_fit" in run
    estimate, fit = (run["postprocess_estimate"], run["postprocess_fit"]) if split else (0.0, 0.0)
    rest = run["postprocess"] - estimate - fit  # all of it where not split: serial on the driver, as today
    rate = {"count": run["counting"] / r["persons"], "noise": run["noise"] / cells, "estimate": estimate / cells,
            "fit": fit / (cells - CELLS_PER_PLACE), "rest": rest / cells, "publish": run["publish"] / cells,
            "memory": memory[0]}
    places = full_places()
    full_parents = 1 + sum(n for lv, n in places.items() if lv != "BLOCK")
    lines = [f"#### Cost model: the full census ({FULL_PERSONS // 10**6}M persons, {FULL_BLOCKS // 10**6}M blocks) on N "
             f"Dask workers, from {r['size']} ({r['engine']})", "",
             f"Measured rates at {r['persons']:,} persons / {r['blocks']:,} blocks: counting "
             f"{rate['count'] * 1e9:.0f} ns per row (3 tables); noise {rate['noise'] * 1e9:.0f} ns, "
             f"publish {rate['publish'] * 1e9:.0f} ns per published cell; "
             + (f"estimate {rate['estimate'] * 1e9:.0f} ns per published cell, fit {rate['fit'] * 1e9:.0f} ns per "
                f"fitted (non-root) cell = {fit / parents * 1e3:.2f} ms per parent ({parents:,} parents), the rest "
                f"of post-processing {rate['rest'] * 1e9:.0f} ns per cell; "
                if split else f"post-processing {rate['rest'] * 1e9:,.0f} ns per published cell (not split into "
                              "estimate and fit: all of it serial on the driver, as this code runs it); ")
             + f"memory {rate['memory']:.0f} bytes per published cell ({memory[1]}).", "",
             "| tables | published cells | N workers | counting h | noise h | estimate h | fit h | rest of "
             "post-processing h | publish h | **total h** | total h, the estimate also split over N | driver "
             "memory GB |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for tables in (3, 10):
        full_cells = (1 + sum(places.values())) * CELLS_PER_PLACE * tables / 3
        for n in WORKERS:
            h = {"count": rate["count"] * FULL_PERSONS * tables / 3 / n, "noise": rate["noise"] * full_cells,
                 "estimate": rate["estimate"] * full_cells, "fit": rate["fit"] * full_cells / n,
                 "rest": rate["rest"] * full_cells, "publish": rate["publish"] * full_cells}
            h = {k: v / 3600 for k, v in h.items()}
            total = sum(h.values())
            lines.append(f"| {tables} | {full_cells:,.0f} | {n} | {h['count']:.2f} | {h['noise']:.2f} | "
                         f"{h['estimate']:.2f} | {h['fit']:.2f} | {h['rest']:.2f} | {h['publish']:.2f} | "
                         f"**{total:.2f}** | {total - h['estimate'] + h['estimate'] / n:.2f} | "
                         f"{rate['memory'] * full_cells / 2**30:,.0f} |")
    lines += ["", "Assumptions:",
              f"* The full census's geography by the generator's mean fan-outs: {FULL_BLOCKS:,} blocks, "
              + ", ".join(f"{places[lv]:,.0f} {lv}" for lv in ("BG", "TRACT", "COUNTY", "STATE"))
              + f" ({full_parents:,.0f} parents); 314 cells per place for these 3 tables, 314 × 10/3 for 10 tables "
              "(the same mean table size).",
              "* A Dask worker is as fast as one process here (one core). Counting divides over N workers "
              "(pieces are independent) and grows with rows × tables; combining the partials and scheduling "
              "are not counted.",
              "* The fit divides over N workers (parents are independent), at the measured rate per fitted cell.",
              "* Noise (drawn once, on the driver), the estimate, the rest of post-processing and publication run on "
              "the driver at their measured rates per published cell; the column before the memory splits the "
              "estimate over N too.",
              "* Driver memory: the measured bytes per published cell times the full census's cells (linear in "
              "every level's cells: an upper bound for a code that streams post-processing level by level, whose "
              "peak grows with the noisy measurements and the largest level).",
              "* Every rate is linear: a step measured superlinear at this size (e.g. a fit that does not converge) "
              "makes the model optimistic."]
    return lines


def report(saved: dict[str, Any]) -> list[str]:
    results = saved["sizes"]
    lines = [f"Measured {saved['measured']} on {saved['machine']}; timeout "
             f"{saved['timeout']:.0f} s, the run's address space ≤ {saved['memory_limit_gb']:g} GB; load averages "
             f"(1/5/15 min) at the start: {saved['load_start']}.", "",
             *([saved["note"], ""] if saved.get("note") else []), *size_lines(results), ""]
    done = [r for r in results if r["run"]["status"] == "ok"]
    if done and not saved.get("no_model"):
        lines += cost_model(max(done, key=lambda r: r["published_cells"]), memory_per_cell(done))
    return lines


def begin_end(label: str) -> tuple[str, str]:
    return (f"<!-- census scale ({label}): generated by benchmarks/census_scale.py -->",
            f"<!-- end of census scale ({label}) -->")


INTRO = """## Census scale (issue 28)

```sh
python benchmarks/census_scale.py --sizes 100k/2.5k 400k/10k --timeout 900 --readme --label before
python benchmarks/census_scale.py --engine dask --readme --label dask
```

A synthetic six-level census (`census_data.py`: nation > STATE > COUNTY > TRACT > BG > BLOCK,
15-character block codes, coarser levels by prefix, fan-outs like the 2020 census, persons on
blocks by a heavy-tailed weight) and three tables in one consistency group (VOTING_AGE × HISP ×
RACE, SEX × AGE_GROUP, HHGQ × VOTING_AGE: 314 cells per place) measured at every level,
`post_process: consistent`. Per size: `dprelease run --orchestrator inline` as a child process
(fresh ledger; peak RSS of the run's process, and the sampled sum over all its processes and the
cluster's workers), its stages from the run record, and the ratio of the whole run to a plain
numpy count (read + encode + one `np.bincount` per table and level) of the same data, measured
in the same run. Then a cost model of the full census from the largest size that finished.
"""


def write_readme(saved: dict[str, Any], label: str) -> None:
    readme = HERE / "README.md"
    text = readme.read_text()
    begin, end = begin_end(label)
    section = "\n".join([begin, "", f"### {label[:1].upper() + label[1:]} (the code at {saved['commit']})", "", *report(saved),
                          "", end])
    if begin in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    elif INTRO.splitlines()[0] in text:
        at = text.index(INTRO.splitlines()[0])
        nxt = text.find("\n## ", at + 1)
        at = len(text) if nxt < 0 else nxt
        text = text[:at].rstrip("\n") + "\n\n" + section + "\n" + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + INTRO + "\n" + section + "\n"
    readme.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES, help="PERSONS/BLOCKS each, e.g. 100k/2.5k")
    parser.add_argument("--engine", choices=["local", "dask"], default="local")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run; past it the run is killed")
    parser.add_argument("--memory-limit", type=float, default=12,
                        help="GB of address space of the run's process (Dask: half of it per worker, by RSS)")
    parser.add_argument("--readme", action="store_true", help="also write this run's section of benchmarks/README.md")
    parser.add_argument("--label", default="after", help="the README subsection (e.g. before, after, dask)")
    parser.add_argument("--report", type=Path, help="only print (and with --readme write) saved results")
    args = parser.parse_args()
    if args.report:
        saved = json.loads(args.report.read_text())
    else:
        for size in args.sizes:
            parse_size(size)  # refuse a bad size before any work
        commit = subprocess.run(["git", "-C", str(HERE), "log", "-1", "--format=%h"], capture_output=True,
                                text=True).stdout.strip()
        saved = {"measured": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
                 "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                 "timeout": args.timeout, "memory_limit_gb": args.memory_limit,
                 "load_start": " / ".join(f"{x:.2f}" for x in os.getloadavg()), "sizes": []}
        for size in args.sizes:
            saved["sizes"].append(measure_size(size, args.engine, args.timeout, args.memory_limit))
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"census_scale-{args.label}.json").write_text(json.dumps(saved, indent=2))
    print("\n".join(report(saved)))
    if args.readme:
        write_readme(saved, args.label)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--plain"]:
        plain_count(Path(sys.argv[2]))
    else:
        main()
