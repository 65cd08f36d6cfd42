"""The git state a build came from, for metadata.json's provenance."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GitState:
    commit: str
    dirty: bool


def git_state(path: Path) -> GitState | None:
    """HEAD and whether tracked files under path differ from it; None outside git."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False)

    head = git("rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        return None
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return GitState(commit=head.stdout.strip(), dirty=bool(status.stdout.strip()))
