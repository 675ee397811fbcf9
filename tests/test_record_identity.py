"""The same people, whatever the file (issue 27, items 4 and 5).

A dataset's identity is its records (``dprelease/data/identity.py``): national2019 released
once; each re-export of it (``benchmarks/reexports.py``: also two columns added or dropped, the
header lower-cased, rows repeated) under a new dataset name in the same ledger and output
directory is refused before anything is reserved, naming the earlier dataset, with no figure
of the data in the refusal; the shipped NIST excerpts are told apart, and so are their
projections on a few declared columns; ``evaluate`` recognises released data in any file and
never writes its report among published files.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchmarks.reexports import VARIANTS, write_reexports
from dprelease.data.identity import PLAIN_BYTES, THRESHOLD, Identity, Sketcher, identity_of
from dprelease.data.scan import Source
from dprelease.ledger import Ledger, resolve_location
from tests.conftest import ROOT, Result
from tests.ledgers import make_ledger

NIST = ROOT / "data" / "nist_acs"
FIRST = "nist-national-2019"


def dp(*args: object) -> Result:
    """``dprelease ARGS`` in this process, with no ledger from the environment (the specs pin theirs)."""
    from dprelease.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args], env={"DPRELEASE_LEDGER": None},
                                catch_exceptions=False)
    return Result(result.exit_code, result.stdout, result.stderr)


def sex_spec(directory: Path, data: Path, dataset: str, release: str, column: str = "SEX") -> Path:
    """A one-table release of ``data`` (its SEX column, named ``column`` there) as ``dataset``,
    pinned to ``directory``'s ledger."""
    fmt = "parquet" if data.suffix == ".parquet" else "csv"
    spec = directory / f"{release}.yaml"
    spec.write_text(f"""release: {release}
ledger: ledger.sqlite
dataset: {{name: {dataset}, path: {data}, format: {fmt}, na_values: ["N"], lifetime_budget: {{epsilon: 1}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1/4}}
columns:
  {column}: {{domain: [1, 2]}}
tables:
  - {{name: by_sex, group_by: [{column}], epsilon: 1/4}}
""")
    return spec


def ledger_runs(path: Path) -> list[tuple[str, str, str]]:
    ledger = Ledger.open(resolve_location(str(path)))
    assert ledger is not None
    try:
        return [(name, r.release, r.state) for name in ledger.datasets() for r in ledger.state(name).runs]
    finally:
        ledger.close()


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """national2019 published once as FIRST; its re-exports written beside it."""
    root = tmp_path_factory.mktemp("same-people")
    make_ledger(root / "ledger.sqlite")
    out = root / "out"
    result = dp("run", sex_spec(root, NIST / "national2019.csv", FIRST, "first"), "--output-dir", out,
                "--orchestrator", "inline")
    assert result.code == 0, result.stderr
    variants = write_reexports(NIST / "national2019.csv", NIST / "national2018.csv", root / "variants")
    return {"root": root, "out": out, "ledger": root / "ledger.sqlite", "variants": variants}


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_reexport_under_a_new_name_is_refused(released, variant):
    """Each re-export of the released file (two columns added, dropped or swapped, the header
    lower-cased, every row twice or three times, half of them twice among them), under a new
    dataset name, in the same ledger and output directory: exit 2 naming the earlier dataset
    and the fix, with no figure of the data in the words (they reach a scheduled run's Prefect
    log); nothing reserved or spent."""
    name = "renamed-" + "".join(c if c.isalnum() else "-" for c in variant.lower())
    column = "sex" if variant == "header lower-cased" else "SEX"
    spec = sex_spec(released["root"], released["variants"][variant], name, name, column)
    result = dp("run", spec, "--output-dir", released["out"], "--orchestrator", "inline")
    print(f"{variant}: {result.stderr.strip().splitlines()[-1]}")
    assert result.code == 2, result.output
    assert f"this data was already released as dataset '{FIRST}'" in result.stderr
    assert f"Release it as dataset.name: {FIRST}, which shares that budget" in result.stderr
    assert "Nothing was reserved or spent." in result.stderr
    why = result.stderr.split(f"this data was already released as dataset '{FIRST}'")[1].split(". The same people")[0]
    assert "the same records exactly" in why or "most of" in why, why
    assert not re.search(r"\d\s*%|\d\.\d", result.stderr), result.stderr  # no share, no figure of the data
    assert ledger_runs(released["ledger"]) == [(FIRST, "first", "committed")]


