"""The `kernel-matrix` command line. Each subcommand is one CI job step that a
developer can run locally; errors are one line on stderr and a distinct exit code."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from . import cli_render as render
from .abi import MANYLINUX, PYTHON_ABI
from .cli_options import (
    BackendOption,
    BuildDirOption,
    ImageOption,
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    OnlyOption,
    ProfileOption,
    Python,
    VariantOption,
    check_capabilities,
    make_build_dir,
    selection_of,
)
from .errors import ExitCode, KernelMatrixError
from .layout import BuildDir
from .variants import ImageKind

if TYPE_CHECKING:
    from .compile import Step
    from .matrix import CellRequest, Matrix
    from .objcache import ObjectCache
    from .publish import Plan
    from .selection import Kernel, Resolved

app = typer.Typer(
    help="Build, test and publish a PyTorch kernel for every torch x CUDA variant.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# CI logs are wider than rich's 80-column default for non-terminals.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
stdout = Console(width=None if sys.stdout.isatty() else 240)


@app.command()
def matrix(
    file: MatrixFileOption = Path("build_matrix.yaml"),
    profile: ProfileOption = "full",
    only: OnlyOption = None,
    variant: VariantOption = None,
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print the GitHub Actions matrix {"include": [...]}.')
    ] = False,
    check_upstream: Annotated[
        bool, typer.Option("--check-upstream", help="Report torch releases and CUDA builds the matrix misses.")
    ] = False,
    github_output: Annotated[
        bool,
        typer.Option(
            "--github-output",
            help="With --json: also write the job outputs cells=<json> and gpu_cells=<json of the cells the GPU "
            "runners test, empty if none> to $GITHUB_OUTPUT.",
        ),
    ] = False,
) -> None:
    """List the matrix cells (each kernel's variants): a table, or JSON for GitHub Actions.

    In a GitHub Actions run of a pull request (or a fork's code) the matrix may only
    name GitHub-hosted build runners, and a fork's code gets no GPU test cells."""
    import json

    from .github_event import GithubEvent, write_github_output
    from .matrix import check_runners, gpu_test_cells, load_matrix

    if check_upstream:
        from .upstream import check_upstream as run_check

        run_check(load_matrix(file), console)
        return
    resolved = selection_of(file, profile, only, variant, kernel, kernel_dir).resolve()
    for warning in resolved.matrix.warnings:
        console.print(f"[yellow]{warning}[/]", highlight=False, soft_wrap=True)
    cells = list(resolved.cells)
    event = GithubEvent.from_environment()
    check_runners(resolved.matrix, cells, event)
    if as_json:
        text = json.dumps(resolved.github_matrix(cells), separators=(",", ":"))
        typer.echo(text)
        if github_output:
            gpu = gpu_test_cells(cells, event)
            # An empty string, not an empty matrix (which GitHub refuses): the GPU job's `if` skips it.
            gpu_text = json.dumps(resolved.github_matrix(gpu), separators=(",", ":")) if gpu else ""
            write_github_output({"cells": text, "gpu_cells": gpu_text})
        return
    stdout.print(render.cells_table(f"{file}: {len(cells)} cells (profile {profile})", cells))


def _each_kernel(kernels: list[tuple[Kernel, str | None]], action: Callable[[Kernel, str | None], None]) -> None:
    """action(kernel, subfolder) for each kernel; with several, one kernel's failure
    is reported and the others still run."""
    from .errors import BuildError, KernelMatrixError

    if len(kernels) == 1:
        action(*kernels[0])
        return
    failed = []
    for kernel, subfolder in kernels:
        console.print(f"[bold]== {kernel.name}[/] ({kernel.dir})", highlight=False)
        try:
            action(kernel, subfolder)
        except KernelMatrixError as exc:
            failed.append(kernel.name)
            for line in str(exc).splitlines():
                _error(f"{kernel.name}: {line}")
    if failed:
        raise BuildError(f"{len(failed)} of {len(kernels)} kernels failed: {', '.join(failed)}")


@app.command()
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
    variant: Annotated[list[str] | None, typer.Option("--variant", help="Build this cell in a container.")] = None,
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
        typer.Option(help="The compiled-object cache (default: <build-dir>/.cache/objects).", show_default=False),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Compile everything; neither read nor fill the cache.")
    ] = False,
    cache_writes: Annotated[
        Path | None,
        # Container builds: the shared cache is mounted read-only, new entries go here for the host to check.
        typer.Option(hidden=True, help="Write new cache entries here instead of into --cache-dir."),
    ] = None,
    cell: Annotated[
        str | None,
        # Container builds: the matrix cell (its JSON) this build must make, checked before anything is written.
        typer.Option(hidden=True, help="The matrix cell this build must make, as `matrix --json` gives it."),
    ] = None,
) -> None:
    """Build this host's variant natively (no selection), or matrix cells in containers (--profile/--only/--variant).

    Every kernel of the matrix, or those --kernel names, or the one --kernel-dir names."""
    capabilities = cuda_capabilities.split(",") if cuda_capabilities else None
    if profile or only or variant:
        from .errors import ConfigError

        if python or backend:
            raise ConfigError(
                "--python and --backend are for native builds; a container build takes them from the cell"
            )
        resolved = selection_of(file, profile, only, variant, kernel, kernel_dir).resolve()
        shared_cache = None if no_cache else (cache_dir or BuildDir(build_dir).cache)
        _build_in_containers(resolved, build_dir, profile, image, jobs, shared_cache, capabilities)
        return
    from .objcache import ObjectCache

    expected = None
    if cell is not None:  # the cell decides the backend and capabilities; the build must make exactly it
        from .matrix import CellRequest

        expected = CellRequest.parse(cell)
        backend, capabilities = expected.backend, list(expected.capabilities) or None
    cache = None if no_cache else ObjectCache(cache_dir or BuildDir(build_dir).cache, writes=cache_writes)

    def build_one(chosen: Kernel, subfolder: str | None) -> None:
        where = BuildDir(build_dir, subfolder)
        _build_native(chosen, where, python, backend, jobs, capabilities, cache, expected)

    _each_kernel(selection_of(file, kernel=kernel, kernel_dir=kernel_dir).kernel_folders(), build_one)


