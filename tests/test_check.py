"""The data checked against the spec before anything is spent (issue 20, item 1).

``dprelease run`` refuses data that does not fit its spec (a column the file lacks, a value
that does not parse, a value outside its declared domain or range, a missing value the column
has no category for, a file with no rows) with exit 2 BEFORE it reserves anything: the ledger
has no row for the release, not even a voided reservation. ``dprelease check SPEC`` prints per
column the problems and how many rows have them, spends nothing and writes nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from dprelease.data.check import check_data
from dprelease.ledger import Ledger, resolve_location
from dprelease.lifecycle import progress, refusals
from dprelease.spec import load_spec
from tests.ledgers import make_ledger, remove_ledger, untouched

SPEC = """\
release: {release}
dataset: {{name: d, path: {data}, na_values: ["N"], lifetime_budget: {{epsilon: 4}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  G: {{domain: [a, b, c]}}
  AGE: {{range: [0, 99]}}
  M: {{domain: [x, y], missing: unknown}}
derived:
  BAND: {{from: AGE, bins: [0, 18, 100]}}
tables:
  - {{name: by_g, group_by: [G], epsilon: 0.25}}
  - {{name: by_band, group_by: [G, BAND], epsilon: 0.25}}
  - {{name: by_m, group_by: [M], where: {{AGE: {{ge: 18}}}}, epsilon: 0.5}}
"""
CLEAN = "G,AGE,M\na,3,x\nb,40,\nc,77,y\na,18,N\nb,51,y\n"


def project(tmp_path: Path, rows: str | bytes, release: str = "checked", name: str = "data.csv") -> Path:
    data = tmp_path / name
    data.write_bytes(rows.encode() if isinstance(rows, str) else rows)
    spec = tmp_path / f"{release}.yaml"
    spec.write_text(SPEC.format(release=release, data=name))
    return spec


def runs_in_ledger(dataset: str = "d") -> list[tuple[str, str]] | None:
    """(release, state) of every run of ``dataset`` in the test's ledger, read from the ledger
    itself; None where there is no ledger or no such dataset."""
    ledger = Ledger.open(resolve_location())
    if ledger is None:
        return None
    with ledger:
        state = ledger.state(dataset)
    return None if state is None else [(r.release, r.state) for r in state.runs]


def refused_before_reserving(cli, spec: Path, *words: str, earlier: list[tuple[str, str]] | None = None) -> str:
    """``run`` exits 2 naming ``words``, without a traceback; the ledger holds no row of this
    release (the earlier runs only), and ``ledger --json`` lists none; nothing is published."""
    result = cli("run", spec, "--orchestrator", "inline", "--output-dir", spec.parent / "out")
    assert result.code == 2, result
    assert "Traceback" not in result.output and "Nothing was reserved or spent" in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    assert "reserved ε" not in result.stderr and "voided" not in result.stderr
    assert runs_in_ledger() == earlier  # no reservation, no void: no row at all
    shown = json.loads(cli("ledger", "--json").stdout)
    releases = [r["release"] for d in shown["datasets"] for r in d["releases"]]
    assert spec.stem not in releases, shown
    assert not (spec.parent / "out" / spec.stem).exists()
    return result.stderr


def test_a_missing_column_is_refused_before_the_reservation(tmp_path, cli):
    spec = project(tmp_path, "G,AGE\na,3\nb,40\n")
    stderr = refused_before_reserving(cli, spec, "column M: not in the data file", str(tmp_path / "data.csv"),
                                      "name the column as the data does (the file has: G, AGE)")
    assert "column G" not in stderr and "column AGE" not in stderr  # the columns it has are fine


def test_a_refused_run_leaves_an_existing_ledger_as_it_was(tmp_path, cli):
    """A dataset with a committed release: a later run on bad data adds no row (no void)."""
    first = project(tmp_path, CLEAN, release="first")
    published = cli("run", first, "--orchestrator", "inline", "--output-dir", tmp_path / "out")
    assert published.code == 0, published
    assert runs_in_ledger() == [("first", "committed")]
    (tmp_path / "bad.csv").write_text(CLEAN + "d,5,x\n")
    spec = tmp_path / "second.yaml"
    spec.write_text(SPEC.format(release="second", data="bad.csv"))
    refused_before_reserving(cli, spec, "column G: 1 row outside the declared domain", "data row 6",
                             earlier=[("first", "committed")])


def test_a_value_outside_a_declared_domain_or_range(tmp_path, cli):
    spec = project(tmp_path, CLEAN + "d,5,x\nd,6,x\na,120,x\n")
    refused_before_reserving(cli, spec, "column G: 2 rows outside the declared domain, e.g. 'd'",
                             "column AGE: 1 row outside the declared range [0, 99], e.g. '120'",
                             "set on_out_of_domain: drop on columns.G")


def test_an_unparsable_value(tmp_path, cli):
    spec = project(tmp_path, CLEAN + "a,forty,x\na,3.5,y\n")
    refused_before_reserving(cli, spec, "column AGE: 2 rows not whole numbers, e.g. 'forty'", "data row 6")


def test_na_values_that_do_not_match_the_data(tmp_path, cli):
    """The file writes "NA" for missing while the spec says na_values: ["N"]; and "N" where the
    column declares no missing category."""
    spec = project(tmp_path, CLEAN + "a,NA,x\nb,N,y\nc,7,NA\n")
    stderr = refused_before_reserving(
        cli, spec, "column AGE: 1 row not whole numbers, e.g. 'NA'",
        "if that value marks a missing value, add it to dataset.na_values",
        "column AGE: 1 row missing (empty or one of na_values ['N']) in a column that declares no missing: category",
        "add missing: LABEL to columns.AGE", "column M: 1 row outside the declared domain, e.g. 'NA'")
    assert "column G" not in stderr


@pytest.mark.parametrize("rows, words", [(b"", "the file is empty (not even a header line)"),
                                         (b"G,AGE,M\n", "no rows")])
def test_an_empty_file(tmp_path, cli, rows, words):
    refused_before_reserving(cli, project(tmp_path, rows), words, str(tmp_path / "data.csv"))


def test_check_prints_every_column_with_its_problems_and_row_counts(tmp_path, cli):
    spec = project(tmp_path, CLEAN + "d,5,x\nd,forty,z\nb,200,z\nc,7,z\n")
    result = cli("check", spec)
    assert result.code == 2, result
    data = tmp_path / "data.csv"
    assert result.stdout.splitlines() == [
        f"data: {data} (9 rows read)",
        f"column G: 2 rows outside the declared domain, e.g. 'd' ({data} data row 6); fix the data or the spec's "
        "domain, or set on_out_of_domain: drop on columns.G",
        f"column AGE: 1 row not whole numbers, e.g. 'forty' ({data} data row 7); fix the data, or set "
        "on_out_of_domain: drop on columns.AGE",
        f"column AGE: 1 row outside the declared range [0, 99], e.g. '200' ({data} data row 8); fix the data or the "
        "spec's domain, or set on_out_of_domain: drop on columns.AGE",
        f"column M: 3 rows outside the declared domain, e.g. 'z' ({data} data row 7); fix the data or the spec's "
        "domain, or set on_out_of_domain: drop on columns.M",
        "problems in 3 columns: a run would refuse this data before reserving anything (nothing was spent)"]
    shown = json.loads(cli("check", spec, "--json").stdout)
    assert shown["ok"] is False and shown["rows_read"] == 9
    assert [(p["problem"], p["rows"]) for p in shown["columns"]["AGE"]] == [("unparsable", 1), ("outside", 1)]
    assert "forty" not in json.dumps(shown) and "'z'" not in json.dumps(shown)  # counts, never a value


def test_check_on_clean_data_exits_0(tmp_path, cli):
    result = cli("check", project(tmp_path, CLEAN))
    assert result.code == 0, result
    assert result.stdout.splitlines()[1:] == ["column G: no problems", "column AGE: no problems",
                                              "column M: no problems",
                                              "no problems: a run would accept this data (nothing was spent)"]


def test_check_reports_drops_but_does_not_refuse_them(tmp_path, cli):
    spec = project(tmp_path, CLEAN + "d,5,x\n")
    spec.write_text(spec.read_text().replace("G: {domain: [a, b, c]}", "G: {domain: [a, b, c], on_out_of_domain: drop}"))
    result = cli("check", spec)
    assert result.code == 0, result
    assert "column G: 1 row outside the declared domain, e.g. 'd'" in result.stdout
    assert "dropped (on_out_of_domain: drop on columns.G) (not a problem)" in result.stdout


def test_check_never_writes_the_ledger_or_outputs(tmp_path, cli, monkeypatch, isolated_ledger):
    monkeypatch.chdir(tmp_path)
    remove_ledger(isolated_ledger)
    spec = project(tmp_path, CLEAN + "d,5,x\n")
    for code in (2, 2):  # no ledger: none is created
        result = cli("check", spec)
        assert result.code == code and not isolated_ledger.exists(), result
    make_ledger(isolated_ledger)  # then none is changed
    first = project(tmp_path, CLEAN, release="first", name="first.csv")
    assert cli("run", first, "--orchestrator", "inline").code == 0
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in isolated_ledger.parent.iterdir()}
    files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for target in (spec, project(tmp_path, CLEAN, release="clean", name="clean.csv")):
        cli("check", target)
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in isolated_ledger.parent.iterdir()} == before
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == sorted(files + [Path("clean.csv"),
                                                                                          Path("clean.yaml")])
    assert runs_in_ledger() == [("first", "committed")]


def test_streamed_data_has_its_header_checked_before_the_reservation(tmp_path, cli, monkeypatch):
    """Data too large to be read twice is checked by its header only before the reservation: a
    missing column is still refused with no ledger row; a bad value is found by the count (the
    reservation is voided) and the message says how to check every row first."""
    monkeypatch.setattr(refusals, "WHOLE_CHECK_BYTES", 0)
    spec = project(tmp_path, "G,AGE\na,3\n")
    stderr = refused_before_reserving(cli, spec, "column M: not in the data file")
    assert "(its header only: `dprelease check SPEC` reads every row)" in stderr
    bad = project(tmp_path, CLEAN + "d,5,x\n", release="late")
    result = cli("run", bad, "--orchestrator", "inline", "--output-dir", tmp_path / "out")
    assert result.code == 2 and "outside the declared domain" in result.stderr, result
    assert runs_in_ledger() == [("late", "voided")]


def test_the_library_check_counts_summed_and_identifier_columns(tmp_path):
    (tmp_path / "data.csv").write_text("G,AGE,M,PID,INCOME\na,3,x,p1,10\nb,40,y,,x\nc,7,y,p2,inf\na,9,x,p3,\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(release="sums", data="data.csv")
                    .replace("privacy: {definition: pure, unit: row}",
                             "privacy: {definition: pure, unit: {id: PID, max_rows: 1}}")
                    + "  - {name: income, group_by: [G], measure: {sum: INCOME, bounds: [0, 100], granularity: 1}, epsilon: 0.5}\n")
    found = check_data(load_spec(spec))
    assert [(f.column, f.kind, f.rows) for f in found.problems] == [
        ("INCOME", "not-number", 1), ("INCOME", "not-finite", 1), ("INCOME", "missing", 1), ("PID", "no-id", 1)]
    assert not found.ok and found.rows == 4


def test_a_progress_bar_only_on_a_terminal_and_for_large_data():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    large = progress.SHOWN_FROM_BYTES
    with progress.scan_progress(large, "x", io.StringIO()) as read:
        assert read is None  # captured output: never a bar
    with progress.scan_progress(large - 1, "x", Terminal()) as read:
        assert read is None  # small data: no bar
    shown = Terminal()
    with progress.scan_progress(large, "checking data.csv", shown) as read:
        assert read is not None
        read(large // 2)
    assert "checking data.csv" in shown.getvalue()


def test_check_never_imports_prefect():
    from tests.conftest import ROOT
    from tests.test_no_prefect import run_probe

    proc = run_probe(["check", str(ROOT / "configs" / "acs_demo.yaml")])  # the NIST file fits its spec: exit 0
    assert proc.returncode == 0, proc.stderr
    assert "NO-PREFECT-OK" in proc.stdout and "no problems: a run would accept this data" in proc.stdout


def test_a_scheduled_run_refused_for_its_data_logs_no_value(tmp_path, monkeypatch, capsys, caplog):
    """A scheduled run's refusal is logged (Prefect keeps its logs); a data error's message may
    quote a value and counts rows, so it goes to the worker's standard error, and the log line
    and the flow's state say only that the data was refused."""
    import logging

    import prefect

    import dprelease.lifecycle
    from dprelease.serve import orchestrate
    from dprelease.errors import DataError
    from tests.schedules import bind_here

    logger = logging.getLogger("test-scheduled-check")
    monkeypatch.setattr(prefect, "get_run_logger", lambda: logger)
    monkeypatch.setattr(logger, "handlers", [caplog.handler])  # directly: Prefect may keep records from the root

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise DataError("spec.yaml: the data does not fit the spec:\n  column G: 7 rows outside the declared domain, "
                        "e.g. 'secret-value'")

    monkeypatch.setattr(dprelease.lifecycle, "run_spec", refuse)
    bind_here(monkeypatch, project(tmp_path, CLEAN, release="spec"), tmp_path / "out")  # as `dprelease schedule` binds
    with caplog.at_level(logging.INFO, logger="test-scheduled-check"):
        state = orchestrate.scheduled_release.fn(str(tmp_path / "spec.yaml"), None, str(tmp_path / "out"))
    assert state.is_failed() and state.message.startswith("refused (exit 2): the data was refused")
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "refused (exit 2)" in logged and "secret-value" not in logged and "7 rows" not in logged
    assert "secret-value" not in state.message
    assert "secret-value" in capsys.readouterr().err  # the worker's terminal


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_check_reports_its_progress_in_bytes_up_to_the_data_size(tmp_path, monkeypatch, fmt):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dprelease.data import scan
    from dprelease.data.check import data_bytes

    rows = "G,AGE,M\n" + "a,3,x\nb,40,\nc,77,y\n" * 2000
    spec = project(tmp_path, rows)
    if fmt == "parquet":
        pq.write_table(pa.table({"G": ["a", "b", "c"] * 2000, "AGE": [3, 40, 77] * 2000, "M": ["x", None, "y"] * 2000}),
                       tmp_path / "data.parquet", row_group_size=1000)
        spec.write_text(spec.read_text().replace("path: data.csv", "path: data.parquet, format: parquet"))
    monkeypatch.setattr(scan, "CSV_BLOCK_BYTES", 4096)  # many blocks of a small file
    monkeypatch.setattr(scan, "BATCH_ROWS", 1000)
    seen: list[int] = []
    loaded = load_spec(spec)
    assert check_data(loaded, read=seen.append).ok
    assert len(seen) > 3 and seen == sorted(seen) and seen[-1] == data_bytes(loaded), seen


def test_check_names_the_declared_columns_nothing_reads(tmp_path, cli):
    """A declared column no table, rule or where reads is not checked (a run does not read it
    either): check says so, rather than leaving it out silently."""
    spec = project(tmp_path, CLEAN)
    spec.write_text(spec.read_text().replace("G: {domain: [a, b, c]}", "G: {domain: [a, b, c]}\n  UNUSED: {range: [0, 9]}"))
    result = cli("check", spec)
    assert result.code == 0, result
    lines = result.stdout.splitlines()
    assert lines[-2] == "not read (no table, rule or where uses them, so a run does not read them either): UNUSED"
    assert lines[-1] == "no problems: a run would accept this data (nothing was spent)"


def test_evaluate_refuses_data_that_breaks_the_rules_and_records_nothing(tmp_path, cli, isolated_ledger):
    """A child with a marital status breaks the demo's declared rule: evaluate refuses it as a run
    would (exit 2, the rule named), before recording an evaluation, instead of failing inside."""
    from tests.conftest import ROOT, shipped

    demo = shipped(tmp_path)
    rows = (ROOT / "data" / "nist_acs" / "national2019.csv").read_text().splitlines()
    header, body = rows[0], rows[1:]
    cols = header.split(",")
    child = next(i for i, r in enumerate(body) if int(r.split(",")[cols.index("AGEP")]) < 15)
    values = body[child].split(",")
    values[cols.index("MSP")] = "1"
    body[child] = ",".join(values)
    data = tmp_path / "broken.csv"
    data.write_text("\n".join([header, *body]) + "\n")
    demo.write_text(demo.read_text().replace("../data/nist_acs/national2019.csv", str(data)))
    result = cli("evaluate", demo, "--trials", "1")
    assert result.code == 2 and "msp-not-applicable-under-15" in result.stderr, result
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert untouched(isolated_ledger)  # no evaluation recorded
