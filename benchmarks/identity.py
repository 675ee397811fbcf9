"""A dataset's identity by its records (dprelease/data/identity.py): what it costs, and what it
recognises.

    python benchmarks/identity.py [--rows 10000000] [--repeats 3] [--readme]   # ~2 min once the data is written

1. Cost, at ``--rows`` rows of two shapes of data (written once to ``benchmarks/data/``,
   git-ignored): the suite's synthetic person file (``generate.py``: Parquet, 7 columns, all
   declared by the spec; 83 MB at 10M rows, so the data check reads every row and the identity
   sketches its batches), and national2019 repeated to ``--rows`` rows (CSV, 24 columns, the demo
   spec's 6 declared; 687 MB at 10M rows: over 256 MB, so the check reads headers only and the
   identity reads every column in a pass of its own). ``dprelease run`` as a child process
   (inline, a fresh ledger and output directory each time), medians of ``--repeats``: from its
   run record, the identity's own work against the rest of the run's compute (the check, the
   byte fingerprint, load, histogram, noise, post-process, publish), measured in the same run.
   Then in this process, medians of at least 5 warm passes: the check's pass over every row alone
   and with the identity (what reading every column adds), and the identity's pass of its own
   (read + sketch).
2. The shipped NIST excerpts (``data/nist_acs``), pairwise: the exact share of each file's rows
   found in the other, the identity's estimates (both ways, beyond chance: the figures the
   threshold 1/2 is applied to), and the same estimates for an identity of the demo spec's
   declared columns only (PUMA, SEX, AGEP, RAC1P, HISP, MSP), raw and beyond chance, which is why
   the identity takes every column and corrects for chance.
3. The re-exports of national2019 (``reexports.py``): each recognised, with its estimate.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pyarrow.csv as pa_csv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from generate import write_spec  # noqa: E402
from reexports import VARIANTS, write_reexports  # noqa: E402
from suite import child, dataset  # noqa: E402

from dprelease.data.check import check_data, data_bytes  # noqa: E402
from dprelease.data.identity import THRESHOLD, Identity, Sketcher, identity_of  # noqa: E402
from dprelease.data.load import source  # noqa: E402
from dprelease.data.scan import Source  # noqa: E402
from dprelease.lifecycle.refusals import WHOLE_CHECK_BYTES  # noqa: E402
from dprelease.spec import load_spec  # noqa: E402

NIST = ROOT / "data" / "nist_acs"
EXCERPTS = ("national2018", "national2019", "ma2019", "tx2019")
DECLARED = ("PUMA", "SEX", "AGEP", "RAC1P", "HISP", "MSP")  # configs/acs_demo.yaml's columns
OTHER_STAGES = ("check", "fingerprint", "load", "histogram", "noise", "postprocess", "publish")
COUNTING = ("load", "histogram", "noise", "postprocess")  # the suite's "compute" (suite.COMPUTE_STAGES)
GOAL = 0.15


def synthetic(rows: int) -> tuple[Path, Callable[[str], Path]]:
    """The suite's synthetic person file (Parquet, 7 columns, all declared), and its spec."""
    data_dir = dataset(rows)
    return data_dir, lambda release: write_spec(data_dir, rows, release)


def wide_csv(rows: int) -> tuple[Path, Callable[[str], Path]]:
    """national2019 (CSV, 24 columns) repeated to ``rows`` rows, and the demo spec over it (6 of
    its columns declared)."""
    out = HERE / "data" / f"wide-{rows}"
    out.mkdir(parents=True, exist_ok=True)
    data = out / "national2019-repeated.csv"
    header, *body = (NIST / "national2019.csv").read_text().splitlines()
    if not data.exists():
        whole, rest = divmod(rows, len(body))
        with open(data, "w") as f:  # streamed: the whole text is never in memory at once
            f.write(header + "\n")
            for _ in range(whole):
                f.write("\n".join(body) + "\n")
            f.write("".join(line + "\n" for line in body[:rest]))
    text = (ROOT / "configs" / "acs_demo.yaml").read_text().replace("ledger: ../ledgers/nist-acs.sqlite\n", "")
    text = text.replace("path: ../data/nist_acs/national2019.csv", f"path: {data}")
    text = text.replace("domain_file: domains/puma.txt", f"domain_file: {ROOT / 'configs' / 'domains' / 'puma.txt'}")

    def spec(release: str) -> Path:
        path = out / f"{release}.yaml"
        path.write_text(text.replace("release: acs-demo-2019", f"release: {release}"))
        return path

    return out, spec


