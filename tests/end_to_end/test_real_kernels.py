"""Real kernel-builder kernels from outside kernels-community (../shared/corpus,
test data, never copied into the project; copies in tmp_path only): what broke
kernel-matrix when they were tried (issue 22, items 1-5).

- ErikKaum/maxsim: `"9.0+PTX"` in cuda-capabilities.
- huggingface-kernels/cutlass-gemm's own torch-ext/registration.h, built unchanged
  (here in a copy of symbol-conflicts, a CPU kernel, so that no CUTLASS is needed).
- symbol-conflicts2's tests load symbol-conflicts: both kernels of one matrix.
- a package importable whole by its name, submodules included (causal-conv1d's and
  megablocks' tests do that), as the very module `kernels` loads.
- a suite that collects no tests passes, saying "0 tests"."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, REPO, kernel_matrix

from kernel_matrix.config.buildtoml import load_build_toml
from kernel_matrix.errors import ConfigError
from kernel_matrix.planning.capabilities import gencode_flags, select_capabilities

HF = CORPUS / "huggingface-kernels"
MAXSIM = CORPUS / "ErikKaum" / "maxsim"

pytestmark = pytest.mark.skipif(not HF.is_dir(), reason=f"no kernel corpus at {CORPUS}")


# --- item 2: "+PTX" capabilities -------------------------------------------------------------


def test_maxsim_build_toml_with_ptx_capabilities_parses():
    config = load_build_toml(MAXSIM)
    assert config.kernel["maxsim"].cuda_capabilities == ["8.0", "8.6", "8.9", "9.0+PTX"]


def test_a_ptx_capability_serves_later_majors_and_keeps_its_suffix():
    maxsim = ["8.0", "8.6", "8.9", "9.0+PTX"]
    # CUDA 13's defaults go up to 12.1: 10.0 and later are served by 9.0's PTX, as kernel-builder does.
    assert select_capabilities(maxsim, "13.0") == ["8.0", "8.6", "8.9", "9.0+PTX"]
    assert select_capabilities(maxsim, "13.0", ["9.0"]) == ["9.0+PTX"]
    assert select_capabilities(["8.0+PTX"], "13.0", ["9.0", "10.0"]) == ["8.0+PTX"]
    # Without +PTX a capability serves its own major only.
    assert select_capabilities(["8.0"], "13.0", ["9.0", "10.0"]) == []
    assert select_capabilities(["9.0a+PTX"], "13.0", ["9.0"]) == ["9.0a+PTX"]


def test_an_architecture_specific_capability_takes_its_target_only():
    """kernel-builder's cuda_archs_loose_intersection (utils.cmake): "9.0a" takes the 9.0
    target, and the plain "9.0+PTX" beside it still serves the later ones through its PTX
    (before, the 9.0a dropped it: sm_90a only, no PTX, and archs without 9.0+PTX)."""
    assert select_capabilities(["9.0a", "9.0+PTX"], "13.0") == ["9.0+PTX", "9.0a"]
    assert select_capabilities(["10.0a", "10.0f"], "13.0") == ["10.0a", "10.0f"]  # both take 10.0
    assert select_capabilities(["10.0f", "9.0"], "13.0", ["9.0", "10.0", "10.3"]) == ["9.0", "10.0f"]
    # An empty list is the defaults, as kernel-builder's template reads it ({% if cuda_capabilities %}).
    assert select_capabilities([], "13.0") == select_capabilities(None, "13.0")


def test_a_ptx_capability_embeds_its_ptx_even_below_the_highest():
    assert gencode_flags(["8.0+PTX", "9.0"]) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_80,code=compute_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    # Once each where a section's 9.0 and another's 9.0+PTX meet (the binding gets both).
    assert gencode_flags(["9.0", "9.0+PTX"]) == [
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]


@pytest.mark.parametrize("value", ['"9.0+ptx"', '"9.0 +PTX"', '"+PTX"', '"9.0+PTX+PTX"'])
def test_a_malformed_ptx_capability_is_one_line(tmp_path, value):
    kernel = tmp_path / "maxsim"
    shutil.copytree(MAXSIM, kernel)
    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace('"9.0+PTX"', value))
    with pytest.raises(ConfigError, match=r"build.toml:\d+:\d+: 'kernel.maxsim.cuda-capabilities.3'") as error:
        load_build_toml(kernel)
    assert "\n" not in str(error.value) and value.strip('"') in str(error.value)


# 90 s of CI's 2 cores: the capability's flags are planned and checked above without a compile,
# and a default-list "+PTX" build is test_corpus.py's activation cell; `pytest -m corpus_full` builds it.
@pytest.mark.build
@pytest.mark.corpus_full
def test_maxsim_builds_with_its_ptx_capability(tmp_path):
    from kernel_matrix.planning.toolchain import find_nvcc

    if find_nvcc() is None:
        pytest.skip("no nvcc here")
    result = kernel_matrix(
        "build", "--kernel-dir", str(MAXSIM), "--build-dir", str(tmp_path), "--backend", "cuda",
        "--cuda-capabilities", "9.0",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (variant,) = [d for d in tmp_path.iterdir() if (d / "metadata.json").is_file()]
    # As kernel-builder records it, and as the `kernels` loader reads it (runs on 9.0 and later GPUs).
    assert json.loads((variant / "metadata.json").read_text())["backend"]["archs"] == ["9.0+PTX"]
    abi = kernel_matrix("check-abi", str(variant))
    assert abi.returncode == 0, abi.stdout + abi.stderr


# --- items 1, 3, 4, 5: one matrix of symbol-conflicts (with registration.h) and symbol-conflicts2 ----


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Path:
    """A matrix of two CPU kernels, built natively once: symbol-conflicts, given
    cutlass-gemm's own registration.h (item 3), and symbol-conflicts2, unchanged."""
    root = tmp_path_factory.mktemp("real-kernels")
    own = root / "symbol-conflicts"
    shutil.copytree(HF / "symbol-conflicts", own)
    shutil.copyfile(HF / "cutlass-gemm" / "torch-ext" / "registration.h", own / "torch-ext" / "registration.h")
    shutil.copytree(HF / "symbol-conflicts2", root / "symbol-conflicts2")  # unchanged; inside the matrix's folder
    text = (REPO / "build_matrix.yaml").read_text()
    (root / "build_matrix.yaml").write_text(
        text.replace("kernel: kernel", "kernels:\n  - symbol-conflicts\n  - symbol-conflicts2", 1)
    )
    result = kernel_matrix(
        "build", "-f", str(root / "build_matrix.yaml"), "--backend", "cpu", "--build-dir", "build", cwd=root
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return root


def variant_of(matrix: Path, kernel: str) -> Path:
    (variant,) = [d for d in (matrix / "build" / kernel).iterdir() if (d / "metadata.json").is_file()]
    return variant


@pytest.mark.build
def test_a_kernels_own_registration_h_is_built_unchanged_and_loads(matrix):
    variant = variant_of(matrix, "symbol-conflicts")
    module = json.loads((variant / "metadata.json").read_text())["id"]
    # The kernel's REGISTER_EXTENSION(TORCH_EXTENSION_NAME) defines the module's init: the build's unique name.
    symbols = subprocess.run(["nm", "-D", str(variant / f"{module}.abi3.so")], capture_output=True, text=True)
    assert f" T PyInit_{module}\n" in symbols.stdout
    code = (
        "import kernels, torch\n"
        "k = kernels.get_kernel('kernels-test/symbol-conflicts', version=1)\n"
        "x = torch.zeros(1)\n"
        "print(k.conflicts(x), k.conflicts(x), k.ops.__name__)\n"
    )
    env = {**os.environ, "LOCAL_KERNELS": f"kernels-test/symbol-conflicts={variant}", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=matrix)
    assert result.returncode == 0, result.stderr[-3000:]
    # Its TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ...) registered the ops where _ops.py looks.
    assert result.stdout.split() == ["0", "1", f"torch.ops.{module}"]


@pytest.mark.build
def test_tests_that_load_another_kernel_of_the_matrix_pass(matrix):
    result = kernel_matrix(
        "test", "--kernel", "symbol-conflicts2", "--backend", "cpu", "--build-dir", "build", cwd=matrix
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 passed" in result.stdout
    assert "the kernels_ci tests of symbol-conflicts2" in result.stderr


def kernel_with_tests(matrix: Path, tmp_path: Path, files: dict[str, str]) -> Path:
    """The matrix's symbol-conflicts with its tests/ replaced by files."""
    kernel = tmp_path / "symbol-conflicts"
    shutil.copytree(matrix / "symbol-conflicts", kernel)
    (kernel / "tests").mkdir()
    for name, text in files.items():
        (kernel / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (kernel / "tests" / name).write_text(text)
    return kernel


IMPORTS_WHOLE = """
import subprocess
import sys

import kernels
import pytest

# Imported by name before the loader is asked for it: the loader must give the same module.
import symbol_conflicts
import symbol_conflicts._ops
from symbol_conflicts._ops import ops


def test_import_by_name_is_the_module_the_loader_loads():
    loaded = kernels.get_kernel("kernels-test/symbol-conflicts", version=1)
    assert symbol_conflicts is loaded and loaded.__name__.startswith("_symbol_conflicts_cpu_")
    # Submodules too: one module under both names, never a second copy.
    assert symbol_conflicts._ops is sys.modules[loaded.__name__ + "._ops"] is sys.modules["symbol_conflicts._ops"]
    assert symbol_conflicts._ops.__spec__.name == loaded.__name__ + "._ops"
    assert ops is loaded.ops


def test_a_missing_submodule_is_the_usual_error():
    with pytest.raises(ModuleNotFoundError, match="symbol_conflicts.nothing"):
        import symbol_conflicts.nothing  # noqa: F401


def test_processes_the_tests_start_import_it_too():
    code = "from symbol_conflicts._ops import add_op_namespace_prefix as p; print(p('x'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("_symbol_conflicts_cpu_") and out.strip().endswith("::x")
"""


@pytest.mark.build
def test_the_variant_is_importable_whole_by_its_name(matrix, tmp_path):
    variant = variant_of(matrix, "symbol-conflicts")
    kernel = kernel_with_tests(matrix, tmp_path, {"test_imports.py": IMPORTS_WHOLE})
    result = kernel_matrix(
        "test", str(variant), "--kernel-dir", str(kernel), "--pytest-arg=-p", "--pytest-arg=no:randomly"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 passed" in result.stdout
    # Nothing was added to the variant: no compat folder (as kernel-builder since
    # huggingface/kernels#736), and its digest holds for the loader.
    assert not (variant / "symbol_conflicts").exists()
    from kernel_matrix.loader import Digest, DigestAlgorithm, Metadata

    Metadata.read_from_file(variant / "metadata.json").digest.validate(
        Digest.hash_variant(DigestAlgorithm.SHA256, variant)
    )


SKIPPED = "import pytest\n\n\n@pytest.mark.skip(reason='no GPU here')\ndef test_on_a_gpu():\n    pass\n"


@pytest.mark.build
@pytest.mark.parametrize(
    ("files", "said"),
    [
        (
            {"helpers.py": "def check():\n    return True\n"},
            "passed {}: 0 tests of symbol-conflicts collected (pytest exit 5: a pass, as in upstream's CI)",
        ),
        (
            {"test_gpu.py": "import pytest\n\n\ndef test_unmarked():\n    pass\n# kernels_ci: none yet\n"},
            "passed {}: 0 tests of symbol-conflicts marked kernels_ci collected (pytest exit 5: a pass, as in "
            "upstream's CI)",
        ),
        # pytest exits 0 when every test skips: nothing was tested, and the line says so (exit 0 still).
        ({"test_gpu.py": SKIPPED}, "skipped {}: all tests of symbol-conflicts: all 1 skipped, none ran"),
        (
            {"test_gpu.py": SKIPPED + "\n\ndef test_on_the_cpu():\n    pass\n"},
            "passed {}: all tests of symbol-conflicts: 1 ran, 1 skipped",
        ),
    ],
    ids=["no-tests", "none-marked", "all-skipped", "some-skipped"],
)
def test_a_suite_that_tests_nothing_passes_saying_so(matrix, tmp_path, files, said):
    variant = variant_of(matrix, "symbol-conflicts")
    kernel = kernel_with_tests(matrix, tmp_path, files)
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == said.format(variant.name)


BUILD_LAYOUT = """
import os
from pathlib import Path

# maxsim's conftest finds the built variant at <kernel>/build/<variant> (kernel-builder's layout).
def test_the_variant_is_in_kernel_builders_build_folder():
    here = Path(__file__).resolve().parent
    (found,) = (here.parent / "build").iterdir()
    assert found.name == os.environ["EXPECTED_VARIANT"]
    assert (found / "metadata.json").is_file()
"""


@pytest.mark.build
def test_a_suite_finds_the_variant_where_kernel_builder_puts_it(matrix, tmp_path):
    variant = variant_of(matrix, "symbol-conflicts")
    kernel = kernel_with_tests(matrix, tmp_path, {"test_layout.py": BUILD_LAYOUT})
    env = {**os.environ, "EXPECTED_VARIANT": variant.name}
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout


SHADOWED_LOADER = """
import symbol_conflicts


def test_the_variant_loads_although_kernels_is_the_suites_own_package():
    import kernels

    assert not hasattr(kernels, "get_local_kernel")  # tests/kernels/, first on the path
    assert symbol_conflicts.__name__.startswith("_symbol_conflicts_cpu_")
"""


@pytest.mark.build
def test_a_suite_whose_own_package_is_named_kernels_still_imports_the_variant(matrix, tmp_path):
    """paged-attention's tests are a package named `kernels` (tests/kernels/__init__.py), which
    pytest puts before the loader on sys.path: the alias must load the variant without it."""
    variant = variant_of(matrix, "symbol-conflicts")
    files = {"kernels/__init__.py": "", "test_shadow.py": SHADOWED_LOADER}
    kernel = kernel_with_tests(matrix, tmp_path, files)
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
