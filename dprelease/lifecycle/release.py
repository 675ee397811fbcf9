"""One release run, stage by stage: load → (histogram → noise) per table and level →
post-process → publish with the ledger commit. The orchestration layer calls these steps; they hold the
confidential data in memory and never hand it to an orchestrator.
"""

from __future__ import annotations

import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dprelease import __version__
from dprelease.host import files
from dprelease.data import ExactCounts, count_exact, file_fingerprint
from dprelease.data.cluster import Cluster
from dprelease.errors import DataError, InternalError, LedgerError
from dprelease.faults import checkpoint
from dprelease.ledger import CapChange, Ledger, LedgerLocation
from dprelease.publish.manifest import RunFacts, manifest
from dprelease.lifecycle.measure import check_structural, measure_counts, measure_mean, measure_mode
from dprelease.mechanisms.local import Estimate, estimate_local
from dprelease.plan import Plan
from dprelease.plan.margins import margin_of
from dprelease.plan.measurements import Mean
from dprelease.postprocess import FitWarning, Invariants, Workers, postprocess_release, structural_masks
from dprelease.publish.layout import (
    Layout,
    discard_staging,
    move_into_place,
    sync_tree,
    utc_now,
    write_invariant,
    write_json,
    write_local_table,
    write_measurement,
    write_table,
)
from dprelease.report.markdown import budget_report_md
from dprelease.spec import ModeMeasure, Spec, Table, canonical

STAGE_TIMINGS = ("check", "identity", "fingerprint", "load", "histogram", "noise", "postprocess", "publish",
                 "postprocess_estimate", "postprocess_fit")  # the last two: parts of postprocess (consistent groups)


@dataclass(frozen=True)
class Step:
    """One step of a reserved run, as every orchestrator runs it (Prefect as one task each,
    inline as one call each): ``load``, ``measure`` (one table: every level's noise),
    ``postprocess``, ``publish``; ``done`` is what the progress line says once it is done."""

    name: str
    done: str
    table: str | None = None

    def run(self, release: ReleaseRun) -> None:
        if self.name == "measure":
            release.measure_table(self.table or "")
        else:
            getattr(release, self.name)()


