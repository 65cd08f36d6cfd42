"""Reproducible variants: the real CLI builds from kernels at different paths into
different folders, cold and from the object cache, and must give the same bytes;
`kernel-matrix verify` rebuilds a variant (a local folder, or a release on the
Hub-protocol server on loopback, downloaded by huggingface_hub) and names the
file that differs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import KERNEL_DIR, REPO, container_build_cli, kernel_matrix
from hubserver import HubServer

from kernel_matrix.errors import ExitCode

pytestmark = pytest.mark.build
ORG, REPO_ID = "kernel-matrix", "kernel-matrix/img2gray"
# The git states metadata.json records, fixed for these builds (the variables a
# build container is given): a commit or an edit elsewhere in this working tree
# while the tests run must not make two builds differ. The kernels are copies
# outside git anyway.
PINNED_GIT = {"KERNEL_MATRIX_SOURCE_GIT": "ab" * 20 + ":0", "KERNEL_MATRIX_BUILDER_GIT": "cd" * 20 + ":0"}


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, **PINNED_GIT, **env}
    environment.pop("SOURCE_DATE_EPOCH", None)  # the default, as a build without one gets
    return kernel_matrix(*args, env=environment)


def backend_args(backend: str) -> list[str]:
    return ["--backend", backend, *(["--cuda-capabilities", "9.0"] if backend == "cuda" else [])]


def files(variant: Path) -> dict[str, bytes]:
    return {p.relative_to(variant).as_posix(): p.read_bytes() for p in sorted(variant.rglob("*")) if p.is_file()}


def the_variant(build_dir: Path) -> Path:
    (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]
    return variant


def the_library(variant: Path) -> Path:
    (library,) = variant.glob("*.abi3.so")
    return library


def three_builds(backend: str, root: Path) -> dict:
    """One variant built three times: cold from a kernel at one path (filling an
    object cache), cold with --no-cache from a copy at another path into a deeper
    folder, and again from the first kernel through the filled cache."""
    kernels = [root / "one" / "kernel", root / "elsewhere" / "deeper" / "img2gray-src"]
    for kernel in kernels:
        shutil.copytree(KERNEL_DIR, kernel, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    cache = root / "cache"
    runs = {
        "cold": (kernels[0], root / "a" / "build", ["--cache-dir", str(cache)]),
        "elsewhere": (kernels[1], root / "b" / "x" / "y" / "build", ["--no-cache"]),
        "cached": (kernels[0], root / "c" / "build", ["--cache-dir", str(cache)]),
    }
    made = {}
    for name, (kernel, build_dir, cache_args) in runs.items():
        result = cli(
            "build", "--kernel-dir", str(kernel), "--build-dir", str(build_dir), *backend_args(backend), *cache_args
        )
        assert result.returncode == 0, result.stderr
        made[name] = the_variant(build_dir)
    made["kernels"] = kernels
    return made


@pytest.fixture(scope="module")
def build_sets(tmp_path_factory):
    """three_builds per backend, made once for this module (the verify tests use the CPU ones)."""
    made: dict[str, dict] = {}

    def get(backend: str) -> dict:
        if backend not in made:
            made[backend] = three_builds(backend, tmp_path_factory.mktemp(f"reproducible-{backend}"))
        return made[backend]

    return get


@pytest.fixture(scope="module", params=["cpu", "cuda"])
def builds(request, build_sets):
    if request.param == "cuda":
        from kernel_matrix.planning.toolchain import find_nvcc, probe_torch

        if find_nvcc() is None or probe_torch().cuda is None:
            pytest.skip("the CUDA variant needs nvcc and a CUDA build of torch")
    return build_sets(request.param)


def test_two_cold_builds_from_other_paths_are_byte_identical(builds):
    first, second = builds["cold"], builds["elsewhere"]
    assert first.name == second.name
    assert files(first) == files(second)  # every file, metadata.json and the .so included


def test_the_object_cache_never_changes_a_result(builds):
    cached = builds["cached"]
    stats = json.loads((cached.parent / "logs" / f"{cached.name}.build.json").read_text())
    assert stats["compiled"] == 0 and stats["cached"] >= 1  # really from the cache
    assert files(cached) == files(builds["elsewhere"])  # ... and the same as a --no-cache build


def test_no_host_path_is_recorded_in_the_library(builds):
    from kernel_matrix.planning.toolchain import probe_torch

    data = the_library(builds["elsewhere"]).read_bytes()
    host_paths = [*builds["kernels"], builds["elsewhere"].parent, probe_torch().torch_dir.parent, REPO, Path("/tmp")]
    assert [str(p) for p in host_paths if str(p).encode() in data] == []
    assert b"tmpxft_" not in data  # nvcc's temporary file names carry its process id
    # What takes their place: the kernel's and torch's files under fixed names.
    assert b"img2gray/torch-ext/torch_binding.cpp" in data and b"site-packages/torch/include/" in data


def test_a_cell_built_twice_in_its_builder_image_is_byte_identical_and_verifies(local_cuda_cell, kernel_copy, tmp_path):
    made = []
    for build_dir in (tmp_path / "a", tmp_path / "b" / "deeper"):
        result = container_build_cli(
            local_cuda_cell, build_dir, kernel_copy, "--no-cache", "--cuda-capabilities", "9.0"
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        made.append(build_dir / local_cuda_cell.name)
    assert files(made[0]) == files(made[1])
    toolchain = json.loads((made[0] / "metadata.json").read_text())["provenance"]["toolchain"]
    assert toolchain["torch"].startswith(local_cuda_cell.variant.torch + ".") and toolchain["nvcc"]
    # verify rebuilds it the same way: in the cell's builder image, with the capabilities it records.
    flip_one_byte(the_library(made[1]))
    result = kernel_matrix(
        "verify", *map(str, made), "--in-container", "--image", "offline", "--kernel-dir", str(kernel_copy)
    )
    assert result.returncode == ExitCode.NOT_REPRODUCED, result.stdout[-2000:] + result.stderr
    assert f"identical: {made[0]} (4 files)" in result.stdout
    (line,) = error_lines(result)
    assert line.startswith(f"error: {the_library(made[1])}: differs (sha256 ")


@pytest.fixture(scope="module")
def cpu_variant(build_sets):
    """The CPU variant of the cold build, and the kernel it was built from."""
    made = build_sets("cpu")
    return made["cold"], made["kernels"][0]


def flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def edit_metadata(variant: Path, change) -> None:
    metadata = json.loads((variant / "metadata.json").read_text())
    change(metadata)
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")


def test_verify_names_each_changed_file_of_local_variants(cpu_variant, tmp_path):
    variant, kernel = cpu_variant
    copies = {name: tmp_path / name / variant.name for name in ("same", "library", "license", "provenance")}
    for copy in copies.values():
        shutil.copytree(variant, copy)
    flip_one_byte(the_library(copies["library"]))
    edit_metadata(copies["license"], lambda m: m.update(license="MIT"))
    # How it was built (another Python, in a container) is not what it is: a note, not a difference.
    edit_metadata(copies["provenance"], lambda m: m["provenance"]["toolchain"].update(python="3.11.0"))
    result = cli("verify", *map(str, copies.values()), "--kernel-dir", str(kernel), "-j", "1")
    assert result.returncode == ExitCode.NOT_REPRODUCED, result.stderr
    for name in ("same", "provenance"):
        assert f"identical: {copies[name]} (4 files)" in result.stdout
    assert f"note: {copies['provenance']}/metadata.json: the same but for how it was built: " in result.stderr
    assert 'provenance.toolchain.python "3.11.0" vs "' in result.stderr
    library, license = error_lines(result)  # one line per differing file, nothing else
    assert library.startswith(f"error: {the_library(copies['library'])}: differs (sha256 ")
    assert license.startswith(f"error: {copies['license']}/metadata.json: differs (sha256 ")
    assert license.endswith('license "MIT" vs "Apache-2.0"')


def test_verify_refuses_what_it_cannot_check_in_one_line(cpu_variant, tmp_path):
    variant, kernel = cpu_variant
    missing = cli("verify", str(tmp_path / "nothing"), "--kernel-dir", str(kernel))
    assert missing.returncode == ExitCode.CONFIG and len(error_lines(missing)) == 1
    assert "not a built variant" in missing.stderr
    # A folder that is not named for a variant this host builds: not verified, and said so.
    renamed = tmp_path / "renamed"
    shutil.copytree(variant, renamed)
    other = cli("verify", str(renamed), "--kernel-dir", str(kernel))
    assert other.returncode == ExitCode.TOOLCHAIN
    (line,) = error_lines(other)
    assert line.startswith(f"error: not verified: {renamed}: ") and f"this host builds {variant.name}" in line


def test_verify_reads_the_kernel_from_the_matrix_as_every_command_does(cpu_variant, tmp_path):
    """In a kernel's own folder (no build_matrix.yaml: the default matrix, `kernel: .`) verify
    needs no --kernel-dir; in a matrix of several kernels it asks which one."""
    variant, kernel = cpu_variant
    result = cli_in(kernel, "verify", str(variant))
    assert result.returncode == 0, result.stderr
    assert f"identical: {variant} (4 files)" in result.stdout
    # No VARIANT: this host's, as `test` and `check-abi` take it (the CPU one, or a line naming it).
    from kernel_matrix.cli.checks import _host_variants
    from kernel_matrix.planning.selection import Kernel

    host, _ = _host_variants(Kernel.load(kernel), python=None, backend=None)
    result = cli_in(kernel, "verify", "--build-dir", str(variant.parent))
    if host == variant.name:
        assert result.returncode == 0 and f"identical: {variant} (4 files)" in result.stdout, result.stderr
    else:
        assert result.returncode == ExitCode.CONFIG
        assert f"check it with `kernel-matrix verify {variant.name}`" in result.stderr, result.stderr
    # Two kernels inside the matrix file's folder (where a matrix's kernels must be), a Hub repo each.
    shutil.copytree(kernel, tmp_path / "img2gray", ignore=shutil.ignore_patterns("build", "__pycache__"))
    other = tmp_path / "gray-two"
    shutil.copytree(KERNEL_DIR, other, ignore=shutil.ignore_patterns("build", "__pycache__"))
    toml = other / "build.toml"
    text = toml.read_text().replace('name = "img2gray"', 'name = "gray-two"', 1)
    toml.write_text(text.replace("kernel-matrix/img2gray", "kernel-matrix/gray-two", 1))
    runners = "{build-runner: [ubuntu-24.04], gpu-test-runner: [self-hosted, linux, x64, gpu]}"
    (tmp_path / "build_matrix.yaml").write_text(
        f'kernels: [img2gray, gray-two]\ntorch:\n  "2.14": all\narchs:\n  x86_64: {runners}\n'
    )
    several = cli_in(tmp_path, "verify", str(variant))
    assert several.returncode == ExitCode.CONFIG, several.stderr
    (line,) = error_lines(several)
    assert "names several kernels" in line and "--kernel NAME" in line


def cli_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, **PINNED_GIT}
    environment.pop("SOURCE_DATE_EPOCH", None)
    return kernel_matrix(*args, cwd=cwd, env=environment)


@pytest.fixture(scope="module")
def hub(cpu_variant, tmp_path_factory):
    """The CPU variant released on branch v1 of the local Hub, and on branch
    v1-changed with one byte of its library flipped (uploaded by huggingface_hub)."""
    variant, _ = cpu_variant
    changed = tmp_path_factory.mktemp("changed") / variant.name
    shutil.copytree(variant, changed)
    flip_one_byte(the_library(changed))
    upload = textwrap.dedent(f"""
        from huggingface_hub import HfApi
        api = HfApi()
        api.create_repo({REPO_ID!r}, repo_type="kernel")
        for branch, folder in [("v1", {str(variant)!r}), ("v1-changed", {str(changed)!r})]:
            api.create_branch({REPO_ID!r}, branch=branch, repo_type="kernel")
            api.upload_folder(
                repo_id={REPO_ID!r}, repo_type="kernel", revision=branch, folder_path=folder,
                path_in_repo="build/{variant.name}", commit_message="Release img2gray v1",
            )
    """)
    with HubServer(trusted_orgs=[ORG]) as server:
        env = hub_env(server, tmp_path_factory.mktemp("hf-cache"))
        result = subprocess.run([sys.executable, "-c", upload], capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr
        yield server, env


def hub_env(server: HubServer, cache: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": server.url,
        "HF_TOKEN": "hf_" + "0" * 32,
        "HF_HUB_DISABLE_XET": "1",  # the test server speaks plain LFS
        "HF_HUB_CACHE": str(cache),
    }
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)  # breaks every request with huggingface_hub 2.4
    return env


def test_verify_a_hub_release_reports_identical(hub, cpu_variant):
    server, env = hub
    variant, kernel = cpu_variant
    result = cli("verify", "--repo-id", REPO_ID, "--revision", "v1", "--kernel-dir", str(kernel), **env)
    assert result.returncode == 0, result.stderr
    assert f"identical: build/{variant.name} (4 files)" in result.stdout
    assert any(r.path.startswith(f"/kernels/{REPO_ID}/resolve/") for r in server.requests)  # really downloaded


def test_verify_a_hub_release_names_the_changed_file(hub, cpu_variant):
    _, env = hub
    variant, kernel = cpu_variant
    result = cli("verify", "--repo-id", REPO_ID, "--revision", "v1-changed", "--kernel-dir", str(kernel), **env)
    assert result.returncode == ExitCode.NOT_REPRODUCED, result.stderr
    (line,) = error_lines(result)
    assert line.startswith(f"error: build/{variant.name}/{the_library(variant).name}: differs (sha256 ")


def test_verify_reads_the_branch_publish_writes(hub, cpu_variant, tmp_path):
    """With [general.hub] branch, publish writes that branch: verify --repo-id reads it by default
    (it read v<version>, and found v1's identical release instead of this branch's)."""
    _, env = hub
    _, kernel = cpu_variant
    copy = tmp_path / "kernel"
    shutil.copytree(kernel, copy, ignore=shutil.ignore_patterns("__pycache__"))
    toml = copy / "build.toml"
    toml.write_text(toml.read_text().replace("[general.hub]\n", '[general.hub]\nbranch = "v1-changed"\n'))
    result = cli("verify", "--repo-id", REPO_ID, "--kernel-dir", str(copy), **env)
    assert result.returncode == ExitCode.NOT_REPRODUCED, result.stderr
    # (it differs: build.toml is among the sources the op namespace hashes)
    assert f"downloading {REPO_ID}@v1-changed" in result.stderr


def test_verify_of_a_release_that_is_not_there_is_one_line(hub, cpu_variant):
    _, env = hub
    _, kernel = cpu_variant
    for repo, revision, expected in [
        ("kernel-matrix/no-such-kernel", "v1", "no such kernel repo"),
        (REPO_ID, "v9", "no revision 'v9'"),
    ]:
        result = cli("verify", "--repo-id", repo, "--revision", revision, "--kernel-dir", str(kernel), **env)
        assert result.returncode == ExitCode.CONFIG, result.stderr
        (line,) = error_lines(result)
        assert expected in line
