"""Spec validation: every bad spec is refused with file, line and field; good ones load."""

from __future__ import annotations

import re
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from dprelease.accounting import PureDP, compose
from dprelease.errors import SpecError
from dprelease.spec import CategoricalColumn, load_spec
from tests.conftest import ROOT, SPECS, write_spec

BAD = sorted((SPECS / "bad").glob("*.yaml"))


def shipped_specs() -> list[Path]:
    """The specs the project ships: the ``configs/*.yaml`` that git tracks, never a draft the user
    keeps (untracked) in ``configs/``."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "configs"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sorted(ROOT / name for name in listed if name.endswith(".yaml") and Path(name).parent == Path("configs"))


SHIPPED = shipped_specs() + sorted((SPECS / "good").glob("*.yaml"))


def expectation(path: Path) -> tuple[str, int | None]:
    """Each bad spec says what it expects: ``# expect: FIELD @ LINE``."""
    m = re.search(rb"# expect: (.*?)(?: @ (\d+))?\n", path.read_bytes())
    assert m, f"{path.name} has no '# expect:' line"
    return m.group(1).decode(), int(m.group(2)) if m.group(2) else None


def test_corpus_is_large_and_distinct():
    assert len(BAD) >= 25
    assert len({p.read_bytes() for p in BAD}) == len(BAD)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_is_refused_with_file_line_and_field(path, cli):
    field, line = expectation(path)
    result = cli("validate", path)
    assert result.code == 2, result
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith(f"{path}:")]
    assert lines, result.stderr
    m = re.match(rf"{re.escape(str(path))}:(\d+):(\d+): (\S.*?): (.+)$", lines[0])
    assert m, lines[0]
    assert int(m.group(1)) >= 1 and int(m.group(2)) >= 1
    if line is not None:
        assert int(m.group(1)) == line, lines[0]
    assert m.group(3).startswith(field), lines[0]


def test_all_bad_specs_in_one_process_call_exit_2_without_traceback(cli_process):
    result = cli_process("validate", *BAD)
    assert result.code == 2
    assert "Traceback" not in result.output
    for path in BAD:
        assert f"{path}:" in result.stderr, path.name
    assert f"{len(BAD)} of {len(BAD)} spec(s) invalid" in result.stderr


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_configs_validate(path, cli):
    result = cli("validate", path)
    assert result.code == 0, result
    assert result.stdout.startswith(f"ok {path}")


def test_every_error_is_reported_not_just_the_first(tmp_path, cli):
    spec = write_spec(tmp_path, (SPECS / "good" / "minimal.yaml").read_text()
                      .replace("epsilon: 0.5", "epsilon: -1")
                      .replace("group_by: [SEX]", "group_by: [SEXX]")
                      .replace("release: test-release", "release: Test Release"))
    result = cli("validate", spec)
    assert result.code == 2
    fields = [ln.split(": ")[1] for ln in result.stderr.splitlines() if ln.startswith(str(spec))]
    assert fields == ["release", "tables[0].group_by[0]", "tables[0].epsilon"]


def test_values_are_taken_as_written(tmp_path):
    spec = load_spec(write_spec(tmp_path, (SPECS / "good" / "minimal.yaml").read_text().replace(
        "SEX: {domain: [1, 2], labels: [Male, Female]}", "SEX: {domain: [01, 08, NO, 1.50, 010]}")
        .replace("group_by: [SEX, AGE_GROUP]", "group_by: [AGE_GROUP]")))
    sex = spec.column("SEX")
    assert isinstance(sex, CategoricalColumn)
    assert sex.values == ("01", "08", "NO", "1.50", "010")  # YAML 1.1 would give 1, '08', False, 1.5, 8


def test_range_bounds_are_decimal_not_octal(tmp_path):
    spec = load_spec(write_spec(tmp_path, (SPECS / "good" / "minimal.yaml").read_text()
                                .replace("AGEP: {range: [0, 99]}", "AGEP: {range: [00, 099]}")))
    assert (spec.column("AGEP").low, spec.column("AGEP").high) == (0, 99)


