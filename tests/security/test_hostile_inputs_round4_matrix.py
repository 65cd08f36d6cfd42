"""Round four's attacks on the matrix file and what reads it (issue 41 finding 3, issue 39
finding 5, issue 35 item 4), none needing a compile or a container engine: a kernel folder
that names another kernel's Hub repo, a `kernel:` path out of the matrix file's folder, a
fake kernel-matrix distribution in the repository test-variant runs in, and a GitHub-hosted
label as a GPU test runner. Each is one line naming the file, line and value, exit code 2."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KERNEL_DIR, REPO, img2gray_as, kernel_matrix

from kernel_matrix.errors import ExitCode

RUNNERS = "archs:\n  x86_64: {build-runner: [ubuntu-24.04], gpu-test-runner: [self-hosted, gpu]}\n"


def one_error(result, code=ExitCode.CONFIG):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def line_of(path: Path, needle: str) -> int:
    return next(n for n, row in enumerate(path.read_text().splitlines(), 1) if needle in row)


def set_repo_id(kernel: Path, repo_id: str) -> Path:
    toml = kernel / "build.toml"
    text, count = re.subn(r"(?m)^repo-id = .*$", f"repo-id = {json.dumps(repo_id)}", toml.read_text())
    assert count == 1
    toml.write_text(text)
    return toml


# --- one Hub repo per kernel (issue 41 finding 3) ------------------------------------------------------------------


@pytest.mark.parametrize("repo_id", ["kernel-matrix/img2gray", "Kernel-Matrix/IMG2GRAY"])
@pytest.mark.processes
def test_a_kernel_naming_another_kernels_hub_repo_is_refused_with_both_lines(tmp_path, repo_id):
    """`evil/build.toml` says `repo-id = "<org>/img2gray"`: its release would replace img2gray's
    variants on img2gray's branch (get_kernel then loads evil). The matrix refuses it, naming both
    build.toml lines; the Hub compares repo names without case, and so does the check."""
    gray = img2gray_as(tmp_path, "gray")
    gray_toml = set_repo_id(gray, "kernel-matrix/img2gray")
    evil_toml = set_repo_id(img2gray_as(tmp_path, "evil"), repo_id)
    matrix = tmp_path / "build_matrix.yaml"
    matrix.write_text('kernels: [gray, evil]\ntorch:\n  "2.14": all\n' + RUNNERS)
    for command in (("matrix",), ("matrix", "--json"), ("publish", "--dry-run")):
        line = one_error(kernel_matrix(*command, "-f", str(matrix), cwd=tmp_path))
        evil_at, gray_at = (f"{toml}:{line_of(toml, 'repo-id')}:1" for toml in (evil_toml, gray_toml))
        assert line.startswith(f"error: {evil_at}: [general.hub] repo-id = {repo_id!r}"), line
        assert f"kernel 'gray' ({gray_at})" in line, line


@pytest.mark.processes
def test_kernels_with_hub_repos_of_their_own_are_planned(tmp_path):
    """The check refuses a shared repo only: repo ids differing by a character pass, as does a
    kernel without [general.hub] repo-id (publish then asks for --repo-id)."""
    set_repo_id(img2gray_as(tmp_path, "gray"), "kernel-matrix/img2gray")
    set_repo_id(img2gray_as(tmp_path, "gray2"), "kernel-matrix/img2gray2")
    set_repo_id(img2gray_as(tmp_path, "gray3"), "")
    matrix = tmp_path / "build_matrix.yaml"
    matrix.write_text('kernels: [gray, gray2, gray3]\ntorch:\n  "2.14": all\n' + RUNNERS)
    result = kernel_matrix("matrix", "--json", "-f", str(matrix), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert {cell["kernel"] for cell in json.loads(result.stdout)["include"]} == {"gray", "gray2", "gray3"}


# --- a kernel folder stays inside the matrix file's folder (issue 39 finding 5) -----------------------------------


@pytest.fixture
def beside(tmp_path):
    """A repository (tmp_path/repo) holding its matrix, and a kernel outside it (tmp_path/relu)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    img2gray_as(tmp_path, "relu")
    return repo


