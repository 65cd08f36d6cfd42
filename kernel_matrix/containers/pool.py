"""One kernel's cells built at once in their containers: builder images made first,
one at a time (cells share them), up-to-date cells skipped (their inputs hash is the
one recorded), the rest in a thread pool sharing the cores; a failing cell never
stops the others, and an interrupt kills exactly this run's build containers."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import docker

from kernel_matrix.building.compile import caller_source_date_epoch
from kernel_matrix.building.native_build import declared_dependencies
from kernel_matrix.building.objcache import MAX_SCOPE_BYTES, ObjectCache
from kernel_matrix.building.recipe import recipe_digest
from kernel_matrix.config.buildtoml import BuildConfig, load_build_toml
from kernel_matrix.containers import images
from kernel_matrix.containers.cell import RUN_LABEL, build_cell
from kernel_matrix.containers.engine import Limits
from kernel_matrix.containers.inputs import input_hash
from kernel_matrix.errors import ExitCode, KernelMatrixError
from kernel_matrix.hostfiles import append_log, check_build_dir, write_file
from kernel_matrix.layout import BuildDir, is_built
from kernel_matrix.planning.matrix import Cell
from kernel_matrix.planning.resources import CELL_TIMEOUT_S, memory_per_build, plan_parallelism

# A kernel's lookup of a cell's published variant: (cell name, a scratch folder) in, the
# variant fetched there and verified with where it was published, or why there is none.
Published = Callable[[str, Path], "tuple[Path, str] | str"]


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    status: str  # "built", "up to date" or "FAILED"
    seconds: float
    image: str | None
    message: str  # the error line, or the variant directory
    so_bytes: int | None = None  # the variant's extension, once built
    objects: str = "-"  # "2 of 3 cached": what the object cache saved
    exit_code: ExitCode = ExitCode.OK  # a failure's kind, as the CLI's exit codes tell it

    @property
    def ok(self) -> bool:
        return self.status != "FAILED"


def exit_code_of(exc: BaseException) -> ExitCode:
    """What kind of failure exc is: its own code, ENGINE for the engine's errors, else FAILURE."""
    if isinstance(exc, KernelMatrixError):
        return exc.exit_code
    return ExitCode.ENGINE if isinstance(exc, docker.errors.DockerException) else ExitCode.FAILURE


