"""The benchmark suite: dprelease against its anchors, side by side in one run, medians of
--repeats, peak RSS of every process measured. Never run in CI (tens of minutes).

    bash benchmarks/anchors/setup.sh           # the anchors' venvs (OpenDP + Polars, Tumult + Spark)
    python benchmarks/suite.py                  # everything; writes benchmarks/results/latest.json
                                                # and the results section of benchmarks/README.md
    python benchmarks/suite.py --report benchmarks/results/latest.json   # README from saved results

Parts (each can be skipped: --skip sampler small workload big e2e):

* small: the shipped demo, whole process, in each way a run can go (inline, with the day's
  server, a temporary server; first runs on a new PREFECT_HOME) against ``dprelease plan``
  and OpenDP's Polars context (benchmarks/small_release.py);
* sampler: exact discrete Laplace samples per second, ours (ChaCha20 keystream from
  os.urandom, integer-only) vs OpenDP's vector discrete Laplace (its venv) vs numpy's
  difference of two geometrics (PCG64, floating point: insecure, inexact; a yardstick only);
* workload at each --rows: the six tables' exact histograms by a plain numpy bincount, pandas
  groupby + reindex and DuckDB (benchmarks/anchors/local.py), and ``dprelease run`` (our
  load + histogram + noise + post-process from its run record, and the whole process);
* big: --big rows (100M), ours vs the plain bincount only, with peak RSS;
* e2e at each --rows: the same release with OpenDP's Polars context and Tumult Analytics
  (benchmarks/anchors/*.py, in their venvs): the whole process, and the computation after
  start-up.

Peak RSS is the largest resident set of the process or any process it waited for (Linux
``wait4``, through the small launcher ``peak_rss.py``), in MB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
VENVS = HERE / ".venvs"
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
from generate import generate, write_spec  # noqa: E402

COMPUTE_STAGES = ("load", "histogram", "noise", "postprocess")


def child(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> tuple[float, float, str]:
    """Run ``cmd``; (wall seconds, peak RSS in MB, stdout). Fails loudly on a non-zero exit."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.NamedTemporaryFile("r") as rss:
        start = time.perf_counter()  # through the launcher (see peak_rss.py): its start-up is in the wall time
        proc = subprocess.run([sys.executable, "-S", str(HERE / "peak_rss.py"), rss.name, *cmd], stdout=out,
                              stderr=err, env=env, text=True, timeout=timeout)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read()[-4000:]}")
        return wall, int(rss.read()) / 1024, out.read()


def last_json(text: str) -> dict:  # type: ignore[type-arg]
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def dataset(rows: int) -> Path:
    out = DATA / f"{rows}"
    if not (out / "persons.parquet").exists():
        print(f"generating {rows:,} rows ...", flush=True)
        generate(rows, out)
    return out


def median_runs(fn, repeats: int) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """Medians (per key) of ``repeats`` runs of ``fn() -> dict`` of numbers."""
    runs = [fn() for _ in range(repeats)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]} | {"runs": len(runs)}


def local_anchor(kind: str, data_dir: Path) -> dict:  # type: ignore[type-arg]
    wall, rss, out = child([sys.executable, str(HERE / "anchors" / "local.py"), kind, str(data_dir)])
    record = last_json(out)
    return {"compute": record["compute"], "wall": wall, "rss_mb": rss}


class Ours:
    """``dprelease run`` as a child process, a fresh ledger and output directory each time: by
    default (no Prefect server up here, so inline), or as a first run forced through Prefect on
    a new PREFECT_HOME (``first_run_prefect``: a temporary server and its database migrations)."""

    def __init__(self) -> None:
        self.count = 0

    def run(self, data_dir: Path, rows: int, first_run_prefect: bool = False) -> dict:  # type: ignore[type-arg]
        self.count += 1
        release = f"bench-{os.getpid()}-{self.count}"
        spec = write_spec(data_dir, rows, release)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                home = Path(tmp) / "prefect-home"  # new each time: only a run through Prefect uses it
                home.mkdir()
                env = {**os.environ, "PREFECT_HOME": str(home), "XDG_DATA_HOME": f"{tmp}/xdg"}
                env.pop("PREFECT_API_URL", None)
                extra = ["--orchestrator", "prefect"] if first_run_prefect else []
                wall, rss, _ = child([sys.executable, "-m", "dprelease", "run", str(spec), "--output-dir",
                                      f"{tmp}/out", "--ledger", f"{tmp}/ledger.sqlite", *extra], env=env)
                record = json.loads(Path(f"{tmp}/out/_internal/{release}/run.json").read_text())
        finally:
            spec.unlink()
        timings = record["timings"]
        assert record["rows"]["read"] == rows, record["rows"]
        return {**{k: timings[k] for k in ("fingerprint", *COMPUTE_STAGES, "publish")},
                "compute": sum(timings[k] for k in COMPUTE_STAGES), "wall": wall, "rss_mb": rss}


