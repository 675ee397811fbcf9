"""Every refusal of a run that needs no noise: each raises a user error, and nothing is
reserved or spent (already released: 4; over budget: 3; not approved: 5; a missing data file,
an unwritable output directory, data that does not fit the spec, an unreachable Prefect
server (checked when the orchestrator is readied, after the spec's own refusals and the data's):
2).

Planning refusals read the spec, the plan and the ledger; the data checks look at the data's
path, then at its header and (for data read whole) every row, and at the spec's declared rules
(:func:`refuse_bad_data`). No check here draws noise.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from dprelease.host import files
from dprelease.accounting import ApproxDP, amount_text, fraction_text, subtract, symbol_key
from dprelease.data.rules import check_rules
from dprelease.errors import (
    AlreadyReleasedError,
    DataError,
    InternalError,
    LedgerError,
    NotApprovedError,
    OverBudgetError,
    UserError,
)
from dprelease.ledger import Approval, Ledger, RecordIdentity, resolve_location
from dprelease.lifecycle.voice import Say
from dprelease.plan import Plan
from dprelease.spec import ROOT, Spec

WHOLE_CHECK_BYTES = 256 << 20  # data up to this size is checked row by row before a run reserves anything


def refuse_before_spending(spec: Spec, plan: Plan, output_dir: Path, *, inputs_checked: bool = False,
                           ready: Callable[[], None] | None = None) -> Checked:
    """Every refusal that needs no data, then the data's (:func:`refuse_bad_data`, whose
    identity it returns): nothing is reserved, nothing spent. ``ready`` readies the orchestrator
    (checks the Prefect server a run will use, or starts a temporary one) once the spec and the
    plan passed, before the data's rules are checked."""
    existing = plan.existing_run
    if existing is not None:
        where = (f"its outputs: {Path(existing.output_dir) / spec.release}"
                 if existing.state == "committed" and existing.output_dir else "see `dprelease ledger`")
        fix = ("An unfinished run holds this name (one in progress, or one that stopped): once none is in progress, "
               f"settle it with `dprelease ledger resolve {existing.run_id} --void|--commit|--fail --reason TEXT` "
               "(`dprelease ledger` shows it; docs/reliability.md says which)" if existing.state in ("reserved", "drawing") else
               "A run never re-draws a release's noise: to publish this data again, name a new release "
               f"(`release:` in {spec.source}); it is charged to the lifetime budget again")
        raise AlreadyReleasedError(f"release {spec.release!r} of dataset {spec.dataset.name!r} is already "
                                   f"{existing.state} (run {existing.run_id}, {existing.created_at}); {where}. "
                                   f"{fix}. Nothing was spent.")
    if os.path.lexists(output_dir / spec.release):  # a dangling symlink too: nothing is written through one
        raise AlreadyReleasedError(f"{output_dir / spec.release} already exists; refusing to overwrite a "
                                   f"published release. Name a new release (`release:` in {spec.source}) or publish "
                                   "into another output directory (--output-dir). Nothing was spent.")
    if not plan.fits:
        raise OverBudgetError(over_budget_message(spec, plan))
    if spec.local_tables and spec.tables:
        raise UserError(f"{spec.source}: central tables and kind: local tables over one data file: a file of answers "
                        "the respondents randomized is never also released as confidential records. Publish the "
                        "local tables from the registered answers file in a release of their own, and the central "
                        "tables from the confidential data under its own dataset. Nothing was spent.")
    if not inputs_checked:  # a first run checked them before creating its ledger
        refuse_bad_inputs(spec)
    _check_writable(output_dir)
    _rehearse_postprocessing(spec, plan)
    checked = refuse_bad_data(spec)  # before the orchestrator is readied: a refused run never waits for Prefect
    if ready is not None:
        ready()
    return checked


@dataclass(frozen=True)
class Checked:
    """The data passed its checks: its identity by its records and the SHA-256 of its bytes,
    taken before the check read it (both plain: this process's memory only), and what the checks,
    the identity and the digest cost (the run record's timings)."""

    identity: RecordIdentity
    check_seconds: float
    identity_seconds: float
    digest: str
    digest_seconds: float


