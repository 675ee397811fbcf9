"""Issue 28, item 1: the time and peak RSS of counting alone, at census-like geography.

A synthetic census of six levels (nation > STATE > COUNTY > TRACT > BG > BLOCK: block codes of 15
characters, the coarser levels by prefix 2/5/11/12; about 33 blocks per block group, 3 block
groups per tract, 27 tracts per county, up to 51 states; persons placed on blocks by a
heavy-tailed (Pareto) weight) and three tables measured at every level: VOTING_AGE × HISP × RACE
(63) = 252 cells, SEX × AGE_GROUP (23) = 46, HHGQ (8) × VOTING_AGE = 16. The generator is this
file's own (``generate``; seeded, benchmark data, never noise), written as Parquet under
benchmarks/data/counting/ (git-ignored).

Each measurement runs in a child process launched by benchmarks/peak_rss.py (its peak RSS):
* ``ours``: ``dprelease.data.count_exact(spec)`` on the Parquet file, the local engine: its
  ``load`` (scan + encode) and ``histogram`` (count) seconds, then every histogram densified one
  at a time as a release does (``counts.histograms.pop``), timed apart.
* ``dask``: the same on the Dask engine, a LocalCluster of 2 worker processes (1 thread each)
  started before the clock; the workers' peak RSS added.
* ``numpy``: the baseline, in the same run: the same Parquet columns read with pyarrow, the block
  codes encoded with ``pyarrow.compute.index_in`` against the declared domain, the coarser levels
  by table lookup, then for each table and level ``numpy.bincount(key, minlength=cells)`` of all
  rows at once (its count seconds are the figure counting is compared with).

Run: ``python benchmarks/counting_scale.py [--persons 10000000] [--blocks 2500 250000]``. To
measure another checkout (the "before"), put it first on PYTHONPATH: the children import
``dprelease`` from there; the data and the baseline are the same.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "counting"
ATTRIBUTES = {"VOTING_AGE": 2, "HISP": 2, "RACE": 63, "SEX": 2, "AGE_GROUP": 23, "HHGQ": 8}
TABLES = {"race": ("VOTING_AGE", "HISP", "RACE"), "sex_age": ("SEX", "AGE_GROUP"), "hhgq": ("HHGQ", "VOTING_AGE")}
LEVELS = ("STATE", "COUNTY", "TRACT", "BG", "BLOCK")
PREFIX = {"STATE": 2, "COUNTY": 5, "TRACT": 11, "BG": 12}


def block_codes(blocks: int) -> list[str]:
    """``blocks`` block codes SS CCC TTTTTT G BBB, nested with the census's fan-outs."""
    bgs = math.ceil(blocks / 33)
    tracts = math.ceil(bgs / 3)
    counties = math.ceil(tracts / 27)
    states = min(51, counties)
    codes = []
    for b in range(blocks):
        bg = b // 33
        tract = bg // 3
        county = tract // 27
        codes.append(f"{county % states + 1:02d}{county // states + 1:03d}{tract % 27 + 1:06d}{bg % 3 + 1}"
                     f"{b % 33 + 1:03d}")
    return codes


