"""What `kernel-matrix init` pins (issue 35 item 1, issue 39 finding 4): one commit of
kernel-matrix's repository, seen there before anything is written; a branch or tag is
resolved to the commit it names; a SHA the repository does not hold, one only a fork's
(GitHub serves those under the parent's name), one without the reusable workflow, and an
unreachable GitHub are each refused in one line, nothing written. GitHub is the local
stand-in of github_standin.py (git's insteadOf), as production code reads it."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import img2gray_as, kernel_matrix
from github_standin import RELEASE, GitHub, git, stand_in

import kernel_matrix as package

WORKFLOW = Path(".github/workflows/kernel-matrix.yml")


@pytest.fixture(scope="module")
def github(tmp_path_factory) -> GitHub:
    return stand_in(tmp_path_factory.mktemp("github"))


@pytest.fixture(autouse=True)
def on_github(github, monkeypatch) -> GitHub:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(github.config))
    return github


@pytest.fixture
def kernel(tmp_path) -> Path:
    return img2gray_as(tmp_path / "repository", "gray")


def refused(result: subprocess.CompletedProcess, code: int, kernel: Path) -> str:
    """The one error line of a refusal, having checked that nothing was written."""
    assert result.returncode == code, result.stdout + result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert not (kernel / "build_matrix.yaml").exists() and not (kernel / ".github").exists()
    return result.stderr.removeprefix("error: ").rstrip("\n")


def pins(kernel: Path) -> set[tuple[str, str]]:
    """(uses, kernel-matrix) of every job init wrote."""
    found = set()
    for path in (kernel / ".github" / "workflows").glob("*.yml"):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            found.add((job["uses"], job["with"]["kernel-matrix"]))
    return found


@pytest.mark.processes
def test_a_branch_is_pinned_by_the_commit_it_names_now(kernel, github):
    result = kernel_matrix("init", "--ref", "main", cwd=kernel)
    assert result.returncode == 0, result.stderr
    assert (
        f"note: --ref main: a branch of {RELEASE['repository']}, which can move: pinned the commit it names now, "
        f"{github.head} (give that SHA to pin it yourself)\n"
    ) in result.stderr
    repository = RELEASE["repository"]
    assert pins(kernel) == {
        (
            f"{repository}/.github/workflows/{workflow}@{github.head}",
            f"git+https://github.com/{repository}@{github.head}",
        )
        for workflow in ("reusable-build.yml", "reusable-upstream.yml")
    }
    assert "@main" not in (kernel / WORKFLOW).read_text()
    assert f"@{github.head}  # v{package.__version__}\n" in (kernel / WORKFLOW).read_text()


@pytest.mark.processes
def test_a_commit_the_repository_does_not_hold_is_refused(kernel):
    unknown = "1234567890abcdef" * 2 + "12345678"
    line = refused(kernel_matrix("init", "--ref", unknown, cwd=kernel), 2, kernel)
    assert line == f"--ref {unknown}: {RELEASE['repository']} has no commit {unknown}"


@pytest.mark.processes
def test_a_commit_on_no_branch_or_tag_is_refused(kernel, github):
    """A fork's commit, which GitHub serves under the parent's name too (here under refs/pull/, as
    GitHub keeps a pull request's head): pinned, it would run the fork's code as kernel-matrix's."""
    impostor = github.commit(github.head, "a fork's commit", ref="refs/pull/1/head")
    line = refused(kernel_matrix("init", "--ref", impostor, cwd=kernel), 2, kernel)
    assert line == (
        f"--ref {impostor}: commit {impostor} is on no branch or tag of {RELEASE['repository']} (GitHub serves a "
        "fork's commits under its parent's name too): pin a commit of the repository itself"
    )
    # The same tree on a branch of the repository is a commit of its own: pinned.
    github.commit(impostor, "merged", ref="refs/heads/merged")
    merged = git("rev-parse", "refs/heads/merged", cwd=github.bare)
    assert kernel_matrix("init", "--ref", merged, cwd=kernel).returncode == 0


@pytest.mark.processes
def test_a_commit_without_the_reusable_workflow_is_refused(kernel, github):
    empty = git("hash-object", "-t", "tree", "-w", "--stdin", cwd=github.bare)  # the empty tree
    bare = git("commit-tree", empty, "-m", "not kernel-matrix", cwd=github.bare)
    git("update-ref", "refs/heads/other", bare, cwd=github.bare)
    line = refused(kernel_matrix("init", "--ref", "other", cwd=kernel), 2, kernel)
    assert line == (
        f"--ref other: commit {bare} of {RELEASE['repository']} has no .github/workflows/reusable-build.yml: not a "
        "commit of kernel-matrix (or one before its reusable workflow)"
    )


@pytest.mark.processes
def test_a_name_that_is_no_branch_or_tag_and_one_that_is_both_are_refused(kernel, github):
    line = refused(kernel_matrix("init", "--ref", "no-such-branch", cwd=kernel), 2, kernel)
    assert line == (
        f"--ref no-such-branch: {RELEASE['repository']} has no branch or tag of that name (and a commit is pinned "
        "by its full 40-character SHA)"
    )
    other = github.commit(github.head, "elsewhere", ref="refs/heads/both")
    git("tag", "both", git("rev-parse", "main", cwd=github.bare), cwd=github.bare)
    assert other != git("rev-parse", "main", cwd=github.bare)
    line = refused(kernel_matrix("init", "--ref", "both", cwd=kernel), 2, kernel)
    assert line.startswith(f"--ref both: both a branch and a tag of {RELEASE['repository']}, at different commits")
    result = kernel_matrix("init", "--ref", "refs/heads/both", cwd=kernel)
    assert result.returncode == 0, result.stderr
    assert all(uses.endswith(f"@{other}") for uses, _ in pins(kernel))


@pytest.mark.processes
def test_a_repository_github_does_not_have_is_refused(kernel, github, tmp_path):
    github.serve("me/nothing", tmp_path / "nothing.git")  # no repository there
    line = refused(kernel_matrix("init", "--repository", "me/nothing", "--ref", github.head, cwd=kernel), 2, kernel)
    assert line.startswith("--repository me/nothing: no such repository on GitHub (")


def closed_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])  # closed again on return: nothing listens there


