"""Published tables a statistician can use (issue 20, item 6): with ``accuracy: {margin_columns:
true}`` each estimate is published with its margin of error beside it, ACS style, at the spec's
confidence and in the estimate's own units (a mean's at its cell's published count); the
manifest lists every table's columns and what they mean; re-post-processing keeps the column;
off by default."""

from __future__ import annotations

import csv
import json
from fractions import Fraction
from pathlib import Path

import pytest

from dprelease.plan.margins import Margin
from tests.conftest import ROOT, write_spec
from tests.test_margins import SPEC as MARGINS_SPEC

# the spec of tests/test_margins.py (a count, a mean, a quantile, a mode at 0.90), margin columns on or off
SPEC = (MARGINS_SPEC.format(data=ROOT / "data" / "nist_acs" / "national2019.csv", domains=ROOT / "configs" / "domains")
        .replace("release: margins-090", "release: margins-beside")
        .replace("accuracy: {confidence: 0.90}", "accuracy: {confidence: 0.90{extra}}"))


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The release with margin columns, and one without (the default)."""
    from dprelease.cli import app
    from typer.testing import CliRunner

    out = {}
    for name, extra in (("with", ", margin_columns: true"), ("without", "")):
        here = tmp_path_factory.mktemp(name)
        spec = write_spec(here, SPEC.replace("{extra}", extra))
        result = CliRunner().invoke(app, ["run", str(spec), "--orchestrator", "inline", "--ledger", str(here / "l.sqlite"), "--output-dir",
                                          str(here / "out")], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        out[name] = here / "out" / "margins-beside"
    return out


def _rows(release: Path, table: str) -> list[dict[str, str]]:
    return list(csv.DictReader((release / "tables" / f"{table}.csv").open()))


def test_each_estimate_has_its_margin_beside_it_in_its_own_units(published):
    release = published["with"]
    manifest = json.loads((release / "manifest.json").read_text())
    margins = {t["name"]: Margin.from_record(t["margin"]) for t in manifest["tables"]}
    assert all(m.confidence == Fraction(9, 10) for m in margins.values())
    counts = _rows(release, "puma_by_sex")
    assert list(counts[0]) == ["PUMA", "SEX", "count", "noise_moe"]
    assert {int(r["noise_moe"]) for r in counts} == {margins["puma_by_sex"].value}
    means = _rows(release, "income_mean_by_puma_sex")
    assert list(means[0]) == ["PUMA", "SEX", "mean", "count", "noise_moe"]
    for row in means:  # a mean's margin at its cell's published count
        expected = margins["income_mean_by_puma_sex"].at_count(float(row["count"]))
        assert (row["noise_moe"] == "") if expected is None else float(row["noise_moe"]) == pytest.approx(expected, abs=0.01)
    assert any(row["noise_moe"] for row in means) and len({row["noise_moe"] for row in means}) > 2  # it varies with the count
    quantile = _rows(release, "median_age_by_sex")
    assert {int(r["noise_rank_error"]) for r in quantile} == {margins["median_age_by_sex"].value}
    mode = _rows(release, "race_mode_by_puma")
    assert {int(r["noise_count_gap"]) for r in mode} == {margins["race_mode_by_puma"].value}


def test_the_manifest_lists_every_column_and_its_meaning(published):
    for name, release in published.items():
        manifest = json.loads((release / "manifest.json").read_text())
        for entry in manifest["tables"]:
            header = list(_rows(release, entry["name"])[0])
            assert [c["name"] for c in entry["columns"]] == header, (name, entry["name"])
            assert all(c["meaning"] for c in entry["columns"])
    with_margins = json.loads((published["with"] / "manifest.json").read_text())
    moe = next(c for c in with_margins["tables"][0]["columns"] if c["name"] == "noise_moe")
    assert "90%" in moe["meaning"]
    assert moe["meaning"].startswith("the privacy noise's only, not the sampling error of weighted estimates")


def test_off_by_default(published):
    assert list(_rows(published["without"], "puma_by_sex")[0]) == ["PUMA", "SEX", "count"]


def test_re_post_processing_keeps_the_margin_column(published, cli):
    result = cli("postprocess", published["with"], "--method", "clamp")
    assert result.code == 0, result.stderr
    final = Path(result.stdout.split("new tables in ")[1].split(" (")[0])
    assert list(_rows(final, "puma_by_sex")[0]) == ["PUMA", "SEX", "count", "noise_moe"]


def test_read_release_reads_the_margin_column(published):
    from dprelease import read_release

    frame = read_release(published["with"]).table("puma_by_sex")
    assert "noise_moe" in frame.columns and (frame["noise_moe"] > 0).all()


def test_the_reports_give_each_measure_its_margin_in_its_own_units(published, cli, tmp_path):
    """The HTML's margin figure plots counts' and sums' margins only (a mean's sum-part margin is
    not its margin); the HTML lists every measure's margin in words, as the markdown does; the
    JSON report carries each table's margin record."""
    release = published["with"]
    manifest = json.loads((release / "manifest.json").read_text())
    sum_part = next(t for t in manifest["tables"] if t["name"] == "income_mean_by_puma_sex")["parts"][0]["moe"]
    page = tmp_path / "r.html"
    assert cli("report", release, "--format", "html", "--output", page).code == 0
    text = page.read_text()
    alt = text.split("id='fig-moe'")[1].split("alt='")[1].split("'")[0]
    assert "puma_by_sex ±" in alt and "income_mean" not in alt and str(sum_part) not in alt
    margins_section = text.split("Margins of error at 90%")[1]
    assert "income_mean_by_puma_sex" in margins_section and "n = 1,000: ±" in margins_section
    assert "rank" in margins_section and "true mode" in margins_section
    result = cli("report", release, "--format", "json")
    kinds = {t["name"]: t["margin"]["kind"] for t in json.loads(result.stdout)["tables"]}
    assert kinds == {"puma_by_sex": "cell", "income_mean_by_puma_sex": "mean", "median_age_by_sex": "quantile",
                     "race_mode_by_puma": "mode"}


