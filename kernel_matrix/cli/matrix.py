"""`kernel-matrix matrix`: the cells, as a table or as GitHub Actions' matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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

    from kernel_matrix.config.github_event import GithubEvent, write_github_output
    from kernel_matrix.planning.matrix import check_runners, check_sources, gpu_test_cells

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
    source = "kernel-matrix's default matrix (no build_matrix.yaml here)" if selection.uses_default else str(file)
    count = f"{len(cells)} cell{'s' if len(cells) != 1 else ''}"
    stdout.print(render.cells_table(f"{source}: {count} (profile {profile})", cells))