@pytest.mark.parametrize("variant, how", [("10% rows dropped", "of its records are records of that data"),
                                          ("10% rows added", "of that data's records are in it")])
def test_a_tenth_of_the_rows_dropped_or_added_shares_most_records(variant, how, tmp_path):
    """The estimate behind the refusal: about 0.9 or more either way (threshold 0.5)."""
    variants = write_reexports(NIST / "national2019.csv", NIST / "national2018.csv", tmp_path)
    first = identity_of(Source(NIST / "national2019.csv", "csv", ("N",)))
    found = identity_of(Source(variants[variant], "csv", ("N",))).overlap(first)
    assert found is not None and found.share >= 0.85 and how in found.how, found
    assert found.how.startswith("most of") and not any(c.isdigit() for c in found.how), found.how


def test_the_shipped_excerpts_are_told_apart(tmp_path):
    """Every pair of the NIST excerpts (other years, other states: other people) is not taken
    for the same people, and each publishes under its own name in one ledger."""
    identities = {n: identity_of(Source(NIST / f"{n}.csv", "csv", ("N",)))
                  for n in ("national2018", "national2019", "ma2019", "tx2019")}
    for a, b in itertools.combinations(identities, 2):
        assert identities[a].overlap(identities[b]) is None, (a, b)
        assert Identity.from_plain(identities[a].plain()).overlap(identities[b]) is None, (a, b)
    make_ledger(tmp_path / "ledger.sqlite")
    for n in identities:
        result = dp("run", sex_spec(tmp_path, NIST / f"{n}.csv", n, f"{n}-release"), "--output-dir", tmp_path / "out",
                    "--orchestrator", "inline")
        assert result.code == 0, (n, result.stderr)
    assert len(ledger_runs(tmp_path / "ledger.sqlite")) == 4


def projected(name: str, columns: tuple[str, ...]) -> Identity:
    """The identity of an excerpt's ``columns`` only (as a file of those columns would give)."""
    sketcher = Sketcher(("N",))
    src = Source(NIST / f"{name}.csv", "csv", ("N",))
    for _, batch in src.batches(src.files()[0], list(columns), list(columns)):
        sketcher.add(batch)
    return sketcher.identity()


@pytest.mark.parametrize("columns", [("PUMA", "SEX", "AGEP", "RAC1P", "HISP", "MSP"), ("PUMA", "SEX", "AGEP"),
                                     ("SEX", "AGEP", "RAC1P", "HISP")], ids=["demo's declared", "three", "four"])
def test_the_excerpts_projected_on_a_few_columns_are_told_apart(columns):
    """Few coded columns: most records recur (many people, one record), so other years share
    most of their records by chance; beyond chance they share none. The small excerpts
    (ma2019, tx2019) inside the national ones, where the chance that a record of the small one
    is found in the large one is highest (Good–Turing from the small one's own recurrence,
    times the size ratio), included; the four columns without PUMA are where the estimate
    before this model (the other data's recurrence) took ma2019 for people of national2019."""
    identities = {n: projected(n, columns) for n in ("national2018", "national2019", "ma2019", "tx2019")}
    for a, b in itertools.combinations(identities, 2):
        assert identities[a].overlap(identities[b]) is None, (a, b, identities[a].shares(identities[b]))
    years = identities["national2018"].records.within(identities["national2019"].records)
    assert years.raw > THRESHOLD and years.chance > years.raw  # most records shared, as chance would have it


