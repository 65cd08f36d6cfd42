"""`kernel-matrix shell`'s container: the `docker run` command line of a shell (or
a command) in a cell's builder image, hardened like a build. Only the argv is made
here; the CLI runs it, attached to the terminal."""

from __future__ import annotations

import os
from pathlib import Path

from kernel_matrix import PACKAGE_DIR
from kernel_matrix.containers import images
from kernel_matrix.containers.engine import Limits, build_user, run_options
from kernel_matrix.planning.matrix import Cell
from kernel_matrix.planning.resources import memory_per_build


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
        *run_options(limits),
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
