"""[tvm-ffi] kernels: built as kernel-builder builds them (a library that links tvm-ffi and
no torch, named tvm-ffi01-<compute>-<arch>-linux), loaded by the real `kernels` loader
with the real apache-tvm-ffi, and tested by their own suite."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KERNEL_DIR, cli_matrix, kernel_matrix, needed_libraries, tvm_ffi_kernel

from kernel_matrix.config.buildtoml import load_build_toml
from kernel_matrix.errors import ExitCode, ToolchainError
from kernel_matrix.planning.toolchain import TVM_FFI_REQUIREMENT, Toolchain, TvmFfiInstall, probe_torch
from kernel_matrix.planning.variants import TVM_FFI_VERSION, Variant


def test_variant_names_are_what_the_loader_parses():
    from kernel_matrix.loader import parse_variant

    for cuda, arch in [(None, "x86_64"), ("13.0", "x86_64"), ("12.6", "aarch64")]:
        variant = Variant(
            torch="2.14", backend="cuda" if cuda else "cpu", cuda=cuda, arch=arch, tvm_ffi=TVM_FFI_VERSION
        )
        compute = f"cu{cuda.replace('.', '')}" if cuda else "cpu"
        assert variant.name == f"tvm-ffi01-{compute}-{arch}-linux"
        assert parse_variant(variant.name).variant_str == variant.name
    with pytest.raises(ValueError, match="tvm-ffi"):
        Variant(torch="2.14", backend="cpu", cuda=None, arch="x86_64", tvm_ffi="0.1", stable_abi="2.10")


@pytest.mark.processes
def test_the_matrix_has_one_cell_per_compute_and_arch_from_the_newest_torch(tmp_path):
    """As kernel-builder builds tvm-ffi kernels: no torch in the variant, so the grid's torch
    versions collapse; each cell is built in the newest torch's builder that has its CUDA."""
    kernel = tvm_ffi_kernel(tmp_path)
    printed = kernel_matrix("matrix", "--kernel-dir", str(kernel), "--json")
    assert printed.returncode == 0, printed.stderr
    tvm_cells = json.loads(printed.stdout)["include"]
    torch_cells = cli_matrix(file=KERNEL_DIR.parent / "build_matrix.yaml")["include"]
    newest: dict[tuple[str, str], str] = {}
    for cell in torch_cells:
        key = (cell["cuda"] or "cpu", cell["arch"])
        newest[key] = max(newest.get(key, "0"), cell["torch"], key=lambda v: tuple(map(int, v.split("."))))
    assert sorted(c["variant"] for c in tvm_cells) == sorted(
        f"tvm-ffi01-{'cpu' if cuda == 'cpu' else 'cu' + cuda.replace('.', '')}-{arch}-linux" for cuda, arch in newest
    )
    assert {(c["cuda"] or "cpu", c["arch"]): c["torch"] for c in tvm_cells} == newest


@pytest.mark.processes
def test_a_tvm_ffi_of_another_abi_is_refused_in_one_line(tmp_path):
    from kernel_matrix.building.native_build import plan

    kernel = tvm_ffi_kernel(tmp_path)
    other = TvmFfiInstall(package=tmp_path, version="0.2.1", include_dirs=(), library=tmp_path / "libtvm_ffi.so")
    toolchain = Toolchain(torch=probe_torch(), nvcc=None, cxx="g++", arch="x86_64", tvm_ffi=other)
    with pytest.raises(ToolchainError) as raised:
        plan(kernel, load_build_toml(kernel), toolchain, backend="cpu")
    text = str(raised.value)
    assert "\n" not in text and "apache-tvm-ffi 0.2.1" in text and TVM_FFI_REQUIREMENT in text, text


@pytest.mark.processes
def test_a_python_without_tvm_ffi_is_told_what_to_install(tmp_path):
    """The build's Python has torch but cannot import tvm_ffi: one line naming the package."""
    kernel = tvm_ffi_kernel(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "tvm_ffi.py").write_text("raise ImportError('tvm_ffi is blocked for this test')\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={blocker} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "build"), "--python", str(python)
    )
    assert result.returncode == ExitCode.TOOLCHAIN, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and TVM_FFI_REQUIREMENT in errors[0] and "blocked for this test" in errors[0], errors
    assert "Traceback" not in result.stderr and not (tmp_path / "build").exists()


