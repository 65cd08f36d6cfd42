"""The container engine, through the docker SDK. The engine is whatever
DOCKER_HOST names (Docker, or podman's Docker-compatible socket).

Containers are context managers that always go away: created, started, used
with `run`, then force-removed on exit, also on errors and interrupts."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
from docker.errors import DockerException, ImageNotFound

from kernel_matrix.errors import EngineError, ToolchainError

if TYPE_CHECKING:
    from docker.models.containers import Container as ContainerHandle

# The installed package has no engine starter (kernel-matrix's own repository has
# scripts/docker-engine for its tests): start the system's Docker, or point DOCKER_HOST at one.
START_HINT = (
    "start Docker (`sudo systemctl start docker`, or Docker Desktop) or point DOCKER_HOST at a running engine; "
    'in a checkout of kernel-matrix, `eval "$(scripts/docker-engine start)"` starts one'
)
# Who builds in a container when the caller is root: nobody, so that a build
# (which runs whatever its kernel's flags say) has no root in the container either.
UNPRIVILEGED = (65534, 65534)
# Enough processes for parallel compiles (each nvcc runs a dozen), not a fork bomb.
PIDS_LIMIT = 4096


def build_user() -> tuple[int, int]:
    """The uid:gid a build container runs as: the caller's, unless that is root."""
    uid, gid = os.getuid(), os.getgid()
    return UNPRIVILEGED if uid == 0 else (uid, gid)


# Builds need no privileges: none are granted, and none can be gained. Every container
# kernel-matrix starts has these, through the SDK (container()) or `docker run` (run_options).
NO_PRIVILEGES: dict[str, Any] = {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges"]}

# The SDK's create() arguments this module uses, as `docker run` options.
_RUN_FLAGS = {
    "cap_drop": "--cap-drop",
    "security_opt": "--security-opt",
    "pids_limit": "--pids-limit",
    "mem_limit": "--memory",
    "memswap_limit": "--memory-swap",
}


def run_options(limits: Limits) -> list[str]:
    """`docker run` options for a container as container() makes one with these limits: the same
    settings, written once (NO_PRIVILEGES, Limits.create_args), in the CLI's spelling."""
    options: list[str] = []
    for key, value in {**NO_PRIVILEGES, **limits.create_args()}.items():
        if key == "read_only":
            options += ["--read-only"] if value else []
        elif key == "tmpfs":
            options += [arg for path, mount in value.items() for arg in ("--tmpfs", f"{path}:{mount}")]
        else:
            options += [
                arg for item in (value if isinstance(value, list) else [value]) for arg in (_RUN_FLAGS[key], str(item))
            ]
    return options


@dataclass(frozen=True)
class Limits:
    """A hardened container: its root filesystem read-only, scratch space in a
    tmpfs at /tmp (counted in its memory), and caps on processes and memory."""

    memory: int | None = None  # bytes; None: no memory limit
    pids: int = PIDS_LIMIT
    scratch: str = "/tmp"

    @property
    def tmpfs_options(self) -> str:
        """The scratch tmpfs's mount options (its size counts against the memory limit)."""
        return "rw,exec,nosuid,nodev,mode=1777" + (f",size={self.memory}" if self.memory else "")

    def create_args(self) -> dict[str, Any]:
        return {
            "read_only": True,
            "tmpfs": {self.scratch: self.tmpfs_options},
            "pids_limit": self.pids,
            **({"mem_limit": self.memory, "memswap_limit": self.memory} if self.memory else {}),
        }


def connect() -> docker.DockerClient:
    """A client for the engine at DOCKER_HOST (or the default socket); EngineError if none answers."""
    where = os.environ.get("DOCKER_HOST", "the default socket")
    try:
        # Commands in containers (pip, compilers) can run long and print nothing:
        # the client's socket timeout must not cut them off.
        client = docker.from_env(timeout=6 * 3600)
        client.ping()
    except DockerException as exc:
        raise EngineError(f"no container engine answers at {where} ({_reason(exc)}): {START_HINT}") from None
    return client


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = True

    def as_docker(self) -> docker.types.Mount:
        # A bind mount, not a `volumes=` entry: those also declare image volumes,
        # which an image committed from the container would then carry.
        return docker.types.Mount(self.target, str(self.source.resolve()), type="bind", read_only=self.read_only)


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: str
    timed_out: bool = False  # killed at its time limit; exit_code is then meaningless


@dataclass
class Container:
    """A started container that runs commands until the context exits."""

    handle: ContainerHandle
    name: str

    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """argv in the container; timeout: seconds after which the container is killed
        (a build that hangs, e.g. writing to a FIFO nobody reads, must not hang the run)."""
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            with contextlib.suppress(DockerException):  # it may have ended meanwhile
                self.handle.kill()

        timer = threading.Timer(timeout, kill) if timeout else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            exit_code, output = self.handle.exec_run(list(argv), environment=env or {}, workdir=workdir, demux=False)
        finally:
            if timer is not None:
                timer.cancel()
        # Neither streamed nor detached: an exit code and the whole output (the stubs allow for both).
        assert not isinstance(output, Iterator)
        text = (output or b"").decode("utf-8", "replace")
        if fired.is_set():
            return RunResult(-1, text, timed_out=True)
        assert exit_code is not None
        return RunResult(exit_code, text)


@contextmanager
def container(
    client: docker.DockerClient,
    image: str,
    *,
    mounts: Sequence[Mount] = (),
    network: str = "none",
    user: str | None = None,
    env: dict[str, str] | None = None,
    name: str | None = None,
    labels: dict[str, str] | None = None,
    limits: Limits | None = None,
    platform: str | None = None,
) -> Iterator[Container]:
    """Run `image` idle (its commands come through Container.run), always removing it.

    network is "none" unless a step must reach a package registry ("host");
    user defaults to the caller's uid:gid, so files written to mounts are theirs;
    limits, when given, make the root filesystem read-only and cap processes and memory;
    platform ("linux/amd64"), when given, is what the image must be made for (ToolchainError
    if it is another: the engine would emulate it, or fail at the first command) and what the
    engine is told to run."""
    try:
        found = client.images.get(image)
    except ImageNotFound:
        raise EngineError(f"image {image} is not present in the engine (it is never pulled): build it first") from None
    if platform is not None:
        made_for = f"{found.attrs.get('Os')}/{found.attrs.get('Architecture')}"
        if made_for != platform:
            raise ToolchainError(f"image {image} is made for {made_for}, not {platform}: build it on a {platform} host")
    try:
        handle = client.containers.create(
            image,
            command=["sleep", "infinity"],
            name=name,
            network_mode=network,
            user=user or f"{os.getuid()}:{os.getgid()}",
            environment=env or {},
            mounts=[m.as_docker() for m in mounts],
            labels={"kernel-matrix": "1", **(labels or {})},
            detach=True,
            **NO_PRIVILEGES,
            **(limits.create_args() if limits else {}),
            platform=platform,
        )
    except DockerException as exc:
        raise EngineError(f"cannot create a container of {image}: {_reason(exc)}") from None
    try:
        handle.start()
        assert handle.name is not None  # create() returns the container as inspected: the engine named it
        yield Container(handle=handle, name=handle.name)
    except DockerException as exc:
        raise EngineError(f"container of {image}: {_reason(exc)}") from None
    finally:
        handle.remove(force=True)


def _reason(exc: DockerException) -> str:
    return (getattr(exc, "explanation", None) or str(exc)).splitlines()[0][:300]
