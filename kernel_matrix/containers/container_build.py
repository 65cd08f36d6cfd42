"""Build matrix cells in containers: the builder image of the cell's torch (and
CUDA), the kernel mounted read-only, the network off, and inside it the same
`kernel-matrix build` that builds natively, as the invoking user, into a private
folder; the variant replaces build/<cell> only once it is checked to be that cell.
A cell whose inputs are unchanged is skipped (the variant keeps the provenance
of the build that made it)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from kernel_matrix import PACKAGE_DIR
from kernel_matrix.building.dependencies import container_mounts
from kernel_matrix.building.dependencies import resolve as resolve_dependency
from kernel_matrix.building.native_build import declared_dependencies
from kernel_matrix.building.objcache import MAX_SCOPE_BYTES, ObjectCache
from kernel_matrix.building.provenance import (
    BUILDER_GIT_ENV,
    BUILDER_IMAGE_ENV,
    SOURCE_GIT_ENV,
    builder_git_state,
    git_state,
)
from kernel_matrix.building.variant_dir import replace_dir
from kernel_matrix.checking import abi
from kernel_matrix.config.buildtoml import BuildConfig, load_build_toml
from kernel_matrix.config.github_event import GithubEvent
from kernel_matrix.containers import images
from kernel_matrix.containers.build_request import BuildRequest
from kernel_matrix.containers.container_output import check_tree, copy_regular
from kernel_matrix.containers.engine import Limits, Mount, build_user, connect, container
from kernel_matrix.errors import BuildError, EngineError, ExitCode, KernelMatrixError
from kernel_matrix.layout import BuildDir, is_built
from kernel_matrix.planning.matrix import Cell
from kernel_matrix.planning.resources import CELL_TIMEOUT_S, memory_per_build, plan_parallelism
from kernel_matrix.planning.selection import KernelCells, Resolved
from kernel_matrix.planning.variants import host_arch

# Marks the containers of one `build` run, so an interrupt can kill exactly those.
RUN_LABEL = "kernel-matrix.run"
# Where a build container writes new object-cache entries (its cache scopes are read-only to it).
CACHE_WRITES = "/out/.cache-new"
# Where it finds the cache scopes the host chose for it: /cache/0 its own, /cache/1 ... others it reads.
CONTAINER_CACHE = "/cache"
# Where it finds its BuildRequest (a folder of the host's, read-only).
CONTAINER_REQUEST = "/km-request/request.json"


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


SUMMARY_COLUMNS = ("kernel", "variant", "status", "seconds", ".so size", "objects cached", "image", "result")


def summary_rows(results: list[CellResult]) -> list[tuple[str, ...]]:
    return [
        (
            r.cell.kernel or "-",
            r.cell.name,
            r.status,
            f"{r.seconds:.1f}",
            f"{r.so_bytes / 1e6:.2f} MB" if r.so_bytes else "-",
            r.objects,
            r.image or "-",
            r.message,
        )
        for r in results
    ]


def summary_markdown(results: list[CellResult]) -> str:
    """The results as a Markdown table (for build/summary.md and the GitHub job summary)."""
    rows = ["| " + " | ".join(row) + " |" for row in summary_rows(results)]
    header = "| " + " | ".join(SUMMARY_COLUMNS) + " |"
    return "\n".join([header, "|" + "---|" * len(SUMMARY_COLUMNS), *rows])


def _file_digests(root: Path, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Each file's content hash; a link's target text (never what it points at:
    it may be a device or a host file, and the build refuses links out anyway)."""

    def digest(p: Path) -> str:
        data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
        return hashlib.sha256(data).hexdigest()

    return [
        (p.relative_to(root).as_posix(), digest(p))
        for p in sorted(root.rglob("*"))
        if (p.is_symlink() or p.is_file()) and "__pycache__" not in p.parts and p.relative_to(root).parts[0] not in skip
    ]


