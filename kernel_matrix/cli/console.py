"""Where the command line writes (progress and errors on stderr, results on
stdout), and the loop that runs one action per kernel, reporting each failure."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from kernel_matrix.errors import BuildError, KernelMatrixError

if TYPE_CHECKING:
    from kernel_matrix.planning.selection import Kernel

# CI logs are wider than rich's 80-column default for non-terminals. Markup is off:
# messages carry user text (names, paths, build.toml values such as `[general.hub]`),
# which must print literally; styles come from `styled`, never from the text.
# (A closed stream is None: `kernel-matrix matrix >&-` writes nothing there, and runs.)
console = Console(stderr=True, width=None if sys.stderr and sys.stderr.isatty() else 160, markup=False, highlight=False)
stdout = Console(width=None if sys.stdout and sys.stdout.isatty() else 240, markup=False, highlight=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line from plain strings and (text, style) pairs; no string is parsed as markup."""
    return Text.assemble(*parts)


def error(line: str) -> None:
    console.print(styled(("error:", "red"), " ", line), soft_wrap=True)


def each_kernel(kernels: list[tuple[Kernel, str | None]], action: Callable[[Kernel, str | None], None]) -> None:
    """action(kernel, subfolder) for each kernel; with several, one kernel's failure
    is reported and the others still run."""
    if len(kernels) == 1:
        action(*kernels[0])
        return
    failed = []
    for kernel, subfolder in kernels:
        console.print(styled((f"== {kernel.name}", "bold"), f" ({kernel.dir})"))
        try:
            action(kernel, subfolder)
        except KernelMatrixError as exc:
            failed.append(kernel.name)
            for line in str(exc).splitlines():
                error(f"{kernel.name}: {line}")
    if failed:
        raise BuildError(f"{len(failed)} of {len(kernels)} kernels failed: {', '.join(failed)}")