def test_the_test_job_installs_the_tvm_ffi_of_the_variant(tmp_path):
    """The loader takes a tvm-ffi01 variant only where tvm_ffi 0.1 is installed: the test
    job's environment gets it, as it gets a variant's python-depends."""
    from kernel_matrix.checking.python_depends import requirements

    for name, backend, wanted in [
        ("tvm-ffi01-cu130-x86_64-linux", "cuda", ["apache-tvm-ffi>=0.1,<0.2"]),
        ("torch214-cxx11-cu130-x86_64-linux", "cuda", []),
        ("torch-cpu", "cpu", []),
    ]:
        variant = tmp_path / name
        variant.mkdir()
        (variant / "metadata.json").write_text(json.dumps({"python-depends": [], "backend": {"type": backend}}))
        assert requirements(variant, backend) == wanted, name
    with_einops = tmp_path / "tvm-ffi01-cpu-x86_64-linux"
    with_einops.mkdir()
    (with_einops / "metadata.json").write_text(json.dumps({"python-depends": ["einops"], "backend": {"type": "cpu"}}))
    assert requirements(with_einops, "cpu") == ["apache-tvm-ffi>=0.1,<0.2", "einops"]


@pytest.mark.processes
def test_torch_ops_of_a_tvm_ffi_package_are_checked_as_kernel_builder_checks_them(tmp_path):
    """kernel-builder runs torch-ops-check on a tvm-ffi kernel's sources too."""
    kernel = tvm_ffi_kernel(tmp_path)
    init = kernel / "tvm-ffi-ext" / "gray_tvm_ffi" / "__init__.py"
    registration = '@torch.library.custom_op("gray::op", mutates_args=())\ndef op(x: torch.Tensor) -> torch.Tensor:\n'
    init.write_text(init.read_text() + f"\nimport torch\n\n{registration}    return x\n")
    line = init.read_text().splitlines().index("def op(x: torch.Tensor) -> torch.Tensor:") + 1
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "build"), "--backend", "cpu"
    )
    assert result.returncode == ExitCode.CONFIG, result.stderr
    assert result.stderr.startswith(f"error: {init}:{line}: ") and "add_op_namespace_prefix" in result.stderr, (
        result.stderr
    )
    assert not (tmp_path / "build").exists()


@pytest.mark.build
@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_tvm_ffi_kernel_builds_loads_and_passes_its_own_suite(tmp_path, backend):
    if backend == "cuda" and shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("no nvcc: no CUDA variant is built here")
    kernel = tvm_ffi_kernel(tmp_path)
    build_dir = tmp_path / "build"
    options = ["--kernel-dir", str(kernel), "--build-dir", str(build_dir), "--backend", backend]
    result = kernel_matrix("build", *options, *(["--cuda-capabilities", "9.0"] if backend == "cuda" else []))
    assert result.returncode == 0, result.stdout + result.stderr
    (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]
    compute = "cpu" if backend == "cpu" else r"cu\d+"
    assert re.fullmatch(rf"tvm-ffi01-{compute}-x86_64-linux", variant.name), variant.name
    metadata = json.loads((variant / "metadata.json").read_text())
    module = metadata["id"]
    assert module.startswith(f"_gray_tvm_ffi_{backend}_") and metadata["backend"]["type"] == backend
    toolchain = metadata["provenance"]["toolchain"]
    assert toolchain["tvm-ffi"].startswith(TVM_FFI_VERSION + ".") and "torch" not in toolchain, toolchain
    # Compiled as kernel-builder's tvm-ffi target compiles: its defines, C++17, and none of what
    # a torch extension's target adds (torch's nvcc flags, ENABLE_FP8).
    compiles = json.loads((build_dir / "logs" / f"{variant.name}.cache-keys.json").read_text())
    assert len(compiles) == (3 if backend == "cuda" else 2), [c["step"] for c in compiles]
    for compile in compiles:
        argv = compile["argv"]
        assert f"-DTVM_FFI_EXTENSION_NAME={module}" in argv and "-DTORCH_EXTENSION_NAME" not in " ".join(argv)
        assert f"-D{backend.upper()}_KERNEL" in argv and any(a.endswith("++17") for a in argv), argv
        assert not {"--expt-relaxed-constexpr", "--expt-extended-lambda", "-DENABLE_FP8"} & set(argv), argv
    # What kernel-builder installs: the package, its _ops.py, and <ops>.so (not an abi3 Python module).
    assert sorted(p.name for p in variant.iterdir()) == sorted(
        ["__init__.py", "_ops.py", f"{module}.so", "metadata.json"]
    )
    needed = needed_libraries(variant / f"{module}.so")
    assert "libtvm_ffi.so" in needed, needed
    # No torch, and (as CMake links a CUDA library by default) no shared CUDA runtime to find.
    assert not [n for n in needed if n.startswith(("libtorch", "libc10", "libcudart", "libpython"))], needed
    # As the README's `build && test`: the variant this host builds, found by the kernel and backend.
    tested = kernel_matrix("test", "--kernel-dir", str(kernel), "--build-dir", str(build_dir), "--backend", backend)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr
    assert re.search(r"the kernels_ci tests of gray-tvm-ffi: [1-9]\d* ran", tested.stderr), tested.stderr


