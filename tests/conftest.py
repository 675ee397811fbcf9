"""Shared fixtures. The suite leaves the user's state alone: from before collection (so before
anything imports Prefect) HOME, PREFECT_HOME, Prefect's profiles, the XDG directories and the
ledger point into a temporary directory of the session's, and PREFECT_API_URL/PREFECT_PROFILE
are unset; every test then gets its own ledger location and Prefect profiles file on top.
``tests/test_user_state.py`` proves it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SPECS = Path(__file__).resolve().parent / "specs"

pytest_plugins = ["tests.postgres", "tests.prefect_server"]

# What the user's own environment may set that would point a test at the user's state (or at
# the user's Prefect server): unset for the session. Tests that need one set it themselves.
USER_STATE_VARIABLES = ("PREFECT_API_URL", "PREFECT_API_KEY", "PREFECT_PROFILE", "PREFECT_PROFILES_PATH",
                        "PREFECT_HOME", "DPRELEASE_LEDGER", "DPRELEASE_LEDGER_KEY", "XDG_DATA_HOME",
                        "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "MPLCONFIGDIR",
                        "HYPOTHESIS_STORAGE_DIRECTORY")
_saved_environment: dict[str, str | None] = {}
_session_home: str | None = None


def pytest_configure(config):
    """Before collection, so before any test module imports Prefect (which reads its settings and
    the active profile once, at import): HOME and everything under it are a session temporary
    directory's (writable: Prefect keeps its database there), never the user's."""
    global _session_home
    if _session_home is not None:
        return
    # A suite started in the background of a non-interactive shell (`... &`, as scripts and some
    # CI runners do) inherits SIGINT ignored, and so would every child it starts: the tests that
    # interrupt a run or `schedule` with SIGINT (a user's Ctrl-C) would wait for ever. Children
    # start with SIGINT at its default (Python's KeyboardInterrupt), as from a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # once, before the workers start
        _compile_for_children()
    _session_home = tempfile.mkdtemp(prefix="dprelease-tests-")
    home = Path(_session_home)
    for name in ("HOME", *USER_STATE_VARIABLES):
        _saved_environment[name] = os.environ.pop(name, None)
    paths = {"HOME": home / "home", "PREFECT_HOME": home / "prefect-home",
             "PREFECT_PROFILES_PATH": home / "prefect-home" / "profiles.toml",
             "XDG_DATA_HOME": home / "xdg-data", "XDG_CONFIG_HOME": home / "xdg-config",
             "XDG_CACHE_HOME": home / "xdg-cache", "XDG_STATE_HOME": home / "xdg-state",
             "DPRELEASE_LEDGER": home / "xdg-data" / "dprelease" / "session-ledger.sqlite"}
    for name, path in paths.items():
        (path.parent if name in ("PREFECT_PROFILES_PATH", "DPRELEASE_LEDGER") else path).mkdir(parents=True,
                                                                                                exist_ok=True)
        os.environ[name] = str(path)
    # Hypothesis keeps its example database and caches in the session's directory, not the
    # project's .hypothesis/ (read when first needed, so still in time here); a failure prints
    # its falsifying example and the @reproduce_failure line.
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(home / "hypothesis")


def _compile_for_children() -> None:
    """Write the bytecode of ``dprelease`` and ``tests`` beside their sources, once per session.
    The suite starts over 300 Python child processes (``python -m dprelease ...`` and the tests'
    own scripts), and a `dprelease run` imports over a hundred of the project's modules. An
    editable install ships no bytecode, and where ``PYTHONDONTWRITEBYTECODE`` is set (many CI
    images set it) no child writes any either, so every child would compile them again from
    source: 0.14 s more CPU for each `dprelease run` of the demo (measured). A child still reads
    the bytecode that is there (the variable stops writing only). Each file's bytecode carries
    its source's hash, which every import checks (an edit made within the same second as the
    last compile, same size, would pass a check by modification time), and is written anew each
    session (0.3 s). ``__pycache__`` is git-ignored; no test's behaviour changes, only how fast
    its children start."""
    import compileall
    import py_compile

    if not os.access(ROOT, os.W_OK):  # a read-only checkout: the children compile, as before
        return
    for package in ("dprelease", "tests"):  # checked against the source's hash, not its mtime in seconds:
        compileall.compile_dir(ROOT / package, quiet=1,  # an edit within the second is never missed
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)


# A test that needs one of these fixtures (directly or through another: run_env, warm_env, ...)
# runs whole releases against a Prefect server: it is end-to-end, so marked slow here rather
# than by hand (a new end-to-end test cannot be forgotten). Other slow tests (statistical tests
# of the samplers, Dask clusters, races) carry @pytest.mark.slow themselves. tests/README.md.
SLOW_FIXTURES = frozenset({"prefect_server", "release_env", "release_env_module"})


# The longest modules first (wall seconds of a measured run of the whole suite, longest first;
# the rest follow in collection order). With `--dist loadscope --no-loadscope-reorder` (addopts)
# xdist hands modules out in this order, one to each worker as it runs short of work: the long
# end-to-end modules start at once and the short ones fill in at the end, so both workers finish
# together (longest processing time first). xdist's own reorder, by number of tests, sent the
# 156 quick spec checks first and the long end-to-end modules last, leaving a core idle while the
# other finished one. Order only: every module's tests, in their own order, whichever it is.
LONGEST_FIRST = ("test_schedule.py", "test_run.py", "test_crash.py", "test_orchestrators.py",
                 "test_budget_identity.py", "test_local.py", "test_hostile.py", "test_races.py",
                 "test_warm_runner.py", "test_user_state.py", "test_fast_cli.py", "test_dask.py",
                 "test_noise_spent.py", "test_file_modes.py", "test_mechanisms.py", "test_structural.py",
                 "test_ledger.py", "test_local_provenance.py", "test_reading.py", "test_file_safety.py",
                 "test_suite_layout.py", "test_report_html.py", "test_invariants.py", "test_spec_validate.py",
                 "test_report.py", "test_zcdp.py", "test_tradeoff.py", "test_topdown_fit.py", "test_approx.py",
                 "test_record_identity.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's own order kept


def pytest_unconfigure(config):
    global _session_home
    if _session_home is None:
        return
    for name, value in _saved_environment.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(_session_home, ignore_errors=True)
    _session_home = None


@pytest.fixture(autouse=True)
def isolated_ledger(tmp_path_factory, monkeypatch):
    """Every test's ledger is a fresh one, created here: $DPRELEASE_LEDGER names it (for specs that
    pin none; a run never creates a ledger there), and the per-user default and the keys of database ledgers point at
    fresh directories too (and so does ``dprelease server``'s record, ``server.json`` beside the
    default ledger). Tests of the default location or of a spec's ``ledger:`` unset it. Prefect's
    profiles file is the test's own (none: no profile names a server) and no PREFECT_API_URL is
    set unless a test sets one (``run_env`` does, for its child runs)."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    monkeypatch.delenv("DPRELEASE_LEDGER_KEY", raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(tmp_path_factory.mktemp("prefect-profiles") / "profiles.toml"))
    for name in ("PREFECT_API_URL", "PREFECT_API_KEY", "PREFECT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    path = home / "dprelease" / "ledger.sqlite"
    monkeypatch.setenv("DPRELEASE_LEDGER", str(path))
    from tests.ledgers import make_ledger

    make_ledger(path)  # made on purpose, as `dprelease ledger init` would: no run creates one
    return path


class Result:
    def __init__(self, code: int, stdout: str, stderr: str):
        self.code, self.stdout, self.stderr = code, stdout, stderr

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def __repr__(self) -> str:
        return f"Result(code={self.code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


@pytest.fixture
def cli():
    """Run ``dprelease ARGS`` in-process; returns exit code, stdout and stderr separately."""
    from dprelease.cli import app

    def run(*args: str | os.PathLike) -> Result:
        result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
        return Result(result.exit_code, result.stdout, result.stderr)

    return run


@pytest.fixture
def cli_process():
    """Run the installed console script in a child process, as a user would."""

    def run(*args: str | os.PathLike, cwd: Path | None = None, env: dict | None = None) -> Result:
        proc = subprocess.run([sys.executable, "-m", "dprelease", *[str(a) for a in args]],
                              capture_output=True, text=True, cwd=cwd or ROOT,
                              env={**os.environ, **(env or {})}, timeout=120)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


def write_spec(directory: Path, body: str, name: str = "spec.yaml") -> Path:
    path = directory / name
    path.write_text(body)
    return path


def assert_edit_refused(cli, path: Path, old: str, new: str, field: str, words: str) -> None:
    """Edit ``old`` into ``new`` in the spec at ``path`` (``old`` must be there): ``validate``
    exits 2 naming ``field``, with ``words`` in its message."""
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    result = cli("validate", path)
    assert result.code == 2 and field in result.stderr and words in result.stderr, result.stderr


def shipped_project(directory: Path, *, ledger: bool = True, pinned: bool = True) -> Path:
    """The project's shipped specs as a copy would see them: ``directory/configs`` (the specs and
    their domains) with ``directory/data`` naming the project's data, so every relative path of a
    shipped spec resolves as in the project, but its pinned ledger (``../ledgers/nist-acs.sqlite``)
    and ``output_dir`` (``../outputs``) are ``directory``'s, never the project's own. The ledger is
    created on purpose (``ledger=False``: left for the test). ``pinned=False``: the copies pin no
    ledger (a run spends from ``$DPRELEASE_LEDGER``, the test's own, or a typed ``--ledger``), and
    none is made. Returns ``directory/configs``."""
    configs = directory / "configs"
    shutil.copytree(ROOT / "configs", configs, ignore=shutil.ignore_patterns("ledgers", "outputs", "*.sqlite*"),
                    dirs_exist_ok=True)
    if not (directory / "data").exists():
        (directory / "data").symlink_to(ROOT / "data", target_is_directory=True)
    if not pinned:
        for spec in configs.glob("*.yaml"):
            if PROJECT_PIN in spec.read_text():  # (a second call finds them unpinned)
                spec.write_text(unpinned(spec.read_text()))
    elif ledger:
        from tests.ledgers import make_ledger

        make_ledger(directory / "ledgers" / "nist-acs.sqlite")
    return configs


def shipped(directory: Path, name: str = "acs_demo.yaml") -> Path:
    """A shipped spec (``configs/NAME``) copied into ``directory/configs`` without its ledger pin:
    a run of it spends from the test's own ledger (``$DPRELEASE_LEDGER``) or a typed ``--ledger``,
    never the project's (:func:`shipped_project`)."""
    return shipped_project(directory, pinned=False) / name


PROJECT_PIN = "ledger: ../ledgers/nist-acs.sqlite"


def unpinned(text: str) -> str:
    """A shipped spec's text without its ledger pin, for a copy written into a test's directory:
    the copy's relative pin would name a ledger shared by the session's tests (and a pin is a pin:
    ``$DPRELEASE_LEDGER`` does not override it), so the copy spends from the test's own ledger."""
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(PROJECT_PIN)]
    assert len(kept) == len(lines) - 1, "the shipped spec's ledger pin"
    return "".join(kept)
