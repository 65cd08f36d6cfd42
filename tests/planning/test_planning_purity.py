"""Planning is pure (issue 21): the toolchain is probed once, at the edge, and everything from
reading the matrix to each cell's build plan starts no process. In the fast loop: no build."""

import subprocess

from conftest import REPO


def test_planning_is_pure_every_cell_of_the_full_matrix_without_a_process(monkeypatch):
    """Issue 21: the toolchain is probed once, at the edge; `plan` starts no process. Each cell of
    the full matrix is planned from a toolchain value describing that cell's builder."""
    from pathlib import Path

    from kernel_matrix.building import native_build
    from kernel_matrix.planning.selection import Selection
    from kernel_matrix.planning.toolchain import Nvcc, Toolchain, TorchInstall

    def no_process(*args, **kwargs):
        raise AssertionError(f"planning started a process: {args[:1]}")

    # Watched from the start: reading the matrix and build.toml starts no process either.
    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(subprocess, "run", no_process)
    resolved = Selection(file=REPO / "build_matrix.yaml", profile="full").resolve()
    (kernel,) = resolved.kernels
    for cell in resolved.cells:
        v = cell.variant
        tag = f"cu{v.cuda.replace('.', '')}" if v.cuda else "cpu"
        torch = TorchInstall("python3", Path("/opt/km/torch"), f"{v.torch}.0+{tag}", v.cuda, Path("/usr/include/py"))
        nvcc = Nvcc(Path("/opt/cuda/bin/nvcc"), v.cuda, Path("/opt/cuda")) if v.cuda else None
        toolchain = Toolchain(torch=torch, nvcc=nvcc, cxx="g++", arch=v.arch)
        planned = native_build.plan(
            kernel.dir, kernel.config, toolchain, backend=v.backend, cuda_capabilities=list(cell.capabilities) or None
        )
        assert planned.variant.name == cell.name
        # The cell's capabilities, narrowed by build.toml's cuda-capabilities as kernel-builder does.
        assert (v.cuda is None) == (not planned.capabilities) and set(planned.capabilities) <= set(cell.capabilities)
        assert planned.module.startswith("_img2gray_")
    assert len(resolved.cells) > 20
