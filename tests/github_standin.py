"""kernel-matrix's repository on GitHub, stood in for by a local bare repository.

`kernel-matrix init` checks the commit it pins at https://github.com/OWNER/NAME with git.
Tests point that URL at a bare clone of this checkout with git's own
`url.<local>.insteadOf https://github.com/OWNER/NAME`, in a global git config file named by
GIT_CONFIG_GLOBAL: the code under test is the production code, with no hook for tests.
The clone holds this checkout's commits (its HEAD on main), and the release commit of
data/release.yaml where this checkout's history has it (a shallow clone has not)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import REPO

RELEASE = yaml.safe_load((REPO / "kernel_matrix" / "data" / "release.yaml").read_text())
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(*args: str, cwd: Path | None = None, check: bool = True) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, env={**os.environ, **IDENTITY}
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {result.stderr}")
    return result.stdout.strip()


def tagged_release() -> str | None:
    """The commit release RELEASE['version'] is tagged at (docs/workflows.md, "Releasing kernel-matrix
    itself", step 2): the one after RELEASE['commit'] on this branch, which sets release.yaml to it
    and changes nothing else; what README's install line names. None where this checkout's
    history does not hold it (a shallow clone)."""
    after = git("rev-list", "--reverse", "--ancestry-path", f"{RELEASE['commit']}..HEAD", cwd=REPO, check=False)
    if not after:
        return None
    tagged = after.split()[0]
    changed = git("diff", "--name-only", RELEASE["commit"], tagged, cwd=REPO).split()
    assert changed == ["kernel_matrix/data/release.yaml"], f"{tagged}, after the release commit, changes {changed}"
    return tagged


@dataclass
class GitHub:
    """Repositories served as https://github.com/OWNER/NAME, through config (GIT_CONFIG_GLOBAL)."""

    root: Path
    config: Path
    bare: Path  # kernel-matrix/kernel-matrix
    head: str  # this checkout's HEAD commit, main's head there
    release: str | None  # data/release.yaml's commit, where this checkout's history holds it

    def serve(self, repository: str, bare: Path) -> None:
        """Answer https://github.com/<repository> from bare."""
        git("config", "--file", str(self.config), f"url.{bare.as_uri()}.insteadOf", f"https://github.com/{repository}")

    def needs_release(self) -> str:
        if self.release is None:
            pytest.skip(f"a shallow clone: the release commit {RELEASE['commit']} is not in this checkout's history")
        return self.release

    def commit(self, tree_from: str, message: str, *, ref: str | None = None) -> str:
        """A new commit of kernel-matrix's stand-in with tree_from's tree, on ref (None: on no ref at all)."""
        tree = git("rev-parse", f"{tree_from}^{{tree}}", cwd=self.bare)
        commit = git("commit-tree", tree, "-m", message, cwd=self.bare)
        if ref is not None:
            git("update-ref", ref, commit, cwd=self.bare)
        return commit


def stand_in(root: Path) -> GitHub:
    root.mkdir(parents=True, exist_ok=True)
    bare = root / "kernel-matrix.git"
    git("clone", "--quiet", "--bare", "--no-tags", str(REPO), str(bare))
    head = git("rev-parse", "HEAD", cwd=REPO)
    git("update-ref", "refs/heads/main", head, cwd=bare)
    release = RELEASE["commit"]
    held = git("cat-file", "-t", release, cwd=bare, check=False) == "commit"
    if held:
        git("tag", f"v{RELEASE['version']}", release, cwd=bare)  # as a release is tagged
    config = root / "gitconfig"
    config.write_text("")
    github = GitHub(root, config, bare, head, release if held else None)
    github.serve(RELEASE["repository"], bare)
    return github


def snapshot_commit(github: GitHub) -> str:
    """This checkout as it is (its files git tracks or does not ignore, edits included), as a
    commit of the stand-in on the branch `snapshot`, after HEAD: what a job installing
    kernel-matrix from git at that commit gets is this checkout's code."""
    index = github.root / "snapshot-index"
    index.unlink(missing_ok=True)
    env = {**os.environ, **IDENTITY, "GIT_INDEX_FILE": str(index)}
    where = ["git", f"--git-dir={github.bare}", f"--work-tree={REPO}"]
    subprocess.run([*where, "add", "-A"], check=True, env=env, capture_output=True)
    tree = subprocess.run([*where, "write-tree"], check=True, env=env, capture_output=True, text=True).stdout.strip()
    commit = git("commit-tree", tree, "-p", github.head, "-m", "this checkout", cwd=github.bare)
    git("update-ref", "refs/heads/snapshot", commit, cwd=github.bare)
    return commit
