"""The `kernel-matrix` command line. Each subcommand is one CI job step that a
developer can run locally; errors are one line on stderr and a distinct exit code."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from .errors import ExitCode, KernelMatrixError
from .variants import ImageKind

app = typer.Typer(
    help="Build, test and publish a PyTorch kernel for every torch x CUDA variant.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# CI logs are wider than rich's 80-column default for non-terminals.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
stdout = Console(width=None if sys.stdout.isatty() else 240)

KernelDir = Annotated[Path, typer.Option("--kernel-dir", help="The kernel, in kernel-builder layout (build.toml).")]
MatrixKernelDir = Annotated[
    Path | None,
    typer.Option("--kernel-dir", help="The kernel, in kernel-builder layout (default: the matrix file's `kernel`)."),
]


def _matrix_kernel_dir(option: Path | None, matrix) -> Path:
    """--kernel-dir, else the matrix file's `kernel`, relative to the matrix file."""
    return option if option is not None else matrix.path.parent / matrix.spec.kernel


def _check_build_dir(path: Path) -> Path:
    """A folder, or a path where one can be made: never an existing file."""
    for candidate in (path, *path.absolute().parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise typer.BadParameter(f"{path}: {candidate} is not a folder", param_hint="--build-dir")
            break
    return path


def _check_capabilities(value: str | None) -> str | None:
    """--cuda-capabilities: a comma-separated list of capabilities (9.0, 9.0a)."""
    from .capabilities import CAPABILITY

    if value is not None and not all(CAPABILITY.match(c) for c in value.split(",")):
        raise typer.BadParameter(
            f"{value!r}: expected capabilities such as 8.0,9.0 or 9.0a", param_hint="--cuda-capabilities"
        )
    return value


def _make_build_dir(path: Path) -> None:
    from .errors import ConfigError

    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--build-dir {path}: cannot be made ({exc.strerror or exc})") from None


BuildDir = Annotated[
    Path,
    typer.Option("--build-dir", help="Where variants are written: <build-dir>/<variant>/.", callback=_check_build_dir),
]
Python = Annotated[
    str | None, typer.Option("--python", help="The Python whose torch to use (default: the one running this).")
]


MatrixFileOption = Annotated[Path, typer.Option("--file", "-f", help="The matrix file.")]


@app.command()
def matrix(
    file: MatrixFileOption = Path("build_matrix.yaml"),
    profile: Annotated[
        str, typer.Option(help="full (everything), pr (small) or local (what this host builds).")
    ] = "full",
    only: Annotated[
        str | None, typer.Option(help="Keep cells matching KEY=VALUE[,KEY=VALUE]: torch, cuda (or cpu), arch, backend.")
    ] = None,
    variant: Annotated[list[str] | None, typer.Option("--variant", help="Keep this variant (repeatable).")] = None,
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
    """List the matrix cells (variants): a table, or JSON for GitHub Actions.

    In a GitHub Actions run of a pull request (or a fork's code) the matrix may only
    name GitHub-hosted build runners, and a fork's code gets no GPU test cells."""
    import json

    from .github_event import GithubEvent
    from .matrix import cells_for_kernel, check_runners, github_matrix, gpu_test_cells, load_matrix, select

    loaded = load_matrix(file)
    for warning in loaded.warnings:
        console.print(f"[yellow]{warning}[/]", highlight=False, soft_wrap=True)
    if check_upstream:
        from .upstream import check_upstream as run_check

        run_check(loaded, console)
        return
    cells = select(loaded, profile=profile, only=only, variants=variant or [])
    kernel_toml = loaded.path.parent / loaded.spec.kernel / "build.toml"
    if kernel_toml.is_file():  # the cells the matrix's kernel declares (its backends, its torch range)
        from .buildtoml import load_build_toml
        from .errors import NothingToDoError

        config = load_build_toml(kernel_toml.parent)
        if not config.noarch:  # (a Python-only kernel's torch-<backend> cells: not in the matrix yet)
            cells = cells_for_kernel(cells, config)
            if not cells:
                raise NothingToDoError(f"{kernel_toml}: the selection has no cell of the kernel's backends")
    event = GithubEvent.from_environment()
    check_runners(loaded, cells, event)
    if as_json:
        text = json.dumps(github_matrix(cells), separators=(",", ":"))
        typer.echo(text)
        if github_output:
            gpu = gpu_test_cells(cells, event)
            # An empty string, not an empty matrix (which GitHub refuses): the GPU job's `if` skips it.
            gpu_text = json.dumps(github_matrix(gpu), separators=(",", ":")) if gpu else ""
            _write_github_output({"cells": text, "gpu_cells": gpu_text})
        return
    table = Table(title=f"{file}: {len(cells)} cells (profile {profile})", show_edge=False)
    for column in ("variant", "torch", "CUDA", "arch", "image", "torch index", "build runner", "test runner"):
        table.add_column(column, overflow="fold")
    for cell in cells:
        v = cell.variant
        table.add_row(
            v.name,
            v.torch,
            v.cuda or "-",
            v.arch,
            cell.image,
            cell.torch_index,
            ",".join(cell.build_runner),
            ",".join(cell.test_runner),
        )
    stdout.print(table)


def _write_github_output(outputs: dict[str, str]) -> None:
    import os

    from .errors import ConfigError

    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        raise ConfigError("--github-output: GITHUB_OUTPUT is not set (it is, in a GitHub Actions job)")
    with open(path, "a", encoding="utf-8") as f:
        for name, value in outputs.items():
            f.write(f"{name}={value}\n")  # compact JSON has no newline, so one line holds it


@app.command()
def build(
    kernel_dir: MatrixKernelDir = None,
    build_dir: BuildDir = Path("build"),
    python: Python = None,
    backend: Annotated[
        str | None, typer.Option(help="cuda or cpu (default: cuda when torch is a CUDA build, else cpu).")
    ] = None,
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
    image: Annotated[
        ImageKind | None,
        typer.Option(help="Builder base for container builds (default: the matrix's; offline for --profile local)."),
    ] = None,
    cuda_capabilities: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated list replacing the CUDA version's default capabilities (native builds) or the "
            "cells' (container builds), e.g. 9.0 for a quick build.",
            callback=_check_capabilities,
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
) -> None:
    """Build this host's variant natively (no selection), or matrix cells in containers (--profile/--only/--variant)."""
    if profile or only or variant:
        from .errors import ConfigError

        if python or backend:
            raise ConfigError(
                "--python and --backend are for native builds; a container build takes them from the cell"
            )
        _build_in_containers(
            kernel_dir,
            build_dir,
            file,
            profile or "full",
            only,
            variant or [],
            image,
            jobs,
            cache_dir,
            no_cache,
            cuda_capabilities.split(",") if cuda_capabilities else None,
        )
        return
    kernel_dir = kernel_dir or Path("kernel")
    from .buildtoml import load_build_toml
    from .native_build import build_variant, plan_build
    from .objcache import ObjectCache

    if load_build_toml(kernel_dir).noarch:  # Python only: every backend's variant, nothing compiled
        _build_noarch(kernel_dir, build_dir, [backend] if backend else None)
        return

    plan = plan_build(
        kernel_dir,
        python=python,
        backend=backend,
        cuda_capabilities=cuda_capabilities.split(",") if cuda_capabilities else None,
    )
    _make_build_dir(build_dir)  # once the inputs are known to be good: a refused build writes nothing
    for name in plan.config.skipped_sections():
        backend = plan.config.kernel[name].backend
        console.print(
            f"note: [kernel.{name}] is for {backend}, which kernel-matrix does not build (cpu, cuda): skipped",
            markup=False,
            highlight=False,
        )
    console.print(
        f"[bold]{plan.variant.name}[/]: torch {plan.torch.version}"
        + (f", nvcc {plan.nvcc.version}, capabilities {' '.join(plan.capabilities)}" if plan.nvcc else "")
    )
    started = time.monotonic()
    with console.status(f"building {plan.variant.name}") as status:

        def report(step, cached):
            console.print(f"  [green]{'cached' if cached else 'done'}[/] {step.label}")
            status.update(f"building {plan.variant.name}")

        cache = None if no_cache else ObjectCache(cache_dir or build_dir / ".cache" / "objects", writes=cache_writes)
        result = build_variant(plan, build_dir, on_step=report, jobs=jobs, cache=cache)
    seconds = time.monotonic() - started
    _write_build_stats(build_dir, plan.variant.name, seconds, result)
    summary = Table.grid(padding=(0, 2))
    for key, value in [
        ("variant", plan.variant.name),
        ("op namespace", plan.module),
        ("directory", str(result.variant_dir)),
        ("objects", f"{result.compiled} compiled, {result.cached} from the cache"),
        ("seconds", f"{seconds:.1f}"),
    ]:
        summary.add_row(f"[bold]{key}[/]", value)
    console.print(summary)


def _build_noarch(kernel_dir: Path, build_dir: Path, backends: list[str] | None) -> None:
    """A Python-only kernel's torch-<backend> variants (every declared backend by default)."""
    from .native_build import build_noarch

    _make_build_dir(build_dir)
    for made in build_noarch(kernel_dir, build_dir, backends=backends):
        console.print(f"[bold]{made.name}[/]: {made}", highlight=False)


def _write_build_stats(build_dir: Path, variant: str, seconds: float, result) -> None:
    """logs/<variant>.build.json: what a container build reports in its summary."""
    import json

    stats = {"seconds": round(seconds, 2), "compiled": result.compiled, "cached": result.cached}
    path = build_dir / "logs" / f"{variant}.build.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stats) + "\n")


def _image_kind(image: str | None, profile: str | None, matrix) -> str:
    """--image, else the matrix's; the local profile is what this host builds, where
    no registry is assumed, so its builders stand on the offline base."""
    return image.value if image else ("offline" if profile == "local" else matrix.spec.image)


def _build_in_containers(
    kernel_dir, build_dir, file, profile, only, variants, image, jobs, cache_dir, no_cache, capabilities
) -> None:
    import dataclasses
    import os

    from .buildtoml import load_build_toml
    from .container_build import SUMMARY_COLUMNS, build_cells, summary_markdown, summary_rows
    from .engine import connect
    from .errors import BuildError, NothingToDoError
    from .matrix import cells_for_kernel, load_matrix, select
    from .progress import live_progress

    matrix = load_matrix(file)
    cells = select(matrix, profile=profile, only=only, variants=variants)
    kernel_dir = _matrix_kernel_dir(kernel_dir, matrix)
    config = load_build_toml(kernel_dir)
    if config.noarch:  # Python only: no torch, no compiler, so no container; one variant per backend
        _build_noarch(kernel_dir, build_dir, None)
        return
    # The cells this kernel declares (a CPU-only kernel has no CUDA cells).
    cells = cells_for_kernel(cells, config)
    if not cells:
        raise NothingToDoError(
            f"{kernel_dir / 'build.toml'}: the selection has no cell of the kernel's backends "
            f"{', '.join(config.general.backends)}"
        )
    if capabilities:
        cells = [dataclasses.replace(c, capabilities=tuple(capabilities)) if c.variant.cuda else c for c in cells]
    client = connect()
    image_kind = _image_kind(image, profile, matrix)
    _make_build_dir(build_dir)
    with live_progress(console, [c.name for c in cells]) as progress:
        results = build_cells(
            client,
            cells,
            kernel_dir=kernel_dir,
            build_dir=build_dir,
            image_kind=image_kind,
            jobs=jobs,
            cache_dir=None if no_cache else (cache_dir or build_dir / ".cache" / "objects"),
            log=lambda m: console.print(m),
            on_status=progress,
        )
    table = Table(title=f"container builds ({len(cells)} cells)", show_edge=False)
    for column in SUMMARY_COLUMNS:
        table.add_column(column, overflow="fold")
    for r, row in zip(results, summary_rows(results), strict=True):
        colour = "green" if r.ok else "red"
        table.add_row(row[0], f"[{colour}]{r.status}[/]", *row[2:])
    stdout.print(table)
    summary = summary_markdown(results)
    (build_dir / "summary.md").write_text(summary + "\n")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as f:
            f.write(summary + "\n")
    failed = [r.cell.name for r in results if not r.ok]
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
    kernel_dir: MatrixKernelDir = None,
    build_dir: BuildDir = Path("build"),
    out_dir: Annotated[
        Path | None, typer.Option(help="Where wheels are written (default: <build-dir>/wheels).", show_default=False)
    ] = None,
    image: Annotated[ImageKind | None, typer.Option(help="The builder images (default: as for build).")] = None,
) -> None:
    """A pip-installable wheel per built variant, made by cibuildwheel in the cell's builder image."""
    from docker.errors import DockerException

    from .buildtoml import load_build_toml
    from .container_build import builder_for
    from .engine import connect
    from .errors import BuildError, KernelMatrixError
    from .images import PipSetup
    from .matrix import cells_for_kernel, load_matrix, select
    from .wheels import build_wheel, wheel_spec

    matrix = load_matrix(file)
    selected = profile or only or variant
    cells = select(matrix, profile=profile or "full", only=only, variants=variant or [])
    cells = cells_for_kernel(cells, load_build_toml(_matrix_kernel_dir(kernel_dir, matrix)))
    if not selected:  # every cell of the matrix that is built
        cells = [c for c in cells if (build_dir / c.name / "metadata.json").is_file()]
        if not cells:
            raise BuildError(f"no variant of {file} is built in {build_dir}: run kernel-matrix build first")
    general = load_build_toml(_matrix_kernel_dir(kernel_dir, matrix)).general
    client, pip = connect(), PipSetup.from_host()
    image_kind = _image_kind(image, profile, matrix)
    out_dir = out_dir or build_dir / "wheels"
    table = Table(title=f"wheels ({len(cells)} cells)", show_edge=False)
    for column in ("variant", "status", "wheel"):
        table.add_column(column, overflow="fold")
    failed = []
    for cell in cells:
        spec = wheel_spec(
            cell,
            name=general.name,
            package=general.python_name,
            kernel_version=general.version,
            license=general.license,
        )
        console.print(f"{cell.name}: wheel {spec.name}-{spec.version}")
        try:
            builder = builder_for(client, cell, image_kind, pip, log=console.print)
            log_path = build_dir / "logs" / f"{cell.name}.wheel.log"
            made = build_wheel(cell, build_dir / cell.name, builder, spec, out_dir, log_path)
            table.add_row(cell.name, "[green]built[/]", str(made))
        except (KernelMatrixError, DockerException, OSError) as exc:  # one cell's failure never stops the others
            failed.append(cell.name)
            table.add_row(cell.name, "[red]FAILED[/]", (str(exc).splitlines() or [type(exc).__name__])[0])
    stdout.print(table)
    if failed:
        raise BuildError(f"{len(failed)} of {len(cells)} wheels failed: {', '.join(failed)}")


@app.command()
def shell(
    variant: Annotated[str, typer.Argument(help="The cell (variant name) whose builder image to enter.")],
    command: Annotated[list[str] | None, typer.Argument(help="A command to run instead of bash (after --).")] = None,
    kernel_dir: MatrixKernelDir = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    image: Annotated[ImageKind | None, typer.Option(help="The builder images (default: the matrix's).")] = None,
) -> None:
    """A shell in a cell's builder image with the kernel mounted read-write at /src (network off)."""
    import subprocess

    from .container_build import builder_for, shell_command
    from .engine import connect
    from .images import PipSetup
    from .matrix import load_matrix, select

    matrix = load_matrix(file)
    (cell,) = select(matrix, variants=[variant])
    builder = builder_for(
        connect(), cell, image.value if image else matrix.spec.image, PipSetup.from_host(), log=console.print
    )
    argv = shell_command(
        cell, builder, _matrix_kernel_dir(kernel_dir, matrix), command or [], interactive=sys.stdin.isatty()
    )
    raise typer.Exit(subprocess.run(argv, check=False).returncode)


@app.command()
def test(
    variant: Annotated[
        str | None,
        typer.Argument(help="A variant directory, or a variant name under --build-dir (default: this host's)."),
    ] = None,
    kernel_dir: KernelDir = Path("kernel"),
    build_dir: BuildDir = Path("build"),
    python: Python = None,
    backend: Annotated[str | None, typer.Option(help="With no VARIANT: cuda or cpu, as for build.")] = None,
    pytest_args: Annotated[
        list[str] | None, typer.Option("--pytest-arg", help="Extra pytest argument (repeatable).")
    ] = None,
    installed: Annotated[
        str | None,
        typer.Option(help="Test this package as installed in --python's environment (from a wheel), not a variant."),
    ] = None,
) -> None:
    """Run the kernel's tests against a built variant, loaded by `kernels` in a fresh process."""
    from .testing import resolve_variant_dir, run_installed_tests, run_kernel_tests

    if installed:
        if variant is not None:
            from .errors import ConfigError

            raise ConfigError("give a VARIANT or --installed PACKAGE, not both")
        run_installed_tests(installed, kernel_dir / "tests", python=python, pytest_args=pytest_args or [])
        console.print(f"[green]passed[/] {installed} (installed)")
        return
    if variant is None:
        from .buildtoml import load_build_toml
        from .native_build import plan_build
        from .toolchain import probe_torch

        if load_build_toml(kernel_dir).noarch:  # the backend of the torch that runs the tests
            variant = f"torch-{backend or ('cuda' if probe_torch(python).cuda else 'cpu')}"
        else:
            variant = plan_build(kernel_dir, python=python, backend=backend).variant.name
    variant_dir = resolve_variant_dir(variant, build_dir)
    ran = run_kernel_tests(variant_dir, kernel_dir, python=python, pytest_args=pytest_args or [])
    console.print(f"[green]passed[/] {variant_dir.name}: {ran}", highlight=False)


@app.command("check-abi")
def check_abi(
    variant: Annotated[str, typer.Argument(help="A variant directory, or a variant name under --build-dir.")],
    build_dir: BuildDir = Path("build"),
    python_abi: Annotated[str, typer.Option(help="Oldest CPython whose limited API the .so may use.")] = "3.9",
    manylinux: Annotated[
        str, typer.Option(help="manylinux policy to check symbol versions against, or 'none'.")
    ] = "manylinux_2_28",
) -> None:
    """Check a variant's libraries with kernel-abi-check: abi3 and manylinux symbol versions."""
    from .abi import check_library, variant_libraries
    from .errors import AbiError
    from .testing import resolve_variant_dir

    variant_dir = resolve_variant_dir(variant, build_dir)
    reports = [
        check_library(lib, python_abi=python_abi, manylinux=None if manylinux == "none" else manylinux)
        for lib in variant_libraries(variant_dir)
    ]
    table = Table(title=f"ABI of {variant_dir.name}", show_edge=False)
    for column in ("library", f"abi3 (Python {python_abi})", manylinux):
        table.add_column(column, overflow="fold")
    for report in reports:
        table.add_row(
            report.library.name,
            "\n".join(report.abi3_violations) or "[green]ok[/]",
            "\n".join(report.manylinux_violations) or ("[green]ok[/]" if report.manylinux else "-"),
        )
    console.print(table)
    failed = [r.library.name for r in reports if not r.ok]
    if failed:
        raise AbiError(f"{variant_dir.name}: {', '.join(failed)} breaks the ABI rules above")


@app.command()
def clean(
    build_dir: BuildDir = Path("build"),
    file: MatrixFileOption = Path("build_matrix.yaml"),
    dry_run: Annotated[bool, typer.Option(help="List what would be removed, remove nothing.")] = False,
) -> None:
    """Remove development artifacts, and variants in build/ that the matrix no longer names."""
    from .clean import find_artifacts, project_root, remove
    from .matrix import load_matrix

    keep = {cell.name for cell in load_matrix(file).cells}
    root = project_root(file, build_dir)
    paths = find_artifacts(root, build_dir, keep)
    for path in paths:
        stdout.print(f"{'would remove' if dry_run else 'removed'} {path.relative_to(root)}", highlight=False)
    if not dry_run:
        remove(paths)
    console.print(f"{len(paths)} paths {'to remove' if dry_run else 'removed'}")


@app.command()
def publish(
    repo_id: Annotated[
        str | None, typer.Option(help="Hub repo (default: [general.hub] repo-id in build.toml).")
    ] = None,
    kernel_dir: MatrixKernelDir = None,
    build_dir: BuildDir = Path("build"),
    file: MatrixFileOption = Path("build_matrix.yaml"),
    profile: Annotated[str, typer.Option(help="The matrix profile this release must contain.")] = "full",
    allow_partial: Annotated[
        bool, typer.Option(help="Publish although some variants of the profile are not built.")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Print what would change, write nothing.")] = False,
    tag: Annotated[str | None, typer.Option(help="Also tag the release commit (e.g. the git tag).")] = None,
    manylinux: Annotated[str, typer.Option(help="manylinux policy of the ABI gate, or 'none'.")] = "manylinux_2_28",
) -> None:
    """Publish the built variants to branch v<version> of the Hub repo, in one commit."""
    from huggingface_hub import HfApi

    from . import publish as hub
    from .buildtoml import load_build_toml
    from .errors import ConfigError
    from .kernel_card import kernel_card
    from .matrix import cells_for_kernel, load_matrix, select
    from .release import prepare_release

    matrix = load_matrix(file)
    kernel_dir = _matrix_kernel_dir(kernel_dir, matrix)
    config = load_build_toml(kernel_dir)
    if repo_id is None:
        repo_id = config.general.hub.repo_id
        if not repo_id:
            raise ConfigError(f"{kernel_dir / 'build.toml'}: no [general.hub] repo-id, and no --repo-id given")
    if tag is not None:
        hub.check_tag(tag)
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ConfigError(f"repo id {repo_id!r}: {str(exc).splitlines()[0]}") from None
    expected = [c.name for c in cells_for_kernel(select(matrix, profile=profile), config)]
    release = prepare_release(
        config, build_dir, expected, allow_partial=allow_partial, manylinux=None if manylinux == "none" else manylinux
    )
    files, metadata, built = release.files, release.metadata, list(release.metadata)
    branch = f"v{config.general.version}"
    api = HfApi()
    if dry_run:
        _print_plan(hub.dry_run(api, repo_id, branch, files), dry_run=True)
        return
    outcome = hub.publish(
        api,
        repo_id,
        branch,
        files,
        card=kernel_card(config, repo_id, metadata),
        message=f"Release {config.general.name} v{config.general.version}: {len(built)} variants",
        tag=tag,
        log=lambda m: console.print(f"[yellow]{m}[/]"),
    )
    _print_plan(outcome.plan, dry_run=False)
    if outcome.commit:
        console.print(f"published {len(built)} variants to {repo_id}@{branch}: commit {outcome.commit}")
    else:
        console.print(f"{repo_id}@{branch} already holds this release: no commit")


def _print_plan(plan, *, dry_run: bool) -> None:
    table = Table(
        title=f"{plan.repo_id}@{plan.branch}" + (" (dry run: nothing written)" if dry_run else ""), show_edge=False
    )
    for column in ("change", "files", "bytes"):
        table.add_column(column)
    for change, entries in (("added", plan.added), ("changed", plan.changed), ("unchanged", plan.unchanged)):
        table.add_row(change, str(len(entries)), str(sum(f.size for f in entries)))
    table.add_row("deleted", str(len(plan.deleted)), "-")
    stdout.print(table)
    for change, entries in (("added", plan.added), ("changed", plan.changed)):
        for f in entries:
            stdout.print(f"  {change:8} {f.path_in_repo} ({f.size} bytes)", highlight=False)
    for path in plan.deleted:
        stdout.print(f"  deleted  {path}", highlight=False)


def _interrupt_on_sigterm(signum, frame) -> None:
    # CI runners and `docker stop` send SIGTERM: unwind like Ctrl-C, so that
    # containers are removed and staged builds deleted on the way out.
    raise KeyboardInterrupt


def _error(line: str) -> None:
    console.print(f"[red]error:[/] {line}", highlight=False, soft_wrap=True, markup=True)


def main() -> None:
    try:  # typer >= 0.22 carries its own copy of click
        from typer._click import exceptions as click
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click import exceptions as click  # type: ignore[no-redef]

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
        command = f"{exc.ctx.command_path}: " if getattr(exc, "ctx", None) else ""
        _error(command + " ".join(exc.format_message().split()))
        raise SystemExit(ExitCode.CONFIG) from None
    except typer.Abort:  # end of input at a prompt
        raise SystemExit(ExitCode.FAILURE) from None
    # Ctrl-C and SIGTERM come back as typer.Exit(130), returned as `code`.
    raise SystemExit(code if isinstance(code, int) else 0)  # typer.Exit(code) returns its code here


if __name__ == "__main__":
    main()
