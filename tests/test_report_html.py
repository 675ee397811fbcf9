"""The HTML budget report's structure (parsed, no browser: headings, captioned tables, scoped
headers, inline images with a text alternative, no script, every string escaped), the spec's
confidence in every margin, the columns of each privacy definition (markdown too), the warnings
in every format (`plan`, `plan --approve`, `plan --json`, the manifest, markdown, JSON and
HTML), and the burn-down of committed releases with the other reservations in their own table.
Manifests are made from plans: no data is read, nothing is drawn. (The page rendered in
headless Chromium is tested in tests/test_report.py.)"""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from html.parser import HTMLParser

import pytest

from dprelease.report import published as reporting
from dprelease.report.html import page as html_page
from dprelease.accounting import PureDP
from dprelease.ledger import Ledger, resolve_location
from dprelease.publish.manifest import RunFacts, manifest
from dprelease.plan import plan_release
from dprelease.plan.tradeoff import plan_curves
from dprelease.report.markdown import budget_report_md
from dprelease.spec import load_spec
from tests.test_operations import demo_spec
from tests.test_report_budgets import spec_path
from tests.ledgers import init_at, make_ledger

CREATED = "2026-11-26T00:00:00+00:00"
DATASET = "nist-acs-national-2019"


class Page(HTMLParser):
    """The parts of a page the tests look at: every start tag with its attributes (in order), the
    text inside each heading, caption, header cell and list item, and the raw text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: dict[str, list[str]] = {}
        self._open: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("h1", "h2", "caption", "th", "li", "figcaption"):
            self._open.append(tag)
            self.texts.setdefault(tag, []).append("")

    def handle_endtag(self, tag):
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data):
        if self._open:
            self.texts[self._open[-1]][-1] += data

    def of(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for t, attrs in self.tags if t == tag]


def demo_manifest(tmp_path, text=lambda s: s, state=None, facts=None):
    path = demo_spec(tmp_path)
    path.write_text(text(path.read_text()))
    spec = load_spec(path)
    return spec, manifest(spec, plan_release(spec, state), "run-1", CREATED, facts)


def ledger_with_history(tmp_path):
    """A ledger of the demo's dataset: a committed release (ε = 1), a voided reservation (1/2) and
    an unfinished one (1/4)."""
    ledger = init_at(resolve_location(str(tmp_path / "ledger.sqlite")))
    runs = {}
    for release, eps in (("first", Fraction(1)), ("voided", Fraction(1, 2)), ("unfinished", Fraction(1, 4))):
        runs[release] = ledger.reserve(dataset=DATASET, release=release, charges=[("t", PureDP(eps))],
                                       spec_fingerprint="sha256:x", lifetime_from_spec=PureDP(Fraction(4))).run_id
    ledger.commit(runs["first"], data_fingerprint="sha256:d")
    ledger.void(runs["voided"], reason="never ran")
    state = ledger.state(DATASET)
    ledger.close()
    return state, runs


# ---------------------------------------------------------------- structure


def test_the_html_is_semantic_self_contained_and_escaped(tmp_path):
    state, _ = ledger_with_history(tmp_path)
    _, m = demo_manifest(tmp_path)
    m["release"] = "acs <b>demo</b> & 'quoted'"  # every string is escaped: none becomes markup
    m["tables"][0]["post_process"] = "<script>alert(1)</script>"
    text = html_page(m, state)
    page = Page(text)
    assert page.texts["h1"] == ["Budget report — acs <b>demo</b> & 'quoted'"]
    assert [t for t, _ in page.tags].count("b") == 4  # the trade-off's published budgets, not the release name
    assert "<script" not in text.lower() and not re.search(r"<[^>]+\son[a-z]+=", text)
    assert not re.search(r"(src|href)=['\"](?!data:image/png;base64,)", text)  # nothing fetched, nothing linked
    assert page.texts["h2"] == [
        "Warnings", "Guarantee", "Spend per table", "Margins of error at 95%, in each measure's own units",
        f"Lifetime budget of {DATASET} (ε)", "Figures",
        "Burn-down of committed releases", "Reservations not committed (voided, unfinished or failed)",
        "Reading the tables"]
    tables = [i for i, (t, _) in enumerate(page.tags) if t == "table"]
    assert len(tables) == 5 == len(page.texts["caption"])  # spend, lifetime, trade-off, burn-down, not committed
    assert all(page.tags[i + 1][0] == "caption" for i in tables)  # each table's first child is its caption
    assert all(attrs.get("scope") in ("col", "row") for attrs in page.of("th"))
    images = page.of("img")
    assert [i["id"] for i in images] == ["fig-allocation", "fig-burndown", "fig-moe", "fig-tradeoff"]
    assert all(i["src"].startswith("data:image/png;base64,") and len(i["alt"]) > 40 for i in images)
    assert "puma_by_sex 0.25" in images[0]["alt"] and "puma_by_sex ±12" in images[2]["alt"]
    assert len(page.texts["figcaption"]) == 4
    assert page.of("html")[0]["lang"] == "en" and page.of("meta")[0]["charset"] == "utf-8"


# ---------------------------------------------------------------- the spec's confidence


def test_every_margin_is_at_the_specs_confidence(tmp_path):
    """At confidence 0.90 the HTML, the markdown and the figures say 90% and show the manifest's
    90% margins; nothing says 95%. The trade-off reproduces the plan's 90% curves."""
    spec, m = demo_manifest(tmp_path, lambda s: s.replace("confidence: 0.95", "confidence: 0.90"))
    assert m["confidence"] == "9/10" and any(t["moe"] != t["moe95"] for t in m["tables"])
    text = html_page(m, None)
    md = budget_report_md(m)
    for shown in (text, md):
        assert "±MoE 90%" in shown and "95%" not in shown
    page = Page(text)
    assert any("±MoE 90%" in c for c in page.texts["caption"]) and "±MoE 90%" in page.texts["th"]
    assert any("90%" in f for f in page.texts["figcaption"])
    for t in m["tables"]:  # the trade-off table's published budget: the margin at 90%
        assert f"<b>ε {float(Fraction(t['budget']['epsilon'])):g}<br>±{t['moe']}</b>" in text, t["name"]
    curves = reporting.tradeoff_curves(m, Fraction(m["confidence"]))
    assert curves == list(plan_curves(plan_release(spec, None))) and all(c.points for c in curves)


