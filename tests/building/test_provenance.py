"""metadata.json's provenance: kernel-matrix's own git state, only where it runs from a checkout of it."""

import shutil
import subprocess

from kernel_matrix.building.provenance import BUILDER_GIT_ENV, builder_git_state


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_an_install_inside_another_repository_records_no_builder_commit(tmp_path, monkeypatch):
    """pip install kernel-matrix into the kernel repository's .venv: git, asked about the installed
    package's folder, answers with the kernel repository's HEAD; that is not kernel-matrix's commit."""
    monkeypatch.delenv(BUILDER_GIT_ENV, raising=False)
    repo = tmp_path / "kernel-repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "build.toml").write_text("x\n")
    git(repo, "add", "build.toml")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "kernel")
    installed = repo / ".venv" / "lib" / "site-packages" / "kernel_matrix"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    assert builder_git_state(installed) is None

    # A checkout of kernel-matrix: its package is tracked, and HEAD is its commit.
    checkout = tmp_path / "kernel-matrix"
    shutil.copytree(installed, checkout / "kernel_matrix")
    git(checkout, "init", "-q")
    git(checkout, "add", "kernel_matrix")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "km")
    state = builder_git_state(checkout / "kernel_matrix")
    assert state is not None and state.commit == git(checkout, "rev-parse", "HEAD") and not state.dirty
