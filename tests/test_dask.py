"""The Dask engine: pieces counted on a LocalCluster's two worker processes give exactly the
local engine's histograms; no sampler ever runs on a worker; data errors reach the operator
without being raised (and logged) on a worker; the CLI runs a release on the cluster."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from dprelease.data import count_exact
from dprelease.data import scan
from dprelease.errors import DataError, UserError
from dprelease.spec import Engine, load_spec
from dprelease.ledger import Ledger, resolve_location
from tests.test_run import child_env, run
from tests.test_stream import NATIONAL, assert_same_counts, national_spec, national_table, national_with
from tests.ledgers import untouched

distributed = pytest.importorskip("distributed", reason="the dask extra: pip install -e '.[dask]'")


@pytest.fixture(scope="module")
def cluster():
    import logging

    # the scheduler's INFO chatter would reach handlers of streams pytest has already closed
    logging.getLogger("distributed").setLevel(logging.WARNING)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as local:  # not Dask's 8787
        yield local


@pytest.fixture(scope="module")
def local_counts(tmp_path_factory):
    """The local (streaming) engine's counts of the same data."""
    return count_exact(national_spec(tmp_path_factory.mktemp("local"), NATIONAL, "csv"))


def on_dask(spec, cluster):
    return dataclasses.replace(spec, engine=Engine(kind="dask", address=cluster.scheduler_address))


def worker_modules(cluster, prefixes: tuple[str, ...]) -> dict[str, bool]:
    """Per worker: whether a module starting with one of ``prefixes`` was ever imported there."""
    with distributed.Client(cluster.scheduler_address) as client:
        return client.run(lambda: any(m.startswith(prefixes) for m in __import__("sys").modules))


SAMPLERS = ("dprelease.mechanisms", "dprelease.lifecycle.measure")


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["parquet row groups", "csv files"])
def test_the_cluster_counts_exactly_what_the_local_engine_counts(tmp_path, monkeypatch, cluster, local_counts,
                                                                  layout):
    table = national_table()
    if layout == "parquet row groups":  # one file, cut into pieces of row groups
        pq.write_table(table, tmp_path / "data.parquet", row_group_size=2000)
        monkeypatch.setattr(scan, "PIECE_ROWS", 5000)
        spec = national_spec(tmp_path, tmp_path / "data.parquet", "parquet")
        assert len(scan.Source(spec.dataset.resolved_path, "parquet").split([scan.Piece(str(tmp_path / "data.parquet"))])) == 5
    else:  # a Hive directory of CSV files, one piece each
        for sex in ("1", "2"):
            part = tmp_path / "parts" / f"SEX={sex}"
            part.mkdir(parents=True)
            rows = table.filter(pc.equal(table.column("SEX"), sex))
            for i, start in enumerate(range(0, rows.num_rows, 5000)):
                pa_csv.write_csv(rows.slice(start, 5000).drop_columns(["SEX"]), part / f"{i}.csv")
        spec = national_spec(tmp_path, tmp_path / "parts", "csv")
    assert_same_counts(count_exact(on_dask(spec, cluster)), local_counts)
    assert all(worker_modules(cluster, ("dprelease.data.count",)).values())  # every worker counted pieces
    assert not any(worker_modules(cluster, SAMPLERS).values())  # and none ever loaded a sampler


@pytest.mark.slow
def test_the_histogram_checkpoint_reaches_a_hook_in_the_run_process(tmp_path, cluster):
    """A fault hook lives in the run's process, never on a worker: on Dask the ``histogram``
    checkpoint fires on the driver as each counted piece arrives, so a crash test can stop a Dask
    run there as it stops a local one."""
    from dprelease import faults

    reached: list[str] = []
    spec = on_dask(national_spec(tmp_path, NATIONAL, "csv"), cluster)
    pieces = len(scan.Source(spec.dataset.resolved_path, "csv").split(scan.Source(spec.dataset.resolved_path, "csv")
                                                                      .files()))
    faults.install(reached.append)
    try:
        count_exact(spec)
    finally:
        faults.install(None)
    assert reached == ["histogram"] * pieces and pieces >= 1


def test_a_dask_run_killed_while_counting_fails_closed(tmp_path, cluster, release_env):
    """SIGKILLed at the driver's ``histogram`` checkpoint: the reservation stays counted, the
    next run is refused until it is voided (no noise was drawn), then runs cleanly."""
    from tests.test_crash import resolve
    from tests.test_run import _killed_at

    spec = national_spec(tmp_path, NATIONAL, "csv").source
    spec.write_text(spec.read_text() + f"engine: {{kind: dask, address: \"{cluster.scheduler_address}\"}}\n")
    approve = subprocess.run([sys.executable, "-m", "dprelease", "plan", str(spec), "--approve", "--by", "t"],
                             env=child_env(release_env), capture_output=True, text=True, timeout=120)
    assert approve.returncode == 0, approve.stderr
    out = tmp_path / "out"
    _killed_at("histogram", spec, out, release_env, tmp_path)
    [record] = _state(spec).runs
    assert record.state == "reserved" and not (out / "stream-test").exists()
    assert run(spec, "--output-dir", out, env=release_env).returncode == 4  # refused while the reservation is open
    settled = resolve(record.run_id, "void", release_env)
    assert settled.returncode == 0, settled.stderr
    clean = run(spec, "--output-dir", out, env=release_env)
    assert clean.returncode == 0, clean.stderr
    assert (out / "stream-test" / "manifest.json").exists()


