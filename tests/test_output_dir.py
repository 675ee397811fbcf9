"""Where releases land: --output-dir, else the spec's ``output_dir:`` (relative to the spec file,
whatever the working directory), else ./outputs of the working directory. A bad ``output_dir:``
is refused with its file, line and a fix, before anything is spent; the key is not part of the
fingerprint (it says where a release is written, not what is released)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dprelease.lifecycle.prepare import output_location
from dprelease.spec import fingerprint, load_spec
from tests.ledgers import untouched
from tests.conftest import SPECS

MINIMAL = (SPECS / "good" / "minimal.yaml").read_text()
ROWS = "SEX,AGEP,MSP\n1,30,1\n2,70,N\n1,10,6\n2,45,2\n"


def project(root: Path, output_dir: str | None, release: str = "test-release") -> Path:
    """root/configs/spec.yaml (with ``output_dir:`` when given) reading root/configs/data.csv."""
    configs = root / "configs"
    configs.mkdir(parents=True, exist_ok=True)
    (configs / "data.csv").write_text(ROWS)
    key = f"output_dir: {output_dir}\n" if output_dir is not None else ""
    spec = configs / "spec.yaml"
    spec.write_text(MINIMAL.replace("release: test-release\n", f"release: {release}\n{key}"))
    return spec


def published_to(result, final: Path) -> None:
    """The run published, said so with the absolute directory, and the manifest is there."""
    assert result.code == 0, result
    assert final.is_absolute() and f"→ {final}\n" in result.stdout, result.stdout
    assert json.loads((final / "manifest.json").read_text())["release"] == final.name


def test_a_spec_output_dir_publishes_beside_the_spec_from_any_working_directory(tmp_path, cli, monkeypatch):
    spec = project(tmp_path / "proj", "../outputs")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = cli("run", spec, "--orchestrator", "inline")
    published_to(result, tmp_path / "proj" / "outputs" / "test-release")
    assert not (elsewhere / "outputs").exists()


def test_output_dir_option_overrides_the_spec(tmp_path, cli, monkeypatch):
    spec = project(tmp_path / "proj", "../outputs")
    monkeypatch.chdir(tmp_path)
    result = cli("run", spec, "--orchestrator", "inline", "--output-dir", "chosen")
    published_to(result, tmp_path / "chosen" / "test-release")
    assert not (tmp_path / "proj" / "outputs").exists()


def test_without_either_releases_land_in_the_working_directory(tmp_path, cli, monkeypatch):
    spec = project(tmp_path / "proj", None)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    result = cli("run", spec, "--orchestrator", "inline")
    published_to(result, cwd / "outputs" / "test-release")


def test_an_absolute_output_dir_is_taken_as_it_is(tmp_path):
    spec = load_spec(project(tmp_path / "proj", str(tmp_path / "abs")))
    assert spec.output_path == tmp_path / "abs"
    assert output_location(None, spec) == tmp_path / "abs"
    assert output_location(Path("x"), spec) == Path.cwd() / "x"


@pytest.mark.parametrize("written, words", [
    ("3", "'3' is not a directory"),
    ('""', "is not a directory"),
    ("[a, b]", "is not a directory"),
    ('"   "', "is blank"),
    ("sqlite:///x", "is a URL"),
])
def test_a_bad_output_dir_is_refused_with_its_line_and_a_fix(tmp_path, cli, isolated_ledger, written, words):
    spec = project(tmp_path / "proj", written)
    checked = cli("validate", spec)
    assert checked.code == 2, checked
    assert f"{spec}:3" in checked.stderr and "output_dir" in checked.stderr and words in checked.stderr, checked.stderr
    assert "e.g. output_dir: ../outputs" in checked.stderr, checked.stderr
    run = cli("run", spec, "--orchestrator", "inline")
    assert run.code == 2 and words in run.stderr, run
    assert not (tmp_path / "proj" / "outputs").exists() and untouched(isolated_ledger)  # nothing spent


def test_output_dir_is_not_part_of_the_fingerprint(tmp_path):
    """Moving a project's outputs keeps its approvals: the fingerprint of a spec with output_dir:
    is the fingerprint of the same spec without it."""
    without = load_spec(project(tmp_path / "a", None))
    with_key = load_spec(project(tmp_path / "b", "../outputs"))
    assert with_key.output_dir == "../outputs" and without.output_dir is None
    assert fingerprint(with_key) == fingerprint(without)
