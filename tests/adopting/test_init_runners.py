"""Issue 35 item 2 (and the init part of 4): the matrix `kernel-matrix init` writes can
publish on a fresh repository. No job waits for a runner the author did not name: build
runners are GitHub-hosted, GPU test runners are those --gpu-runner gives (none by default,
`gpu-test-runner: []`); the excludes a kernel's x86-only flags need are written into
build_matrix.yaml; init names the Hub repositories it will publish to, and that their owner
needs kernel-creation access. The acceptance: every corpus kernel, init, then the plan."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from conftest import CORPUS, REPO, img2gray_as, kernel_matrix, needs_corpus
from github_standin import GitHub, stand_in

from kernel_matrix.config.github_event import is_github_hosted

DEFAULT = yaml.safe_load((REPO / "kernel_matrix" / "data" / "default_matrix.yaml").read_text())
HOSTED = {arch: runners["build-runner"] for arch, runners in DEFAULT["archs"].items()}
# img2gray's CPU section, to which a test adds an x86-only flag.
CPU_FLAGS = '(csrc/img2gray_pixel.h defines the evaluation order).\ncxx-flags = ["-ffp-contract=off"]'


@pytest.fixture(scope="module")
def github(tmp_path_factory) -> GitHub:
    return stand_in(tmp_path_factory.mktemp("github"))


@pytest.fixture(autouse=True)
def on_github(github, monkeypatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(github.config))


def init(*args: str, cwd: Path, github: GitHub):
    return kernel_matrix("init", "--ref", github.head, *args, cwd=cwd)


def plan(repository: Path, tmp_path: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """The cells (matrix --json) and the workflow's jobs and GPU jobs (its --github-output)."""
    output = tmp_path / "github-output"
    output.unlink(missing_ok=True)
    env = {**os.environ, "GITHUB_OUTPUT": str(output)}
    result = kernel_matrix("matrix", "--json", "--github-output", cwd=repository, env=env)
    assert result.returncode == 0, result.stderr
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    jobs = json.loads(outputs["jobs"])["include"] if outputs["jobs"] else []
    gpu_jobs = json.loads(outputs["gpu_jobs"])["include"] if outputs["gpu_jobs"] else []
    return json.loads(result.stdout)["include"], jobs, gpu_jobs


def targeted(cells: list[dict], jobs: list[dict], gpu_jobs: list[dict]) -> dict[str, set[tuple[str, ...]]]:
    """arch -> every runner label list a job of the plan runs on: build and CPU test jobs on the build
    runner, GPU test jobs on the test runner (reusable-build.yml's runs-on)."""
    found: dict[str, set[tuple[str, ...]]] = {}
    for entry in [*cells, *jobs]:
        found.setdefault(entry["arch"], set()).add(tuple(entry["build_runner"]))
    for entry in [*(c for c in cells if c["gpu_test"]), *gpu_jobs]:
        found.setdefault(entry["arch"], set()).add(tuple(entry["test_runner"]))
    return found


def test_the_default_build_runners_are_github_hosted():
    assert HOSTED == {"x86_64": ["ubuntu-24.04"], "aarch64": ["ubuntu-24.04-arm"]}
    assert all(is_github_hosted(labels) for labels in HOSTED.values())


@pytest.mark.processes
def test_init_names_no_gpu_runner_by_default(tmp_path, github):
    """A fresh repository has no self-hosted GPU runner: the CUDA cells get no GPU job (the old default named
    self-hosted x64 and arm64 GPU labels, whose jobs waited for ever, and publish with them)."""
    kernel = img2gray_as(tmp_path / "repository", "gray")
    result = init(cwd=kernel, github=github)
    assert result.returncode == 0, result.stderr
    archs = yaml.safe_load((kernel / "build_matrix.yaml").read_text())["archs"]
    assert archs == {arch: {"build-runner": labels, "gpu-test-runner": []} for arch, labels in HOSTED.items()}
    cells, jobs, gpu_jobs = plan(kernel, tmp_path)
    assert any(c["backend"] == "cuda" for c in cells) and gpu_jobs == []
    assert targeted(cells, jobs, gpu_jobs) == {arch: {tuple(labels)} for arch, labels in HOSTED.items()}
    # The next steps say so, and how to name GPU runners.
    assert "GPU tests: none (build_matrix.yaml has gpu-test-runner: [] for every arch" in result.stdout
    assert "--gpu-runner x86_64=LABEL,..." in result.stdout