def test_column_names_are_canonical():
    """A column is its name case-folded, with only its letters and digits: the same records
    whatever the header's case, spaces or punctuation; another name is another column."""
    import pyarrow as pa

    from dprelease.data.record_hash import canonical_name

    assert {canonical_name(n) for n in ("SEX", "sex", " Sex ", "s_e_x", '"SEX"', "ＳＥＸ")} == {"sex"}
    assert canonical_name("WGTP_1") == canonical_name("wgtp-1") == "wgtp1" != canonical_name("WGTP2")

    def digest(names: list[str]) -> str:
        sketcher = Sketcher()
        sketcher.add(pa.table({n: [1, 2, 3] for n in names}))
        return sketcher.identity().digest

    assert digest(["SEX", "AGEP"]) == digest(["sex", "agep"]) == digest([" Sex", "AGE_P"])
    assert digest(["SEX", "AGEP"]) != digest(["SEX", "AGE"])


def test_the_identity_does_not_depend_on_the_file(tmp_path):
    """Rows reordered, line endings, quoting, CSV ↔ Parquet: the same records exactly; the
    sealed form is of one size whatever the rows."""
    variants = write_reexports(NIST / "national2019.csv", NIST / "national2018.csv", tmp_path)
    first = identity_of(Source(NIST / "national2019.csv", "csv", ("N",)))
    for variant in ("reordered", "CRLF", "quoted", "Parquet", "Parquet → CSV"):
        path = variants[variant]
        found = identity_of(Source(path, "parquet" if path.suffix == ".parquet" else "csv", ("N",)))
        assert found.digest == first.digest, variant
    small = identity_of(Source(NIST / "ma2019.csv", "csv", ("N",)))
    assert len(small.plain()) == len(first.plain()) == PLAIN_BYTES
    assert THRESHOLD == 0.5


def test_a_reexport_in_another_ledger_beside_the_release_is_refused(released, tmp_path):
    """The rows reordered, under a new name, with a fresh ledger of its own, into the output
    directory of the first release: its run record's sealed identity (under the first ledger's
    key, readable here) is the same people; refused, nothing reserved in either ledger."""
    make_ledger(tmp_path / "ledger.sqlite")
    spec = sex_spec(tmp_path, released["variants"]["reordered"], "elsewhere", "elsewhere")
    result = dp("run", spec, "--output-dir", released["out"], "--orchestrator", "inline")
    print(result.stderr.strip().splitlines()[-1])
    assert result.code == 2, result.output
    assert f"holds release 'first' of the same data (as dataset '{FIRST}')" in result.stderr
    assert ledger_runs(tmp_path / "ledger.sqlite") == []
    assert ledger_runs(released["ledger"]) == [(FIRST, "first", "committed")]


def test_evaluate_recognises_released_data_in_another_file(released, tmp_path):
    """`evaluate` (NOT PRIVATE) of the released data with its rows reordered, under a new name:
    refused, nothing recorded."""
    spec = sex_spec(released["root"], released["variants"]["reordered"], "evaluated-copy", "evaluated-copy")
    result = dp("evaluate", spec, "--trials", "1")
    print(result.stderr.strip().splitlines()[-1])
    assert result.code == 2, result.output
    assert f"dataset '{FIRST}' was released from data of the same people" in result.stderr
    assert "the same records exactly" in result.stderr
    ledger = Ledger.open(resolve_location(str(released["ledger"])))
    try:
        assert ledger.evaluations_of("evaluated-copy") == []
    finally:
        ledger.close()


