"""Hostile input: invalid specs and bad data files are refused with a clear message and exit 2;
nothing is written and nothing is spent. What is legitimate stays legitimate (a header-only
file is a dataset of zero rows; a UTF-8 byte-order mark is read transparently). The spec
loader is fuzzed with Hypothesis.

The counts of cases here are the figures of docs/reliability.md.
"""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dprelease.accounting import PureDP
from dprelease.data import count_exact
from dprelease.spec import load_spec
from dprelease.errors import DataError, SpecError
from dprelease.ledger import Ledger, resolve_location
from tests.ledgers import untouched
from tests.test_run import ledger_state

BASE = """\
release: hostile
dataset: {name: d, path: data.csv, na_values: ["N"], lifetime_budget: {epsilon: 4}}
privacy: {definition: pure, unit: row}
budget: {epsilon: 1}
columns:
  G: {domain: [a, b, c]}
  AGE: {range: [0, 99]}
  M: {domain: [x, y], missing: unknown}
derived:
  BAND: {from: AGE, bins: [0, 18, 100]}
tables:
  - {name: by_g, group_by: [G], epsilon: 0.25}
  - {name: by_band, group_by: [G, BAND], epsilon: 0.25}
  - {name: by_m, group_by: [M], where: {AGE: {ge: 18}}, epsilon: 0.5}
"""
DATA = "G,AGE,M\na,3,x\nb,40,\nc,77,y\na,18,N\n"


def edit(old: str, new: str):  # type: ignore[no-untyped-def]
    def apply(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)
    return apply


def whole(text: str | bytes):  # type: ignore[no-untyped-def]
    return lambda _: text


def nested(depth: int) -> str:
    return "release: x\ndataset: " + "[" * depth + "]" * depth + "\n"


BOMB = "".join(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}" if i else '"x"'] * 9) + "]\n"
               for i in range(9))