@pytest.mark.parametrize("written, exact", [
    ("0.1", Fraction(1, 10)), ('"0.1"', Fraction(1, 10)), ("1e-1", Fraction(1, 10)),
    ('"1/10"', Fraction(1, 10)), ("1/10", Fraction(1, 10)), ("0.3333", Fraction(3333, 10000)),
    ("2", Fraction(2)), (".5", Fraction(1, 2)),
])
def test_epsilon_is_read_exactly_from_its_text(tmp_path, written, exact):
    spec = load_spec(write_spec(tmp_path, (SPECS / "good" / "minimal.yaml").read_text()
                                .replace("epsilon: 0.5\n", f"epsilon: {written}\n", 1)))
    assert spec.tables[0].budget == PureDP(exact)


def test_a_tenth_plus_two_tenths_plus_seven_tenths_is_exactly_one(tmp_path):
    body = (SPECS / "good" / "three_tables.yaml").read_text()
    spec = load_spec(write_spec(tmp_path, body))
    assert [t.budget for t in spec.tables] == [PureDP(Fraction(1, 10)), PureDP(Fraction(2, 10)), PureDP(Fraction(7, 10))]
    assert compose((t.budget for t in spec.tables), "pure") == PureDP(1)


def test_domain_file_is_relative_to_the_spec_not_the_cwd(tmp_path, monkeypatch):
    (tmp_path / "sub" / "domains").mkdir(parents=True)
    (tmp_path / "sub" / "domains" / "sex.txt").write_text("# comment\n1\n\n2\n")
    spec_path = write_spec(tmp_path / "sub", (SPECS / "good" / "minimal.yaml").read_text().replace(
        "SEX: {domain: [1, 2], labels: [Male, Female]}", "SEX: {domain_file: domains/sex.txt}"))
    monkeypatch.chdir(tmp_path)
    assert load_spec(Path("sub/spec.yaml")).column("SEX").values == ("1", "2")
    assert load_spec(spec_path).dataset.resolved_path == tmp_path / "sub" / "data.csv"


def test_missing_category_and_bins_size_the_domain():
    spec = load_spec(SPECS / "good" / "minimal.yaml")
    assert spec.column("MSP").size == 7  # six values + "Not applicable"
    assert spec.column("AGE_GROUP").categories == ("0-17", "18-64", "65+")
    assert spec.cells(spec.tables[1]) == 2 * 3


def test_spec_error_is_not_raised_for_a_missing_data_file(tmp_path):
    spec = load_spec(write_spec(tmp_path, (SPECS / "good" / "minimal.yaml").read_text()
                                .replace("path: data.csv", "path: /nonexistent/never/there.csv")))
    assert not spec.dataset.resolved_path.exists()


def test_validate_reports_a_missing_spec_file(cli):
    result = cli("validate", "no/such/spec.yaml")
    assert result.code == 2
    assert "no/such/spec.yaml: (document): no such file" in result.stderr


def test_spec_error_lists_problems_sorted_by_position():
    with pytest.raises(SpecError) as info:
        load_spec(SPECS / "bad" / "duplicate_table_name.yaml")
    assert info.value.problems[0].line == 21


def test_every_repeated_key_is_reported(tmp_path, cli):
    spec = write_spec(tmp_path, (SPECS / "good" / "minimal.yaml").read_text()
                      .replace("release: test-release\n", "release: test-release\nrelease: other\n")
                      .replace("budget: {epsilon: 1}\n", "budget: {epsilon: 1}\nbudget: {epsilon: 2}\n")
                      .replace("    epsilon: 0.5\n", "    epsilon: 0.5\n    epsilon: 0.1\n", 1))
    result = cli("validate", spec)
    assert result.code == 2
    fields = [ln.split(": ")[1] for ln in result.stderr.splitlines() if ln.startswith(str(spec))]
    assert fields == ["release", "budget", "tables[0].epsilon"]


def test_validate_warns_when_tables_exceed_the_release_budget(tmp_path, cli):
    spec = write_spec(tmp_path, (SPECS / "good" / "minimal.yaml").read_text().replace("epsilon: 0.5\n", "epsilon: 1\n", 1))
    result = cli("validate", spec)
    assert result.code == 0
    assert "over the release budget of 1 by 1/2" in result.stderr