def test_evaluate_never_writes_among_published_files(released, tmp_path):
    """--output inside a published release, or anywhere in an output directory the ledger's
    releases went to: refused before the data is read; nothing written or recorded."""
    make_ledger(tmp_path / "ledger.sqlite")
    spec = sex_spec(tmp_path, NIST / "ma2019.csv", "test-data", "test-eval")
    spec.write_text(spec.read_text().replace("ledger: ledger.sqlite", f"ledger: {released['ledger']}"))
    inside_release = released["out"] / "first" / "evaluation.md"
    inside_outputs = released["out"] / "notes" / "evaluation.md"
    for target, words in ((inside_release, "is a published release (it holds manifest.json)"),
                          (inside_outputs, "is an output directory that releases are published to")):
        result = dp("evaluate", spec, "--trials", "1", "--output", target)
        print(result.stderr.strip().splitlines()[-1])
        assert result.code == 2 and words in result.stderr, result.output
        assert not target.exists()
    ledger = Ledger.open(resolve_location(str(released["ledger"])))
    try:
        assert ledger.evaluations_of("test-data") == []
    finally:
        ledger.close()
    elsewhere = tmp_path / "other-ledgers-outputs"  # releases another ledger published: a folder with a manifest
    (elsewhere / "r1").mkdir(parents=True)
    (elsewhere / "r1" / "manifest.json").write_text("{}")
    result = dp("evaluate", spec, "--trials", "1", "--output", elsewhere / "evaluation.md")
    assert result.code == 2 and "holds published releases (a folder with manifest.json)" in result.stderr, result.output
    assert not (elsewhere / "evaluation.md").exists()
    fine = dp("evaluate", spec, "--trials", "1", "--output", tmp_path / "evaluation.md")
    assert fine.code == 0, fine.output
    assert (tmp_path / "evaluation.md").exists()


def test_a_schema_5_ledger_gains_the_table_of_identities(tmp_path):
    """Schema 5 → 6 adds the table (idempotent: a second opening finds it done); a run reserved
    after it records its data's identity, keyed and sealed."""
    import sqlite3

    from dprelease.accounting import PureDP

    path = make_ledger(tmp_path / "l.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE data_identities")
        conn.execute("UPDATE dprelease_meta SET value = '5' WHERE key = 'schema_version'")
    identity = identity_of(Source(NIST / "ma2019.csv", "csv", ("N",)))
    for _ in range(2):
        ledger = Ledger.open(resolve_location(str(path)))
        assert ledger is not None
        ledger.close()
    ledger = Ledger.open(resolve_location(str(path)))
    try:
        ledger.reserve(dataset="d", release="r", charges=[("t", PureDP(1))], spec_fingerprint="x",
                       lifetime_from_spec=PureDP(2), identity=identity)
        assert ledger.same_people(identity) == ("d", "the same records exactly")
        assert ledger.same_people(identity, "d") is None  # its own dataset's data
    finally:
        ledger.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM dprelease_meta WHERE key = 'schema_version'").fetchone() == ("6",)
        (records, sketch), = conn.execute("SELECT records, sketch FROM data_identities").fetchall()
    assert records.startswith("hmac-sha256:") and sketch.startswith("sealed-aes256gcm:")


def test_values_are_canonical_whatever_the_file_writes():
    """One record written in many ways is one record: numbers as numbers (5000.0 = 5000 = int
    5000, +5 = 5, 1.50 = 1.5, 007 = 7, -0 = 0), text trimmed, an empty value, a null, a NaN and
    the spec's na_values one null, the column order free; a different value is another record."""
    import pyarrow as pa

    from dprelease.data.identity import Sketcher

    def digest(table: pa.Table, na: tuple[str, ...] = ("N",)) -> str:
        sketcher = Sketcher(na)
        sketcher.add(table)
        return sketcher.identity().digest

    text = pa.table({"INC": ["5000.0", "+5", "1.50", "007", "-0"], "CODE": [" ab", "N", "", None, "x "]})
    typed = pa.table({"CODE": pa.array(["ab", None, None, None, "x"]).dictionary_encode(),
                      "INC": pa.array([5000, 5, 1.5, 7, 0], pa.float64())})
    ints = pa.table({"INC": pa.array([5000, 5, 1, 7, 0], pa.int16()), "CODE": ["ab", "N", "", None, "x"]})
    assert digest(text) == digest(typed)
    assert digest(ints) != digest(text)  # 1 is not 1.5
    assert digest(ints.set_column(0, "INC", pa.array([5000, 5, 1, 7, 0], pa.int64()))) == digest(ints)
    assert digest(ints.set_column(0, "INC", pa.array(["5000", "5", "1", "7", "0"]))) == digest(ints)
    assert digest(text, na=()) != digest(text)  # "N" is a value unless the spec says it marks a missing one


