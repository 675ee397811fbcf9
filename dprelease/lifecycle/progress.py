"""A progress bar while the data is scanned before anything is spent (the check of
:func:`dprelease.lifecycle.refusals.refuse_bad_data`, and ``dprelease check``): only on an
interactive terminal, and only for data large enough to take a while; never in captured output.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import IO, Callable, Iterator

SHOWN_FROM_BYTES = 64 << 20  # smaller data is scanned in about a second: no bar


@contextmanager
def scan_progress(total: int, what: str, stream: IO[str] | None = None) -> Iterator[Callable[[int], None] | None]:
    """A callback that moves a bar to the bytes scanned so far (of ``total``), or None where no
    bar is shown: ``stream`` (default standard error) is not a terminal, or ``total`` is below
    :data:`SHOWN_FROM_BYTES`. The bar is transient: it leaves no line behind."""
    stream = sys.stderr if stream is None else stream
    if total < SHOWN_FROM_BYTES or not stream.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                   console=Console(file=stream), transient=True)
    task = bar.add_task(what, total=total)
    with bar:
        yield lambda done: bar.update(task, completed=done)
