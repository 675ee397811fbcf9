"""``dprelease randomize`` and ``dprelease evaluate``: simulations. Randomize answers as the
respondents would (and register them), or simulate releases of test data and compare
post-processing methods against it (NOT PRIVATE: its output describes the exact data)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from dprelease.host import files
from dprelease.cli.options import LedgerOpt
from dprelease.cli.common import (
    handled,
    out,
    say,
    spec_ledger,
    spec_location,
)
from dprelease.errors import UserError


@handled
def randomize(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="The release spec declaring the local table.")],
    table: Annotated[str, typer.Argument(metavar="TABLE", help="A table of kind: local in the spec.")],
    input_path: Annotated[Path, typer.Option("--input", metavar="FILE", help="CSV of true answers.")],
    output_path: Annotated[Path, typer.Option("--output", metavar="FILE", help="CSV to write (never overwritten).")],
    id_column: Annotated[Optional[str], typer.Option("--id", metavar="COLUMN", help="Respondent id column.")] = None,
    memo: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="Keep and reuse each respondent's first randomized answer (needs --id); "
        "respondent-side state, written owner-only.")] = None,
    ledger: LedgerOpt = None,
) -> None:
    """Randomize answers as the respondents would, with the local table's protocol.

    For simulations and field tools: the output is what a collection receives. Writes the
    input's columns with the table's column replaced by randomized answers, and registers the
    output in the dataset's ledger (its keyed fingerprint, collection, protocol, ε and the memo
    reused): a kind: local table reads only registered answers. Spends nothing centrally; the
    release that estimates from the answers records the collection's ε.
    """
    from dprelease.cli.randomizing import randomize_file
    from dprelease.spec import load_spec

    spec = load_spec(spec_path)
    with spec_ledger(spec, spec_location(spec, ledger)) as opened:
        written, reused, registered = randomize_file(spec, table, input_path, output_path, id_column, memo, opened)
    local = next(t for t in spec.local_tables if t.name == table)
    out.print(f"randomized {written:,} answers of {local.column} with {local.protocol} (ε = {local.epsilon_shown} "
              f"per respondent) → {output_path}" + (f"; {reused:,} reused from {memo}" if memo else ""),
              markup=False)
    for a in registered:
        say(f"registered {output_path} as the answers to {a.question} of collection {a.collection} of dataset "
            f"{a.dataset} ({a.protocol}" + (f", from the memo of {a.memo_of}" if a.memo_of else "") + ")")


@handled
def evaluate(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file (test data only).")],
    trials: Annotated[int, typer.Option(min=1, max=10_000, metavar="N", help="Simulated releases.")] = 20,
    ledger: LedgerOpt = None,
    output: Annotated[Optional[Path], typer.Option(metavar="FILE", help="Also write the report here.")] = None,
) -> None:
    """NOT PRIVATE: simulate releases on test data and compare clamp with consistent post-processing.

    Reads the data and reports errors against it, so its output is confidential. Refuses data
    released under any dataset name in the ledger, by its bytes or its records (and a dataset
    name with releases), and an --output inside a published release or an output directory of
    the ledger's releases; records the evaluation in the ledger (who, when, which data; nothing
    spent) and publishes nothing.
    """
    from dprelease.evaluate.accuracy import NOT_PRIVATE, evaluate as run_evaluation, report_md
    from dprelease.spec import load_spec

    spec = load_spec(spec_path)
    location = spec_location(spec, ledger)
    if location.pin is not None:
        raise UserError(f"{spec.source}: the spec pins the dataset's ledger (ledger: {spec.ledger}); an evaluation is "
                        f"recorded there, not in {location.shown}. Drop --ledger.")

    def refuse_no_file() -> None:
        if not spec.dataset.resolved_path.is_file():
            raise UserError(f"{spec.source}: dataset.path {spec.dataset.path!r} is not a file")

    with spec_ledger(spec, location, check=refuse_no_file) as opened:
        from dprelease.data import file_fingerprint
        from dprelease.evaluate.accuracy import refuse_report_among_releases
        from dprelease.lifecycle.refusals import refuse_bad_data

        if output is not None:  # before the data is read: nothing recorded, nothing written
            refuse_report_among_releases(output, [*opened.output_dirs(), *filter(None, [spec.output_path])])
        fingerprint = opened.fingerprint(file_fingerprint(spec.dataset.resolved_path))
        state = opened.state(spec.dataset.name)
        released = sorted(set(opened.runs_with_data(fingerprint))
                          | {(spec.dataset.name, r.release) for r in (state.runs if state else ())})
        if released:
            dataset, release = released[0]
            raise UserError(f"dataset {dataset!r} (release {release!r}) was released from this data or under this "
                            f"name in the ledger at {location.shown}: data under protection is not evaluated in the "
                            "open. Evaluate test data.")
        checked = refuse_bad_data(spec)  # data that does not fit the spec (its rules too): refused, nothing recorded
        same = opened.same_people(checked.identity)  # the same people in any file, under any name
        if same is not None:
            raise UserError(f"dataset {same[0]!r} was released from data of the same people in the ledger at "
                            f"{location.shown} ({same[1]}): data under protection is not evaluated in the open, "
                            "however its file is written. Evaluate test data. Nothing was recorded.")
        opened.record_evaluation(dataset=spec.dataset.name, data_fingerprint=fingerprint, trials=trials,
                                 spec_path=str(spec.source.resolve()))
    say(f"{NOT_PRIVATE}: {trials} simulated releases of {spec.release}; recorded in the ledger as an evaluation in "
        "the open (a later release of this data will say so)")
    command = " ".join(["dprelease evaluate", str(spec_path), "--trials", str(trials)])
    with _trial_progress(f"{spec.release}: simulated releases", trials) as on_trial:
        rows = run_evaluation(spec, trials, on_trial=on_trial)
    from dprelease.evaluate.coverage import coverage_md, margin_coverage

    text = report_md(spec, rows, trials, command) + "\n" + coverage_md(spec, margin_coverage(spec, trials), trials)
    print(text)
    if output is not None:
        _write_private(output, text)
        say(f"report written to {output} (owner-only; not for publication)")


@contextmanager
def _trial_progress(description: str, total: int) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr while the trials run, for an interactive terminal only (pipes,
    files and tests get nothing); it is removed when the trials end."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console as RichConsole
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), TimeRemainingColumn(), console=RichConsole(stderr=True), transient=True)
    task = bar.add_task(description, total=total)
    with bar:
        yield lambda done: bar.update(task, completed=done)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new or replaced owner-only file (it describes the exact data), never
    through a link planted at ``path`` (:func:`dprelease.host.files.write_text`)."""
    try:
        files.write_text(path, text)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
