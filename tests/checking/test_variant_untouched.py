"""Nothing `kernel-matrix test` (or the build's load check) runs may write into the variant
folder: since kernels 0.18 the loader checks a variant's files against its metadata.json
digest on every load, local ones included, so a file a suite leaves there fails every later
load (issue 36). The variants are Python-only kernels built by the real build (digest
included; nothing compiled), tested by the real CLI, pytest and the installed loader."""

import pathlib
import sys

import pytest
from conftest import kernel_matrix

from kernel_matrix.building.native_build import build_noarch
from kernel_matrix.checking.load import load_check
from kernel_matrix.errors import BuildError, ExitCode

TOML = """[general]
name = "{name}"
version = 1
license = "MIT"
backends = ["cpu"]

[general.hub]
repo-id = "kernel-matrix/{name}"

[torch-noarch]
"""
LOADS = """import kernels


def load():
    return kernels.get_kernel("kernel-matrix/{name}", version=1)
"""
# The first case writes beside the kernel it loaded; the second loads it again, which the
# loader >= 0.18 refuses: the run must name the file, not only the second case's failure.
WRITES = """import pathlib

from loads import load


def test_a_writes_beside_the_kernel():
    (pathlib.Path(load().__file__).parent / "{file}").write_text("scratch")


def test_b_loads_it_again():
    assert load().double(2) == 4
"""
READS = """from loads import load


def test_loads():
    assert load().double(2) == 4
"""


def kernel(root: pathlib.Path, name: str, tests: dict[str, str], package: str = "def double(x):\n    return x * 2\n"):
    folder = root / name
    (folder / "torch-ext" / name).mkdir(parents=True)
    (folder / "torch-ext" / name / "__init__.py").write_text(package)
    (folder / "build.toml").write_text(TOML.format(name=name))
    (folder / "tests").mkdir()
    (folder / "tests" / "loads.py").write_text(LOADS.format(name=name))
    for file, text in tests.items():
        (folder / "tests" / file).write_text(text)
    return folder


@pytest.mark.processes
def test_a_suite_that_writes_into_the_variant_fails_naming_the_file(tmp_path):
    folder = kernel(tmp_path, "scribble", {"test_scribble.py": WRITES.format(file="notes.txt")})
    (variant,) = build_noarch(folder, tmp_path / "build")
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(folder))
    assert result.returncode == ExitCode.TEST, result.stdout + result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"{variant / 'notes.txt'}: the test suite of scribble wrote this file in the variant folder" in line
    assert "metadata.json digest" in line


@pytest.mark.processes
def test_a_suite_that_leaves_the_variant_alone_passes(tmp_path):
    folder = kernel(tmp_path, "tidy", {"test_tidy.py": READS})
    (variant,) = build_noarch(folder, tmp_path / "build")
    before = sorted(p.name for p in variant.iterdir())
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(folder))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in variant.iterdir()) == before


@pytest.mark.processes
def test_a_kernel_whose_import_writes_into_its_folder_fails_the_load_check(tmp_path):
    writes_on_import = "import pathlib\n\n(pathlib.Path(__file__).parent / 'cache.bin').write_bytes(b'0')\n"
    folder = kernel(tmp_path, "importer", {}, package=writes_on_import)
    (variant,) = build_noarch(folder, tmp_path / "build")
    with pytest.raises(BuildError) as raised:
        load_check(variant, variant.name, python=sys.executable, backend="cpu")
    assert str(raised.value).startswith(f"{variant / 'cache.bin'}: importing torch-cpu wrote this file")
