"""`kernel-matrix test` and `check-abi`: checking built variants (the kernel's own tests,
the ABI rules); and this host's variant of a kernel, which they and `verify` default to."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernel_matrix.checking.abi import MANYLINUX, PYTHON_ABI
from kernel_matrix.cli import render
from kernel_matrix.cli.console import console, each_kernel, styled
from kernel_matrix.cli.options import (
    BackendOption,
    BuildDirOption,
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    Python,
    selection_of,
)
from kernel_matrix.errors import AbiError, ConfigError, ExitCode, KernelMatrixError
from kernel_matrix.layout import DEFAULT_BUILD_DIR, METADATA, BuildDir

if TYPE_CHECKING:
    from kernel_matrix.planning.selection import Kernel


def test(
    variant: Annotated[
        str | None,
        typer.Argument(help="A variant directory, or a variant name under --build-dir (default: this host's)."),
    ] = None,
    kernel_dir: KernelDirOption = None,
    kernel: KernelOption = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    build_dir: BuildDirOption = DEFAULT_BUILD_DIR,
    python: Python = None,
    backend: BackendOption = None,
    pytest_args: Annotated[
        list[str] | None, typer.Option("--pytest-arg", help="Extra pytest argument (repeatable).")
    ] = None,
    installed: Annotated[
        str | None,
        typer.Option(help="Test this package as installed in --python's environment (from a wheel), not a variant."),
    ] = None,
    require_gpu: Annotated[
        bool,
        typer.Option(
            "--require-gpu",
            help="A CUDA variant's suite must see a GPU its torch can use (a GPU test job): exit 4 where it "
            "would not, instead of skipping its CUDA cases.",
        ),
    ] = False,
) -> None:
    """Run the kernel's own tests against a built variant, loaded by `kernels` in a fresh process."""
    from kernel_matrix.checking.testing import (
        built_alongside,
        hub_repo_id,
        resolve_host_variant,
        resolve_variant_dir,
        run_installed_tests,
        run_kernel_tests,
    )

    kernels = selection_of(file, kernel=kernel, kernel_dir=kernel_dir).kernel_folders()
    if installed:
        if variant is not None or len(kernels) != 1:
            raise ConfigError("--installed PACKAGE: give no VARIANT, and one kernel (--kernel or --kernel-dir)")
        outcome = run_installed_tests(
            installed,
            kernels[0][0].dir / "tests",
            python=python,
            pytest_args=pytest_args or [],
            say=lambda note: console.print(styled(("note", "yellow"), f" {installed}: {note}"), soft_wrap=True),
        )
        if outcome.skipped:
            console.print(styled(("skipped", "yellow"), f" {installed} (installed): {outcome.text}"), soft_wrap=True)
        else:
            console.print(styled(("passed", "green"), f" {installed} (installed)"))
        return

    def test_one(chosen: Kernel, subfolder: str | None) -> None:
        folder = BuildDir(build_dir, subfolder).path
        if variant is None:
            name, alternatives = _host_variants(chosen, python=python, backend=backend)
            variant_dir = resolve_host_variant(name, folder, alternatives)
        else:
            variant_dir = resolve_variant_dir(variant, folder)
        # Every kernel of the matrix, not only the ones picked: a kernel's tests may load
        # another of them (symbol-conflicts2's load symbol-conflicts).
        matrix = kernels if kernel_dir is not None or not kernel else selection_of(file).kernel_folders()
        others = {
            hub_repo_id(k.config): BuildDir(build_dir, folder).path for k, folder in matrix if k.name != chosen.name
        }
        outcome = run_kernel_tests(
            variant_dir,
            chosen.dir,
            python=python,
            pytest_args=pytest_args or [],
            local_kernels=built_alongside(variant_dir.name, others),
            say=lambda note: console.print(styled(("note", "yellow"), f" {variant_dir.name}: {note}"), soft_wrap=True),
            require_gpu=require_gpu,
            config=chosen.config,
        )
        verdict = ("skipped", "yellow") if outcome.skipped else ("passed", "green")
        console.print(styled(verdict, f" {variant_dir.name}: {outcome.text}"), soft_wrap=True)

    each_kernel(kernels, test_one, mixed=ExitCode.TEST)


def built_host_variant(
    chosen: Kernel, folder: Path, command: str, *, python: str | None, backend: str | None = None
) -> Path:
    """This host's variant of chosen (of `backend`, where given), built under folder, for
    check-abi and verify: the one line naming what is built there otherwise."""
    from kernel_matrix.checking.testing import resolve_host_variant

    name, _ = _host_variants(chosen, python=python, backend=backend)
    return resolve_host_variant(name, folder, {}, command)


def _host_variants(chosen: Kernel, *, python: str | None, backend: str | None) -> tuple[str, dict[str, str]]:
    """The variant of the kernel that `build` makes here (backend: --backend, else this host's
    default), and the variants its other backends make here, {backend: name}: what to offer
    where that one is not built (`build --backend cpu` on a host with a CUDA torch)."""
    from kernel_matrix.building.native_build import plan
    from kernel_matrix.planning.toolchain import Toolchain, probe_torch

    backends = chosen.config.general.backends
    if chosen.config.noarch:
        picked = backend or _noarch_backend(backends, probe_torch(python).cuda is not None)
        return f"torch-{picked}", {b: f"torch-{b}" for b in backends if b != picked}
    toolchain = Toolchain.probe(python, tvm_ffi=chosen.config.tvm_ffi is not None)
    own = plan(chosen.dir, chosen.config, toolchain, backend=backend).variant
    others: dict[str, str] = {}
    for other in ("cpu", "cuda"):
        if other != own.backend and other in backends:
            # Not one this host makes (no nvcc, a CPU torch): nothing to offer.
            with contextlib.suppress(KernelMatrixError):
                others[other] = plan(chosen.dir, chosen.config, toolchain, backend=other).variant.name
    return own.name, others