# ---------------------------------------------------------------- columns of the privacy definition


def spend_headers(m):
    md = budget_report_md(m)
    line = next(line for line in md.splitlines() if line.startswith("| table |"))
    html_headers = [h for h in Page(html_page(m, None)).texts["th"]][:len(line.split("|")) - 2]
    return [c.strip() for c in line.strip("|").split("|")], html_headers


GAUSSIAN_ONLY = "  - {name: by_sex_age, group_by: [SEX, AGE_GROUP], rho: 0.3}\n"


@pytest.mark.parametrize("kind, expected", [
    ("pure", ["table", "ε", "share", "mechanism", "sensitivity Δ₁", "Laplace scale b = Δ₁/ε"]),
    ("zcdp-gaussian", ["table", "ρ", "share", "mechanism", "sensitivity Δ₂²", "noise variance σ²"]),
    ("zcdp", ["table", "ρ", "share", "mechanism", "sensitivity (Δ₁ Laplace, Δ₂² Gaussian)",
              "noise scale (b Laplace, σ² Gaussian)"]),
    ("approx", ["table", "ε", "δ", "share", "mechanism", "sensitivity (Δ₁ Laplace, Δ₂² Gaussian)",
                "noise scale (b Laplace, σ² Gaussian)"]),
])
def test_the_columns_match_the_privacy_definition(tmp_path, kind, expected):
    if kind == "zcdp-gaussian":
        path = spec_path(tmp_path, "zcdp")
        path.write_text(path.read_text().split("tables:\n")[0] + "tables:\n" + GAUSSIAN_ONLY)
    else:
        path = spec_path(tmp_path, kind)
    spec = load_spec(path)
    m = manifest(spec, plan_release(spec, None), "run-1", CREATED)
    md_headers, html_headers = spend_headers(m)
    assert md_headers[:len(expected)] == expected and html_headers[:len(expected)] == expected
    assert md_headers == html_headers


