"""``dprelease ledger`` and its subcommands: list lifetime spend, change a cap, register answers,
require approval, resolve a crashed run. Every change is a recorded decision (who, why)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Annotated, Optional

import typer

from dprelease.accounting import (
    ApproxDP,
    Budget,
    NotANumber,
    Terms,
    amount_text,
    budget_of,
    delta_of,
    fraction_text,
    parse_budget,
)
from dprelease.cli.options import LedgerOpt
from dprelease.cli.common import (
    handled,
    ledger_at,
    out,
    say,
    spec_ledger,
    spec_location,
)
from dprelease.errors import DataError, LedgerError, UserError
from dprelease.ledger import DatasetState, LedgerLocation, resolve_location


@handled
def ledger_init(
    ctx: typer.Context,
    location_arg: Annotated[Optional[str], typer.Argument(
        metavar="LOCATION", help="Where the new ledger lives: an absolute path or a database URL.")] = None,
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why a lifetime budget starts here; kept in the "
                                        "ledger and shown by `dprelease ledger` and every report.")] = "",
    spec_path: Annotated[Optional[Path], typer.Option(
        "--spec", metavar="SPEC", help="Create the ledger the spec pins (its ledger:, relative to the spec file).")] = None,
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who decided (default: the login name).")] = None,
) -> None:
    """Create a ledger: the one deliberate act that starts lifetime budgets, recorded (who, when, why).

    Nothing else creates a ledger from a spec's pin, $DPRELEASE_LEDGER or the per-user default.
    Where a ledger exists already, nothing is done (exit 0); where the key file of a deleted or
    moved ledger is left, it is refused.
    """
    from dprelease.ledger import Birth, Ledger, typed_location
    from dprelease.ledger.records import current_user, now

    if (location_arg is None) == (spec_path is None):
        raise typer.BadParameter("give the LOCATION of the new ledger, or --spec SPEC for the one the spec pins",
                                 param_hint="LOCATION/--spec")
    if not reason.strip():
        raise typer.BadParameter("say why a lifetime budget starts here, e.g. --reason \"the demo's own budget\"",
                                 param_hint="--reason")
    if ctx.obj:
        raise typer.BadParameter("name the location as LOCATION (or --spec), not with --ledger", param_hint="--ledger")
    if spec_path is not None:
        from dprelease.spec import load_spec

        spec = load_spec(spec_path)
        if not spec.ledger:
            raise UserError(f"{spec.source} pins no ledger (no ledger: key); add `ledger: PATH` (e.g. ../ledgers/"
                            f"{spec.dataset.name.partition('/')[0]}.sqlite, relative to the spec file, where git ignores "
                            "it) or give the LOCATION. Nothing was created.")
        location = spec_location(spec, None)
    else:
        location = typed_location(location_arg or "")
    existing = Ledger.open(location)
    if existing is not None:
        with existing:
            birth = existing.birth
            say(f"a ledger is already at {location.shown} (id {existing.id}; "
                + (birth.shown if birth is not None else "made before births were recorded") + "); nothing was created")
        return
    birth = Birth(now(), (by or current_user()).strip(), reason.strip(), "dprelease ledger init")
    with Ledger.init(location, birth) as made:
        out.print(f"created ledger id {made.id} at {location.shown}, {birth.shown}. Every lifetime budget of the "
                  f"datasets it records starts here. Its fingerprint key: {made.key_path} (owner-only); back up both, "
                  "and keep the key wherever the ledger goes.", markup=False)
        key = made.key_path
    _say_where_it_is_seen(location, key)


def _say_where_it_is_seen(location: LedgerLocation, key: Path) -> None:
    """A SQLite ledger inside a git work tree is this clone's alone (git ignores it, or is told
    to): another clone, user or machine sees none of its spend."""
    from dprelease.cli.gitcheck import warn_if_not_ignored, work_tree

    path = location.sqlite_path
    top = None if path is None else work_tree(path)
    if path is None or top is None:
        return
    warn_if_not_ignored([path, key], top)
    say(f"note: this ledger lives in the work tree {top}: another clone, user or machine does not see it, and a "
        "spec run there is refused until a ledger is made there too (a second budget for the same people: "
        "don't). A team keeps one ledger at one shared location (a database URL, docs/ledger.md) and pins it.")


@handled
def ledger_set_budget(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(metavar="DATASET")],
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why the cap changes; shown in every report.")],
    epsilon: Annotated[Optional[str], typer.Option(
        metavar="E", help="The new lifetime cap in ε (pure and (ε, δ) datasets), e.g. 6 or \"11/2\".")] = None,
    rho: Annotated[Optional[str], typer.Option(
        metavar="R", help="The new lifetime cap in ρ (zCDP datasets), e.g. 2.")] = None,
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who decided (default: the login name).")] = None,
    create: Annotated[bool, typer.Option("--create", help="Add the dataset if the ledger does not have it (the "
                                         "ledger itself: `dprelease ledger init`).")] = False,
    delta: Annotated[Optional[str], typer.Option(
        metavar="D", help="The lifetime δ of an (ε, δ) dataset, e.g. 1e-6 (kept as it was if omitted).")] = None,
    terms: Annotated[Optional[str], typer.Option(
        metavar="pure|zcdp|approx", help="With --create: the new dataset's terms (default: pure; zcdp with "
        "--rho; approx with --delta).")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Change a dataset's lifetime cap: an explicit, recorded decision. Spends are never reduced."""
    import re

    if (epsilon is None) == (rho is None):
        raise typer.BadParameter("give the new cap as --epsilon E (pure or (ε, δ) terms) or --rho R (zCDP terms)",
                                 param_hint="--epsilon/--rho")
    option, written = ("--rho", rho) if rho is not None else ("--epsilon", epsilon)
    try:
        cap = parse_budget(written, written, what=option)
    except NotANumber as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    try:
        cap_delta = None if delta is None else parse_budget(delta, delta, what="--delta")
    except NotANumber as exc:
        raise typer.BadParameter(str(exc), param_hint="--delta") from None
    if cap_delta is not None and not 0 < cap_delta < 1:
        raise typer.BadParameter("δ lies strictly between 0 and 1, e.g. 1e-6", param_hint="--delta")
    if terms is not None and terms not in ("pure", "zcdp", "approx"):
        raise typer.BadParameter(f"{terms!r} is not one of pure, zcdp, approx", param_hint="--terms")
    new_terms = Terms("zcdp" if terms == "zcdp" or (terms is None and rho is not None) else
                      "approx" if terms == "approx" or cap_delta is not None else "pure")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}(/[^/\x00]{1,100})?", dataset):
        raise typer.BadParameter(f"{dataset!r} is not a dataset name (lower-case letters, digits, '.', '_', '-')",
                                 param_hint="DATASET")
    if not reason.strip():
        raise typer.BadParameter("say why the cap changes", param_hint="--reason")
    location = resolve_location(ledger or ctx.obj)
    with ledger_at(location) as opened:
        before = opened.state(dataset)
        if before is None and create and location.source == "default":
            raise UserError(f"dataset {dataset!r} would start its lifetime budget in the per-user default ledger "
                            f"{location.shown}, where a dataset's budget never starts (another user, account or "
                            "container would start the same data afresh): name its ledger with --ledger. Nothing "
                            "was changed.")
        if before is None and not create:
            known = ", ".join(opened.datasets()) or "none"
            raise UserError(f"dataset {dataset!r} is not in the ledger (known: {known}); to add it with this "
                            "cap, add --create")
        if before is not None and terms is not None and before.terms.kind != terms:
            raise UserError(f"dataset {dataset!r} already has {before.terms.text!r} terms; a ledger's terms are fixed "
                            "when the dataset is created")
        kind = before.terms.kind if before is not None else new_terms.kind
        if (kind == "zcdp") != (option == "--rho"):  # a cap is given in the unit of the dataset's terms
            right = "--rho R" if kind == "zcdp" else "--epsilon E"
            raise UserError(f"dataset {dataset!r} {'has' if before is not None else 'would have'} "
                            f"{Terms(kind).shown} terms: its cap is {'a ρ' if kind == 'zcdp' else 'an ε'}; give it as "
                            f"{right}. Nothing was changed.")
        budget = _cap_budget(dataset, before.terms if before is not None else new_terms, cap, cap_delta, before)
        state = opened.set_budget(dataset, budget, reason=reason, by=by, terms=new_terms,
                                  keep_delta=cap_delta is None)  # δ not given: the current one, read under the lock
    was = f"from {amount_text(before.budget)} " if before else "(new dataset) "
    out.print(f"lifetime cap ({state.terms.symbol}) of {dataset} set {was}to {amount_text(state.budget)}; spent "
              f"{amount_text(state.spent)}, remaining {amount_text(state.remaining)}", markup=False)
    if isinstance(state.budget, ApproxDP) and isinstance(state.spent, ApproxDP) and \
            isinstance(state.remaining, ApproxDP):
        out.print(f"lifetime δ of {dataset}: cap {fraction_text(state.budget.delta)}, spent "
                  f"{fraction_text(state.spent.delta)}, remaining {fraction_text(state.remaining.delta)}", markup=False)
    if state.remaining.amount < 0:  # in the terms' unit (ε or ρ), as before; a δ below its spend is not warned of
        say("warning: the new cap is below what is already spent; no further release can run")