def input_hash(cell: Cell, image_id: str, kernel_dir: Path, dependencies: set[str]) -> str:
    """Everything a cell's variant is made from: the cell, the builder image, the
    kernel's sources, the headers of its `dependencies` (its build.toml's, beyond
    torch: a pin's digest, fetched here first, or an override's files) and
    kernel-matrix itself (not its tests or benchmarks)."""
    parts = [
        cell.to_json(),
        image_id,
        _file_digests(kernel_dir, skip=("tests", "benchmarks", ".git", "build")),
        _file_digests(PACKAGE_DIR),
        *(
            [name, resolve_dependency(name, str(kernel_dir / "build.toml")).fingerprint()]
            for name in sorted(dependencies)
        ),
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def builder_for(
    client: docker.DockerClient,
    cell: Cell,
    image_kind: str,
    pip: images.PipSetup,
    log: Callable[[str], None] = print,
) -> str:
    """The cell's builder image, made (once) if it is missing."""
    if image_kind == "official":
        variant = cell.variant
        return images.official_builder(
            client, cell.image, torch=variant.torch, cuda=variant.cuda, torch_index=cell.torch_index, log=log
        )
    base = images.offline_base(client, log=log)
    return images.builder_image(
        client, base, torch=cell.variant.torch, cuda=cell.variant.cuda, torch_index=cell.torch_index, pip=pip, log=log
    )


def shell_command(
    cell: Cell, image: str, kernel_dir: Path, command: list[str], *, interactive: bool, writable: bool = False
) -> list[str]:
    """`docker run` of a shell (or command) in the cell's builder image: the counterpart of
    kernel-builder's dev shell, hardened like a build (no network, no capabilities, a
    read-only root with a tmpfs /tmp, process and memory caps). The kernel is mounted
    read-only at /src, as the build's user; writable: read-write, for a developer's own
    code, as the caller (so files stay theirs; `shell` strips set-id bits afterwards)."""
    user = (os.getuid(), os.getgid()) if writable else build_user()
    limits = Limits(memory=memory_per_build(1))
    env = {
        "PYTHONPATH": "/opt/kernel-matrix",
        "HOME": "/tmp",
        # The builder's python (kernel-matrix's needs) and, for CUDA cells, nvcc come first.
        "PATH": f"{images.VENV}/bin:{images.CUDA_HOME}/bin:/usr/local/bin:/usr/bin:/bin",
        **({"CUDA_HOME": images.CUDA_HOME} if cell.variant.cuda else {}),
    }
    return [
        "docker",
        "run",
        "--rm",
        *(["-it"] if interactive else []),
        "--network",
        "none",
        "--user",
        f"{user[0]}:{user[1]}",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--read-only",
        *("--tmpfs", f"{limits.scratch}:{limits.tmpfs_options}"),
        *("--pids-limit", str(limits.pids)),
        *(("--memory", str(limits.memory), "--memory-swap", str(limits.memory)) if limits.memory else ()),
        "--mount",
        f"type=bind,source={kernel_dir.resolve()},target=/src" + ("" if writable else ",readonly"),
        "--mount",
        f"type=bind,source={PACKAGE_DIR},target=/opt/kernel-matrix/kernel_matrix,readonly",
        *(arg for key, value in env.items() for arg in ("--env", f"{key}={value}")),
        "--workdir",
        "/src",
        image,
        *(command or ["bash"]),
    ]


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
) -> list[CellResult]:
    """Every cell, up to `jobs` at once; a failing cell never stops the others.

    Builder images are made first, one at a time (cells share them). Then the
    cells build in parallel, each with its share of the cores; on Ctrl-C or
    SIGTERM every running build container is killed before the interrupt goes on.
    cache_dir: the object cache's root (None: no cache); the cells read and fill the
    kernel's scope at their trust level (`trusted`: not a pull request's build), which
    the host alone picks (ObjectCache.for_kernel)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    config = config or load_build_toml(kernel_dir)
    cache = None
    if cache_dir is not None:
        cache = ObjectCache.for_kernel(cache_dir, config.general.name, trusted=trusted)
    pip = images.PipSetup.from_host()
    started = {cell.name: time.monotonic() for cell in cells}
    results: dict[str, CellResult] = {}

    def failed(cell: Cell, exc: Exception, image: str | None) -> CellResult:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        seconds = time.monotonic() - started[cell.name]
        return CellResult(cell, "FAILED", seconds, image, message, exit_code=exit_code_of(exc))

    todo: list[tuple[Cell, str, str]] = []
    dependencies: set[str] | None = None  # the kernel's (from config, the build.toml already read), once
    for cell in cells:
        image = None
        try:
            image = builder_for(client, cell, image_kind, pip, log)
            image_id = client.images.get(image).id
            assert image_id is not None  # the engine's images all have one
            if dependencies is None:
                dependencies = set(declared_dependencies(config))
            inputs = input_hash(cell, image_id, kernel_dir.resolve(), dependencies)
            record = BuildDir(build_dir).inputs_record(cell.name)
            built = is_built(build_dir / cell.name)
            if built and record.is_file() and record.read_text() == inputs:
                seconds = time.monotonic() - started[cell.name]
                results[cell.name] = CellResult(
                    cell, "up to date", seconds, image, "nothing changed", _so_bytes(build_dir / cell.name)
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
            )
        except Exception as exc:  # noqa: BLE001 - whatever goes wrong, only this cell fails
            on_status(cell, "FAILED")
            if not isinstance(exc, (KernelMatrixError, docker.errors.DockerException)):
                _log_unexpected(build_dir, cell, exc)
            return failed(cell, exc, image)
        record = BuildDir(build_dir).inputs_record(cell.name)
        record.parent.mkdir(exist_ok=True)
        record.write_text(inputs)
        on_status(cell, "built")
        total = stats.get("compiled", 0) + stats.get("cached", 0)
        objects = f"{stats.get('cached', 0)} of {total}" if total else "-"
        seconds = time.monotonic() - started[cell.name]
        return CellResult(cell, "built", seconds, image, str(variant_dir), _so_bytes(variant_dir), objects)

    pool = ThreadPoolExecutor(max_workers=parallel.builds, thread_name_prefix="cell")
    try:
        futures = {pool.submit(build_one, *item): item[0] for item in todo}
        for future in as_completed(futures):
            results[futures[future].name] = future.result()
    except BaseException:
        # Interrupted: nothing new starts, and the running builds' containers are
        # killed, so their threads return (and remove them) at once.
        pool.shutdown(wait=False, cancel_futures=True)
        for box in client.containers.list(filters={"label": f"{RUN_LABEL}={run_label}"}):
            with contextlib.suppress(docker.errors.DockerException):  # it may have ended meanwhile
                box.kill()
        raise
    finally:
        pool.shutdown(wait=True)
    if cache is not None:
        with contextlib.suppress(OSError):  # an unprunable cache costs disk, never the build
            cache.prune(MAX_SCOPE_BYTES)
    return [results[cell.name] for cell in cells]


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
    progress: Callable[[list[str]], contextlib.AbstractContextManager[Callable[[Cell, str], None]]],
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
            )
    return results


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
    progress: Callable[[list[str]], contextlib.AbstractContextManager[Callable[[Cell, str], None]]],
) -> list[CellResult]:
    """`build --profile/--only/--variant`: the selected cells of every kernel, with
    `capabilities` (--cuda-capabilities) replacing CUDA cells' own; the results' table
    goes to <build-dir>/summary.md and the GitHub job summary."""
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
    results = run_builds(
        connect() if needs_engine else None,
        work,
        image_kind=image_kind,
        jobs=jobs,
        cache_dir=cache_dir,
        trusted=GithubEvent.from_environment().trusted,
        timeout=timeout,
        log=log,
        progress=progress,
    )
    summary = summary_markdown(results)
    build_dir.summary.write_text(summary + "\n")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as f:
            f.write(summary + "\n")
    return results


def _build_noarch_cells(item: KernelCells) -> list[CellResult]:
    from kernel_matrix.building.native_build import build_noarch

    started = time.monotonic()
    try:
        backends = [c.variant.backend for c in item.cells]
        made = build_noarch(item.kernel.dir, item.build_dir.path, backends=backends, config=item.kernel.config)
    except KernelMatrixError as exc:
        seconds, code = time.monotonic() - started, exc.exit_code
        return [CellResult(c, "FAILED", seconds, None, str(exc).splitlines()[0], exit_code=code) for c in item.cells]
    seconds = time.monotonic() - started
    return [CellResult(c, "built", seconds, None, str(path)) for c, path in zip(item.cells, made, strict=True)]


def _log_unexpected(build_dir: Path, cell: Cell, exc: Exception) -> None:
    """A failure kernel-matrix did not foresee: its traceback goes to the cell's log, not the screen."""
    import traceback

    log = BuildDir(build_dir).log(cell.name, "container.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write("".join(traceback.format_exception(exc)))


def _so_bytes(variant_dir: Path) -> int | None:
    return sum(p.stat().st_size for p in variant_dir.glob("*.so")) or None


def build_cell(
    client: docker.DockerClient,
    cell: Cell,
    image: str,
    *,
    kernel_dir: Path,
    build_dir: Path,
    jobs: int | None,
    cache: ObjectCache | None = None,
    run_label: str = "",
    limits: Limits | None = None,
    dependencies: Collection[str] = (),
    timeout: float | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Build one cell; its variant replaces build_dir/<cell> only if the build made
    exactly that variant and it passes the ABI check. Returns the variant's folder
    and the build's statistics (objects compiled and cached). cache: the scopes the
    build reads (mounted read-only); its new entries are merged into cache.root
    once the variant has passed its checks."""
    if cell.variant.arch != host_arch():
        raise EngineError(f"{cell.name}: an {cell.variant.arch} cell cannot be built on this {host_arch()} host")
    kernel_dir, build_dir = kernel_dir.resolve(), build_dir.resolve()
    user = build_user()
    source = git_state(kernel_dir)
    env = {"PYTHONPATH": "/opt/kernel-matrix", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    if source is not None:
        env[SOURCE_GIT_ENV] = f"{source.commit}:{int(source.dirty)}"  # the container has no git
    # What a rebuild needs (metadata.json's provenance): the builder image and kernel-matrix's own commit.
    env[BUILDER_IMAGE_ENV] = client.images.get(image).id or image
    if (builder := builder_git_state()) is not None:
        env[BUILDER_GIT_ENV] = f"{builder.commit}:{int(builder.dirty)}"
    if cell.variant.cuda:
        env["CUDA_HOME"] = images.CUDA_HOME
    where = BuildDir(build_dir)
    where.logs.mkdir(parents=True, exist_ok=True)
    # The container writes into a folder of its own: what it made is checked
    # before it may replace anything in build_dir.
    with (
        tempfile.TemporaryDirectory(prefix=f".{cell.name}.container-", dir=build_dir) as private,
        tempfile.TemporaryDirectory(prefix=f".{cell.name}.request-", dir=build_dir) as request_dir,
    ):
        Path(private).chmod(0o755)
        Path(request_dir).chmod(0o755)
        os.chown(private, *user)
        request = BuildRequest(
            kernel_dir="/src",
            out_dir="/out",
            variant=cell.name,
            backend=cell.variant.backend,
            capabilities=cell.capabilities,
            jobs=jobs,
            cache_reads=tuple(f"{CONTAINER_CACHE}/{i}" for i in range(len(cache.reads))) if cache else (),
            cache_writes=CACHE_WRITES if cache else None,
        )
        request.write(Path(request_dir) / Path(CONTAINER_REQUEST).name)
        mounts = [
            Mount(kernel_dir, "/src"),
            Mount(PACKAGE_DIR, "/opt/kernel-matrix/kernel_matrix"),
            Mount(Path(private), "/out", read_only=False),
            Mount(Path(request_dir), str(Path(CONTAINER_REQUEST).parent)),
        ]
        # The declared dependencies' folders only, read-only (fetched on the host: no network inside).
        dependency_mounts, dependency_env = container_mounts(dependencies, str(kernel_dir / "build.toml"))
        mounts += [Mount(host, inside) for host, inside in dependency_mounts]
        env.update(dependency_env)
        for i, scope in enumerate(cache.reads if cache else ()):
            # Only this kernel's scopes, read-only: new entries go to /out/.cache-new, merged below once checked.
            scope.mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(scope.resolve(), f"{CONTAINER_CACHE}/{i}"))
        argv = [f"{images.VENV}/bin/python", "-m", "kernel_matrix.cli.worker", CONTAINER_REQUEST]
        labels = {RUN_LABEL: run_label} if run_label else {}
        with container(
            client,
            image,
            mounts=mounts,
            network="none",
            user=f"{user[0]}:{user[1]}",
            env=env,
            labels=labels,
            limits=limits,
        ) as box:
            result = box.run(argv, timeout=timeout)
        log_path = where.log(cell.name, "container.log")
        log_path.write_text(f"$ {' '.join(argv)}\n{result.output.replace('/out/', f'{build_dir}/')}")
        # The container is gone: check what it left before reading any of it.
        check_tree(Path(private), owner=(os.getuid(), os.getgid()))
        # This cell's compile logs and build statistics: never another cell's files.
        for inner_log in BuildDir(Path(private)).logs.glob(f"{cell.name}.*"):
            if inner_log.is_file():
                copy_regular(inner_log, where.logs / inner_log.name)
        stats_file = where.log(cell.name, "build.json")
        try:
            stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
        except ValueError:
            stats = {}
        stats = stats if isinstance(stats, dict) else {}
        if result.timed_out:
            raise BuildError(
                f"{cell.name}: stopped after {timeout:.0f} s (--cell-timeout), its container killed (see {log_path})"
            )
        if result.exit_code != 0:
            last = next((ln for ln in reversed(result.output.splitlines()) if ln.strip()), "no output")
            last = last.replace("/out/", f"{build_dir}/")
            raise BuildError(f"{cell.name}: the build in {image} failed (exit {result.exit_code}): {last.strip()}")
        made = sorted(p.name for p in Path(private).iterdir() if is_built(p))
        if made != [cell.name]:
            raise BuildError(f"{cell.name}: the build in {image} made {made or 'nothing'} (see {log_path})")
        abi_gate(Path(private) / cell.name, cell.name)
        final = build_dir / cell.name
        replace_dir(Path(private) / cell.name, final)
        if cache is not None:
            with contextlib.suppress(OSError):  # a full or read-only cache only costs a later compile
                cache.merge(Path(private) / CACHE_WRITES.removeprefix("/out/"))
    return final, stats


def abi_gate(variant_dir: Path, name: str) -> None:
    """kernel-abi-check (abi3 3.9, manylinux_2_28) on every .so: a failure fails the cell."""
    abi.gate(variant_dir, name)
