"""`kernel-matrix clean`: removes artifacts, never sources or anything outside."""

import subprocess

import pytest
from conftest import kernel_matrix, matrix_text

KEPT_VARIANT = "torch214-cxx11-cu130-x86_64-linux"
STALE_VARIANT = "torch29-cxx11-cu128-x86_64-linux"


def _project(tmp_path):
    project = tmp_path / "project"
    outside = tmp_path / "outside" / "__pycache__"
    outside.mkdir(parents=True)
    (outside / "keep.pyc").write_bytes(b"outside the project")
    files = {
        "src/pkg/module.py": "x = 1\n",
        "src/pkg/__pycache__/module.cpython-311.pyc": "bytecode",
        "src/pkg.egg-info/PKG-INFO": "meta",
        "stray.pyc": "bytecode",
        "tests/.pytest_cache/v/cache": "{}",
        "vendored/__pycache__/tracked.pyc": "tracked on purpose",
        f"build/{KEPT_VARIANT}/metadata.json": "{}",
        f"build/{STALE_VARIANT}/metadata.json": "{}",
        f"build/.{KEPT_VARIANT}.staging-abc123/partial.so": "half a build",
        "build/logs/x.log": "log",
        "build/notes.txt": "not ours to judge",
        # A kernel the matrix no longer names (removed, or renamed): its build folder is stale.
        f"build/gone-kernel/{KEPT_VARIANT}/metadata.json": "{}",
        "build/gone-kernel/logs/x.log": "log",
        # A folder of the user's that holds a variant and something else: not ours to judge.
        f"build/mine/{KEPT_VARIANT}/metadata.json": "{}",
        "build/mine/notes.txt": "mine",
    }
    for name, text in files.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (project / "src" / "link").symlink_to(outside.parent)
    (project / "build_matrix.yaml").write_text(matrix_text(project))
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "add", "src/pkg/module.py", "build_matrix.yaml"], check=True)
    subprocess.run(["git", "-C", str(project), "add", "-f", "vendored/__pycache__/tracked.pyc"], check=True)
    return project, outside


def _all_files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)


@pytest.mark.processes
def test_dry_run_lists_and_removes_nothing(tmp_path):
    project, _ = _project(tmp_path)
    before = _all_files(project)
    result = kernel_matrix("clean", "--dry-run", cwd=project)
    assert result.returncode == 0, result.stderr
    listed = sorted(line.removeprefix("would remove ") for line in result.stdout.splitlines())
    assert listed == sorted(
        [
            "src/pkg/__pycache__",
            "src/pkg.egg-info",
            "stray.pyc",
            "tests/.pytest_cache",
            f"build/{STALE_VARIANT}",
            f"build/.{KEPT_VARIANT}.staging-abc123",
            "build/gone-kernel",
            "build/logs",
        ]
    )
    assert _all_files(project) == before


@pytest.mark.processes
def test_clean_removes_artifacts_only(tmp_path):
    project, outside = _project(tmp_path)
    sources = [f"kernel/{name}" for name in _all_files(project / "kernel")]  # the matrix's kernel
    result = kernel_matrix("clean", cwd=project)
    assert result.returncode == 0, result.stderr
    assert _all_files(project) == sorted(
        [
            "build/mine/notes.txt",
            f"build/mine/{KEPT_VARIANT}/metadata.json",
            "build/notes.txt",
            f"build/{KEPT_VARIANT}/metadata.json",
            "build_matrix.yaml",
            "src/pkg/module.py",
            "vendored/__pycache__/tracked.pyc",
        ]
        + sources
    )
    assert (outside / "keep.pyc").is_file() and (project / "src" / "link").is_symlink()


@pytest.mark.processes
def test_clean_with_kernel_dir_knows_the_variants_of_that_kernel(tmp_path):
    """`build --kernel-dir K` from a project without a matrix file: `clean --kernel-dir K` there
    keeps K's variants (of the default matrix) and removes the others."""
    from conftest import KERNEL_DIR

    project = tmp_path / "project"
    for name in (KEPT_VARIANT, STALE_VARIANT):
        (project / "build" / name).mkdir(parents=True)
        (project / "build" / name / "metadata.json").write_text("{}")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    result = kernel_matrix("clean", "--kernel-dir", str(KERNEL_DIR), "--dry-run", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"would remove build/{STALE_VARIANT}"]
    outside = tmp_path / "outside"
    outside.mkdir()
    result = kernel_matrix("clean", "--kernel-dir", str(KERNEL_DIR), cwd=outside)
    assert result.returncode == 2 and result.stderr == (
        f"error: {outside}: clean acts only on a project inside a git checkout (the matrix file's folder), and "
        "this folder is not in one (nothing removed)\n"
    )
