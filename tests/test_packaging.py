"""What an installed (not editable) kernel-matrix carries: CI's build jobs run
`pip install .`, so every file the service reads at run time must be package data."""

import shutil
import subprocess
import sys
import zipfile

from conftest import REPO


def test_the_package_ships_every_file_it_reads(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "kernel_matrix", source / "kernel_matrix", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        check=True,
    )
    (wheel,) = tmp_path.glob("kernel_matrix-*.whl")
    files = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "kernel_matrix/docker/builder.Dockerfile",  # official builder images
        "kernel_matrix/include/registration.h",  # every binding compile
        "kernel_matrix/compat/glibc-2.28/sys/single_threaded.h",  # manylinux_2_28
        "kernel_matrix/templates/module.cpp.in",
        "kernel_matrix/templates/_ops.py.in",
        "kernel_matrix/data/torch_releases.yaml",
        "kernel_matrix/py.typed",  # type checkers read the package's annotations
    }
    assert expected <= files, sorted(expected - files)
    # docker/builder.Dockerfile, where readers look for it, is the same file.
    assert (REPO / "docker" / "builder.Dockerfile").resolve() == REPO / "kernel_matrix/docker/builder.Dockerfile"
