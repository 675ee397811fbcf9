"""One lifetime budget per dataset, wherever a run starts (issue 18).

A ledger has an identity and proves it is the dataset's one place: a run never starts a budget
in a per-user default ledger, never publishes beside releases of its data that another ledger
spent, never starts a second budget for the same data under a new name; data fingerprints are
keyed (the ledger never holds or prints an invertible hash of the data); evaluations and
approvals are on the record.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
from fractions import Fraction
from pathlib import Path

import pytest

from dprelease.accounting import PureDP
from dprelease.data import file_fingerprint
from dprelease.errors import LedgerError
from dprelease.ledger import Ledger, resolve_location
from dprelease.ledger import keys
from tests.conftest import ROOT
from tests.test_run import child_env, run
from tests.ledgers import init_at, make_ledger

DATA = ROOT / "data" / "nist_acs" / "national2019.csv"


def demo_copy(directory: Path, *, ledger: str | None = "../ledgers/ledger.sqlite", release: str = "acs-demo-2019",
              dataset: str = "nist-acs-national-2019", extra: str = "") -> Path:
    """The shipped demo spec in ``directory/configs``, its data and domains by absolute path."""
    text = (ROOT / "configs" / "acs_demo.yaml").read_text()
    text = text.replace("ledger: ../ledgers/nist-acs.sqlite\n", "" if ledger is None else f"ledger: {ledger}\n")
    text = text.replace("path: ../data/nist_acs/national2019.csv", f"path: {DATA}")
    text = text.replace("domain_file: domains/puma.txt", f"domain_file: {ROOT / 'configs' / 'domains' / 'puma.txt'}")
    text = text.replace("release: acs-demo-2019", f"release: {release}")
    text = text.replace("  name: nist-acs-national-2019 ", f"  name: {dataset} ")
    assert f"path: {DATA}" in text and (ledger is not None) == ("ledger:" in text)
    (directory / "configs").mkdir(parents=True, exist_ok=True)
    path = directory / "configs" / f"{release}-{dataset}.yaml"
    path.write_text(text + extra)
    return path


def ledger_runs(path: Path) -> list[tuple[str, str, str]]:
    """(dataset, release, state) of every run in the ledger at ``path`` ([] if there is none)."""
    opened = Ledger.open(resolve_location(str(path)))
    if opened is None:
        return []
    try:
        return [(name, r.release, r.state) for name in opened.datasets() for r in opened.state(name).runs]
    finally:
        opened.close()


def home_env(release_env: dict, home: Path) -> dict:
    """Another user: another HOME, and nothing else that would point at a ledger."""
    return {**release_env, "HOME": str(home), "XDG_DATA_HOME": None, "XDG_CONFIG_HOME": None, "DPRELEASE_LEDGER": None}


@pytest.fixture(scope="module")
def published(tmp_path_factory, release_env_module):
    """The demo, pinned to a project ledger, approved by a named reviewer and published once."""
    root = tmp_path_factory.mktemp("project")
    spec = demo_copy(root)
    out = root / "outputs"
    env = home_env(release_env_module, root / "home-1")
    born = run_cli(["ledger", "init", "--spec", spec, "--reason", "the project's budget"], env)
    assert born.returncode == 0, born.stderr
    approve = run_cli(["plan", spec, "--approve", "--by", "Ada Reviewer"], env)
    assert approve.returncode == 0, approve.stderr
    proc = run(spec, "--output-dir", out, env=env)
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "spec": spec, "out": out, "ledger": root / "ledgers" / "ledger.sqlite", "env": env,
            "release_env": release_env_module, "stderr": proc.stderr}


def run_cli(args: list, env: dict, cwd: Path = ROOT):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "dprelease", *[str(a) for a in args]], cwd=cwd, env=child_env(env),
                          capture_output=True, text=True, timeout=180)


def test_the_run_says_where_the_budget_lives(published):
    ledger = Ledger.open(resolve_location(str(published["ledger"])))
    ledger_id, born = ledger.id, ledger.birth.record()
    ledger.close()
    assert f"ledger id {ledger_id}: sqlite:///{published['ledger']} (chosen by the spec's ledger: key)" \
        in published["stderr"]
    manifest = json.loads((published["out"] / "acs-demo-2019" / "manifest.json").read_text())
    assert manifest["ledger"] == {"id": ledger_id, "location": f"sqlite:///{published['ledger']}",
                                  "chosen_by": "the spec's ledger: key", "born": born}
    assert born["how"] == "dprelease ledger init" and born["reason"] == "the project's budget"
    internal = json.loads((published["out"] / "_internal" / "acs-demo-2019" / "run.json").read_text())
    assert internal["ledger_id"] == ledger_id and internal["data_fingerprint"].startswith("hmac-sha256:")
    plan = run_cli(["plan", published["spec"]], published["env"])
    assert f"Budget lives in: ledger id {ledger_id}" in plan.stdout
    listing = run_cli(["ledger", "--ledger", published["ledger"], "--json"], published["env"])
    assert json.loads(listing.stdout)["ledger"]["id"] == ledger_id


def test_a_second_home_is_refused_and_reserves_nothing(published):
    """The same spec run by another user (another HOME) into the same output directory."""
    env = home_env(published["release_env"], published["root"] / "home-2")
    again = run(published["spec"], "--output-dir", published["out"], env=env)
    assert again.returncode == 4, again.stderr  # the same pinned ledger: already released
    # the spec without its ledger: pin: the per-user default is never where a budget starts
    unpinned = demo_copy(published["root"] / "h2", ledger=None, release="acs-demo-2019-b")
    refused = run(unpinned, "--output-dir", published["out"], env=env)
    assert refused.returncode == 2 and "Pin it in the spec with `ledger: PATH`" in refused.stderr, refused.stderr
    assert not (published["root"] / "home-2" / ".local" / "share" / "dprelease" / "ledger.sqlite").exists()
    # ... and a fresh ledger of its own over the same outputs: refused, naming the first ledger
    fresh = published["root"] / "home-2" / "mine.sqlite"
    refused = run(unpinned, "--output-dir", published["out"], "--ledger", fresh, env=env)
    first = Ledger.open(resolve_location(str(published["ledger"])))
    first_id = first.id
    first.close()
    assert refused.returncode == 2, refused.stderr
    assert "holds release 'acs-demo-2019' of dataset 'nist-acs-national-2019'" in refused.stderr
    assert f"spent from the ledger {first_id} at sqlite:///{published['ledger']}" in refused.stderr
    assert ledger_runs(fresh) == []
    assert ledger_runs(published["ledger"]) == [("nist-acs-national-2019", "acs-demo-2019", "committed")]


def test_the_same_data_under_another_name_in_another_ledger_is_refused(published):
    renamed = demo_copy(published["root"] / "h3", ledger=None, release="other-1", dataset="other-name")
    fresh = published["root"] / "h3" / "fresh.sqlite"
    refused = run(renamed, "--output-dir", published["out"], "--ledger", fresh, env=published["env"])
    assert refused.returncode == 2, refused.stderr
    assert "holds release 'acs-demo-2019' of the same data (as dataset 'nist-acs-national-2019')" in refused.stderr
    assert ledger_runs(fresh) == []


def test_a_renamed_dataset_over_the_same_file_is_refused(published):
    renamed = demo_copy(published["root"], release="acs-renamed-1", dataset="acs-renamed")
    refused = run(renamed, "--output-dir", published["root"] / "elsewhere", env=published["env"])
    assert refused.returncode == 2, refused.stderr
    assert "this data was already released as dataset 'nist-acs-national-2019'" in refused.stderr
    assert "new dataset name" not in refused.stderr  # never advise a way around the budget
    assert ledger_runs(published["ledger"]) == [("nist-acs-national-2019", "acs-demo-2019", "committed")]
    # evaluate's guard: the same data under a new name is not evaluated in the open either
    evaluated = run_cli(["evaluate", renamed, "--trials", "1"], published["env"])
    assert evaluated.returncode == 2 and "was released from this data" in evaluated.stderr, evaluated.stderr


def test_the_approval_is_on_the_record_in_every_format(published):
    release = published["out"] / "acs-demo-2019"
    manifest = json.loads((release / "manifest.json").read_text())
    approval = manifest["approval"]
    assert approval["approved_by"] == "Ada Reviewer"
    assert approval["plan_fingerprint"] == manifest["spec_fingerprint"]
    md = (release / "budget_report.md").read_text()
    assert f"plan `{manifest['spec_fingerprint']}` approved by Ada Reviewer on {approval['approved_at'][:19]}" in md
    as_json = run_cli(["report", release, "--format", "json"], published["env"])
    assert json.loads(as_json.stdout)["approval"] == approval
    html = run_cli(["report", release, "--format", "html", "--output", published["root"] / "r.html"], published["env"])
    assert html.returncode == 0, html.stderr
    assert "approved by Ada Reviewer" in (published["root"] / "r.html").read_text()
    listing = json.loads(run_cli(["ledger", "--ledger", published["ledger"], "--json"], published["env"]).stdout)
    run_row = listing["datasets"][0]["releases"][0]
    assert run_row["approval"] == {"approved_by": "Ada Reviewer", "approved_at": approval["approved_at"],
                                   "plan_fingerprint": manifest["spec_fingerprint"]}


def test_approval_required_by_the_spec_or_the_ledger(tmp_path, release_env):
    spec = demo_copy(tmp_path, extra="approval: required\n")
    make_ledger(tmp_path / "ledgers" / "ledger.sqlite")
    env = home_env(release_env, tmp_path / "home")
    refused = run(spec, "--output-dir", tmp_path / "out", env=env)
    assert refused.returncode == 5 and "approval: required" in refused.stderr, refused.stderr
    ledger = tmp_path / "ledgers" / "ledger.sqlite"
    assert ledger_runs(ledger) == []
    # a recorded ledger policy requires it for a spec that says nothing
    plain = demo_copy(tmp_path, release="acs-demo-b")
    policy = run_cli(["ledger", "require-approval", "nist-acs-national-2019", "--ledger", ledger, "--reason",
                      "the board reviews every release"], env)
    assert policy.returncode == 0, policy.stderr
    refused = run(plain, "--output-dir", tmp_path / "out", env=env)
    assert refused.returncode == 5 and "the board reviews every release" in refused.stderr, refused.stderr
    assert ledger_runs(ledger) == []
    listing = run_cli(["ledger", "--ledger", ledger], env)
    assert "policy: approval required" in listing.stdout


def tiny_release(directory: Path, rows: list[tuple[int, int]], *, release: str = "tiny-1", extra: str = "") -> Path:
    """A tiny release, its ledger pinned beside it (``ledger.sqlite``, made on purpose if none is there)."""
    if not (directory / "ledger.sqlite").exists():
        make_ledger(directory / "ledger.sqlite")
    (directory / "tiny.csv").write_text("SEX,AGEP\n" + "".join(f"{s},{a}\n" for s, a in rows))
    spec = directory / "tiny.yaml"
    spec.write_text(f"""release: {release}
