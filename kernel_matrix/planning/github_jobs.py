"""Cells -> the jobs of the build workflow's GitHub Actions matrices.

GitHub runs at most 256 jobs of one matrix. A repository of many kernels has more cells
than that (kernels-community after `init`: 46 kernels, 593 cells in the full profile),
so each job builds and tests a batch: cells of one kernel that share a runner, as few
per job as let every batch fit (one each, up to 256 cells). A batch never mixes kernels
(its build folder, object cache and artifact are the kernel's) or runners (a job has one),
and a failed cell of a batch fails its job without keeping the batch's others from being
uploaded and tested (the workflow's steps, `kernel-matrix build --variant A,B`,
`kernel-matrix test-variant A,B`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import ceil
from typing import Any

from kernel_matrix.errors import ConfigError
from kernel_matrix.layout import DEFAULT_BUILD_DIR
from kernel_matrix.planning.matrix import GITHUB_MATRIX_LIMIT, Cell

# A job's time limit (timeout-minutes) for each of its cells, up to GitHub's limit for a job
# on its hosted runners (6 hours): a batch of three cells gets three cells' time, as its
# builds may run one after another.
BUILD_MINUTES_A_CELL = 90
TEST_MINUTES_A_CELL = 60
GITHUB_JOB_MINUTES = 360


@dataclass(frozen=True)
class Job:
    """One job of the build and test matrices: a batch of one kernel's cells."""

    kernel: str
    cells: tuple[Cell, ...]
    paths: tuple[str, ...]  # each cell's variant folder under the jobs' build folder (DEFAULT_BUILD_DIR)
    logs: str  # the kernel's build-log folder under it

    @property
    def name(self) -> str:
        """Unique among a plan's jobs (a kernel's batches hold different first cells): the
        artifacts' and the object cache's name."""
        first = self.cells[0].name
        more = f"+{len(self.cells) - 1}" if len(self.cells) > 1 else ""
        return f"{self.kernel}-{first}{more}"

    def to_json(self, cells: Sequence[Cell] | None = None) -> dict[str, Any]:
        """The matrix entry; cells: those of the batch this job tests (the GPU jobs'),
        by default all of them. Only what a job's steps and runner need: each cell's
        details are `kernel-matrix matrix --json --variant NAME`'s."""
        first = self.cells[0]
        tested = self.cells if cells is None else cells
        return {
            "kernel": self.kernel,
            "variants": ",".join(c.name for c in tested),  # what --variant and test-variant take
            "job": self.name,
            "arch": first.variant.arch,
            "build_runner": list(first.build_runner),
            "test_runner": list(first.test_runner),
            "noarch": first.variant.noarch,
            "wheel": first.variant.makes_wheel,  # the build job's `kernel-matrix wheels` step
            "cpu_test": first.cpu_testable,
            # upload-artifact's `path` input: one path a line.
            "paths": "\n".join(f"{DEFAULT_BUILD_DIR.as_posix()}/{path}/" for path in self.paths),
            "logs": self.logs,
            # timeout-minutes (GitHub's expressions have no arithmetic: computed here).
            "build_minutes": min(BUILD_MINUTES_A_CELL * len(self.cells), GITHUB_JOB_MINUTES),
            "test_minutes": min(TEST_MINUTES_A_CELL * len(tested), GITHUB_JOB_MINUTES),
        }


def _batch_key(cell: Cell) -> tuple[object, ...]:
    """What every cell of one job shares: its kernel, runners, and how its steps treat it."""
    v = cell.variant
    return (cell.kernel, v.arch, cell.build_runner, cell.test_runner, v.noarch, cell.cpu_testable)


