import importlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

VARIANT_ENV = "KERNEL_MATRIX_VARIANT_DIR"
# Set instead by `kernel-matrix test --installed PACKAGE`: the package a wheel installed.
INSTALLED_ENV = "KERNEL_MATRIX_INSTALLED_PACKAGE"


@pytest.fixture(scope="session")
def variant_dir() -> Path:
    """The variant folder under test; for an installed wheel, its package folder."""
    installed = os.environ.get(INSTALLED_ENV)
    if installed:
        spec = importlib.util.find_spec(installed)
        if spec is None or spec.origin is None:
            raise pytest.UsageError(f"{INSTALLED_ENV}={installed}: no such package is installed")
        return Path(spec.origin).resolve().parent
    value = os.environ.get(VARIANT_ENV)
    if not value:
        raise pytest.UsageError(f"{VARIANT_ENV} is not set: run these tests with `kernel-matrix test <variant>`")
    return Path(value).resolve()


@pytest.fixture(scope="session")
def variant_backend(variant_dir: Path) -> str:
    return json.loads((variant_dir / "metadata.json").read_text())["backend"]["type"]


@pytest.fixture(scope="session")
def img2gray(variant_dir: Path, variant_backend: str):
    """The kernel as users get it: the real loader picks the variant from build/
    (or pip installed it from a wheel: then it is imported from site-packages)."""
    installed = os.environ.get(INSTALLED_ENV)
    if installed:
        module = importlib.import_module(installed)
        parts = Path(module.__file__).parts  # Debian's Python says dist-packages
        assert "site-packages" in parts or "dist-packages" in parts, f"{installed} imported from {module.__file__}"
        return module
    import kernels

    module = kernels.get_local_kernel(variant_dir.parent, backend=variant_backend)
    loaded_from = Path(module.__file__).resolve().parent
    assert loaded_from == variant_dir, f"the loader chose {loaded_from}, not the variant under test"
    return module


def _skip_unless_cuda(variant_backend: str) -> None:
    if variant_backend != "cuda":
        pytest.skip("the variant under test has no CUDA backend")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request, variant_backend: str) -> str:
    """Each test that takes it runs on the CPU, and on CUDA where possible."""
    if request.param == "cuda":
        _skip_unless_cuda(variant_backend)
    return request.param


@pytest.fixture
def cuda_device(variant_backend: str) -> str:
    """For CUDA-only tests: skipped without a GPU or a CUDA variant."""
    _skip_unless_cuda(variant_backend)
    return "cuda"
