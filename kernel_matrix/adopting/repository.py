"""The kernel's repository as `kernel-matrix init` sees it before writing: where it may
write (never over a file, never through a link out of the repository), the branch whose
pushes build, and whether git ignores a path."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kernel_matrix.errors import ConfigError

# A commit, a tag or a branch: git's ref characters, without '..', '@{' or a leading '-' or '/'.
REF = re.compile(r"^(?!.*\.\.)(?!.*@\{)(?![-/.])[A-Za-z0-9._/+-]{1,200}(?<![/.])$")


def absent(targets: list[Path]) -> None:
    """Refuse (nothing written) where a target is there already: init never overwrites a file."""
    for target in targets:
        if os.path.lexists(target):
            raise ConfigError(f"{target}: exists; init never overwrites a file (nothing written)")


def inside(directory: Path, target: Path) -> None:
    """Refuse a target whose folder (as far as it exists) is a link out of directory:
    init writes into the kernel's repository, never through .github -> elsewhere."""
    folder = target.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    root = directory.resolve()
    if not folder.resolve().is_relative_to(root):
        link = next(
            (p for p in (target.parent, *target.parent.parents) if p.is_symlink() and p != directory), target.parent
        )
        raise ConfigError(
            f"{link}: a link out of the repository (to {folder.resolve()}); init never writes through one "
            "(nothing written)"
        )


def _git(directory: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    """git in the kernel's repository; None where git cannot be run."""
    try:
        return subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def ignored(directory: Path, path: str) -> bool:
    """Whether git ignores path in directory's repository (True outside one: nothing to say)."""
    found = _git(directory, "check-ignore", "--quiet", "--no-index", path)
    return found is None or found.returncode != 1  # 0: ignored; 128: not a repository


def push_branch(directory: Path) -> tuple[str, str]:
    """The branch whose pushes build, and why that one: origin's default branch, else the
    branch checked out (a new repository's), else main. Not a feature branch that init
    happens to run on: after the merge its pushes would build nothing."""
    for ref, why in (("refs/remotes/origin/HEAD", "origin's default branch"), ("HEAD", "the branch checked out")):
        found = _git(directory, "symbolic-ref", "--quiet", "--short", ref)
        branch = found.stdout.strip().removeprefix("origin/") if found is not None and found.returncode == 0 else ""
        if REF.match(branch) and "*" not in branch:
            return branch, why
    return "main", "no git branch found"


def held_by_git(directory: Path, targets: list[Path]) -> None:
    """Refuse `init --update` (nothing written) unless the first target, the build workflow, is
    there, and every target there is as git holds it: what --update replaces then comes back
    with git, and `git diff` shows the update alone."""
    if not os.path.lexists(targets[0]):
        raise ConfigError(f"{targets[0]}: not there, nothing to update (init without --update writes it)")
    there = [str(target.relative_to(directory)) for target in targets if os.path.lexists(target)]
    status = _git(directory, "status", "--porcelain", "--", *there)
    if status is None or status.returncode != 0:
        raise ConfigError(
            f"{directory}: not a git repository, where --update would replace files nothing keeps (nothing written)"
        )
    if changed := status.stdout.splitlines():
        line = changed[0]  # "XY path": git's two status letters, then the path
        raise ConfigError(
            f"{directory / line[3:]}: changes git does not hold ({line[:2].strip()}); commit or stash them first, "
            "so that --update replaces nothing git cannot give back (nothing written)"
        )