def plan_jobs(
    cells: Sequence[Cell],
    kernel_of: Callable[[Cell], str],
    path_of: Callable[[Cell], tuple[str, str]],
    where: str,
    limit: int = GITHUB_MATRIX_LIMIT,
) -> list[Job]:
    """The cells as at most `limit` jobs, in the cells' order: the smallest batch size that
    fits, each group of cells that may share a job split into batches of near-equal size.
    path_of: a cell's (variant folder, log folder) under build/. Refused, with the counts,
    only where the groups alone outnumber the limit (more kernels x archs than jobs)."""
    groups: dict[tuple[object, ...], list[Cell]] = {}
    for cell in cells:
        groups.setdefault(_batch_key(cell), []).append(cell)
    if len(groups) > limit:
        raise ConfigError(
            f"{where}: the selection's {len(cells)} cells need at least {len(groups)} jobs (one per kernel and "
            f"runner), and a GitHub Actions matrix takes at most {limit}: narrow it with --profile, --only or --kernel"
        )
    size = 1
    while sum(ceil(len(group) / size) for group in groups.values()) > limit:
        size += 1
    batches = []
    for group in groups.values():
        count = ceil(len(group) / size)
        for index in range(count):  # near-equal batches: sizes differ by one at most
            batches.append(group[len(group) * index // count : len(group) * (index + 1) // count])
    order = {id(cell): index for index, cell in enumerate(cells)}
    batches.sort(key=lambda batch: order[id(batch[0])])  # the cells' order: a job a cell keeps it
    jobs = []
    for batch in batches:
        paths = [path_of(cell) for cell in batch]
        jobs.append(Job(kernel_of(batch[0]), tuple(batch), tuple(p for p, _ in paths), paths[0][1]))
    return jobs


def builder_image_jobs(jobs: Sequence[Job], limit: int = GITHUB_MATRIX_LIMIT) -> dict[str, Any]:
    """The images job's matrix: an entry per builder image the compiled cells need (the
    cells of one arch, torch, CUDA, torch index and base image share one), naming the
    first cell that needs it, so that `builder-images --variant` makes exactly that image,
    on that cell's build runner. Python-only cells need none. More images than a matrix
    takes: none shared (each build job makes its own, as without the images job)."""
    entries: dict[tuple[object, ...], dict[str, Any]] = {}
    for job in jobs:
        for cell in job.cells:
            if not cell.variant.noarch:
                entries.setdefault(
                    _builder_key(cell),
                    {
                        "kernel": job.kernel,
                        "variant": cell.name,
                        "arch": cell.variant.arch,
                        "build_runner": list(cell.build_runner),
                    },
                )
    return {"include": list(entries.values()) if len(entries) <= limit else []}


def builder_images_needed(cells: Sequence[Cell]) -> int:
    """How many builder images the compiled cells need."""
    return len({_builder_key(cell) for cell in cells if not cell.variant.noarch})


def _builder_key(cell: Cell) -> tuple[object, ...]:
    """What decides a cell's builder image (containers/images.py's recipe, as the plan knows it)."""
    v = cell.variant
    return (v.arch, v.torch, v.cuda, cell.torch_index, cell.image)


def batching(cell_count: int, jobs: Sequence[Job]) -> str | None:
    """How the cells were batched to fit GitHub's job limit, or None for a job a cell."""
    if len(jobs) == cell_count:
        return None
    most = max(len(job.cells) for job in jobs)
    return (
        f"{cell_count} cells run as {len(jobs)} jobs of up to {most} cells of one kernel each "
        f"(a GitHub Actions matrix runs at most {GITHUB_MATRIX_LIMIT} jobs)"
    )


def github_jobs(jobs: Sequence[Job], tested: Callable[[Cell], bool] | None = None) -> dict[str, Any]:
    """The matrix of these jobs; tested: keep each job's cells it holds true for, and the
    jobs left with one (the GPU test jobs: their artifact is still the whole batch's)."""
    entries = []
    for job in jobs:
        cells = [c for c in job.cells if tested is None or tested(c)]
        if cells:
            entries.append(job.to_json(cells))
    return {"include": entries}
