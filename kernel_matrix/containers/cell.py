"""One cell's build in its builder image: the kernel mounted read-only, the network
off, and inside it the same `kernel-matrix build` that builds natively (fed a
BuildRequest), as the build's unprivileged user, into a private folder. What the
container made is checked (its tree, its name, the ABI gate) before the variant
replaces build/<cell> and the new cache entries are merged."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import docker

from kernel_matrix import PACKAGE_DIR
from kernel_matrix.building.compile import SOURCE_DATE_EPOCH, caller_source_date_epoch
from kernel_matrix.building.dependencies import container_mounts
from kernel_matrix.building.objcache import ObjectCache
from kernel_matrix.building.provenance import (
    BUILDER_GIT_ENV,
    BUILDER_IMAGE_ENV,
    SOURCE_GIT_ENV,
    builder_git_state,
    git_state,
)
from kernel_matrix.building.variant_dir import replace_dir
from kernel_matrix.checking import abi
from kernel_matrix.containers import images
from kernel_matrix.containers.build_request import BuildRequest
from kernel_matrix.containers.container_output import OUTCOME, check_tree, copy_regular, reported_failure
from kernel_matrix.containers.engine import Limits, Mount, build_user, container
from kernel_matrix.errors import BuildError, ConfigError
from kernel_matrix.hostfiles import real_dir, write_file
from kernel_matrix.layout import BuildDir, is_built
from kernel_matrix.planning.matrix import Cell
from kernel_matrix.planning.variants import host_arch, oci_platform

# Marks the containers of one `build` run, so an interrupt can kill exactly those.
RUN_LABEL = "kernel-matrix.run"
# The container's output folder: a private folder of the host's, laid out as a build folder.
CONTAINER_OUT = Path("/out")
# Where it finds the cache scopes the host chose for it: /cache/0 its own, /cache/1 ... others it reads.
CONTAINER_CACHE = "/cache"
# Where it finds its BuildRequest (a folder of the host's, read-only).
CONTAINER_REQUEST = "/km-request/request.json"
# Where it finds a published variant of its cell, verified on the host (read-only).
CONTAINER_CANDIDATE = "/km-candidate"


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
    source_date_epoch: str | None = None,
    candidate: tuple[Path, str] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Build one cell; its variant replaces build_dir/<cell> only if the build made
    exactly that variant and it passes the ABI check. Returns the variant's folder
    and the build's statistics (objects compiled and cached). cache: the scopes the
    build reads (mounted read-only); its new entries are merged into cache.root
    once the variant has passed its checks. candidate: a published variant of the cell
    the host verified and where it was published (releasing/reuse.py), mounted read-only:
    the build takes it where it records the inputs the build computes."""
    if cell.variant.arch != host_arch():
        # Bad input, not a missing tool (kernel-matrix emulates no other CPU, so nothing to
        # install helps): the cell was sent to the wrong runner, or selected on the wrong host.
        arch, host = cell.variant.arch, host_arch()
        raise ConfigError(
            f"{cell.name}: an {arch} cell cannot be built on this {host} host: build it on an {arch} runner "
            f"(build_matrix.yaml's archs.{arch}.build-runner) or select this host's cells (--only arch={host})"
        )
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
    # The moment __DATE__ and __TIME__ expand to: the caller's, as in a native build (the
    # container sees none of the caller's environment), or the one a rebuild must repeat.
    env[SOURCE_DATE_EPOCH] = source_date_epoch or caller_source_date_epoch()
    where = BuildDir(build_dir)
    real_dir(where.logs)
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
            out_dir=str(CONTAINER_OUT),
            variant=cell.name,
            backend=cell.variant.backend,
            capabilities=cell.capabilities,
            jobs=jobs,
            cache_reads=tuple(f"{CONTAINER_CACHE}/{i}" for i in range(len(cache.reads))) if cache else (),
            cache_writes=str(BuildDir(CONTAINER_OUT).cache_writes) if cache else None,
            candidate=CONTAINER_CANDIDATE if candidate else None,
            candidate_from=candidate[1] if candidate else None,
        )
        request.write(Path(request_dir) / Path(CONTAINER_REQUEST).name)
        mounts = [
            Mount(kernel_dir, "/src"),
            Mount(PACKAGE_DIR, "/opt/kernel-matrix/kernel_matrix"),
            Mount(Path(private), str(CONTAINER_OUT), read_only=False),
            Mount(Path(request_dir), str(Path(CONTAINER_REQUEST).parent)),
        ]
        if candidate is not None:
            mounts.append(Mount(candidate[0].resolve(), CONTAINER_CANDIDATE))
        # The declared dependencies' folders only, read-only (fetched on the host: no network inside).
        dependency_mounts, dependency_env = container_mounts(dependencies, str(kernel_dir / "build.toml"))
        mounts += [Mount(host, inside) for host, inside in dependency_mounts]
        env.update(dependency_env)
        for i, scope in enumerate(cache.reads if cache else ()):
            # Only this kernel's scopes, read-only: new entries go to the output folder, merged below once checked.
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
            platform=oci_platform(cell.variant.arch),  # the arch as a value the engine is given, and checks
        ) as box:
            result = box.run(argv, timeout=timeout)
        inside = f"{CONTAINER_OUT}/"  # its paths in messages, shown as the host's
        log_path = where.log(cell.name, "container.log")
        # Renamed over its name: a link or FIFO the build folder holds there is replaced, not opened.
        write_file(log_path, f"$ {' '.join(argv)}\n{result.output.replace(inside, f'{build_dir}/')}")
        # The container is gone: check what it left before reading any of it.
        check_tree(Path(private), owner=(os.getuid(), os.getgid()))
        # This cell's compile logs and build statistics: never another cell's files.
        for inner_log in BuildDir(Path(private)).logs.glob(f"{cell.name}.*"):
            if inner_log.is_file():
                copy_regular(inner_log, where.logs / inner_log.name)
        stats = _build_stats(where.log(cell.name, "build.json"))
        if result.timed_out:
            raise BuildError(
                f"{cell.name}: stopped after {timeout:.0f} s (--cell-timeout), its container killed (see {log_path})"
            )
        if result.exit_code != 0:
            last = next((ln for ln in reversed(result.output.splitlines()) if ln.strip()), "no output")
            last = last.replace(inside, f"{build_dir}/")
            failed = BuildError(f"{cell.name}: the build in {image} failed (exit {result.exit_code}): {last.strip()}")
            # Which failure it was (the ABI check's 7, ...), as the worker's outcome says: read from
            # the private folder, checked above, never from a file an earlier run left in build_dir.
            failed.exit_code = reported_failure(BuildDir(Path(private)).log(cell.name, OUTCOME), result.exit_code)
            raise failed
        made = sorted(p.name for p in Path(private).iterdir() if is_built(p))
        if made != [cell.name]:
            raise BuildError(f"{cell.name}: the build in {image} made {made or 'nothing'} (see {log_path})")
        abi.gate(Path(private) / cell.name, cell.name)
        final = where.variant(cell.name)
        replace_dir(Path(private) / cell.name, final)
        if cache is not None:
            with contextlib.suppress(OSError):  # a full or read-only cache only costs a later compile
                cache.merge(BuildDir(Path(private)).cache_writes)
    return final, stats


def _build_stats(path: Path) -> dict[str, Any]:
    """The build's statistics the container wrote (write_build_stats); {} where it wrote none
    or something else: they only fill the summary's "objects cached" column."""
    try:
        stats = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}
    return stats if isinstance(stats, dict) else {}
