"""The small release a statistician iterates on all day: the shipped demo (27,253 rows, 4
tables), whole process, in each way a run can go, against `dprelease plan` of the same spec
and OpenDP's Polars context (benchmarks/anchors/opendp_demo.py) measured in the same run.

    python benchmarks/small_release.py [--repeats 3] [--readme]   # ~3 min; the suite runs it as part "small"

Rows (each a fresh process, a fresh ledger and output directory; rounds interleaved, medians):

* ``plan``: ``dprelease plan`` of the spec (the yardstick of the goals);
* ``run, default (no server: inline)``: ``dprelease run`` with no Prefect server up;
* ``run, dprelease server up``: the default with the day's server (``dprelease server start``,
  started once before the rounds and stopped after);
* ``run, dprelease server up, no warm runner``: the same run in its own process (what the warm
  runner buys: docs/warm_runner.md);
* ``run --orchestrator prefect, no server``: a temporary server started by the run itself;
* the same two first runs on a new PREFECT_HOME (``cold``): as on a new machine;
* ``OpenDP Polars``: the same four tables, key sets and ε (its own venv).

Goals (issue 16): the default warm run ≤ 2.5× plan and faster than OpenDP's Polars context;
with ``dprelease server`` up ≤ 2.5× plan; a cold first run ≤ 8 s.
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
from pathlib import Path

from dprelease.cli.warm.protocol import CHILD_FLAG  # set in a run's environment: never handed to the warm runner

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SPEC = ROOT / "configs" / "acs_demo.yaml"
OPENDP = HERE / ".venvs" / "opendp" / "bin" / "python"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def unpinned_demo(work: Path) -> Path:
    """The demo spec without its ledger pin (its data and domains by absolute path), so that each
    timed run's typed --ledger creates a fresh ledger: a pinned spec's runs use its one ledger."""
    text = "".join(line for line in SPEC.read_text().splitlines(keepends=True) if not line.startswith("ledger:"))
    text = text.replace("../data/", f"{ROOT}/data/").replace("domain_file: domains/", f"domain_file: {ROOT}/configs/domains/")
    path = work / "acs_demo.yaml"
    path.write_text(text)
    return path


def measure(repeats: int) -> dict:  # type: ignore[type-arg]
    work = Path(tempfile.mkdtemp(prefix="dprelease-small-"))
    spec = unpinned_demo(work)
    base = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "DPRELEASE_LEDGER")}
    warm_home = work / "prefect-home"
    warm_home.mkdir()
    server_xdg = work / "server-xdg"
    count = 0

    def env(xdg: Path, home: Path) -> dict[str, str]:
        return {**base, "XDG_DATA_HOME": str(xdg), "PREFECT_HOME": str(home)}

    def fresh() -> tuple[Path, Path]:
        nonlocal count
        count += 1
        return work / f"ledger-{count}.sqlite", work / f"out-{count}"

    def run(extra: list[str], e: dict[str, str]) -> float:
        ledger, out = fresh()
        return timed([sys.executable, "-m", "dprelease", "run", str(spec), "--ledger", str(ledger), "--output-dir",
                      str(out), *extra], e)

    def cold(extra: list[str]) -> float:
        nonlocal count
        count += 1
        home = work / f"cold-home-{count}"
        home.mkdir()
        return run(extra, env(work / f"cold-xdg-{count}", home))

    rows: dict[str, list[float]] = {}
    plain = env(work / "xdg", warm_home)
    planned = fresh()[0]  # plan never creates a ledger: one, made on purpose, for every plan row
    timed([sys.executable, "-m", "dprelease", "ledger", "init", str(planned), "--reason", "the benchmark's plans"],
          plain)
    cases = {
        "plan": lambda: timed([sys.executable, "-m", "dprelease", "plan", str(spec), "--ledger",
                               str(planned)], plain),
        "run, default (no server: inline)": lambda: run([], plain),
        "run, dprelease server up": lambda: run([], env(server_xdg, warm_home)),
        # the same run in its own process: what the warm runner buys (its child's flag: never handed over)
        "run, dprelease server up, no warm runner": lambda: run([], {**env(server_xdg, warm_home), CHILD_FLAG: "1"}),
        "run --orchestrator prefect, no server": lambda: run(["--orchestrator", "prefect"], plain),
        "first run, default, new PREFECT_HOME": lambda: cold([]),
        "first run --orchestrator prefect, new PREFECT_HOME": lambda: cold(["--orchestrator", "prefect"]),
    }
    if OPENDP.exists():
        cases["OpenDP Polars context (same 4 tables)"] = lambda: timed(
            [str(OPENDP), str(HERE / "anchors" / "opendp_demo.py"), str(ROOT)], base)
    run(["--orchestrator", "prefect"], plain)  # warms PREFECT_HOME's database (migrations) and the page cache
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dprelease", "server", "start"], env=env(server_xdg, warm_home), cwd=ROOT,
                   check=True, capture_output=True)
    server_start = time.perf_counter() - started
    try:
        for _ in range(repeats):  # interleaved rounds: drift on a shared machine hits every row alike
            for name, case in cases.items():
                rows.setdefault(name, []).append(case())
                print(json.dumps({name: round(rows[name][-1], 2)}), flush=True)
    finally:
        subprocess.run([sys.executable, "-m", "dprelease", "server", "stop"], env=env(server_xdg, warm_home), cwd=ROOT,
                       capture_output=True)
    return {"repeats": repeats, "server_start": server_start,
            "measured": time.strftime("%Y-%m-%d", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "rows": {name: {"median": statistics.median(v), "runs": v} for name, v in rows.items()},
            "opendp": "" if OPENDP.exists() else f"{OPENDP} not found: bash benchmarks/anchors/setup.sh opendp"}


def table_lines(result: dict) -> list[str]:  # type: ignore[type-arg]
    rows = result["rows"]
    plan = rows["plan"]["median"]
    opendp = rows.get("OpenDP Polars context (same 4 tables)", {}).get("median")
    lines = [f"### Small release: the demo (27,253 rows, 4 tables), whole process, medians of {result['repeats']}", "",
             "| how | seconds | ÷ plan | ÷ OpenDP |", "|---|---:|---:|---:|"]
    for name, r in rows.items():
        vs_opendp = "" if opendp is None else f"{r['median'] / opendp:.2f}×"
        lines.append(f"| {name} | {r['median']:.2f} | {r['median'] / plan:.2f}× | {vs_opendp} |")
    lines += ["", f"`dprelease server start` (once a day, warm PREFECT_HOME): {result['server_start']:.1f} s.", ""]
    default = rows["run, default (no server: inline)"]["median"]
    server = rows["run, dprelease server up"]["median"]
    unwarmed = rows.get("run, dprelease server up, no warm runner", {}).get("median")
    first = rows["first run, default, new PREFECT_HOME"]["median"]
    targets = [f"default warm run ≤ 2.5× plan: {default / plan:.2f}× — {_verdict(default <= 2.5 * plan)}",
               f"with dprelease server up ≤ 2.5× plan: {server / plan:.2f}× — {_verdict(server <= 2.5 * plan)}",
               f"cold first run ≤ 8 s: {first:.2f} s — {_verdict(first <= 8)}"]
    if unwarmed is not None:
        targets.insert(2, f"the same run without the warm runner (in its own process): {unwarmed:.2f} s = "
                          f"{unwarmed / plan:.2f}× plan — {_verdict(unwarmed <= 2.5 * plan)}; the runner saves "
                          f"{unwarmed - server:.2f} s a run")
    if opendp is not None:
        targets.insert(1, f"default warm run faster than OpenDP's Polars context: {default:.2f} s vs {opendp:.2f} s — "
                          f"{_verdict(default < opendp)}")
    elif result.get("opendp"):
        lines += [f"OpenDP: {result['opendp']}", ""]
    return lines + ["Targets:", "", *[f"- {t}" for t in targets], ""]


BEGIN, END = "<!-- small release: generated by benchmarks/small_release.py -->", "<!-- end of small release -->"


def write_readme(result: dict) -> None:  # type: ignore[type-arg]
    """The small-release section of benchmarks/README.md (its own markers: the suite's results
    section is left as it is)."""
    readme = HERE / "README.md"
    text = readme.read_text()
    section = "\n".join([BEGIN, "", f"Measured {result.get('measured', '')} on {result.get('machine', '')}.", "",
                         *table_lines(result), END])
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Small release (the demo)\n\n" + section + "\n"
    readme.write_text(text)


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "small.json")
    parser.add_argument("--readme", action="store_true", help="also write the section of benchmarks/README.md")
    args = parser.parse_args()
    result = measure(args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print("\n".join(table_lines(result)))
    if args.readme:
        write_readme(result)


if __name__ == "__main__":
    main()
