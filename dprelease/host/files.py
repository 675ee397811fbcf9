"""The one rule for everything dprelease writes: **files 0600, directories 0700** (owner
only), whatever the caller's umask.

Every file and directory the tool creates — a release's tables, measurements, manifest and
reports, its staging and internal run record, post-processed versions, ``report``'s HTML,
``init``'s spec, ``evaluate``'s report, ``randomize``'s answers and memo, the ledger's
directory, the day server's and warm runner's records and logs — is created here. What they
hold is noisy output, or describes the confidential data (the internal record, an evaluation),
or is a key: none of it is for another local user until its owner decides to share it.

* :func:`make_dirs` creates a directory and its missing parents, each 0700; directories that
  already exist are left as they are (a user's own project folder is not re-moded).
* :func:`write_bytes` / :func:`write_text` / :func:`write_with` write a whole file through a
  fresh temporary file beside it (created exclusively under a random name, never through a
  link, set to 0600 before a byte is written) and rename it over the target: a link planted at
  the target is replaced, never followed, and no reader sees a partial file.
* :func:`write_new` writes a file only where none is (a key, a secret: the first one stays).
* :func:`open_truncated` opens a log for writing (created or truncated, 0600, never through a
  link at its path).

The mode is set with ``fchmod`` after creation, so even a umask that clears the owner's bits
cannot change it. Standard library only: cheap to import (``processes.py`` and the day server
use it). The ledger's SQLite file and key are created by ``ledger/schema.py`` and
``ledger/keys.py`` (exclusively, 0600, with this rule's :data:`FILE_MODE`), in a directory made
here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, Callable

FILE_MODE = 0o600
DIR_MODE = 0o700
UMASK = 0o077  # the process umask while a run writes (third-party writers, e.g. SQLite's journal)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def owner_only(info: os.stat_result, *, directory: bool = False) -> bool:
    """What the rule asks of an entry another process may have made: a regular file (a directory:
    ``directory``) of this user's, with no bit for group or others (a symbolic link, seen with
    ``lstat``, is neither)."""
    kind = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    return kind and info.st_uid == os.getuid() and not info.st_mode & 0o077


def make_dirs(path: Path) -> Path:
    """``path`` as a directory: it and each missing parent created 0700 (an existing directory,
    or a link to one, is kept as it is). FileExistsError when ``path`` is a file."""
    target = path = Path(path)
    missing = []
    while not path.is_dir():
        if os.path.lexists(path) and not path.is_dir():
            raise FileExistsError(f"{path} exists and is not a directory")
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:  # made meanwhile by another process: theirs to mode
            continue
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW)
        try:
            os.fchmod(fd, DIR_MODE)  # whatever the umask took away
        finally:
            os.close(fd)
    return target


def write_with(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """Write the file at ``path`` whole: ``write`` fills a fresh owner-only temporary file in the
    same directory (the parents made by :func:`make_dirs`), which is then renamed over ``path``.
    Whatever was at ``path`` (a file, a link) is replaced, never written through."""
    path = Path(path)
    make_dirs(path.parent)
    while True:
        tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, FILE_MODE)
            break
        except FileExistsError:  # pragma: no cover - 48 random bits collided
            continue
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    """:func:`write_with` of ``data``."""
    return write_with(path, lambda f: f.write(data))


def write_text(path: Path, text: str) -> Path:
    """:func:`write_with` of ``text`` in UTF-8."""
    return write_bytes(path, text.encode("utf-8"))


def write_new(path: Path, data: bytes) -> bool:
    """``data`` at ``path`` only where nothing is there: written whole, owner-only and synced to a
    fresh temporary file, then linked into place (never over what exists, never half-written).
    False, and nothing written, where ``path`` exists (e.g. another process won the race)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.new")
    try:
        write_with(tmp, lambda f: (f.write(data), f.flush(), os.fsync(f.fileno())))
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def open_truncated(path: Path) -> BinaryIO:
    """``path`` opened for writing from its start (a log a child process writes to): created or
    truncated, 0600, refused (OSError) when ``path`` is a symbolic link."""
    make_dirs(Path(path).parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")