def run_once(spec: Path, release: str) -> dict[str, float]:
    """One ``dprelease run`` (child process, inline, a fresh ledger made on purpose first): its timings."""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            child([sys.executable, "-m", "dprelease", "ledger", "init", f"{tmp}/ledger.sqlite", "--reason",
                   "the benchmark's run"], env={**os.environ})
            env = {**os.environ, "XDG_DATA_HOME": f"{tmp}/xdg", "PREFECT_HOME": f"{tmp}/prefect"}
            env.pop("PREFECT_API_URL", None)
            child([sys.executable, "-m", "dprelease", "run", str(spec), "--output-dir", f"{tmp}/out", "--ledger",
                   f"{tmp}/ledger.sqlite", "--orchestrator", "inline"], env=env)
            record = json.loads(Path(f"{tmp}/out/_internal/{release}/run.json").read_text())
    finally:
        spec.unlink()
    timings = record["timings"]
    return {**{k: timings[k] for k in ("identity", *OTHER_STAGES)}, "rows": record["rows"]["read"],
            "compute": sum(timings[k] for k in OTHER_STAGES), "counting": sum(timings[k] for k in COUNTING)}


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def in_process(spec_path: Path) -> dict[str, float]:
    """The check's pass without and with the identity, and the identity's own pass (warm)."""
    spec = load_spec(spec_path)

    def with_identity() -> None:
        sketcher = Sketcher(spec.dataset.na_values, beside=True)  # as a run takes it
        check_data(spec, records=sketcher)
        sketcher.identity()

    return {"pass_check": timed(lambda: check_data(spec)), "pass_check_identity": timed(with_identity),
            "pass_own": timed(lambda: identity_of(source(spec)))}


def cost(name: str, data: tuple[Path, Callable[[str], Path]], repeats: int) -> dict:  # type: ignore[type-arg]
    """Medians of ``repeats`` runs and of at least 5 warm passes (cheap: more, for less noise)."""
    _, spec = data
    runs = [run_once(spec(f"identity-{name}-{os.getpid()}-{n}"), f"identity-{name}-{os.getpid()}-{n}")
            for n in range(repeats)]
    check_spec = spec(f"identity-{name}-check")
    try:
        passes = [in_process(check_spec) for _ in range(max(5, repeats))]
    finally:
        check_spec.unlink()
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    spec_path = spec(f"identity-{name}-size")
    try:
        size = data_bytes(load_spec(spec_path))
    finally:
        spec_path.unlink()
    return {"name": name, "repeats": repeats, "passes": len(passes), "bytes": size,
            "own_pass": size > WHOLE_CHECK_BYTES, **median,
            **{k: statistics.median(p[k] for p in passes) for k in passes[0]}}


def excerpt(name: str, columns: tuple[str, ...] | None = None) -> Identity:
    if columns is None:
        return identity_of(Source(NIST / f"{name}.csv", "csv", ("N",)))
    table = pa_csv.read_csv(NIST / f"{name}.csv").select(list(columns))
    sketcher = Sketcher(("N",))
    sketcher.add(table)
    return sketcher.identity()


def exact_share(a: str, b: str) -> float:
    """The share of ``a``'s rows whose whole line (every column, as the excerpts write them) is a line of ``b``."""
    rows_a = (NIST / f"{a}.csv").read_text().splitlines()[1:]
    rows_b = set((NIST / f"{b}.csv").read_text().splitlines()[1:])
    return sum(r in rows_b for r in rows_a) / len(rows_a)


