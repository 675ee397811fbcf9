"""Progress a user sees (issue 20, item 7): while a large data file is counted by the run (bytes
read of the file's size), and while Prefect starts or is imported (a spinner); only on an
interactive terminal, never in captured output."""

from __future__ import annotations

import importlib
import io
import sys
from types import SimpleNamespace

from dprelease.data import count_exact
from dprelease.spec import load_spec
from tests.conftest import ROOT

DEMO = ROOT / "configs" / "acs_demo.yaml"
execute = importlib.import_module("dprelease.lifecycle.execute")  # the module (the package exports a function of its name)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_counting_reports_the_bytes_read_up_to_the_files_size():
    spec = load_spec(DEMO)
    seen: list[int] = []
    count_exact(spec, read=seen.append)
    size = (ROOT / "data" / "nist_acs" / "national2019.csv").stat().st_size
    assert seen and seen == sorted(seen) and size * 0.9 <= seen[-1] <= size * 1.1, (seen[-3:], size)


def test_the_runs_bar_counts_the_bytes_of_a_large_file_on_a_terminal(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(execute, "data_bytes", lambda spec: 300 << 20)
    run = SimpleNamespace(spec=SimpleNamespace(release="big", tables=()), on_progress=None, on_bytes=None)
    bar = execute._terminal_progress(run)
    run.on_bytes(120 << 20)
    bar.refresh()
    bar.stop()
    assert "big: counting the data, 120 of 300 MiB" in terminal.getvalue()


def test_no_bar_for_small_data_or_off_a_terminal(monkeypatch):
    monkeypatch.setattr(execute, "data_bytes", lambda spec: 1 << 20)
    monkeypatch.setattr(sys, "stderr", Terminal())
    run = SimpleNamespace(spec=SimpleNamespace(release="small", tables=()), on_progress=None, on_bytes=None)
    bar = execute._terminal_progress(run)
    bar.stop()
    assert run.on_bytes is None  # the step bar, but no byte count for data read in a moment
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal: no bar at all
    assert execute._terminal_progress(run) is None


def test_a_spinner_while_prefect_starts_only_on_a_terminal(monkeypatch):
    from dprelease.cli.release_cmds import _spinner

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with _spinner("importing Prefect"):
        pass
    assert "importing Prefect ..." in terminal.getvalue()
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    with _spinner("importing Prefect"):
        pass
    assert captured.getvalue() == ""
