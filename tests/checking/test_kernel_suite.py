"""The kernel's own test suite, run by `kernel-matrix test` against each built
variant: loaded by the real `kernels` loader in a fresh process."""

import json
import os
import shutil

import pytest
from conftest import COMMUNITY, kernel_matrix, needs_corpus, noarch_kernel

from kernel_matrix.building.variant_dir import digest_files

pytestmark = pytest.mark.build


def rebuilt(variant) -> None:
    """A variant whose files a test changed, as a build of them would be: its metadata.json's
    digest redone (the loader >= 0.18 refuses files that differ from it, before any import)."""
    metadata = json.loads((variant / "metadata.json").read_text())
    metadata["digest"]["files"] = digest_files(variant)
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=2))


@pytest.mark.parametrize("backend", ["cuda", "cpu"])
def test_kernel_suite_passes_against_the_built_variant(built, backend):
    if backend not in built:
        pytest.skip(f"no {backend} variant can be built on this machine")
    result = kernel_matrix(
        "test", str(built[backend]), "--pytest-arg=-q", "--pytest-arg=-p", "--pytest-arg=no:randomly"
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary
    # The exhaustive bit-exact check really ran on the CPU.
    assert "test_every_rgb_triple_matches_the_reference_bit_for_bit[cpu] SKIPPED" not in result.stdout


def test_a_failing_suite_is_reported_with_its_exit_code(built, kernel_copy):
    variant = next(iter(built.values()))
    tests = kernel_copy / "tests"
    shutil.rmtree(tests)
    tests.mkdir()
    (tests / "test_fails.py").write_text("def test_fails():\n    assert False\n")
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel_copy))
    assert result.returncode == 6
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: the test suite of {variant.name} failed")


def test_a_cuda_only_kernels_variant_without_a_gpu_is_loaded_and_its_suite_not_run(built, kernel_copy, tmp_path):
    """The CPU test job of a CUDA cell (GPUs hidden): a kernel that declares no cpu backend has
    no suite to run there (maxsim's falls back to CPU tensors, which its CUDA-only ops refuse),
    so the variant is loaded by the real loader instead; with cpu declared, the suite runs."""
    if "cuda" not in built:
        pytest.skip("no cuda variant can be built on this machine")
    variant = built["cuda"]
    (kernel_copy / "tests" / "test_needs_a_gpu.py").write_text("def test_gpu():\n    raise AssertionError('ran')\n")
    toml = kernel_copy / "build.toml"
    toml.write_text(toml.read_text().replace('backends = ["cpu", "cuda"]', 'backends = ["cuda"]', 1))
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel_copy), env=hidden)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (
        f"skipped {variant.name}: loaded by kernels.get_local_kernel; suite not run on CPU: needs a GPU "
        '(general.backends ["cuda"] has no cpu)'
    )
    # A variant that does not load fails the test, as the suite would have.
    broken = tmp_path / variant.name
    shutil.copytree(variant, broken)
    (broken / "__init__.py").write_text("raise RuntimeError('broken on import')\n")
    rebuilt(broken)
    result = kernel_matrix("test", str(broken), "--kernel-dir", str(kernel_copy), env=hidden)
    assert result.returncode == 6, result.stderr
    assert "does not load it" in result.stderr and "RuntimeError: broken on import" in result.stderr
    # Declaring cpu, the suite runs with GPUs hidden (its CPU cases), and the planted test fails it.
    toml.write_text(toml.read_text().replace('backends = ["cuda"]', 'backends = ["cpu", "cuda"]', 1))
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel_copy), env=hidden)
    assert result.returncode == 6 and "ran" in result.stdout, result.stderr


