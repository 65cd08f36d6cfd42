"""Legacy wheels: names, tags and metadata as pip sees them, and the whole path
(cibuildwheel in the builder image, install into a fresh environment, the
kernel's suite against the installed package)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import KERNEL_DIR, ONE_KERNEL_TEST, REPO, kernel_matrix
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from kernel_matrix.planning.matrix import load_matrix, select
from kernel_matrix.releasing.wheels import cibuildwheel_env, wheel_spec, write_project

MATRIX = load_matrix(REPO / "build_matrix.yaml")


def cell(name: str):
    (found,) = select(MATRIX, variants=[name])
    return found


def spec_for(name: str):
    return wheel_spec(cell(name), name="img2gray", package="img2gray", kernel_version=1, license="Apache-2.0")


def test_versions_and_requirements_name_the_torch_minor():
    cuda = spec_for("torch211-cxx11-cu130-x86_64-linux")
    assert (cuda.version, cuda.torch_requirement) == ("1+torch211cu130", "torch>=2.11,<2.12")
    cpu = spec_for("torch214-cxx11-cpu-x86_64-linux")
    assert (cpu.version, cpu.torch_requirement) == ("1+torch214cpu", "torch>=2.14,<2.15")


def test_cibuildwheel_is_pointed_at_our_image_offline_and_excludes_torchs_libraries():
    env = cibuildwheel_env(cell("torch214-cxx11-cu130-x86_64-linux"), "kernel-matrix/builder:x")
    assert env["CIBW_MANYLINUX_X86_64_IMAGE"] == "kernel-matrix/builder:x"
    assert env["CIBW_BUILD"] == "cp311-manylinux_x86_64"
    engine = env["CIBW_CONTAINER_ENGINE"]
    assert "--network=none" in engine and "disable_host_mount: true" in engine
    repair = env["CIBW_REPAIR_WHEEL_COMMAND"]
    assert repair.startswith("auditwheel repair --plat manylinux_2_28_x86_64 --only-plat ")
    for library in ("libtorch*", "libc10*", "libcudart*"):
        assert f"--exclude '{library}'" in repair


def _fresh_env(path: Path) -> Path:
    """A new virtual environment that sees the development environment's torch
    (through a .pth file), as a user's environment with torch installed."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    # The venv's own old setuptools would hide the one torch requires.
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], check=True)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "dev_torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _minors() -> tuple[str, str]:
    """This torch's minor, and another of the matrix's (what a wrong wheel requires)."""
    import torch

    minor = ".".join(torch.__version__.split(".")[:2])
    return minor, "2.12" if minor == "2.11" else "2.11"


@pytest.fixture(scope="module")
def host_wheels(built, tmp_path_factory):
    """Wheels of this host's CPU variant made by the project's own setuptools
    project (pip wheel, no repair): one requiring this torch, one another minor."""
    variant = built["cpu"]
    minor, other = _minors()
    wheels = {}
    for label, torch_minor in (("matching", minor), ("other", other)):
        spec = wheel_spec(
            cell(f"torch{torch_minor.replace('.', '')}-cxx11-cpu-x86_64-linux"),
            name="img2gray",
            package="img2gray",
            kernel_version=1,
            license="Apache-2.0",
        )
        wheels[label] = project_wheel(variant, spec, tmp_path_factory.mktemp(label))
    return wheels


def project_wheel(variant: Path, spec, work: Path) -> Path:
    """The wheel of variant that the project's own setuptools project makes (pip wheel, no repair)."""
    project = work / "project"
    write_project(variant, project, spec, variant.name)
    out = work / "wheelhouse"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(project)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


def test_the_wheel_is_abi3_for_cpython_39_and_requires_its_torch_minor(host_wheels):
    wheel = host_wheels["other"]
    other = _minors()[1]
    major, minor = other.split(".")
    name, version, _, tags = parse_wheel_filename(wheel.name)
    assert (name, str(version)) == ("img2gray", f"1+torch{major}{minor}cpu")
    assert {(t.interpreter, t.abi) for t in tags} == {("cp39", "abi3")}
    with zipfile.ZipFile(wheel) as archive:
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        files = archive.namelist()
    assert metadata.get_all("Requires-Dist") == [f"torch<{major}.{int(minor) + 1},>={other}"]
    assert any(f.startswith("img2gray/_img2gray_cpu_") and f.endswith(".abi3.so") for f in files)
    assert {"img2gray/__init__.py", "img2gray/_ops.py", "img2gray/metadata.json"} <= set(files)
    # This interpreter (CPython >= 3.9 on this platform) accepts the tags.
    assert set(tags) & set(sys_tags())