# ---------------------------------------------------------------- warnings in every format


def warned_spec(tmp_path):
    """The demo with one table at ε = 3/2 and a lifetime budget that this release nearly spends."""
    path = demo_spec(tmp_path)
    path.write_text(path.read_text().replace("epsilon: 0.25\n", "epsilon: 1.5\n", 1)
                    .replace("budget: {epsilon: 1}", "budget: {epsilon: 2.25}")
                    .replace("lifetime_budget: {epsilon: 4}", "lifetime_budget: {epsilon: 2.4}"))
    return path


EXPECTED = ["table puma_by_sex spends ε = 3/2 (over 1): check it is intended",
            "the dataset's lifetime budget is nearly spent: 3/20 of 12/5 remained after this release"]


def test_warnings_are_in_every_format(tmp_path, cli):
    path = warned_spec(tmp_path)
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    shown = cli("plan", path, "--json", "--ledger", ledger)
    assert shown.code == 0, shown
    assert json.loads(shown.stdout)["warnings"] == EXPECTED
    text = cli("plan", path, "--ledger", ledger)
    assert text.code == 0 and all(f"warning: {path}: {w}" in text.stderr for w in EXPECTED), text.stderr
    approved = cli("plan", path, "--approve", "--ledger", ledger)
    assert approved.code == 0 and all(f"warning: {path}: {w}" in approved.stderr for w in EXPECTED), approved
    assert "approved plan" in approved.stderr

    spec = load_spec(path)
    m = manifest(spec, plan_release(spec, None), "run-1", CREATED)
    assert m["warnings"] == EXPECTED == reporting.warnings(m, None) == reporting.report_json(m, None)["warnings"]
    md = budget_report_md(m)
    assert "## Warnings\n\n" + "".join(f"- {w}\n" for w in EXPECTED) in md
    page = Page(html_page(m, None))
    assert page.texts["li"][:2] == EXPECTED and page.texts["h2"][0] == "Warnings"
    (tmp_path / "demo").mkdir()
    _, quiet = demo_manifest(tmp_path / "demo")
    assert quiet["warnings"] == [] and "## Warnings" not in budget_report_md(quiet)


def test_the_manifests_warnings_are_the_reports(tmp_path):
    """Written from the plan at publication, computed from the manifest by the reports: the same,
    evaluations in the open included (from the run's record)."""
    from dprelease.ledger import Evaluation

    seen = Evaluation(DATASET, "sha256:k", "2026-11-20T10:00:00+00:00", "ana", 20)
    facts = RunFacts("ledger-id", "sqlite:///x", "the --ledger option", evaluations=(seen,))
    _, m = demo_manifest(tmp_path, lambda s: s.replace("epsilon: 0.25\n", "epsilon: 1.5\n", 1)
                         .replace("budget: {epsilon: 1}", "budget: {epsilon: 2.25}"), facts=facts)
    assert len(m["warnings"]) == 2 and "evaluated in the open" in m["warnings"][1]
    assert m["warnings"] == reporting.warnings(m, None)
    assert m["warnings"] == reporting.warnings(replace_key(m, "warnings", ["stale"]), None)  # recomputed, not copied


def replace_key(m, key, value):
    out = copy.deepcopy(m)
    out[key] = value
    return out


def test_plan_warns_of_an_unfinished_reservation(tmp_path, cli):
    _, runs = ledger_with_history(tmp_path)
    shown = cli("plan", demo_spec(tmp_path), "--json", "--ledger", tmp_path / "ledger.sqlite")
    assert shown.code == 0, shown
    warned = [w for w in json.loads(shown.stdout)["warnings"] if w.startswith("unfinished reservation")]
    assert len(warned) == 1 and warned[0].startswith(f"unfinished reservation: run {runs['unfinished']} (unfinished, "
                                                     "since ")
    assert warned[0].endswith("still counts as spent; settle it with `dprelease ledger resolve`")