@pytest.mark.parametrize(
    ("entry", "how"),
    [
        ("kernel: ../relu", "dotdot"),
        ("kernel: {outside}", "absolute"),
        ("kernels:\n  - inside\n  - linked", "link"),
        ("kernel: sub/../../relu", "dotdot"),
        ("kernel: {repo}/../relu", "absolute"),
    ],
)
@pytest.mark.processes
def test_a_kernel_folder_outside_the_matrix_files_folder_is_refused_at_its_line(beside, entry, how):
    repo, outside = beside, beside.parent / "relu"
    img2gray_as(repo, "inside")
    (repo / "linked").symlink_to(outside)
    (repo / "sub").mkdir()
    text = entry.format(outside=outside, repo=repo)
    matrix = repo / "build_matrix.yaml"
    matrix.write_text("# a pull request's matrix\n" + text + '\ntorch:\n  "2.14": all\n' + RUNNERS)
    value = text.rsplit("- ", 1)[-1] if how == "link" else text.split(": ", 1)[1]
    where = line_of(matrix, value)
    for command in ("matrix", "build", "publish"):
        line = one_error(kernel_matrix(command, "-f", str(matrix), cwd=repo))
        assert line.startswith(f"error: {matrix}:{where}:"), line
        assert f"= {value!r}: leads to {outside.resolve()}, outside {repo.resolve()}" in line, line
    assert not (repo / "build").exists()


@pytest.mark.parametrize("entry", ["kernel: sub/../inside", "kernel: {repo}/inside", "kernel: ./inside"])
@pytest.mark.processes
def test_a_kernel_folder_inside_the_matrix_files_folder_is_read(beside, entry):
    """Spelled with `..` that stays inside, or absolute to a folder inside: the same folder."""
    img2gray_as(beside, "inside")
    (beside / "sub").mkdir()
    matrix = beside / "build_matrix.yaml"
    matrix.write_text(entry.format(repo=beside) + '\ntorch:\n  "2.14": all\n' + RUNNERS)
    result = kernel_matrix("matrix", "--json", "-f", str(matrix), cwd=beside)
    assert result.returncode == 0, result.stderr
    assert {cell["kernel"] for cell in json.loads(result.stdout)["include"]} == {"inside"}


@pytest.mark.processes
def test_kernel_dir_still_builds_a_kernel_anywhere(beside):
    """--kernel-dir is the caller's own choice on its command line (the README builds
    ../shared/corpus kernels so), not a matrix entry: it is not confined."""
    result = kernel_matrix("matrix", "--json", "--kernel-dir", str(beside.parent / "relu"), cwd=beside)
    assert result.returncode == 0, result.stderr
    assert {cell["kernel"] for cell in json.loads(result.stdout)["include"]} == {"relu"}


# --- test-variant installs the running kernel-matrix, not a dist-info of the repository (issue 39 finding 5) ------


