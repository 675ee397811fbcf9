"""A plugin for tests/test_suite_layout.py's child collection: every test that ``-m`` left out,
one node id a line, into the file $DPRELEASE_TEST_DESELECTED names (pytest prints only those kept)."""

from __future__ import annotations

import os


def pytest_deselected(items) -> None:  # type: ignore[no-untyped-def]
    with open(os.environ["DPRELEASE_TEST_DESELECTED"], "a") as out:
        out.writelines(item.nodeid + "\n" for item in items)