@pytest.mark.processes
def test_without_github_init_writes_nothing_and_says_what_to_do(kernel, github, tmp_path, monkeypatch):
    """No network: exit 9, one line naming --ref (here the release's default) and what to do. GitHub
    is a loopback port nothing listens on."""
    offline = tmp_path / "offline-gitconfig"
    url = f"http://127.0.0.1:{closed_port()}/{RELEASE['repository']}"
    git("config", "--file", str(offline), f"url.{url}.insteadOf", f"https://github.com/{RELEASE['repository']}")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(offline))
    line = refused(kernel_matrix("init", cwd=kernel), 9, kernel)
    assert line.startswith(
        f"the release's commit {RELEASE['commit']} (--ref): cannot reach https://github.com/{RELEASE['repository']} ("
    )
    assert line.endswith(
        "): init pins a commit only once it has seen it there; run init again where GitHub can be reached"
    )
    line = refused(kernel_matrix("init", "--ref", github.head, cwd=kernel), 9, kernel)
    assert line.startswith(f"--ref {github.head}: cannot reach ")


@pytest.mark.processes
def test_the_release_pinned_by_default_is_checked_on_github(kernel, github, tmp_path, monkeypatch):
    """The release's commit is checked as any --ref: a GitHub repository without it is refused."""
    github.needs_release()
    assert kernel_matrix("init", cwd=kernel).returncode == 0
    shutil.rmtree(kernel / ".github")
    (kernel / "build_matrix.yaml").unlink()
    # A repository of that name whose history lacks the release's commit (one commit of this checkout only).
    other = tmp_path / "other.git"
    git("init", "--quiet", "--bare", str(other))
    only = git("commit-tree", f"{github.head}^{{tree}}", "-m", "squashed", cwd=github.bare)
    git("push", "--quiet", str(other), f"{only}:refs/heads/main", cwd=github.bare)
    github_other = tmp_path / "gitconfig"
    git(
        "config",
        "--file",
        str(github_other),
        f"url.{other.as_uri()}.insteadOf",
        f"https://github.com/{RELEASE['repository']}",
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(github_other))
    line = refused(kernel_matrix("init", cwd=kernel), 2, kernel)
    commit = RELEASE["commit"]
    assert line == f"the release's commit {commit} (--ref): {RELEASE['repository']} has no commit {commit}"