@dataclass(eq=False)
class ReleaseRun:
    """The mutable state of one run (in this process only)."""

    spec: Spec
    plan: Plan
    run_id: str
    location: LedgerLocation
    layout: Layout
    caps: tuple[CapChange, ...] = ()
    data_digest: str | None = None  # plain SHA-256 of the data, taken before the reservation: memory only
    check_data_again: bool = False  # local tables: the answers read must be the ones the ledger recorded
    record: RunFacts | None = None  # what the manifest states about the run: ledger, approval, evaluations
    on_progress: Callable[[str, int, int], None] | None = None  # (what is done, step, steps): the terminal's bar
    on_bytes: Callable[[int], None] | None = None  # the data's bytes read so far, while it is counted: the bar
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGE_TIMINGS, 0.0))
    noise_drawn: bool = False
    committed: bool = False  # the ledger commit is made: the release must now reach its place
    published: bool = False
    stage: str = "reserved"
    counts: ExactCounts | None = None  # exact (confidential); each histogram is dropped once measured
    cluster: Cluster | None = None  # engine: {kind: dask}: the counting's cluster, the fit's too; closed by close()
    data_fingerprint: str | None = None  # keyed (the ledger's key): what the ledger and run.json hold
    data_records: str | None = None  # the records' digest, keyed: what run.json holds (data/identity.py)
    data_identity: str | None = None  # the records' sketches, sealed under the ledger's key (ledger/keys.py)
    key_check: str | None = None  # the ledger's check value of its key (a constant's HMAC: nothing of the data)
    noisy: dict[tuple[str, str | None], np.ndarray] = field(default_factory=dict)  # (table, level)
    invariants: dict[str, np.ndarray] = field(default_factory=dict)  # exact place totals (NOT DP), per level
    published_values: dict[tuple[str, str | None], np.ndarray] = field(default_factory=dict)  # not yet written
    written: set[tuple[str, str | None]] = field(default_factory=set)  # tables staged as post-processing went
    measurements_staged: set[tuple[str, str | None]] = field(default_factory=set)  # (written while post-processing ran)
    postprocess_warnings: list[str] = field(default_factory=list)  # e.g. a fit's iteration cap reached: run.json
    local_counts: dict[str, np.ndarray] = field(default_factory=dict)  # randomized answers per category
    local_estimates: dict[str, tuple[Estimate, Estimate]] = field(default_factory=dict)  # (IBU, MI)
    flow_run_id: str | None = None
    orchestrator: dict[str, str] | None = None  # how the steps were run: recorded in run.json, never published
    report_md: str | None = None
    error: BaseException | None = None

    def report_progress(self, what: str, step: int, steps: int) -> None:
        if self.on_progress is not None:
            self.on_progress(what, step, steps)

    def steps(self) -> list[Step]:
        """The run's steps in order: load, each table, post-process, publish."""
        return [Step("load", "data loaded"), *(Step("measure", f"measured {t.name}", t.name) for t in self.spec.tables),
                Step("postprocess", "post-processed"), Step("publish", "published")]

    def _timed(self, stage: str, start: float) -> None:
        self.timings[stage] += time.perf_counter() - start

    def load(self) -> None:
        """Read, encode and count the data in one pass (streamed, or on the spec's Dask cluster);
        the exact counts are confidential and stay in this process."""
        self.stage = "load"
        checkpoint("load")
        start = time.perf_counter()
        if self.data_digest is None or self.check_data_again:  # else taken before the reservation
            digest = file_fingerprint(self.spec.dataset.resolved_path)
            if self.data_digest is not None and digest != self.data_digest:
                raise DataError(f"{self.spec.dataset.resolved_path} changed after the ledger recorded its local "
                                "collections; run the release again")
            self.data_digest = digest
        self._timed("fingerprint", start)
        if self.spec.engine.kind == "dask" and not self.spec.unit_id and self.cluster is None:
            self.cluster = Cluster(self.spec.engine.address)  # (a contribution bound is refused on Dask before this)
        self.counts = count_exact(self.spec, timings=self.timings, read=self.on_bytes,  # timings: load, histogram
                                  cluster=self.cluster)
        start = time.perf_counter()
        if self.data_digest is not None and file_fingerprint(self.spec.dataset.resolved_path) != self.data_digest:
            raise DataError(f"{self.spec.dataset.resolved_path} changed while this run read it: its bytes once counted "
                            "are not those checked (and identified) before the reservation. Nothing was drawn; run the "
                            "release again once the data is final")
        self._timed("fingerprint", start)
        self.invariants = self.counts.invariants  # published exactly, as the spec declares
        self.local_counts = self.counts.local_counts  # answers randomized by the respondents, as collected

    def measure_table(self, name: str) -> None:
        """Noise on each of one table's exact histograms (spends ε)."""
        if self.counts is None:
            raise InternalError("measure_table before load()")
        table = next(t for t in self.spec.tables if t.name == name)
        for level, dims, _ in table.measured():
            table_plan = next(p for p in self.plan.tables if p.name == name and p.level == level)
            self.stage = "measure"
            checkpoint("measure")
            mode = table.measure.column if isinstance(table.measure, ModeMeasure) else None
            counts = self.counts.histograms.pop((name, level))
            self.stage = "noise"
            # the noise parameters were checked against the exact sampler when the plan was made
            check_structural(counts, table_plan)  # structural cells are empty (a bug otherwise): before any noise
            if not self.noise_drawn:
                self.begin_drawing()
            self.noise_drawn = True  # from here on the budget is spent, whatever happens next
            start = time.perf_counter()
            self.noisy[(name, level)] = (measure_mode(counts, table_plan, self.spec.column(mode).size,
                                                      table.measure.q)  # type: ignore[union-attr]
                                         if mode else measure_mean(counts, table_plan)
                                         if isinstance(table_plan.noise, Mean) else measure_counts(counts, table_plan))
            del counts
            self._timed("noise", start)
            checkpoint("noise")

    def begin_drawing(self) -> None:
        """Before the first draw: the ledger records, in one transaction that checks the
        reservation is still live, that this run's noise is being drawn (never voided from
        then on). A reservation settled without the run (voided by an operator) stops it here."""
        ledger = Ledger.open(self.location)
        if ledger is None:
            raise LedgerError(f"the ledger at {self.location.shown} disappeared during the run; restore it")
        try:
            ledger.begin_drawing(self.run_id)
        except LedgerError as exc:
            raise LedgerError(f"{exc}. This run's reservation was settled without it, so it stops before drawing any "
                              "noise; nothing was drawn or published.") from None
        finally:
            ledger.close()
        checkpoint("drawing")

    def postprocess(self) -> None:
        """The published values: a pure function of the noisy measurements and of the declared
        invariants (exact totals published outside DP; no other data, no budget). Each table
        level is staged as soon as it is final and dropped (a consistent group's level by level:
        memory holds about two of its levels, not every published value); the staging directory
        exists from here on, and holds noise (a failure discards it, :mod:`.lifecycle.settle`).

        Writing overlaps the computing: the noisy measurements (final since the noise step; publish
        writes any not yet staged) are staged by one thread from the start, and each table level
        by another while the next is fitted (one at a time: the next table hands its values over
        once the previous is written, so memory holds one table level more at most). Every write
        started has ended before this returns or raises, through a Ctrl-C too (settling then
        discards the staging with nothing left writing into it); post-processing that stops stops
        the measurements' writer before its next file. A write that failed fails the run with its
        own error: a table's when the next is staged, a measurement's then or at the end."""
        self.stage = "postprocess"
        start = time.perf_counter()
        discard_staging(self.layout)
        files.make_dirs(self.layout.staging)
        self.written = set()
        self.measurements_staged = set()
        writing: list[Future[None]] = []

        def write(key: tuple[str, str | None], values: np.ndarray) -> None:
            self._write_table(key, values)
            self.written.add(key)

        writer = ThreadPoolExecutor(2, thread_name_prefix="dprelease-staging")
        failed = threading.Event()  # post-processing stopped: the measurements' writer stops before its next file
        measurements = writer.submit(self._write_measurements, failed)
        started: list[Future[None]] = [measurements]

        def stage(key: tuple[str, str | None], values: np.ndarray) -> None:
            if writing:
                writing.pop().result()  # the previous table's write done (its error raised here)
            if measurements.done():
                measurements.result()  # a measurement's write failed: fail now, not after the fit
            writing.append(writer.submit(write, key, values))
            started.append(writing[-1])

        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", FitWarning)
                self.published_values = postprocess_release(self.spec, self.noisy, self.plan.noise_variances(),
                                                            invariants=Invariants.from_totals(self.invariants),
                                                            structural=structural_masks(self.plan),
                                                            timings=self.timings, workers=self._fit_workers(),
                                                            sink=stage)
                if writing:
                    writing.pop().result()
            measurements.result()
        except BaseException:
            failed.set()
            raise
        finally:
            _finish_writes(started)  # no write goes on once this returns or raises (settle discards the staging)
            writer.shutdown(wait=True)
        for w in caught:  # the fit's reports go to the run record; any other warning on as it came
            if issubclass(w.category, FitWarning):
                self.postprocess_warnings.append(str(w.message))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        for p in self.plan.local:  # estimates from the randomized answers: post-processing
            self.local_estimates[p.name] = estimate_local(self.local_counts[p.name], p.keep_probability)
        self._timed("postprocess", start)

    def publish(self) -> None:
        """Stage every file, commit the ledger, then move the release into place."""
        self.stage = "publish"
        start = time.perf_counter()
        staging = self.layout.staging
        files.make_dirs(staging)  # (made by postprocess, which staged the tables)
        for table in self.spec.tables:
            for level, dims, _ in table.measured():
                key = (table.name, level)
                if key not in self.written:
                    self._write_table(key, self.published_values.pop(key))
                checkpoint("staging")  # the tables staged (the measurements maybe too, by postprocess)
                if key not in self.measurements_staged:
                    self._stage_measurement(table, level, dims)
        for level, totals in self.invariants.items():
            write_invariant(self.spec, level, totals, staging)
        for p in self.plan.local:
            write_local_table(self.spec, p, self.local_counts[p.name], self.local_estimates[p.name], staging)
        record = manifest(self.spec, self.plan, self.run_id, utc_now(), self.record)
        write_json(staging / "manifest.json", record)
        write_json(staging / "spec.json", canonical(self.spec))  # public: domains, tables, budgets
        self.report_md = budget_report_md(record, self.caps)
        files.write_text(staging / "budget_report.md", self.report_md)
        sync_tree(staging)
        checkpoint("publish")
        ledger = Ledger.open(self.location)
        if ledger is None:
            raise LedgerError(f"the ledger at {self.location.shown} disappeared during the run; restore it")
        try:
            ledger.commit(self.run_id, data_fingerprint=self.data_fingerprint)
            self.committed = True
        finally:
            ledger.close()
        checkpoint("commit")
        move_into_place(self.layout)
        self.published = True
        self._timed("publish", start)

    def _fit_workers(self) -> Workers | None:
        """Where the fit's chunks run: the run's Dask cluster (``engine: {kind: dask}``: the same
        cluster as the counting, a few chunks in flight per worker thread), else local processes."""
        if self.cluster is None:
            return None
        return Workers(self.cluster.threads(), self.cluster.executor())

    def close(self) -> None:
        """At the run's end, whatever its outcome: the cluster it opened is closed."""
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def _write_measurements(self, stop: threading.Event) -> None:
        """Stage every noisy measurement (as :meth:`publish` would), noting each once written,
        until ``stop`` is set."""
        for table in self.spec.tables:
            for level, dims, _ in table.measured():
                if stop.is_set():
                    return
                self._stage_measurement(table, level, dims)

    def _stage_measurement(self, table: Table, level: str | None, dims: tuple[str, ...]) -> None:
        """Stage one table level's noisy measurement (its file, as :func:`.publish.write_measurement`
        names it), noting it staged: by post-processing's writer, or by publish for one it did not reach."""
        table_plan = next(p for p in self.plan.tables if p.name == table.name and p.level == level)
        write_measurement(self.spec, table, dims, table_plan, self.noisy[(table.name, level)], self.layout.staging)
        self.measurements_staged.add((table.name, level))

    def _write_table(self, key: tuple[str, str | None], values: np.ndarray) -> None:
        """Stage one table level's published values (its file, as :func:`.publish.write_table` names it)."""
        table = next(t for t in self.spec.tables if t.name == key[0])
        dims = next(d for level, d, _ in table.measured() if level == key[1])
        table_plan = next(p for p in self.plan.tables if p.name == key[0] and p.level == key[1])
        write_table(self.spec, table, dims, key[1], values, self.layout.staging, table_plan.structural_mask(),
                    margin_of(table_plan, self.spec.confidence) if self.spec.margin_columns else None)

    def internal_record(self) -> dict[str, Any]:
        """What would leak if published: never leaves ``<output-dir>/_internal``."""
        data = self.counts
        return {
            "release": self.spec.release,
            "run_id": self.run_id,
            "software_version": __version__,
            "spec": str(self.spec.source.resolve()),
            "spec_fingerprint": self.plan.fingerprint,
            "data_file": str(self.spec.dataset.resolved_path.resolve()),
            "data_fingerprint": self.data_fingerprint,  # keyed with the ledger's key: see ledger/keys.py
            "data_records": self.data_records,  # keyed too
            "data_identity": self.data_identity,  # sealed under the ledger's key: another ledger's run compares it
            "key_check": self.key_check,  # which key those are under: a run elsewhere tries only that key
            **({"ledger_id": self.record.ledger_id} if self.record else {}),
            "rows": {"read": data.rows_read, "dropped": data.rows_dropped, "over_contribution_bound": data.rows_over_bound,
                     "used": data.rows} if data else None,
            "ledger": self.location.shown,
            "orchestrator": self.orchestrator,
            "prefect_flow_run_id": self.flow_run_id,
            "stage": self.stage,
            "noise_drawn": self.noise_drawn,
            "published": self.published,
            "error": _error_record(self.error),
            "postprocess_warnings": self.postprocess_warnings,
            "timings": {**{k: round(v, 6) for k, v in self.timings.items()},
                        "total": round(time.perf_counter() - self.started, 6)},
            "output": str(self.layout.final.resolve()) if self.published else None,
            "written_at": utc_now(),
        }

    def write_internal_record(self) -> Path:
        path = self.layout.internal / "run.json"
        write_json(path, self.internal_record())  # 0600 in 0700 directories, never through a link (dprelease.host.files)
        return path


def _error_record(error: BaseException | None) -> str | None:
    """What the run record keeps of a failure: a data error's message may quote confidential
    values, so it reaches the operator's terminal only and is recorded here by type alone."""
    if error is None:
        return None
    if isinstance(error, DataError):
        return f"{type(error).__name__} (the message, which may quote data values, went to the terminal only)"
    return f"{type(error).__name__}: {error}"


def _finish_writes(futures: list[Future[None]]) -> None:
    """Wait until every staging write started has ended, through any Ctrl-C meanwhile (re-raised
    once they have): a write still going after post-processing stopped would put noise back into a
    staging directory that settling has discarded. Waits on the futures, not the threads (a join
    interrupted by Ctrl-C can leave a running thread marked stopped)."""
    interrupted: KeyboardInterrupt | None = None
    while True:
        try:
            wait(futures)
            break
        except KeyboardInterrupt as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted
