"""The latency of the commands a statistician types all day, on the shipped demo, against the
import floor measured in the same run (issue 29: ``validate``, ``plan`` and ``ledger`` within
2.5× the floor, ``report`` ≤ 1.5 s).

    python benchmarks/latency.py [--repeats 9]   # ~1 min at 9 repeats

The floor is what any command of a Python tool built on these libraries pays before it does
anything: starting Python and importing pyyaml, jsonschema and numpy
(``python -c "import yaml, jsonschema, numpy"``). Each command runs as ``python -m dprelease``
in a fresh process on a throwaway copy of the demo (its spec, domain file and data copied into
``benchmarks/data/latency/``, git-ignored; its own ledger by ``dprelease ledger init --spec``,
its own output directory, one inline ``run`` of the spec under another release name to publish
the release ``report`` reads, so that ``plan`` of the demo still fits: exit 0): never
the repository's own ledgers or outputs.

* ``validate``: ``dprelease validate`` of the copied spec;
* ``plan``: ``dprelease plan`` of it (its ledger read, the data's header checked);
* ``ledger``: ``dprelease ledger --spec`` (the demo's ledger, its dataset);
* ``report``: ``dprelease report`` of the published release (the HTML page and its figures).

Rounds are interleaved (floor, then each command, per round) so that a change in the machine's
load falls on all of them alike; each figure is the median over the rounds of the wall time,
and of the CPU time (user + system of the child, which a busy machine inflates less). The
ratios are the medians over the floor's median, wall and CPU alike.

Bytecode: the children run with ``PYTHONPYCACHEPREFIX`` under ``benchmarks/data/latency/``
and without ``PYTHONDONTWRITEBYTECODE``, and one warm-up round is not counted, so that every
module is read from its cached bytecode as in an installed package (an editable checkout run
with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile dprelease's sources every time).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "data" / "latency"
FLOOR = [sys.executable, "-c", "import yaml, jsonschema, numpy"]
GOAL_RATIO, GOAL_REPORT = 2.5, 1.5
RELEASE = "acs-demo-2019-published"  # the release `report` reads


def demo_copy() -> Path:
    """A fresh copy of the demo under ``WORK``: its spec (pinning ``../ledgers``, ``../outputs``
    relative to itself), domain file and data; its own ledger; one inline run published."""
    shutil.rmtree(WORK / "demo", ignore_errors=True)
    demo = WORK / "demo"
    (demo / "configs" / "domains").mkdir(parents=True)
    (demo / "data" / "nist_acs").mkdir(parents=True)
    (demo / "ledgers").mkdir()
    (demo / "outputs").mkdir()
    shutil.copy(ROOT / "configs" / "acs_demo.yaml", demo / "configs")
    shutil.copy(ROOT / "configs" / "domains" / "puma.txt", demo / "configs" / "domains")
    shutil.copy(ROOT / "data" / "nist_acs" / "national2019.csv", demo / "data" / "nist_acs")
    spec = demo / "configs" / "acs_demo.yaml"
    dprelease("ledger", "init", "--spec", str(spec), "--reason", "benchmarks/latency.py: a throwaway copy")
    published = spec.with_name("acs_demo_published.yaml")  # the same spec under another release name, so that
    published.write_text(spec.read_text().replace("release: acs-demo-2019", f"release: {RELEASE}"))  # plan fits
    dprelease("run", str(published), "--orchestrator", "inline")
    return demo


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "DPRELEASE_LEDGER")}
    out["PYTHONPYCACHEPREFIX"] = str(WORK / "pycache")
    return out


def dprelease(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "dprelease", *args], env=env(), cwd=WORK, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"dprelease {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process; a failure stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env(), cwd=WORK, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def commands(demo: Path) -> dict[str, list[str]]:
    spec = str(demo / "configs" / "acs_demo.yaml")
    release = str(demo / "outputs" / RELEASE)
    dp = [sys.executable, "-m", "dprelease"]
    return {"floor": FLOOR,
            "validate": [*dp, "validate", spec],
            "plan": [*dp, "plan", spec],
            "ledger": [*dp, "ledger", "--spec", spec],
            "report": [*dp, "report", release, "--output", str(WORK / "budget_report.html")]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="Rounds counted (after one warm-up round).")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    demo = demo_copy()
    cmds = commands(demo)
    for cmd in cmds.values():  # warm-up: bytecode cached, files in the page cache
        timed(cmd)
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(args.repeats):
        for name, cmd in cmds.items():
            wall, cpu = timed(cmd)
            walls[name].append(wall)
            cpus[name].append(cpu)
    wall = {k: statistics.median(v) for k, v in walls.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; medians of "
          f"{args.repeats} rounds (1 warm-up round not counted); load average {os.getloadavg()[0]:.2f} at the end")
    print(f"floor: python -c \"import yaml, jsonschema, numpy\" = {wall['floor']:.3f} s wall, "
          f"{cpu['floor']:.3f} s CPU")
    print()
    print("| command | wall s | ÷ floor (wall) | CPU s | ÷ floor (CPU) | goal |")
    print("|---|---:|---:|---:|---:|---|")
    for name in ("validate", "plan", "ledger", "report"):
        goal = f"≤ {GOAL_REPORT} s wall" if name == "report" else f"≤ {GOAL_RATIO}× floor"
        print(f"| {name} | {wall[name]:.3f} | {wall[name] / wall['floor']:.2f}× | {cpu[name]:.3f} | "
              f"{cpu[name] / cpu['floor']:.2f}× | {goal} |")


if __name__ == "__main__":
    main()