def _state(spec):
    ledger = Ledger.open(resolve_location())
    assert ledger is not None
    with ledger:
        return ledger.state(load_spec(spec).dataset.name)


@pytest.mark.slow
def test_a_data_error_on_a_worker_reaches_the_operator(tmp_path, cluster):
    spec = on_dask(national_spec(tmp_path, national_with(tmp_path, 101, "RAC1P", "12"), "csv"), cluster)
    with pytest.raises(DataError, match=r"column RAC1P: 1 value\(s\) outside the declared domain, e\.g\. '12' at "
                                        r"data row 101"):
        count_exact(spec)
    with distributed.Client(cluster.scheduler_address) as client:  # returned as a value, never raised there:
        logs = client.get_worker_logs()  # no worker logged the message (it quotes a confidential value)
    assert logs and not any("outside the declared domain" in line for lines in logs.values() for _, line in lines)


@pytest.mark.slow
def test_a_contribution_bound_is_refused_on_dask(tmp_path, cluster):
    spec = national_spec(tmp_path, NATIONAL, "csv")
    spec = dataclasses.replace(on_dask(spec, cluster), unit="person", unit_id="SERIALNO", max_rows=2)
    with pytest.raises(UserError, match="kind dask cannot apply privacy.unit's contribution bound"):
        count_exact(spec)


def test_an_unreachable_scheduler_is_refused_before_anything_is_spent(tmp_path, release_env, isolated_ledger):
    spec = national_spec(tmp_path, NATIONAL, "csv").source
    proc = run(spec, "--dask-address", "tcp://127.0.0.1:9", "--output-dir", tmp_path / "out", env=release_env)
    assert proc.returncode == 2, proc.stderr
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in proc.stderr and "Nothing was spent" in proc.stderr
    assert untouched(isolated_ledger)  # nothing was even written to the ledger
    assert not (tmp_path / "out" / "stream-test").exists()


def test_the_cli_runs_a_release_on_the_cluster(tmp_path, cluster, run_env):
    """As a Prefect flow run (``run_env``): the one feature that brings a runtime of its own into
    the flow (a live Dask client made by the load step, used by the fit, closed after the flow)."""
    spec = national_spec(tmp_path, NATIONAL, "csv").source
    approve = subprocess.run([sys.executable, "-m", "dprelease", "plan", str(spec), "--approve", "--by", "t"],
                             env=child_env(run_env), capture_output=True, text=True, timeout=120)
    assert approve.returncode == 0, approve.stderr  # its invariants are exact publications: approved first
    proc = run(spec, "--dask-address", cluster.scheduler_address, "--output-dir", tmp_path / "out", env=run_env)
    assert proc.returncode == 0, proc.stderr
    release = tmp_path / "out" / "stream-test"
    assert json.loads((release / "manifest.json").read_text())["release"] == "stream-test"
    record = json.loads((tmp_path / "out" / "_internal" / "stream-test" / "run.json").read_text())
    assert record["rows"]["read"] == 27253 and record["orchestrator"]["kind"] == "prefect"
    # the spec's own engine: block says the same
    text = spec.read_text().replace("release: stream-test", "release: stream-test-2")
    spec.write_text(text + f"engine: {{kind: dask, address: \"{cluster.scheduler_address}\"}}\n")
    assert load_spec(spec).engine == Engine(kind="dask", address=cluster.scheduler_address)
    approve = subprocess.run([sys.executable, "-m", "dprelease", "plan", str(spec), "--approve", "--by", "t"],
                             env=child_env(run_env), capture_output=True, text=True, timeout=120)
    assert approve.returncode == 0, approve.stderr
    proc = run(spec, "--output-dir", tmp_path / "out", env=run_env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "stream-test-2" / "manifest.json").exists()


def test_a_worker_failure_comes_back_by_type_only(monkeypatch, tmp_path):
    """Any other failure on a worker is returned as a value naming its type (its message may
    quote data, and a raised exception would be logged there); the driver raises without it."""
    from dprelease.data import count as count_module

    def boom(spec, piece):  # type: ignore[no-untyped-def]
        raise MemoryError("secret value 12345")

    monkeypatch.setattr(count_module, "count_piece", boom)
    spec = national_spec(tmp_path, NATIONAL, "csv")
    outcome = count_module.count_on_worker(scan.Piece(str(NATIONAL)), spec)
    assert outcome[0] == "failure" and "MemoryError" in outcome[1] and "12345" not in outcome[1]
    with pytest.raises(RuntimeError, match="a Dask worker failed: MemoryError") as raised:
        count_module._unpack(outcome)
    assert "12345" not in str(raised.value)


