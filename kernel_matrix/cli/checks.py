"""`kernel-matrix test`, `check-abi` and `verify`: checking built variants (the
kernel's own tests, the ABI rules, a rebuild's digests)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernel_matrix.checking.abi import MANYLINUX, PYTHON_ABI
from kernel_matrix.cli import render
from kernel_matrix.cli.console import console, each_kernel, stdout, styled
from kernel_matrix.cli.options import (
    BackendOption,
    BuildDirOption,
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    Python,
    SignedByOption,
    SignerRefOption,
    SignerRepositoryIdOption,
    SignerWorkflowOption,
    TrustRootOption,
    selection_of,
    signer_of,
)
from kernel_matrix.errors import AbiError, ConfigError, ExitCode, KernelMatrixError
from kernel_matrix.layout import METADATA, BuildDir
from kernel_matrix.planning.variants import ImageKind

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
    build_dir: BuildDirOption = Path("build"),
    python: Python = None,
    backend: BackendOption = None,
    pytest_args: Annotated[
        list[str] | None, typer.Option("--pytest-arg", help="Extra pytest argument (repeatable).")
    ] = None,
    installed: Annotated[
        str | None,
        typer.Option(help="Test this package as installed in --python's environment (from a wheel), not a variant."),
    ] = None,
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
        )
        verdict = ("skipped", "yellow") if outcome.skipped else ("passed", "green")
        console.print(styled(verdict, f" {variant_dir.name}: {outcome.text}"), soft_wrap=True)

    each_kernel(kernels, test_one, mixed=ExitCode.TEST)


def _built_host_variant(
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
    build_dir: BuildDirOption = Path("build"),
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
            check(_built_host_variant(chosen, folder, "check-abi", python=None, backend=backend))

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


def verify(
    variants: Annotated[
        list[str] | None,
        typer.Argument(
            help="Variant folders, or names under --build-dir (default: this host's, as `test`); with --repo-id: "
            "the release's variants to verify (default: all).",
            metavar="VARIANT...",
            show_default=False,
        ),
    ] = None,
    repo_id: Annotated[
        str | None, typer.Option(help="Verify this Hub repo's release instead of local folders.")
    ] = None,
    revision: Annotated[
        str | None,
        typer.Option(
            help="The release's branch or tag (default: where publish puts it: \\[general.hub] branch, "
            "else v<version> from build.toml)."
        ),
    ] = None,
    kernel_dir: KernelDirOption = None,
    kernel: KernelOption = None,
    build_dir: Annotated[Path, typer.Option(help="Where variant names are looked up.")] = Path("build"),
    python: Annotated[str | None, typer.Option(help="The Python whose torch to rebuild with.")] = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    image: Annotated[
        ImageKind | None,
        typer.Option(help="Builder images for the other cells: official or offline (default: the matrix's)."),
    ] = None,
    in_container: Annotated[
        bool, typer.Option("--in-container", help="Rebuild this host's variants in their builder image too.")
    ] = False,
    signed_by: SignedByOption = None,
    signer_workflow: SignerWorkflowOption = None,
    signer_ref: SignerRefOption = None,
    signer_repository_id: SignerRepositoryIdOption = None,
    trust_root: TrustRootOption = None,
    signatures_only: Annotated[
        bool, typer.Option("--signatures-only", help="With --signed-by: check signatures and files, rebuild nothing.")
    ] = False,
    published: Annotated[
        bool,
        typer.Option(
            "--published",
            help="With --signed-by: every published release of each kernel (each version branch of its Hub repo), "
            "by signature and digest (the daily check).",
        ),
    ] = False,
) -> None:
    """Rebuild variants from the kernel's sources and compare every file's sha256 with them.

    The kernel is the matrix's (--kernel NAME in a matrix of several, or --kernel-dir).
    This host's variants are rebuilt natively, other cells of the matrix in their
    builder image. Exit 0 when every file is identical; 12 (one line per differing
    file) when one differs; 4 when a variant cannot be rebuilt here; 13 (one line per
    variant) when --signed-by finds one unsigned, foreign-signed, tampered or mismatched."""
    from kernel_matrix.releasing.verify import verify_command, verify_published

    check_verify_options(repo_id, revision)
    for option, given in (("--signatures-only", signatures_only), ("--published", published)):
        if given and signed_by is None:
            raise ConfigError(f"{option}: give --signed-by OWNER/NAME, whose signatures to check")
    signer = signer_of(signed_by, signer_workflow, signer_ref, signer_repository_id)
    if published and signer is not None:
        if variants or revision is not None:
            raise ConfigError("--published checks every release: give no VARIANT and no --revision")
        verify_published(
            selection_of(file, kernel=kernel, kernel_dir=kernel_dir).kernel_folders(),
            signer,
            repo_id=repo_id,
            trust_root=trust_root,
            log=lambda message: console.print(message, markup=False, highlight=False, soft_wrap=True),
            report=lambda line: stdout.print(line, markup=False, highlight=False, soft_wrap=True),
        )
        return
    kernels = selection_of(file, kernel=kernel, kernel_dir=kernel_dir).kernel_folders()
    if len(kernels) != 1:
        names = ", ".join(k.name for k, _ in kernels)
        raise ConfigError(f"{file} names several kernels ({names}): verify one, with --kernel NAME")
    ((chosen, subfolder),) = kernels
    folder = BuildDir(build_dir, subfolder).path
    if repo_id is None and not variants:  # this host's variant, as `build` made it and `test` tests it
        variants = [str(_built_host_variant(chosen, folder, "verify", python=python))]
    verify_command(
        variants or [],
        repo_id=repo_id,
        revision=revision,
        kernel_dir=chosen.dir,
        build_dir=folder,
        python=python,
        matrix_file=file,
        image_kind=image.value if image else None,
        in_container=in_container,
        # Unwrapped: a line names a file and its digests, for people and scripts alike.
        log=lambda message: console.print(message, markup=False, highlight=False, soft_wrap=True),
        report=lambda line: stdout.print(line, markup=False, highlight=False, soft_wrap=True),
        signer=signer,
        trust_root=trust_root,
        rebuild=not signatures_only,
    )


def check_verify_options(repo_id: str | None, revision: str | None) -> None:
    """verify compares local folders (VARIANT..., default this host's) or a Hub release (--repo-id, --revision)."""
    if repo_id is None and revision is not None:
        raise ConfigError("--revision is for a Hub release: give --repo-id too")