ledger: ledger.sqlite
dataset: {{name: tiny, path: tiny.csv, lifetime_budget: {{epsilon: 3}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  SEX: {{domain: [1, 2]}}
  AGEP: {{range: [0, 99]}}
tables:
  - name: by_sex
    group_by: [SEX]
    epsilon: 1
{extra}""")
    return spec


def candidate_file(known: bytes, sex: int, age: int) -> bytes:
    return known + f"{sex},{age}\n".encode()


def adversary(known: bytes, outputs: list[bytes]) -> list[tuple[int, int]]:
    """Knowing every row but the last, hash each candidate for it and look for the hash in
    everything the ledger and the release show: the candidates found."""
    found = []
    for sex in (1, 2):
        for age in range(100):
            digest = hashlib.sha256(candidate_file(known, sex, age)).hexdigest()
            if any(digest.encode() in out or digest.upper().encode() in out for out in outputs):
                found.append((sex, age))
    return found


def record_adversary(known: bytes, outputs: list[bytes], directory: Path) -> list[tuple[int, int]]:
    """The same adversary against the data's identity by its records (data/identity.py): for
    each candidate file, its exact records' digest, its sketches (raw, hex, base64) and, for a
    candidate row unlike every known row, that row's own record hash (raw and hex), looked for
    in everything shown."""
    import base64

    from dprelease.data.identity import identity_of
    from dprelease.data.scan import Source

    directory.mkdir(exist_ok=True)
    seen = set(known.decode().splitlines()[1:])
    found = []
    for sex in (1, 2):
        for age in range(100):
            path = directory / "candidate.csv"
            path.write_bytes(candidate_file(known, sex, age))
            plain = identity_of(Source(path, "csv"))
            path.write_bytes(b"SEX,AGEP\n" + f"{sex},{age}\n".encode())
            row = identity_of(Source(path, "csv")).records.hashes[0]
            needles = [plain.digest.encode(), plain.digest.removeprefix("records-sha256:").encode(),
                       plain.plain(), plain.plain().hex().encode(), base64.b64encode(plain.plain())]
            if f"{sex},{age}" not in seen:  # a known row's hash is there whoever the last person is
                needles += [int(row).to_bytes(8, "little"), int(row).to_bytes(8, "big"), f"{int(row):016x}".encode()]
            if any(needle in out for needle in needles for out in outputs):
                found.append((sex, age))
    return found


def test_the_strong_adversary_learns_nothing_from_the_ledger(tmp_path, release_env, monkeypatch):
    """All rows but one known (200 of 201): the ledger's listing, its database file, the manifest,
    the reports and the internal run record do not identify the last row among its 200
    candidates; the same search finds it at once where a plain hash is shown (the control)."""
    monkeypatch.delenv("DPRELEASE_LEDGER")
    known_rows = [(1 + i % 2, (7 * i) % 100) for i in range(200)]
    secret = (2, 42)
    spec = tiny_release(tmp_path, known_rows + [secret])
    known = (tmp_path / "tiny.csv").read_bytes()[: -len(b"2,42\n")]
    out = tmp_path / "out"
    proc = run(spec, "--output-dir", out, env=release_env)
    assert proc.returncode == 0, proc.stderr
    env = {**release_env}
    outputs = [run_cli(["ledger", "--ledger", tmp_path / "ledger.sqlite"], env).stdout.encode(),
               run_cli(["ledger", "--ledger", tmp_path / "ledger.sqlite", "--json"], env).stdout.encode(),
               run_cli(["plan", spec, "--json"], env).stdout.encode(),
               run_cli(["report", out / "tiny-1", "--format", "json"], env).stdout.encode(),
               (tmp_path / "ledger.sqlite").read_bytes(),
               proc.stdout.encode() + proc.stderr.encode()]
    outputs += [p.read_bytes() for p in (out / "tiny-1").rglob("*") if p.is_file()]
    outputs += [p.read_bytes() for p in (out / "_internal").rglob("*") if p.is_file()]
    assert b"tiny" in outputs[1] and b"by_sex" in outputs[1]  # the listing is about this release
    found = adversary(known, outputs)
    print(f"adversary: 200 candidates for the last row hashed, {len(found)} found in {len(outputs)} outputs")
    assert found == []
    plain = file_fingerprint(tmp_path / "tiny.csv")
    assert adversary(known, [plain.encode()]) == [secret]  # the control: a plain hash gives it away
    # the identity by its records: a keyed digest and sealed sketches in the ledger and the run record
    internal = json.loads((out / "_internal" / "tiny-1" / "run.json").read_text())
    assert internal["data_records"].startswith("hmac-sha256:") and internal["data_identity"].startswith("sealed-")
    with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
        stored = conn.execute("SELECT records, sketch FROM data_identities").fetchall()
    assert len(stored) == 1 and stored[0][0].startswith("hmac-sha256:") and stored[0][1].startswith("sealed-")
    found = record_adversary(known, outputs, tmp_path / "adversary")
    print(f"record adversary: 200 candidates' record digests, sketches and row hashes, {len(found)} found in "
          f"{len(outputs)} outputs")
    assert found == []
    from dprelease.data.identity import identity_of
    from dprelease.data.scan import Source

    unsealed = identity_of(Source(tmp_path / "tiny.csv", "csv"))  # the control: the identity unkeyed, unsealed
    assert record_adversary(known, [unsealed.digest.encode()], tmp_path / "adversary") == [secret]
    assert record_adversary(known, [unsealed.plain()], tmp_path / "adversary") == [secret]
    sketch = unsealed.records.hashes.astype("<u8").tobytes()  # the raw bottom-k hashes alone give it away too
    assert record_adversary(known, [sketch], tmp_path / "adversary") == [secret]
    # the ledger holds the keyed form, which only the key's holders can compute
    ledger = Ledger.open(resolve_location(str(tmp_path / "ledger.sqlite")))
    try:
        assert ledger.state("tiny").runs[0].data_fingerprint == ledger.fingerprint(plain)
        key_file = ledger.key_path
    finally:
        ledger.close()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().strip().encode() not in (tmp_path / "ledger.sqlite").read_bytes()
    ledger = Ledger.open(resolve_location(str(tmp_path / "ledger.sqlite")))
    try:  # sealed under the ledger's key: the key's holders (who read the data) get the identity back
        assert ledger.unseal(stored[0][1]) == unsealed.plain()
        assert ledger.fingerprint(unsealed.digest) == stored[0][0]
    finally:
        ledger.close()


def test_plain_fingerprints_are_keyed_when_an_old_ledger_migrates(tmp_path):
    path = tmp_path / "old.sqlite"
    ledger = init_at(resolve_location(str(path)))
    plain = file_fingerprint(DATA)
    granted = ledger.reserve(dataset="d", release="r1", charges=[("t", PureDP(Fraction(1)))],
                             spec_fingerprint="sha256:spec",
                             lifetime_from_spec=PureDP(Fraction(4)))
    ledger.commit(granted.run_id, data_fingerprint=plain)
    ledger.close()
    keys_file = path.with_name("old.sqlite.key")
    keys_file.unlink()
    with sqlite3.connect(path) as conn:  # back to schema 3: no id, no key, plain fingerprints
        conn.execute("DELETE FROM dprelease_meta WHERE key != 'schema_version'")
        conn.execute("UPDATE dprelease_meta SET value = '3'")
        for column in ("data_fingerprint", "approved_by", "approved_at"):
            conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        conn.execute("DROP TABLE evaluations")
        conn.execute("DROP TABLE policies")
    assert plain.removeprefix("sha256:").encode() in path.read_bytes()
    ledger = Ledger.open(resolve_location(str(path)))
    try:
        assert ledger.state("d").runs[0].data_fingerprint == ledger.fingerprint(plain)
        assert len(ledger.id) == 32
    finally:
        ledger.close()
    with sqlite3.connect(path) as conn:
        dump = "\n".join(conn.iterdump())
    assert plain.removeprefix("sha256:") not in dump and "hmac-sha256:" in dump
    assert stat.S_IMODE(keys_file.stat().st_mode) == 0o600


def test_a_wrong_or_missing_key_is_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    ledger = init_at(resolve_location(str(path)))
    ledger.close()
    key = path.with_name("l.sqlite.key")
    key.write_text(os.urandom(32).hex() + "\n")
    ledger = Ledger.open(resolve_location(str(path)))
    with pytest.raises(LedgerError, match="is not the fingerprint key of ledger"):
        ledger.fingerprint("sha256:00")
    key.unlink()
    with pytest.raises(LedgerError, match="is not at"):
        Ledger.open(resolve_location(str(path))).fingerprint("sha256:00")
    ledger.close()


def test_an_empty_ledger_file_is_refused(tmp_path, cli):
    path = tmp_path / "ledger.sqlite"
    ledger = init_at(resolve_location(str(path)))
    ledger.set_budget("d", PureDP(Fraction(1)), reason="test")
    ledger.close()
    path.write_bytes(b"")  # a truncated file, a failed copy
    with pytest.raises(LedgerError, match=r"is empty \(0 bytes\)"):
        init_at(resolve_location(str(path)))
    result = cli("ledger", "--ledger", path)
    assert result.code == 2 and "never taken for a fresh ledger" in result.stderr
    assert path.read_bytes() == b""


def test_a_symlinked_spec_finds_the_spec_s_ledger(tmp_path, cli, monkeypatch):
    monkeypatch.delenv("DPRELEASE_LEDGER")
    real = tiny_release(tmp_path, [(1, 1)])
    links = tmp_path / "elsewhere"
    links.mkdir()
    (links / "tiny.yaml").symlink_to(real)
    result = cli("plan", links / "tiny.yaml", "--json")
    assert json.loads(result.stdout)["ledger"]["url"] == f"sqlite:///{tmp_path / 'ledger.sqlite'}"


def test_evaluations_are_recorded_and_reported(tmp_path, release_env, monkeypatch):
    monkeypatch.delenv("DPRELEASE_LEDGER")
    spec = tiny_release(tmp_path, [(1 + i % 2, i % 100) for i in range(300)])
    report = tmp_path / "eval.md"
    evaluated = run_cli(["evaluate", spec, "--trials", "2", "--output", report], release_env)
    assert evaluated.returncode == 0, evaluated.stderr
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    plan = run_cli(["plan", spec], release_env)
    assert "was evaluated in the open" in plan.stdout, plan.stdout
    proc = run(spec, "--output-dir", tmp_path / "out", env=release_env)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "out" / "tiny-1" / "manifest.json").read_text())
    assert [e["trials"] for e in manifest["evaluated_in_the_open"]] == [2]
    assert "this data was evaluated in the open" in (tmp_path / "out" / "tiny-1" / "budget_report.md").read_text()
    again = run_cli(["evaluate", spec, "--trials", "1"], release_env)
    assert again.returncode == 2 and "not evaluated in the open" in again.stderr


def test_a_zcdp_quantile_that_plans_also_runs(tmp_path, release_env, monkeypatch):
    """ρ = 1/3: the pure ε the permute-and-flip runs at is rounded down (fewer digits) until the
    exact sampler takes its temperature, at plan time; the run then publishes."""
    monkeypatch.delenv("DPRELEASE_LEDGER")
    spec = tiny_release(tmp_path, [(1 + i % 2, i % 100) for i in range(300)])
    spec.write_text(spec.read_text().replace("definition: pure, unit: row", "definition: zcdp, unit: row, delta: 1e-6")
                    .replace("epsilon: 3", "rho: 3").replace("budget: {epsilon: 1}", "budget: {rho: 1/3}")
                    .replace("    epsilon: 1\n", "    measure: {quantile: AGEP, q: 0.5}\n    rho: 1/3\n"))
    plan = run_cli(["plan", spec, "--json"], release_env)
    assert plan.returncode == 0, plan.stderr
    table = json.loads(plan.stdout)["tables"][0]
    pure = Fraction(table["mechanism_epsilon"])
    assert pure * pure / 2 <= Fraction(1, 3) and pure > Fraction(816, 1000)
    proc = run(spec, "--output-dir", tmp_path / "out", env=release_env)
    assert proc.returncode == 0, proc.stderr


def test_keys_are_created_whole_and_owner_only(tmp_path):
    path = tmp_path / "k" / "a.key"
    key = keys.create_key(path)
    assert keys.read_key(path) == key and keys.create_key(path) == key  # the second finds the first's
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in path.parent.iterdir() if p.name != "a.key"]


def test_an_existing_default_ledger_never_starts_a_budget(tmp_path, release_env):
    """Another HOME that already has a per-user default ledger (an older version, another
    dataset's cap): a spec that pins nothing still cannot start its dataset's budget there."""
    home = tmp_path / "home"
    env = home_env(release_env, home)
    default = home / ".local" / "share" / "dprelease" / "ledger.sqlite"
    born = run_cli(["ledger", "init", default, "--reason", "an older version's default"], env)
    assert born.returncode == 0, born.stderr
    refused = run_cli(["ledger", "set-budget", "other-data", "--epsilon", "1", "--reason", "another dataset",
                       "--create"], env)  # never at the default, unnamed
    assert refused.returncode == 2 and "where a dataset's budget never starts" in refused.stderr, refused.stderr
    made = run_cli(["ledger", "set-budget", "other-data", "--epsilon", "1", "--reason", "another dataset",
                    "--create", "--ledger", default], env)
    assert made.returncode == 0, made.stderr
    unpinned = demo_copy(tmp_path, ledger=None)
    refused = run(unpinned, "--output-dir", tmp_path / "out", env=env)
    assert refused.returncode == 2 and "has no lifetime budget in the per-user default ledger" in refused.stderr
    assert ledger_runs(home / ".local" / "share" / "dprelease" / "ledger.sqlite") == []


def test_a_deleted_ledger_beside_its_key_is_not_recreated(tmp_path, monkeypatch):
    from dprelease.ledger import schema as store

    monkeypatch.setattr(store, "CREATION_WAIT", 0.3)
    path = tmp_path / "ledger.sqlite"
    init_at(resolve_location(str(path))).close()
    path.unlink()  # the key stays: a ledger was here
    with pytest.raises(LedgerError, match="exists but the ledger .* does not: the ledger was deleted or moved"):
        init_at(resolve_location(str(path)))
    assert not path.exists()


def test_a_foreign_release_that_cannot_be_compared_is_refused(published, tmp_path):
    """Another ledger's release whose data cannot be compared (its key unreadable here): refused."""
    key = published["ledger"].with_name("ledger.sqlite.key")
    hidden = key.with_name("hidden.key")
    key.rename(hidden)
    try:
        renamed = demo_copy(tmp_path, ledger=None, release="other-2", dataset="other-two")
        refused = run(renamed, "--output-dir", published["out"], "--ledger", tmp_path / "fresh.sqlite",
                      env=published["env"])
    finally:
        hidden.rename(key)
    assert refused.returncode == 2, refused.stderr
    assert "whose data cannot be compared with this one" in refused.stderr
    assert ledger_runs(tmp_path / "fresh.sqlite") == []


def test_evaluate_records_in_the_spec_s_own_ledger_only(tmp_path, cli, monkeypatch):
    monkeypatch.delenv("DPRELEASE_LEDGER")
    spec = tiny_release(tmp_path, [(1, 1), (2, 2)])
    elsewhere = cli("evaluate", spec, "--trials", "1", "--ledger", tmp_path / "empty.sqlite")
    assert elsewhere.code == 2 and "the spec pins the dataset's ledger" in elsewhere.stderr
    assert not (tmp_path / "empty.sqlite").exists()


def test_plan_refuses_what_a_run_would_refuse(tmp_path, cli, monkeypatch):
    """Everything that can refuse a run is decided by plan: a spec that pins no ledger, for a
    dataset the per-user default ledger does not hold."""
    monkeypatch.delenv("DPRELEASE_LEDGER")
    unpinned = demo_copy(tmp_path, ledger=None)
    result = cli("plan", unpinned)
    assert result.code == 2 and "Pin it in the spec with `ledger: PATH`" in result.stderr, result


@pytest.mark.parametrize("how", ["a new ledger at the old path", "$DPRELEASE_LEDGER_KEY"])
def test_another_ledgers_release_is_never_compared_under_a_wrong_key(tmp_path, cli, monkeypatch, how):
    """The demo published; its ledger moved away with its key. A spec of the same data under a new
    dataset name spends from a new ledger into the same output directory: the earlier release
    must be compared under ITS ledger's key, and a key that is not it (a new ledger made at the old
    path, whose key sits where the old one did; or $DPRELEASE_LEDGER_KEY, which names one key for
    every ledger) tells nothing: refused as not comparable, never taken for different data."""
    from tests.conftest import shipped_project

    monkeypatch.delenv("DPRELEASE_LEDGER")
    configs = shipped_project(tmp_path)
    demo = configs / "acs_demo.yaml"
    assert cli("run", demo, "--orchestrator", "inline").code == 0
    old = tmp_path / "ledgers" / "nist-acs.sqlite"
    moved = tmp_path / "moved"
    moved.mkdir()
    old.rename(moved / old.name)
    Path(str(old) + ".key").rename(moved / (old.name + ".key"))
    renamed = demo.read_text().replace("  name: nist-acs-national-2019 ", "  name: nist-acs-2019-reexport ") \
        .replace("release: acs-demo-2019", "release: acs-demo-2019-v2")
    if how == "$DPRELEASE_LEDGER_KEY":
        renamed = renamed.replace("ledger: ../ledgers/nist-acs.sqlite", f"ledger: {tmp_path / 'new.sqlite'}")
    v2 = configs / "v2.yaml"
    v2.write_text(renamed)
    assert "nist-acs-2019-reexport" in v2.read_text()
    assert cli("ledger", "init", "--spec", v2, "--reason", "a second budget, by mistake").code == 0
    if how == "$DPRELEASE_LEDGER_KEY":
        monkeypatch.setenv("DPRELEASE_LEDGER_KEY", str(tmp_path / "new.sqlite.key"))
    refused = cli("run", v2, "--orchestrator", "inline")
    assert refused.code == 2, refused
    assert "holds release 'acs-demo-2019' of dataset 'nist-acs-national-2019'" in refused.stderr, refused.stderr
    assert not (tmp_path / "outputs" / "acs-demo-2019-v2").exists()


def test_a_release_this_user_cannot_read_is_never_taken_for_none(tmp_path, monkeypatch):
    """A shared output directory where another user's release is owner-only: its manifest cannot
    be read, so it cannot be compared with this run's data: refused (fail closed), never skipped.
    (The suite runs as root in CI, for whom modes do not bite: the read is made to fail.)"""
    from dprelease.publish.layout import foreign_releases

    out = tmp_path / "out"
    (out / "theirs").mkdir(parents=True)
    (out / "theirs" / "manifest.json").write_text("{}")
    (out / "_internal").mkdir()
    (out / "notes").mkdir()  # a directory that is no release: no manifest
    real = Path.read_text

    def unreadable(self, *args, **kwargs):
        if self.name == "manifest.json" and self.parent.name == "theirs":
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", unreadable)
    [found] = foreign_releases(out, set(), "nist-acs-national-2019", "sha256:00")
    assert found.release == "theirs" and "cannot be read here: Permission denied" in found.why
