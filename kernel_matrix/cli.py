"""The `kernel-matrix` command line. Each subcommand is one CI job step that a
developer can run locally; errors are one line on stderr and a distinct exit code."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import ExitCode, KernelMatrixError

app = typer.Typer(
    help="Build, test and publish a PyTorch kernel for every torch x CUDA variant.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console(stderr=True)

KernelDir = Annotated[Path, typer.Option("--kernel-dir", help="The kernel, in kernel-builder layout (build.toml).")]
BuildDir = Annotated[Path, typer.Option("--build-dir", help="Where variants are written: <build-dir>/<variant>/.")]
Python = Annotated[
    Optional[str], typer.Option("--python", help="The Python whose torch to use (default: the one running this).")
]


@app.command()
def build(
    kernel_dir: KernelDir = Path("kernel"),
    build_dir: BuildDir = Path("build"),
    python: Python = None,
    backend: Annotated[
        Optional[str], typer.Option(help="cuda or cpu (default: cuda when torch is a CUDA build, else cpu).")
    ] = None,
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", help="Parallel compiles (default: all cores).")] = None,
) -> None:
    """Build this host's variant natively: the installed torch, the host's nvcc and C++ compiler."""
    from .native_build import build_variant, plan_build

    plan = plan_build(kernel_dir, python=python, backend=backend)
    console.print(f"[bold]{plan.variant.name}[/]: torch {plan.torch.version}"
                  + (f", nvcc {plan.nvcc.version}, capabilities {' '.join(plan.capabilities)}" if plan.nvcc else ""))
    started = time.monotonic()
    with console.status(f"building {plan.variant.name}") as status:
        def report(step):
            console.print(f"  [green]done[/] {step.label}")
            status.update(f"building {plan.variant.name}")

        try:
            variant_dir = build_variant(plan, build_dir, on_step=report, jobs=jobs)
        except KernelMatrixError as exc:
            log = getattr(exc, "log", "")
            if log:
                log_path = build_dir / "logs" / f"{plan.variant.name}.log"
                log_path.parent.mkdir(parents=True, exist_ok=True)
                log_path.write_text(log)
                exc.args = (f"{exc.args[0]} (full log: {log_path})",)
            raise
    table = Table(title="built", show_edge=False)
    for column in ("variant", "op namespace", "directory", "seconds"):
        table.add_column(column)
    table.add_row(plan.variant.name, plan.module, str(variant_dir), f"{time.monotonic() - started:.1f}")
    console.print(table)


@app.command()
def test(
    variant: Annotated[str, typer.Argument(help="A variant directory, or a variant name under --build-dir.")],
    kernel_dir: KernelDir = Path("kernel"),
    build_dir: BuildDir = Path("build"),
    python: Python = None,
    pytest_args: Annotated[
        Optional[list[str]], typer.Option("--pytest-arg", help="Extra pytest argument (repeatable).")
    ] = None,
) -> None:
    """Run the kernel's tests against a built variant, loaded by `kernels` in a fresh process."""
    from .testing import resolve_variant_dir, run_kernel_tests

    variant_dir = resolve_variant_dir(variant, build_dir)
    run_kernel_tests(variant_dir, kernel_dir / "tests", python=python, pytest_args=pytest_args or [])
    console.print(f"[green]passed[/] {variant_dir.name}")


def main() -> None:
    try:
        app()
    except KernelMatrixError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