@pytest.mark.processes
def test_init_writes_the_gpu_runners_it_is_given(tmp_path, github):
    kernel = img2gray_as(tmp_path / "repository", "gray")
    result = init("--gpu-runner", "x86_64=self-hosted,linux,x64,h100", cwd=kernel, github=github)
    assert result.returncode == 0, result.stderr
    archs = yaml.safe_load((kernel / "build_matrix.yaml").read_text())["archs"]
    assert archs["x86_64"]["gpu-test-runner"] == ["self-hosted", "linux", "x64", "h100"]
    assert archs["aarch64"]["gpu-test-runner"] == []
    cells, jobs, gpu_jobs = plan(kernel, tmp_path)
    assert gpu_jobs and {job["arch"] for job in gpu_jobs} == {"x86_64"}
    assert targeted(cells, jobs, gpu_jobs) == {
        "x86_64": {("ubuntu-24.04",), ("self-hosted", "linux", "x64", "h100")},
        "aarch64": {("ubuntu-24.04-arm",)},
    }
    assert "with the labels given (x86_64: self-hosted, linux, x64, h100)" in result.stdout


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("x86_64", "expected ARCH=LABEL[,LABEL...], ARCH one of x86_64, aarch64"),
        ("riscv64=gpu", "expected ARCH=LABEL[,LABEL...], ARCH one of x86_64, aarch64"),
        ("x86_64=", "'' is not a runner label"),
        ("x86_64=gpu,,x64", "'' is not a runner label"),
        ("x86_64=my gpu", "'my gpu' is not a runner label"),
        ("aarch64=ubuntu-24.04-arm", "ubuntu-24.04-arm is a GitHub-hosted runner, which has no GPU"),
    ],
)
@pytest.mark.processes
def test_init_refuses_a_gpu_runner_it_cannot_write(tmp_path, github, value, expected):
    kernel = img2gray_as(tmp_path / "repository", "gray")
    result = init("--gpu-runner", value, cwd=kernel, github=github)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: --gpu-runner {value!r}: {expected}")
    assert list(kernel.glob("build_matrix.yaml")) == [] and not (kernel / ".github").exists()


@pytest.mark.processes
def test_init_refuses_an_arch_given_twice(tmp_path, github):
    kernel = img2gray_as(tmp_path / "repository", "gray")
    result = init("--gpu-runner", "x86_64=a", "--gpu-runner", "x86_64=b", cwd=kernel, github=github)
    assert result.returncode == 2 and "x86_64 given twice" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.processes
def test_init_writes_the_exclude_an_x86_only_flag_needs(tmp_path, github):
    """A CPU section compiled with -mavx2 cannot compile on aarch64 (gcc there refuses it): init writes
    the exclude of that kernel's aarch64 CPU cells into the matrix (it only printed advice), and says
    why; its aarch64 CUDA cells and the other kernel's cells stay."""
    repository = tmp_path / "repository"
    img2gray_as(repository, "gray-avx", CPU_FLAGS, CPU_FLAGS.replace('"-ffp-contract=off"', '"-O3", "-mavx2"'))
    img2gray_as(repository, "gray")
    result = init(cwd=repository, github=github)
    assert result.returncode == 0, result.stderr
    matrix = yaml.safe_load((repository / "build_matrix.yaml").read_text())
    assert matrix["exclude"] == [{"kernel": "gray-avx", "arch": "aarch64", "cuda": "cpu"}]
    assert (
        "exclude:\n- {kernel: gray-avx, arch: aarch64, cuda: cpu}\n" in (repository / "build_matrix.yaml").read_text()
    )
    assert [line for line in result.stderr.splitlines() if "exclude" in line] == [
        "note: build_matrix.yaml: exclude {kernel: gray-avx, arch: aarch64, cuda: cpu}: gray-avx's aarch64 CPU cells "
        "cannot compile (its CPU sections' -mavx2: x86 flags, which gcc for aarch64 refuses)"
    ]
    cells, _, _ = plan(repository, tmp_path)
    kept = {(c["kernel"], c["arch"], c["backend"]) for c in cells}
    assert ("gray-avx", "aarch64", "cpu") not in kept
    assert {("gray-avx", "aarch64", "cuda"), ("gray-avx", "x86_64", "cpu"), ("gray", "aarch64", "cpu")} <= kept