def _cap_budget(dataset: str, terms: Terms, cap: Fraction, delta: Fraction | None,
                before: DatasetState | None) -> Budget:
    """The new cap as a budget of the dataset's terms' kind: an (ε, δ) cap keeps the δ it had
    when ``--delta`` is not given; the other kinds have no δ."""
    kind = terms.kind
    if kind != "approx":
        if delta is not None:
            raise LedgerError(f"dataset {dataset!r} has {terms.text!r} terms, whose budgets have no δ")
        return budget_of(kind, cap)
    delta = delta if delta is not None else delta_of(before.budget) if before is not None else None
    if delta is None:
        raise LedgerError(f"dataset {dataset!r} has (ε, δ) terms: its cap needs a δ too (--delta D)")
    return budget_of(kind, cap, delta)


@handled
def ledger_register_answers(
    ctx: typer.Context,
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="The release spec declaring the local table.")],
    table: Annotated[str, typer.Argument(metavar="TABLE", help="A table of kind: local in the spec.")],
    answers: Annotated[Path, typer.Option("--answers", metavar="FILE", help="The file of randomized answers.")],
    statement: Annotated[str, typer.Option(metavar="TEXT", help="Who randomized the answers, and how (e.g. the "
                                           "device app and its version); kept in the ledger and every manifest.")],
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who registers (default: the login name).")] = None,
    memo_of: Annotated[Optional[str], typer.Option(
        "--memo-of", metavar="COLLECTION", help="The answers repeat each respondent's first randomized answer from "
        "this collection (a memoised collection: no new ε); checked respondent by respondent against it.")] = None,
    id_column: Annotated[Optional[str], typer.Option(
        "--id", metavar="COLUMN", help="The respondent id column: the ledger keeps a keyed digest per respondent, "
        "what a later memoised collection is checked against (with --memo-of: default, the column COLLECTION's "
        "answers were registered with).")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Register answers randomized elsewhere (on the respondents' devices) for a local table:
    a recorded statement of who randomized them and how. A kind: local table reads only
    registered answers; `dprelease randomize` registers its own output. With --id the ledger
    keeps each respondent's answer as a keyed digest; with --memo-of the answers must repeat
    that collection's, respondent by respondent, or nothing is registered."""
    from dprelease.cli.randomizing import protocol_key
    from dprelease.data import file_fingerprint
    from dprelease.ledger import REGISTERED, AnswerSet
    from dprelease.lifecycle.memos import answers_source, read_respondents, registered_id_column
    from dprelease.spec import load_spec

    if not statement.strip():
        raise typer.BadParameter("say who randomized the answers, and how", param_hint="--statement")
    spec = load_spec(spec_path)
    local = next((t for t in spec.local_tables if t.name == table), None)
    if local is None:
        known = ", ".join(t.name for t in spec.local_tables) or "none"
        raise UserError(f"{spec.source}: no local table {table!r} (local tables: {known})")
    if memo_of is not None and memo_of != local.memo_of:
        raise UserError(f"{spec.source}: table {table} {'repeats collection ' + repr(local.memo_of) if local.memo_of else 'is not memoised'}"
                        f", not {memo_of!r}: --memo-of names the collection whose memo the answers were produced from")
    if not (answers.is_file() or answers.is_dir()):  # a directory of answer files, as dataset.path may be
        raise UserError(f"--answers {answers} is not a file or directory")
    with spec_ledger(spec, spec_location(spec, ledger or ctx.obj)) as opened:
        keyed = opened.fingerprint(file_fingerprint(answers))
        column = id_column or (registered_id_column(opened, spec.dataset.name, memo_of, local.column) if memo_of
                               else None)
        try:
            respondents = (read_respondents(spec, answers_source(spec, answers), column, [local.column]) if column
                           else None)
        except DataError as exc:  # an empty id or an undeclared answer, named with its file and row
            raise DataError(f"{str(exc).rstrip('.')}. Nothing was registered or spent.") from None
        done = opened.register_answers((AnswerSet(spec.dataset.name, local.collection, local.column,
                                                  protocol_key(spec, local), local.epsilon_bound, keyed, REGISTERED,
                                                  memo_of=memo_of, statement=statement.strip()),), by=by,
                                       respondents=respondents)
    a = done[0]
    kept = (f"; each respondent's answer repeats {a.memo_of}'s (checked by {column})" if a.memo_of and column
            else f"; a keyed digest per respondent kept (by {column})" if column else "")
    out.print(f"registered {answers} as the answers to {a.question} of collection {a.collection} of dataset "
              f"{a.dataset} ({a.protocol}" + (f", from the memo of {a.memo_of}" if a.memo_of else "")
              + f"), by {a.registered_by}: {a.statement}{kept}", markup=False)


@handled
def ledger_require_approval(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(metavar="DATASET")],
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why; kept in the ledger and shown in listings.")],
    off: Annotated[bool, typer.Option("--off", help="Lift the requirement (recorded too).")] = False,
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who decided (default: the login name).")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Require (or, with --off, stop requiring) an approved plan for every run of DATASET and its
    periods, scheduled runs included: a recorded decision, shown in `dprelease ledger`."""
    if not reason.strip():
        raise typer.BadParameter("say why", param_hint="--reason")
    with ledger_at(resolve_location(ledger or ctx.obj)) as opened:
        policy = opened.set_policy(dataset, "approval", "optional" if off else "required", reason=reason, by=by)
    out.print(f"approval {policy.value} for every run of {policy.dataset} (set by {policy.set_by}: {policy.reason})",
              markup=False)


@handled
def ledger_resolve(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The run (its id, or the first 8+ characters).")],
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why; kept in the ledger and shown in listings.")],
    void: Annotated[bool, typer.Option("--void", help="Release the reservation: only when its outputs never "
                                       "appeared (nothing published, nothing staged).")] = False,
    commit: Annotated[bool, typer.Option("--commit", help="Record it as published: only when its release "
                                         "directory is in place with this run's manifest.")] = False,
    fail: Annotated[bool, typer.Option("--fail", help="Record it as failed: spent, never published (its staged "
                                       "outputs are removed).")] = False,
    by: Annotated[Optional[str], typer.Option(metavar="NAME", help="Who decided (default: the login name).")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Settle an unfinished (crashed) run's reservation, with who and why."""
    from dprelease.lifecycle import resolve_run

    if [void, commit, fail].count(True) != 1:
        raise typer.BadParameter("choose one of --void, --commit, --fail", param_hint="--void/--commit/--fail")
    if not reason.strip():
        raise typer.BadParameter("say why", param_hint="--reason")
    with ledger_at(resolve_location(ledger or ctx.obj)) as opened:
        outcome = resolve_run(opened, run_id, "void" if void else "commit" if commit else "fail", reason, by)
    out.print(outcome, markup=False)
