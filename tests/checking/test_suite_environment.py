"""What a kernel's own suite gets from `kernel-matrix test`, and what it must have: a scrubbed
environment (kernel_matrix/checking/scrubbed_env.py, shared with the load check), pytest,
torch and the `kernels` loader in the tests' Python (exit 4 without one), and, on a machine
without a GPU, its cases that ask torch for CUDA reported not run rather than failed,
while a CPU case that fails still fails the suite (issue 35 items 2 and 4, issue 39 item 3).

The variants here are Python-only folders written as `build` writes them (metadata.json,
__init__.py): the real CLI, pytest and the `kernels` loader run against them, and nothing
is compiled."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, kernel_matrix, matrix_text

from kernel_matrix.checking.scrubbed_env import scrubbed_environment, withheld, without_credentials
from kernel_matrix.errors import ExitCode

PURE_TOML = """[general]
name = "{name}"
version = 1
license = "MIT"
backends = ["cpu", "cuda"]

[general.hub]
repo-id = "kernel-matrix/{name}"

[torch-noarch]
"""
PACKAGE = "def double(x):\n    return x * 2\n"


def python_only_kernel(root: Path, name: str, tests: dict[str, str], package: str = PACKAGE) -> Path:
    """A Python-only kernel under root with these test files ({file name: text}); its folder."""
    kernel = root / name
    (kernel / "torch-ext" / name).mkdir(parents=True)
    (kernel / "torch-ext" / name / "__init__.py").write_text(package)
    (kernel / "build.toml").write_text(PURE_TOML.format(name=name))
    (kernel / "tests").mkdir()
    for file, text in tests.items():
        (kernel / "tests" / file).write_text(text)
    return kernel


def python_only_variant(build: Path, name: str, package: str = PACKAGE) -> Path:
    """build/torch-cpu of a Python-only kernel, the files `build` writes (the loader reads
    each metadata.json field here); its folder."""
    variant = build / "torch-cpu"
    variant.mkdir(parents=True)
    (variant / "__init__.py").write_text(package)
    metadata = {
        "name": name,
        "id": f"_{name}_cpu_0",
        "version": 1,
        "license": "MIT",
        "python-depends": [],
        "kernel-depends": [],
        "backend": {"type": "cpu"},
    }
    (variant / "metadata.json").write_text(json.dumps(metadata))
    return variant


def no_gpu() -> dict[str, str]:
    """This environment with every GPU hidden: the CPU test job (test-variant --cpu-only)."""
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


# --- the scrubbed environment (issue 39 item 3) ----------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "ACTIONS_RUNTIME_TOKEN",
        "ACTIONS_ID_TOKEN_REQUEST_URL",
        "ACTIONS_CACHE_URL",
        "GITHUB_ENV",
        "GITHUB_OUTPUT",
        "TWINE_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "SSH_AUTH_SOCK",
        "GIT_ASKPASS",
        "NPM_CONFIG__AUTH",
        "my_api_key",
        "KERNEL_MATRIX_DEPS_CACHE",
        "KERNEL_MATRIX_DEPS_DIR",
        "HF_HUB_CACHE",
        "NETRC",
    ],
)
def test_secrets_and_kernel_matrix_settings_are_withheld(name):
    assert withheld(name)


@pytest.mark.parametrize(
    "name", ["PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "GITHUB_ACTIONS", "PYTEST_ADDOPTS", "TMPDIR", "CI"]
)
def test_what_a_suite_needs_is_kept(name):
    assert not withheld(name)


def test_credentials_leave_every_url_and_the_url_stays():
    assert without_credentials("https://user:hunter2@index.example/simple") == "https://index.example/simple"
    several = "https://__token__:pypi-abc@one.example/simple http://tok@two.example:8080/simple"
    assert without_credentials(several) == "https://one.example/simple http://two.example:8080/simple"
    for kept in ("https://index.example/simple", "https://host/path@v1", "git@github.com:org/repo", "a@b"):
        assert without_credentials(kept) == kept


def test_the_environment_has_its_own_home_and_no_token(tmp_path):
    # A HOME without ~/.local (where there is one, PYTHONUSERBASE keeps it importable).
    user_home = str(tmp_path / "user")
    source = {"HF_TOKEN": "hf_x", "PIP_INDEX_URL": "https://u:p@i.example/simple", "PATH": "/bin", "HOME": user_home}
    env = scrubbed_environment(tmp_path / "home", source=source)
    assert env["HOME"] == str(tmp_path / "home") and env["PATH"] == "/bin" and "HF_TOKEN" not in env
    assert env["PIP_INDEX_URL"] == "https://i.example/simple" and env["HF_TOKEN_PATH"] == os.devnull
    assert all(env[k].startswith(str(tmp_path / "home")) for k in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HF_HOME"))
    # The load check's: only the names it inherits, scrubbed the same way.
    env = scrubbed_environment(tmp_path / "home", inherit=["PATH", "HF_TOKEN", "LANG"], source=source)
    assert {k for k in env if not k.startswith(("XDG_", "HF_"))} == {"PATH", "HOME"}


# --- what `test` needs in the tests' Python (issue 35 item 4) --------------------------------


@pytest.mark.processes
def test_a_python_without_pytest_is_a_missing_tool_not_a_failed_suite(tmp_path):
    kernel = python_only_kernel(tmp_path, "pure", {"test_pure.py": "def test_pure():\n    pass\n"})
    variant = python_only_variant(tmp_path / "build", "pure")
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), "--python", str(bare / "bin" / "python"))
    assert result.returncode == ExitCode.TOOLCHAIN, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"--python {bare / 'bin' / 'python'}" in result.stderr
    assert "has no pytest, torch, kernels" in result.stderr and "pip install" in result.stderr


def test_readme_names_everything_test_needs():
    from kernel_matrix.checking.testing import SUITE_NEEDS

    paragraphs = (REPO / "README.md").read_text().split("\n\n")
    (requirements,) = [p for p in paragraphs if "`test` needs" in p]
    assert all(f"`{module}`" in requirements for module in SUITE_NEEDS), requirements


@pytest.mark.processes
def test_several_kernels_whose_suites_failed_exit_6(tmp_path):
    """Every kernel's suite failed: the code they share (6), not 5, "a compile failed"."""
    failing = {"test_fails.py": "def test_fails():\n    assert False\n"}
    for name in ("left", "right"):
        python_only_kernel(tmp_path, name, failing)
        python_only_variant(tmp_path / "build" / name, name)
    matrix = tmp_path / "build_matrix.yaml"
    text = matrix_text()
    assert "\nkernel: kernel\n" in text
    matrix.write_text(text.replace("\nkernel: kernel\n", "\nkernels: [left, right]\n", 1))
    result = kernel_matrix("test", "torch-cpu", "--file", str(matrix), "--build-dir", str(tmp_path / "build"))
    assert result.returncode == ExitCode.TEST, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: 2 of 2 kernels failed: left, right"


