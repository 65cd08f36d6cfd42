"""Attacks from issue 12 that need no container engine: a build.toml whose
names or paths leave the kernel directory, a Python package linking to host
files, `clean` pointed outside a project, bad option values, a variant carrying
a link, and a poisoned object-cache merge. Each is refused with one line and a
distinct exit code, and nothing is written outside the build directory."""

import hashlib
import json
import os
import subprocess

import pytest
from conftest import REPO, kernel_matrix, matrix_text

from kernel_matrix.building.objcache import ObjectCache
from kernel_matrix.containers.container_output import UnsafeOutputError, check_tree, copy_regular


def snapshot(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_error(result, code):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def two_errors(result):
    """Exit 2 and an error line for each of two problems: set_toml's edit lands in both
    [kernel.*] sections (CPU and CUDA), and build.toml reports every problem."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines), result.stderr
    return lines


def set_toml(kernel, old, new):
    path = kernel / "build.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "a/b", "..", "x.y"])
@pytest.mark.processes
def test_a_kernel_section_name_may_not_be_a_path(kernel_copy, tmp_path, name):
    set_toml(kernel_copy, "[kernel.img2gray_cpu]", f"[kernel.{json.dumps(name)}]")
    before = snapshot(tmp_path)
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "build")
    )
    line = one_error(result, 2)
    number = (kernel_copy / "build.toml").read_text().splitlines().index(f"[kernel.{json.dumps(name)}]") + 1
    assert line.startswith(f"error: {kernel_copy / 'build.toml'}:{number}:") and "section name" in line
    assert [p for p in snapshot(tmp_path) if p not in before and not p.startswith("build")] == []
    assert not (tmp_path.parent / "x").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("key", "entry"),
    [
        ('"csrc/img2gray_cpu.cpp",', '"../../elsewhere/x.cpp",'),
        ('"csrc/img2gray_cpu.cpp",', '"/etc/hostname",'),
        ('"csrc/img2gray_cpu.cpp",', '"csrc/link.cpp",'),
    ],
    ids=["parent", "absolute", "link-out"],
)
@pytest.mark.processes
def test_sources_must_be_inside_the_kernel(kernel_copy, tmp_path, key, entry):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.cpp").write_text("int x;\n")
    (kernel_copy / "csrc" / "link.cpp").symlink_to(outside / "x.cpp")
    set_toml(kernel_copy, key, entry)
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "build")
    )
    for line in two_errors(result):
        assert "outside the kernel directory" in line and f"{kernel_copy / 'build.toml'}:" in line


@pytest.mark.processes
def test_include_dirs_must_be_inside_the_kernel(kernel_copy, tmp_path):
    set_toml(kernel_copy, 'cxx-flags = ["-ffp-contract=off"]', 'include = ["/usr/include"]')
    for line in two_errors(kernel_matrix("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy))):
        assert "include entry '/usr/include' is outside" in line


@pytest.mark.processes
def test_the_python_package_may_not_link_to_host_files(kernel_copy, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST SECRET")
    (kernel_copy / "torch-ext" / "img2gray" / "data.py").symlink_to(secret)
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "build")
    )
    line = one_error(result, 2)
    assert "data.py: a link out of" in line
    assert not any(
        "HOST SECRET" in p.read_text(errors="replace") for p in (tmp_path / "build").rglob("*") if p.is_file()
    )
    # A linked folder, even one inside the kernel, is not followed, and the line says what to do instead.
    (kernel_copy / "torch-ext" / "img2gray" / "data.py").unlink()
    (kernel_copy / "torch-ext" / "img2gray" / "more").symlink_to(kernel_copy / "csrc", target_is_directory=True)
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "build")
    )
    line = one_error(result, 2)
    assert "more: a link to a folder, which is not followed" in line and "copy the folder" in line


# --- clean --------------------------------------------------------------------------------------------------------


def victim(tmp_path):
    """A folder that is not a project, full of what clean removes in a project."""
    folder = tmp_path / "victim"
    for name in ("pkg.egg-info/PKG-INFO", "__pycache__/m.pyc", "CMakeFiles/x", "CMakeCache.txt", "logs/x.log"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("precious")
    return folder


@pytest.mark.processes
def test_clean_outside_a_git_checkout_removes_nothing(tmp_path):
    folder = victim(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "build_matrix.yaml").write_text(matrix_text(elsewhere))
    before = snapshot(tmp_path)
    for dry in ([], ["--dry-run"]):
        result = kernel_matrix(
            "clean", "-f", str(elsewhere / "build_matrix.yaml"), "--build-dir", ".", *dry, cwd=folder
        )
        assert "not in one" in one_error(result, 2)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("build_dir", [".", "..", "/", "../outside"])
@pytest.mark.processes
def test_clean_refuses_a_build_dir_at_or_above_the_project(tmp_path, build_dir):
    project = victim(tmp_path) / "project"
    project.mkdir()
    (project / "build_matrix.yaml").write_text(matrix_text(project))
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    before = snapshot(tmp_path)
    result = kernel_matrix("clean", "--build-dir", build_dir, cwd=project)
    assert "clean only removes a build folder inside the project" in one_error(result, 2)
    assert snapshot(tmp_path) == before


# --- option values ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--build-dir", "FILE"],
        ["build", "--build-dir", "FILE/below"],
        ["build", "-j", "0"],
        ["build", "-j", "-5"],
        ["build", "-j", "many"],
        ["publish", "--dry-run", "--tag", "../x"],
        ["publish", "--dry-run", "--tag", "v1 2"],
        ["publish", "--dry-run", "--tag", "refs/heads/main"],
        ["publish", "--dry-run", "--tag", "v1.lock"],
        ["publish", "--dry-run", "--repo-id", ""],
        ["publish", "--dry-run", "--repo-id", "../../x"],
        ["matrix", "--profile"],
        ["no-such-command"],
    ],
)
@pytest.mark.processes
def test_bad_option_values_are_one_line_and_exit_2(tmp_path, argv):
    afile = tmp_path / "a-file"
    afile.write_text("not a folder")
    argv = [a.replace("FILE", str(afile)) for a in argv]
    before = snapshot(tmp_path)
    one_error(kernel_matrix(*argv), 2)
    assert snapshot(tmp_path) == before and afile.read_text() == "not a folder"


@pytest.mark.parametrize("tag", ["v1", "v1.2.0", "release/2026-12", "v1+cu130"])
def test_good_tags_pass(tag):
    from kernel_matrix.releasing.publish import check_tag

    assert check_tag(tag) == tag


# --- what a container (or an artifact) hands back ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo", "dirlink"])
def test_only_plain_files_and_folders_come_back(tmp_path, kind):
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text("HOST SECRET")
    (out / "logs" / "ok.log").write_text("fine")
    target = out / "logs" / "x"
    {
        "symlink": lambda: target.symlink_to(secret),
        "hardlink": lambda: os.link(secret, target),
        "fifo": lambda: os.mkfifo(target),
        "dirlink": lambda: target.symlink_to(tmp_path),
    }[kind]()
    with pytest.raises(UnsafeOutputError, match="logs/x, a "):
        check_tree(out)
    if kind in ("symlink", "fifo"):
        with pytest.raises((UnsafeOutputError, OSError)):
            copy_regular(target, tmp_path / "copy")
        assert not (tmp_path / "copy").exists() or (tmp_path / "copy").read_text() != "HOST SECRET"


def test_publish_refuses_a_variant_holding_a_link(tmp_path):
    from kernel_matrix.config.buildtoml import load_build_toml
    from kernel_matrix.errors import ConfigError
    from kernel_matrix.releasing.release import checked_metadata

    variant = tmp_path / "torch214-cxx11-cpu-x86_64-linux"
    variant.mkdir()
    (variant / "metadata.json").write_text("{}")
    (variant / "evil.py").symlink_to("/etc/passwd")
    with pytest.raises(ConfigError, match="evil.py, a symbolic link: refused"):
        checked_metadata(variant, load_build_toml(REPO / "kernel"), manylinux=None)


def test_a_poisoned_cache_merge_changes_nothing_it_should_not(tmp_path):
    shared, staged = ObjectCache(tmp_path / "shared"), tmp_path / "staged"
    good, other = b"good object", b"other object"
    good_name, other_name = hashlib.sha256(good).hexdigest(), hashlib.sha256(other).hexdigest()
    ObjectCache._write(shared.root / "objects" / good_name, good)
    key = "ab" + "0" * 62
    entry = {"inputs": {"/src/a.cu": "1" * 64}, "object": good_name}
    ObjectCache._write(shared.root / "manifests" / "ab" / f"{key}.json", json.dumps([entry]).encode())
    # The staged side: an object under another's name, a replacement for an existing entry, junk entries.
    ObjectCache._write(staged / "objects" / good_name, b"evil bytes")
    ObjectCache._write(staged / "objects" / ("f" * 64), b"not what the name says")
    ObjectCache._write(staged / "objects" / other_name, other)
    hostile = [
        {"inputs": {"/src/a.cu": "1" * 64}, "object": other_name},  # same inputs: the newer one, first
        {"inputs": {"relative/path": "2" * 64}, "object": other_name},
        {"inputs": {"/src/b.cu": "3" * 64}, "object": "f" * 64},  # object refused above
        {"inputs": "junk", "object": other_name},
        {"inputs": {"/src/c.cu": "4" * 64}, "object": other_name},  # the one sound new entry
    ]
    ObjectCache._write(staged / "manifests" / "ab" / f"{key}.json", json.dumps(hostile).encode())
    ObjectCache._write(staged / "manifests" / "zz" / "../../escape.json", b"[]")
    # `shared` is one kernel's scope at one trust level, and staged what a build of that kernel wrote
    # (the host never merges one kernel's writes into another's scope: test_cache_poisoning.py). Within
    # it, newer sound entries go first, one with the same inputs replacing the older; objects must hash
    # to their names and never overwrite one; malformed entries and paths out of the cache are dropped.
    assert shared.merge(staged) == 2
    assert (shared.root / "objects" / good_name).read_bytes() == good
    assert not (shared.root / "objects" / ("f" * 64)).exists()
    merged = json.loads((shared.root / "manifests" / "ab" / f"{key}.json").read_text())
    assert merged == [
        {"inputs": {"/src/a.cu": "1" * 64}, "object": other_name},
        {"inputs": {"/src/c.cu": "4" * 64}, "object": other_name},
    ]
    assert not (tmp_path / "escape.json").exists() and not (shared.root / "escape.json").exists()


@pytest.mark.processes
def test_a_linked_package_folder_is_refused(kernel_copy, tmp_path):
    outside = tmp_path / "home" / ".ssh"
    outside.mkdir(parents=True)
    (outside / "id_ed25519").write_text("PRIVATE KEY")
    package = kernel_copy / "torch-ext" / "img2gray"
    (outside / "__init__.py").write_text((package / "__init__.py").read_text())
    import shutil

    shutil.rmtree(package)
    package.symlink_to(outside)
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "build")
    )
    assert "resolves out of" in one_error(result, 2)
    assert not any("PRIVATE KEY" in p.read_text(errors="replace") for p in tmp_path.rglob("build/**/*") if p.is_file())
