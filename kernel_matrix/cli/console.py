"""Where the command line writes (progress and errors on stderr, results on
stdout), and the loop that runs one action per kernel, reporting each failure."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from kernel_matrix.errors import BuildError, ExitCode, KernelMatrixError, shared_exit_code
from kernel_matrix.inert import printable_lines
from kernel_matrix.inert import styled as styled  # the commands take it from here, with the consoles

if TYPE_CHECKING:
    from kernel_matrix.planning.selection import Kernel


class InertConsole(Console):
    """A console on which text is only text, whoever wrote it (a compiler's line in a failure,
    a container's output, a kernel's test): every control character (ESC, BEL, CR, C1 codes,
    bidi overrides) prints escaped, as \\x1b, and newlines still end lines. Strings are escaped
    before rich lays them out (rich would drop BEL and CR unseen); anything else rendered
    is escaped as it is written out. Only rich's own control segments (a live status's cursor
    moves) and styles reach the terminal as such."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(printable_lines(text), **options)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or segment.text.isprintable():
                yield segment
            else:
                yield Segment(printable_lines(segment.text), segment.style)


# CI logs are wider than rich's 80-column default for non-terminals. Markup is off:
# messages carry user text (names, paths, build.toml values such as `[general.hub]`),
# which must print literally; styles come from `styled` (inert.py), never from the text.
# (A closed stream is None: `kernel-matrix matrix >&-` writes nothing there, and runs.)
console = InertConsole(
    stderr=True, width=None if sys.stderr and sys.stderr.isatty() else 160, markup=False, highlight=False
)
stdout = InertConsole(width=None if sys.stdout and sys.stdout.isatty() else 240, markup=False, highlight=False)


def error(line: str) -> None:
    console.print(styled(("error:", "red"), " ", line), soft_wrap=True)


def each_kernel(
    kernels: list[tuple[Kernel, str | None]],
    action: Callable[[Kernel, str | None], None],
    mixed: ExitCode = ExitCode.BUILD,
) -> None:
    """action(kernel, subfolder) for each kernel; with several, one kernel's failure
    is reported and the others still run, and the run exits with the code their failures
    share (every suite failed: 6), else `mixed`, the command's own."""
    if len(kernels) == 1:
        action(*kernels[0])
        return
    failed: dict[str, ExitCode] = {}
    for kernel, subfolder in kernels:
        console.print(styled((f"== {kernel.name}", "bold"), f" ({kernel.dir})"))
        try:
            action(kernel, subfolder)
        except KernelMatrixError as exc:
            failed[kernel.name] = exc.exit_code
            for line in str(exc).splitlines():
                error(f"{kernel.name}: {line}")
    if failed:
        summary = BuildError(f"{len(failed)} of {len(kernels)} kernels failed: {', '.join(failed)}")
        summary.exit_code = shared_exit_code(failed.values(), mixed)
        raise summary
