"""Turn a location inside a parsed document into `file:line:col`, so that every
complaint about an input file points at the line to fix."""

from __future__ import annotations

import re
from pathlib import Path

from kernel_matrix.errors import ConfigError


def toml_key_position(text: str, loc: tuple[str | int, ...]) -> tuple[int, int]:
    """Best line and column (1-based) for a key path in a TOML document.

    TOML parsers keep no positions, so look for the deepest table header that
    is a prefix of loc, then the first key of loc below it. Falls back to the
    table header, then to line 1.
    """
    lines = text.splitlines()
    names = [str(part) for part in loc if not isinstance(part, int)]
    header_line, depth = 0, 0
    for n in range(len(names), 0, -1):
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, names[:n])) + r"\s*\]")
        found = next((i for i, line in enumerate(lines) if header.match(line)), None)
        if found is not None:
            header_line, depth = found + 1, n
            break
    if depth < len(names):
        key = re.compile(r"^(\s*)" + re.escape(names[depth]) + r"\s*=")
        for i in range(header_line, len(lines)):  # the lines below the header
            if lines[i].lstrip().startswith("["):
                break
            match = key.match(lines[i])
            if match:
                return i + 1, len(match.group(1)) + 1
    return max(header_line, 1), 1


def where(path: Path, line: int, col: int) -> str:
    return f"{path}:{line}:{col}"


class Problems:
    """A file's problems, each one `file:line:col: message` line, raised together
    as one ConfigError: a user fixes them all in one pass, not one per run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []

    def add(self, line: int, col: int, message: str) -> None:
        self.lines.append(f"{where(self.path, line, col)}: {message}")

    def raise_if_any(self) -> None:
        if self.lines:
            raise ConfigError("\n".join(self.lines))
