"""`kernel-matrix verify`: a rebuild's digests, and signatures, against built or published variants."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernel_matrix.cli.checks import built_host_variant
from kernel_matrix.cli.console import console, stdout
from kernel_matrix.cli.options import (
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    SignedByOption,
    SignerRefOption,
    SignerRepositoryIdOption,
    SignerWorkflowOption,
    TrustRootOption,
    selection_of,
    signer_of,
)
from kernel_matrix.errors import ConfigError
from kernel_matrix.layout import DEFAULT_BUILD_DIR, BuildDir
from kernel_matrix.planning.variants import ImageKind


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
    build_dir: Annotated[Path, typer.Option(help="Where variant names are looked up.")] = DEFAULT_BUILD_DIR,
    python: Annotated[str | None, typer.Option(help="The Python whose torch to rebuild with.")] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Parallel compiles of each rebuild (default: from cores and memory; MAX_JOBS caps them).",
        ),
    ] = None,
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
    from kernel_matrix.running.rebuild import Rebuilder

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
            log=_log,
            report=_report,
        )
        return
    kernels = selection_of(file, kernel=kernel, kernel_dir=kernel_dir).kernel_folders()
    if len(kernels) != 1:
        names = ", ".join(k.name for k, _ in kernels)
        raise ConfigError(f"{file} names several kernels ({names}): verify one, with --kernel NAME")
    ((chosen, subfolder),) = kernels
    folder = BuildDir(build_dir, subfolder).path
    if repo_id is None and not variants:  # this host's variant, as `build` made it and `test` tests it
        variants = [str(built_host_variant(chosen, folder, "verify", python=python))]
    verify_command(
        variants or [],
        repo_id=repo_id,
        revision=revision,
        config=chosen.config,
        build_dir=folder,
        rebuilder=None
        if signatures_only
        else Rebuilder(
            chosen.dir,
            chosen.config,
            python=python,
            matrix_file=file,
            image_kind=image.value if image else None,
            in_container=in_container,
            jobs=jobs,
            log=_log,
        ),
        log=_log,
        report=_report,
        signer=signer,
        trust_root=trust_root,
    )


def check_verify_options(repo_id: str | None, revision: str | None) -> None:
    """verify compares local folders (VARIANT..., default this host's) or a Hub release (--repo-id, --revision)."""
    if repo_id is None and revision is not None:
        raise ConfigError("--revision is for a Hub release: give --repo-id too")


# Unwrapped and literal: a line names a file and its digests, for people and scripts alike.
def _log(message: str) -> None:
    console.print(message, markup=False, highlight=False, soft_wrap=True)


def _report(line: str) -> None:
    stdout.print(line, markup=False, highlight=False, soft_wrap=True)