def test_a_stored_identity_of_another_version_is_passed_over(tmp_path):
    """A sealed identity this version cannot read (another layout): the ledger passes over it
    (that run's data is recognised by its bytes and its records' digest only) and reserves."""
    from dprelease.accounting import PureDP

    class Earlier:  # an identity as another version sealed it: a layout this one cannot read
        digest = "records-sha256:" + "00" * 32

        def plain(self) -> bytes:
            return b"dprid\x00\x00\x00" + bytes(1000)

    ledger = Ledger.open(resolve_location(str(make_ledger(tmp_path / "l.sqlite"))))
    mine = identity_of(Source(NIST / "ma2019.csv", "csv", ("N",)))
    try:
        for dataset, identity in (("earlier", Earlier()), ("now", mine)):
            ledger.reserve(dataset=dataset, release="r", charges=[("t", PureDP(1))], spec_fingerprint="x",
                           lifetime_from_spec=PureDP(2), identity=identity)
        assert ledger.same_people(mine, "now") is None
    finally:
        ledger.close()


def test_the_chance_model_s_poisson_expectation_is_exact():
    """E[min(c, X)], X Poisson of mean λ, against the direct sum of min(c, j) P(X = j) (the pmf
    in log space), to 1e-9; above a mean of 700, min(c, λ), which bounds it from above (Jensen:
    more chance, never less)."""
    import math

    import numpy as np

    from dprelease.data.sketches import expected_min

    def direct(c: int, lam: float) -> float:
        return sum(min(c, j) * math.exp(-lam + j * math.log(lam) - math.lgamma(j + 1)) if lam else 0.0
                   for j in range(int(lam + 40 * math.sqrt(lam) + 200)))

    counts = np.array([1, 2, 5, 40, 1, 3, 300, 2])
    means = np.array([0.0, 0.3, 3.0, 50.0, 0.01, 400.0, 250.0, 900.0])
    got = expected_min(counts, means)
    for c, lam, e in zip(counts[:-1], means[:-1], got[:-1]):
        assert abs(e - direct(int(c), float(lam))) < 1e-9, (c, lam, e)
    assert got[-1] == 2.0 and direct(2, 900.0) <= 2.0 + 1e-9


def test_a_scheduled_run_of_a_reexport_logs_its_refusal_without_a_figure(released, monkeypatch, caplog):
    """A scheduled run (the flow's body, bound as `dprelease schedule` binds it) of a re-export
    under a new name: refused by the ledger, one ERROR line in the run's log and the flow's
    state, which say "most of its records" and carry no share (Prefect keeps its logs)."""
    import logging

    import prefect

    from dprelease.serve import orchestrate
    from tests.schedules import bind_here

    logger = logging.getLogger("test-scheduled-identity")
    monkeypatch.setattr(prefect, "get_run_logger", lambda: logger)
    monkeypatch.setattr(logger, "handlers", [caplog.handler])
    monkeypatch.delenv("DPRELEASE_LEDGER", raising=False)
    spec = sex_spec(released["root"], released["variants"]["10% rows dropped"], "scheduled-copy", "scheduled-copy")
    bind_here(monkeypatch, spec, released["out"], require_approval=False)  # as `dprelease schedule` binds
    with caplog.at_level(logging.INFO, logger="test-scheduled-identity"):
        state = orchestrate.scheduled_release.fn(str(spec), None, str(released["out"]), False)
    logged = " ".join(r.getMessage() for r in caplog.records)
    print(state.message)
    assert state.is_failed() and state.message.startswith("refused (exit 2): this data was already released")
    assert "most of its records are records of that data" in logged
    assert not re.search(r"\d\s*%|\d\.\d", state.message + logged), logged
    assert ledger_runs(released["ledger"]) == [(FIRST, "first", "committed")]