# ---------------------------------------------------------------- the burn-down


def test_the_burn_down_is_of_committed_releases_and_the_rest_is_apart(tmp_path):
    state, runs = ledger_with_history(tmp_path)
    _, m = demo_manifest(tmp_path)
    assert [(p.release, p.spent_after) for p in reporting.burn_down(m, state)] == [("(start)", 0), ("first", 1)]
    others = reporting.other_runs(state)
    assert [(r.release, r.state, r.charge, r.counts_as_spent) for r in others] == [
        ("voided", "voided", Fraction(1, 2), False), ("unfinished", "reserved", Fraction(1, 4), True)]
    shown = reporting.report_json(m, state)
    assert [p["release"] for p in shown["burn_down"]] == ["(start)", "first"]
    assert [(r["run_id"], r["state"], r["counts_as_spent"]) for r in shown["not_committed"]] == [
        (runs["voided"], "voided", False), (runs["unfinished"], "reserved", True)]

    text = html_page(m, state)
    burn = text[text.index("<table id='burn-down'>"):text.index("</table>", text.index("<table id='burn-down'>"))]
    rest = text[text.index("<table id='not-committed'>"):]
    rest = rest[:rest.index("</table>")]
    assert "first" in burn and "voided" not in burn and "unfinished" not in burn
    assert runs["voided"] in rest and runs["unfinished"] in rest and runs["first"] not in rest
    assert "no (voided)" in rest and "yes (until settled)" in rest
    alone = html_page(m, None)
    assert "The ledger is not reachable" in alone and "<table id='not-committed'>" not in alone


def test_local_collections_and_cap_decisions_have_tables_of_their_own(tmp_path):
    """A manifest's local tables (as `run` writes them) and the ledger's cap decisions."""
    state, _ = ledger_with_history(tmp_path)
    ledger = Ledger.open(resolve_location(str(tmp_path / "ledger.sqlite")))
    ledger.set_budget(DATASET, PureDP(Fraction(5)), reason="board <decision> 7", by="ana")
    state = ledger.state(DATASET)
    ledger.close()
    _, m = demo_manifest(tmp_path)
    m["local_tables"] = [{"name": "smokers", "column": "SMOKES", "protocol": "coin_flip", "categories": 2,
                          "epsilon_local": "ln 3", "epsilon_local_bound": "1099/1000", "keep_probability": 0.75,
                          "collection": "wave-1", "memoised": True, "charged_per_respondent": "1099/1000",
                          "already_recorded": False,
                          "provenance": {"how": "registered", "statement": "asked by phone", "memo_of": None,
                                         "registered_by": "bo", "registered_at": "2026-11-01T00:00:00+00:00"}}]
    m["local_epsilon_per_respondent"] = {"before": "0", "after": "1099/1000"}
    text = html_page(m, state)
    page = Page(text)
    assert "Local collections (answers randomized by the respondents)" in page.texts["h2"]
    assert "Local tables and each respondent's ε" in page.texts["caption"]
    assert "The lifetime cap's recorded decisions" in page.texts["caption"]
    assert "board &lt;decision&gt; 7" in text and "ε = 5" in text
    assert "Answers of smokers: registered — asked by phone (registered by bo, 2026-11-01T00:00:00 UTC)." in text
    assert "wave-1 (memoised)" in text
    assert "ln 3 (≤ 1099/1000)" in text
    assert "local collections: each respondent's ε is now 1.099 (not capped)" in page.texts["li"]


