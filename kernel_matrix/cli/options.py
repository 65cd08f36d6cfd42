"""The command line's shared options: their types, checks and help, declared once
for every command that takes them (typer reads them from the annotations)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernel_matrix.errors import ConfigError
from kernel_matrix.planning.variants import ImageKind

if TYPE_CHECKING:
    from kernel_matrix.planning.matrix import Matrix
    from kernel_matrix.planning.selection import Resolved, Selection
    from kernel_matrix.releasing.signatures import Signer


# The options of every command that reads the matrix: resolved once by Selection.
# KERNEL_MATRIX_FILE: the reusable workflow names its caller's matrix once, for every step.
MatrixFileOption = Annotated[Path, typer.Option("--file", "-f", envvar="KERNEL_MATRIX_FILE", help="The matrix file.")]
KernelDirOption = Annotated[
    Path | None,
    typer.Option("--kernel-dir", help="A kernel folder in kernel-builder layout, instead of the matrix's kernels."),
]
KernelOption = Annotated[
    list[str] | None,
    typer.Option("--kernel", help="This kernel of the matrix (its build.toml name; repeatable; default: all)."),
]


# Whose signatures a command believes (verify, build --reuse-published): a GitHub repository's
# release workflow, under Sigstore's public trust root or another.
def check_repository_id(value: str | None) -> str | None:
    """--signer-repository-id as given: digits only (GitHub's repository numbers)."""
    if value is not None and not (value.isascii() and value.isdigit()):
        raise typer.BadParameter(f"{value!r}: not a repository number (digits, github.repository_id)")
    return value


SignedByOption = Annotated[
    str | None,
    typer.Option(help="Signed by this GitHub repository (OWNER/NAME)'s release workflow, every file as signed."),
]
SignerWorkflowOption = Annotated[
    str | None,
    typer.Option(help="The signing workflow's path in that repository (default: .github/workflows/kernel-matrix.yml)."),
]
SignerRefOption = Annotated[
    list[str] | None,
    typer.Option(
        help="A ref the signing workflow may have run for, a glob (repeatable; default: refs/tags/v* and "
        "refs/heads/main): a repository whose default branch is not main publishing from it names it here."
    ),
]
SignerRepositoryIdOption = Annotated[
    str | None,
    typer.Option(
        help="GitHub's number for the --signed-by repository (github.repository_id): a signature from another "
        "repository that had that name (deleted or renamed, the name taken again) is foreign-signed.",
        callback=check_repository_id,
    ),
]
TrustRootOption = Annotated[
    Path | None,
    typer.Option(help="A Sigstore trusted_root.json to verify signatures with (default: Sigstore's public one)."),
]
ProfileOption = Annotated[
    str | None, typer.Option(help="full (everything), pr (small) or local (what this host builds).")
]
OnlyOption = Annotated[
    str | None, typer.Option(help="Keep cells matching KEY=VALUE[,KEY=VALUE]: torch, cuda (or cpu), arch, backend.")
]
VariantOption = Annotated[
    list[str] | None, typer.Option("--variant", help="Keep this variant (NAME or NAME,NAME,...; repeatable).")
]


def selection_of(
    file: Path,
    profile: str | None = None,
    only: str | None = None,
    variant: list[str] | None = None,
    kernel: list[str] | None = None,
    kernel_dir: Path | None = None,
) -> Selection:
    from kernel_matrix.planning.selection import Selection

    # NAME,NAME,...: a build workflow job's batch of cells (github_jobs) in one argument.
    variants: list[str] = []
    for given in variant or ():
        names = [name.strip() for name in given.split(",")]  # "A, B" as written in a shell
        if "" in names:
            raise ConfigError(f"--variant {given!r}: an empty variant name (expected NAME or NAME,NAME,...)")
        variants += names
    return Selection(
        file=file,
        profile=profile or "full",
        only=only,
        variants=tuple(variants),
        kernels=tuple(kernel or ()),
        kernel_dir=kernel_dir,
    )


def resolve(selection: Selection) -> Resolved:
    """The selection's kernels and cells. The `local` profile's machine (this host's arch
    and nvcc) is probed here, at the edge: the matrix's selection takes it as a value."""
    from kernel_matrix.planning.toolchain import this_machine

    return selection.resolve(this_machine() if selection.profile == "local" else None)


def parse_build_dir(value: str | Path) -> Path:
    """--build-dir's text as given: an empty one would become Path("."), the
    current folder, and build there (and clean it) without anyone asking for it."""
    if not str(value).strip():
        raise typer.BadParameter("an empty path; give a folder such as build", param_hint="--build-dir")
    return Path(value)


def check_build_dir(path: Path) -> Path:
    """A folder, or a path where one can be made: never an existing file."""
    for candidate in (path, *path.absolute().parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise typer.BadParameter(f"{path}: {candidate} is not a folder", param_hint="--build-dir")
            break
    return path


def check_capabilities(value: str | None) -> str | None:
    """--cuda-capabilities: a comma-separated list of capabilities (9.0, 9.0a)."""
    from kernel_matrix.planning.capabilities import CAPABILITY

    if value is not None and not all(CAPABILITY.match(c) for c in value.split(",")):
        raise typer.BadParameter(
            f"{value!r}: expected capabilities such as 8.0,9.0 or 9.0a", param_hint="--cuda-capabilities"
        )
    return value


BuildDirOption = Annotated[
    Path,
    typer.Option(
        "--build-dir",
        help="Where variants are written: <build-dir>/<variant>/ (<build-dir>/<kernel>/<variant>/ for a matrix "
        "of several kernels).",
        parser=parse_build_dir,
        metavar="<path>",  # as typer shows the other Path options
        callback=check_build_dir,
    ),
]
Python = Annotated[
    str | None, typer.Option("--python", help="The Python whose torch to use (default: the one running this).")
]

ImageOption = Annotated[
    ImageKind | None,
    typer.Option(
        help="Builder images: official (CUDA images from a registry) or offline (made here); "
        "default: the matrix's, offline for --profile local."
    ),
]
BackendOption = Annotated[
    str | None,
    typer.Option(
        help="cuda or cpu, for this host's variant (default: cuda when torch is a CUDA build, else cpu); "
        "a Python-only kernel's variant of any of its backends."
    ),
]


def signer_of(
    signed_by: str | None,
    workflow: str | None = None,
    refs: list[str] | None = None,
    repository_id: str | None = None,
) -> Signer | None:
    """--signed-by's Signer (its workflow and refs, else the defaults init's workflow has,
    and its repository number where given); None where it is not given."""
    from kernel_matrix.config.github_event import check_repository
    from kernel_matrix.releasing.signatures import DEFAULT_REFS, DEFAULT_WORKFLOW, Signer

    if signed_by is None:
        if repository_id is not None:
            raise ConfigError("--signer-repository-id: give --signed-by OWNER/NAME too")
        return None
    repository = check_repository(signed_by, "--signed-by")
    return Signer(repository, workflow or DEFAULT_WORKFLOW, tuple(refs) if refs else DEFAULT_REFS, repository_id)


def image_kind_of(image: ImageKind | None, profile: str | None, matrix: Matrix) -> str:
    """--image, else the matrix's; the local profile is what this host builds, where
    no registry is assumed, so its builders stand on the offline base."""
    return image.value if image else ("offline" if profile == "local" else matrix.spec.image)
