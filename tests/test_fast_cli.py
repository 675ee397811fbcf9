"""The fast path of ``validate``, ``plan``, ``ledger`` and ``report`` (dprelease/cli/fast.py):
it takes only command lines typer would parse to the same values, prints what typer's path
prints, and keeps those commands free of the libraries they do not need (import discipline,
checked by ``sys.modules`` in a child process; no timing here: benchmarks/latency.py times it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dprelease.cli.fast import FAST, parse
from tests.conftest import shipped_project

HEAVY = {"typer", "click", "pydantic", "prefect", "matplotlib", "scipy", "pandas", "sqlalchemy"}
# what each fast command may import of HEAVY: plan, ledger and report read a SQLite ledger with sqlite3 (never
# SQLAlchemy); report draws its figures (matplotlib, never pyplot)
ALLOWED = {"validate": set(), "plan": set(), "ledger": set(), "report": {"matplotlib"}}

PROBE = """
import sys
from dprelease.cli import main
sys.argv = ["dprelease", *sys.argv[1:]]
try:
    main()
except SystemExit as exit:
    code = exit.code
else:
    code = 0
HEAVY = set(%r)
tops = {m.split(".")[0] for m in sys.modules}
print("IMPORTED", code, sorted(tops & HEAVY), "matplotlib.pyplot" in sys.modules, file=sys.stderr)
""" % sorted(HEAVY)


def probe(*args: str, cwd: Path) -> tuple[int, set[str], bool]:
    """Run ``dprelease ARGS`` through ``main`` in a child: (exit code, HEAVY modules imported,
    whether pyplot was)."""
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("IMPORTED "))
    _, code, rest = line.split(" ", 2)
    names, pyplot = rest.rsplit(" ", 1)
    return int(code), set(eval(names)), pyplot == "True"


def typer_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``dprelease ARGS`` through the typer app, never the fast path."""
    return subprocess.run([sys.executable, "-c", "import sys\nfrom dprelease.cli.commands import app\n"
                           "app(args=sys.argv[1:], prog_name='dprelease')", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def fast_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dprelease", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A copy of the shipped project with its own ledger and one release published (under
    another release name, so that ``plan`` of the demo still fits)."""
    directory = tmp_path_factory.mktemp("fast")
    configs = shipped_project(directory)
    spec = configs / "acs_demo.yaml"
    published = configs / "published.yaml"
    published.write_text(spec.read_text().replace("release: acs-demo-2019", "release: acs-demo-published"))
    env = {k: v for k, v in os.environ.items() if k != "DPRELEASE_LEDGER"}
    proc = subprocess.run([sys.executable, "-m", "dprelease", "run", str(published), "--orchestrator", "inline"],
                          capture_output=True, text=True, cwd=directory, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return directory


def test_the_fast_table_matches_typers_declarations():
    """Every option the fast path takes is the typer command's, to the same parameter, a flag
    where typer's is a flag; the positional argument is typer's (one, or one or more)."""
    import typer.main

    from dprelease.cli.commands import app

    group = typer.main.get_command(app)
    for name, fast in FAST.items():
        command = group.commands[name]  # type: ignore[attr-defined]
        params = {p.name: p for p in command.params}
        for flag, option in fast.options.items():
            param = params[option.param]
            assert flag in param.opts, (name, flag, param.opts)
            assert param.is_flag == (option.kind is None), (name, flag)
            assert not param.multiple and param.envvar is None, (name, flag)
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        if fast.positional is None:
            assert not arguments, name
        else:
            assert [p.name for p in arguments] == [fast.positional], name
            assert (arguments[0].nargs == -1) == fast.many and arguments[0].required, name


@pytest.mark.parametrize("argv", [
    [], ["--version"], ["run", "x.yaml"], ["validate"], ["validate", "--help"], ["plan", "-h"], ["plan"],
    ["plan", "a.yaml", "b.yaml"], ["plan", "a.yaml", "--ledger"], ["plan", "a.yaml", "--ledger", "--json"],
    ["plan", "a.yaml", "--json", "--json"], ["plan", "a.yaml", "--json=1"], ["plan", "a.yaml", "--confidence", "0.9"],
    ["plan", "a.yaml", "--approve"], ["plan", "a.yaml", "--"], ["plan", ""], ["plan", "-"], ["plan", "a.yaml", "--led"],
    ["plan", "a.yaml", "--ledger", ""], ["ledger", "init"], ["ledger", "--ledger", "/x", "resolve"],
    ["report", "d", "--format", "xml"], ["report", "d", "--format"], ["report", "d", "-o", "x"],
])
def test_what_the_fast_path_leaves_to_typer(argv):
    assert parse(argv) is None


def test_what_the_fast_path_takes():
    assert parse(["plan", "a.yaml", "--ledger=/l.sqlite", "--json"])[1] == {
        "spec_path": Path("a.yaml"), "ledger": "/l.sqlite", "as_json": True}
    assert parse(["validate", "a.yaml", "b.yaml"])[1] == {"specs": [Path("a.yaml"), Path("b.yaml")]}
    assert parse(["ledger", "--json", "--spec", "s.yaml", "--dataset", "d"])[1] == {
        "as_json": True, "spec_path": Path("s.yaml"), "dataset": "d"}
    assert parse(["ledger"])[1] == {}
    assert parse(["report", "--format", "md", "d", "--output=o.md"])[1] == {
        "release_dir": Path("d"), "fmt": "md", "output": Path("o.md")}


def test_the_fast_path_prints_what_typer_prints(demo):
    """The same command lines, through the fast path and through typer: the same output and exit
    code (the ledger's and the spec's notes on stderr included)."""
    spec, release = "configs/acs_demo.yaml", "outputs/acs-demo-published"
    for argv in (["validate", spec], ["validate", spec, "configs/missing.yaml"], ["plan", spec], ["plan", spec, "--json"],
                 ["plan", "configs/published.yaml"], ["plan", "configs/missing.yaml"], ["ledger"], ["ledger", "--json"],
                 ["ledger", "--spec", spec], ["ledger", "--spec", spec, "--dataset", "nope"],
                 ["report", release, "--format", "md"], ["report", release, "--format", "json"], ["report", "nowhere"]):
        fast, typed = fast_run(*argv, cwd=demo), typer_run(*argv, cwd=demo)
        assert (fast.returncode, fast.stdout, fast.stderr) == (typed.returncode, typed.stdout, typed.stderr), argv
    html = [demo / "fast.html", demo / "typer.html"]
    assert fast_run("report", release, "--output", str(html[0]), cwd=demo).returncode == 0
    assert typer_run("report", release, "--output", str(html[1]), cwd=demo).returncode == 0
    assert html[0].read_bytes() == html[1].read_bytes()


def test_fast_commands_import_only_what_they_need(demo):
    """validate, plan and ledger import neither typer (nor click or pydantic), SQLAlchemy (a
    SQLite ledger is read with sqlite3), matplotlib, SciPy, pandas nor Prefect; report only
    matplotlib of them, never pyplot."""
    spec = "configs/acs_demo.yaml"
    for name, argv in (("validate", ["validate", spec]), ("plan", ["plan", spec]), ("ledger", ["ledger", "--spec", spec]),
                       ("report", ["report", "outputs/acs-demo-published", "--output", str(demo / "probe.html")])):
        code, imported, pyplot = probe(*argv, cwd=demo)
        assert code == 0, (argv, code)
        assert imported <= ALLOWED[name], (name, imported - ALLOWED[name])
        assert not pyplot, name


def test_the_import_probe_can_fail(demo):
    """The probe sees typer where typer parses (a help text) and pyplot where it is imported."""
    code, imported, _ = probe("plan", "--help", cwd=demo)
    assert code == 0 and {"typer", "pydantic"} <= imported
    proc = subprocess.run([sys.executable, "-c", "import matplotlib.pyplot\n" + PROBE, "validate", "configs/acs_demo.yaml"],
                          capture_output=True, text=True, cwd=demo, timeout=300)
    assert "True" in next(x for x in proc.stderr.splitlines() if x.startswith("IMPORTED "))