def test_invariants_are_explained_before_the_guarantee(tmp_path):
    _, m = demo_manifest(tmp_path)
    m["invariants"] = {"declared": ["STATE"], "totals": [{"level": "STATE", "file": "invariants/STATE.csv"}]}
    page = Page(html_page(m, None))
    assert page.texts["h2"][:3] == ["Warnings", "⚠ Invariants: NOT protected by differential privacy", "Guarantee"]
    assert any(w.startswith("invariants: the number of persons per place at STATE is published EXACTLY")
               for w in page.texts["li"])


def measures_manifest(tmp_path):
    """A manifest (from the plan: no data) of a zCDP release of a mean, a sum, a mode, a median
    and a count."""
    from tests.conftest import ROOT
    from tests.test_reading import MEASURES

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "measures.yaml"
    path.write_text(MEASURES.format(data=ROOT / "data" / "nist_acs" / "national2019.csv"))
    spec = load_spec(path)
    return manifest(spec, plan_release(spec, None), "run-1", CREATED)


def test_the_guarantee_and_the_tradeoff_speak_of_each_measure_and_definition(tmp_path):
    """Issue 29, point 10: the Guarantee says what a table of each measure kind is (not "each table
    is one histogram" beside a mean and a median); a pure release's trade-off says nothing of δ,
    an (ε, δ) release's does."""
    measures = budget_report_md(measures_manifest(tmp_path / "m"))
    for words in ("A count table is one histogram over its full declared domain",
                  "A mean table is two histograms of the same cells", "A mode table is one choice per cell",
                  "A quantile table is one choice per cell", "A sum table is one histogram of values clamped"):
        assert words in measures, words
    assert "cost the table's ρ once" in measures
    _, demo = demo_manifest(tmp_path)
    guarantee = budget_report_md(demo)
    assert "A count table is one histogram" in guarantee and "A mean table" not in guarantee
    assert "cost the table's ε once" in guarantee
    pure = next(p for p in re.findall(r"<p>(.*?)</p>", html_page(demo, None), re.S)
                if "had its budget been the published one" in p)
    assert "δ" not in pure and "in its table's own unit" in pure
    path = spec_path(tmp_path, "approx")
    spec = load_spec(path)
    approx = manifest(spec, plan_release(spec, None), "run-1", CREATED)
    assert approx["privacy"]["definition"] == "approx"
    approximate = next(p for p in re.findall(r"<p>(.*?)</p>", html_page(approx, None), re.S)
                       if "had its budget been the published one" in p)
    assert "each at its own δ" in approximate


def test_the_tradeoff_figure_has_one_panel_per_unit_and_lines_that_differ(tmp_path, monkeypatch):
    """Persons, PINCP units and ranks on one axis no more: one panel per unit; lines of one panel
    differ in marker and dash, and a later one is thinner (two equal curves both show)."""
    from dprelease.report import figures as report_figures

    drawn = []
    monkeypatch.setattr(report_figures, "_png", lambda fig: drawn.append(fig) or "")
    found = {f.key: f for f in report_figures.figures(measures_manifest(tmp_path), None)}
    assert "one panel per unit (PINCP units, a mean's; PINCP units, a sum's; rows of count gap (a mode's); rows of rank (a " \
        "quantile's); persons)" in found["tradeoff"].alt
    labels = [ax.get_ylabel() for ax in drawn[-1].axes]
    assert [label.split(",")[0] for label in labels] == ["± PINCP units", "± PINCP units", "± rows of count gap (a mode's)",
                                                         "± rows of rank (a quantile's)", "± persons"]
    assert "a mean's" in labels[0] and [len(ax.get_legend().get_texts()) for ax in drawn[-1].axes] == [2] * 5
    _, demo = demo_manifest(tmp_path)
    drawn.clear()
    report_figures.figures(demo, None)
    [panel] = drawn[-1].axes  # the demo: counts only
    lines = [line for line in panel.get_lines() if line.get_label() != "_nolegend_" and len(line.get_xdata()) > 1]
    assert len(lines) == len(demo["tables"]) >= 2
    styles = [(line.get_marker(), str(line.get_linestyle())) for line in lines]
    assert len(set(styles)) == len(styles)
    widths = [line.get_linewidth() for line in lines]
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