def refuse_bad_data(spec: Spec) -> Checked:
    """The data against the spec, before anything is reserved: every row of data a run reads
    whole (the local engine, up to :data:`WHOLE_CHECK_BYTES`, or any size under a contribution
    bound), else (Dask, larger streamed data) each file's header or schema, with
    :func:`dprelease.data.check.check_data`; then the spec's declared rules (structural zeros
    rely on them; no rules: no pass). A problem is a :class:`DataError` (exit 2) naming the
    column, the problem, how many rows have it and the fix; nothing is reserved or spent. The
    message may quote a value: it reaches the operator's terminal only. Returns the data's
    identity (:mod:`dprelease.data.identity`), taken in the check's pass over every row, or
    in a pass of its own where the check reads headers only, and the SHA-256 of the data's bytes
    taken before the check reads them (the run compares it again once it has counted: the data
    checked is the data counted, :meth:`dprelease.lifecycle.release.ReleaseRun.load`)."""
    from dprelease.data.check import check_data, data_bytes
    from dprelease.data.identity import Sketcher, identity_of
    from dprelease.data.load import file_fingerprint, source
    from dprelease.lifecycle.progress import scan_progress

    started = time.perf_counter()
    digest = file_fingerprint(spec.dataset.resolved_path)  # plain: in this process's memory only
    digested = time.perf_counter() - started
    started = time.perf_counter()
    size = data_bytes(spec)
    full = spec.engine.kind != "dask" and (size <= WHOLE_CHECK_BYTES or spec.unit_id is not None)
    records = Sketcher(spec.dataset.na_values, beside=True) if full else None  # sketched while the next batch is read
    try:
        with scan_progress(size if full else 0, f"checking {spec.dataset.resolved_path.name}") as read:
            found = check_data(spec, full=full, read=read, records=records)
        if not found.ok:
            how = "" if full else " (its header only: `dprelease check SPEC` reads every row)"
            raise DataError(f"{spec.source}: the data does not fit the spec{how}:\n  " + "\n  ".join(found.lines())
                            + f"\n`dprelease check {spec.source}` lists every column. Nothing was reserved or spent.")
        check_rules(spec)
    except BaseException:
        if records is not None:
            records.close()
        raise
    checked = time.perf_counter() - started
    if records is not None:
        return Checked(records.identity(), checked - records.seconds, records.seconds, digest, digested)
    with scan_progress(size, f"reading {spec.dataset.resolved_path.name} for its identity") as read:
        identity = identity_of(source(spec), read=read)
    return Checked(identity, checked, time.perf_counter() - started - checked, digest, digested)



def refuse_links(spec: Spec, output_dir: Path) -> None:
    """The directories a run writes into below the output directory must be real directories:
    nothing is ever written (or deleted) through a symbolic link planted there."""
    for part in (output_dir / ".staging", output_dir / "_internal", output_dir / "_internal" / spec.release):
        try:
            alien = part.is_symlink() or (part.exists() and not part.is_dir())
        except OSError as exc:  # e.g. another user's owner-only directory in a shared output directory
            raise UserError(f"cannot look at {part}: {exc.strerror}; an output directory holds one owner's releases "
                            "(another user's cannot be read, so nor compared with this one): publish into a "
                            "directory of your own, or ask its owner. Nothing was spent.") from None
        if alien:
            raise UserError(f"{part} is a symbolic link or not a directory; dprelease writes its staged and internal "
                            "files only into real directories under the output directory. Remove it. Nothing was "
                            "spent.")


def refuse_bad_inputs(spec: Spec) -> None:
    """The data path and the engine, checked without reading the data."""
    from dprelease.data.count import engine_problem
    from dprelease.data.load import source

    path = spec.dataset.resolved_path
    if not (path.is_file() or path.is_dir()):
        what = "is not a file or directory" if path.exists() else "does not exist"
        raise DataError(f"{spec.source}: dataset.path {spec.dataset.path!r} {what} (resolved to {path}). "
                        "Nothing was spent.")
    try:
        source(spec).files()  # a directory must hold data files
    except DataError as exc:
        raise DataError(f"{exc}. Nothing was spent.") from None
    problem = engine_problem(spec)
    if problem:
        raise UserError(f"{problem}. Nothing was spent.")


