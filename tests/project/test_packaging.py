"""What an installed (not editable) kernel-matrix carries: CI's build jobs run
`pip install .`, so every file the service reads at run time must be package data."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import COMMUNITY, REPO, needs_corpus


@pytest.mark.processes
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
        "kernel_matrix/scripts/runner-host-setup",  # the GPU runner host's set-up (docs/runner-host.md)
        "kernel_matrix/py.typed",  # type checkers read the package's annotations
    }
    assert expected <= files, sorted(expected - files)
    # docker/builder.Dockerfile and scripts/runner-host-setup, where readers look for them, are the same files.
    assert (REPO / "docker" / "builder.Dockerfile").resolve() == REPO / "kernel_matrix/docker/builder.Dockerfile"
    assert (REPO / "scripts" / "runner-host-setup").resolve() == REPO / "kernel_matrix/scripts/runner-host-setup"
    info = zipfile.ZipFile(wheel).getinfo("kernel_matrix/scripts/runner-host-setup")
    assert (info.external_attr >> 16) & 0o111, "installed executable, as in the checkout"


# --- kernel-matrix's own release: scripts/release-build and scripts/release-smoke (release.yml's jobs) -----------

RELEASE_FILE = "kernel_matrix/data/release.yaml"


def git(*argv: str, cwd: Path) -> str:
    result = subprocess.run(["git", *argv], cwd=cwd, env={**os.environ, **GIT_IDENTITY}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def release_checkout(root: Path, version: str, *, whole: bool = True) -> tuple[Path, str]:
    """A git history of kernel-matrix's release as docs/workflows.md lays it out: a commit that sets the version,
    then one that points release.yaml at it (the commit tagged). Returns the checkout and the first commit.
    whole=False: only the files the release's checks read (they refuse before anything is built)."""
    checkout = root / "kernel-matrix"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, checkout / name)
    ignore = shutil.ignore_patterns("__pycache__")
    if whole:
        shutil.copytree(REPO / "kernel_matrix", checkout / "kernel_matrix", ignore=ignore)
        shutil.copytree(REPO / "kernel", checkout / "kernel", ignore=shutil.ignore_patterns("__pycache__", "build"))
    else:
        for name in ("kernel_matrix/__init__.py", "kernel_matrix/layout.py", RELEASE_FILE):
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / name, checkout / name)
    (checkout / "scripts").mkdir()
    for name in ("release-build", "release-smoke"):
        shutil.copy2(REPO / "scripts" / name, checkout / "scripts" / name)
    for name, key in (("pyproject.toml", "version"), ("kernel_matrix/__init__.py", "__version__")):
        path = checkout / name
        text, count = re.subn(rf'^{key} = ".*"$', f'{key} = "{version}"', path.read_text(), flags=re.M)
        assert count == 1, name
        path.write_text(text)
    git("init", "-q", "-b", "main", cwd=checkout)
    git("add", "-A", cwd=checkout)
    git("commit", "-q", "-m", f"kernel-matrix {version}", cwd=checkout)
    pinned = git("rev-parse", "HEAD", cwd=checkout)
    release = checkout / RELEASE_FILE
    text = re.sub(r"^commit: .*$", f"commit: {pinned}", release.read_text(), flags=re.M)
    release.write_text(re.sub(r"^version: .*$", f"version: {version}", text, flags=re.M))
    git("commit", "-q", "-am", "release.yaml: what init pins", cwd=checkout)
    return checkout, pinned


def release_build(checkout: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["scripts/release-build", *argv], cwd=checkout, env=env, capture_output=True, text=True)


@pytest.mark.processes
def test_the_release_build_makes_the_sdist_and_wheel_of_a_tagged_release(tmp_path):
    checkout, _ = release_checkout(tmp_path, "9.8.7")
    result = release_build(checkout, "v9.8.7")
    assert result.returncode == 0, result.stderr
    built = sorted(p.name for p in (checkout / "dist").iterdir())
    assert built == ["kernel_matrix-9.8.7-py3-none-any.whl", "kernel_matrix-9.8.7.tar.gz"]
    files = set(zipfile.ZipFile(checkout / "dist" / built[0]).namelist())
    assert {"kernel_matrix/scripts/runner-host-setup", "kernel_matrix/data/release.yaml"} <= files


@pytest.mark.parametrize(
    "mistake",
    [
        "another tag",
        "release.yaml names another version",
        "code after the pin",
        "a commit of no history",
        "__init__ disagrees",
    ],
)
def test_the_release_build_refuses_a_tag_its_checkout_is_not(tmp_path, mistake):
    """What init pins (release.yaml) must be inside the release it names: one line and exit 1 before
    anything is built, where the tag, the version or the pinned commit do not agree."""
    checkout, pinned = release_checkout(tmp_path, "9.8.7", whole=False)
    release = checkout / RELEASE_FILE
    tag, expected = "v9.8.7", None
    if mistake == "another tag":
        tag, expected = "v9.8.8", "tag v9.8.8: pyproject.toml's version is 9.8.7"
    elif mistake == "release.yaml names another version":
        release.write_text(release.read_text().replace("version: 9.8.7", "version: 9.8.6"))
        expected = f"{RELEASE_FILE}: version 9.8.6, not 9.8.7"
    elif mistake == "code after the pin":
        (checkout / "kernel_matrix" / "layout.py").write_text("# changed after the pinned commit\n")
        git("commit", "-q", "-am", "a change", cwd=checkout)
        expected = f"{RELEASE_FILE}: commit {pinned[:12]} differs from this one in kernel_matrix/layout.py"
    elif mistake == "a commit of no history":
        release.write_text(release.read_text().replace(pinned, "f" * 40))
        expected = f"{RELEASE_FILE}: commit {'f' * 40} is not a commit of this history"
    else:
        init = checkout / "kernel_matrix" / "__init__.py"
        init.write_text(init.read_text().replace('"9.8.7"', '"9.8.6"'))
        expected = "kernel_matrix/__init__.py's __version__ is 9.8.6, pyproject.toml's 9.8.7"
    result = release_build(checkout, tag)
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {expected}"), line
    assert not (checkout / "dist").exists()