def test_settings_that_release_nothing_do_not_change_the_fingerprint(tmp_path):
    from dprelease.spec import fingerprint

    body = (SPECS / "good" / "minimal.yaml").read_text()
    base = fingerprint(load_spec(write_spec(tmp_path, body)))
    for extra in ("accuracy: {confidence: 0.9}", "limits: {max_cells: 1000}", "ledger: /tmp/elsewhere.sqlite"):
        assert fingerprint(load_spec(write_spec(tmp_path, body + extra + "\n"))) == base, extra
    assert fingerprint(load_spec(write_spec(tmp_path, body.replace("epsilon: 0.5", "epsilon: 0.4", 1)))) != base


def test_a_misspelled_measured_column_is_refused_at_validate_and_plan(tmp_path, cli):
    """Issue 29, point 5: `measure: {mean: PINPC}` (the data has PINCP) validated and planned;
    now both refuse it (exit 2) with the name the file has; its header only is read. A spec whose
    data is not there yet validates, with a note."""
    data = ROOT / "data" / "nist_acs" / "national2019.csv"
    text = f"""release: typo
dataset: {{name: typo, path: {data}, na_values: ["N"], lifetime_budget: {{epsilon: 4}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  SEX: {{domain: [1, 2]}}
tables:
  - {{name: m, group_by: [SEX], measure: {{mean: PINPC, bounds: [0, 200000], granularity: 1000}}, epsilon: 1}}
"""
    spec = tmp_path / "typo.yaml"
    spec.write_text(text)
    for command in (("validate",), ("plan",)):
        result = cli(*command, spec)
        assert result.code == 2, result
        assert "column PINPC: not in the data file" in result.stderr and "did you mean 'PINCP'?" in result.stderr
    spec.write_text(text.replace("PINPC", "PINCP"))
    assert cli("validate", spec).code == 0
    declared = text.replace("  SEX: {domain: [1, 2]}\n", "  SEX: {domain: [1, 2]}\n  PINCP: {range: [0, 200000]}\n")
    spec.write_text(declared.replace(", bounds: [0, 200000], granularity: 1000", ""))  # PINCP declared, PINPC not
    unbounded = cli("validate", spec)
    assert unbounded.code == 2 and "did you mean 'PINCP' (declared with a range)?" in unbounded.stderr, unbounded
    spec.write_text(text.replace(str(data), str(tmp_path / "later.csv")))  # no data yet: said, not refused
    later = cli("validate", spec)
    assert later.code == 0 and "the data's header was not checked" in later.stderr, later


def test_the_default_cell_limit_is_what_this_machine_can_hold(tmp_path, cli, monkeypatch):
    """Issue 28, item 3: `limits.max_cells` unset is no fixed 10^8 but three quarters of the
    machine's memory at 64 bytes a published cell: on a machine of 64 MiB, 786,432 cells; a table
    over it is refused saying so; a spec that sets the limit (a cluster's driver) is taken at it."""
    import os

    from dprelease.spec.model import BYTES_PER_CELL, MACHINE_SHARE

    real = os.sysconf
    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PHYS_PAGES": 16384, "SC_PAGE_SIZE": 4096}.get(name) or real(name))
    limit = int(64 * 2**20 * MACHINE_SHARE) // BYTES_PER_CELL
    assert limit == 786_432
    spec = write_spec(tmp_path, f"""release: big
dataset: {{name: big, path: {ROOT / "data" / "nist_acs" / "national2019.csv"}, na_values: ["N"]}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  PINCP: {{range: [0, 999999]}}
tables:
  - {{name: by_income, group_by: [PINCP], epsilon: 1}}
""")
    refused = cli("validate", spec)
    assert refused.code == 2 and f"table 'by_income' has 1,000,000 cells, over the limit of {limit:,} (what this " \
        "machine can hold: 75% of its memory at 64 bytes a published cell)" in refused.stderr, refused
    spec.write_text(spec.read_text().replace("budget: {epsilon: 1}", "budget: {epsilon: 1}\nlimits: {max_cells: 2000000}"))
    assert cli("validate", spec).code == 0
