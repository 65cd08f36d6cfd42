"""The live view of a many-cell build: one row per cell (status, time), redrawn
in place on a terminal; one line per change in CI logs, where redrawing is noise."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from kernel_matrix.planning.matrix import Cell

_COLOURS = {"building": "yellow", "built": "green", "up to date": "green", "FAILED": "red"}


class CellProgress:
    def __init__(self, console: Console, names: list[str]) -> None:
        self.console = console
        self.status = dict.fromkeys(names, "waiting")
        self.since = dict.fromkeys(names, time.monotonic())
        self._lock = threading.Lock()  # cells report from their own threads

    def __call__(self, cell: Cell, status: str) -> None:
        with self._lock:
            self.status[cell.name] = status
            self.since[cell.name] = time.monotonic() if status == "building" else self.since[cell.name]
        if not self.console.is_terminal:
            self.console.print(f"{cell.name}: {status}", highlight=False)

    def __rich__(self) -> Table:
        table = Table(show_edge=False, box=None)
        for column in ("variant", "status", "seconds"):
            table.add_column(column)
        with self._lock:
            for name, status in self.status.items():
                seconds = f"{time.monotonic() - self.since[name]:.0f}" if status == "building" else ""
                table.add_row(name, Text(status, style=_COLOURS.get(status, "dim")), seconds)
        return table


@contextmanager
def live_progress(console: Console, names: list[str]) -> Iterator[CellProgress]:
    progress = CellProgress(console, names)
    if not console.is_terminal:
        yield progress
        return
    with Live(progress, console=console, refresh_per_second=4, transient=True):
        yield progress
