"""The `kernel-matrix` command line. Each subcommand is one CI job step that a
developer can run locally; errors are one line on stderr and a distinct exit code.

One module per group of commands: matrix.py (matrix), images.py (builder-images), build.py (build,
shell), wheels.py (wheels), checks.py (test, check-abi), verify.py (verify), release.py (publish, clean); the
options they share in options.py, tables in render.py, output in console.py."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, TextIO, cast

import typer

from kernel_matrix.cli.build import build, shell
from kernel_matrix.cli.checks import check_abi, test
from kernel_matrix.cli.console import error
from kernel_matrix.cli.images import builder_images
from kernel_matrix.cli.init import init
from kernel_matrix.cli.matrix import matrix
from kernel_matrix.cli.release import clean, publish
from kernel_matrix.cli.test_variant import SETTINGS, test_variant
from kernel_matrix.cli.verify import verify
from kernel_matrix.cli.wheels import wheels
from kernel_matrix.errors import ExitCode, KernelMatrixError

app = typer.Typer(
    help="Build, test and publish a PyTorch kernel for every torch x CUDA variant.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# In the order `kernel-matrix --help` lists them: a CI run's order.
COMMANDS: dict[str, Callable[..., None]] = {
    "init": init,  # once, in a kernel's repository
    "matrix": matrix,
    "builder-images": builder_images,  # once a run, before build, where builders are shared
    "build": build,
    "wheels": wheels,
    "shell": shell,
    "test": test,
    "check-abi": check_abi,
    "clean": clean,
    "publish": publish,
    "verify": verify,
}
for name, function in COMMANDS.items():
    app.command(name)(function)


def print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:  # the installed distribution's, which pip and bug reports name
            text = version("kernel-matrix")
        except PackageNotFoundError:  # run from a source tree that is not installed
            from kernel_matrix import __version__ as text
        typer.echo(f"kernel-matrix {text}")
        raise typer.Exit()


@app.callback()
def options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print kernel-matrix's version and exit.", callback=print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Build, test and publish a PyTorch kernel for every torch x CUDA variant."""


app.command("test-variant", context_settings=SETTINGS)(test_variant)


def interrupt_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # CI runners and `docker stop` send SIGTERM: unwind like Ctrl-C, so that
    # containers are removed and staged builds deleted on the way out.
    raise KeyboardInterrupt


class ReaderMayLeave:
    """sys.stdout, whose reader may stop reading early (`kernel-matrix init | head -1`).
    Python, and click around it, would end the command at its next write, with exit 1 and
    no word, half done (init without its workflow file, a build stopped). Here the rest of
    the output goes to /dev/null instead (as Python's documentation advises for
    EPIPE), and the command finishes and exits as its work did."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        # The stream's buffer is still unwritten: the descriptor is replaced, so that every
        # later flush (the interpreter's at exit too) succeeds.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding ...: the stream's
        return getattr(self._stream, name)


def main() -> None:
    if TYPE_CHECKING:  # checked against the typer the environment has
        from typer._click import exceptions as click
    else:
        try:  # typer >= 0.22 carries its own copy of click
            from typer._click import exceptions as click
        except ImportError:  # pragma: no cover - older typer uses click itself
            from click import exceptions as click

    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    if sys.stdout is not None:  # None: closed before the start (`>&-`), and written to by no one
        sys.stdout = cast(TextIO, ReaderMayLeave(sys.stdout))
    try:
        # Not standalone: click's own usage errors come here, to be one line too.
        code = app(standalone_mode=False)
    except KernelMatrixError as exc:
        for line in str(exc).splitlines():  # one line per problem
            error(line)
        raise SystemExit(int(exc.exit_code)) from None
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc), err=True)
        raise SystemExit(ExitCode.CONFIG) from None
    except click.ClickException as exc:  # a bad option or argument
        ctx = getattr(exc, "ctx", None)  # usage errors carry the command's context
        command = f"{ctx.command_path}: " if ctx else ""
        error(command + " ".join(exc.format_message().split()))
        raise SystemExit(ExitCode.CONFIG) from None
    except typer.Abort:  # end of input at a prompt
        raise SystemExit(ExitCode.FAILURE) from None
    # Ctrl-C and SIGTERM come back as typer.Exit(130), returned as `code`.
    raise SystemExit(code if isinstance(code, int) else 0)  # typer.Exit(code) returns its code here


if __name__ == "__main__":
    main()
