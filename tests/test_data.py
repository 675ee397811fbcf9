"""Loading and encoding confidential data against declared domains; histograms."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dprelease.data import encode, histogram
from dprelease.errors import DataError
from dprelease.spec import load_spec
from tests.conftest import ROOT, write_spec

SPEC = """
release: t
dataset: {{name: d, path: {path}, na_values: ["N"], lifetime_budget: {{epsilon: 1}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  G: {{domain: ["01", "1", "NO"]{g_extra}}}
  AGE: {{range: [0, 9]{age_extra}}}
  M: {{domain: [a, b], missing: "n/a"}}
derived:
  BAND: {{from: AGE, bins: [0, 5, 10], labels: [young, old]}}
tables:
  - {{name: by_g, group_by: [G], epsilon: 0.1}}
  - {{name: by_g_band, group_by: [G, BAND], epsilon: 0.1}}
  - {{name: by_m, group_by: [M], epsilon: 0.1}}
  - {{name: m_not_a, group_by: [G], where: {{M: {{ne: a}}}}, epsilon: 0.1}}
  - {{name: age_ge_5, group_by: [AGE], where: {{AGE: {{ge: 5}}, G: {{in: ["01", "NO"]}}}}, epsilon: 0.1}}
"""

ROWS = "G,AGE,M,IGNORED\n01,3,a,x\n1,7,b,y\nNO,5,N,zzz\n01,9.0,,\n01,0,b,1.5\n"


def make(tmp_path, rows=ROWS, g_extra="", age_extra="", name="data.csv"):
    (tmp_path / name).write_bytes(rows.encode() if isinstance(rows, str) else rows)
    return load_spec(write_spec(tmp_path, SPEC.format(path=name, g_extra=g_extra, age_extra=age_extra)))


def counts(spec, data, name):
    return histogram(spec, next(t for t in spec.tables if t.name == name), data).tolist()


def test_values_are_matched_as_written_and_histograms_cover_the_domain(tmp_path):
    spec = make(tmp_path)
    data = encode(spec)
    assert data.rows == 5
    assert counts(spec, data, "by_g") == [3, 1, 1]  # "01" and "1" are different values
    assert counts(spec, data, "by_g_band") == [2, 1, 0, 1, 0, 1]  # 9.0 is the integer 9
    assert counts(spec, data, "by_m") == [1, 2, 2]  # "N" and "" are missing
    # a missing value never satisfies a condition, not even "ne"
    assert counts(spec, data, "m_not_a") == [1, 1, 0]
    assert counts(spec, data, "age_ge_5") == [0] * 5 + [1, 0, 0, 0, 1]


def test_only_the_needed_columns_are_read(tmp_path):
    """IGNORED is declared but used by no table: its invalid values are never read."""
    (tmp_path / "data.csv").write_text(ROWS)
    body = SPEC.format(path="data.csv", g_extra="", age_extra="").replace(
        "  M: {domain:", "  IGNORED: {range: [0, 1]}\n  M: {domain:")
    spec = load_spec(write_spec(tmp_path, body))
    assert encode(spec).rows == 5


def test_ragged_rows_are_a_clear_data_error(tmp_path):
    with pytest.raises(DataError, match="cannot read as csv: CSV parse error"):
        encode(make(tmp_path, rows=ROWS + "01,3\n"))


@pytest.mark.parametrize("bad, column, text", [
    ("02,3,a,x\n", "G", "'02'"),
    ("01,10,a,x\n", "AGE", "'10'"),
    ("01,3.5,a,x\n", "AGE", "'3.5'"),
    ("01,three,a,x\n", "AGE", "'three'"),
    ("01,,a,x\n", "AGE", "missing value"),
    ("01,3,c,x\n", "M", "'c'"),
])
def test_out_of_domain_values_name_the_column(tmp_path, bad, column, text):
    spec = make(tmp_path, rows=ROWS + bad)
    with pytest.raises(DataError) as info:
        encode(spec)
    assert f"column {column}" in str(info.value) and text in str(info.value)
    assert "row 6" in str(info.value)


def test_drop_is_an_explicit_opt_in(tmp_path):
    spec = make(tmp_path, rows=ROWS + "02,3,a,x\n01,42,a,x\n", g_extra=", on_out_of_domain: drop",
                age_extra=", on_out_of_domain: drop")
    data = encode(spec)
    assert (data.rows_read, data.rows_dropped, data.rows) == (7, 2, 5)
    assert counts(spec, data, "by_g") == [3, 1, 1]


def test_missing_values_get_their_own_category_when_declared(tmp_path):
    spec = make(tmp_path, rows=ROWS + "01,,a,x\n", age_extra=', missing: "unknown"')
    data = encode(spec)
    assert counts(spec, data, "by_g_band") == [2, 1, 1, 0, 1, 0, 0, 1, 0]  # BAND inherits the missing category
    assert spec.column("BAND").categories == ("young", "old", "unknown")


def test_a_header_only_file_is_a_dataset_of_zero_rows(tmp_path):
    spec = make(tmp_path, rows="G,AGE,M\n")
    data = encode(spec)
    assert data.rows == 0 and counts(spec, data, "by_g_band") == [0] * 6


def test_missing_columns_and_unreadable_files_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="no column 'M'"):
        encode(make(tmp_path, rows="G,AGE\n01,3\n"))
    with pytest.raises(DataError, match="does not exist"):
        encode(load_spec(write_spec(tmp_path, SPEC.format(path="nope.csv", g_extra="", age_extra=""))))


def test_parquet_with_typed_columns(tmp_path):
    table = pa.table({"G": ["01", "1", "NO", "01", "01"], "AGE": pa.array([3, 7, 5, 9, 0], pa.int16()),
                      "M": ["a", "b", None, None, "b"]})
    pq.write_table(table, tmp_path / "data.parquet")
    spec = load_spec(write_spec(tmp_path, SPEC.format(path="data.parquet", g_extra="", age_extra="")))
    assert spec.dataset.format == "parquet"
    data = encode(spec)
    assert counts(spec, data, "by_g_band") == [2, 1, 0, 1, 0, 1]
    assert counts(spec, data, "by_m") == [1, 2, 2]


def test_histograms_equal_pandas_on_the_nist_data():
    """An independent computation (pandas groupby) agrees with the one-pass bincount."""
    spec = load_spec(ROOT / "configs" / "acs_demo.yaml")
    data = encode(spec)
    df = pd.read_csv(spec.dataset.resolved_path, dtype=str, keep_default_na=False)
    age = df["AGEP"].astype(float).astype(int)
    checks = {
        "puma_by_sex": df.groupby(["PUMA", "SEX"]).size(),
        "adults_by_puma_age_group": df[age >= 18].assign(AG=pd.cut(age[age >= 18], [0, 18, 65, 100], right=False,
                                                                   labels=["0-17", "18-64", "65+"]))
                                    .groupby(["PUMA", "AG"], observed=False).size(),
        "race_by_hispanic_origin": df.groupby(["RAC1P", "HISP"]).size(),
    }
    for name, expected in checks.items():
        table = next(t for t in spec.tables if t.name == name)
        got = histogram(spec, table, data)
        cols = [spec.column(c) for c in table.group_by]
        keys = [(a, b) for a in cols[0].values for b in (getattr(cols[1], "values", None) or cols[1].labels)]
        assert got.tolist() == [int(expected.get(k, 0)) for k in keys], name
    assert histogram(spec, spec.tables[0], data).sum() == len(df) == 27253


@pytest.mark.parametrize("age_type", [pa.int8(), pa.int16(), pa.int64(), pa.float64(), pa.string()])
def test_parquet_range_columns_of_any_type_with_bad_values_and_nulls(tmp_path, age_type):
    ages = pa.array([3, None, 12, 7, 5], pa.int64()).cast(age_type)
    table = pa.table({"G": ["01", "1", "NO", "01", "01"], "AGE": ages, "M": ["a", "b", None, None, "b"]})
    pq.write_table(table, tmp_path / "data.parquet")
    body = SPEC.format(path="data.parquet", g_extra="", age_extra=', missing: "?", on_out_of_domain: drop')
    spec = load_spec(write_spec(tmp_path, body))
    data = encode(spec)
    assert (data.rows_read, data.rows_dropped) == (5, 1)  # 12 is outside [0, 9]
    assert counts(spec, data, "by_g_band") == [1, 2, 0, 0, 0, 1, 0, 0, 0]
    with pytest.raises(DataError, match="'12'|12"):
        encode(load_spec(write_spec(tmp_path, SPEC.format(path="data.parquet", g_extra="", age_extra=', missing: "?"'))))


@pytest.mark.parametrize("text", ["1e1", "5_0", " 7", "7 ", "+-3", "0x1", "3.5", "١"])
def test_range_values_must_be_plain_whole_numbers(tmp_path, text):
    with pytest.raises(DataError, match="column AGE"):
        encode(make(tmp_path, rows=ROWS + f"01,{text},a,x\n"))


def test_an_integral_decimal_is_a_whole_number(tmp_path):
    spec = make(tmp_path, rows=ROWS + "01,4.00,a,x\n01,-0,a,x\n")
    assert counts(spec, encode(spec), "by_g_band") == [4, 1, 0, 1, 0, 1]


def test_unsupported_parquet_types_are_data_errors(tmp_path):
    import datetime

    table = pa.table({"G": ["01"], "AGE": pa.array([datetime.date(2020, 1, 1)]), "M": ["a"]})
    pq.write_table(table, tmp_path / "data.parquet")
    spec = load_spec(write_spec(tmp_path, SPEC.format(path="data.parquet", g_extra="", age_extra="")))
    with pytest.raises(DataError, match="column AGE .*cannot be read as whole numbers"):
        encode(spec)