@pytest.mark.parametrize("distinct", [3, 200, 5000, 10**9])
def test_a_bottom_k_sketch_is_the_k_smallest_values_with_their_counts(distinct):
    """A streamed sketch, in batches of every size, is exactly the k smallest distinct values of
    the whole stream with their counts: a few values (every row counted), some hundreds (most
    rows under the threshold, counted in place), thousands, all distinct."""
    from dprelease.data.sketches import Bottom

    rng = np.random.default_rng(distinct)
    values = rng.integers(0, 2**64 - 1, size=min(distinct, 10**6), dtype=np.uint64, endpoint=True)
    stream = values[rng.integers(0, values.size, size=60_000)]
    sketch = Bottom(256)
    at = 0
    for size in itertools.cycle([1, 7, 300, 4096, 20_000]):
        sketch.add(stream[at:at + size])
        at += size
        if at >= stream.size:
            break
    unique, counts = np.unique(stream, return_counts=True)
    assert sketch.rows == stream.size
    assert np.array_equal(sketch.hashes, unique[:256]) and np.array_equal(sketch.counts, counts[:256])


def test_the_identity_sketched_beside_the_reader_is_the_same(tmp_path, monkeypatch):
    """The run sketches each batch on a thread of its own while the check reads the next: the
    same identity as in line, whatever the batches; an error there reaches the caller, and
    the thread stops."""
    import threading

    import pyarrow.csv as pa_csv

    table = pa_csv.read_csv(NIST / "national2019.csv")
    in_line, beside = Sketcher(("N",)), Sketcher(("N",), beside=True)
    for batch in table.to_batches(max_chunksize=997):
        in_line.add(batch)
        beside.add(batch)
    assert beside.identity().plain() == in_line.identity().plain()
    assert not [t for t in threading.enumerate() if t.name.startswith("dprelease-identity")]

    failing = Sketcher(("N",), beside=True)
    monkeypatch.setattr(failing, "_add", lambda batch: (_ for _ in ()).throw(RuntimeError("a batch failed")))
    failing.add(table.slice(0, 10))
    with pytest.raises(RuntimeError, match="a batch failed"):
        failing.identity()
    assert not [t for t in threading.enumerate() if t.name.startswith("dprelease-identity")]


def test_a_dictionary_kept_from_one_batch_is_reused_only_while_equal():
    """Batches whose dictionaries differ, equal, or come back: the same hashes as plain text."""
    import pyarrow as pa

    from dprelease.data.record_hash import Missing, column_hashes, hashes_of

    values = [["a", "b", "a"], ["b", "c", None], ["b", "c", "c"], ["a", "b", "b"]]
    dictionaries = [["a", "b"], ["b", "c"], ["b", "c"], ["a", "b"]]
    kept: dict = {}
    for chunk, dictionary in zip(values, dictionaries):
        encoded = pa.DictionaryArray.from_arrays(pa.array([None if v is None else dictionary.index(v) for v in chunk],
                                                          pa.int32()), pa.array(dictionary))
        via_kept = hashes_of(column_hashes(encoded, "X", Missing(), kept), len(chunk))
        plain = hashes_of(column_hashes(pa.array(chunk, pa.string()), "X", Missing()), len(chunk))
        assert np.array_equal(via_kept, plain), chunk
    assert kept["X"][0].to_pylist() == ["a", "b"]