SPECS = {
    # not a spec at all
    "empty-file": whole(""),
    "only-a-comment": whole("# nothing here\n"),
    "a-list": whole("- release: x\n"),
    "a-scalar": whole("hello\n"),
    "invalid-yaml": whole("release: [unclosed\n"),
    "tab-indentation": whole("release: x\n\tdataset: y\n"),
    "non-utf8-bytes": whole(BASE.encode().replace(b"hostile", b"host\xffile")),
    "nul-byte-in-text": whole(BASE.replace("release: hostile", "release: host\0ile")),
    # YAML's sharp edges
    "python-object-tag": edit("release: hostile", "release: !!python/object/apply:os.system [echo pwned]"),
    "python-name-tag": edit("budget: {epsilon: 1}", "budget: !!python/name:os.system"),
    "binary-tag": edit("release: hostile", "release: !!binary aG9zdGlsZQ=="),
    "release-mapping": edit("release: hostile", "release: {name: hostile}"),
    # declared rules (structural zeros)
    "rule-unknown-column": edit("tables:", "rules:\n  - {name: r, if: {AGE: {lt: 15}}, then: {MS: {missing: true}}}\ntables:"),
    "rule-missing-on-column-without": edit("tables:", "rules:\n  - {name: r, if: {AGE: {lt: 15}}, then: {G: {missing: true}}}\ntables:"),
    "rule-missing-not-boolean": edit("tables:", "rules:\n  - {name: r, if: {AGE: {lt: 15}}, then: {M: {missing: yes please}}}\ntables:"),
    "rule-duplicate-name": edit("tables:", "rules:\n  - {name: r, if: {AGE: {lt: 15}}, then: {M: {missing: true}}}\n"
                                "  - {name: r, if: {AGE: {ge: 15}}, then: {M: {missing: false}}}\ntables:"),
    "rule-order-on-categorical": edit("tables:", "rules:\n  - {name: r, if: {G: {lt: b}}, then: {M: {missing: true}}}\ntables:"),
    "rule-undeclared-value": edit("tables:", "rules:\n  - {name: r, if: {G: {eq: z}}, then: {M: {eq: x}}}\ntables:"),
    "rule-without-then": edit("tables:", "rules:\n  - {name: r, if: {AGE: {lt: 15}}}\ntables:"),
    "rule-empty-if": edit("tables:", "rules:\n  - {name: r, if: {}, then: {M: {eq: x}}}\ntables:"),
    "rule-then-repeats-if": edit("tables:", "rules:\n  - {name: r, if: {AGE: {lt: 15}}, then: {AGE: {lt: 15}}}\ntables:"),
    "rule-unsafe-name": edit("tables:", "rules:\n  - {name: ../r, if: {AGE: {lt: 15}}, then: {M: {missing: true}}}\ntables:"),
    "structural-zeros-unknown-option": edit("epsilon: 0.5}", "epsilon: 0.5, structural_zeros: hide}"),
    "alias-bomb": whole(BOMB),
    "duplicate-key-top": edit("budget: {epsilon: 1}", "budget: {epsilon: 1}\nbudget: {epsilon: 2}"),
    "duplicate-key-inline": edit("budget: {epsilon: 1}", "budget: {epsilon: 1, epsilon: 0.5}"),
    "deeply-nested": whole(nested(5000)),
    "merge-key": edit("privacy: {definition: pure, unit: row}", "privacy: {<<: {definition: pure}, unit: row}"),
    # top level
    "unknown-top-key": edit("budget:", "budgett: {epsilon: 1}\nbudget:"),
    "no-release": edit("release: hostile\n", ""),
    "no-dataset": edit("dataset: {name: d, path: data.csv, na_values: [\"N\"], lifetime_budget: {epsilon: 4}}\n", ""),
    "no-tables": edit("tables:", "tablez:"),
    # names that would escape the output directory
    "release-dotdot": edit("release: hostile", "release: ../../etc"),
    "release-absolute": edit("release: hostile", "release: /etc/passwd"),
    "release-slash": edit("release: hostile", "release: a/b"),
    "release-upper": edit("release: hostile", "release: Hostile"),
    "release-number": edit("release: hostile", "release: 5"),
    "release-too-long": edit("release: hostile", "release: " + "a" * 200),
    "release-empty": edit("release: hostile", 'release: ""'),
    "table-name-dotdot": edit("name: by_g,", "name: ../by_g,"),
    "table-name-absolute": edit("name: by_g,", "name: /tmp/by_g,"),
    "table-name-nul": edit("name: by_g,", 'name: "by\\0g",'),
    "table-name-duplicate": edit("name: by_band,", "name: by_g,"),
    "dataset-name-dotdot": edit("name: d,", "name: ../d,"),
    "dataset-name-slash": edit("name: d,", "name: d/e,"),
    "dataset-path-nul": edit("path: data.csv", 'path: "data\\0.csv"'),
    "dataset-path-missing": edit("path: data.csv", "path: nowhere.csv"),
    "dataset-format-unknown": edit("path: data.csv", "path: data.csv, format: xlsx"),
    "dataset-extension-unknown": edit("path: data.csv", "path: data.xlsx"),
    "delimiter-two-chars": edit("path: data.csv", 'path: data.csv, delimiter: ";;"'),
    "delimiter-nul": edit("path: data.csv", 'path: data.csv, delimiter: "\\0"'),
    "delimiter-non-ascii": edit("path: data.csv", 'path: data.csv, delimiter: "é"'),
    "delimiter-quote": edit("path: data.csv", "path: data.csv, delimiter: '\"'"),
    "bins-empty": edit("bins: [0, 18, 100]", "bins: []"),
    "bins-one-edge": edit("bins: [0, 18, 100]", "bins: [0]"),
    "domain-file-device": edit("G: {domain: [a, b, c]}", "G: {domain_file: /dev/zero}"),
    "na-values-mapping": edit('na_values: ["N"]', "na_values: {N: 1}"),
    "ledger-nul": edit("budget:", 'ledger: "l\\0.db"\nbudget:'),
    # budgets
    "budget-negative": edit("budget: {epsilon: 1}", "budget: {epsilon: -1}"),
    "budget-zero": edit("budget: {epsilon: 1}", "budget: {epsilon: 0}"),
    "budget-text": edit("budget: {epsilon: 1}", "budget: {epsilon: abc}"),
    "budget-nan": edit("budget: {epsilon: 1}", "budget: {epsilon: .nan}"),
    "budget-inf": edit("budget: {epsilon: 1}", "budget: {epsilon: .inf}"),
    "budget-bad-exponent": edit("budget: {epsilon: 1}", 'budget: {epsilon: "1e"}'),
    "budget-list": edit("budget: {epsilon: 1}", "budget: {epsilon: [1]}"),
    "budget-rho-in-pure": edit("budget: {epsilon: 1}", "budget: {rho: 1}"),
    "lifetime-negative": edit("lifetime_budget: {epsilon: 4}", "lifetime_budget: {epsilon: -4}"),
    "table-epsilon-negative": edit("epsilon: 0.25}\n  - {name: by_band", "epsilon: -0.25}\n  - {name: by_band"),
    "table-epsilon-divide-by-zero": edit("epsilon: 0.25}\n  - {name: by_band", 'epsilon: "1/0"}\n  - {name: by_band'),
    "table-epsilon-two-dots": edit("epsilon: 0.25}\n  - {name: by_band", 'epsilon: "0.1.5"}\n  - {name: by_band'),
    "table-epsilon-bool": edit("epsilon: 0.25}\n  - {name: by_band", "epsilon: true}\n  - {name: by_band"),
    "privacy-definition-unknown": edit("definition: pure", "definition: renyi"),
    "privacy-unit-unknown": edit("unit: row", "unit: household"),
    "unit-id-is-a-column": edit("unit: row", "unit: {id: G, max_rows: 1}"),
    "max-rows-zero": edit("unit: row", "unit: {id: PID, max_rows: 0}"),
    "confidence-above-one": edit("budget: {epsilon: 1}", "budget: {epsilon: 1}\naccuracy: {confidence: 1.5}"),
    "max-cells-negative": edit("budget: {epsilon: 1}", "budget: {epsilon: 1}\nlimits: {max_cells: -1}"),
    # columns and domains
    "domain-empty": edit("G: {domain: [a, b, c]}", "G: {domain: []}"),
    "domain-duplicates": edit("G: {domain: [a, b, c]}", "G: {domain: [a, b, a]}"),
    "domain-of-mappings": edit("G: {domain: [a, b, c]}", "G: {domain: [{a: 1}]}"),
    "domain-file-missing": edit("G: {domain: [a, b, c]}", "G: {domain_file: nowhere.txt}"),
    "domain-file-duplicates": edit("G: {domain: [a, b, c]}", "G: {domain_file: dupes.txt}"),
    "domain-file-is-a-directory": edit("G: {domain: [a, b, c]}", "G: {domain_file: subdir}"),
    "range-reversed": edit("AGE: {range: [0, 99]}", "AGE: {range: [99, 0]}"),
    "range-fraction": edit("AGE: {range: [0, 99]}", "AGE: {range: [0, 9.5]}"),
    "range-huge": edit("AGE: {range: [0, 99]}", "AGE: {range: [0, 1000000000000]}"),
    "huge-domain-table": edit("G: {domain: [a, b, c]}", "G: {range: [0, 200000000]}"),
    "missing-label-clashes": edit("missing: unknown", "missing: x"),
    "column-name-dotdot": edit("AGE: {range: [0, 99]}", "AGE: {range: [0, 99]}\n  ../X: {domain: [a]}"),
    "bins-not-increasing": edit("bins: [0, 18, 100]", "bins: [0, 18, 10]"),
    "bins-from-unknown": edit("from: AGE", "from: NOPE"),
    "bins-from-categorical": edit("from: AGE", "from: G"),
    # tables
    "group-by-unknown": edit("group_by: [G]", "group_by: [NOPE]"),
    "group-by-not-a-list": edit("group_by: [G]", "group_by: G"),
    "group-by-duplicate": edit("group_by: [G]", "group_by: [G, G]"),
    "where-unknown-column": edit("where: {AGE: {ge: 18}}", "where: {NOPE: {ge: 18}}"),
    "where-operand-undeclared": edit("where: {AGE: {ge: 18}}", "where: {M: {eq: z}}"),
    "where-ge-on-categorical": edit("where: {AGE: {ge: 18}}", "where: {G: {ge: a}}"),
    "where-unknown-operator": edit("where: {AGE: {ge: 18}}", "where: {AGE: {between: [1, 2]}}"),
    "unknown-table-key": edit("group_by: [G], epsilon: 0.25}", "group_by: [G], epsilon: 0.25, colour: red}"),
    "sum-without-bounds": edit("group_by: [G], epsilon: 0.25}", "group_by: [G], epsilon: 0.25, measure: {sum: INCOME}}"),
    "sum-bounds-outside-the-range": edit("group_by: [G], epsilon: 0.25}",
                                         "group_by: [G], epsilon: 0.25, measure: {sum: AGE, bounds: [100, 200]}}"),
    "sum-of-a-derived-column": edit("group_by: [G], epsilon: 0.25}",
                                    "group_by: [G], epsilon: 0.25, measure: {sum: BAND, bounds: [0, 1]}}"),
    "mean-bounds-reversed": edit("group_by: [G], epsilon: 0.25}",
                                 "group_by: [G], epsilon: 0.25, measure: {mean: AGE, bounds: [10, 0]}}"),
    "mode-of-unknown": edit("group_by: [G], epsilon: 0.25}", "group_by: [G], epsilon: 0.25, measure: {mode: NOPE}}"),
    "geography-epsilon-without-geography": edit("group_by: [G], epsilon: 0.25}",
                                                "group_by: [G], epsilon: {root: 0.25}}"),
    "invariants-unknown-level": edit("tables:", "invariants: {totals: [NOPE]}\ntables:"),
    "engine-unknown": edit("tables:", "engine: {kind: spark}\ntables:"),
}