def approval_of(spec: Spec, plan: Plan, ledger: Ledger, required_by_flag: bool, say: Say) -> Approval | None:
    """The approval of this exact plan, if any; refused (exit 5) when the flag, the spec's
    ``approval: required`` or the dataset's recorded policy requires one and there is none."""
    approval = ledger.approval(spec.dataset.base_name or spec.dataset.name, plan.fingerprint)  # every period
    policy = next((p for p in reversed(ledger.policies(spec.dataset.name)) if p.policy == "approval"), None)
    policy = policy if policy is not None and policy.value == "required" else None  # a dataset new to it too
    why = ("--require-approval" if required_by_flag else f"the spec ({spec.source.name}: approval: required)"
           if spec.approval_required else f"the ledger's policy for {policy.dataset} (set {policy.set_at[:10]} by "
           f"{policy.set_by}: {policy.reason})" if policy is not None else
           f"its exact publication of the invariants ({', '.join(spec.invariant_levels)} totals, outside differential "
           "privacy)" if spec.invariants else None)
    if approval is None and why is not None:
        raise NotApprovedError(f"{spec.source}: this plan ({plan.fingerprint}) of release {spec.release} is not "
                               f"approved, and {why} requires approval; review it with `dprelease plan SPEC` and "
                               "approve it with `dprelease plan SPEC --approve --by NAME`. Nothing was spent.")
    if approval is not None:
        say(f"plan approved by {approval.approved_by} ({approval.approved_at[:19]} UTC)")
    return approval


def refuse_foreign_outputs(spec: Spec, output_dir: Path, ledger: Ledger, digest: str,
                           identity: RecordIdentity | None = None) -> None:
    """Refuse to publish beside releases of this dataset (by name, or of the same data: its
    bytes, or its records) that the ledger in use does not record: they were spent from another
    ledger's budget, and a fresh ledger here would restart it. Nothing is reserved."""
    from dprelease.publish.layout import foreign_releases

    known = ledger.run_ids()
    for found in foreign_releases(output_dir, known, spec.dataset.name, digest, identity):
        raise LedgerError(
            f"{output_dir} holds release {found.release!r} of {found.why}, which the ledger in use ({ledger.id} at "
            f"{ledger.location.shown}) does not record: it was spent from the ledger {found.ledger}. One dataset has "
            f"one ledger: run with that ledger (--ledger, or `ledger:` in the spec). Nothing was spent.")


def budget_overruns(spec: Spec, plan: Plan) -> list[str]:
    """Each budget the plan overruns, in ε (or ρ) and, for (ε, δ) terms, in δ, and by how much:
    e.g. "release budget by 1/2 ε"."""
    over = []
    total, cap = plan.total, plan.release_budget
    if total.amount > cap.amount:  # the ε (or ρ) alone: an (ε, δ) budget's δ has its own line
        over.append(f"release budget by {amount_text(subtract(total, cap))} {plan.symbol}")
    if isinstance(total, ApproxDP) and isinstance(cap, ApproxDP) and total.delta > cap.delta:
        over.append(f"release δ budget by {fraction_text(total.delta - cap.delta)}")
    after, life, remaining = plan.lifetime_spent_after, plan.lifetime_budget, plan.lifetime_remaining
    if after.amount > life.amount:
        over.append(f"lifetime budget of {spec.dataset.name} by "
                    f"{amount_text(subtract(after, life))} {plan.ledger_symbol} "
                    f"(remaining {amount_text(remaining)})")
    if isinstance(after, ApproxDP) and isinstance(life, ApproxDP) and isinstance(remaining, ApproxDP) \
            and after.delta > life.delta:
        over.append(f"lifetime δ budget of {spec.dataset.name} by {fraction_text(after.delta - life.delta)} "
                    f"(remaining {fraction_text(remaining.delta)})")
    return over


def over_budget_message(spec: Spec, plan: Plan) -> str:
    """What the release needs, and which budgets it overruns by how much."""
    needs = f"{plan.symbol} = {amount_text(plan.total)}"
    if isinstance(plan.charge, ApproxDP):
        needs += f", δ = {fraction_text(plan.charge.delta)}"
    return (f"the release needs {needs}, over the {' and the '.join(budget_overruns(spec, plan))}. "
            + " ".join(_over_budget_fixes(spec, plan)) + " The data was not read; nothing spent.")


