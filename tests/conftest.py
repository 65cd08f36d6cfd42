import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KERNEL_DIR = REPO / "kernel"


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true", help="rewrite tests/golden/* from the current output")


def kernel_matrix(*args: str, cwd: Path = REPO, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run the real CLI in a fresh process, as CI and users do."""
    result = subprocess.run(
        [sys.executable, "-m", "kernel_matrix", *args], cwd=cwd, capture_output=True, text=True, check=False, **kwargs
    )
    if check and result.returncode != 0:
        pytest.fail(f"kernel-matrix {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def variant_backend(variant_dir: Path) -> str:
    return json.loads((variant_dir / "metadata.json").read_text())["backend"]["type"]


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path]:
    """This host's variants, built once per session by the real CLI: the default
    one (cuda, given a CUDA torch and nvcc) and the cpu one. {backend: variant dir}."""
    build_dir = tmp_path_factory.mktemp("variants") / "build"
    kernel_matrix("build", "--build-dir", str(build_dir), check=True)

    def variants():  # beside them: logs/ and the object cache
        return [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]

    if all(variant_backend(d) != "cpu" for d in variants()):
        kernel_matrix("build", "--build-dir", str(build_dir), "--backend", "cpu", check=True)
    return {variant_backend(d): d for d in variants()}


def container_build_cli(cell, build_dir, kernel_dir=KERNEL_DIR, *extra: str) -> subprocess.CompletedProcess:
    """`kernel-matrix build --variant CELL` in the offline builder image."""
    return kernel_matrix(
        "build",
        "--variant",
        cell.name,
        "--image",
        "offline",
        "--kernel-dir",
        str(kernel_dir),
        "--build-dir",
        str(build_dir),
        *extra,
    )


@pytest.fixture(scope="session")
def engine():
    """A client of the container engine at DOCKER_HOST; the tests that need one
    skip without it, except where KERNEL_MATRIX_REQUIRE_ENGINE is set (.ci/run)."""
    from kernel_matrix.engine import connect
    from kernel_matrix.errors import EngineError

    try:
        return connect()
    except EngineError as exc:
        if os.environ.get("KERNEL_MATRIX_REQUIRE_ENGINE"):
            raise  # CI starts an engine: its absence is a failure there
        pytest.skip(str(exc))


@pytest.fixture
def kernel_copy(tmp_path) -> Path:
    """A scratch copy of the kernel, for tests that break it."""
    copy = tmp_path / "kernel"
    shutil.copytree(KERNEL_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.fixture(scope="session")
def local_cuda_cell(engine):
    """The newest torch's cell this host's CUDA toolchain builds (cu130 here)."""
    from kernel_matrix.matrix import Machine, load_matrix, select
    from kernel_matrix.toolchain import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc: the local profile has no CUDA cell")
    cells = select(
        load_matrix(KERNEL_DIR.parent / "build_matrix.yaml"),
        profile="local",
        machine=Machine(arch="x86_64", nvcc=nvcc.version),
    )
    return max(cells, key=lambda c: tuple(int(x) for x in c.variant.torch.split(".")))


def cli_matrix(profile: str = "full", only: str | None = None, file: Path | None = None, machine=None) -> dict:
    """What `kernel-matrix matrix --json` prints for the repository's matrix: each kernel's cells."""
    from kernel_matrix.selection import Selection

    resolved = Selection(file or REPO / "build_matrix.yaml", profile=profile, only=only).resolve(machine=machine)
    return resolved.github_matrix(resolved.cells)


def matrix_text() -> str:
    """The repository's build_matrix.yaml, its kernel named by absolute path: for copies elsewhere."""
    return (REPO / "build_matrix.yaml").read_text().replace("kernel: kernel", f"kernel: {REPO / 'kernel'}")