@pytest.mark.build  # no compiler, but the wheel with all its dependencies into a fresh environment (~30 s)
def test_the_release_smoke_test_installs_the_wheel_and_runs_it(tmp_path):
    checkout, _ = release_checkout(tmp_path, "9.8.7")
    assert release_build(checkout, "v9.8.7").returncode == 0
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["scripts/release-smoke", "v9.8.7"], cwd=checkout, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("kernel-matrix 9.8.7: the wheel installs, runs and carries its data")
    # And it fails where the wheel is not the release it is asked to check.
    result = subprocess.run(["scripts/release-smoke", "v9.8.8"], cwd=checkout, env=env, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "error: the wheel's kernel-matrix --version says 'kernel-matrix 9.8.7', not 'kernel-matrix 9.8.8'"
    )


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
    """A virtual environment without kernel-matrix, and the environment README's install line runs
    in: no index. The dependencies (torch among them) are .venv's, its site-packages added as a path
    only, so that .venv's editable kernel-matrix (a .pth hook there) stays out; pip installs
    kernel-matrix alone (no dependencies) although .venv lists it."""
    target = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", target], check=True)
    (site,) = (target / "lib").glob("python3*/site-packages")
    # The setuptools venv bundles (older than pyproject.toml's metadata needs) would come first.
    for bundled in [*site.glob("setuptools*"), *site.glob("_distutils_hack"), *site.glob("distutils-precedence.pth")]:
        shutil.rmtree(bundled) if bundled.is_dir() else bundled.unlink()
    (site / "zz-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(GIT_IDENTITY)
    env |= {"PATH": f"{target / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(target)}
    env |= {"PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1"}
    env |= {"PIP_IGNORE_INSTALLED": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return target, env


def sh(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result


@needs_corpus
@pytest.mark.processes
def test_the_readme_commands_for_your_kernels_repository_from_git(venv, tmp_path):
    """README's three lines, verbatim, in a git repository holding relu as published
    (with a remote to push to); then the installed kernel-matrix, from that folder,
    with no project source on its path."""
    from test_readme import INSTALL, readme_commands

    target, env = venv
    install, init, push = readme_commands(SECTION)
    # From kernel-matrix's git repository at its latest release, never by a name on an index.
    assert install == INSTALL
    assert init == "kernel-matrix init" and push.endswith("git push")
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

    # GitHub is the stand-in of github_standin.py (git's own insteadOf), which holds this checkout's
    # history, the release among it; pip builds it with .venv's setuptools (no index here; pip reads
    # "0" as --no-build-isolation), and takes its dependencies from .venv.
    from github_standin import RELEASE, stand_in

    github = stand_in(tmp_path / "github")
    env = {**env, "GIT_CONFIG_GLOBAL": str(github.config), "PIP_NO_BUILD_ISOLATION": "0"}
    sh(install, repository, env)
    python = target / "bin" / "python"
    probe = "import json, sys, kernel_matrix; print(json.dumps([kernel_matrix.__file__, sys.path]))"
    where, path = json.loads(sh(f"{python} -c '{probe}'", repository, env).stdout)
    assert Path(where).is_relative_to(target), where  # installed from git, not this checkout
    assert not any(p and (Path(p) == REPO or Path(p).resolve() == REPO) for p in path), path
    assert sh("command -v kernel-matrix", repository, env).stdout.strip() == str(target / "bin" / "kernel-matrix")
    assert sh("kernel-matrix --version", repository, env).stdout == f"kernel-matrix {RELEASE['version']}\n"

    # No matrix file yet: the default the package carries.
    table = sh("kernel-matrix matrix --profile pr", repository, env).stdout
    assert "kernel-matrix's default matrix" in table and "-cxx11-cpu-x86_64-linux" in table

    # init checks the release's commit on GitHub: the same stand-in.
    github.needs_release()
    written = sh(init, repository, env).stdout
    assert "wrote build_matrix.yaml" in written and "HF_TOKEN" in written
    assert "build_matrix.yaml: " in sh("kernel-matrix matrix --profile pr", repository, env).stdout
    sh(push, repository, env)
    pushed = subprocess.run(["git", "ls-tree", "-r", "--name-only", "main"], cwd=remote, capture_output=True, text=True)
    assert {"build_matrix.yaml", ".github/workflows/kernel-matrix.yml"} <= set(pushed.stdout.split())
