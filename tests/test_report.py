"""`dprelease report RELEASE_DIR`: the budget report as self-contained HTML (plots inlined), md
and json; the burn-down across releases from the ledger; warnings. The HTML is rendered in
headless Chromium: every figure loads (the trade-off's too), nothing is fetched, and the
screenshot shows the plots."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from fractions import Fraction

import numpy as np
import pytest

from dprelease import reporting
from dprelease.accounting import decimal_text
from tests.test_operations import demo_spec
from tests.test_run import run

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory, run_env_module):
    """The demo release, then a second one of the same dataset (the burn-down has two steps)."""
    tmp = tmp_path_factory.mktemp("report")
    spec = demo_spec(tmp)
    second = tmp / "second.yaml"
    second.write_text(spec.read_text().replace("release: acs-demo-2019", "release: acs-demo-2019-b"))
    ledger = tmp / "ledger.sqlite"
    for path in (spec, second):
        proc = run(path, "--output-dir", tmp / "out", "--ledger", ledger, env=run_env_module)
        assert proc.returncode == 0, proc.stderr
    return tmp / "out" / "acs-demo-2019-b", ledger


def test_json_and_md_reports(two_releases, cli):
    release, ledger = two_releases
    result = cli("report", release, "--format", "json", "--ledger", ledger)
    assert result.code == 0, result
    data = json.loads(result.stdout)
    assert data["burn_down_source"] == "ledger"
    assert [(p["release"], p["spent_after"]) for p in data["burn_down"]] == [
        ("(start)", "0"), ("acs-demo-2019", "1"), ("acs-demo-2019-b", "2")]
    assert sum(Fraction(t["epsilon"]) for t in data["tables"]) == 1
    md = cli("report", release, "--format", "md", "--ledger", ledger)
    assert md.code == 0 and md.stdout.startswith("# Budget report — acs-demo-2019-b") and "## Guarantee" in md.stdout
    alone = cli("report", release, "--format", "json", "--ledger", release.parent / "no-ledger.sqlite")
    assert json.loads(alone.stdout)["burn_down_source"].startswith("manifest")


def test_warnings_flag_what_needs_review(two_releases):
    release, _ = two_releases
    manifest = reporting.read_manifest(release)
    assert reporting.warnings(manifest, None) == []
    manifest["tables"][0]["budget"] = {"epsilon": "3/2"}  # the typed records the reports read
    manifest["budget"]["lifetime"]["spent_after"] = {"epsilon": "15/4"}  # of 4: 1/4 remains
    manifest["invariants"] = {"totals": [{"level": "STATE"}]}
    found = reporting.warnings(manifest, None)
    assert any("spends ε = 3/2" in w for w in found) and any("nearly spent" in w for w in found)
    assert any("EXACTLY" in w for w in found)


def test_the_html_report_renders_its_plots_in_chromium(two_releases, cli, tmp_path):
    chromium = shutil.which("chromium")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run installs Debian's chromium package")
        pytest.skip("no chromium on this machine (.ci/run installs Debian's chromium package)")
    release, ledger = two_releases
    result = cli("report", release, "--ledger", ledger, "--output", tmp_path / "report.html")
    assert result.code == 0, result
    page = (tmp_path / "report.html").read_text()
    assert len(re.findall(r"<img [^>]*src='data:image/png;base64,", page)) == 4
    manifest = reporting.read_manifest(release)  # the trade-off: at the published ε, the manifest's moe95
    for t in manifest["tables"]:
        assert f"<b>ε {decimal_text(Fraction(t['budget']['epsilon']))}<br>±{t['moe95']}</b>" in page, t["name"]
    assert not re.search(r"(src|href)=['\"](https?:|//|file:)", page)  # self-contained: nothing to fetch

    base = [chromium, *CHROMIUM_FLAGS]
    dom = subprocess.run(base + [f"--user-data-dir={tmp_path / 'profile1'}", "--virtual-time-budget=10000",
                                 "--dump-dom", (tmp_path / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert "figures: 4 loaded, 0 failed" in dom.stdout, dom.stdout[-2000:] + dom.stderr[-2000:]
    shot = tmp_path / "shot.png"
    subprocess.run(base + [f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1200,4400",
                           f"--screenshot={shot}", (tmp_path / "report.html").as_uri()],
                   capture_output=True, text=True, timeout=120)
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    for colour, least in (("#3b6ea5", 200), ("#a53b3b", 200), ("#5a9e5a", 200),  # allocation, burn-down, MoE bars
                          (reporting.TRADEOFF_MARK, 100)):  # the trade-off's stars (4, at the published ε)
        rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
        assert (np.abs(pixels - rgb).sum(axis=1) < 30).sum() > least, colour
