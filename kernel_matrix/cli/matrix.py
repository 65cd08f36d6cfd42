"""`kernel-matrix matrix`: the cells, as a table, as JSON, or as the build workflow's job matrices."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernel_matrix.cli import render
from kernel_matrix.cli.console import console, stdout, styled
from kernel_matrix.cli.options import (
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    OnlyOption,
    ProfileOption,
    VariantOption,
    resolve,
    selection_of,
)

if TYPE_CHECKING:
    from kernel_matrix.config.github_event import GithubEvent
    from kernel_matrix.planning.matrix import Cell
    from kernel_matrix.planning.selection import Resolved


def matrix(
    file: MatrixFileOption = Path("build_matrix.yaml"),
    profile: ProfileOption = "full",
    only: OnlyOption = None,
    variant: VariantOption = None,
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print every cell as JSON: {"include": [...]}, one entry a cell.')
    ] = False,
    check_upstream: Annotated[
        bool, typer.Option("--check-upstream", help="Report torch releases and CUDA builds the matrix misses.")
    ] = False,
    github_output: Annotated[
        bool,
        typer.Option(
            "--github-output",
            help="With --json: also write the build workflow's job matrices to $GITHUB_OUTPUT: jobs=<json> (a "
            "job a cell, or batches of a kernel's cells over GitHub's 256 jobs) and gpu_jobs=<json of the jobs "
            "whose cells the GPU runners test, empty if none>, and wheels=true|false (whether any job makes "
            "a wheel).",
        ),
    ] = False,
    tag: Annotated[
        str | None,
        typer.Option(help="The git tag a release of these cells will carry: refused here as publish would refuse it."),
    ] = None,
) -> None:
    """List the matrix cells (each kernel's variants): a table, or JSON for GitHub Actions.

    In a GitHub Actions run of a pull request (or a fork's code) the matrix may only
    name GitHub-hosted build runners, and a fork's code gets no GPU test cells."""
    import json

    from kernel_matrix.config.github_event import GithubEvent, write_github_output
    from kernel_matrix.planning.matrix import check_runners, check_sources

    selection = selection_of(file, profile, only, variant, kernel, kernel_dir)
    if check_upstream:
        from kernel_matrix.planning.upstream import check_upstream as run_check

        matrix = selection.matrix()  # a kernel's folder without a matrix file: the default one
        check_sources(matrix, GithubEvent.from_environment())  # the indexes it asks are the matrix's
        run_check(matrix, console)
        return
    resolved = resolve(selection)
    for warning in [*resolved.matrix.warnings, *resolved.idle, *resolved.refusals]:
        console.print(styled((warning, "yellow")), soft_wrap=True)
    for note in resolved.notes:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    cells = list(resolved.cells)
    event = GithubEvent.from_environment()
    check_runners(resolved.matrix, cells, event)
    if tag is not None:  # the build workflow's plan job: before the matrix runs, not in publish after it
        _check_release_tag(resolved, tag)
    if as_json:
        outputs = _job_matrices(resolved, cells, event) if github_output else {}  # refused before anything is printed
        typer.echo(json.dumps(resolved.github_matrix(cells), separators=(",", ":")))
        if outputs:
            write_github_output(outputs)
        return
    source = "kernel-matrix's default matrix (no build_matrix.yaml here)" if selection.uses_default else str(file)
    count = f"{len(cells)} cell{'s' if len(cells) != 1 else ''}"
    stdout.print(render.cells_table(f"{source}: {count} (profile {profile})", cells))


def _check_release_tag(resolved: Resolved, tag: str) -> None:
    """publish's checks of --tag (a valid name, and not v<N> of another version's branch), for every kernel."""
    from kernel_matrix.releasing.publish import check_tag, check_tag_beside_branch
    from kernel_matrix.releasing.release import release_branch

    check_tag(tag)
    for kernel in resolved.kernels:
        check_tag_beside_branch(tag, release_branch(kernel.config))


def _job_matrices(resolved: Resolved, cells: list[Cell], event: GithubEvent) -> dict[str, str]:
    """The build workflow's job outputs: `jobs`, `gpu_jobs` (an empty string, not an empty
    matrix, which GitHub refuses, when no cell is for the GPU runners: the GPU job's `if`
    skips it), `images` (the builder images to share, likewise empty where every cell is
    Python only) and `wheels`. Says so where cells are batched to fit GitHub's job limit."""
    import json

    from kernel_matrix.planning.github_jobs import batching, builder_image_jobs, builder_images_needed, github_jobs
    from kernel_matrix.planning.matrix import GITHUB_MATRIX_LIMIT, gpu_test_cells

    jobs = resolved.github_jobs(cells)
    if note := batching(len(cells), jobs):
        console.print(f"note: {note}", soft_wrap=True)
    gpu = set(gpu_test_cells(cells, event))
    gpu_jobs = github_jobs(jobs, lambda cell: cell in gpu)
    images = builder_image_jobs(jobs)
    if not images["include"] and (needed := builder_images_needed(cells)) > GITHUB_MATRIX_LIMIT:
        console.print(
            f"note: the cells need {needed} builder images, more than a matrix's {GITHUB_MATRIX_LIMIT} jobs: "
            "none is shared, each build job makes its own",
            soft_wrap=True,
        )
    return {
        "jobs": json.dumps(github_jobs(jobs), separators=(",", ":")),
        "gpu_jobs": json.dumps(gpu_jobs, separators=(",", ":")) if gpu_jobs["include"] else "",
        "images": json.dumps(images, separators=(",", ":")) if images["include"] else "",
        # Whether any job makes a wheel: release-wheels has none to attach otherwise.
        "wheels": "true" if any(cell.variant.makes_wheel for cell in cells) else "false",
    }