@pytest.mark.build
def test_a_tvm_ffi_variant_that_does_not_load_is_not_kept(tmp_path):
    """The load after the build (kernel-builder's get-kernel-check) goes through tvm-ffi too:
    a package that asks its library for a function it does not export fails the build."""
    kernel = tvm_ffi_kernel(tmp_path)
    init = kernel / "tvm-ffi-ext" / "gray_tvm_ffi" / "__init__.py"
    init.write_text(init.read_text() + "\n_missing = ops.no_such_function\n")
    build_dir = tmp_path / "build"
    result = kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(build_dir), "--backend", "cpu")
    assert result.returncode == ExitCode.BUILD, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "tvm-ffi01-cpu-x86_64-linux" in errors[0], result.stderr
    assert not (build_dir / "tvm-ffi01-cpu-x86_64-linux").exists()
    assert "no_such_function" in (build_dir / "logs" / "tvm-ffi01-cpu-x86_64-linux.load.log").read_text()


@pytest.mark.processes
def test_wheels_of_a_tvm_ffi_kernel_say_there_are_none_to_make(tmp_path):
    """A legacy wheel requires one torch and holds an abi3 torch extension: neither fits a
    tvm-ffi library, whose variant folder is what the loader takes."""
    kernel = tvm_ffi_kernel(tmp_path)
    result = kernel_matrix("wheels", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "build"))
    assert result.returncode == ExitCode.CONFIG, result.stderr
    assert result.stderr == (
        "error: gray-tvm-ffi: legacy wheels are made of torch extensions ([torch]), not of [tvm-ffi] or "
        "Python-only kernels; their tvm-ffi01-... and torch-<backend> folders are what `kernels` loads\n"
    )


@pytest.mark.build
def test_published_tvm_ffi_variants_are_what_get_kernel_picks(tmp_path):
    """publish to the Hub-protocol server on loopback, then the real loader in a fresh process:
    with tvm_ffi installed it takes this machine's tvm-ffi01 variant from the v1 branch."""
    import os
    import secrets

    from hubserver import HubServer

    kernel = tvm_ffi_kernel(tmp_path)
    build = tmp_path / "build"
    backends = ["cpu", *(["cuda"] if shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists() else [])]
    for backend in backends:
        capabilities = ["--cuda-capabilities", "9.0"] if backend == "cuda" else []
        built = kernel_matrix(
            "build", "--kernel-dir", str(kernel), "--build-dir", str(build), "--backend", backend, *capabilities
        )
        assert built.returncode == 0, built.stderr
    variants = sorted(d.name for d in build.iterdir() if (d / "metadata.json").is_file())
    env = {**os.environ, "HF_HUB_DISABLE_XET": "1", "HF_HUB_CACHE": str(tmp_path / "hf-cache")}
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)
    with HubServer(trusted_orgs=["kernel-matrix"]) as hub:
        env["HF_ENDPOINT"] = hub.url
        published = kernel_matrix(
            "publish",
            "--kernel-dir",
            str(kernel),
            "--build-dir",
            str(build),
            "--allow-partial",
            "--manylinux",
            "none",
            cwd=tmp_path,
            env={**env, "HF_TOKEN": "hf_" + secrets.token_hex(16)},
        )
        assert published.returncode == 0, published.stderr
        on_branch = {
            path.split("/")[1] for path in hub.files("kernel-matrix/gray-tvm-ffi", "v1") if path.startswith("build/")
        }
        assert sorted(on_branch) == variants
        # The loader's own choice where this host has both; the CPU variant asked for where only it was built.
        choose = "" if len(variants) > 1 else ', backend="cpu"'
        script = (
            "import kernels, torch\n"
            f'gray = kernels.get_kernel("kernel-matrix/gray-tvm-ffi", version=1{choose})\n'
            "rgb = torch.full((4, 5, 3), 100, dtype=torch.uint8)\n"
            "out = torch.empty((4, 5), dtype=torch.uint8)\n"
            "assert gray.img2gray(rgb, out).eq(100).all()\n"
            "print(gray.__file__)\n"
        )
        loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    import torch

    expected = next(v for v in variants if ("-cpu-" in v) == (torch.version.cuda is None or len(variants) == 1))
    assert f"/build/{expected}/__init__.py" in loaded.stdout, loaded.stdout


@pytest.mark.processes
def test_the_plan_says_a_tvm_ffi_matrix_makes_no_wheel(tmp_path):
    """release-wheels runs only where some job made a wheel (the plan's `wheels` output)."""
    import os

    kernel = tvm_ffi_kernel(tmp_path)
    output = tmp_path / "github_output"
    result = kernel_matrix(
        "matrix",
        "--kernel-dir",
        str(kernel),
        "--json",
        "--github-output",
        env={**os.environ, "GITHUB_OUTPUT": str(output)},
    )
    assert result.returncode == 0, result.stderr
    lines = output.read_text().splitlines()
    assert lines[-1] == "wheels=false"
    jobs = json.loads(next(line for line in lines if line.startswith("jobs=")).removeprefix("jobs="))
    assert jobs["include"] and not any(job["wheel"] for job in jobs["include"])
