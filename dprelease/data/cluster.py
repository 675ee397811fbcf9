"""The spec's Dask cluster for one run: the counting's and the top-down fit's (``engine: {kind: dask}``).

One job: connect to the scheduler at the spec's address — or, without one, start local worker
processes (:func:`local_cluster`) — on first use, hand out a client (the counting,
:mod:`dprelease.data.count`) and a ``concurrent.futures`` executor on the same cluster (the
post-processing's fit, :mod:`dprelease.postprocess.parents`, which sees noisy values only and
never imports this), and close what it opened at the run's end (:meth:`Cluster.close`). A run
that counts on the cluster fits there too: one cluster, started once.

Sees no data itself. Imports dask and distributed (optional: the ``dask`` extra) when first used.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import Executor
from typing import Any, Callable


class Cluster:
    """The cluster at ``address`` (None: local worker processes started for this run), opened on
    first use, closed by :meth:`close` (a cluster started here is shut down; one at an address
    is only disconnected from)."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._cluster: Any = None
        self._client: Any = None
        self._scratch: str | None = None

    def client(self) -> Any:
        """The ``distributed.Client`` of the cluster (connected, or the cluster started, now if not yet)."""
        if self._client is None:
            from distributed import Client, LocalCluster

            if self.address is None:  # the workers' scratch (spilled data) in a directory of this run's, owner-only
                self._scratch = tempfile.mkdtemp(prefix="dprelease-dask-")
                self._cluster = local_cluster(LocalCluster, local_directory=self._scratch)
            self._client = Client(self.address or self._cluster, set_as_default=False)
        return self._client

    def executor(self) -> Executor:
        """A ``concurrent.futures`` executor whose tasks run on the cluster's workers (never
        cached by key: each submission runs)."""
        executor: Executor = self.client().get_executor(pure=False)
        return executor

    def threads(self) -> int:
        """The cluster's worker threads now (at least 1): how many tasks it runs at once."""
        return max(1, sum(self.client().nthreads().values()))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def local_cluster(make: Callable[..., Any], **options: Any) -> Any:
    """A Dask cluster of local worker processes (``make``: ``distributed.LocalCluster``) that
    admits this process alone, and whose workers keep glibc's adaptive allocator.

    Who may connect. Its scheduler and workers listen on 127.0.0.1, which every local user
    reaches, and a Dask client that connects can run any code in the workers, as this user, next
    to the confidential data they read (a nanny's runs in this very process). So the scheduler,
    nannies and workers speak TLS with mutual authentication under credentials made for this
    cluster alone (``security=True``: ``Security.temporary()``, a fresh self-signed certificate and
    key, handed to the worker processes through the pipe they are started with; Dask writes them
    for a moment to an owner-only temporary directory each time it builds a TLS context, as
    Python's ``ssl`` loads keys from files only): a client without them, or with others, fails the
    handshake, and a plain TCP client is dropped. Its HTTP servers answer the health check only
    (and a sitemap listing it), on ports of their own: no dashboard, no pages of workers, tasks or
    logs, never Dask's fixed 8787. Given a ``local_directory`` (:class:`Cluster` makes a fresh
    owner-only one for the run and removes it at the end), the nannies and workers keep all their
    scratch there, never in Dask's shared ``/tmp/dask-scratch-space``, which another local user
    could have made first and so own whatever a worker spills there.
    ``tests/test_dask.py::test_the_cluster_a_run_starts_admits_no_other_client``. A cluster at an
    address is the operator's to secure (docs/scaling.md). ``security=None`` in ``options``: no
    TLS, for a benchmark that hands the address to another process (which has no credentials).

    The allocator. Dask's nannies set ``MALLOC_TRIM_THRESHOLD_`` in their workers' environment by
    default, which fixes glibc's mmap threshold, so every large array is mapped afresh and its
    pages faulted in; two such workers counting a 4M-row piece each took 5.3–5.7 s here, 1.6–1.8 s
    without it. A nanny sets it in this process's own environment (which its workers inherit), so
    a cluster started here before would pass it on: it is left out of the environment while the
    workers start."""
    import dask

    saved = os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    health_only = ["distributed.http.health"]
    try:
        scratch = {"temporary-directory": options["local_directory"]} if options.get("local_directory") else {}
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                              "distributed.scheduler.http.routes": health_only,
                              "distributed.worker.http.routes": health_only, **scratch}):
            return make(processes=True, dashboard_address=None,
                        **{"security": True, "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"}, **options})
    finally:
        if saved is not None:
            os.environ["MALLOC_TRIM_THRESHOLD_"] = saved
