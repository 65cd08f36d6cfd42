"""The one torch-CUDA check (kernel_matrix/planning/torch_cuda.py): as a function, and as the
script that builder images run with `python -c` before kernel-matrix is installed."""

import subprocess
import sys

import pytest

from kernel_matrix.containers.images import _CHECK_TORCH_CUDA
from kernel_matrix.planning import torch_cuda


@pytest.mark.parametrize(
    ("built_for", "wanted", "exact", "ok"),
    [
        ("13.0", "13.0", True, True),
        ("13.0", "13.1", False, True),  # compiling: the same major is enough
        ("13.0", "13.1", True, False),  # testing a cell: its exact CUDA
        ("12.8", "13.0", False, False),
        (None, None, True, True),  # a CPU torch for a CPU cell
        (None, "13.0", False, False),
        ("13.0", None, True, False),
    ],
)
def test_cuda_mismatch(built_for, wanted, exact, ok):
    reason = torch_cuda.cuda_mismatch(built_for, wanted, exact=exact)
    assert (reason is None) is ok
    if reason:
        assert reason.startswith(f"torch is built for {'CUDA ' + built_for if built_for else 'no CUDA'}")


def run_script(tmp_path, torch_cuda_version, *args):
    """The builder image's step: the file's text by `python -c`, torch present only as files (not importable)."""
    package = tmp_path / "site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('no dependencies installed')\n")
    (package / "version.py").write_text(f"__version__ = '2.14.1'\ncuda = {torch_cuda_version!r}\n")
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", _CHECK_TORCH_CUDA, *args], capture_output=True, text=True, env=env, check=False
    )


@pytest.mark.processes
def test_the_builder_image_step_accepts_the_cells_cuda_major(tmp_path):
    result = run_script(tmp_path, "13.0", "13.0")
    assert result.returncode == 0, result.stderr
    assert "torch 2.14.1 (CUDA 13.0)" in result.stderr


@pytest.mark.parametrize(("built_for", "wanted"), [("12.8", "13.0"), (None, "13.0")])
@pytest.mark.processes
def test_the_builder_image_step_refuses_another_build_in_one_line(tmp_path, built_for, wanted):
    result = run_script(tmp_path, built_for, wanted)
    assert result.returncode == 1
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"CUDA {wanted} is needed" in line and "torch-index" in line


@pytest.mark.processes
def test_the_script_refuses_unknown_flags(tmp_path):
    assert run_script(tmp_path, "13.0", "13.0", "--fast").returncode == 2