def test_a_release_published_with_the_earlier_names_reads_and_re_post_processes(published, cli, tmp_path):
    """Issue 29, point 7 renamed the margin columns (the privacy noise's: `noise_moe`,
    `noise_count_gap`, `noise_rank_error`); a release published before, its columns `moe`,
    `moe_count_gap`, `moe_rank`, is read as published and re-post-processed under its own names."""
    import shutil

    from dprelease import read_release

    earlier = {"noise_moe": "moe", "noise_count_gap": "moe_count_gap", "noise_rank_error": "moe_rank"}
    release = tmp_path / "margins-beside"
    shutil.copytree(published["with"], release)
    for path in (release / "tables").glob("*.csv"):
        header, rest = path.read_text().split("\n", 1)
        path.write_text(",".join(f'"{earlier.get(c.strip(chr(34)), c.strip(chr(34)))}"' for c in header.split(","))
                        + "\n" + rest)
    manifest = json.loads((release / "manifest.json").read_text())
    for entry in manifest["tables"]:
        for column in entry["columns"]:
            column["name"] = earlier.get(column["name"], column["name"])
    (release / "manifest.json").write_text(json.dumps(manifest))
    frame = read_release(release).table("median_age_by_sex")
    assert "moe_rank" in frame.columns and (frame["moe_rank"] > 0).all()
    result = cli("postprocess", release, "--method", "clamp")
    assert result.code == 0, result.stderr
    final = Path(result.stdout.split("new tables in ")[1].split(" (")[0])
    assert list(_rows(final, "puma_by_sex")[0]) == ["PUMA", "SEX", "count", "moe"]
    version = read_release(release).table("puma_by_sex", version=final.name)
    assert (version["moe"] > 0).all()