@pytest.mark.processes
def test_test_variant_ignores_a_kernel_matrix_dist_info_in_the_repository(tmp_path):
    """`python -m kernel_matrix test-variant` puts the repository on sys.path first: a committed
    `kernel_matrix-99.0.dist-info/direct_url.json` there named what the cell's environment installs.
    The install comes from the running package's own distribution. A stand-in interpreter for the
    cell's environment records what pip is asked to install, and stops there."""
    repo = tmp_path / "repo"
    (repo / "build" / "torch-cpu").mkdir(parents=True)
    (repo / "build" / "torch-cpu" / "metadata.json").write_text("{}")
    payload = tmp_path / "attacker-payload"
    payload.mkdir()
    fake = repo / "kernel_matrix-99.0.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: kernel-matrix\nVersion: 99.0\n")
    (fake / "direct_url.json").write_text(json.dumps({"url": payload.as_uri(), "dir_info": {}}))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    asked = tmp_path / "pip-args"
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {asked}\nexit 1\n')
    (venv / "bin" / "python").chmod(0o755)
    env = {**os.environ, "TEST_VARIANT_VENV": str(venv)}
    env.pop("KERNEL_MATRIX_INSTALL", None)
    result = subprocess.run(
        [sys.executable, "-m", "kernel_matrix", "test-variant", "torch-cpu"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0  # the stand-in's pip fails: nothing after it runs
    installed = asked.read_text().splitlines()[-1]
    assert str(payload) not in installed and str(payload) not in result.stderr, result.stderr
    # What the same command installs from a folder without a dist-info: the running kernel-matrix's origin.
    clean = subprocess.run(
        [sys.executable, "-c", "from kernel_matrix.cli.test_variant import running_install; print(running_install())"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert installed == clean.stdout.strip()
    assert f"installing {installed} into {venv}" in result.stderr


def dist_info(folder: Path, version: str, origin: dict) -> None:
    record = folder / f"kernel_matrix-{version}.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text(f"Metadata-Version: 2.1\nName: kernel-matrix\nVersion: {version}\n")
    (record / "direct_url.json").write_text(json.dumps(origin))


def test_an_installed_kernel_matrix_is_found_beside_its_package_not_first_on_sys_path(tmp_path, monkeypatch):
    """A wheel or git install: the dist-info beside the running package names its origin, whatever
    a folder earlier on sys.path holds."""
    import importlib

    test_variant = importlib.import_module("kernel_matrix.cli.test_variant")  # the module, not the command
    site, hostile = tmp_path / "site-packages", tmp_path / "repo"
    (site / "kernel_matrix").mkdir(parents=True)
    commit = "0123456789abcdef0123456789abcdef01234567"
    dist_info(site, "0.3.0", {"url": "https://github.com/me/km", "vcs_info": {"vcs": "git", "commit_id": commit}})
    dist_info(hostile, "99.0", {"url": "https://evil.example/km", "vcs_info": {"vcs": "git", "commit_id": "f" * 40}})
    monkeypatch.syspath_prepend(str(hostile))
    monkeypatch.setattr(test_variant, "PACKAGE_DIR", site / "kernel_matrix")
    assert test_variant.running_install() == f"git+https://github.com/me/km@{commit}"
    # Nothing beside the package and no editable install of it: this version from the index, never the hostile one.
    monkeypatch.setattr(test_variant, "PACKAGE_DIR", tmp_path / "elsewhere" / "kernel_matrix")
    from kernel_matrix import __version__

    assert test_variant.running_install() == f"kernel-matrix=={__version__}"


# --- GPU test runners are self-hosted (issue 35 item 4) ------------------------------------------------------------


@pytest.mark.parametrize("labels", ["[ubuntu-24.04-arm]", "[self-hosted, ubuntu-latest]", "[windows-2025]"])
@pytest.mark.processes
def test_a_github_hosted_label_as_gpu_test_runner_is_refused_at_its_line(tmp_path, labels):
    matrix = tmp_path / "build_matrix.yaml"
    matrix.write_text(
        'torch:\n  "2.14": all\n'
        + RUNNERS
        + f"  aarch64:\n    build-runner: [ubuntu-24.04-arm]\n    gpu-test-runner: {labels}\n"
    )
    hosted = labels.strip("[]").split(", ")[-1]
    index = len(labels.strip("[]").split(", ")) - 1
    line = one_error(kernel_matrix("matrix", "-f", str(matrix), cwd=tmp_path))
    assert line.startswith(f"error: {matrix}:{line_of(matrix, 'gpu-test-runner: ' + labels)}:"), line
    assert f"archs.aarch64.gpu-test-runner.{index} = {hosted!r}: a GitHub-hosted runner label" in line, line
    assert "no GPU" in line


@pytest.mark.processes
def test_the_repositorys_own_matrix_names_no_hosted_gpu_runner():
    """The shipped matrices pass the rule they teach."""
    for matrix in (REPO / "build_matrix.yaml", REPO / "kernel_matrix" / "data" / "default_matrix.yaml"):
        result = kernel_matrix("matrix", "--json", "-f", str(matrix), "--kernel-dir", str(KERNEL_DIR))
        assert result.returncode == 0, result.stderr
