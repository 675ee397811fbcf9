"""The SQLite reader (dprelease/ledger/reader.py): the same answers as the SQLAlchemy ledger for
the same file, read-only, and every ledger it does not read whole left to ``Ledger.open``."""

from __future__ import annotations

import sqlite3
from fractions import Fraction

import pytest

from dprelease.accounting import ZCDP, ApproxDP, PureDP, Terms
from dprelease.ledger import Ledger, resolve_location
from dprelease.ledger.reader import LedgerReader, open_for_reading
from tests.ledgers import init_at


@pytest.fixture
def busy(tmp_path):
    """A SQLite ledger with three datasets of the three kinds of terms, runs in every state, a
    changed cap, evaluations (one by data only, one of a period's family), a policy and a period;
    returns its location."""
    location = resolve_location(str(tmp_path / "ledger.sqlite"))
    with init_at(location) as ledger:
        def reserve(dataset, release, charges, cap, terms=Terms("pure")):
            return ledger.reserve(dataset=dataset, release=release, charges=charges, spec_fingerprint="sha256:s",
                                  lifetime_from_spec=cap, terms=terms, spec_path="/s.yaml", output_dir="/out").run_id

        committed = reserve("ds", "r1", [("a", PureDP(Fraction(1, 10))), ("b", PureDP(Fraction(1, 5)))], PureDP(2))
        ledger.commit(committed, data_fingerprint="sha256:data")
        ledger.void(reserve("ds", "r2", [("a", PureDP(Fraction(1, 3)))], PureDP(2)), reason="never drawn")
        failed = reserve("ds", "r3", [("a", PureDP(Fraction(1, 7)))], PureDP(2))
        ledger.begin_drawing(failed)
        ledger.fail(failed, reason="crashed after drawing")
        reserve("ds", "r4", [("a", PureDP(Fraction(1, 9)))], PureDP(2))  # left reserved
        ledger.set_budget("ds", PureDP(3), reason="more")
        ledger.commit(reserve("pd/2026-01", "m1", [("a", PureDP(Fraction(1, 4)))], PureDP(1)))
        ledger.commit(reserve("zc", "z1", [("a", ZCDP(Fraction(1, 8)))], ZCDP(1), Terms("zcdp")))
        ledger.commit(reserve("ap", "p1", [("a", ApproxDP(Fraction(1, 2), Fraction(1, 10**6)))],
                              ApproxDP(2, Fraction(1, 10**5)), Terms("approx")))
        ledger.record_evaluation(dataset="ds", data_fingerprint="sha256:x", trials=3, spec_path="/s.yaml")
        ledger.record_evaluation(dataset="other", data_fingerprint="sha256:data", trials=1)
        ledger.record_evaluation(dataset="pd/2026-01", data_fingerprint="sha256:y", trials=2)  # under "pd"
        ledger.set_policy("ds", "approval", "required", reason="the board asks")
    return location


def test_the_reader_reads_what_the_ledger_reads(busy):
    reader = LedgerReader.open(busy)
    assert reader is not None
    with reader, Ledger.open(busy) as ledger:
        assert (reader.id, reader.birth, reader.location) == (ledger.id, ledger.birth, ledger.location)
        for dataset in ("ds", "pd/2026-01", "zc", "ap", "nowhere"):
            assert reader.state(dataset) == ledger.state(dataset), dataset
        assert {r.state for r in reader.state("ds").runs} == {"committed", "voided", "failed", "reserved"}
        assert reader.state("ap").spent == ApproxDP(Fraction(1, 2), Fraction(1, 10**6))
        for args in (("ds",), ("pd/2026-01",), ("ds", "sha256:data"), ("nowhere",)):
            assert reader.evaluations_of(*args) == ledger.evaluations_of(*args), args
        assert len(reader.evaluations_of("ds", "sha256:data")) == 2
        assert reader.datasets() == ledger.datasets() == ["ap", "ds", "pd/2026-01", "zc"]
        assert reader.undeclared() == ledger.undeclared() and set(reader.undeclared()) == {"other", "pd"}
        for args in ((), ("ds",), (None, "sha256:none")):
            assert reader.answer_sets(*args) == ledger.answer_sets(*args), args


def test_the_reader_cannot_write(busy):
    with LedgerReader.open(busy) as reader:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader._conn.execute("INSERT INTO policies (dataset, policy, value, reason, set_by, set_at) "
                                 "VALUES ('ds', 'approval', 'optional', 'x', 'x', 'x')")


def test_what_the_reader_leaves_to_the_ledger(busy, tmp_path):
    """No file, a file that is not SQLite, an older schema (to migrate), a database without a
    ledger, a database server: no reader; ``open_for_reading`` then answers as ``Ledger.open``."""
    missing = resolve_location(str(tmp_path / "missing.sqlite"))
    assert LedgerReader.open(missing) is None and open_for_reading(missing) is None
    foreign = tmp_path / "foreign.sqlite"
    foreign.write_text("not a database")
    assert LedgerReader.open(resolve_location(str(foreign))) is None
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).execute("CREATE TABLE t (x)").connection.commit()
    assert LedgerReader.open(resolve_location(str(empty))) is None
    assert LedgerReader.open(resolve_location("postgresql://u@h/db")) is None
    conn = sqlite3.connect(busy.sqlite_path)
    conn.execute("UPDATE dprelease_meta SET value = '5' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    assert LedgerReader.open(busy) is None
    opened = open_for_reading(busy)  # the SQLAlchemy ledger, which migrates it
    assert isinstance(opened, Ledger)
    opened.close()
    with LedgerReader.open(busy) as reader:  # now whole again
        assert reader.state("ds") is not None


def test_a_sqlite_location_is_not_parsed_by_sqlalchemy(tmp_path):
    """A path, and an absolute sqlite:/// URL (a manifest's), become the same location as
    SQLAlchemy's parse of the URL would give, quoted as it renders it."""
    from sqlalchemy.engine import make_url

    for name in ("ledger.sqlite", "a b+c%d/é?#@:.sqlite"):
        path = tmp_path / name
        shown = make_url("sqlite://").set(database=str(path)).render_as_string(hide_password=True)
        assert resolve_location(str(path)).shown == shown
        assert resolve_location(shown).shown == shown
        assert resolve_location(shown).sqlite_path == path
