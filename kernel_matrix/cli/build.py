"""`kernel-matrix build`, `wheels` and `shell`: making variants, natively or in
their cells' builder images, and wheels of them."""

from __future__ import annotations

import contextlib
import os
import sys
import time
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
    OnlyOption,
    Python,
    SignedByOption,
    SignerRefOption,
    SignerRepositoryIdOption,
    SignerWorkflowOption,
    TrustRootOption,
    VariantOption,
    check_capabilities,
    image_kind_of,
    make_build_dir,
    resolve,
    selection_of,
    signer_of,
)
from kernel_matrix.errors import BuildError, ConfigError, ExitCode, shared_exit_code
from kernel_matrix.layout import BuildDir
from kernel_matrix.planning.resources import CELL_TIMEOUT_S
from kernel_matrix.planning.variants import ImageKind

if TYPE_CHECKING:
    from kernel_matrix.building.compile import Step
    from kernel_matrix.building.native_build import BuildPlan
    from kernel_matrix.building.objcache import ObjectCache
    from kernel_matrix.containers.build_request import BuildRequest
    from kernel_matrix.containers.pool import CellResult, Published
    from kernel_matrix.planning.selection import Kernel, Resolved
    from kernel_matrix.releasing.reuse import Reuse
    from kernel_matrix.releasing.signatures import Signer