def _build_native(
    kernel: Kernel,
    where: BuildDir,
    python: str | None,
    backend: str | None,
    jobs: int | None,
    capabilities: list[str] | None,
    cache: ObjectCache | None,
    expected: CellRequest | None = None,
) -> None:
    from .native_build import build_noarch, build_variant, plan_build, write_build_stats

    if kernel.config.noarch:  # Python only: every backend's variant (or --backend's), nothing compiled
        make_build_dir(where.path)
        for made in build_noarch(kernel.dir, where.path, backends=[backend] if backend else None, config=kernel.config):
            console.print(f"[bold]{made.name}[/]: {made}", highlight=False)
        return
    plan = plan_build(kernel.dir, python=python, backend=backend, cuda_capabilities=capabilities, config=kernel.config)
    if expected is not None:
        nvcc = f", nvcc {plan.nvcc.version}" if plan.nvcc else ""
        expected.check(plan.variant.name, f"torch {plan.torch.version}{nvcc}")
    make_build_dir(where.path)  # once the inputs are known to be good: a refused build writes nothing
    for name in plan.config.skipped_sections():
        console.print(
            f"note: [kernel.{name}] is for {plan.config.kernel[name].backend}, which kernel-matrix does not build "
            "(cpu, cuda): skipped",
            markup=False,
            highlight=False,
        )
    console.print(
        f"[bold]{plan.variant.name}[/]: torch {plan.torch.version}"
        + (f", nvcc {plan.nvcc.version}, capabilities {' '.join(plan.capabilities)}" if plan.nvcc else "")
    )
    started = time.monotonic()
    with console.status(f"building {plan.variant.name}") as status:

        def report(step: Step, cached: bool) -> None:
            console.print(f"  [green]{'cached' if cached else 'done'}[/] {step.label}")
            status.update(f"building {plan.variant.name}")

        result = build_variant(plan, where.path, on_step=report, jobs=jobs, cache=cache)
    seconds = time.monotonic() - started
    write_build_stats(where.log(plan.variant.name, "build.json"), seconds, result)
    rows = [
        ("variant", plan.variant.name),
        ("op namespace", plan.module),
        ("directory", str(result.variant_dir)),
        ("objects", f"{result.compiled} compiled, {result.cached} from the cache"),
        ("seconds", f"{seconds:.1f}"),
    ]
    console.print(render.native_summary(rows))


def _image_kind(image: ImageKind | None, profile: str | None, matrix: Matrix) -> str:
    """--image, else the matrix's; the local profile is what this host builds, where
    no registry is assumed, so its builders stand on the offline base."""
    return image.value if image else ("offline" if profile == "local" else matrix.spec.image)


