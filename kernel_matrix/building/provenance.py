"""What a build came from, for metadata.json's provenance: the git state of the
kernel and of kernel-matrix, and the toolchain, which a rebuild needs to give
the same bytes (`kernel-matrix verify`)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kernel_matrix import PACKAGE_DIR
from kernel_matrix.building.objcache import compiler_identity


@dataclass(frozen=True)
class GitState:
    commit: str
    dirty: bool


# "<commit>:<0|1>": the git state of a source tree that is built where git is
# not available (a builder container mounts the kernel without its .git).
SOURCE_GIT_ENV = "KERNEL_MATRIX_SOURCE_GIT"
# The same for kernel-matrix itself, whose flags decide the bytes as much as the sources do.
BUILDER_GIT_ENV = "KERNEL_MATRIX_BUILDER_GIT"
# The builder image a container build runs in (its id, sha256:...): the container cannot see it.
BUILDER_IMAGE_ENV = "KERNEL_MATRIX_BUILDER_IMAGE"


def git_state(path: Path, *, env: str = SOURCE_GIT_ENV) -> GitState | None:
    """HEAD and whether tracked files under path differ from it; None outside git.
    The variable `env`, where set, says it instead."""
    if given := os.environ.get(env):
        commit, _, dirty = given.partition(":")
        return GitState(commit=commit, dirty=dirty == "1")
    if shutil.which("git") is None:
        return None

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False)

    head = git("rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        return None
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return GitState(commit=head.stdout.strip(), dirty=bool(status.stdout.strip()))


def builder_git_state(package_dir: Path = PACKAGE_DIR) -> GitState | None:
    """kernel-matrix's own git state, where it runs from a checkout of it (its package folder
    only). An install inside another repository (a .venv in the kernel's own) is no checkout:
    git would answer with that repository's HEAD, so its package must be tracked there."""
    if os.environ.get(BUILDER_GIT_ENV) is None and not _tracked(package_dir / "__init__.py"):
        return None
    return git_state(package_dir, env=BUILDER_GIT_ENV)


def _tracked(path: Path) -> bool:
    if shutil.which("git") is None:
        return False
    result = subprocess.run(
        ["git", "-C", str(path.parent), "ls-files", "--error-unmatch", path.name], capture_output=True, check=False
    )
    return result.returncode == 0


def toolchain(*, torch_version: str, python: str, cxx: str, nvcc: str | None, source_date_epoch: str) -> dict[str, str]:
    """metadata.json's provenance.toolchain: what compiled the variant, as each tool
    names itself, the build's SOURCE_DATE_EPOCH and, in a container, its image."""
    record = {"torch": torch_version, "python": _python_version(python), "cxx": _first_line(compiler_identity(cxx))}
    if nvcc is not None:
        record["nvcc"] = _nvcc_release(nvcc) or _first_line(compiler_identity(nvcc))
    record["source-date-epoch"] = source_date_epoch
    if image := os.environ.get(BUILDER_IMAGE_ENV):
        record["builder-image"] = image
    return record


def _nvcc_release(nvcc: str) -> str | None:
    """nvcc's full version from its --version ("release 13.0, V13.0.88" -> "13.0.88")."""
    release = re.search(r"release \S+ V([\d.]+)", compiler_identity(nvcc) or "")
    return release.group(1) if release else None


@functools.cache
def compiler_version(compiler: str) -> str:
    """A compiler's full version, as CMake's CMAKE_<LANG>_COMPILER_VERSION has it ("12.2.0",
    "13.0.88"; "0" where it does not say): for a kernel's version conditions on flags."""
    if Path(compiler).name == "nvcc":
        return _nvcc_release(compiler) or "0"
    try:
        out = subprocess.run(
            [compiler, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "0"
    match = re.match(r"\s*(\d+(?:\.\d+)*)", out)
    return match.group(1) if match else "0"


def _python_version(python: str) -> str:
    try:
        result = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return result.stdout.strip() or "unknown"


def _first_line(identity: str | None) -> str:
    """The version line of `<compiler> --version` (compiler_identity puts the path first)."""
    lines = (identity or "").splitlines()
    return lines[1].strip() if len(lines) > 1 else "unknown"
