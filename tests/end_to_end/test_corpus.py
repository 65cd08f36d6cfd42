"""Real kernels from kernels-community, unchanged (../shared/corpus, test data
that is never copied here): every build.toml parses; a subset of their variants
builds natively (sm_90 only, for CI time), passes kernel-abi-check and loads
through the real `kernels` loader in a fresh process; the CPU-capable kernels'
own test suites pass against what was built. README ("Use it for your kernel")
says which cells CI builds."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import COMMUNITY, kernel_matrix, needs_corpus, variant_backend

from kernel_matrix.config.buildtoml import load_build_toml

CORPUS = COMMUNITY
KERNELS = ["activation", "einops", "layer-norm", "quantization-gptq", "relu", "rotary"]

pytestmark = needs_corpus

# kernel -> (noarch, the sections kernel-matrix skips, the backends it builds)
EXPECTED = {
    "activation": (False, {"activation_metal", "activation_rocm"}, {"cpu", "cuda"}),
    "einops": (True, set(), {"cpu", "cuda", "metal", "rocm", "xpu"}),
    "layer-norm": (False, set(), {"cuda"}),
    "quantization-gptq": (False, set(), {"cpu"}),
    "relu": (False, {"activation_xpu", "activation_rocm", "activation_metal"}, {"cpu", "cuda"}),
    "rotary": (False, {"rotary_xpu"}, {"cpu", "cuda"}),
}


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_corpus_build_toml_parses(kernel):
    config = load_build_toml(CORPUS / kernel)
    noarch, skipped, _ = EXPECTED[kernel]
    assert config.noarch is noarch and set(config.skipped_sections()) == skipped
    assert config.general.hub.repo_id == f"kernels-community/{kernel}"


# What CI builds (sm_90 only): each kind of kernel once. The rest (relu's CUDA cell, rotary, layer-norm's 56 .cu
# files, activation's CPU variant) is built by `pytest -m corpus_full`, and was measured by hand (README).
CI_CELLS = [
    ("relu", "cpu", "relu"),
    ("activation", "cuda", "silu_and_mul"),  # edition 5, [torch.stable-abi]; CUDA, the default capability list
    ("quantization-gptq", "cpu", "gemm_int4_forward"),  # AVX-512 sections, OpenMP
    ("einops", "cpu", "rearrange"),  # [torch-noarch]
]
FULL_CELLS = [
    ("relu", "cuda", "relu"),  # 90 s of CI's 2 cores for what activation's CUDA cell shows already
    ("activation", "cpu", "silu_and_mul"),
    ("rotary", "cpu", "apply_rotary"),
    ("rotary", "cuda", "apply_rotary"),
    ("layer-norm", "cuda", "dropout_add_ln_fwd"),
]


@pytest.fixture(scope="session")
def corpus_builds(tmp_path_factory):
    """One build folder per kernel, shared by the tests of this module."""
    root = tmp_path_factory.mktemp("corpus")
    return lambda kernel: root / kernel


def build(kernel: str, backend: str, build_dir: Path) -> Path:
    from kernel_matrix.planning.toolchain import find_nvcc

    if backend == "cuda" and find_nvcc() is None:
        pytest.skip("no nvcc here")
    config = load_build_toml(CORPUS / kernel)
    result = kernel_matrix(
        "build",
        "--kernel-dir",
        str(CORPUS / kernel),
        "--build-dir",
        str(build_dir),
        "--backend",
        backend,
        "--cuda-capabilities",
        "9.0",
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    for name in config.skipped_sections():
        assert f"[kernel.{name}] ({config.kernel[name].backend})" in result.stderr
    if config.noarch:
        return build_dir / f"torch-{backend}"
    (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file() and variant_backend(d) == backend]
    return variant


def load_in_fresh_process(kernel: str, variant: Path, attribute: str) -> None:
    """The real loader, as a kernel's users call it, redirected to the build by LOCAL_KERNELS."""
    config = load_build_toml(CORPUS / kernel)
    code = (
        "import kernels, sys\n"
        f"k = kernels.get_kernel({config.general.hub.repo_id!r}, version={config.general.version})\n"
        f"assert callable(getattr(k, {attribute!r})), dir(k)\n"
        "print(k.__name__)\n"
    )
    env = {**os.environ, "LOCAL_KERNELS": f"{config.general.hub.repo_id}={variant}", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=variant.parent)
    assert result.returncode == 0, result.stderr[-3000:]


def check(kernel, backend, attribute, corpus_builds):
    variant = build(kernel, backend, corpus_builds(kernel))
    metadata = json.loads((variant / "metadata.json").read_text())
    assert metadata["name"] == kernel and metadata["backend"]["type"] == backend
    config = load_build_toml(CORPUS / kernel)
    if backend == "cuda" and not config.noarch:
        # Built for 9.0: a section on the default list embeds its highest capability's PTX too
        # (kernel-builder's default list ends "+PTX"), and its archs say so.
        sections = [section.cuda_capabilities for section in config.kernels_for("cuda").values()]
        assert metadata["backend"]["archs"] == sorted({"9.0" if caps else "9.0+PTX" for caps in sections})
    # The package as kernel-builder ships it: subpackages (relu's layers/) included, and of the
    # other files only those pyext names (einops' py.typed is left out, as nix-builder's source set
    # and build-variants.cmake leave it).
    package = CORPUS / kernel / "torch-ext" / kernel.replace("-", "_")
    suffixes = load_build_toml(CORPUS / kernel).package_suffixes
    for source in package.rglob("*"):
        if source.is_file() and "__pycache__" not in source.parts:
            shipped = variant / source.relative_to(package)
            if source.suffix in suffixes:
                assert shipped.read_bytes() == source.read_bytes(), source
            else:
                assert not shipped.exists(), source
    if list(variant.glob("*.so")):
        abi = kernel_matrix("check-abi", str(variant))
        assert abi.returncode == 0, abi.stdout + abi.stderr
    load_in_fresh_process(kernel, variant, attribute)


@pytest.mark.build
@pytest.mark.parametrize(("kernel", "backend", "attribute"), CI_CELLS, ids=[f"{k}-{b}" for k, b, _ in CI_CELLS])
def test_corpus_variants_build_pass_the_abi_check_and_load(kernel, backend, attribute, corpus_builds):
    check(kernel, backend, attribute, corpus_builds)


@pytest.mark.corpus_full
@pytest.mark.parametrize(("kernel", "backend", "attribute"), FULL_CELLS, ids=[f"{k}-{b}" for k, b, _ in FULL_CELLS])
def test_the_rest_of_the_corpus(kernel, backend, attribute, corpus_builds):
    check(kernel, backend, attribute, corpus_builds)


@pytest.mark.build
@pytest.mark.parametrize(("kernel", "expected"), [("relu", "2 passed"), ("einops", "59 passed")])
def test_the_kernels_own_tests_pass_on_cpu(kernel, expected, corpus_builds):
    build(kernel, "cpu", corpus_builds(kernel))
    result = kernel_matrix(
        "test", "--kernel-dir", str(CORPUS / kernel), "--build-dir", str(corpus_builds(kernel)), "--backend", "cpu"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert expected in result.stdout and f"the kernels_ci tests of {kernel}" in result.stderr
    assert not list((CORPUS / kernel / "tests").rglob("__pycache__")), "the kernel's folder is never written"