def _ledger_option(spec: Spec) -> str:
    """The ``--ledger`` a ledger command needs to reach the spec's pinned ledger (none unpinned:
    the run's own, from the same environment)."""
    if not spec.ledger:
        return ""
    return f" --ledger {resolve_location(None, spec.ledger, spec.source.resolve().parent).shown}"


def _over_budget_fixes(spec: Spec, plan: Plan) -> list[str]:
    """What would make the release fit: the tables' budgets lowered (the planner proposes a split),
    the release budget raised within the lifetime's, or a recorded decision to raise the cap."""
    symbol, unit = plan.symbol, symbol_key(plan.symbol)
    fixes = []
    if plan.total.amount > plan.release_budget.amount:
        fixes.append(f"Fix: lower the tables' {symbol} in {spec.source.name} to sum to at most the release budget "
                     f"({amount_text(plan.release_budget)}; `dprelease plan {spec.source} --allocate` proposes a "
                     f"split), or raise `budget:`.")
    if plan.lifetime_spent_after.amount > plan.lifetime_budget.amount:
        fixes.append(f"Fix: a release of at most the remaining {amount_text(plan.lifetime_remaining)} "
                     f"{plan.ledger_symbol} (lower its tables' {symbol}), or, as a recorded decision, raise the "
                     f"dataset's cap: `dprelease ledger set-budget {spec.dataset.name} --{unit} NEW_CAP --reason "
                     f"TEXT{_ledger_option(spec)}`.")
    return fixes or [f"Fix: lower the δ of the release in {spec.source.name}, or raise the budget's δ."]


def _rehearse_postprocessing(spec: Spec, plan: Plan) -> None:
    """Run post-processing once on all-zero measurements (no data): a spec that post-processing
    cannot handle fails here, before any budget is reserved, not after the noise is drawn. A
    validated spec always can: a failure is a bug in dprelease (exit 1), not the user's."""
    from dprelease.postprocess import Invariants, postprocess_release, structural_masks

    invariants = {level: np.zeros(1 if level == ROOT else spec.column(level).size, dtype=np.int64)
                  for level in spec.invariant_levels}
    try:
        zeros = {(t.name, t.level): np.zeros((2, t.cells) if t.parts else t.cells, dtype=np.int64)
                 for t in plan.tables}
    except MemoryError:
        cells = sum(t.cells * (2 if t.parts else 1) for t in plan.tables)
        raise UserError(f"{spec.source}: the release's tables ({cells:,} cells in all) do not fit in this machine's "
                        "memory; publish fewer or coarser tables (limits.max_cells bounds a table's cells). "
                        "Nothing was spent.") from None
    try:
        postprocess_release(spec, zeros, plan.noise_variances(), invariants=Invariants.from_totals(invariants),
                            structural=structural_masks(plan),  # as the run will: the plan's structural cells
                            sink=lambda key, values: None)  # (each level dropped once fitted, as the run writes it)
        from dprelease.mechanisms.local import estimate_local

        for p in plan.local:  # the local estimates too: one answer per value, and all on one value
            estimate_local(np.ones(p.categories, dtype=np.int64), p.keep_probability)
            estimate_local(np.eye(p.categories, 1, dtype=np.int64).ravel() * 1000, p.keep_probability)
    except UserError:
        raise
    except Exception as exc:  # whatever it is, nothing may be spent on it: a bug, reported as one
        raise InternalError(f"{spec.source}: post-processing cannot handle this spec ({type(exc).__name__}: {exc}); "
                            "nothing was spent. Please report it, with the spec.") from exc


def _check_writable(output_dir: Path) -> None:
    for directory in (output_dir, output_dir / ".staging", output_dir / "_internal"):
        try:
            files.make_dirs(directory)  # 0700 (dprelease.host.files)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
                pass
        except OSError as exc:
            raise UserError(f"cannot write to {directory}: {exc.strerror or exc}; choose another --output-dir. "
                            "Nothing was spent.") from None
