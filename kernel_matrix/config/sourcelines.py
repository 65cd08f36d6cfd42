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


# A bare or quoted TOML key, and a dotted path of them.
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"\\]*"|'[^']*')"""
_DOTTED = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_TABLE = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGNMENT = re.compile(rf"^\s*({_DOTTED})\s*=(.*)$")
_STRINGS = re.compile(r""""(?:[^"\\]|\\.)*"|'[^']*'""")


def _key_parts(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in re.findall(_KEY_PART, dotted))


def _shown(path: tuple[str, ...]) -> str:
    return ".".join(part for part in path if not part.startswith("\0"))


def redefined_key(text: str) -> tuple[int, int, str, int] | None:
    """Where a TOML document sets a key, or declares a table, a second time: (line, col,
    the dotted key, the line of the first), or None. tomllib names no key ("Cannot
    overwrite a value"), and its position can be the document's end. Reads the lines a
    key starts on; keys inside a multi-line value are not looked at."""
    first: dict[tuple[str, ...], int] = {}  # a value's or a declared table's path: its line
    implicit: dict[tuple[str, ...], int] = {}  # tables made by dotted keys: a header may not declare them
    table: tuple[str, ...] = ()
    depth, string = 0, ""  # inside a multi-line array or inline table; a multi-line string's quotes
    for number, line in enumerate(text.splitlines(), start=1):
        if string:
            string = "" if line.count(string) % 2 else string
            continue
        if depth > 0:
            bare = _STRINGS.sub("", line.split("#")[0])
            depth += bare.count("[") + bare.count("{") - bare.count("]") - bare.count("}")
            continue
        if header := _TABLE.match(line):
            path = _key_parts(header.group(2))
            if header.group(1) == "[[":  # an array of tables: each entry is a table of its own
                table = (*path, f"\0{number}")  # (a part no key can be, left out of what is shown)
                continue
            if (earlier := first.get(path, implicit.get(path))) is not None:
                return number, line.index("[") + 1, _shown(path), earlier
            first[path], table = number, path
            continue
        if assignment := _ASSIGNMENT.match(line):
            parts = _key_parts(assignment.group(1))
            path = (*table, *parts)
            if path in first:
                return number, len(line) - len(line.lstrip()) + 1, _shown(path), first[path]
            first[path] = number
            implicit.update({(*table, *parts[:n]): number for n in range(1, len(parts))})
            value = assignment.group(2)
            for quotes in ('"""', "'''"):
                if value.count(quotes) % 2:
                    string = quotes
            bare = _STRINGS.sub("", value.split("#")[0]) if not string else ""
            depth = bare.count("[") + bare.count("{") - bare.count("]") - bare.count("}")
    return None
