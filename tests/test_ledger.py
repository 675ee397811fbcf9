"""The ledger: exact, append-only, location-stable, race-safe; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from fractions import Fraction

import pytest
import sqlalchemy as sa

from dprelease.accounting import ZCDP, ApproxDP, PureDP, Terms
from dprelease.errors import AlreadyReleasedError, LedgerError, OverBudgetError
from dprelease.ledger import Ledger, default_path, resolve_location
from tests.conftest import SPECS, write_spec
from tests.ledgers import init_at


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    return request.getfixturevalue("fresh_postgres")


def open_ledger(url: str) -> Ledger:
    ledger = init_at(resolve_location(url))
    assert ledger is not None
    return ledger


QUARTER, ONE = PureDP(Fraction(1, 4)), PureDP(1)


def reserve(ledger, release="r1", charges=(("t", QUARTER),), cap=ONE, dataset="ds"):
    return ledger.reserve(dataset=dataset, release=release, charges=list(charges),
                          spec_fingerprint="sha256:spec", lifetime_from_spec=cap).run_id


def test_reserve_commit_and_exact_spend(url):
    ledger = open_ledger(url)
    run = reserve(ledger, charges=[("a", PureDP(Fraction(1, 10))), ("b", PureDP(Fraction(2, 10)))])
    state = ledger.state("ds")
    assert state.spent == PureDP(Fraction(3, 10)) and state.remaining == PureDP(Fraction(7, 10))
    assert state.runs[0].state == "reserved"
    ledger.commit(run)
    assert ledger.state("ds").runs[0].state == "committed"
    granted = ledger.reserve(dataset="ds", release="r2", charges=[("c", PureDP(Fraction(7, 10)))],
                             spec_fingerprint="sha256:spec", lifetime_from_spec=PureDP(1))
    assert (granted.spent_before, granted.budget) == (PureDP(Fraction(3, 10)), PureDP(1))
    state = ledger.state("ds")
    assert state.spent == PureDP(1) and state.remaining == PureDP(0)  # exactly: 1/10 + 2/10 + 7/10
    with pytest.raises(OverBudgetError, match="over by 1/1000000"):
        reserve(ledger, release="r3", charges=[("d", PureDP(Fraction(1, 10**6)))])
    ledger.close()


def test_a_release_cannot_be_reserved_twice(url):
    ledger = open_ledger(url)
    run = reserve(ledger)
    with pytest.raises(AlreadyReleasedError):
        reserve(ledger)
    ledger.commit(run)
    with pytest.raises(AlreadyReleasedError, match="already committed"):
        reserve(ledger)
    ledger.close()


def test_voiding_frees_a_reservation_but_never_a_commit(url):
    ledger = open_ledger(url)
    run = reserve(ledger)
    ledger.void(run, reason="crashed before any noise was drawn")
    assert ledger.state("ds").spent == PureDP(0)
    run2 = reserve(ledger)  # the release name may be used again
    ledger.commit(run2)
    with pytest.raises(LedgerError, match="only a reserved run"):
        ledger.void(run2, reason="try to get the budget back")
    assert ledger.state("ds").spent == PureDP(Fraction(1, 4))
    ledger.close()


def test_changing_the_cap_is_recorded_and_never_reduces_spend(url):
    ledger = open_ledger(url)
    reserve(ledger, charges=[("t", PureDP(Fraction(3, 4)))])
    state = ledger.set_budget("ds", PureDP(2), reason="board decision 2026-11", by="alice")
    assert state.budget == PureDP(2) and state.spent == PureDP(Fraction(3, 4))
    assert [c.budget for c in state.caps] == [PureDP(1), PureDP(2)]
    assert state.caps[-1].set_by == "alice" and state.caps[-1].reason == "board decision 2026-11"
    with pytest.raises(LedgerError, match="the spec asks 1"):
        reserve(ledger, release="r2", cap=PureDP(1))  # the spec still says 1
    reserve(ledger, release="r2", cap=PureDP(2))
    with pytest.raises(LedgerError, match="say why"):
        ledger.set_budget("ds", PureDP(3), reason=" ")
    ledger.close()


def test_the_ledger_is_append_only(url):
    ledger = open_ledger(url)
    statements: list[str] = []
    sa.event.listen(ledger.engine, "before_cursor_execute",
                    lambda conn, cursor, statement, *a: statements.append(statement.split()[0].upper()))
    run = reserve(ledger)
    ledger.commit(run)
    ledger.set_budget("ds", PureDP(3), reason="more")
    run = reserve(ledger, release="r2", cap=PureDP(3))
    ledger.void(run, reason="never ran")
    assert "UPDATE" not in statements and "DELETE" not in statements
    assert "INSERT" in statements
    ledger.close()


def test_amounts_are_stored_as_exact_text(url):
    ledger = open_ledger(url)
    reserve(ledger, charges=[("t", PureDP(Fraction(1, 3)))])
    with ledger.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT amount FROM charges")).scalar_one() == "1/3"
        assert conn.execute(sa.text("SELECT value FROM dprelease_meta WHERE key = 'schema_version'")).scalar_one() == "6"
    ledger.close()


def test_a_new_dataset_needs_a_lifetime_budget(url):
    ledger = open_ledger(url)
    with pytest.raises(LedgerError, match="declares no dataset.lifetime_budget"):
        reserve(ledger, cap=None)
    ledger.close()


def _race(url: str, release: str, barrier) -> str:
    ledger = Ledger.open(resolve_location(url))
    barrier.wait()
    try:
        ledger.reserve(dataset="ds", release=release, charges=[("t", PureDP(Fraction(1, 2)))],
                       spec_fingerprint="sha256:x", lifetime_from_spec=PureDP(1))
        return "won"
    except OverBudgetError:
        return "refused"
    finally:
        ledger.close()


@pytest.mark.slow
def test_racing_runs_for_the_last_of_a_budget_exactly_one_wins(url):
    ledger = open_ledger(url)
    reserve(ledger, release="first", charges=[("t", PureDP(Fraction(1, 2)))])
    ledger.close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            outcomes = pool.starmap(_race, [(url, f"racer-{i}", barrier) for i in range(4)])
    assert sorted(outcomes) == ["refused", "refused", "refused", "won"]
    ledger = open_ledger(url)
    assert ledger.state("ds").spent == PureDP(1)
    ledger.close()


# ---------------------------------------------------------------- location (SQLite only)


def test_location_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("DPRELEASE_LEDGER")  # set for every test by conftest
    spec_dir = tmp_path / "specs"
    assert resolve_location().source == "default"
    assert resolve_location().sqlite_path == default_path()
    assert resolve_location(None, "l.sqlite", spec_dir).sqlite_path == spec_dir / "l.sqlite"
    monkeypatch.setenv("DPRELEASE_LEDGER", str(tmp_path / "env.sqlite"))
    # a pin is a pin: the variable chooses only for a spec that pins none (issue 27; the full table of
    # sources is tests/test_ledger_birth.py::test_the_precedence_of_every_source)
    assert resolve_location(None, "l.sqlite", spec_dir).sqlite_path == spec_dir / "l.sqlite"
    assert resolve_location(None, "l.sqlite", spec_dir).env_ignored
    assert resolve_location().sqlite_path == tmp_path / "env.sqlite"
    assert resolve_location(str(tmp_path / "cli.sqlite"), "l.sqlite", spec_dir).source == "--ledger"
    assert resolve_location(str(tmp_path / "cli.sqlite"), "l.sqlite", spec_dir).pin is not None


def test_default_follows_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == tmp_path / "data" / "dprelease" / "ledger.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".local" / "share" / "dprelease" / "ledger.sqlite"


def test_the_working_directory_never_means_a_fresh_budget(tmp_path, cli_process, monkeypatch):
    """The same spec planned from two directories sees the same spend."""
    monkeypatch.delenv("DPRELEASE_LEDGER")  # the spec's ledger: decides
    spec = write_spec(tmp_path, (SPECS / "good" / "three_tables.yaml").read_text()
                      .replace("budget: {epsilon: 1}", "budget: {epsilon: 1}\nledger: ledger.sqlite"))
    ledger = init_at(resolve_location(None, "ledger.sqlite", tmp_path))
    reserve(ledger, dataset="three-tables-data", release="old", cap=PureDP(10), charges=[("t", PureDP(3))])
    ledger.close()
    for cwd in (tmp_path, tmp_path.parent, tmp_path / "elsewhere"):
        cwd.mkdir(exist_ok=True)
        result = cli_process("plan", spec, "--json", cwd=cwd)
        assert json.loads(result.stdout)["lifetime"]["spent"] == "3", cwd
        assert f": sqlite:///{tmp_path / 'ledger.sqlite'} (chosen by the spec's ledger: key)" in result.stderr


def test_relative_locations_that_would_depend_on_the_cwd_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for relative in ("rel.sqlite", "sqlite:///rel.sqlite", "./x/l.sqlite"):
        with pytest.raises(LedgerError, match="relative path"):
            resolve_location(relative)
        monkeypatch.setenv("DPRELEASE_LEDGER", relative)
        with pytest.raises(LedgerError, match="relative path"):
            resolve_location()
        monkeypatch.delenv("DPRELEASE_LEDGER")
    assert resolve_location("sqlite:///" + str(tmp_path / "a.sqlite")).sqlite_path == tmp_path / "a.sqlite"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_location().sqlite_path == tmp_path / "home" / ".local" / "share" / "dprelease" / "ledger.sqlite"
    with pytest.raises(LedgerError, match="synchronous"):
        resolve_location("postgresql+asyncpg://u@h/db")
    with pytest.raises(LedgerError, match="in-memory"):
        resolve_location("sqlite://")
    with pytest.raises(LedgerError, match="not supported"):
        resolve_location("mysql://u@h/db")


def test_ledger_file_and_directory_are_owner_only(tmp_path):
    path = tmp_path / "new" / "ledger.sqlite"
    init_at(resolve_location(str(path))).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_a_foreign_or_broken_database_is_refused_cleanly(tmp_path):
    other = tmp_path / "other.sqlite"
    engine = sa.create_engine(f"sqlite:///{other}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE accounts (id INTEGER)")
    engine.dispose()
    with pytest.raises(LedgerError, match="other tables"):
        init_at(resolve_location(str(other)))
    garbage = tmp_path / "notes.txt"
    garbage.write_text("release: not a database\n" * 100)
    with pytest.raises(LedgerError, match="cannot open"):
        init_at(resolve_location(str(garbage)))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(LedgerError, match="cannot create"):
        init_at(resolve_location(str(blocker / "l.sqlite")))


def test_open_without_create_creates_nothing(tmp_path):
    path = tmp_path / "absent" / "ledger.sqlite"
    assert Ledger.open(resolve_location(str(path))) is None
    assert not path.parent.exists()


def test_a_newer_schema_is_refused(tmp_path):
    ledger = open_ledger(str(tmp_path / "l.sqlite"))
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO dprelease_meta VALUES ('x', 'y')"))
        conn.exec_driver_sql("UPDATE dprelease_meta SET value = '99' WHERE key = 'schema_version'")
    ledger.close()
    with pytest.raises(LedgerError, match="schema version 99"):
        Ledger.open(resolve_location(str(tmp_path / "l.sqlite")))


def _open_fresh(url: str, barrier) -> str:
    barrier.wait()
    ledger = init_at(resolve_location(url))
    ledger.close()
    return "ok"


@pytest.mark.slow
def test_processes_creating_one_new_ledger_at_once_all_succeed(url):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            assert pool.starmap(_open_fresh, [(url, barrier)] * 4) == ["ok"] * 4
    ledger = open_ledger(url)
    with ledger.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM dprelease_meta WHERE key = 'schema_version'")).scalar_one() == 1
        assert conn.execute(sa.text("SELECT COUNT(*) FROM dprelease_meta WHERE key = 'ledger_id'")).scalar_one() == 1
    ledger.close()


def test_a_schema_4_ledger_gains_typed_terms_and_keeps_every_figure(url):
    """Schema 4 → 5 on both engines: the one-string terms become typed columns, the caps' and
    charges' ``epsilon`` column (ρ under zCDP terms) becomes ``amount``; figures unchanged, and a
    second opening finds it done."""
    ledger = open_ledger(url)
    ledger.set_budget("z", ZCDP(2), reason="test", terms=Terms("zcdp"))
    ledger.reserve(dataset="z", release="r", charges=[("t", ZCDP(Fraction(1, 8)))], spec_fingerprint="x",
                   lifetime_from_spec=None, terms=Terms("zcdp"))
    reserve(ledger, dataset="p", cap=PureDP(3), charges=[("t", PureDP(Fraction(1, 3)))])
    approx, bounded = Terms("approx"), Terms("pure", change=True, unit_id="PID")
    ledger.set_budget("a", ApproxDP(5, Fraction(1, 10**5)), reason="test", terms=approx)
    ledger.set_budget("a", ApproxDP(6, Fraction(2, 10**5)), reason="raised")  # a cap change, with its δ
    ledger.reserve(dataset="a", release="r", charges=[("t", ApproxDP(Fraction(1, 2), Fraction(1, 10**6))),
                                                      ("u", ApproxDP(Fraction(1, 4), Fraction(0)))],
                   spec_fingerprint="x", lifetime_from_spec=None, terms=approx)
    ledger.set_budget("b", PureDP(1), reason="test", terms=bounded)
    ledger.reserve(dataset="b", release="r", charges=[("t", PureDP(Fraction(1, 5)))], spec_fingerprint="x",
                   lifetime_from_spec=None, terms=bounded)
    names = ("z", "p", "a", "b")
    before = [ledger.state(d) for d in names]
    assert before[2].spent == ApproxDP(Fraction(3, 4), Fraction(1, 10**6))
    assert before[2].budget == ApproxDP(6, Fraction(2, 10**5)) and before[3].terms == bounded
    with ledger.engine.begin() as conn:  # back to schema 4's layout
        for table in ("budget_caps", "charges"):
            conn.execute(sa.text(f"ALTER TABLE {table} RENAME COLUMN amount TO epsilon"))
        for column in ("guarantee", "change_one_record", "unit_id"):
            conn.execute(sa.text(f"ALTER TABLE datasets DROP COLUMN {column}"))
        conn.execute(sa.text("UPDATE dprelease_meta SET value = '4' WHERE key = 'schema_version'"))
    ledger.close()
    for _ in range(2):
        reopened = open_ledger(url)
        assert [reopened.state(d) for d in names] == before
        assert before[0].terms == Terms("zcdp") and before[0].spent == ZCDP(Fraction(1, 8))
        with reopened.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT amount FROM charges ORDER BY id")).scalars().all() == [
                "1/8", "1/3", "1/2", "1/4", "1/5"]
            assert conn.execute(sa.text("SELECT name, guarantee, change_one_record, unit_id FROM datasets ORDER BY name")
                                ).all() == [("a", "approx", False, None), ("b", "pure", True, "PID"),
                                            ("p", "pure", False, None), ("z", "zcdp", False, None)]
        reopened.close()


# ---------------------------------------------------------------- typed budgets of the terms' kind


def _rows(ledger: Ledger) -> dict[str, int]:
    with ledger.engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one()
                for t in ("datasets", "budget_caps", "runs", "charges", "run_events", "leases")}


def test_a_charge_of_another_kind_than_the_terms_is_refused_and_nothing_is_written(url):
    """The ledger knows its terms: a ρ charged to a pure dataset, an ε to a zCDP one, a pure ε
    to an (ε, δ) one (it must be converted explicitly, ``as_approx``), or a bare Fraction (the
    untyped API of before) is a TypeError before any row is written, new dataset or not."""
    ledger = open_ledger(url)
    ledger.set_budget("z", ZCDP(2), reason="test", terms=Terms("zcdp"))
    ledger.set_budget("a", ApproxDP(5, Fraction(1, 10**5)), reason="test", terms=Terms("approx"))
    reserve(ledger, dataset="p")  # pure, with one run
    before = _rows(ledger)
    statements: list[str] = []
    sa.event.listen(ledger.engine, "before_cursor_execute",
                    lambda conn, cursor, statement, *a: statements.append(statement.split()[0].upper()))
    wrong = [("p", Terms("pure"), ZCDP(Fraction(1, 8))), ("z", Terms("zcdp"), PureDP(Fraction(1, 2))),
             ("a", Terms("approx"), PureDP(Fraction(1, 2))), ("p", Terms("pure"), Fraction(1, 4)),
             ("new", Terms("pure"), ZCDP(Fraction(1, 8))), ("z", Terms("zcdp"), Fraction(1, 8))]
    for dataset, terms, charge in wrong:
        with pytest.raises(TypeError, match=f"the charge of 't' is .*ledger terms are '{terms.text}'"):
            ledger.reserve(dataset=dataset, release="r2", charges=[("u", PureDP(Fraction(1, 8))), ("t", charge)]
                           if terms.kind == "pure" else [("t", charge)], spec_fingerprint="x",
                           lifetime_from_spec=PureDP(1) if dataset == "new" else None, terms=terms)
    with pytest.raises(TypeError, match="a charge is \\(measurement, budget\\)"):  # the (key, ε, δ) of before
        ledger.reserve(dataset="a", release="r2", charges=[("t", Fraction(1, 2), Fraction(1, 10**6))],
                       spec_fingerprint="x", lifetime_from_spec=None, terms=Terms("approx"))
    with pytest.raises(TypeError, match="the spec's lifetime budget is a pure budget"):
        ledger.reserve(dataset="z", release="r2", charges=[("t", ZCDP(Fraction(1, 8)))], spec_fingerprint="x",
                       lifetime_from_spec=PureDP(2), terms=Terms("zcdp"))
    for dataset, cap in (("z", PureDP(2)), ("p", ZCDP(2)), ("a", PureDP(5)), ("p", ApproxDP(1, Fraction(1, 10**6)))):
        with pytest.raises(TypeError, match=f"the new lifetime cap of dataset '{dataset}' is a"):
            ledger.set_budget(dataset, cap, reason="wrong unit")
    with pytest.raises(TypeError, match="a lifetime cap is a budget"):
        ledger.set_budget("p", Fraction(2), reason="untyped")
    assert "INSERT" not in statements and _rows(ledger) == before
    assert ledger.state("new") is None and [r.release for r in ledger.state("p").runs] == ["r1"]
    ledger.close()


def test_states_and_runs_read_back_typed_budgets_of_the_terms_kind(url):
    """A pure, a zCDP and an (ε, δ) dataset: cap, caps, spend, remaining, each run's charge and its
    measurements' charges come back as PureDP, ZCDP (ρ) and ApproxDP (with δ inside), as does
    what a reservation was checked against."""
    ledger = open_ledger(url)
    reserve(ledger, dataset="p", cap=PureDP(3), charges=[("t", PureDP(Fraction(1, 3))), ("u", PureDP(Fraction(1, 6)))])
    ledger.set_budget("z", ZCDP(2), reason="test", terms=Terms("zcdp"))
    granted_z = ledger.reserve(dataset="z", release="r", charges=[("t", ZCDP(Fraction(1, 8)))], spec_fingerprint="x",
                               lifetime_from_spec=ZCDP(2), terms=Terms("zcdp"))
    approx = Terms("approx")
    ledger.set_budget("a", ApproxDP(5, Fraction(1, 10**5)), reason="test", terms=approx)
    ledger.reserve(dataset="a", release="r", charges=[("t", ApproxDP(Fraction(1, 2), Fraction(1, 10**6))),
                                                      ("u", PureDP(Fraction(1, 4)).as_approx())],
                   spec_fingerprint="x", lifetime_from_spec=None, terms=approx)
    granted_a = ledger.reserve(dataset="a", release="r2", charges=[("t", ApproxDP(1, Fraction(2, 10**6)))],
                               spec_fingerprint="x", lifetime_from_spec=ApproxDP(5, Fraction(1, 10**5)), terms=approx)
    assert (granted_z.spent_before, granted_z.budget) == (ZCDP(0), ZCDP(2))
    assert (granted_a.spent_before, granted_a.budget) == (ApproxDP(Fraction(3, 4), Fraction(1, 10**6)),
                                                          ApproxDP(5, Fraction(1, 10**5)))
    expected = {
        "p": (PureDP, PureDP(3), PureDP(Fraction(1, 2)), [PureDP(Fraction(1, 2))],
              [("t", PureDP(Fraction(1, 3))), ("u", PureDP(Fraction(1, 6)))]),
        "z": (ZCDP, ZCDP(2), ZCDP(Fraction(1, 8)), [ZCDP(Fraction(1, 8))], [("t", ZCDP(Fraction(1, 8)))]),
        "a": (ApproxDP, ApproxDP(5, Fraction(1, 10**5)), ApproxDP(Fraction(7, 4), Fraction(3, 10**6)),
              [ApproxDP(Fraction(3, 4), Fraction(1, 10**6)), ApproxDP(1, Fraction(2, 10**6))],
              [("t", ApproxDP(Fraction(1, 2), Fraction(1, 10**6))), ("u", ApproxDP(Fraction(1, 4), Fraction(0)))]),
    }
    for name, (kind, cap, spent, run_charges, first_run) in expected.items():
        state = ledger.state(name)
        assert state.terms.kind == kind.kind
        assert all(type(b) is kind for b in (state.budget, state.spent, state.remaining,
                                               *(c.budget for c in state.caps), *(r.charge for r in state.runs),
                                               *(b for r in state.runs for _, b in r.charges)))
        assert state.budget == cap == state.caps[-1].budget and state.spent == spent
        assert state.remaining == cap - spent
        assert [r.charge for r in state.runs] == run_charges and list(state.runs[0].charges) == first_run
        run_id = state.runs[0].run_id
        assert ledger.find_run(run_id)[1].charge == run_charges[0]
    with pytest.raises(TypeError, match="cannot add"):  # a ρ is not an ε: the types keep them apart
        ledger.state("z").spent + ledger.state("p").spent
    ledger.close()


def test_an_approx_charge_recorded_without_its_delta_reads_as_delta_zero(tmp_path):
    """A charge row of an (ε, δ) dataset with a NULL δ (the untyped API of before accepted one) is
    read as δ = 0, as every earlier version summed it; a cap without its δ is a damaged ledger."""
    ledger = open_ledger(str(tmp_path / "l.sqlite"))
    ledger.set_budget("a", ApproxDP(5, Fraction(1, 10**5)), reason="test", terms=Terms("approx"))
    run = ledger.reserve(dataset="a", release="r", charges=[("t", ApproxDP(Fraction(1, 2), Fraction(1, 10**6)))],
                         spec_fingerprint="x", lifetime_from_spec=None, terms=Terms("approx")).run_id
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO charges (run_id, table_name, amount, delta) VALUES (:r, 'u', '1/4', NULL)"),
                     {"r": run})
    state = ledger.state("a")
    assert state.runs[0].charges[1] == ("u", ApproxDP(Fraction(1, 4), Fraction(0)))
    assert state.spent == ApproxDP(Fraction(3, 4), Fraction(1, 10**6))
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("UPDATE budget_caps SET delta = NULL"))
    with pytest.raises(LedgerError, match="without its δ in the ledger; the ledger is damaged"):
        ledger.state("a")
    ledger.close()


def test_an_epsilon_only_cap_change_keeps_the_delta_current_inside_its_transaction(url):
    """``ledger set-budget --epsilon E`` on an (ε, δ) dataset without --delta keeps the δ of the
    cap it replaces as read under the dataset's lock: an operator's δ change made in between (a
    concurrent set-budget) is never undone by the stale δ the other operator's CLI read first."""
    ledger = open_ledger(url)
    ledger.set_budget("a", ApproxDP(5, Fraction(1, 10**5)), reason="initial", terms=Terms("approx"))
    stale = ledger.state("a").budget  # what a second operator's CLI read before the δ change
    ledger.set_budget("a", ApproxDP(5, Fraction(1, 10**6)), reason="δ tightened")
    after = ledger.set_budget("a", ApproxDP(7, stale.delta), reason="ε raised", keep_delta=True)
    assert after.budget == ApproxDP(7, Fraction(1, 10**6))
    explicit = ledger.set_budget("a", ApproxDP(7, Fraction(1, 10**7)), reason="δ given")  # a δ given is written
    assert explicit.budget == ApproxDP(7, Fraction(1, 10**7))
    ledger.close()