# problems of the file as a whole ("(document)"), and a path checked when the run starts (named by its field)
WHOLE_FILE = {"empty-file", "only-a-comment", "non-utf8-bytes", "deeply-nested", "nul-byte-in-text"}


def test_a_spec_that_is_not_a_regular_file_is_refused(cli, tmp_path):
    for path in ("/dev/zero", str(tmp_path)):
        result = cli("validate", path)
        assert result.code == 2 and "not a regular file" in result.stderr, result


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "data.csv").write_text(DATA)
    (tmp_path / "dupes.txt").write_text("a\nb\na\n")
    (tmp_path / "subdir").mkdir()
    return tmp_path


def test_the_base_spec_is_valid(cli, workdir):
    (workdir / "spec.yaml").write_text(BASE)
    assert cli("validate", workdir / "spec.yaml").code == 0


@pytest.mark.parametrize("case", sorted(SPECS))
def test_a_hostile_spec_is_refused_before_anything_is_written(cli, workdir, isolated_ledger, case):
    text = SPECS[case](BASE)
    path = workdir / "spec.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    out = workdir / "out"
    result = cli("run", path, "--output-dir", out)
    assert result.code == 2, (case, result)
    assert "spec.yaml" in result.stderr and "Traceback" not in result.output, (case, result.stderr)
    if case == "dataset-path-missing":
        assert "spec.yaml: dataset.path 'nowhere.csv' does not exist" in result.stderr
    elif case not in WHOLE_FILE:  # a problem at a place in the spec: file:line:column: field: message
        assert re.search(r"spec\.yaml:\d+:\d+: \S", result.stderr), (case, result.stderr)
    assert not out.exists() and untouched(isolated_ledger)  # nothing written, nothing spent
    assert not any(p.name in ("etc", "passwd", "by_g") for p in workdir.parent.iterdir())