# --- a suite that needs a GPU, on a machine without one (issue 35 item 2) --------------------

ON_CPU = "import torch\n\n\ndef test_on_cpu():\n    assert torch.ones(2).sum().item() == 2\n"
NEEDS_CUDA = "import torch\n\n\ndef test_needs_cuda():\n    assert torch.zeros(2, device='cuda').sum().item() == 0\n"


@pytest.mark.processes
def test_a_gpu_test_job_fails_where_the_suite_would_see_no_gpu(tmp_path):
    """--require-gpu (test-variant's GPU job): a CUDA variant whose suite would see no GPU is a
    missing tool (4), not a pass with its CUDA cases skipped; a CPU variant is tested as ever."""
    kernel = python_only_kernel(tmp_path, "pure", {"test_cpu.py": ON_CPU})
    cpu = python_only_variant(tmp_path / "build", "pure")
    cuda = cpu.parent / "torch-cuda"
    cuda.mkdir()
    (cuda / "__init__.py").write_text(PACKAGE)
    metadata = json.loads((cpu / "metadata.json").read_text())
    (cuda / "metadata.json").write_text(json.dumps({**metadata, "backend": {"type": "cuda", "archs": ["9.0"]}}))
    refused = kernel_matrix("test", str(cuda), "--kernel-dir", str(kernel), "--require-gpu", env=no_gpu())
    assert refused.returncode == ExitCode.TOOLCHAIN, refused.stdout + refused.stderr
    assert refused.stderr.strip() == (
        "error: torch-cuda: the suite would see no GPU that its torch can use (--require-gpu: "
        "a GPU test job runs the CUDA cases or fails)"
    )
    passed = kernel_matrix("test", str(cpu), "--kernel-dir", str(kernel), "--require-gpu", env=no_gpu())
    assert passed.returncode == 0, passed.stdout + passed.stderr