@pytest.mark.processes
def test_init_names_the_hub_repositories_it_publishes_to(tmp_path, github):
    repository = tmp_path / "repository"
    img2gray_as(repository, "gray")
    img2gray_as(repository, "gray-unnamed", 'repo-id = "kernel-matrix/img2gray"\n', "")
    result = init(cwd=repository, github=github)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "Hub kernel repositories" in line]
    assert line.endswith(
        "Publishing creates and writes the Hub kernel repositories kernel-matrix/gray (gray); gray-unnamed: no "
        "[general.hub] repo-id in build.toml, which publish needs: `kernel`-type repositories, which only a Hub "
        "user or organization with kernel-creation access can create (request it at "
        "https://huggingface.co/settings/account, 'Request Kernels Creation')."
    )


CORPUS_KERNELS = sorted(p.parent for p in CORPUS.glob("*/*/build.toml")) if CORPUS.is_dir() else []


@needs_corpus
@pytest.mark.parametrize("source", CORPUS_KERNELS, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.processes
def test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give(source, tmp_path, github):
    """Issue 35's acceptance: each corpus kernel in a fresh git repository of its own, init with one GPU
    runner given (x86_64's), then the plan: every job runs on a GitHub-hosted build runner of its arch,
    or, for a GPU test, on the labels given; aarch64 has none. And the plan runs as written (an exclude
    init writes matches cells of its kernel, or `matrix` would refuse it)."""
    repository = tmp_path / source.name
    shutil.copytree(source, repository, ignore=shutil.ignore_patterns("__pycache__"))
    gpu = ("self-hosted", "linux", "x64", "gpu-box")
    result = init("--gpu-runner", f"x86_64={','.join(gpu)}", cwd=repository, github=github)
    assert result.returncode == 0, result.stderr
    cells, jobs, gpu_jobs = plan(repository, tmp_path)
    assert cells and jobs
    allowed = {"x86_64": {tuple(HOSTED["x86_64"]), gpu}, "aarch64": {tuple(HOSTED["aarch64"])}}
    for arch, labels in targeted(cells, jobs, gpu_jobs).items():
        assert labels <= allowed[arch], (arch, labels)
    assert all(job["arch"] == "x86_64" and tuple(job["test_runner"]) == gpu for job in gpu_jobs)


@pytest.mark.processes
def test_the_release_pinned_by_default_plans_the_matrix_init_writes(tmp_path, github):
    """What init writes by default runs on what it pins by default: the plan job of the release's own
    kernel-matrix (its package at the commit, imported from an archive of it) reads the written matrix."""
    commit = github.needs_release()
    kernel = img2gray_as(tmp_path / "repository", "gray")
    assert kernel_matrix("init", cwd=kernel).returncode == 0
    archive = tmp_path / "release"
    archive.mkdir()
    tar = subprocess.run(["git", "archive", commit, "kernel_matrix"], cwd=github.bare, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(archive)], input=tar.stdout, check=True)
    # -S: no site hooks, so .venv's editable kernel-matrix (a .pth finder) cannot take the release's place.
    site = sysconfig.get_paths()["purelib"]
    run = (
        f"import sys, runpy; sys.path[:0] = [{str(archive)!r}, {site!r}]; "
        "runpy.run_module('kernel_matrix', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", run, "matrix", "--json"], cwd=kernel, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