def pairs() -> list[dict]:  # type: ignore[type-arg]
    full = {n: excerpt(n) for n in EXCERPTS}
    declared = {n: excerpt(n, DECLARED) for n in EXCERPTS}
    out = []
    for a, b in itertools.combinations(EXCERPTS, 2):
        ab, ba = declared[a].records.within(declared[b].records), declared[b].records.within(declared[a].records)
        out.append({"a": a, "b": b, "exact": (exact_share(a, b), exact_share(b, a)), "shares": full[a].shares(full[b]),
                    "apart": full[a].overlap(full[b]) is None, "declared": declared[a].shares(declared[b]),
                    "declared_raw": (ab.raw, ba.raw), "declared_chance": (ab.chance, ba.chance),
                    "declared_apart": declared[a].overlap(declared[b]) is None})
    return out


def reexports() -> list[dict]:  # type: ignore[type-arg]
    first = excerpt("national2019")
    with tempfile.TemporaryDirectory() as tmp:
        written = write_reexports(NIST / "national2019.csv", NIST / "national2018.csv", Path(tmp))
        out = []
        for variant in VARIANTS:
            path = written[variant]
            found = identity_of(Source(path, "parquet" if path.suffix == ".parquet" else "csv", ("N",)))
            overlap = found.overlap(first)
            out.append({"variant": variant, "shares": found.shares(first), "recognised": overlap is not None,
                        "how": overlap.how if overlap else "not recognised"})
    return out


