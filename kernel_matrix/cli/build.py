"""`kernel-matrix build` and `shell`: making variants, natively or in their cells' builder
images, and a shell in a cell's builder (wheels of them: wheels.py)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernel_matrix.cli import render
from kernel_matrix.cli.console import console, each_kernel, stdout, styled
from kernel_matrix.cli.options import (
    BackendOption,
    BuildDirOption,
    ImageOption,
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    Python,
    SignedByOption,
    SignerRefOption,
    SignerRepositoryIdOption,
    SignerWorkflowOption,
    TrustRootOption,
    check_capabilities,
    image_kind_of,
    resolve,
    selection_of,
    signer_of,
)
from kernel_matrix.errors import BuildError, ConfigError, ExitCode, shared_exit_code
from kernel_matrix.hostfiles import make_build_dir
from kernel_matrix.layout import DEFAULT_BUILD_DIR, BuildDir
from kernel_matrix.planning.resources import CELL_TIMEOUT_S
from kernel_matrix.planning.variants import ImageKind
from kernel_matrix.running.native import build_native, published_of

if TYPE_CHECKING:
    from kernel_matrix.containers.pool import CellResult, Published
    from kernel_matrix.planning.selection import Kernel, Resolved


def build(
    kernel_dir: KernelDirOption = None,
    kernel: KernelOption = None,
    build_dir: BuildDirOption = DEFAULT_BUILD_DIR,
    python: Python = None,
    backend: BackendOption = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Native: parallel compiles. Containers: variants built at once, sharing the cores "
            "(default: from cores and memory; MAX_JOBS caps the compiles).",
        ),
    ] = None,
    profile: Annotated[str | None, typer.Option(help="Build this matrix profile's cells in containers.")] = None,
    only: Annotated[str | None, typer.Option(help="Build the cells matching KEY=VALUE,... in containers.")] = None,
    variant: Annotated[
        list[str] | None,
        typer.Option("--variant", help="Build this cell in a container (NAME or NAME,NAME,...; repeatable)."),
    ] = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    image: ImageOption = None,
    cuda_capabilities: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated list replacing the CUDA version's default capabilities (native builds) or the "
            "cells' (container builds), e.g. 9.0 for a quick build.",
            callback=check_capabilities,
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            help="The compiled-object cache, shareable between build folders and checkouts; each kernel and trust "
            f"level has its own scope in it (default: {BuildDir(Path('<build-dir>')).cache}).",
            show_default=False,
        ),
    ] = None,
    cell_timeout: Annotated[
        float,
        typer.Option(
            min=1,
            help="Container builds: stop a cell's build after this many seconds (its row says so).",
        ),
    ] = CELL_TIMEOUT_S,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Compile everything; neither read nor fill the cache.")
    ] = False,
    no_load_check: Annotated[
        bool,
        typer.Option(
            "--no-load-check",
            help="Native builds: do not load the variant with kernels.get_local_kernel after the build "
            "(kernel-builder's doGetKernelCheck = false, which a kernel's flake.nix may also say).",
        ),
    ] = False,
    reuse_published: Annotated[
        bool,
        typer.Option(
            "--reuse-published",
            help="With --signed-by: take each variant published on the kernel's release branch that verifies "
            "and was built from the same inputs, instead of compiling it.",
        ),
    ] = False,
    signed_by: SignedByOption = None,
    signer_workflow: SignerWorkflowOption = None,
    signer_ref: SignerRefOption = None,
    signer_repository_id: SignerRepositoryIdOption = None,
    trust_root: TrustRootOption = None,
    builder_images: Annotated[
        Path | None,
        typer.Option(
            help="Container builds: pull the builder images this list (or folder of lists) from "
            "`kernel-matrix builder-images` names, by digest, instead of making them.",
        ),
    ] = None,
) -> None:
    """Build this host's variant natively (no selection), or matrix cells in containers (--profile/--only/--variant).

    Every kernel of the matrix, or those --kernel names, or the one --kernel-dir names."""
    capabilities = cuda_capabilities.split(",") if cuda_capabilities else None
    signer = signer_of(signed_by, signer_workflow, signer_ref, signer_repository_id)
    if reuse_published and signer is None:
        raise ConfigError("--reuse-published: give --signed-by OWNER/NAME, whose signed variants to reuse")
    if profile or only or variant:
        if python or backend:
            raise ConfigError(
                "--python and --backend are for native builds; a container build takes them from the cell"
            )
        resolved = resolve(selection_of(file, profile, only, variant, kernel, kernel_dir))
        shared_cache = None if no_cache else (cache_dir or BuildDir(build_dir).cache)
        published = None
        if reuse_published and signer is not None:
            from kernel_matrix.releasing.reuse import cell_lookup

            def published(chosen: Kernel) -> Published:
                return cell_lookup(published_of(chosen, signer, trust_root))

        if builder_images is not None:
            _pull_builders(builder_images)
        _build_in_containers(
            resolved, build_dir, profile, image, jobs, shared_cache, capabilities, cell_timeout, published
        )
        return
    if builder_images is not None:
        raise ConfigError("--builder-images is for container builds (--profile, --only or --variant)")
    from kernel_matrix.building.objcache import MAX_SCOPE_BYTES, ObjectCache
    from kernel_matrix.building.recipe import recipe_digest
    from kernel_matrix.config.github_event import GithubEvent

    trusted = GithubEvent.from_environment().trusted

    def build_one(chosen: Kernel, subfolder: str | None) -> None:
        where = BuildDir(build_dir, subfolder)
        cache_root = cache_dir or BuildDir(build_dir).cache
        cache = None
        if not no_cache:  # the scope of the recipe the host hashes from the kernel's files
            cache = ObjectCache.for_kernel(cache_root, chosen.name, trusted=trusted, recipe=recipe_digest(chosen.dir))
        reuse = published_of(chosen, signer, trust_root) if reuse_published and signer is not None else None
        built = build_native(
            chosen,
            where,
            python,
            backend,
            jobs,
            capabilities,
            cache,
            load=not no_load_check,
            reuse=reuse,
            console=console,
        )
        if not built.reused:  # the reuse line said where it came from
            console.print(render.built_grid(built))
        if cache is not None:
            with contextlib.suppress(OSError):  # an unprunable cache costs disk, never the build
                cache.prune(MAX_SCOPE_BYTES)

    each_kernel(selection_of(file, kernel=kernel, kernel_dir=kernel_dir).kernel_folders(), build_one)


def _pull_builders(listed: Path) -> None:
    """The listed builder images, each pulled by digest and checked to be the recipe it is
    listed as (containers/registry.py); the build then finds them instead of making them."""
    from kernel_matrix.containers import registry
    from kernel_matrix.containers.engine import connect

    shared = registry.read_listed(listed)  # a bad list is refused before the engine is asked
    registry.pull_listed(connect(), shared, log=console.print)


def _build_in_containers(
    resolved: Resolved,
    build_dir: Path,
    profile: str | None,
    image: ImageKind | None,
    jobs: int | None,
    cache_dir: Path | None,
    capabilities: list[str] | None,
    cell_timeout: float,
    published: Callable[[Kernel], Published] | None = None,
) -> None:
    from kernel_matrix.building.progress import live_progress
    from kernel_matrix.hostfiles import check_build_dir
    from kernel_matrix.running.cells import build_selection

    make_build_dir(build_dir)
    check_build_dir(build_dir)  # before anything runs: no link, FIFO or device the host would write through
    results = build_selection(
        resolved,
        BuildDir(build_dir),
        image_kind=image_kind_of(image, profile, resolved.matrix),
        jobs=jobs,
        cache_dir=cache_dir,
        capabilities=capabilities,
        timeout=cell_timeout,
        log=lambda m: console.print(m),
        progress=lambda names: live_progress(console, names),
        published=published,
    )
    _write_summary(BuildDir(build_dir), results)
    stdout.print(render.build_results_table(results))
    failures = [r for r in results if not r.ok]
    if failures:
        names = [f"{r.cell.kernel}/{r.cell.name}" if resolved.several else r.cell.name for r in failures]
        # The most specific code the failures share (all ABI: 7, all the engine: 11), else BUILD.
        error = BuildError(f"{len(failures)} of {len(results)} cells failed: {', '.join(names)}")
        error.exit_code = shared_exit_code((r.exit_code for r in failures), ExitCode.BUILD)
        raise error


def _write_summary(build_dir: BuildDir, results: list[CellResult]) -> None:
    """The results' table, for CI: <build-dir>/summary.md (each cell's job uploads it) and,
    in a GitHub Actions step, the job's summary page."""
    from kernel_matrix.hostfiles import append_log, write_file

    summary = render.summary_markdown(results) + "\n"
    write_file(build_dir.summary, summary)
    if step_summary := os.environ.get("GITHUB_STEP_SUMMARY"):
        # The runner's file, outside the build folder: its folder resolved (it may be reached
        # through a link), the file itself still appended to only where it is a plain file.
        append_log(Path(os.path.realpath(Path(step_summary).parent)) / Path(step_summary).name, summary)


