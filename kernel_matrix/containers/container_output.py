"""What a container wrote, read back by the host.

A build container runs the kernel's build, which runs code the kernel chooses
(a compiler flag can name a wrapper script). What it leaves in its output
folder may be a symbolic link to a host file, a hard link, a FIFO that blocks
a reader, or a device node. Before anything there is read, copied or moved
into build/, the whole tree is checked once the container is gone (so nothing
changes it any more): directories and regular files with one link only;
anything else fails the cell with one line naming it.

The worker's outcome (OUTCOME, beside its logs) says which failure ended a build
that failed; the host believes it only so far as it names another failure
(reported_failure)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from kernel_matrix.errors import BuildError, ExitCode, failure_code
from kernel_matrix.hostfiles import SPECIAL_KINDS, atomic_writer

# The log kind (BuildDir.log(cell, OUTCOME)) of the worker's outcome: {"exit_code": 7}.
OUTCOME = "outcome.json"
# More than an outcome ever holds: a bigger file is not read.
_OUTCOME_BYTES = 4096


class UnsafeOutputError(BuildError):
    """A container left something in its output that is not a plain file or folder."""


def check_tree(root: Path, *, owner: tuple[int, int] | None = None) -> None:
    """Refuse anything under root but directories and singly-linked regular files.
    owner (uid, gid): give every entry to it and clear set-id bits (a container
    that ran as another user made them)."""

    def unreadable(error: OSError) -> None:  # a folder it cannot list would go unchecked
        raise UnsafeOutputError(f"the container's output holds {error.filename}, which cannot be read: refused")

    for directory, dirs, files in os.walk(root, followlinks=False, onerror=unreadable):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            info = os.lstat(path)
            kind = SPECIAL_KINDS.get(stat.S_IFMT(info.st_mode))
            if kind is None and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                kind = "a hard link"
            if kind is not None:
                raise UnsafeOutputError(
                    f"the container's output holds {path.relative_to(root).as_posix()}, {kind}: refused "
                    "(a build may only write plain files and folders)"
                )
            if owner is not None:
                os.lchown(path, *owner)
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    if owner is not None:
        os.lchown(root, *owner)


def copy_regular(source: Path, target: Path) -> None:
    """Copy a regular file without following a link at source (O_NOFOLLOW), even
    if the tree changed after it was checked, into a new file renamed over target
    (hostfiles: a link or FIFO the build folder holds at target is replaced, not written through)."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            raise UnsafeOutputError(f"{source}: not a regular file: refused")
        with atomic_writer(target) as dst:
            shutil.copyfileobj(src, dst)


def strip_set_id_bits(root: Path) -> list[Path]:
    """Clear the setuid/setgid bits of every regular file under root (links not
    followed), after a writable `shell`: a program the container marked set-id
    would run with its owner's rights on the host. Returns the files changed."""
    changed = []
    for directory, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            path = Path(directory) / name
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
                changed.append(path)
    return changed


def reported_failure(outcome: Path, status: int) -> ExitCode:
    """The exit code of a build container whose worker exited with status (not 0): the
    failure its outcome file names (an ABI check: 7, a wrong builder: 4), else BUILD.
    The container ran the kernel's build, which can write that file too, so the code is
    taken only where it is a failure's ExitCode and the worker's own exit status is that
    same code: it can change which failure is reported, never turn one into a success,
    and never name a code the worker did not exit with. A file that is missing, a link,
    too big or not such JSON counts as no outcome."""
    try:
        fd = os.open(outcome, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ExitCode.BUILD
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return ExitCode.BUILD
        data = stream.read(_OUTCOME_BYTES + 1)
    try:
        said = json.loads(data) if len(data) <= _OUTCOME_BYTES else None
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's depth
        return ExitCode.BUILD
    code = failure_code(said.get("exit_code")) if isinstance(said, dict) else None
    return code if code is not None and code == status else ExitCode.BUILD