@pytest.mark.processes
def test_a_suite_that_only_asks_for_cuda_is_not_run_on_cpu_and_the_variant_is_loaded(tmp_path):
    kernel = python_only_kernel(tmp_path, "pure", {"test_gpu.py": NEEDS_CUDA})
    variant = python_only_variant(tmp_path / "build", "pure")
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), env=no_gpu())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "skipped torch-cpu: loaded by kernels.get_local_kernel; suite not run on CPU: needs a GPU "
        "(all 1 tests of pure ask torch for CUDA: RuntimeError: "
    ), line
    # A variant that does not load fails, as the suite would have on a GPU.
    (variant / "__init__.py").write_text("raise RuntimeError('broken on import')\n")
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), env=no_gpu())
    assert result.returncode == ExitCode.TEST and "RuntimeError: broken on import" in result.stderr, result.stderr


@pytest.mark.processes
def test_a_variant_for_another_device_is_not_failed_where_this_torch_cannot_load_it(tmp_path):
    """A Python-only kernel's torch-rocm (round 20): its suite asks for CUDA, and this machine's
    torch loads no ROCm kernels. Not a failure (kernel-builder checks it with a ROCm torch), and
    the line says why it was not loaded, as `build` does."""
    kernel = python_only_kernel(tmp_path, "pure", {"test_gpu.py": NEEDS_CUDA})
    cpu = python_only_variant(tmp_path / "build", "pure")
    rocm = cpu.parent / "torch-rocm"
    shutil.copytree(cpu, rocm)
    metadata = json.loads((cpu / "metadata.json").read_text())
    (rocm / "metadata.json").write_text(json.dumps({**metadata, "backend": {"type": "rocm"}}))
    result = kernel_matrix("test", str(rocm), "--kernel-dir", str(kernel), env=no_gpu())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    line = result.stderr.strip().splitlines()[-1]
    loads = r"skipped torch-rocm: not loaded \(torch \S+ here loads (cuda and )?cpu kernels only\); "
    assert re.match(loads, line), line
    assert "suite not run on CPU: needs a GPU (all 1 tests of pure ask torch for CUDA" in line, line


@pytest.mark.processes
def test_cpu_cases_still_run_beside_cases_that_need_a_gpu(tmp_path):
    kernel = python_only_kernel(tmp_path, "pure", {"test_cpu.py": ON_CPU, "test_gpu.py": NEEDS_CUDA})
    variant = python_only_variant(tmp_path / "build", "pure")
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), env=no_gpu())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "passed torch-cpu: all tests of pure: 1 ran, 1 skipped (1 needs a GPU: not run on CPU)"
    )
    assert "SKIPPED" in result.stdout or "1 skipped" in result.stdout


@pytest.mark.processes
def test_a_failing_cpu_case_is_never_hidden_by_one_that_needs_a_gpu(tmp_path):
    broken = ON_CPU.replace("== 2", "== 3")
    kernel = python_only_kernel(tmp_path, "pure", {"test_cpu.py": broken, "test_gpu.py": NEEDS_CUDA})
    variant = python_only_variant(tmp_path / "build", "pure")
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), env=no_gpu())
    assert result.returncode == ExitCode.TEST, result.stderr
    assert "1 failed" in result.stdout and "test_on_cpu" in result.stdout


@pytest.mark.processes
def test_the_kernels_own_code_asking_for_cuda_on_cpu_is_its_failure(tmp_path):
    """A CPU variant whose own code puts a tensor on CUDA is broken on a CPU: the suite fails."""
    package = "import torch\n\n\ndef double(x):\n    return x * 2 + torch.zeros(1, device='cuda')\n"
    uses = "import torch\nimport pure\n\n\ndef test_double():\n    assert pure.double(torch.ones(1)).item() == 2\n"
    kernel = python_only_kernel(tmp_path, "pure", {"test_pure.py": uses}, package)
    variant = python_only_variant(tmp_path / "build", "pure", package)
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), env=no_gpu())
    assert result.returncode == ExitCode.TEST, result.stdout[-3000:] + result.stderr
    assert "1 failed" in result.stdout and "needs a GPU" not in result.stderr