def build(
    kernel_dir: KernelDirOption = None,
    kernel: KernelOption = None,
    build_dir: BuildDirOption = Path("build"),
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
        build_native(chosen, where, python, backend, jobs, capabilities, cache, load=not no_load_check, reuse=reuse)
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


def published_of(chosen: Kernel, signer: Signer, trust_root: Path | None) -> Reuse:
    """Where `build --reuse-published` looks: the kernel's Hub repo, on its release branch."""
    from kernel_matrix.checking.testing import hub_repo_id
    from kernel_matrix.releasing.release import release_branch
    from kernel_matrix.releasing.reuse import Reuse

    return Reuse(hub_repo_id(chosen.config), release_branch(chosen.config), signer, trust_root)


def _reused(plan: BuildPlan, where: BuildDir, reuse: Reuse | None, candidate: tuple[Path, str] | None) -> bool:
    """Whether plan's variant was taken from the Hub (its line said either way): looked up
    there (reuse, a native build), or the candidate the host fetched and verified (in a
    container: (its folder, where it was published))."""
    from kernel_matrix.building.inputs import build_inputs
    from kernel_matrix.building.native_build import BuildResult, recorded_toolchain, write_build_stats
    from kernel_matrix.building.published import take

    inputs = build_inputs(plan, recorded_toolchain(plan))
    if candidate is not None:  # in a container: fetched and verified by the host
        reused = take(candidate[0], candidate[1], plan.variant.name, inputs, where.path)
    else:
        from kernel_matrix.releasing.reuse import reuse_published

        assert reuse is not None
        reused = reuse_published(reuse, plan.variant.name, inputs, where.path)
    console.print(reused.line, markup=False, highlight=False, soft_wrap=True)
    if reused.variant_dir is None:
        return False
    write_build_stats(
        where.log(plan.variant.name, "build.json"), 0.0, BuildResult(reused.variant_dir, 0, 0), reused=True
    )
    return True


def _load_check(stage: Path, name: str, python: str, backend: str, where: BuildDir) -> str | None:
    """kernel-builder's get-kernel-check: the variant is loaded before it replaces the built
    one (BuildError if it does not load); why it could not be loaded here, or None."""
    from kernel_matrix.checking.load import load_check

    return load_check(stage, name, python=python, backend=backend, log=where.log(name, "load.log"))


def _loads(kernel: Kernel, load: bool, expected: BuildRequest | None) -> bool:
    """Whether a native build loads its variant: not in a cell's container (the workflow's
    test jobs load it: checking/load.py), nor with --no-load-check, nor where the kernel's
    flake.nix turns kernel-builder's check off (a line says so)."""
    from kernel_matrix.config.flake import NO_GET_KERNEL_CHECK, flake_line

    if not load or expected is not None:
        return False
    if found := flake_line(kernel.dir, NO_GET_KERNEL_CHECK):
        flake, line = found
        console.print(
            f"{flake}:{line}: note: doGetKernelCheck = false: the variant is not loaded after the build",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return False
    return True


def _say_not_loaded(names: list[str], why: str) -> None:
    console.print(
        f"note: {', '.join(names)}: not loaded after the build: {why}", markup=False, highlight=False, soft_wrap=True
    )


def build_native(
    kernel: Kernel,
    where: BuildDir,
    python: str | None,
    backend: str | None,
    jobs: int | None,
    capabilities: list[str] | None,
    cache: ObjectCache | None,
    expected: BuildRequest | None = None,
    *,
    load: bool = True,
    reuse: Reuse | None = None,
    candidate: tuple[Path, str] | None = None,
) -> None:
    """One kernel's variant for this host (or, in a build container, for the cell
    `expected` asks for: refused before anything is written if it would be another)."""
    from kernel_matrix.building.compile import Progress
    from kernel_matrix.building.native_build import build_noarch, build_variant, plan_build, write_build_stats
    from kernel_matrix.building.source_checks import check_kernel_sources
    from kernel_matrix.config.buildtoml import edition_4_note, no_section_note, skipped_note

    check_kernel_sources(kernel.dir, kernel.config)
    if kernel.config.noarch:  # Python only: every backend's variant (or --backend's), nothing compiled
        make_build_dir(where.path)

        not_loaded: dict[str, list[str]] = {}  # why -> variants: one line for the backends this torch does not load

        def load_noarch(stage: Path, noarch_backend: str) -> None:
            name = f"torch-{noarch_backend}"
            if why := _load_check(stage, name, python or sys.executable, noarch_backend, where):
                not_loaded.setdefault(why, []).append(name)

        made_list = build_noarch(
            kernel.dir,
            where.path,
            backends=[backend] if backend else None,
            config=kernel.config,
            check=load_noarch if _loads(kernel, load, expected) else None,
        )
        for why, names in not_loaded.items():
            _say_not_loaded(names, why)
        for made in made_list:
            console.print(styled((made.name, "bold"), f": {made}"))
        return
    plan = plan_build(kernel.dir, python=python, backend=backend, cuda_capabilities=capabilities, config=kernel.config)
    if expected is not None:
        nvcc = f", nvcc {plan.nvcc.version}" if plan.nvcc else ""
        expected.check(plan.variant.name, f"{plan.framework}{nvcc}")
    make_build_dir(where.path)  # once the inputs are known to be good: a refused build writes nothing
    notes = [skipped_note(kernel.dir, plan.config), no_section_note(kernel.dir, plan.config, plan.backend)]
    if expected is None:  # not in a cell's container: `matrix` said it for the cells
        notes.append(edition_4_note(kernel.dir, plan.config))
    for note in notes:
        if note:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
    for name in plan.own_list_sections(capabilities):
        console.print(
            f"note: [kernel.{name}]: none of its cuda-capabilities is among --cuda-capabilities "
            f"{','.join(capabilities or [])}: built for its own list ({' '.join(plan.section_capabilities[name])}), "
            "as kernel-builder builds such a section",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if (reuse is not None or candidate is not None) and _reused(plan, where, reuse, candidate):
        return
    loads = _loads(kernel, load, expected)
    console.print(
        styled(
            (plan.variant.name, "bold"),
            f": {plan.framework}"
            + (f", nvcc {plan.nvcc.version}, capabilities {' '.join(plan.capabilities)}" if plan.nvcc else ""),
        )
    )
    started = time.monotonic()
    progress = Progress()
    with console.status(f"building {plan.variant.name}") as status:

        def report(step: Step, cached: bool) -> None:
            # As each step ends: how many of all are done and where the time goes (the
            # slowest compile so far), one line per step, no redrawing (CI logs keep every
            # redraw); a terminal's status line keeps both in view while compiles run.
            slowest, count = progress.slowest, f"[{progress.done}/{progress.total}]"
            took = ""
            if not cached and step.compilers:
                newest = slowest is not None and slowest[1] == step.label
                took = f" ({progress.last:.0f}s{', the slowest so far' if newest else ''})"
            console.print(styled("  ", ("cached" if cached else "done", "green"), f" {step.label}{took} {count}"))
            slowest_text = f", slowest {slowest[1]} ({slowest[0]:.0f}s)" if slowest else ""
            status.update(styled(f"building {plan.variant.name}: {count} done{slowest_text}"))

        def load_staged(stage: Path) -> None:
            status.update(styled(f"loading {plan.variant.name} with kernels.get_local_kernel"))
            if why := _load_check(stage, plan.variant.name, plan.torch.python, plan.backend, where):
                _say_not_loaded([plan.variant.name], why)

        check = load_staged if loads else None
        result = build_variant(plan, where.path, on_step=report, jobs=jobs, cache=cache, progress=progress, check=check)
    seconds = time.monotonic() - started
    for line in cache.refusals() if cache is not None else []:  # why the cache was not used
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    write_build_stats(where.log(plan.variant.name, "build.json"), seconds, result)
    rows = [
        ("variant", plan.variant.name),
        ("op namespace", plan.module),
        ("directory", str(result.variant_dir)),
        ("objects", f"{result.compiled} compiled, {result.cached} from the cache"),
        ("seconds", f"{seconds:.1f}"),
    ]
    console.print(render.native_summary(rows))


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
    from kernel_matrix.containers.container_build import build_selection
    from kernel_matrix.hostfiles import check_build_dir

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


def wheels(
    profile: Annotated[
        str | None, typer.Option(help="This matrix profile's cells (default: every built cell).")
    ] = None,
    only: OnlyOption = None,
    variant: VariantOption = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    build_dir: BuildDirOption = Path("build"),
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