def test_the_corpus_is_large_enough():
    assert len(SPECS) >= 60


# ---------------------------------------------------------------- data files

def parquet(columns: dict) -> bytes:  # type: ignore[type-arg]
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue().to_pybytes()


def csv_gz(text: str) -> bytes:
    return gzip.compress(text.encode())


BAD_DATA = {
    "empty-file": ("data.csv", b""),
    "wrong-delimiter": ("data.csv", DATA.replace(",", ";").encode()),
    "ragged-rows": ("data.csv", (DATA + "a,5\n").encode()),
    "duplicate-columns": ("data.csv", "G,AGE,M,G\na,3,x,b\n".encode()),
    "non-utf8-value": ("data.csv", DATA.encode().replace(b"a,3", b"\xff\xfe,3")),
    "out-of-domain": ("data.csv", (DATA + "d,5,x\n").encode()),
    "missing-without-category": ("data.csv", (DATA + ",5,x\n").encode()),
    "age-nan": ("data.csv", (DATA + "a,nan,x\n").encode()),
    "age-inf": ("data.csv", (DATA + "a,inf,x\n").encode()),
    "age-fraction": ("data.csv", (DATA + "a,3.5,x\n").encode()),
    "age-negative": ("data.csv", (DATA + "a,-1,x\n").encode()),
    "age-overflow": ("data.csv", (DATA + "a,99999999999999999999999,x\n").encode()),
    "age-exponent": ("data.csv", (DATA + "a,1e1,x\n").encode()),
    "age-hexadecimal": ("data.csv", (DATA + "a,0x10,x\n").encode()),
    "nul-in-value": ("data.csv", DATA.encode().replace(b"a,3", b"a\0,3")),
    "corrupt-gzip": ("data.csv.gz", csv_gz(DATA)[:20]),
    "parquet-garbage": ("data.parquet", b"PAR1 this is not a parquet file PAR1"),
    "parquet-missing-column": ("data.parquet", parquet({"G": ["a"], "AGE": [3]})),
    "parquet-age-as-text": ("data.parquet", parquet({"G": ["a"], "AGE": ["three"], "M": ["x"]})),
    "parquet-age-float-fraction": ("data.parquet", parquet({"G": ["a"], "AGE": [3.5], "M": ["x"]})),
    "parquet-age-nan": ("data.parquet", parquet({"G": ["a"], "AGE": [float("nan")], "M": ["x"]})),
    "parquet-nested-column": ("data.parquet", parquet({"G": [["a"]], "AGE": [3], "M": ["x"]})),
}


