"""How much to run at once, from the machine's cores and memory.

A compile against torch's headers peaks near 1.5 GiB; a machine with many
cores and little memory must not start more of them than fit. MAX_JOBS (the
variable torch's extension builder and flash-attention's CI read) caps the
total when set."""

from __future__ import annotations

import os
from dataclasses import dataclass

GIB = 1 << 30
MEMORY_PER_COMPILE = int(1.5 * GIB)
# A cell's build is stopped after this long (`build --cell-timeout`): layer-norm's 56 .cu
# files took 2731 s on 2 cores; GitHub ends a job at 6 hours.
CELL_TIMEOUT_S = 4 * 3600


@dataclass(frozen=True)
class Parallelism:
    builds: int  # variants built at the same time (containers)
    compiles: int  # compile processes within one build

    def nvcc_threads(self, compile_steps: int) -> int:
        """nvcc --threads (a file's CUDA architectures in parallel) for a build of
        compile_steps compiles: the slots its compiles leave idle, never more."""
        return max(1, self.compiles // max(1, compile_steps))


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may use (CI cgroups, taskset)
    except AttributeError:
        return os.cpu_count() or 1


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def plan_parallelism(
    builds: int | None = None,
    *,
    at_most: int | None = None,
    n_cores: int | None = None,
    memory: int | None = None,
    max_jobs: str | None = None,
) -> Parallelism:
    """builds: how many variants to build at once (None: one per two compile slots),
    never more than at_most (the number there are). The compile slots are shared
    out between them."""
    n_cores = n_cores or cores()
    memory = memory if memory is not None else available_memory()
    max_jobs = max_jobs if max_jobs is not None else os.environ.get("MAX_JOBS")
    slots = n_cores
    if memory is not None:
        slots = min(slots, max(1, memory // MEMORY_PER_COMPILE))
    if max_jobs and max_jobs.isdigit() and int(max_jobs) > 0:
        slots = min(slots, int(max_jobs))
    builds = builds if builds else slots // 2
    builds = max(1, min(builds, at_most) if at_most else builds)
    per_build = max(1, slots // builds)
    return Parallelism(builds=builds, compiles=per_build)


def memory_per_build(builds: int, *, memory: int | None = None) -> int | None:
    """The memory limit of one of `builds` build containers running at once: its
    share of what is available, never below two compiles' worth (None: unknown)."""
    memory = memory if memory is not None else available_memory()
    if memory is None:
        return None
    return max(2 * MEMORY_PER_COMPILE, memory // max(1, builds))