def shell(
    variant: Annotated[str, typer.Argument(help="The cell (variant name) whose builder image to enter.")],
    command: Annotated[list[str] | None, typer.Argument(help="A command to run instead of bash (after --).")] = None,
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    image: ImageOption = None,
    writable: Annotated[
        bool,
        typer.Option(
            "--writable",
            help="Mount the kernel read-write (your own code only) and run as you; default: read-only, "
            "as the build's unprivileged user.",
        ),
    ] = False,
) -> None:
    """A shell in a cell's builder image, hardened like a build: the kernel at /src (read-only
    unless --writable), network off, no capabilities, a read-only root with a writable /tmp."""
    import subprocess

    from kernel_matrix.containers.container_output import strip_set_id_bits
    from kernel_matrix.containers.engine import connect
    from kernel_matrix.containers.images import PipSetup, builder_for
    from kernel_matrix.containers.shell import shell_command

    if "," in variant:
        raise ConfigError(f"{variant}: shell enters one variant's builder image; name one")
    resolved = resolve(selection_of(file, variant=[variant], kernel=kernel, kernel_dir=kernel_dir))
    if len(resolved.cells) != 1:
        names = ", ".join(k.name for k in resolved.kernels)
        raise ConfigError(f"{variant}: a variant of several kernels ({names}): name one with --kernel")
    (cell,) = resolved.cells
    builder = builder_for(
        connect(), cell, image.value if image else resolved.matrix.spec.image, PipSetup.from_host(), log=console.print
    )
    kernel_dir = resolved.kernel(cell).dir
    argv = shell_command(cell, builder, kernel_dir, command or [], interactive=sys.stdin.isatty(), writable=writable)
    try:
        code = subprocess.run(argv, check=False).returncode
    finally:
        if writable:  # what the shell made is the caller's; a set-id bit would outlive the container
            for path in strip_set_id_bits(kernel_dir):
                console.print(styled(("warning:", "yellow"), f" removed the set-id bits of {path}"))
    raise typer.Exit(code)