def spec_for(workdir, name: str):  # type: ignore[no-untyped-def]
    text = BASE.replace("path: data.csv", f"path: {name}")
    (workdir / "spec.yaml").write_text(text)
    return workdir / "spec.yaml"


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_a_bad_data_file_is_a_clear_error_and_nothing_is_spent(workdir, monkeypatch, run_env, cli, case):
    """The error names the file (its full path), and through `dprelease run` it exits 2 with
    no traceback, nothing published and nothing spent (the reservation is voided)."""
    name, content = BAD_DATA[case]
    (workdir / "data.csv").unlink()
    (workdir / name).write_bytes(content)
    spec = spec_for(workdir, name)
    with pytest.raises(DataError) as raised:
        count_exact(load_spec(spec))
    assert str(workdir / name) in str(raised.value), (case, raised.value)
    for key, value in run_env.items():
        monkeypatch.setenv(key, value) if value is not None else monkeypatch.delenv(key, raising=False)
    result = cli("run", spec, "--output-dir", workdir / "out")
    assert result.code == 2, (case, result)
    assert "Traceback" not in result.output and str(workdir / name) in result.stderr, result.stderr
    state = ledger_state("d")
    assert state is None or state.spent == PureDP(0), state
    assert not (workdir / "out" / "hostile").exists()


def test_the_bad_data_corpus_is_large_enough():
    assert len(BAD_DATA) >= 15


def test_a_header_only_file_is_a_dataset_of_zero_rows(workdir):
    (workdir / "data.csv").write_text("G,AGE,M\n")
    counts = count_exact(load_spec(spec_for(workdir, "data.csv")))
    assert counts.rows_read == 0 and all(not h.any() for h in counts.histograms.values())
    assert counts.histograms[("by_band", None)].shape == (6,)  # the declared shape, all zero