def tables(result: dict) -> list[str]:  # type: ignore[type-arg]
    a, b = result["cost"]
    both = (a, b)

    def row(label: str, fn) -> str:  # type: ignore[no-untyped-def]
        return f"| {label} | " + " | ".join(fn(c) for c in both) + " |"

    def how(c: dict) -> str:  # type: ignore[type-arg]
        return (f"{c['bytes'] / 2**20:,.0f} MB: over 256 MB, the check reads headers only; the identity's own pass"
                if c["own_pass"] else f"{c['bytes'] / 2**20:,.0f} MB: the identity sketches the check's batches")

    def goal(c: dict, label: str) -> str:  # type: ignore[type-arg]
        ratio = added(c) / without(c)
        return (f"* {label}, {c['rows']:,} rows: identity ÷ the run's compute {ratio:.1%}, "
                f"{'met' if ratio <= GOAL else 'NOT met'} (goal ≤ {GOAL:.0%}).")

    def added(c: dict) -> float:  # type: ignore[type-arg]
        """What the identity adds to a run: in the check's pass, that pass with it less without it
        (warm; the run's own figure is only the time the check waited for the sketching thread,
        which does not count how much the thread slowed the check); in a pass of its own, that pass."""
        return c["identity"] if c["own_pass"] else max(c["identity"], c["pass_check_identity"] - c["pass_check"])

    def without(c: dict) -> float:  # type: ignore[type-arg]
        """The run's compute without the identity: its stages, the check's slowing by the thread taken out."""
        return c["compute"] - (added(c) - c["identity"])

    lines = [f"### Cost (medians of {a['repeats']} runs; warm passes in this process: of {a['passes']})", "",
             f"| | synthetic persons, Parquet, {a['rows']:,} rows, 7 columns (all declared) | national2019 repeated, "
             f"CSV, {b['rows']:,} rows, 24 columns (6 declared) |", "|---|---:|---:|",
             row("data size, and where the run takes the identity", how),
             *[row(f"run: {k} s", lambda c, k=k: f"{c[k]:.3f}") for k in OTHER_STAGES],
             row("**run: its compute (the above) s**", lambda c: f"**{c['compute']:.2f}**"),
             row("run: identity s (the check's waits for it; in a pass of its own, that pass)",
                 lambda c: f"{c['identity']:.3f}"),
             row("**identity: what it adds to the run s**", lambda c: f"**{added(c):.3f}**"),
             row("**identity ÷ the run's compute without it**", lambda c: f"**{added(c) / without(c):.1%}**"),
             row("identity ÷ the counting alone (load, histogram, noise, post-process)",
                 lambda c: f"{c['identity'] / c['counting']:.1%}"),
             row("warm: the check's pass over every row alone s", lambda c: f"{c['pass_check']:.2f}"),
             row("warm: the check's pass over every row with the identity s", lambda c: f"{c['pass_check_identity']:.2f}"),
             row("warm: added by the identity (sketch + the undeclared columns read) ÷ the run's compute",
                 lambda c: f"{(c['pass_check_identity'] - c['pass_check']) / c['compute']:.1%}"),
             row("warm: the identity's own pass (read + sketch) s", lambda c: f"{c['pass_own']:.2f}"),
             row("own pass ÷ the run's compute", lambda c: f"{c['pass_own'] / c['compute']:.1%}"), "",
             f"Goal: the identity ≤ {GOAL:.0%} of the run's compute.", "",
             goal(a, "synthetic persons (Parquet)"), goal(b, "national2019 repeated (CSV)"), "",
             "### The shipped NIST excerpts, pairwise", "",
             "Shares of A's rows in B / of B's rows in A: exact (whole lines), the identity's estimates (every "
             f"column, beyond chance, the largest over its comparisons; refused at {THRESHOLD} either way), and for an "
             "identity of the demo's declared columns only (PUMA, SEX, AGEP, RAC1P, HISP, MSP) the full records' raw "
             "estimate, the share chance would give (the chance model), and the estimates beyond chance (0 where "
             "too few sampled records are ones chance would not find).", "",
             "| A | B | exact | identity: estimated | told apart | declared only: raw | chance | beyond chance "
             "| told apart |", "|---|---|---:|---:|---|---:|---:|---:|---|"]

    def two(pair: tuple[float, float]) -> str:
        return f"{pair[0]:.3f} / {pair[1]:.3f}"

    for p in result["pairs"]:
        lines.append(f"| {p['a']} | {p['b']} | {p['exact'][0]:.4f} / {p['exact'][1]:.4f} | {two(p['shares'])} | "
                     f"{'yes' if p['apart'] else 'NO'} | {two(p['declared_raw'])} | {two(p['declared_chance'])} | "
                     f"{two(p['declared'])} | {'yes' if p['declared_apart'] else 'NO'} |")
    lines += ["", "### Re-exports of national2019 (27,253 rows) under a new name", "",
              "Estimates beyond chance; the reason is what a refusal says (never a figure of the data).", "",
              "| variant | its rows in national2019 / national2019's in it (estimated) | recognised: why |",
              "|---|---:|---|"]
    for r in result["reexports"]:
        lines.append(f"| {r['variant']} | {r['shares'][0]:.3f} / {r['shares'][1]:.3f} | "
                     f"{'yes' if r['recognised'] else 'NO'}: {r['how']} |")
    return lines


BEGIN, END = "<!-- identity: generated by benchmarks/identity.py -->", "<!-- end of identity -->"


def write_readme(result: dict) -> None:  # type: ignore[type-arg]
    """The identity section of benchmarks/README.md (its own markers)."""
    readme = HERE / "README.md"
    text = readme.read_text()
    section = "\n".join([BEGIN, "", f"Measured {result['measured']} on {result['machine']}.", "", *tables(result), "",
                         END])
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Identity by records\n\n" + section + "\n"
    readme.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--readme", action="store_true", help="also write the section of benchmarks/README.md")
    args = parser.parse_args()
    result = {"measured": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "pairs": pairs(), "reexports": reexports(),
              "cost": [cost("synthetic", synthetic(args.rows), args.repeats),
                       cost("wide", wide_csv(args.rows), args.repeats)]}
    print("\n".join(tables(result)))
    if args.readme:
        write_readme(result)


if __name__ == "__main__":
    main()