FIRST_RUN = "ours, first run via Prefect (new PREFECT_HOME)"


def sampler(n: int, repeats: int) -> dict:  # type: ignore[type-arg]
    import math
    from fractions import Fraction

    import numpy as np

    from dprelease.mechanisms import discrete_laplace

    scale = Fraction(2)
    discrete_laplace(scale, 1000)

    def timed(fn) -> float:  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    ours = n / statistics.median(timed(lambda: discrete_laplace(scale, n)) for _ in range(repeats))
    rng = np.random.default_rng()  # the insecure yardstick, for comparison only; never noise
    p = 1 - math.exp(-1 / float(scale))
    numpy_rate = n / statistics.median(timed(lambda: rng.geometric(p, n) - rng.geometric(p, n))
                                       for _ in range(repeats))
    result = {"n": n, "scale": str(scale), "ours_per_s": ours, "numpy_per_s": numpy_rate}
    python = VENVS / "opendp" / "bin" / "python"
    if python.exists():
        opendp_n = max(100_000, n // 10)  # OpenDP is ~30x slower: fewer samples, the same rate
        _, _, out = child([str(python), str(HERE / "anchors" / "opendp_sampler.py"), "--n", str(opendp_n),
                           "--scale", "2", "--repeats", str(repeats)])
        result["opendp_per_s"] = last_json(out)["per_second"]
        result["opendp_n"] = opendp_n
    return result


def e2e_anchor(name: str, data_dir: Path) -> dict:  # type: ignore[type-arg]
    python = VENVS / name.split("-")[0] / "bin" / "python"
    script = HERE / "anchors" / ("opendp_polars.py" if name.startswith("opendp") else "tumult.py")
    wall, rss, out = child([str(python), str(script), str(data_dir)])
    record = last_json(out)
    return {"compute": record["compute"], "wall": wall, "rss_mb": rss, "cells": record["cells"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--big", type=int, default=100_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sampler-n", type=int, default=10_000_000)
    parser.add_argument("--skip", nargs="*", default=[], choices=["sampler", "small", "workload", "big", "e2e"])
    parser.add_argument("--anchors", nargs="*", default=["opendp-polars", "tumult-analytics"])
    parser.add_argument("--report", type=Path, help="only regenerate the README section from saved results")
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--no-readme", action="store_true", help="leave benchmarks/README.md as it is (a partial run)")
    args = parser.parse_args()
    if args.report:
        write_readme(json.loads(args.report.read_text()))
        return
    results: dict = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),  # type: ignore[type-arg]
                     "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                     "repeats": args.repeats, "workload": {}, "e2e": {}}
    ours = Ours()
    if "sampler" not in args.skip:
        results["sampler"] = sampler(args.sampler_n, args.repeats)
        print(json.dumps({"sampler": results["sampler"]}), flush=True)
    if "small" not in args.skip:
        from small_release import measure

        results["small"] = measure(args.repeats)
        print(json.dumps({"small": results["small"]["rows"]}), flush=True)
    if "workload" not in args.skip:
        for rows in args.rows:
            data_dir = dataset(rows)
            local_anchor("plain", data_dir)  # warm the page cache for everyone
            entry = {kind: median_runs(lambda: local_anchor(kind, data_dir), args.repeats)
                     for kind in ("plain", "pandas", "duckdb")}
            entry["ours"] = median_runs(lambda: ours.run(data_dir, rows), args.repeats)
            results["workload"][str(rows)] = entry
            print(json.dumps({"workload": rows, **entry}), flush=True)
    if "big" not in args.skip:
        data_dir = dataset(args.big)
        local_anchor("plain", data_dir)
        results["big"] = {"rows": args.big, "plain": median_runs(lambda: local_anchor("plain", data_dir),
                                                                  args.repeats),
                          "ours": median_runs(lambda: ours.run(data_dir, args.big), args.repeats)}
        print(json.dumps({"big": results["big"]}), flush=True)
    if "e2e" not in args.skip:
        for rows in args.rows:
            data_dir = dataset(rows)
            entry = {"ours": results["workload"].get(str(rows), {}).get("ours")
                     or median_runs(lambda: ours.run(data_dir, rows), args.repeats)}
            entry[FIRST_RUN] = median_runs(lambda: ours.run(data_dir, rows, first_run_prefect=True), args.repeats)
            for name in args.anchors:
                python = VENVS / name.split("-")[0] / "bin" / "python"
                if not python.exists():
                    entry[name] = {"missing": f"{python} not found: bash benchmarks/anchors/setup.sh"}
                    continue
                try:
                    entry[name] = median_runs(lambda: e2e_anchor(name, data_dir), args.repeats)
                except SystemExit as exc:  # an anchor that does not run here is reported, not hidden
                    entry[name] = {"failed": str(exc)[-500:]}
                print(json.dumps({"e2e": rows, name: entry[name]}), flush=True)
            results["e2e"][str(rows)] = entry
    results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"results: {args.out}")
    if args.no_readme:
        print("\n".join(tables(results)))
    else:
        write_readme(results)