def build_cells(
    client: docker.DockerClient,
    cells: list[Cell],
    *,
    kernel_dir: Path,
    build_dir: Path,
    image_kind: str,
    jobs: int | None,
    cache_dir: Path | None = None,
    trusted: bool = True,
    timeout: float = CELL_TIMEOUT_S,
    config: BuildConfig | None = None,
    log: Callable[[str], None] = print,
    on_status: Callable[[Cell, str], None] = lambda cell, status: None,
    published: Published | None = None,
) -> list[CellResult]:
    """Every cell, up to `jobs` at once; a failing cell never stops the others.

    Builder images are made first, one at a time (cells share them). Then the
    cells build in parallel, each with its share of the cores; on Ctrl-C or
    SIGTERM every running build container is killed before the interrupt goes on.
    cache_dir: the object cache's root (None: no cache); the cells read and fill the
    kernel's scope at their trust level (`trusted`: not a pull request's build), which
    the host alone picks (ObjectCache.for_kernel). published: given a cell's name and a
    scratch folder, its published variant fetched there and verified, and where it was
    published (releasing/reuse.py), or why there is none: the cell's container takes it
    where it was built from the inputs that build computes."""
    # Before anything runs: a build folder holding a link, FIFO or device is refused (hostfiles).
    check_build_dir(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    where = BuildDir(build_dir)
    config = config or load_build_toml(kernel_dir)
    cache = None
    if cache_dir is not None:
        recipe = recipe_digest(kernel_dir)  # the host's, from the files: never what a build wrote
        cache = ObjectCache.for_kernel(cache_dir, config.general.name, trusted=trusted, recipe=recipe)
    pip = images.PipSetup.from_host()
    started = {cell.name: time.monotonic() for cell in cells}
    results: dict[str, CellResult] = {}

    def failed(cell: Cell, exc: Exception, image: str | None) -> CellResult:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        seconds = time.monotonic() - started[cell.name]
        return CellResult(cell, "FAILED", seconds, image, message, exit_code=exit_code_of(exc))

    todo: list[tuple[Cell, str, str]] = []
    dependencies: set[str] | None = None  # the kernel's (from config, the build.toml already read), once
    # The caller's, read once: the inputs hash and the containers get the same value.
    source_date_epoch = caller_source_date_epoch()
    for cell in cells:
        image = None
        try:
            image = images.builder_for(client, cell, image_kind, pip, log)
            image_id = client.images.get(image).id
            assert image_id is not None  # the engine's images all have one
            if dependencies is None:
                dependencies = set(declared_dependencies(config))
            inputs = input_hash(cell, image_id, kernel_dir.resolve(), dependencies, source_date_epoch)
            record, variant_dir = where.inputs_record(cell.name), where.variant(cell.name)
            if is_built(variant_dir) and record.is_file() and record.read_text() == inputs:
                seconds = time.monotonic() - started[cell.name]
                results[cell.name] = CellResult(
                    cell, "up to date", seconds, image, "nothing changed", _so_bytes(variant_dir)
                )
                on_status(cell, "up to date")
                continue
            todo.append((cell, image, inputs))
            on_status(cell, "queued")
        except (KernelMatrixError, docker.errors.DockerException) as exc:
            results[cell.name] = failed(cell, exc, image)
            on_status(cell, "FAILED")

    run_label = f"{os.getpid()}-{time.monotonic_ns()}"
    # The cores are shared among the cells that do build, not the skipped ones.
    parallel = plan_parallelism(jobs, at_most=max(1, len(todo)))
    limits = Limits(memory=memory_per_build(parallel.builds))

    def build_one(cell: Cell, image: str, inputs: str) -> CellResult:
        started[cell.name] = time.monotonic()  # the build's time, not the queue's
        on_status(cell, "building")
        try:
            with tempfile.TemporaryDirectory(prefix=f".{cell.name}.published-", dir=build_dir) as fetched:
                candidate = None
                if published is not None:
                    found = published(cell.name, Path(fetched))
                    if isinstance(found, str):
                        log(f"{cell.name}: built: {found}")
                    else:
                        candidate = found
                variant_dir, stats = build_cell(
                    client,
                    cell,
                    image,
                    kernel_dir=kernel_dir,
                    build_dir=build_dir,
                    jobs=parallel.compiles,
                    cache=cache,
                    run_label=run_label,
                    limits=limits,
                    timeout=timeout,
                    dependencies=dependencies or (),
                    source_date_epoch=source_date_epoch,
                    candidate=candidate,
                )
            if candidate is not None:
                said = (
                    "reused from {}: nothing compiled"
                    if stats.get("reused")
                    else "built: {} holds it from other inputs"
                )
                log(f"{cell.name}: {said.format(candidate[1])}")
            write_file(where.inputs_record(cell.name), inputs)
        except Exception as exc:  # noqa: BLE001 - whatever goes wrong, only this cell fails
            on_status(cell, "FAILED")
            if not isinstance(exc, (KernelMatrixError, docker.errors.DockerException)):
                _log_unexpected(build_dir, cell, exc)
            return failed(cell, exc, image)
        on_status(cell, "reused" if stats.get("reused") else "built")
        total = stats.get("compiled", 0) + stats.get("cached", 0)
        objects = f"{stats.get('cached', 0)} of {total}" if total else "-"
        seconds = time.monotonic() - started[cell.name]
        status = "reused" if stats.get("reused") else "built"
        return CellResult(cell, status, seconds, image, str(variant_dir), _so_bytes(variant_dir), objects)

    pool = ThreadPoolExecutor(max_workers=parallel.builds, thread_name_prefix="cell")
    try:
        futures = {pool.submit(build_one, *item): item[0] for item in todo}
        for future in as_completed(futures):
            results[futures[future].name] = future.result()
    except BaseException:
        # Interrupted: nothing new starts, and the running builds' containers are
        # killed, so their threads return (and remove them) at once. ignore_removed: one
        # its thread removed between the listing and its inspection would otherwise raise
        # NotFound here in place of the interruption.
        pool.shutdown(wait=False, cancel_futures=True)
        for box in client.containers.list(filters={"label": f"{RUN_LABEL}={run_label}"}, ignore_removed=True):
            with contextlib.suppress(docker.errors.DockerException):  # it may have ended meanwhile
                box.kill()
        raise
    finally:
        pool.shutdown(wait=True)
    if cache is not None:
        with contextlib.suppress(OSError):  # an unprunable cache costs disk, never the build
            cache.prune(MAX_SCOPE_BYTES)
    return [results[cell.name] for cell in cells]


def _log_unexpected(build_dir: Path, cell: Cell, exc: Exception) -> None:
    """A failure kernel-matrix did not foresee: its traceback goes to the cell's log, not the screen."""
    with contextlib.suppress(KernelMatrixError):  # a log the build folder refuses: the cell has failed anyway
        append_log(BuildDir(build_dir).log(cell.name, "container.log"), "".join(traceback.format_exception(exc)))


def _so_bytes(variant_dir: Path) -> int | None:
    return sum(p.stat().st_size for p in variant_dir.glob("*.so")) or None
