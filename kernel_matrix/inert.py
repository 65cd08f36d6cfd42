"""Text someone else wrote (a compiler, a container, a kernel's tests), made inert where
kernel-matrix shows it: on a terminal, where an escape sequence could retitle the window,
recolour or erase lines or hide text (printable), and in a Markdown table, where a `|` adds
a column and a `<` an HTML tag (markdown_cell)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text


def printable(text: str) -> str:
    """text with every character that is not printable shown escaped, as Python writes it
    (ESC as \\x1b, BEL \\x07, CR \\r, a newline \\n, C1 codes, bidi overrides): one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable_lines(text: str) -> str:
    """printable() of each line of text: its newlines kept, nothing else unprintable."""
    if text.isprintable():
        return text
    return "\n".join(printable(line) for line in text.split("\n"))


# Each character Markdown (GitHub's, tables included) gives a meaning to, as a literal: a
# backslash before it, or an entity where a backslash does not keep HTML out.
_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*[]|~"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"})
# An underscore between two letters or digits (x86_64, a path's cu130_x86) can neither open
# nor close emphasis: only the others are escaped, so names read as they are.
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def markdown_cell(text: str) -> str:
    """text as one Markdown table cell shows it literally: one line (printable), no column
    break, tag, link, code span or emphasis of its own."""
    return _EMPHASIS_UNDERSCORE.sub(r"\\_", printable(text).translate(_MARKDOWN))


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line from plain strings and (text, style) pairs, for rich: no string is parsed as
    markup, and control characters in them show escaped (printable_lines)."""
    from rich.text import Text  # here: rich is what prints, and only what prints needs it

    return Text.assemble(
        *(printable_lines(part) if isinstance(part, str) else (printable_lines(part[0]), part[1]) for part in parts)
    )