def tables(results: dict) -> list[str]:  # type: ignore[type-arg]
    """The README's results section (markdown), with each target and whether it was met."""
    lines = [f"Measured {results['started'][:10]} on {results['machine']}; medians of {results['repeats']} runs. "
             "Regenerate with `python benchmarks/suite.py` (or `--report FILE` from saved results).", ""]
    targets = []
    s = results.get("sampler")
    if s:
        lines += ["### Sampler (exact discrete Laplace, scale 2)", "",
                  "| implementation | samples/s | ours ÷ it |", "|---|---:|---:|",
                  f"| ours: ChaCha20 from os.urandom, integer-only, exact ({s['n']:,} samples) | "
                  f"{s['ours_per_s'] / 1e6:.2f} M | 1 |"]
        if "opendp_per_s" in s:
            lines.append(f"| OpenDP vector discrete Laplace ({s['opendp_n']:,} samples) | "
                         f"{s['opendp_per_s'] / 1e6:.3f} M | {s['ours_per_s'] / s['opendp_per_s']:.1f}× |")
            ratio = s["ours_per_s"] / s["opendp_per_s"]
            targets.append(f"sampler ≥ 30× OpenDP's throughput: {ratio:.1f}× — {verdict(ratio >= 30)}")
        lines += [f"| numpy geometric difference (PCG64, floats: insecure, inexact; yardstick) | "
                  f"{s['numpy_per_s'] / 1e6:.2f} M | {s['ours_per_s'] / s['numpy_per_s']:.2f}× |", ""]
    if results.get("small"):
        from small_release import table_lines

        lines += table_lines(results["small"])
    if results.get("workload"):
        lines += ["### The 6-table workload: exact histograms (ours: + noise + post-processing)", "",
                  "| rows | plain bincount s | pandas s | DuckDB s | ours: load | histogram | noise | post-process "
                  "| ours compute s | ours ÷ plain | ours whole run s | peak RSS MB: plain / pandas / DuckDB / ours |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for rows, e in results["workload"].items():
            o = e["ours"]
            lines.append(f"| {int(rows):,} | {e['plain']['compute']:.2f} | {e['pandas']['compute']:.2f} | "
                         f"{e['duckdb']['compute']:.2f} | {o['load']:.2f} | {o['histogram']:.2f} | {o['noise']:.3f} | "
                         f"{o['postprocess']:.4f} | {o['compute']:.2f} | {o['compute'] / e['plain']['compute']:.2f}× | "
                         f"{o['wall']:.1f} | {e['plain']['rss_mb']:.0f} / {e['pandas']['rss_mb']:.0f} / "
                         f"{e['duckdb']['rss_mb']:.0f} / {o['rss_mb']:.0f} |")
        if "10000000" in results["workload"]:
            e = results["workload"]["10000000"]
            ratio = e["ours"]["compute"] / e["plain"]["compute"]
            targets.append(f"(load + histogram + noise + post-process) ≤ 1.5× the plain bincount at 10M rows: "
                           f"{ratio:.2f}× — {verdict(ratio <= 1.5)}")
        lines.append("")
    b = results.get("big")
    if b:
        o, p = b["ours"], b["plain"]
        lines += [f"### {b['rows']:,} rows (Parquet, {b['rows'] // 10**6}M)", "",
                  "| | compute s | whole process s | peak RSS MB |", "|---|---:|---:|---:|",
                  f"| plain bincount (every column in memory) | {p['compute']:.1f} | {p['wall']:.1f} | {p['rss_mb']:.0f} |",
                  f"| ours (streamed; `dprelease run`) | {o['compute']:.1f} | {o['wall']:.1f} | {o['rss_mb']:.0f} |", ""]
        targets.append(f"a {b['rows'] // 10**6}M-row release completes with peak RSS under 4 GB: {o['rss_mb']:.0f} MB — "
                       f"{verdict(o['rss_mb'] < 4096)}")
    if results.get("e2e"):
        lines += ["### End to end: the same release (6 tables, ε = 0.5 each, every declared cell)", "",
                  "| rows | implementation | after start-up s (ours: every stage of the run record) | whole process s "
                  "| peak RSS MB |",
                  "|---:|---|---:|---:|---:|"]
        for rows, e in results["e2e"].items():
            for name, r in e.items():
                if r is None:
                    continue
                if "compute" in r:
                    lines.append(f"| {int(rows):,} | {name} | {after_startup(name, r):.2f} | {r['wall']:.1f} | "
                                 f"{r['rss_mb']:.0f} |")
                else:
                    lines.append(f"| {int(rows):,} | {name} | — | — | {(r.get('missing') or r.get('failed', ''))[:120]} |")
        for rows, e in results["e2e"].items():
            anchors = {n: r for n, r in e.items() if not n.startswith("ours") and r and "compute" in r}
            if not anchors or not e.get("ours"):
                continue
            o = e["ours"]
            slower = all(o["wall"] < r["wall"] for r in anchors.values())
            targets.append(f"whole process faster than every anchor at {int(rows):,} rows: ours {o['wall']:.1f} s vs "
                           + ", ".join(f"{n} {r['wall']:.1f} s" for n, r in anchors.items())
                           + f" — {verdict(slower)}")
            if rows == "10000000":
                fastest = min(anchors.items(), key=lambda kv: kv[1]["compute"])
                ratio = fastest[1]["compute"] / after_startup("ours", o)
                targets.append(f"computation after start-up ≥ 10× faster than the fastest anchor's at 10M rows "
                               f"({fastest[0]}): {ratio:.1f}× — {verdict(ratio >= 10)}")
        lines.append("")
    if targets:
        lines += ["### Targets", "", *[f"- {t}" for t in targets], ""]
    return lines


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def after_startup(name: str, r: dict) -> float:  # type: ignore[type-arg]
    """Seconds after start-up: an anchor's from its first step to every table collected; ours
    the run record's every stage (fingerprint, load, histogram, noise, post-process, publish)."""
    if not name.startswith("ours"):
        return r["compute"]
    return r["compute"] + r.get("fingerprint", 0.0) + r.get("publish", 0.0)


BEGIN, END = "<!-- results: generated by benchmarks/suite.py -->", "<!-- end of results -->"


def write_readme(results: dict) -> None:  # type: ignore[type-arg]
    readme = HERE / "README.md"
    text = readme.read_text()
    section = "\n".join([BEGIN, "", *tables(results), END])
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Results\n\n" + section + "\n"
    readme.write_text(text)
    print("\n".join(tables(results)))


if __name__ == "__main__":
    main()