def test_a_utf8_byte_order_mark_is_read_transparently(workdir):
    plain = count_exact(load_spec(spec_for(workdir, "data.csv")))
    (workdir / "data.csv").write_bytes(b"\xef\xbb\xbf" + DATA.encode())
    marked = count_exact(load_spec(spec_for(workdir, "data.csv")))
    for key in plain.histograms:
        np.testing.assert_array_equal(plain.histograms[key], marked.histograms[key])
    assert plain.rows_read == marked.rows_read == 4


# ---------------------------------------------------------------- fuzzing the spec loader

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["a", "G", "AGE", "0.5", "1/2", "../x", "epsilon"]))
KEYS = st.sampled_from(["release", "dataset", "privacy", "budget", "columns", "derived", "tables", "name", "path",
                        "epsilon", "rho", "delta", "group_by", "where", "domain", "range", "bins", "from",
                        "measure", "definition", "unit", "lifetime_budget", "geography", "invariants", "engine"])
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(KEYS, inner, max_size=5)), max_leaves=25)


def _mutations(draw_doc: dict) -> str:  # type: ignore[type-arg]
    return json.dumps(draw_doc, default=str)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(doc=st.dictionaries(KEYS, VALUES, max_size=8), base_edit=st.sampled_from(sorted(SPECS)))
def test_fuzzed_specs_never_raise_anything_but_a_spec_error(workdir, doc, base_edit):
    """Random documents (JSON is YAML), and the corpus's edits of the base spec with a random
    top-level key added: the loader returns a spec or raises its own error, nothing else."""
    path = workdir / "fuzz.yaml"
    for text in (_mutations(doc), _with_key(SPECS[base_edit](BASE), doc)):
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        try:
            load_spec(path)
        except SpecError:
            pass


def _with_key(text: str | bytes, doc: dict) -> str | bytes:  # type: ignore[type-arg]
    if isinstance(text, bytes) or not doc:
        return text
    key, value = next(iter(doc.items()))
    return text + f"\n{key}: {json.dumps(value, default=str)}\n"


def _leaves(node, path=()):  # type: ignore[no-untyped-def]
    """Every path to a value of a parsed spec (mappings and lists)."""
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, path + (i,))


def _replaced(node, path, value):  # type: ignore[no-untyped-def]
    if not path:
        return value
    copy = dict(node) if isinstance(node, dict) else list(node)
    copy[path[0]] = _replaced(node[path[0]], path[1:], value)
    return copy


BASE_TREE = __import__("yaml").safe_load(BASE)
BASE_PATHS = list(_leaves(BASE_TREE))


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(where=st.sampled_from(BASE_PATHS), value=VALUES)
def test_one_value_of_a_valid_spec_replaced_never_raises_anything_but_a_spec_error(workdir, where, value):
    """Mutations that get past the schema into the semantic checks: one value anywhere in the
    valid base spec replaced by a random one (the way `bins: []` was found)."""
    path = workdir / "mutant.yaml"
    path.write_text(json.dumps(_replaced(BASE_TREE, where, value), default=str))
    try:
        load_spec(path)
    except SpecError:
        pass


def test_tables_too_large_for_memory_are_refused_before_anything_is_spent(cli, workdir, isolated_ledger):
    """limits.max_cells raised past what the machine holds: refused (exit 2), not a MemoryError."""
    text = BASE.replace("AGE: {range: [0, 99]}", "AGE: {range: [0, 99]}\n  BIG: {range: [0, 99999999999999]}")
    text = text.replace("budget: {epsilon: 1}", "budget: {epsilon: 1}\nlimits: {max_cells: 1000000000000000}")
    text = text.replace("group_by: [G], epsilon: 0.25}", "group_by: [BIG], epsilon: 0.25}")
    (workdir / "spec.yaml").write_text(text)
    result = cli("run", workdir / "spec.yaml", "--output-dir", workdir / "out")
    assert result.code == 2 and "do not fit in this machine's memory" in result.stderr, result
    state = Ledger.open(resolve_location())
    assert state is None or state.state("d") is None or state.state("d").spent == PureDP(0)
