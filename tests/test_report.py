"""`dprelease report RELEASE_DIR`: the budget report as self-contained HTML (plots inlined), md
and json; the burn-down across releases from the ledger; warnings. The HTML is rendered in
headless Chromium: every figure loads (the trade-off's too), nothing is fetched, and the
screenshot shows the plots."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from fractions import Fraction

import numpy as np
import pytest

from dprelease.publish.manifest_reader import read_manifest
from dprelease.report import published as reporting
from dprelease.accounting import decimal_text
from tests.test_operations import demo_spec
from tests.test_run import run

# The test's probe, put into a copy of the report: a content security policy that blocks any fetch
# but data: images (and reports it), every error and console.error recorded, then on load each
# image's decoding (naturalWidth > 0 and every pixel drawn) and the spend table's rendered text,
# written into the DOM for --dump-dom.
PROBE = """<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; \
style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<script>
var problems = [];
window.addEventListener('error', function (e) { problems.push('error: ' + (e.message || e.target.outerHTML)); }, true);
document.addEventListener('securitypolicyviolation', function (e) { problems.push('blocked: ' + e.blockedURI); });
var consoleError = console.error;
console.error = function () { problems.push('console: ' + Array.prototype.join.call(arguments, ' '));
                              consoleError.apply(console, arguments); };
function decoded(i) {  // loaded, sized, and every pixel drawn: the figures are opaque PNGs, and a truncated
  if (!i.complete || i.naturalWidth === 0) return false;  // one leaves the rows it lacks transparent
  var c = document.createElement('canvas'); c.width = i.naturalWidth; c.height = i.naturalHeight;
  var g = c.getContext('2d'); g.drawImage(i, 0, 0);
  var d = g.getImageData(0, 0, c.width, c.height).data;
  for (var k = 3; k < d.length; k += 4) { if (d[k] < 255) return false; }
  return true;
}
window.addEventListener('load', function () {
  var images = Array.from(document.querySelectorAll('img'));
  var states = images.map(decoded);
  var ok = states.filter(Boolean).length;
  var text = function (c) { return c.innerText.trim(); };
  var found = {figures: 'figures: ' + ok + ' loaded, ' + (images.length - ok) + ' failed', problems: problems,
               images: images.map(function (i, n) { return [i.id, states[n]]; }),
               headers: Array.from(document.querySelectorAll('table#spend thead th')).map(text),
               spend: Array.from(document.querySelectorAll('table#spend tbody tr')).map(function (r) {
                 return Array.from(r.children).map(text); })};
  var out = document.createElement('pre'); out.id = 'probe'; out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
});
</script>"""
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory, release_env_module):
    """The demo release, then a second one of the same dataset (the burn-down has two steps)."""
    tmp = tmp_path_factory.mktemp("report")
    spec = demo_spec(tmp)
    second = tmp / "second.yaml"
    second.write_text(spec.read_text().replace("release: acs-demo-2019", "release: acs-demo-2019-b"))
    ledger = tmp / "ledger.sqlite"
    for path in (spec, second):
        proc = run(path, "--output-dir", tmp / "out", "--ledger", ledger, env=release_env_module)
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
    manifest = read_manifest(release)
    repeated = [f"table {t} was already released in release acs-demo-2019 (committed): publishing it again spends "
                "again (the same people measured twice); drop it from the spec unless a second measurement is intended"
                for t in dict.fromkeys(t["name"] for t in manifest["tables"])]
    assert reporting.warnings(manifest, None) == repeated == manifest["context_warnings"]  # the second release's plan's
    manifest["context_warnings"] = []
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
    manifest = read_manifest(release)  # the trade-off: at the published ε, the manifest's moe95
    for t in manifest["tables"]:
        assert f"<b>ε {decimal_text(Fraction(t['budget']['epsilon']))}<br>±{t['moe95']}</b>" in page, t["name"]
    assert not re.search(r"(src|href)=['\"](https?:|//|file:)", page)  # self-contained: nothing to fetch

    assert "<script" not in page.lower()  # no script at all
    assert not re.search(r"<[^>]+\son[a-z]+=", page)  # nor event-handler attributes

    base = [chromium, *CHROMIUM_FLAGS]
    probed = tmp_path / "probed.html"  # a copy with the test's probe: the report itself has no script
    probed.write_text(page.replace("<meta charset='utf-8'>", "<meta charset='utf-8'>" + PROBE, 1))
    dom = subprocess.run(base + [f"--user-data-dir={tmp_path / 'profile1'}", "--virtual-time-budget=10000",
                                 "--enable-logging=stderr", "--v=0", "--dump-dom", probed.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert "figures: 4 loaded, 0 failed" in dom.stdout, dom.stdout[-2000:] + dom.stderr[-2000:]
    found = json.loads(html.unescape(re.search(r"<pre id=\"probe\">(.*?)</pre>", dom.stdout, re.S).group(1)))
    assert found["problems"] == [], found["problems"]  # no error, console error or blocked fetch
    assert "CONSOLE" not in dom.stderr, dom.stderr[-2000:]  # Chromium logs every console message it saw
    assert found["images"] == [[f"fig-{k}", True] for k in ("allocation", "burndown", "moe", "tradeoff")]
    # the spend table as the browser rendered it, read back and compared with the manifest's figures
    assert found["headers"][:2] == ["table", "ε"] and "±MoE 95%" in found["headers"], found["headers"]
    assert "sensitivity Δ₁" in found["headers"] and not any("Δ₂²" in h for h in found["headers"])
    column = {h: i for i, h in enumerate(found["headers"])}
    assert [row[0] for row in found["spend"]] == [t["name"] for t in manifest["tables"]]
    for row, t in zip(found["spend"], manifest["tables"]):
        assert Fraction(row[column["ε"]].split()[0]) == Fraction(t["budget"]["epsilon"]), row
        assert int(row[column["±MoE 95%"]]) == t["moe"] and int(row[column["sensitivity Δ₁"]]) == t["sensitivity"]
        assert Fraction(row[column["Laplace scale b = Δ₁/ε"]].split()[0]) == Fraction(t["scale"]), row
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
