"""`kernel-matrix wheels`: a pip-installable wheel per built variant (releasing/wheels.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernel_matrix.cli import render
from kernel_matrix.cli.console import console, stdout
from kernel_matrix.cli.options import (
    BuildDirOption,
    ImageOption,
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    OnlyOption,
    VariantOption,
    image_kind_of,
    resolve,
    selection_of,
)
from kernel_matrix.errors import BuildError, ConfigError, ExitCode, shared_exit_code
from kernel_matrix.layout import DEFAULT_BUILD_DIR


def wheels(
    profile: Annotated[
        str | None, typer.Option(help="This matrix profile's cells (default: every built cell).")
    ] = None,
    only: OnlyOption = None,
    variant: VariantOption = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    build_dir: BuildDirOption = DEFAULT_BUILD_DIR,
    out_dir: Annotated[
        Path | None, typer.Option(help="Where wheels are written (default: <build-dir>/wheels).", show_default=False)
    ] = None,
    image: ImageOption = None,
) -> None:
    """A pip-installable wheel per built variant, made by cibuildwheel in the cell's builder image.

    Torch extensions only: a Python-only kernel's variants are not per torch, so no wheel label
    fits them, and a \\[tvm-ffi] kernel's library is no torch extension (its variant folder is
    what `kernels` loads)."""
    from kernel_matrix.releasing.wheels import build_wheels

    resolved = resolve(selection_of(file, profile, only, variant, kernel, kernel_dir))
    selected = bool(profile or only or variant)
    work = [item for item in resolved.work(build_dir, built_only=not selected) if item.kernel.config.torch]
    names = ", ".join(k.name for k in resolved.kernels)
    if all(k.config.noarch for k in resolved.kernels):
        raise ConfigError(
            f"{names}: Python only ([torch-noarch]): a legacy wheel is per torch and CUDA build, made of compiled "
            "variants only; the torch-<backend> folder is what `kernels` loads"
        )
    if all(k.config.torch is None for k in resolved.kernels):
        raise ConfigError(
            f"{names}: legacy wheels are made of torch extensions ([torch]), not of [tvm-ffi] or Python-only "
            "kernels; their tvm-ffi01-... and torch-<backend> folders are what `kernels` loads"
        )
    if not work:
        raise BuildError(f"no compiled variant of {names} is built in {build_dir}: run kernel-matrix build first")
    results = build_wheels(
        work,
        image_kind=image_kind_of(image, profile, resolved.matrix),
        out_dir=out_dir or build_dir / "wheels",
        log=console.print,
    )
    stdout.print(render.wheels_table(results))
    failures = [r for r in results if not r.ok]
    if failures:
        names = ", ".join(r.cell.name for r in failures)
        # The most specific code the failures share (every wheel refused by abi3audit: 7), else BUILD.
        error = BuildError(f"{len(failures)} of {len(results)} wheels failed: {names}")
        error.exit_code = shared_exit_code((r.exit_code for r in failures), ExitCode.BUILD)
        raise error