def test_pip_accepts_the_matching_wheel_and_refuses_the_wrong_torch(host_wheels, tmp_path):
    python = _fresh_env(tmp_path / "env")
    dry = [str(python), "-m", "pip", "install", "--dry-run", "--no-index", "--disable-pip-version-check"]
    # Only the torch the environment has: no folder of wheels this machine's pip settings name.
    alone = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    ok = subprocess.run([*dry, str(host_wheels["matching"])], capture_output=True, text=True, check=False, env=alone)
    assert ok.returncode == 0, ok.stderr
    assert "Would install img2gray-1+torch" in ok.stdout
    wrong = subprocess.run([*dry, str(host_wheels["other"])], capture_output=True, text=True, check=False, env=alone)
    assert wrong.returncode != 0
    # pip's own resolver says why: the requirement, not a kernel-matrix message.
    said = wrong.stdout + wrong.stderr
    major, minor = _minors()[1].split(".")
    label = f"1+torch{major}{minor}cpu"
    upper = f"{major}.{int(minor) + 1}"
    # As a conflict with the torch installed, or as no torch of that minor to be found (pip's
    # wording depends on what its resolver saw first): either way it names the requirement.
    conflict = f"img2gray {label} depends on torch<{upper} and >={major}.{minor}" in said
    unavailable = f"No matching distribution found for torch<{upper},>={major}.{minor}" in said
    assert conflict or unavailable, said


@pytest.mark.build
def test_cibuildwheel_makes_a_repaired_wheel_that_installs_and_passes_the_suite(
    engine, kernel_copy, object_cache, local_cuda_cell, tmp_path
):
    """The whole path on this host's CUDA cell: container build, cibuildwheel in
    the same builder image, auditwheel leaving torch's libraries out, abi3audit,
    then pip into a fresh environment and a test of the kernel's suite on the installed package (the whole
    suite runs in test_kernel_suite.py)."""
    from kernel_matrix.planning.toolchain import find_nvcc

    if find_nvcc() is None:
        pytest.skip("no nvcc: no CUDA cell builds here")
    name = local_cuda_cell.name  # PyPI's newest CUDA 13.0 torch: what the builder image can download
    build_dir = tmp_path / "build"
    on = ["--variant", name, "--image", "offline", "--build-dir", str(build_dir)]
    cache = ("--cache-dir", str(object_cache))  # test_container_build.py compiled this cell's objects
    kernel_matrix("build", *on, "--kernel-dir", str(kernel_copy), *cache, check=True)
    result = kernel_matrix("wheels", *on, "--kernel-dir", str(kernel_copy))
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (build_dir / "wheels").glob("*.whl")
    assert wheel.name == f"img2gray-1+{name[:8]}cu130-cp39-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel) as archive:
        files = archive.namelist()
    assert not [f for f in files if ".libs/" in f], f"auditwheel vendored libraries: {files}"
    assert set(parse_wheel_filename(wheel.name)[3]) & set(sys_tags())

    python = _fresh_env(tmp_path / "env")
    install = [str(python), "-m", "pip", "install", "--no-index", "--disable-pip-version-check", str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    tested = kernel_matrix(
        "test", "--installed", "img2gray", "--python", str(python), "--kernel-dir", str(KERNEL_DIR), *ONE_KERNEL_TEST
    )
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr
    assert "passed img2gray (installed)" in tested.stderr


def test_a_kernels_subpackages_are_in_its_wheel(built, tmp_path):
    """relu's variants hold a layers/ subpackage: the wheel carries it (it copied files only)."""
    import shutil

    variant = tmp_path / built["cpu"].name
    shutil.copytree(built["cpu"], variant)
    (variant / "layers").mkdir()
    (variant / "layers" / "__init__.py").write_text("class ReLU: ...\n")
    minor, _ = _minors()
    spec = wheel_spec(
        cell(f"torch{minor.replace('.', '')}-cxx11-cpu-x86_64-linux"),
        name="img2gray",
        package="img2gray",
        kernel_version=1,
        license="Apache-2.0",
    )
    files = zipfile.ZipFile(project_wheel(variant, spec, tmp_path)).namelist()
    assert {"img2gray/__init__.py", "img2gray/layers/__init__.py", "img2gray/metadata.json"} <= set(files)
    assert any(f.endswith(".abi3.so") for f in files)