def test_an_unknown_variant_is_one_clear_line(tmp_path):
    result = kernel_matrix("test", "torch999-cxx11-cpu-x86_64-linux", "--build-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "not a built variant" in result.stderr


@pytest.mark.build
@pytest.mark.parametrize(("backends", "tested"), [('["rocm"]', "torch-rocm"), ('["xpu", "cpu"]', "torch-cpu")])
def test_test_finds_the_variant_a_python_only_kernel_was_built_as(tmp_path, backends, tested):
    """`build` makes a Python-only kernel's variant for each of its backends; `test` with no
    VARIANT tests the one this host's torch runs best (its own backend's, else torch-cpu, else
    the first declared), not a torch-cuda that was never built."""
    kernel = noarch_kernel(tmp_path, "tiny", backends)
    (kernel / "tests").mkdir()
    (kernel / "tests" / "test_tiny.py").write_text("def test_import():\n    import tiny\n\n    assert tiny.x == 1\n")
    build_dir = tmp_path / "build"
    kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(build_dir), check=True)
    result = kernel_matrix("test", "--kernel-dir", str(kernel), "--build-dir", str(build_dir))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"passed {tested}: all tests of tiny: 1 ran, 0 skipped"


# --- kernels-community's suites on the CPU test job (issue 35 item 2) --------------------------


def corpus_variant(kernel: str, backend: str, build_dir, object_cache):
    """kernels-community's `kernel`, built for `backend` (capability 9.0) into build_dir; its variant."""
    from kernel_matrix.planning.toolchain import find_nvcc

    if backend == "cuda" and find_nvcc() is None:
        pytest.skip("no nvcc here")
    options = ("--build-dir", str(build_dir), "--cache-dir", str(object_cache), "--cuda-capabilities", "9.0")
    kernel_matrix("build", "--kernel-dir", str(COMMUNITY / kernel), "--backend", backend, *options, check=True)
    (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]
    return variant


def activation_on_the_cpu_job(backend, tmp_path, object_cache):
    """activation declares cpu, and its suite names `cuda:0` (11 kernels_ci tests): on the CPU
    job (GPUs hidden) its variants are loaded and the suite said to need a GPU, exit 0; before,
    `11 failed ... RuntimeError: Found no NVIDIA driver`, and publish, which needs every CPU
    test job, never ran."""
    variant = corpus_variant("activation", backend, tmp_path / "build", object_cache)
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(COMMUNITY / "activation"), env=hidden)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "11 skipped" in result.stdout and "failed" not in result.stdout
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"skipped {variant.name}: loaded by kernels.get_local_kernel; suite not run on CPU: needs a GPU "
            "(all 11 kernels_ci tests of activation ask torch for CUDA: RuntimeError: "
        )
    )


@pytest.mark.corpus
@needs_corpus
def test_activations_cuda_variant_on_the_cpu_job_is_loaded_and_its_suite_said_to_need_a_gpu(tmp_path, object_cache):
    activation_on_the_cpu_job("cuda", tmp_path, object_cache)


@pytest.mark.corpus_full
@needs_corpus
def test_activations_cpu_variant_on_the_cpu_job_is_loaded_and_its_suite_said_to_need_a_gpu(tmp_path, object_cache):
    activation_on_the_cpu_job("cpu", tmp_path, object_cache)


@pytest.mark.corpus
@needs_corpus
def test_relus_cpu_suite_still_runs_on_the_cpu_job_and_fails_a_broken_variant(tmp_path, object_cache):
    """relu's suite takes the CPU where torch has no GPU: it runs there, and a CPU variant that
    computes the wrong thing fails it (nothing about a GPU hides that)."""
    variant = corpus_variant("relu", "cpu", tmp_path / "build", object_cache)
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    relu = str(COMMUNITY / "relu")
    result = kernel_matrix("test", str(variant), "--kernel-dir", relu, env=hidden)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert (
        result.stderr.strip().splitlines()[-1]
        == f"passed {variant.name}: the kernels_ci tests of relu: 2 ran, 0 skipped"
    )
    init = variant / "__init__.py"
    init.write_text(init.read_text().replace("ops.relu(out, x)", "out.copy_(x)", 1))
    rebuilt(variant)
    result = kernel_matrix("test", str(variant), "--kernel-dir", relu, env=hidden)
    assert result.returncode == 6, result.stdout[-3000:] + result.stderr
    assert "1 failed" in result.stdout and "needs a GPU" not in result.stdout + result.stderr