def _noarch_backend(backends: Sequence[str], cuda_torch: bool) -> str:
    """Which of a Python-only kernel's variants (one per declared backend, as `build` makes
    them) this host's torch tests: its own backend's where declared, else torch-cpu, else
    the first declared (a torch-rocm package imports on any torch)."""
    own = "cuda" if cuda_torch else "cpu"
    return next((b for b in (own, "cpu") if b in backends), backends[0])


def check_abi(
    variant: Annotated[
        str | None,
        typer.Argument(
            help="A variant directory, or a variant name under --build-dir (under each kernel's folder of it "
            "for a matrix of several kernels); default: this host's, as `test`."
        ),
    ] = None,
    kernel_dir: KernelDirOption = None,
    kernel: KernelOption = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    build_dir: BuildDirOption = DEFAULT_BUILD_DIR,
    backend: BackendOption = None,
    python_abi: Annotated[str, typer.Option(help="Oldest CPython whose limited API the .so may use.")] = PYTHON_ABI,
    manylinux: Annotated[
        str, typer.Option(help="manylinux policy to check symbol versions against, or 'none'.")
    ] = MANYLINUX,
) -> None:
    """Check a variant's libraries with kernel-abi-check: abi3 and manylinux symbol versions.

    In a matrix of several kernels a variant name is looked up in each kernel's folder of
    --build-dir (<build-dir>/<kernel>/<variant>): --kernel picks kernels; without it every
    kernel that has that variant built is checked."""
    from kernel_matrix.checking.testing import resolve_variant_dir

    def check(variant_dir: Path) -> None:
        _check_abi(variant_dir, python_abi=python_abi, manylinux=manylinux)

    picked = kernel is not None or kernel_dir is not None
    selection = selection_of(file, kernel=kernel, kernel_dir=kernel_dir)
    if variant is None:  # this host's variant of each kernel, as `build` made it and `test` tests it

        def host(chosen: Kernel, subfolder: str | None) -> None:
            folder = BuildDir(build_dir, subfolder).path
            check(built_host_variant(chosen, folder, "check-abi", python=None, backend=backend))

        each_kernel(selection.kernel_folders(), host)
        return
    kernels = selection.kernel_folders() if picked else []  # a --kernel the matrix lacks: refused first
    # A variant directory, or a name under --build-dir itself (a matrix of one kernel, a --kernel-dir
    # build, --build-dir build/<kernel>, or no matrix here): checked as it is, no matrix read.
    if Path(variant).is_dir() or (not picked and (selection.uses_default or BuildDir(build_dir).is_built(variant))):
        check(resolve_variant_dir(variant, build_dir))
        return
    kernels = kernels or selection.kernel_folders()
    if picked or len(kernels) == 1:
        each_kernel(kernels, lambda _, folder: check(resolve_variant_dir(variant, BuildDir(build_dir, folder).path)))
        return
    # Several kernels and none picked: that variant of every kernel that has it built.
    built = {k.name for k, folder in kernels if BuildDir(build_dir, folder).is_built(variant)}
    if not built:
        raise ConfigError(
            f"{variant}: not a built variant of any kernel of {file} (no {build_dir}/<kernel>/{variant}/{METADATA} "
            f"for {', '.join(k.name for k, _ in kernels)}); run `kernel-matrix build` first, "
            "or give --kernel NAME or a variant directory"
        )
    if missing := [k.name for k, _ in kernels if k.name not in built]:
        note = f" {variant}: not built for {', '.join(missing)}: not checked"
        console.print(styled(("note", "yellow"), note), soft_wrap=True)
    each_kernel(
        [(k, folder) for k, folder in kernels if k.name in built],
        lambda _, folder: check(resolve_variant_dir(variant, BuildDir(build_dir, folder).path)),
    )


def _check_abi(variant_dir: Path, *, python_abi: str, manylinux: str) -> None:
    """check-abi of one variant folder (found and shown to be built)."""
    from kernel_matrix.checking.abi import abi_reports, hint
    from kernel_matrix.planning.variants import NOARCH_VARIANT

    if NOARCH_VARIANT.match(variant_dir.name) and not any(variant_dir.glob("*.so")):
        # kernel-builder checks compiled variants only: a Python-only one has nothing to check.
        line = styled(("passed", "green"), f" {variant_dir.name}: Python only, no library to check")
        console.print(line, soft_wrap=True)
        return
    reports = abi_reports(variant_dir, python_abi=python_abi, manylinux=None if manylinux == "none" else manylinux)
    console.print(render.abi_table(variant_dir.name, reports, python_abi, manylinux))
    for warning in (w for r in reports for w in r.warnings):
        console.print(styled(("warning:", "yellow"), f" {variant_dir.name}: {warning}"), soft_wrap=True)
    failed = [r for r in reports if not r.ok]
    if failed:
        names = ", ".join(r.library.name for r in failed)
        raise AbiError(f"{variant_dir.name}: {names} breaks the ABI rules above{hint(failed[0])}")
