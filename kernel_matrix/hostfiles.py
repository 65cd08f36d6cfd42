"""The host's only ways to write into a build folder.

A build folder is as much the repository's as kernel-matrix's: git stores symbolic links, so
a commit can hold build/logs/<cell>.probe.txt -> ~/.ssh/authorized_keys, and anything can
leave a FIFO where a log goes (opening a FIFO to write blocks until someone reads it; no
--cell-timeout bounds the host's own open()). So the host never opens a name it did not just
make to write into it:

- write_file: a whole file goes to a fresh temporary file beside it (O_EXCL | O_NOFOLLOW),
  renamed over the name: a rename replaces a link or a FIFO, never writes through one;
- append_log: a log grows only where its name is a plain file of one link (O_NOFOLLOW |
  O_NONBLOCK, then fstat): a link, FIFO or device is refused at once;
- the folder a file goes into is opened without following a link, and made where missing;
- check_build_dir, before a container build runs, refuses a build folder holding anything but
  plain files and folders (its object cache too: a cache scope is bind-mounted into build
  containers, and a link there would mount what it points at), so no folder along the way is a
  link either.

Each refusal is one line naming the path and what is there."""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from kernel_matrix.errors import ConfigError

# What a path that is no plain file or folder is, by its stat.S_IFMT (the container's output is
# checked against the same table).
SPECIAL_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
_WHY = "the host writes there only plain files and folders, never through a link, FIFO or device: remove it"
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeBuildDirError(ConfigError):
    """Something in the build folder that the host will not write through or into."""


def make_build_dir(path: Path) -> None:
    """The build folder, made, and shown to take new folders (variants are staged
    in one beside their place): a folder that is there but refuses them, as
    /proc/self or one on a read-only mount, is one line here, not a traceback later."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--build-dir {path}: cannot be made ({exc.strerror or exc})") from None
    try:
        tempfile.TemporaryDirectory(prefix=".kernel-matrix-probe-", dir=path).cleanup()
    except OSError as exc:
        raise ConfigError(f"--build-dir {path}: cannot be written ({exc.strerror or exc})") from None


def check_build_dir(root: Path) -> None:
    """Refuse a build folder that is a link, or holds anything but folders and regular files
    (links, FIFOs, sockets, devices; .cache included), before a build writes into it.
    A root not there yet is fine: this run makes it."""
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        raise _refused(root, _kind(info.st_mode, "a file where the build folder goes"))

    def unreadable(error: OSError) -> None:  # a folder it cannot list would go unchecked
        raise UnsafeBuildDirError(
            f"{error.filename}: cannot be read ({error.strerror}): refused (the build folder is checked whole "
            "before a build writes into it)"
        )

    for directory, dirs, files in os.walk(root, onerror=unreadable):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            mode = os.lstat(path).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise _refused(path, _kind(mode))


def write_file(path: Path, data: str | bytes) -> None:
    """path's whole content, written to a new file beside it and renamed over it: whatever was
    at path (a link, a FIFO, an older file) is replaced, never written through or opened."""
    with atomic_writer(path) as stream:
        stream.write(data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data)


@contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A binary stream whose bytes become path once the block ends without an error (see
    write_file); on an error, path is left as it was."""
    with _folder(path.parent) as folder:
        temporary = f".{path.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(temporary, _NEW_FILE, 0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as stream:
                yield stream
            try:
                os.replace(temporary, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            except OSError as exc:  # a folder where the file goes
                raise _refused(path, _kind_at(folder, path.name), exc) from None
        except BaseException:
            with suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise


def append_log(path: Path, text: str) -> None:
    """text at the end of the log at path (made if missing), which must be a plain file: a
    link, FIFO or device there is refused at once (nothing blocks, nothing is followed)."""
    with _folder(path.parent) as folder:
        try:
            fd = os.open(path.name, _APPEND, 0o666, dir_fd=folder)
        except OSError as exc:  # ELOOP: a link; ENXIO: a FIFO nobody reads
            raise _refused(path, _kind_at(folder, path.name), exc) from None
        with os.fdopen(fd, "ab") as stream:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                raise _refused(path, _kind(info.st_mode, "a hard link"))
            stream.write(text.encode("utf-8", "backslashreplace"))


def real_dir(path: Path) -> Path:
    """path, a folder (made where missing), refused where it is a link or no folder."""
    with _folder(path):
        return path


@contextmanager
def _folder(path: Path) -> Iterator[int]:
    """path, made where missing, opened as a folder without following a link there."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, _FOLDER)
    except OSError as exc:
        what = _kind(os.lstat(path).st_mode, "a file") if os.path.lexists(path) else None
        raise _refused(path, what, exc) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _kind(mode: int, otherwise: str = "not a plain file or folder") -> str:
    return SPECIAL_KINDS.get(stat.S_IFMT(mode), otherwise)


def _kind_at(folder: int, name: str) -> str | None:
    """What name in folder is, where it is no regular file (None: a regular file or nothing)."""
    try:
        mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except OSError:
        return None
    return "a folder" if stat.S_ISDIR(mode) else None if stat.S_ISREG(mode) else _kind(mode)


def _refused(path: Path, what: str | None, error: OSError | None = None) -> UnsafeBuildDirError:
    """The one line: what is at path, or (where nothing odd is there) why it cannot be written."""
    if what is None and error is not None:
        return UnsafeBuildDirError(f"{path}: cannot be written ({error.strerror or error})")
    return UnsafeBuildDirError(f"{path}: {what} in the build folder: refused ({_WHY})")
