"""torch 2.15 in the version tables, and what each torch's wheel requires beside it
(data/torch_wheels.yaml): the Python its builder images use, and the CUDA libraries whose
absence `check-abi` warns of (the libcurand case: torch 2.15's wheel no longer brings it)."""

import json
import shutil
import subprocess

import pytest
from conftest import REPO, kernel_matrix
from packaging.specifiers import SpecifierSet

from kernel_matrix import data
from kernel_matrix.checking.abi import abi_reports, target_torch
from kernel_matrix.checking.elf import NotElf, needed_libraries
from kernel_matrix.containers import images
from kernel_matrix.errors import EngineError, ExitCode
from kernel_matrix.planning import torch_wheels
from kernel_matrix.planning.matrix import load_matrix, select

RUNNERS = "archs:\n  x86_64: {build-runner: [a], gpu-test-runner: [b]}\n"


def test_every_torch_release_has_its_wheels_row_and_every_library_is_known():
    wheels, libraries = data.load("torch_wheels"), data.load("cuda_libraries")
    assert set(wheels) == set(data.load("torch_releases"))
    for minor, row in wheels.items():
        assert set(row) == {"python", "cuda-libraries"}, minor
        SpecifierSet(row["python"])  # parses
        assert set(row["cuda-libraries"]) <= set(libraries), minor
    files = [f for names in libraries.values() for f in names]
    assert len(files) == len(set(files))  # one library per file


def test_the_full_profile_plans_torch_215_with_the_cuda_builds_it_ships(tmp_path):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(f'torch:\n  "2.14": all\n  "2.15": all\n{RUNNERS}')
    cells = select(load_matrix(path), profile="full")
    ships = data.load("torch_releases")["2.15"]
    of_215 = {c.variant.cuda for c in cells if c.variant.torch == "2.15"}
    assert of_215 == {*ships["cuda"], None}  # its CUDA builds and the CPU one
    assert "12.6" in {c.variant.cuda for c in cells if c.variant.torch == "2.14"}
    assert "12.6" not in of_215  # 2.15 dropped CUDA 12.6 (the last build for sm_50/60/70)
    by_cuda = {c.variant.cuda: c for c in cells if c.variant.torch == "2.15"}
    assert by_cuda[ships["pypi"]].torch_index == "pypi"
    assert all(c.torch_index.endswith(f"/whl/{c.variant.compute}") for k, c in by_cuda.items() if k != ships["pypi"])
    # No CUDA 13 capability below Turing: what 2.15's own builds dropped is not planned either.
    assert all(min(float(x) for x in c.capabilities) >= 7.5 for c in by_cuda.values() if c.capabilities)


def test_the_repositorys_matrix_builds_torch_215():
    names = {c.name for c in load_matrix(REPO / "build_matrix.yaml").cells}
    for cuda in data.load("torch_releases")["2.15"]["cuda"]:
        assert f"torch215-cxx11-cu{cuda.replace('.', '')}-x86_64-linux" in names


def test_builders_use_the_oldest_python_the_torch_installs_on(monkeypatch):
    assert torch_wheels.allows_python("2.14", "3.10") and not torch_wheels.allows_python("2.15", "3.10")
    assert images.builder_python("2.15", images.OFFICIAL_PYTHONS, "official") == "3.11"
    assert images.builder_python("2.15", ("3.10", "3.12", "3.11"), "official") == "3.11"
    assert torch_wheels.allows_python("9.9", "3.6")  # a minor the table lacks: nothing refused
    monkeypatch.setitem(data.load("torch_wheels"), "9.8", {"python": ">=3.12", "cuda-libraries": []})
    assert images.builder_python("9.8", images.OFFICIAL_PYTHONS, "official") == "3.12"
    with pytest.raises(EngineError) as refused:
        images.builder_python("9.8", (images.OFFLINE_TARGET_PYTHON,), "offline (Debian bookworm)")
    assert str(refused.value) == (
        "torch 9.8 needs Python >=3.12, and offline (Debian bookworm) builders have Python 3.11 only"
    )


def test_the_official_builder_is_made_with_that_python(monkeypatch, tmp_path):
    made = {}
    monkeypatch.setattr(images, "present", lambda client, tag: False)
    monkeypatch.setattr(images, "_make_official", lambda client, tag, dockerfile, args, base, log: made.update(args))
    monkeypatch.setattr(images, "user_cache", lambda: tmp_path)
    images.official_builder(None, "base", torch="2.15", cuda="13.2", torch_index="pypi", log=lambda m: None)
    assert made["PYTHON"] == "python3.11" and made["TORCH_SPEC"] == "torch==2.15.*"
    dockerfile = images.DOCKERFILE.read_text()
    assert "ARG PYTHON=" in dockerfile and '"${PYTHON}" -m venv /opt/km' in dockerfile


@pytest.mark.parametrize(
    ("needed", "torch", "missing"),
    [
        (["libcurand.so.10", "libc.so.6"], "2.15", [("libcurand.so.10", "curand", "2.14")]),
        (["libcurand.so.10"], "2.14", []),
        (["libcublas.so.13", "libcudart.so.13", "libcuda.so.1", "libtorch.so"], "2.15", []),
        (["libcurand.so.10"], "9.9", []),  # a torch the table lacks: unknown, not missing
    ],
)
def test_missing_libraries(needed, torch, missing):
    found = torch_wheels.missing_libraries(needed, torch)
    assert [(m.needed, m.library, m.last_with_it) for m in found] == missing


