"""What `validate` says of ``epsilon: auto`` (``rho: auto``) specs: what such a release spends
before its split is chosen (at most its budget, never a fixed total), and one clear problem, in
the unit of the key written, for each mistake in writing auto."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import SPECS

AUTO = (SPECS / "good" / "auto_split.yaml").read_text()  # two auto tables, one written at ρ = 0.1, of ρ = 1


def write_spec(directory, body, name):
    """The spec beside the geography's mapping file it names."""
    shutil.copy(SPECS / "good" / "tract_to_county.csv", directory)
    path = directory / name
    path.write_text(body)
    return path


def problems(result, path):
    """The problem lines `validate` printed for ``path`` (file:line:column: field: message)."""
    return [line for line in result.stderr.splitlines() if line.startswith(f"{path}:")]


def test_validate_says_an_auto_release_spends_at_most_its_budget(tmp_path, cli):
    path = write_spec(tmp_path, AUTO, "auto.yaml")
    shown = cli("validate", path)
    assert shown.code == 0, shown
    assert "total ρ = 1 of 1" not in shown.stdout and "total ρ" not in shown.stdout, shown.stdout
    assert "by_sex, by_age: rho: auto" in shown.stdout
    assert "what the written tables leave of the release budget (ρ = 9/10 of 1)" in shown.stdout
    assert "the release spends at most ρ = 1" in shown.stdout
    every = write_spec(tmp_path, AUTO.replace("    rho: 0.1\n", "    rho: auto\n"), "every.yaml")
    shown = cli("validate", every)
    assert shown.code == 0, shown
    assert "splits the release budget (ρ = 1)" in shown.stdout and "spends at most ρ = 1" in shown.stdout


@pytest.mark.parametrize("definition", ["zcdp", "pure"])
def test_a_misspelled_auto_names_the_key_written_its_unit_and_the_fix(tmp_path, cli, definition):
    key, symbol = ("rho", "ρ") if definition == "zcdp" else ("epsilon", "ε")
    text = AUTO.replace("    rho: 0.1\n", f"    {key}: atuo\n")
    if definition == "pure":
        text = (text.replace("{definition: zcdp, unit: row, delta: 1e-6}", "{definition: pure, unit: row}")
                .replace("rho:", "epsilon:"))
    path = write_spec(tmp_path, text, "typo.yaml")
    shown = cli("validate", path)
    assert shown.code == 2, shown
    [problem] = problems(shown, path)
    assert f"tables[2].{key}: atuo is not {'a' if key == 'rho' else 'an'} {symbol}; did you mean {key}: auto" in problem
    assert f"({key}: 0.1 or {key}: \"1/10\")" in problem
    assert ("ε" in problem) == (symbol == "ε") and ("ρ" in problem) == (symbol == "ρ"), problem


@pytest.mark.parametrize("written, words", [
    ("{root: auto, STATE: 1/10, COUNTY: 1/10, TRACT: 1/10}", "auto is for a whole table, its levels included"),
    ("{root: auto, STATE: auto, COUNTY: auto, TRACT: auto}", "auto is for a whole table, its levels included"),
    ("{root: abc, STATE: 1/10, COUNTY: 1/10, TRACT: 1/10}", "a ρ per level is a decimal or a fraction at every "
                                                           "level, not root 'abc'"),
])
def test_auto_or_a_bad_value_at_a_level_is_one_problem(tmp_path, cli, written, words):
    """One mistake in a budget per level is one problem, at the table's budget, not one more per level."""
    body = AUTO.replace("    rho: auto\n    weight: {root: 1, STATE: 1, COUNTY: 1, TRACT: 4}\n", f"    rho: {written}\n")
    assert body != AUTO
    path = write_spec(tmp_path, body, "levels.yaml")
    shown = cli("validate", path)
    assert shown.code == 2, shown
    [problem] = problems(shown, path)
    assert ": tables[0].rho: " in problem and words in problem, problem