@pytest.mark.slow
def test_the_cluster_a_run_starts_keeps_the_adaptive_allocator():
    """Dask's nannies set MALLOC_TRIM_THRESHOLD_ in their workers by default (every large array
    then mapped and faulted in afresh: two workers counted 3x slower); the cluster a run starts for
    ``kind: dask`` without an address leaves it out, and keeps the nannies' other settings."""
    from dprelease.data.cluster import local_cluster

    with local_cluster(distributed.LocalCluster, n_workers=1, threads_per_worker=1) as local, \
            distributed.Client(local, set_as_default=False) as client:  # its credentials: the cluster's
        environ = client.run(lambda: {k: __import__("os").environ.get(k)
                                      for k in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")})
    assert list(environ.values()) == [{"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}]


async def _identity(address: str, **connection: object) -> object:
    """Connect to a Dask server at ``address`` and ask who it is (what any client does first)."""
    comm = await distributed.comm.connect(address, timeout=10, **connection)
    try:
        await comm.write({"op": "identity"})
        return await comm.read()
    finally:
        await comm.close()


@pytest.mark.slow
def test_the_cluster_a_run_starts_admits_no_other_client():
    """``kind: dask`` without an address: the run starts local worker processes, which listen on
    127.0.0.1, where every local user reaches them, and a Dask client that connects runs any code
    in those workers, beside the confidential data. Only the run's own client gets in: at the
    scheduler, a worker and a nanny alike, a plain TCP client is dropped, a TLS client without a
    certificate or with credentials of its own fails the handshake. Its HTTP servers (not on Dask's
    fixed 8787) answer the health check only: no dashboard, no pages of workers, tasks or logs."""
    import asyncio
    import ssl
    import urllib.error
    import urllib.request

    from distributed.security import Security

    from dprelease.data.cluster import Cluster

    cluster = Cluster(None)  # as a run opens it
    try:
        client = cluster.client()
        assert client.submit(lambda: 1 + 1, pure=False).result() == 2  # the run's own client
        local = cluster._cluster
        worker, info = next(iter(client.scheduler_info()["workers"].items()))
        bare = ssl.create_default_context()
        bare.check_hostname, bare.verify_mode = False, ssl.CERT_NONE  # trusts anything, shows no certificate
        for address in (local.scheduler_address, worker, info["nanny"]):  # a nanny runs in this very process
            assert address.startswith("tls://127.0.0.1:"), address
            assert isinstance(asyncio.run(_identity(address, **local.security.get_connection_args("client"))), dict)
            for target, connection in (("tcp://" + address.split("://", 1)[1], {}), (address, {"ssl_context": bare}),
                                       (address, Security.temporary().get_connection_args("client"))):
                with pytest.raises(OSError):
                    asyncio.run(_identity(target, **connection))
        ports = [local.scheduler.http_server.port, info["services"]["dashboard"]]  # the scheduler's, a worker's
        assert 8787 not in ports
        for port in ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
                assert answer.status == 200
            for page in ("/", "/status", "/info/main/workers.html", "/json/counts.json", "/metrics"):
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=10)
                assert refused.value.code == 404, (port, page)
    finally:
        cluster.close()


@pytest.mark.slow
def test_the_cluster_a_run_starts_spills_into_a_directory_of_its_own(tmp_path):
    """The workers of the cluster a run starts keep their scratch (what they spill: the data's
    batches and partial counts) in a fresh owner-only directory of the run's, removed when the
    run closes the cluster: never Dask's shared ``/tmp/dask-scratch-space``, which another local
    user could have made first."""
    import os
    import stat

    import dask

    from dprelease.data.cluster import Cluster

    shared = tmp_path / "shared-tmp"  # stands for the machine's /tmp, where Dask's default scratch lives
    shared.mkdir()
    with dask.config.set({"temporary-directory": str(shared)}):
        cluster = Cluster(None)
        try:
            client = cluster.client()
            root = cluster._scratch
            assert root is not None and stat.S_IMODE(os.stat(root).st_mode) == 0o700
            assert os.stat(root).st_uid == os.getuid()
            scratch = client.run(lambda dask_worker: dask_worker.local_directory)
            assert scratch and all(path.startswith(root + os.sep) for path in scratch.values()), (root, scratch)
            assert client.submit(lambda: 1, pure=False).result() == 1
        finally:
            cluster.close()
    assert not os.path.exists(root) and not any(shared.iterdir()), list(shared.iterdir())
