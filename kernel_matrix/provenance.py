"""The git state a build came from, for metadata.json's provenance."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GitState:
    commit: str
    dirty: bool


# "<commit>:<0|1>": the git state of a source tree that is built where git is
# not available (a builder container mounts the kernel without its .git).
SOURCE_GIT_ENV = "KERNEL_MATRIX_SOURCE_GIT"


def git_state(path: Path) -> GitState | None:
    """HEAD and whether tracked files under path differ from it; None outside git."""
    if given := os.environ.get(SOURCE_GIT_ENV):
        commit, _, dirty = given.partition(":")
        return GitState(commit=commit, dirty=dirty == "1")
    if shutil.which("git") is None:
        return None

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False)

    head = git("rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        return None
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return GitState(commit=head.stdout.strip(), dirty=bool(status.stdout.strip()))
