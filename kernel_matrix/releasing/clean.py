"""`kernel-matrix clean`: development artifacts inside the project, and
variants in build/ that the matrix no longer names. Never a file git tracks,
never anything outside the project."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Set
from pathlib import Path

from kernel_matrix.errors import ConfigError
from kernel_matrix.layout import CACHE, LOGS, is_built

# Generated trees and caches, matched anywhere under the project.
ARTIFACT_DIRS = ("__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", ".hypothesis", "_skbuild", "CMakeFiles")
ARTIFACT_FILES = ("*.pyc", "*.pyo", "CMakeCache.txt")
# The environment and build outputs are looked at one by one below.
SKIP_DIRS = {".git", ".venv", "build"}


def project_root(matrix_file: Path, build_dir: Path) -> Path:
    """The project clean may act on: the matrix file's folder, inside a git
    checkout whose files git can list; build_dir must lie below it."""
    root = matrix_file.resolve().parent
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=False)
    if listed.returncode != 0:
        raise ConfigError(
            f"{root}: clean acts only on a project inside a git checkout (the matrix file's folder), and this "
            "folder is not in one (nothing removed)"
        )
    build = build_dir.resolve()
    if not build.is_relative_to(root) or build == root:
        raise ConfigError(
            f"--build-dir {build_dir}: clean only removes a build folder inside the project {root}, "
            "not the project itself, a folder above it or elsewhere (nothing removed)"
        )
    # A build folder's logs/ and .cache/ are removed whole: in git's own folder
    # (.git/logs, the reflogs) or a virtual environment they are not ours.
    parts = build.relative_to(root).parts
    for depth in range(len(parts), 0, -1):  # the build folder, then each folder above it below root
        folder = root.joinpath(*parts[:depth])
        kind = _foreign(folder)
        if kind is not None:
            where = "" if folder == build else f"in {folder}, "
            raise ConfigError(
                f"--build-dir {build_dir}: {build} is {where}{kind}, not a build folder (nothing removed)"
            )
    return root


def _foreign(folder: Path) -> str | None:
    """What a folder clean never looks into is (a git checkout or git's own folder,
    as of a nested repository or a submodule, where .git may be a file; a virtual
    environment), or None."""
    if folder.name == ".git" or (
        (folder / "HEAD").is_file() and (folder / "objects").is_dir() and (folder / "refs").is_dir()
    ):
        return "git's folder"
    if (folder / ".git").exists():
        return "another git checkout"
    if (folder / "pyvenv.cfg").is_file():
        return "a virtual environment"
    return None


def find_artifacts(
    root: Path, build_dir: Path, keep_variants: set[str], kernel_folders: Set[str] = frozenset()
) -> list[Path]:
    """root: a project_root() (checked); what clean would remove there, in order.
    keep_variants: the matrix's variant folders relative to build_dir (relu/torch...-linux
    in a matrix of several kernels, whose kernel_folders are looked into too)."""
    root = root.resolve()
    tracked = _tracked(root)
    found: list[Path] = []

    def walk(directory: Path) -> None:
        for entry in sorted(directory.iterdir()):
            if entry.is_symlink():
                continue  # never follow links out of the project
            if entry.is_dir():
                if entry.name in SKIP_DIRS and directory == root:
                    continue
                if _foreign(entry) is not None:
                    continue  # another repository's or an environment's files: not this project's artifacts
                if any(entry.match(pattern) for pattern in ARTIFACT_DIRS):
                    found.append(entry)
                else:
                    walk(entry)
            elif any(entry.match(pattern) for pattern in ARTIFACT_FILES):
                found.append(entry)

    def build_outputs(folder: Path, top: bool) -> None:
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink():
                continue
            if top and entry.name in kernel_folders and entry.is_dir():
                build_outputs(entry, top=False)
                continue
            relative = entry.relative_to(build).as_posix()
            stale_variant = is_built(entry) and relative not in keep_variants
            # build/<kernel>/ of a kernel the matrix no longer names (removed or renamed): its variants
            stale_kernel = top and entry.is_dir() and not is_built(entry) and _holds_variants_only(entry)
            leftover = entry.name.startswith(".") and any(
                part in entry.name for part in (".staging-", ".old-", ".container-")
            )
            # logs, and the compiled-object cache (the next build fills it again).
            if stale_variant or stale_kernel or leftover or entry.name in (LOGS, CACHE):
                found.append(entry)

    walk(root)
    build = build_dir.resolve()
    if build.is_dir() and build.is_relative_to(root):
        build_outputs(build, top=True)
    return [p for p in found if not _holds_tracked(p, root, tracked)]


def _holds_variants_only(folder: Path) -> bool:
    """A kernel's build folder as builds leave it: built variants, and its logs and
    staging leftovers; nothing else (a folder of the user's is never taken for one)."""
    entries = [e for e in folder.iterdir() if not e.is_symlink()]
    return any(is_built(e) for e in entries) and all(
        is_built(e) or e.name in (LOGS, CACHE) or e.name.startswith(".") for e in entries
    )


def remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _tracked(root: Path) -> set[Path]:
    result = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=False)
    if result.returncode != 0:
        return set()
    return {root / name for name in result.stdout.decode().split("\0") if name}


def _holds_tracked(path: Path, root: Path, tracked: set[Path]) -> bool:
    return path in tracked or any(t.is_relative_to(path) for t in tracked)
