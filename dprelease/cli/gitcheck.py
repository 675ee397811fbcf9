"""What git says of a path, for the commands that write a spec or create a ledger (``init``,
``ledger init``): the work tree it is in, and which paths of it git would not ignore. Silent
without git, outside a work tree, or when git cannot tell: never a reason to fail."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from dprelease.cli.common import say


def work_tree(path: Path) -> Path | None:
    """The top folder of the git work tree ``path`` (a file or folder, existing or not) is in."""
    where = path.resolve()
    while not where.exists():
        where = where.parent
    found = _git(where if where.is_dir() else where.parent, "rev-parse", "--show-toplevel")
    if found is None or found.returncode != 0 or not found.stdout.strip():
        return None
    return Path(found.stdout.strip()).resolve()


def warn_if_not_ignored(paths: list[Path], top: Path | None = None) -> None:
    """A warning naming the ``paths`` inside a git work tree (``top``, else the one the first path
    is in) that git would not ignore (a ledger, its key and unpublished outputs are never to be
    committed). One ``git check-ignore`` for all of them: it prints those ignored (rc 0), or none (1)."""
    top = top or (work_tree(paths[0]) if paths else None)
    if top is None:
        return
    seen = [p for p in paths if p.is_relative_to(top)]
    found = _git(top, "check-ignore", "--", *map(str, seen)) if seen else None
    if found is None or found.returncode not in (0, 1):
        return
    ignored = {Path(line) for line in found.stdout.splitlines()}
    loose = [p for p in seen if p not in ignored]
    if not loose:
        return
    patterns = sorted({f"{p.parent.relative_to(top).as_posix()}/" for p in loose})
    say(f"WARNING: git would not ignore {', '.join(str(p.relative_to(top)) for p in loose)} in the work tree {top}: "
        f"add {' and '.join(patterns)} to {top / '.gitignore'}: a ledger, its key and unpublished outputs must never be "
        "committed")


def _git(where: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        return subprocess.run([git, "-C", str(where), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
