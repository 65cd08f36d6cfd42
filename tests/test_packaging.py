"""What an installed (not editable) kernel-matrix carries: CI's build jobs run
`pip install .`, so every file the service reads at run time must be package data."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import COMMUNITY, REPO, needs_corpus

import kernel_matrix


def test_the_package_ships_every_file_it_reads(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "kernel_matrix", source / "kernel_matrix", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        check=True,
    )
    (wheel,) = tmp_path.glob("kernel_matrix-*.whl")
    files = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "kernel_matrix/docker/builder.Dockerfile",  # official builder images
        "kernel_matrix/include/registration.h",  # every binding compile
        "kernel_matrix/compat/glibc-2.28/sys/single_threaded.h",  # manylinux_2_28
        "kernel_matrix/templates/module.cpp.in",
        "kernel_matrix/templates/_ops.py.in",
        "kernel_matrix/data/torch_releases.yaml",
        "kernel_matrix/data/default_matrix.yaml",  # a kernel's folder without a matrix file
        "kernel_matrix/data/release.yaml",  # what init pins
        "kernel_matrix/templates/build_matrix.yaml.in",  # init's files
        "kernel_matrix/templates/caller-workflow.yml.in",
        "kernel_matrix/scripts/test-variant",  # the test jobs' script
        "kernel_matrix/py.typed",  # type checkers read the package's annotations
    }
    assert expected <= files, sorted(expected - files)
    # docker/builder.Dockerfile, where readers look for it, is the same file.
    assert (REPO / "docker" / "builder.Dockerfile").resolve() == REPO / "kernel_matrix/docker/builder.Dockerfile"


# --- installed from the wheel, used from a kernel's own repository -------------------------------------------------

RELU = COMMUNITY / "relu"
SECTION = "Use it in your kernel's repository"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@b",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@b",
}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A virtual environment without kernel-matrix, and the environment in which the
    README's `pip install kernel-matrix` installs it from the wheel built from this
    checkout: no index, the wheel's folder as pip's links. The dependencies (torch
    among them) are .venv's, its site-packages added as a path only, so that .venv's
    editable kernel-matrix (a .pth hook there) stays out; pip installs kernel-matrix
    alone (no dependencies) although .venv lists it."""
    work = tmp_path_factory.mktemp("installed")
    source = work / "src"  # a copy: building in the checkout would leave build/ and *.egg-info there
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "kernel_matrix", source / "kernel_matrix", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", work / "dist", "."],
        cwd=source,
        check=True,
    )
    shutil.rmtree(source)
    target = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", target], check=True)
    (site,) = (target / "lib").glob("python3*/site-packages")
    (site / "zz-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(GIT_IDENTITY)
    env |= {"PATH": f"{target / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(target)}
    env |= {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(work / "dist"), "PIP_NO_DEPS": "1"}
    env |= {"PIP_IGNORE_INSTALLED": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return target, env


def sh(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result


@needs_corpus
def test_the_readme_commands_for_your_kernels_repository_from_the_wheel(venv, tmp_path):
    """README's three lines, verbatim, in a git repository holding relu as published
    (with a remote to push to); then the installed kernel-matrix, from that folder,
    with no project source on its path."""
    from test_readme import readme_commands

    target, env = venv
    install, init, push = readme_commands(SECTION)
    assert install == "pip install kernel-matrix" and init == "kernel-matrix init" and push.endswith("git push")
    repository = tmp_path / "relu"
    shutil.copytree(RELU, repository)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True)
    for argv in (
        ["init", "-q", "-b", "main"],
        ["remote", "add", "origin", remote],
        ["config", "push.default", "current"],
    ):
        subprocess.run(["git", *argv], cwd=repository, check=True)
    sh("git add -A && git commit -q -m relu", repository, env)

    sh(install, repository, env)
    python = target / "bin" / "python"
    probe = "import json, sys, kernel_matrix; print(json.dumps([kernel_matrix.__file__, sys.path]))"
    where, path = json.loads(sh(f"{python} -c '{probe}'", repository, env).stdout)
    assert Path(where).is_relative_to(target), where  # the wheel's copy
    assert not any(p and (Path(p) == REPO or Path(p).resolve() == REPO) for p in path), path
    assert sh("command -v kernel-matrix", repository, env).stdout.strip() == str(target / "bin" / "kernel-matrix")
    assert sh("kernel-matrix --version", repository, env).stdout == f"kernel-matrix {kernel_matrix.__version__}\n"

    # No matrix file yet: the default the package carries.
    table = sh("kernel-matrix matrix --profile pr", repository, env).stdout
    assert "kernel-matrix's default matrix" in table and "torch214-cxx11-cpu-x86_64-linux" in table

    written = sh(init, repository, env).stdout
    assert "wrote build_matrix.yaml" in written and "HF_TOKEN" in written
    assert "build_matrix.yaml: " in sh("kernel-matrix matrix --profile pr", repository, env).stdout
    sh(push, repository, env)
    pushed = subprocess.run(["git", "ls-tree", "-r", "--name-only", "main"], cwd=remote, capture_output=True, text=True)
    assert {"build_matrix.yaml", ".github/workflows/kernel-matrix.yml"} <= set(pushed.stdout.split())
