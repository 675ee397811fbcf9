"""The streaming engine: counts from batches, files and Hive directories equal the whole-file
counts; memory stays at one batch; every file's columns are checked."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from dprelease.data import count_exact, encode
from dprelease.data import count as count_module
from dprelease.data import scan
from dprelease.data.check import check_data
from dprelease.data.count import count_encoded
from dprelease.data.load import read_table
from dprelease.errors import DataError
from dprelease.spec import load_spec
from tests.conftest import ROOT

NATIONAL = ROOT / "data" / "nist_acs" / "national2019.csv"

# Every kind of measurement that reads data: counts at three geographic levels (with
# invariants), a where, a binned column, a sum, a mean and a mode.
SPEC = """
release: stream-test
dataset: {{name: d, path: {path}, format: {format}, na_values: ["N"], lifetime_budget: {{epsilon: 10}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 3}}
columns:
  PUMA: {{domain_file: {domains}/puma.txt, geographic: true}}
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  AGEP: {{range: [0, 99]}}
  RAC1P: {{domain: [1, 2, 3, 4, 5, 6, 7, 8, 9]}}
  HISP: {{domain: [0, 1, 2, 3, 4]}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
geography:
  levels: [STATE, PUMA]
  STATE: {{from: PUMA, prefix: 2}}
invariants: {{totals: [STATE]}}
tables:
  - {{name: by_sex_age, group_by: [geography, SEX, AGE_GROUP], epsilon: {{root: 0.1, STATE: 0.1, PUMA: 0.3}}}}
  - {{name: adults_by_race, group_by: [STATE, RAC1P], where: {{AGEP: {{ge: 18}}}}, epsilon: 0.5}}
  - name: income
    group_by: [STATE, SEX]
    measure: {{sum: PINCP, bounds: [0, 200000], granularity: 1000, missing: zero}}
    epsilon: 0.5
  - name: mean_income
    group_by: [SEX]
    measure: {{mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip}}
    epsilon: 0.5
  - {{name: race_mode, group_by: [STATE], measure: {{mode: RAC1P}}, epsilon: 0.5}}
"""


def national_spec(tmp_path, path, fmt):
    text = SPEC.format(path=path, format=fmt, domains=ROOT / "configs" / "domains")
    (tmp_path / "spec.yaml").write_text(text)
    return load_spec(tmp_path / "spec.yaml")


def national_table() -> pa.Table:
    return pa_csv.read_csv(NATIONAL, convert_options=pa_csv.ConvertOptions(
        column_types={n: pa.string() for n in ("PUMA", "SEX", "AGEP", "RAC1P", "HISP", "PINCP")},
        null_values=["", "N"], strings_can_be_null=True, include_columns=["PUMA", "SEX", "AGEP", "RAC1P", "HISP", "PINCP"]))


def assert_same_counts(got, want):
    assert got.histograms.keys() == want.histograms.keys()
    for key in want.histograms:
        np.testing.assert_array_equal(got.histograms[key], want.histograms[key], err_msg=str(key))
    assert got.invariants.keys() == want.invariants.keys()
    for level in want.invariants:
        np.testing.assert_array_equal(got.invariants[level], want.invariants[level])
    assert (got.rows_read, got.rows_dropped) == (want.rows_read, want.rows_dropped)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The counts of the whole file read at once (the loader before streaming)."""
    spec = national_spec(tmp_path_factory.mktemp("ref"), NATIONAL, "csv")
    counts = count_encoded(spec, encode(spec))
    assert counts.rows_read == 27253 and counts.histograms[("race_mode", None)].sum() > 0
    return counts


def test_batches_of_a_csv_add_up_to_the_whole_file(tmp_path, monkeypatch, reference):
    monkeypatch.setattr(scan, "BATCH_ROWS", 997)
    seen = []
    original = count_module.count_encoded
    monkeypatch.setattr(count_module, "count_encoded", lambda spec, data: seen.append(data.rows_read)
                        or original(spec, data))
    assert_same_counts(count_exact(national_spec(tmp_path, NATIONAL, "csv")), reference)
    assert len(seen) >= 27253 // 997 and max(seen) <= 997  # really batch by batch


@pytest.mark.parametrize("layout", ["parquet file", "parquet hive", "csv directory"])
def test_files_and_hive_directories_add_up_to_the_whole_file(tmp_path, monkeypatch, reference, layout):
    monkeypatch.setattr(scan, "BATCH_ROWS", 4096)
    table = national_table()
    if layout == "parquet file":
        pq.write_table(table, tmp_path / "data.parquet", row_group_size=3000)
        path, fmt = tmp_path / "data.parquet", "parquet"
    elif layout == "parquet hive":  # SEX comes from the directory names: SEX=1/, SEX=2/
        pq.write_to_dataset(table, tmp_path / "hive", partition_cols=["SEX"])
        (tmp_path / "hive" / "_SUCCESS").write_text("")  # skipped, as are dot files
        path, fmt = tmp_path / "hive", "parquet"
    else:
        (tmp_path / "parts").mkdir()
        for i, start in enumerate(range(0, table.num_rows, 6000)):
            pa_csv.write_csv(table.slice(start, 6000), tmp_path / "parts" / f"part-{i}.csv")
        path, fmt = tmp_path / "parts", "csv"
    assert_same_counts(count_exact(national_spec(tmp_path, path, fmt)), reference)


@pytest.mark.parametrize("layout", ["csv, every field quoted", "parquet, missing values as text"])
def test_na_values_are_missing_quoted_or_not_and_in_parquet_text(tmp_path, reference, layout):
    """The spec's ``na_values`` ("N") and empty text read as missing in a quoted CSV field and
    in a Parquet text column as they do in an unquoted field (as pandas and R read na_values):
    the same counts as the file as shipped. Before, a quoted "N" or a Parquet "N" was a value,
    refused with a hint to add it to na_values, where it already was."""
    names = ["PUMA", "SEX", "AGEP", "RAC1P", "HISP", "PINCP"]
    table = pa_csv.read_csv(NATIONAL, convert_options=pa_csv.ConvertOptions(
        column_types={n: pa.string() for n in names}, strings_can_be_null=False, include_columns=names))
    pincp = table["PINCP"].to_pylist()
    assert pincp.count("N") > 1000 and table.column("PINCP").null_count == 0  # missing values, as text
    table = table.set_column(5, "PINCP", pa.array([None if i % 7 == 0 and v == "N" else ("" if i % 7 == 1 and v == "N"
                                                   else v) for i, v in enumerate(pincp)], pa.string()))
    if layout.startswith("csv"):
        path, fmt = tmp_path / "quoted.csv", "csv"
        pa_csv.write_csv(table, path, write_options=pa_csv.WriteOptions(quoting_style="all_valid"))
        text = path.read_text()
        assert ',"N"' in text and ',""' in text and '\n"' in text  # quoted "N" and "", every valid field quoted
    else:
        path, fmt = tmp_path / "text.parquet", "parquet"
        pq.write_table(table, path, row_group_size=5000)
        assert pq.read_schema(path).field("PINCP").type == pa.string()
    spec = national_spec(tmp_path, path, fmt)
    found = check_data(spec)  # the check before the reservation reads them alike
    assert found.ok, found
    assert_same_counts(count_exact(spec), reference)


@pytest.mark.parametrize("layout", ["csv, every field quoted", "parquet text", "parquet large text",
                                    "parquet hive, a key N"])
def test_na_values_are_missing_in_every_text_column_and_hive_key(tmp_path, layout):
    """The spec's ``na_values`` ("N") read as missing in a range column (POVPIP) and a categorical
    one with a missing label (NOC) whatever the layout (quoted CSV, Parquet text, large text, a
    Hive key's value), as in the shipped, unquoted CSV: the data check passes and the counts are
    the same. Before, a range column stored as Parquet text kept "N" as a value."""
    names = ["SEX", "POVPIP", "NOC", "RAC1P"]
    table = pa_csv.read_csv(NATIONAL, convert_options=pa_csv.ConvertOptions(
        column_types={n: pa.string() for n in names}, strings_can_be_null=False, include_columns=names))
    assert table["POVPIP"].to_pylist().count("N") > 1000 and table["NOC"].to_pylist().count("N") > 1000
    text = """
release: na-test
dataset: {{name: d, path: {path}, format: {format}, na_values: ["N"], lifetime_budget: {{epsilon: 10}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  SEX: {{domain: [1, 2]}}
  POVPIP: {{range: [0, 501], missing: none}}
  NOC: {{domain: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], missing: none}}
  RAC1P: {{domain: [1, 2, 3, 4, 5, 6, 7, 8, 9], missing: none}}
derived:
  POV: {{from: POVPIP, bins: [0, 100, 502], labels: [poor, not]}}
tables:
  - {{name: t, group_by: [SEX, POV, NOC, RAC1P], epsilon: 1}}
"""

    def spec_of(path, fmt):  # type: ignore[no-untyped-def]
        (tmp_path / "spec.yaml").write_text(text.format(path=path, format=fmt))
        return load_spec(tmp_path / "spec.yaml")

    want = count_exact(spec_of(NATIONAL, "csv"))
    assert want.rows_read == 27253
    if layout.startswith("csv"):
        path, fmt = tmp_path / "quoted.csv", "csv"
        pa_csv.write_csv(table, path, write_options=pa_csv.WriteOptions(quoting_style="all_valid"))
    elif layout == "parquet hive, a key N":  # RAC1P from the directory names: RAC1P=1/ ... and RAC1P=N/
        table = table.set_column(3, "RAC1P", pa.array([None if i % 50 == 0 else v for i, v in
                                                        enumerate(table["RAC1P"].to_pylist())], pa.string()))
        keys = table["RAC1P"].to_pylist()
        table = table.set_column(3, "RAC1P", pa.array(["N" if v is None else v for v in keys], pa.string()))
        pq.write_to_dataset(table, tmp_path / "hive", partition_cols=["RAC1P"])
        assert (tmp_path / "hive" / "RAC1P=N").is_dir()
        path, fmt = tmp_path / "hive", "parquet"
        want = count_exact(spec_of(_with_missing_race(tmp_path, keys), "csv"))  # the same rows, RAC1P missing
    else:
        path, fmt = tmp_path / "text.parquet", "parquet"
        pq.write_table(table if layout == "parquet text" else table.cast(
            pa.schema([pa.field(n, pa.large_string()) for n in names])), path, row_group_size=5000)
    spec = spec_of(path, fmt)
    found = check_data(spec)
    assert found.ok, found
    got = count_exact(spec)
    for key in want.histograms:
        np.testing.assert_array_equal(got.histograms[key], want.histograms[key], err_msg=str(key))
    assert got.rows_read == want.rows_read


def _with_missing_race(tmp_path, races):  # type: ignore[no-untyped-def]
    """The shipped file with RAC1P empty where ``races`` is None (a CSV of the columns read)."""
    names = ["SEX", "POVPIP", "NOC"]
    table = pa_csv.read_csv(NATIONAL, convert_options=pa_csv.ConvertOptions(
        column_types={n: pa.string() for n in names}, strings_can_be_null=False, include_columns=names))
    table = table.append_column("RAC1P", pa.array(races, pa.string()))
    path = tmp_path / "reference.csv"
    pa_csv.write_csv(table, path, write_options=pa_csv.WriteOptions(quoting_style="none"))
    return path


def test_memory_is_one_batch_whatever_the_rows(tmp_path, monkeypatch):
    """Arrow's allocations while counting stay at a batch or two, the same for 2M and 4M rows;
    reading the file whole (the negative control) holds every row at once, and this measure
    sees it. (Parquet's pre-buffering, on by default, grew with the file: this caught it.)"""
    monkeypatch.setattr(scan, "BATCH_ROWS", 1 << 16)
    peak: list[int] = []
    original = count_module.count_encoded
    monkeypatch.setattr(count_module, "count_encoded", lambda s, data: peak.append(pa.total_allocated_bytes())
                        or original(s, data))
    peaks = {}
    for rows in (2_000_000, 4_000_000):
        rng = np.random.default_rng(7)
        pq.write_table(pa.table({"A": rng.integers(0, 100, rows), "B": rng.integers(0, 50, rows),
                                 "C": rng.integers(0, 9, rows)}), tmp_path / "big.parquet", row_group_size=1 << 16)
        (tmp_path / "spec.yaml").write_text(
            "release: mem\ndataset: {name: m, path: big.parquet, lifetime_budget: {epsilon: 1}}\n"
            "privacy: {definition: pure, unit: row}\nbudget: {epsilon: 1}\n"
            "columns: {A: {range: [0, 99]}, B: {range: [0, 49]}, C: {range: [0, 8]}}\n"
            "tables:\n  - {name: ab, group_by: [A, B], epsilon: 0.5}\n  - {name: c, group_by: [C], epsilon: 0.5}\n")
        spec = load_spec(tmp_path / "spec.yaml")
        peak.clear()
        counts = count_exact(spec)
        assert counts.rows_read == rows and counts.histograms[("c", None)].sum() == rows
        peaks[rows] = max(peak)
    whole = 3 * 8 * 4_000_000
    assert peaks[4_000_000] <= 1.2 * peaks[2_000_000], peaks  # independent of the number of rows
    assert peaks[4_000_000] < whole / 20, (peaks, whole)  # a 64k-row batch is 1/60 of the rows
    table = read_table(spec)  # the negative control: the whole-file loader holds every row at once
    assert pa.total_allocated_bytes() >= whole / 3, (pa.total_allocated_bytes(), whole)
    del table


def test_a_file_without_a_needed_column_is_an_error_naming_it(tmp_path):
    table = national_table()
    (tmp_path / "parts").mkdir()
    pq.write_table(table.slice(0, 1000), tmp_path / "parts" / "a.parquet")
    pq.write_table(table.slice(1000, 1000).drop_columns(["RAC1P"]), tmp_path / "parts" / "b.parquet")
    with pytest.raises(DataError, match=r"b\.parquet: no column 'RAC1P'"):
        count_exact(national_spec(tmp_path, tmp_path / "parts", "parquet"))


def test_an_empty_directory_is_an_error(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / ".hidden.csv").write_text("PUMA\n")
    with pytest.raises(DataError, match="holds no data file"):
        count_exact(national_spec(tmp_path, tmp_path / "parts", "csv"))


def national_with(tmp_path, row: int, column: str, value: str):  # type: ignore[no-untyped-def]
    """The national file with one value replaced (data row ``row``), as tmp_path/data.csv."""
    lines = NATIONAL.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[row].split(",")
    cells[header.index(column)] = value
    lines[row] = ",".join(cells)
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "data.csv"


def test_a_bad_value_deep_in_the_stream_names_its_file_row(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "BATCH_ROWS", 1000)
    national_with(tmp_path, 20_001, "SEX", "3")
    with pytest.raises(DataError, match=r"data\.csv: column SEX: 1 value\(s\) outside the declared domain, "
                                        r"e\.g\. '3' at data row 20001"):
        count_exact(national_spec(tmp_path, tmp_path / "data.csv", "csv"))


@pytest.mark.parametrize("engine, field, words", [
    ('engine: {kind: local, address: "tcp://h:8786"}', "engine.address", "an address is for kind: dask"),
    ("engine: {kind: spark}", "engine.kind", "spark"),
    ('engine: {kind: dask, address: "h:8786"}', "engine.address", "h:8786"),
    ("engine: {address: \"tcp://h:8786\"}", "engine", "kind"),
], ids=["local-with-address", "unknown-kind", "address-without-scheme", "no-kind"])
def test_a_bad_engine_block_is_refused_with_its_field(cli, tmp_path, engine, field, words):
    spec = national_spec(tmp_path, NATIONAL, "csv").source
    spec.write_text(spec.read_text() + engine + "\n")
    result = cli("validate", spec)
    assert result.code == 2 and field in result.stderr and words in result.stderr, result.stderr


def test_the_engine_is_not_part_of_the_plan(tmp_path):
    """Where the data is counted changes nothing that is published or spent: the canonical
    spec (published as spec.json) and the plan's fingerprint (what an approval covers) stay."""
    from dprelease.spec import canonical, fingerprint

    local = national_spec(tmp_path, NATIONAL, "csv")
    spec = local.source
    spec.write_text(spec.read_text() + 'engine: {kind: dask, address: "tcp://scheduler:8786"}\n')
    dask = load_spec(spec)
    assert dask.engine.kind == "dask" and local.engine.kind == "local"
    assert canonical(dask) == canonical(local) and fingerprint(dask) == fingerprint(local)
    assert "scheduler" not in json.dumps(canonical(dask))


def test_hive_values_are_unescaped_and_the_default_partition_is_a_null(tmp_path):
    """pyarrow (like Spark) writes G=a%20b, G=c%2Fd and G=__HIVE_DEFAULT_PARTITION__ for a
    null: read back, the counts are those of the same rows in one flat file."""
    values = ["a b", "c/d", None, "e", "a b", None, "c/d", "a b"]
    table = pa.table({"G": pa.array(values, pa.string()), "AGE": pa.array([1, 2, 3, 4, 5, 6, 7, 8], pa.int64())})
    pq.write_to_dataset(table, tmp_path / "hive", partition_cols=["G"])
    assert any("%20" in p.name for p in (tmp_path / "hive").iterdir())  # really escaped on disk
    pq.write_table(table, tmp_path / "flat.parquet")
    counts = {}
    for path in ("hive", "flat.parquet"):
        (tmp_path / "spec.yaml").write_text(
            f"release: hive\ndataset: {{name: h, path: {path}, format: parquet, lifetime_budget: {{epsilon: 1}}}}\n"
            "privacy: {definition: pure, unit: row}\nbudget: {epsilon: 1}\n"
            "columns: {G: {domain: ['a b', 'c/d', e], missing: unknown}, AGE: {range: [0, 9]}}\n"
            "tables:\n  - {name: g, group_by: [G], epsilon: 0.5}\n  - {name: ga, group_by: [G, AGE], epsilon: 0.5}\n")
        counts[path] = count_exact(load_spec(tmp_path / "spec.yaml"))
    assert counts["hive"].histograms[("g", None)].tolist() == [3, 2, 1, 2]  # a b, c/d, e, missing
    assert_same_counts(counts["hive"], counts["flat.parquet"])
