"""Reading a configuration file (build_matrix.yaml, build.toml) within limits.

Both come from a kernel's author or a pull request. The parsers hold a whole
document in memory (PyYAML's node graph takes about a kilobyte a key: a 22 MB
matrix of 2M keys took 5 minutes and 2.2 GB), so a file is refused on its size
before any of it is parsed, and a special file (a FIFO, /dev/zero) before it is
opened: opening a FIFO blocks until a writer comes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kernel_matrix.errors import ConfigError

# Real files are a few kilobytes (the corpus's largest build.toml is 3.2 KB, this
# repository's matrix 1.5 KB): far above any of them, far below a slow parse.
MAX_CONFIG_BYTES = 1024 * 1024


def read_config(path: Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """path's text (UTF-8), or one ConfigError line naming the file and why not.
    what: how messages name it ("the matrix file", "build.toml")."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: cannot read {what}: not a regular file")
        if info.st_size > max_bytes:
            raise ConfigError(
                f"{path}: {what} is {info.st_size} bytes, more than the limit of {max_bytes}; refusing to read it"
            )
        # O_NONBLOCK: should a FIFO take the file's place after the check, opening it
        # does not wait for a writer; a regular file reads as ever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as stream:
            data = stream.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > max_bytes:  # it grew since the check
        raise ConfigError(f"{path}: {what} is more than the limit of {max_bytes} bytes; refusing to read it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None