def _build_in_containers(
    resolved: Resolved,
    build_dir: Path,
    profile: str | None,
    image: ImageKind | None,
    jobs: int | None,
    cache_dir: Path | None,
    capabilities: list[str] | None,
) -> None:
    from .container_build import build_selection
    from .errors import BuildError
    from .progress import live_progress

    make_build_dir(build_dir)
    results = build_selection(
        resolved,
        BuildDir(build_dir),
        image_kind=_image_kind(image, profile, resolved.matrix),
        jobs=jobs,
        cache_dir=cache_dir,
        capabilities=capabilities,
        log=lambda m: console.print(m),
        progress=lambda names: live_progress(console, names),
    )
    stdout.print(render.build_results_table(results))
    failed = [f"{r.cell.kernel}/{r.cell.name}" if resolved.several else r.cell.name for r in results if not r.ok]
    if failed:
        raise BuildError(f"{len(failed)} of {len(results)} cells failed: {', '.join(failed)}")


@app.command()
def wheels(
    profile: Annotated[
        str | None, typer.Option(help="This matrix profile's cells (default: every built cell).")
    ] = None,
    only: Annotated[str | None, typer.Option(help="The cells matching KEY=VALUE,...")] = None,
    variant: Annotated[list[str] | None, typer.Option("--variant", help="This cell (repeatable).")] = None,
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

    Compiled kernels only: a Python-only kernel's variants are not per torch, so no wheel label fits them."""
    from .errors import BuildError
    from .wheels import build_wheels

    resolved = selection_of(file, profile, only, variant, kernel, kernel_dir).resolve()
    selected = bool(profile or only or variant)
    work = [item for item in resolved.work(build_dir, built_only=not selected) if not item.kernel.config.noarch]
    if not work:
        raise BuildError(f"no compiled variant of {file} is built in {build_dir}: run kernel-matrix build first")
    results = build_wheels(
        work,
        image_kind=_image_kind(image, profile, resolved.matrix),
        out_dir=out_dir or build_dir / "wheels",
        log=console.print,
    )
    stdout.print(render.wheels_table(results))
    failed = [r.cell.name for r in results if not r.ok]
    if failed:
        raise BuildError(f"{len(failed)} of {len(results)} wheels failed: {', '.join(failed)}")


@app.command()
def shell(
    variant: Annotated[str, typer.Argument(help="The cell (variant name) whose builder image to enter.")],
    command: Annotated[list[str] | None, typer.Argument(help="A command to run instead of bash (after --).")] = None,
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    image: ImageOption = None,
) -> None:
    """A shell in a cell's builder image with the kernel mounted read-write at /src (network off)."""
    import subprocess

    from .container_build import builder_for, shell_command
    from .engine import connect
    from .errors import ConfigError
    from .images import PipSetup

    resolved = selection_of(file, variant=[variant], kernel=kernel, kernel_dir=kernel_dir).resolve()
    if len(resolved.cells) != 1:
        names = ", ".join(k.name for k in resolved.kernels)
        raise ConfigError(f"{variant}: a variant of several kernels ({names}): name one with --kernel")
    (cell,) = resolved.cells
    builder = builder_for(
        connect(), cell, image.value if image else resolved.matrix.spec.image, PipSetup.from_host(), log=console.print
    )
    argv = shell_command(cell, builder, resolved.kernel(cell).dir, command or [], interactive=sys.stdin.isatty())
    raise typer.Exit(subprocess.run(argv, check=False).returncode)


@app.command()
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
    from .testing import resolve_variant_dir, run_installed_tests, run_kernel_tests

    kernels = selection_of(file, kernel=kernel, kernel_dir=kernel_dir).kernel_folders()
    if installed:
        from .errors import ConfigError

        if variant is not None or len(kernels) != 1:
            raise ConfigError("--installed PACKAGE: give no VARIANT, and one kernel (--kernel or --kernel-dir)")
        run_installed_tests(installed, kernels[0][0].dir / "tests", python=python, pytest_args=pytest_args or [])
        console.print(f"[green]passed[/] {installed} (installed)")
        return

    def test_one(chosen: Kernel, subfolder: str | None) -> None:
        name = variant
        if name is None:
            from .native_build import plan_build
            from .toolchain import probe_torch

            if chosen.config.noarch:  # the backend of the torch that runs the tests
                name = f"torch-{backend or ('cuda' if probe_torch(python).cuda else 'cpu')}"
            else:
                name = plan_build(chosen.dir, python=python, backend=backend, config=chosen.config).variant.name
        variant_dir = resolve_variant_dir(name, BuildDir(build_dir, subfolder).path)
        ran = run_kernel_tests(variant_dir, chosen.dir, python=python, pytest_args=pytest_args or [])
        console.print(f"[green]passed[/] {variant_dir.name}: {ran}", highlight=False)

    _each_kernel(kernels, test_one)


@app.command("check-abi")
def check_abi(
    variant: Annotated[str, typer.Argument(help="A variant directory, or a variant name under --build-dir.")],
    build_dir: BuildDirOption = Path("build"),
    python_abi: Annotated[str, typer.Option(help="Oldest CPython whose limited API the .so may use.")] = PYTHON_ABI,
    manylinux: Annotated[
        str, typer.Option(help="manylinux policy to check symbol versions against, or 'none'.")
    ] = MANYLINUX,
) -> None:
    """Check a variant's libraries with kernel-abi-check: abi3 and manylinux symbol versions."""
    from .abi import check_variant
    from .errors import AbiError
    from .testing import resolve_variant_dir

    variant_dir = resolve_variant_dir(variant, build_dir)
    reports = check_variant(variant_dir, python_abi=python_abi, manylinux=None if manylinux == "none" else manylinux)
    console.print(render.abi_table(variant_dir.name, reports, python_abi, manylinux))
    failed = [r.library.name for r in reports if not r.ok]
    if failed:
        raise AbiError(f"{variant_dir.name}: {', '.join(failed)} breaks the ABI rules above")


@app.command()
def clean(
    build_dir: BuildDirOption = Path("build"),
    file: MatrixFileOption = Path("build_matrix.yaml"),
    dry_run: Annotated[bool, typer.Option(help="List what would be removed, remove nothing.")] = False,
) -> None:
    """Remove development artifacts, and variants in build/ that the matrix no longer names."""
    from .clean import find_artifacts, project_root, remove
    from .selection import Selection

    root = project_root(file, build_dir)  # first: nothing is read from a folder clean may not act on
    resolved = Selection(file).resolve()
    keep = {resolved.build_dir(build_dir, resolved.kernel(c)).relative(c.name) for c in resolved.cells}
    kernel_folders = {k.name for k in resolved.kernels} if resolved.several else set()
    paths = find_artifacts(root, build_dir, keep, kernel_folders)
    for path in paths:
        stdout.print(f"{'would remove' if dry_run else 'removed'} {path.relative_to(root)}", highlight=False)
    if not dry_run:
        remove(paths)
    console.print(f"{len(paths)} paths {'to remove' if dry_run else 'removed'}")


@app.command()
def publish(
    repo_id: Annotated[
        str | None,
        typer.Option(help="Hub repo (default: [general.hub] repo-id in build.toml; only with one kernel)."),
    ] = None,
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    build_dir: BuildDirOption = Path("build"),
    file: MatrixFileOption = Path("build_matrix.yaml"),
    profile: Annotated[str, typer.Option(help="The matrix profile this release must contain.")] = "full",
    allow_partial: Annotated[
        bool, typer.Option(help="Publish although some variants of the profile are not built.")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Print what would change, write nothing.")] = False,
    tag: Annotated[str | None, typer.Option(help="Also tag the release commit (e.g. the git tag).")] = None,
    manylinux: Annotated[str, typer.Option(help="manylinux policy of the ABI gate, or 'none'.")] = MANYLINUX,
) -> None:
    """Publish each kernel's built variants to branch v<version> of its Hub repo, in one commit per kernel.

    Every kernel's release is checked (complete, digests, ABI) before any is published."""
    from huggingface_hub import HfApi

    from . import publish as hub
    from .kernel_card import kernel_card
    from .release import prepare_releases

    resolved = selection_of(file, profile, kernel=kernel, kernel_dir=kernel_dir).resolve()
    if tag is not None:
        hub.check_tag(tag)
    releases = prepare_releases(
        resolved, build_dir, repo_id, allow_partial=allow_partial, manylinux=None if manylinux == "none" else manylinux
    )
    api = HfApi()
    for target, release in releases:
        config = release.config
        branch = f"v{config.general.version}"
        if dry_run:
            _print_plan(hub.dry_run(api, target, branch, release.files), dry_run=True)
            continue
        built = list(release.metadata)
        outcome = hub.publish(
            api,
            target,
            branch,
            release.files,
            card=kernel_card(config, target, release.metadata),
            message=f"Release {config.general.name} v{config.general.version}: {len(built)} variants",
            tag=tag,
            log=lambda m: console.print(f"[yellow]{m}[/]"),
        )
        _print_plan(outcome.plan, dry_run=False)
        if outcome.commit:
            console.print(f"published {len(built)} variants to {target}@{branch}: commit {outcome.commit}")
        else:
            console.print(f"{target}@{branch} already holds this release: no commit")


def _print_plan(plan: Plan, *, dry_run: bool) -> None:
    stdout.print(render.plan_table(plan, dry_run=dry_run))
    for line in render.plan_lines(plan):
        stdout.print(line, highlight=False)


@app.command()
def verify(
    variants: Annotated[
        list[str] | None,
        typer.Argument(
            help="Variant folders, or names under --build-dir; with --repo-id: the release's variants to verify "
            "(default: all).",
            metavar="VARIANT...",
            show_default=False,
        ),
    ] = None,
    repo_id: Annotated[
        str | None, typer.Option(help="Verify this Hub repo's release instead of local folders.")
    ] = None,
    revision: Annotated[
        str | None, typer.Option(help="The release's branch or tag (default: v<version> from build.toml).")
    ] = None,
    kernel_dir: Annotated[Path, typer.Option(help="The kernel's sources, in kernel-builder layout.")] = Path("kernel"),
    build_dir: Annotated[Path, typer.Option(help="Where variant names are looked up.")] = Path("build"),
    python: Annotated[str | None, typer.Option(help="The Python whose torch to rebuild with.")] = None,
    file: Annotated[
        Path, typer.Option("--file", "-f", help="The matrix file, whose cells other variants are rebuilt as.")
    ] = Path("build_matrix.yaml"),
    image: ImageOption = None,
    in_container: Annotated[
        bool, typer.Option("--in-container", help="Rebuild this host's variants in their builder image too.")
    ] = False,
) -> None:
    """Rebuild variants from the kernel's sources and compare every file's sha256 with them.

    This host's variants are rebuilt natively, other cells of the matrix in their
    builder image. Exit 0 when every file is identical; 12 (one line per differing
    file) when one differs; 4 when a variant cannot be rebuilt here."""
    from .verify import verify_command

    verify_command(
        variants or [],
        repo_id=repo_id,
        revision=revision,
        kernel_dir=kernel_dir,
        build_dir=build_dir,
        python=python,
        matrix_file=file,
        image_kind=image.value if image else None,
        in_container=in_container,
        # Unwrapped: a line names a file and its digests, for people and scripts alike.
        log=lambda message: console.print(message, markup=False, highlight=False, soft_wrap=True),
        report=lambda line: stdout.print(line, markup=False, highlight=False, soft_wrap=True),
    )


def _interrupt_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # CI runners and `docker stop` send SIGTERM: unwind like Ctrl-C, so that
    # containers are removed and staged builds deleted on the way out.
    raise KeyboardInterrupt


def _error(line: str) -> None:
    console.print(f"[red]error:[/] {line}", highlight=False, soft_wrap=True, markup=True)


def main() -> None:
    if TYPE_CHECKING:  # checked against the typer the environment has
        from typer._click import exceptions as click
    else:
        try:  # typer >= 0.22 carries its own copy of click
            from typer._click import exceptions as click
        except ImportError:  # pragma: no cover - older typer uses click itself
            from click import exceptions as click

    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    try:
        # Not standalone: click's own usage errors come here, to be one line too.
        code = app(standalone_mode=False)
    except KernelMatrixError as exc:
        for line in str(exc).splitlines():  # one line per problem
            _error(line)
        raise SystemExit(int(exc.exit_code)) from None
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc), err=True)
        raise SystemExit(ExitCode.CONFIG) from None
    except click.ClickException as exc:  # a bad option or argument
        ctx = getattr(exc, "ctx", None)  # usage errors carry the command's context
        command = f"{ctx.command_path}: " if ctx else ""
        _error(command + " ".join(exc.format_message().split()))
        raise SystemExit(ExitCode.CONFIG) from None
    except typer.Abort:  # end of input at a prompt
        raise SystemExit(ExitCode.FAILURE) from None
    # Ctrl-C and SIGTERM come back as typer.Exit(130), returned as `code`.
    raise SystemExit(code if isinstance(code, int) else 0)  # typer.Exit(code) returns its code here


if __name__ == "__main__":
    main()