def generate(persons: int, blocks: int) -> Path:
    """The data set and its spec under benchmarks/data/counting/P_B (written once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    out = DATA / f"{persons}_{blocks}"
    if (out / "spec.yaml").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    codes = block_codes(blocks)
    (out / "blocks.txt").write_text("\n".join(codes) + "\n")
    gen = np.random.default_rng(blocks)
    weight = gen.pareto(1.5, blocks) + 0.1
    weight /= weight.sum()
    writer = None
    dictionary = pa.array(codes, pa.string())
    for start in range(0, persons, 1 << 20):
        n = min(1 << 20, persons - start)
        columns = {"BLOCK": pa.DictionaryArray.from_arrays(pa.array(gen.choice(blocks, n, p=weight), pa.int32()),
                                                           dictionary)}
        for name, k in ATTRIBUTES.items():
            columns[name] = pa.array(gen.integers(0, k, n).astype(np.int8))
        batch = pa.table(columns)
        if writer is None:
            writer = pq.ParquetWriter(out / "persons.parquet", batch.schema)
        writer.write_table(batch, row_group_size=1 << 20)
    assert writer is not None
    writer.close()
    epsilon = {"root": 0.1, **{level: 0.1 for level in LEVELS}}
    spec = {"release": f"counting-{persons}-{blocks}", "ledger": "ledger.sqlite", "output_dir": "outputs",
            "dataset": {"name": f"counting-{persons}-{blocks}", "path": "persons.parquet", "format": "parquet",
                        "lifetime_budget": {"epsilon": 100}},
            "privacy": {"definition": "pure", "unit": "row"}, "budget": {"epsilon": 1.8},
            "columns": {"BLOCK": {"domain_file": "blocks.txt", "geographic": True},
                        **{c: {"range": [0, k - 1]} for c, k in ATTRIBUTES.items()}},
            "geography": {"levels": list(LEVELS),
                          **{level: {"from": LEVELS[i + 1], "prefix": PREFIX[level]}
                             for i, level in enumerate(LEVELS[:-1])}},
            "tables": [{"name": name, "group_by": ["geography", *dims], "epsilon": epsilon,
                        "consistency": "persons"} for name, dims in TABLES.items()]}
    (out / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def child_ours(case: Path, engine: str) -> dict:
    import dataclasses

    from dprelease.data import count_exact
    from dprelease.spec import Engine, load_spec

    spec = load_spec(case / "spec.yaml")
    result: dict = {}
    cluster = None
    if engine == "dask":
        import logging

        from distributed import LocalCluster

        logging.getLogger("distributed").setLevel(logging.ERROR)
        try:  # the cluster count_exact starts for an engine without an address (workers without malloc trimming)
            from dprelease.data.cluster import local_cluster
        except ImportError:  # a checkout from before the run's cluster (data/cluster.py)
            try:
                from dprelease.data.count import local_cluster  # type: ignore[attr-defined, no-redef]
            except ImportError:  # a checkout from before it
                def local_cluster(make, **options):  # type: ignore[no-untyped-def]
                    return make(processes=True, dashboard_address=None, **options)
        # security=None: no TLS (the run connects by address, without the cluster's credentials)
        cluster = local_cluster(LocalCluster, n_workers=2, threads_per_worker=1, security=None)
        spec = dataclasses.replace(spec, engine=Engine(kind="dask", address=cluster.scheduler_address))
    timings: dict[str, float] = {}
    start = time.perf_counter()
    counts = count_exact(spec, timings=timings)
    counted = time.perf_counter()
    cells = 0
    for key in list(counts.histograms):
        cells += counts.histograms.pop(key).size
    result.update(count_s=counted - start, densify_s=time.perf_counter() - counted, cells=cells,
                  load_s=timings.get("load", 0.0), histogram_s=timings.get("histogram", 0.0),
                  rows=counts.rows_read)
    if cluster is not None:
        from distributed import Client

        with Client(cluster.scheduler_address) as client:
            peaks = client.run(lambda: __import__("resource").getrusage(0).ru_maxrss)
        result["workers_peak_rss_mb"] = sum(peaks.values()) / 1024
        cluster.close()
    return result


def child_numpy(case: Path) -> dict:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    codes = (case / "blocks.txt").read_text().split()
    start = time.perf_counter()
    table = pq.read_table(case / "persons.parquet", read_dictionary=["BLOCK"])
    block = table.column("BLOCK").combine_chunks()
    lookup = pc.index_in(block.dictionary, value_set=__import__("pyarrow").array(codes)).to_numpy()
    place = {"BLOCK": lookup[block.indices.to_numpy()].astype(np.int32)}
    sizes = {"BLOCK": len(codes)}
    for level in reversed(LEVELS[:-1]):
        prefixes = [c[:PREFIX[level]] for c in codes]
        index = {p: i for i, p in enumerate(dict.fromkeys(prefixes))}
        place[level] = np.array([index[p] for p in prefixes], dtype=np.int32)[place["BLOCK"]]
        sizes[level] = len(index)
    attrs = {c: table.column(c).to_numpy().astype(np.int64) for c in ATTRIBUTES}
    read = time.perf_counter()
    cells = 0
    for dims in TABLES.values():
        cell = np.zeros(len(block), dtype=np.int64)
        for c in dims:
            cell = cell * ATTRIBUTES[c] + attrs[c]
        m = math.prod(ATTRIBUTES[c] for c in dims)
        cells += int(np.bincount(cell, minlength=m).size)
        for level in LEVELS:
            cells += int(np.bincount(place[level].astype(np.int64) * m + cell, minlength=sizes[level] * m).size)
    return {"read_encode_s": read - start, "count_s": time.perf_counter() - read, "cells": cells}


def run_child(case: Path, what: str, timeout: float) -> dict:
    rss = case / f"rss_{what}.txt"
    cmd = [sys.executable, str(HERE / "peak_rss.py"), str(rss), sys.executable, str(Path(__file__)), "--child", what,
           str(case)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["peak_rss_mb"] = int(rss.read_text()) / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--persons", type=int, default=10_000_000)
    parser.add_argument("--blocks", type=int, nargs="+", default=[2500, 250_000])
    parser.add_argument("--engines", nargs="+", default=["ours", "numpy"], choices=["ours", "dask", "numpy"])
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, case = args.child[0], Path(args.child[1])
        out = child_numpy(case) if what == "numpy" else child_ours(case, "dask" if what == "dask" else "local")
        out["self_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out))
        return
    import dprelease

    print(f"dprelease from {Path(dprelease.__file__).parent}; load {os.getloadavg()[0]:.2f}")
    print("| persons / blocks | engine | load s | count s | densify s | total s | peak RSS MB | count ÷ numpy count "
          "| total ÷ numpy total |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for blocks in args.blocks:
        case = generate(args.persons, blocks)
        results = {what: run_child(case, what, args.timeout) for what in args.engines}
        base = results.get("numpy", {}).get("count_s")
        base_total = base + results["numpy"]["read_encode_s"] if base else None
        for what, r in results.items():
            size = f"{args.persons:,} / {blocks:,}"
            if "error" in r:
                print(f"| {size} | {what} | {r['error']} |||||")
                continue
            rss = r["peak_rss_mb"] + r.get("workers_peak_rss_mb", 0)
            if what == "numpy":
                print(f"| {size} | numpy bincount | {r['read_encode_s']:.2f} | {r['count_s']:.2f} | — | "
                      f"{r['read_encode_s'] + r['count_s']:.2f} | {rss:.0f} | 1.00 | 1.00 |")
                continue
            counting = r["histogram_s"] if what == "ours" else r["count_s"]
            load = r["load_s"] if what == "ours" else 0.0
            ratio = f"{counting / base:.2f}" if base and what == "ours" else "—"
            total = r["count_s"] + r["densify_s"]
            whole = f"{total / base_total:.2f}" if base_total else "—"
            print(f"| {size} | {what}{' (count incl. load)' if what == 'dask' else ''} | {load:.2f} | "
                  f"{counting:.2f} | {r['densify_s']:.2f} | {total:.2f} | {rss:.0f} | {ratio} | {whole} |")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