def _shared_library(tmp_path, name, *, links=()):
    """A real ELF shared library, linked with gcc against stand-ins of `links` (sonames)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    flags = []
    for soname in links:
        stem = soname.split(".so")[0]
        (lib / f"{stem}.c").write_text("int stand_in(void) { return 0; }\n")
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", lib / f"{stem}.so", lib / f"{stem}.c"],
            check=True,
        )
        flags += [f"-l{stem.removeprefix('lib')}"]
    source = tmp_path / "ops.c"
    source.write_text("int ops(void) { return 1; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,--no-as-needed", "-o", name, source, f"-L{lib}", *flags], check=True
    )
    return name


def _variant(tmp_path, name, torch=None, links=()):
    variant = tmp_path / "build" / name
    variant.mkdir(parents=True)
    _shared_library(tmp_path, variant / "_ops_0123456.abi3.so", links=links)
    provenance = {"provenance": {"toolchain": {"torch": torch}}} if torch else {}
    (variant / "metadata.json").write_text(json.dumps({"name": "ops", **provenance}))
    return variant


def test_needed_libraries_are_read_from_the_elf_dynamic_section(tmp_path):
    library = _shared_library(tmp_path, tmp_path / "x.so", links=["libcurand.so.10", "libnccl.so.2"])
    assert needed_libraries(library)[:2] == ["libcurand.so.10", "libnccl.so.2"]
    text = tmp_path / "not.so"
    text.write_text("not an ELF file\n")
    with pytest.raises(NotElf):
        needed_libraries(text)
    truncated = tmp_path / "cut.so"
    truncated.write_bytes(library.read_bytes()[:200])
    with pytest.raises(NotElf):
        needed_libraries(truncated)


def test_the_target_torch_is_the_one_built_against_else_the_one_named(tmp_path):
    assert target_torch(_variant(tmp_path, "torch214-cxx11-cu132-x86_64-linux", torch="2.15.0+cu132")) == "2.15"
    assert target_torch(_variant(tmp_path, "torch215-cxx11-cu132-x86_64-linux")) == "2.15"
    assert target_torch(_variant(tmp_path, "torch29-cxx11-cu128-x86_64-linux")) == "2.9"
    assert target_torch(_variant(tmp_path, "torch-2.15-cxx11-cuda-13.2-cpython-3.11-abi3-x86_64-linux")) == "2.15"
    assert target_torch(_variant(tmp_path, "torch-stable-abi210-cu130-x86_64-linux")) is None


@pytest.mark.processes
def test_check_abi_warns_of_a_cuda_library_the_torchs_wheel_no_longer_installs(tmp_path):
    variant = _variant(tmp_path, "torch215-cxx11-cu132-x86_64-linux", "2.15.0", links=["libcurand.so.10"])
    result = kernel_matrix("check-abi", str(variant), "--manylinux", "none")
    assert result.returncode == 0, result.stderr  # a warning, not a failure: it may be installed
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]
    assert line.startswith("warning: torch215-cxx11-cu132-x86_64-linux: _ops_0123456.abi3.so: needs libcurand.so.10")
    assert "torch 2.15's wheel no longer installs (torch 2.14's did)" in line
    # The same library built for torch 2.14, whose wheel brings cuRAND: nothing to say.
    older = _variant(tmp_path, "torch214-cxx11-cu130-x86_64-linux", "2.14.1", links=["libcurand.so.10"])
    result = kernel_matrix("check-abi", str(older), "--manylinux", "none")
    assert result.returncode == 0 and "warning:" not in result.stderr, result.stderr
    assert [r.warnings for r in abi_reports(older, manylinux=None)] == [[]]


@pytest.mark.processes
def test_a_library_that_is_no_elf_is_one_line(tmp_path):
    variant = tmp_path / "torch215-cxx11-cpu-x86_64-linux"
    variant.mkdir()
    (variant / "_ops.abi3.so").write_text("not a library\n")
    (variant / "metadata.json").write_text("{}")
    result = kernel_matrix("check-abi", str(variant), "--manylinux", "none")
    assert result.returncode == ExitCode.CONFIG and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "cannot check the ABI" in result.stderr


def test_an_environment_whose_python_the_cells_torch_refuses_is_one_line(monkeypatch, capsys):
    """What test-variant asks before it installs the cell's torch (pip would only say it cannot resolve)."""
    import sys

    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    monkeypatch.setitem(data.load("torch_wheels"), "9.8", {"python": f">{this}", "cuda-libraries": []})
    assert torch_wheels.refuses_this_python("torch==2.14.*") is None
    assert torch_wheels.main(["torch==9.8.*"]) == ExitCode.TOOLCHAIN
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"error: torch 9.8 needs Python >{this}, and {sys.executable} is Python {this}: "
        "make the environment with a newer one (PYTHON=python3.11)"
    )
    # test-variant asks the environment's own Python, and stops with TOOLCHAIN where it refuses.
    source = (REPO / "kernel_matrix" / "running" / "test_variant.py").read_text()
    assert '[env_python, "-m", "kernel_matrix.planning.torch_wheels", cell["torch_spec"]]' in source
