"""`kernel-matrix build --profile/--only/--variant`: the runner of the selected cells of
every kernel, each kernel in turn. A compiled kernel's cells are built in their builder
containers (containers/pool.py; one cell: containers/cell.py, whose worker runs native.py in
the container and writes the cell's exit code beside its logs); a Python-only kernel's
variants need no compiler, so they are made here, natively. Each cell's outcome is a
CellResult (its variant folder or its one line, its seconds, its exit code), returned for
the CLI to show, to write as build/summary.md and to fold into one exit code."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import docker

from kernel_matrix.building.native_build import build_noarch
from kernel_matrix.building.source_checks import check_kernel_sources
from kernel_matrix.config.github_event import GithubEvent
from kernel_matrix.containers.engine import connect
from kernel_matrix.containers.pool import CellResult, Published, build_cells
from kernel_matrix.errors import KernelMatrixError
from kernel_matrix.layout import BuildDir
from kernel_matrix.planning.matrix import Cell
from kernel_matrix.planning.resources import CELL_TIMEOUT_S
from kernel_matrix.planning.selection import Kernel, KernelCells, Resolved

# How the caller shows progress: given the cells' names, a context whose value is told each cell's status.
Progress = Callable[[list[str]], contextlib.AbstractContextManager[Callable[[Cell, str], None]]]


def build_selection(
    resolved: Resolved,
    build_dir: BuildDir,
    *,
    image_kind: str,
    jobs: int | None,
    cache_dir: Path | None,
    capabilities: list[str] | None,
    timeout: float = CELL_TIMEOUT_S,
    log: Callable[[str], None],
    progress: Progress,
    published: Callable[[Kernel], Published] | None = None,
) -> list[CellResult]:
    """The selected cells of every kernel, with `capabilities` (--cuda-capabilities)
    replacing CUDA cells' own; the engine is connected only where a kernel compiles.
    published: each kernel's lookup of its cells' published variants (pool.build_cells)."""
    work = resolved.work(build_dir.root)
    if capabilities:
        work = [
            dataclasses.replace(
                item,
                cells=[
                    dataclasses.replace(c, capabilities=tuple(capabilities)) if c.variant.cuda else c
                    for c in item.cells
                ],
            )
            for item in work
        ]
    needs_engine = any(not item.kernel.config.noarch for item in work)
    return run_builds(
        connect() if needs_engine else None,
        work,
        image_kind=image_kind,
        jobs=jobs,
        cache_dir=cache_dir,
        trusted=GithubEvent.from_environment().trusted,
        timeout=timeout,
        log=log,
        progress=progress,
        published=published,
    )


def run_builds(
    client: docker.DockerClient | None,
    work: list[KernelCells],
    *,
    image_kind: str,
    jobs: int | None,
    cache_dir: Path | None,
    trusted: bool = True,
    timeout: float = CELL_TIMEOUT_S,
    log: Callable[[str], None] = print,
    progress: Progress,
    published: Callable[[Kernel], Published] | None = None,
) -> list[CellResult]:
    """Each kernel's cells in turn (its cells in parallel); a failing cell or kernel never
    stops the others. A Python-only kernel's torch-<backend> variants need no compiler, so
    no container: they are made here. client: None only where every kernel is Python-only."""
    results: list[CellResult] = []
    for item in work:
        item.build_dir.path.mkdir(parents=True, exist_ok=True)
        if item.kernel.config.noarch:
            results += _build_noarch_cells(item)
            continue
        try:  # once here, not in each cell's container after its image is made
            check_kernel_sources(item.kernel.dir, item.kernel.config)
        except KernelMatrixError as exc:
            results += [_refused(c, exc, 0.0) for c in item.cells]
            continue
        assert client is not None  # the caller connects when a kernel compiles
        with progress([c.name for c in item.cells]) as on_status:
            results += build_cells(
                client,
                item.cells,
                kernel_dir=item.kernel.dir,
                build_dir=item.build_dir.path,
                image_kind=image_kind,
                jobs=jobs,
                cache_dir=cache_dir,
                trusted=trusted,
                timeout=timeout,
                config=item.kernel.config,
                log=log,
                on_status=on_status,
                published=published(item.kernel) if published else None,
            )
    return results


def _build_noarch_cells(item: KernelCells) -> list[CellResult]:
    started = time.monotonic()
    try:
        backends = [c.variant.backend for c in item.cells]
        check_kernel_sources(item.kernel.dir, item.kernel.config)
        made = build_noarch(item.kernel.dir, item.build_dir.path, backends=backends, config=item.kernel.config)
    except KernelMatrixError as exc:
        return [_refused(c, exc, time.monotonic() - started) for c in item.cells]
    seconds = time.monotonic() - started
    return [CellResult(c, "built", seconds, None, str(path)) for c, path in zip(item.cells, made, strict=True)]


def _refused(cell: Cell, exc: KernelMatrixError, seconds: float) -> CellResult:
    return CellResult(cell, "FAILED", seconds, None, str(exc).splitlines()[0], exit_code=exc.exit_code)
