"""validate, plan and ledger must not import Prefect (it costs over a second)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, shipped_project

PROBE = """
import sys
from dprelease.cli import main
for argv in {argvs!r}:
    sys.argv = ["dprelease", *argv]
    try:
        main()
    except SystemExit as exit:
        assert exit.code in (0, None), (argv, exit.code)
assert "prefect" not in sys.modules, sorted(m for m in sys.modules if m.startswith("prefect"))
print("NO-PREFECT-OK")
"""


def run_probe(*argvs: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE.format(argvs=list(argvs))], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_validate_help_and_plan_on_the_demo_do_not_import_prefect(tmp_path):
    demo = str(shipped_project(tmp_path) / "acs_demo.yaml")  # its own pinned ledger: plan reads it
    proc = run_probe(["validate", "--help"], ["validate", demo], ["plan", demo], ["plan", demo, "--json"],
                     ["ledger"], ["ledger", "--json"], ["postprocess", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert "NO-PREFECT-OK" in proc.stdout


def test_the_probe_can_fail():
    """The probe itself notices an import of prefect (so the test above means something)."""
    proc = subprocess.run([sys.executable, "-c", "import sys, prefect; assert 'prefect' not in sys.modules"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0


def test_importing_the_package_does_not_import_prefect():
    proc = subprocess.run([sys.executable, "-c", "import sys, dprelease, dprelease.spec, dprelease.plan, "
                           "dprelease.ledger, dprelease.cli; assert 'prefect' not in sys.modules"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_version_prints_the_package_version_and_exits_0(cli):
    from dprelease import __version__

    result = cli("--version")
    assert result.code == 0, result
    assert result.stdout == f"dprelease {__version__}\n"
    proc = run_probe(["--version"])  # and it does not import Prefect
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"dprelease {__version__}", "NO-PREFECT-OK"]
