"""One build_matrix.yaml naming several kernels: each kernel's cells from its own
build.toml, --kernel to pick, a build folder per kernel, a Hub repo per kernel."""

import json
import os
import secrets
import shutil
import subprocess
import sys

import pytest
from conftest import KERNEL_DIR, REPO, img2gray_as, img2gray_copies, kernel_matrix, matrix_text
from hubserver import HubServer

from kernel_matrix.errors import ExitCode
from kernel_matrix.loader import parse_variant
from kernel_matrix.planning.selection import Selection

PURE_TOML = """[general]
name = "pure"
version = 1
license = "MIT"
backends = ["cpu", "cuda", "xpu"]

[general.hub]
repo-id = "kernel-matrix/pure"

[torch-noarch]
"""
PURE_TEST = """import kernels
import torch


def test_double():
    pure = kernels.get_kernel("kernel-matrix/pure", version=1)
    assert pure.double(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]
"""


def make_kernels(root):
    """Beside img2gray: a CPU-only copy, a stable-ABI copy (cells only: not compiled here) and a Python-only kernel."""
    img2gray_as(root, "gray-cpu", 'backends = ["cpu", "cuda"]', 'backends = ["cpu"]')
    img2gray_as(root, "gray-stable", "[torch]\n", '[torch]\nstable-abi = "2.12"\n')
    package = root / "pure" / "torch-ext" / "pure"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def double(x):\n    return x * 2\n")
    (root / "pure" / "build.toml").write_text(PURE_TOML)
    (root / "pure" / "tests").mkdir()
    (root / "pure" / "tests" / "test_pure.py").write_text(PURE_TEST)


def write_matrix(root, kernels, text=None):
    repository = matrix_text(root)  # img2gray copied to root/kernel: a matrix names folders inside its own
    text = (text or repository).replace("kernel: kernel", "kernels: [" + ", ".join(kernels) + "]")
    (root / "build_matrix.yaml").write_text(text)
    return root / "build_matrix.yaml"


@pytest.fixture
def project(tmp_path):
    make_kernels(tmp_path)
    write_matrix(tmp_path, ["kernel", "gray-cpu", "gray-stable", "pure"])
    return tmp_path


def test_each_kernel_gets_the_cells_its_build_toml_allows(project):
    resolved = Selection(project / "build_matrix.yaml").resolve()
    by_kernel = {k.name: [c for c in resolved.cells if c.kernel == k.name] for k in resolved.kernels}
    grid = Selection(REPO / "build_matrix.yaml").resolve().cells
    assert [c.name for c in by_kernel["img2gray"]] == [c.name for c in grid]
    assert {c.variant.backend for c in by_kernel["gray-cpu"]} == {"cpu"}
    assert len(by_kernel["gray-cpu"]) == len([c for c in grid if c.variant.backend == "cpu"])
    # Stable ABI 2.12: one CUDA variant per CUDA version and arch, built with the newest torch that ships that
    # CUDA (12.6's is 2.14's: 2.15 has none); CPU too (the section is for every backend here, so CPU is stable too).
    stable = by_kernel["gray-stable"]
    cudas = {(c.variant.cuda, c.variant.arch) for c in grid if c.variant.cuda and c.variant.torch >= "2.12"}
    assert len([c for c in stable if c.variant.cuda]) == len(cudas)

    def newest(cuda):
        return max(
            (c.variant.torch for c in grid if c.variant.cuda == cuda), key=lambda t: tuple(map(int, t.split(".")))
        )

    assert all(c.variant.torch == newest(c.variant.cuda) and c.name.startswith("torch-stable-abi212-") for c in stable)
    assert [c.name for c in by_kernel["pure"]] == ["torch-cpu", "torch-cuda", "torch-xpu"]
    for cell in resolved.cells:  # every name is one the loader parses back to itself
        assert parse_variant(cell.name).variant_str == cell.name
    json_cells = resolved.github_matrix(resolved.cells)["include"]
    assert {c["path"] for c in json_cells if c["kernel"] == "pure"} == {
        "pure/torch-cpu",
        "pure/torch-cuda",
        "pure/torch-xpu",
    }
    assert [c["cpu_test"] for c in json_cells if c["kernel"] == "pure"] == [True, True, False]
    # The kernels share variant names: their jobs' artifacts and object caches do not.
    jobs = resolved.github_jobs(resolved.cells)
    assert len({job.name for job in jobs}) == len(jobs) == len(json_cells)


@pytest.mark.processes
def test_an_exclude_can_name_one_kernel(project):
    """`exclude: [{kernel: gray-cpu, arch: aarch64}]` drops those cells of gray-cpu only (a kernel
    whose flake builds x86_64 only); a name that is no kernel of the matrix is refused at its line."""
    path = project / "build_matrix.yaml"
    before = Selection(path).resolve().cells
    text = path.read_text()
    assert "\nexclude: []\n" in text
    path.write_text(text.replace("\nexclude: []\n", "\nexclude:\n  - {kernel: gray-cpu, arch: aarch64}\n"))
    after = Selection(path).resolve().cells
    dropped = {(c.kernel, c.name) for c in before} - {(c.kernel, c.name) for c in after}
    assert dropped and all(k == "gray-cpu" and "aarch64" in name for k, name in dropped)
    assert not [c for c in after if c.kernel == "gray-cpu" and c.variant.arch == "aarch64"]
    assert [c for c in after if c.kernel == "img2gray" and c.variant.arch == "aarch64"]
    path.write_text(text.replace("\nexclude: []\n", "\nexclude:\n  - {kernel: gray-cpy, arch: aarch64}\n"))
    result = kernel_matrix("matrix", "-f", str(path))
    assert result.returncode == ExitCode.CONFIG and result.stderr.count("\n") == 1, result.stderr
    line = next(n for n, row in enumerate(path.read_text().splitlines(), 1) if "gray-cpy" in row)
    assert result.stderr.startswith(f"error: {path}:{line}:") and "exclude.0.kernel = 'gray-cpy'" in result.stderr
    assert "did you mean gray-cpu?" in result.stderr
    # One that matches grid cells, but none of that kernel's (gray-cpu has no CUDA cell): refused, not ignored.
    path.write_text(text.replace("\nexclude: []\n", '\nexclude:\n  - {kernel: gray-cpu, cuda: "13.0"}\n'))
    result = kernel_matrix("matrix", "-f", str(path))
    assert result.returncode == ExitCode.CONFIG and "exclude.0 matches no cell of gray-cpu" in result.stderr


@pytest.mark.processes
def test_kernel_picks_kernels_and_names_the_choices(project):
    file = str(project / "build_matrix.yaml")
    result = kernel_matrix("matrix", "--json", "-f", file, "--kernel", "pure", "--kernel", "gray-cpu")
    assert result.returncode == 0, result.stderr
    assert {c["kernel"] for c in json.loads(result.stdout)["include"]} == {"pure", "gray-cpu"}
    result = kernel_matrix("matrix", "-f", file, "--kernel", "gray-cpy")
    assert result.returncode == ExitCode.CONFIG and result.stderr.count("\n") == 1
    assert "--kernel gray-cpy" in result.stderr and "did you mean gray-cpu?" in result.stderr
    result = kernel_matrix("matrix", "-f", file, "--kernel", "pure", "--kernel-dir", str(KERNEL_DIR))
    assert result.returncode == ExitCode.CONFIG and "not both" in result.stderr


@pytest.mark.parametrize(
    ("kernels", "message", "line"),
    [
        (["pure", "nowhere"], "kernels.1 = 'nowhere'", 6),
        (["pure", "pure"], "a second kernel named 'pure'", 6),
    ],
)
@pytest.mark.processes
def test_bad_kernel_lists_are_one_line_naming_the_file_and_line(project, kernels, message, line):
    path = write_matrix(project, kernels)
    result = kernel_matrix("matrix", "-f", str(path))
    assert result.returncode == ExitCode.CONFIG and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {path}:{line}:") and message in result.stderr


@pytest.mark.processes
def test_kernel_and_kernels_together_are_refused(project):
    path = write_matrix(project, ["pure"])
    path.write_text(path.read_text() + "kernel: pure\n")
    result = kernel_matrix("matrix", "-f", str(path))
    assert result.returncode == ExitCode.CONFIG and "`kernel`" in result.stderr and "not both" in result.stderr


@pytest.mark.processes
def test_a_kernel_only_for_backends_kernel_matrix_cannot_build_is_named_in_one_line(project):
    # A ROCm-only compiled kernel (kernels-community has several): read and understood, with no cell to build.
    toml = project / "gray-cpu" / "build.toml"
    toml.write_text(toml.read_text().replace('backends = ["cpu"]', 'backends = ["rocm"]'))
    result = kernel_matrix("matrix", "--kernel-dir", str(project / "gray-cpu"))
    assert result.returncode == ExitCode.CONFIG and result.stderr.count("\n") == 1, result.stderr
    assert f"{toml}: general.backends ['rocm']: kernel-matrix builds cpu and cuda kernels" in result.stderr


def fake_variant(folder, name="torch214-cxx11-cpu-x86_64-linux"):
    """A built variant folder as check-abi finds it (metadata.json, no library): a Python-only
    torch-<backend> one passes, a compiled one is refused for having no .so."""
    (folder / name).mkdir(parents=True)
    (folder / name / "metadata.json").write_text('{"name": "x", "version": 1}')
    return folder / name


@pytest.mark.processes
def test_check_abi_takes_kernel_and_finds_the_variant_in_the_kernels_build_folder(project):
    """check-abi VARIANT --kernel NAME looks in build/<kernel>/<variant>, where build puts a matrix of several
    kernels' variants (it had no --kernel and looked in build/<variant> only)."""
    build = project / "build"
    fake_variant(build / "pure", "torch-cpu")
    compiled = fake_variant(build / "gray-cpu")
    common = ("-f", str(project / "build_matrix.yaml"), "--build-dir", str(build))
    result = kernel_matrix("check-abi", "torch-cpu", "--kernel", "pure", *common, cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "passed torch-cpu: Python only, no library to check"
    # The compiled kernel's folder is the one checked: its variant there has no library.
    result = kernel_matrix("check-abi", compiled.name, "--kernel", "gray-cpu", *common, cwd=project)
    assert result.returncode == ExitCode.CONFIG
    assert result.stderr == f"error: {compiled}: no .so to check\n"
    # A kernel of the matrix that has not built it: the line names where it looked.
    result = kernel_matrix("check-abi", "torch-cpu", "--kernel", "gray-cpu", *common, cwd=project)
    assert result.returncode == ExitCode.CONFIG and result.stderr.count("\n") == 1, result.stderr
    assert f"torch-cpu: not a built variant (no {build / 'gray-cpu' / 'torch-cpu' / 'metadata.json'})" in result.stderr
    result = kernel_matrix("check-abi", "torch-cpu", "--kernel", "pur", *common, cwd=project)
    assert (
        result.returncode == ExitCode.CONFIG
        and "--kernel pur" in result.stderr
        and "did you mean pure?" in result.stderr
    )
    # --build-dir build/<kernel> names the folder itself, as before; so does a variant's path.
    result = kernel_matrix("check-abi", "torch-cpu", "-f", common[1], "--build-dir", str(build / "pure"), cwd=project)
    assert result.returncode == 0, result.stderr
    result = kernel_matrix("check-abi", str(build / "pure" / "torch-cpu"), cwd=project)
    assert result.returncode == 0, result.stderr


@pytest.mark.processes
def test_check_abi_without_kernel_checks_the_variant_of_every_kernel_that_built_it(project):
    from conftest import noarch_kernel

    noarch_kernel(project, "silu", '["cpu"]')
    file = write_matrix(project, ["kernel", "gray-cpu", "pure", "silu"])
    build = project / "build"
    fake_variant(build / "pure", "torch-cpu")
    fake_variant(build / "silu", "torch-cpu")
    # As typed in the repository: its build_matrix.yaml, its build/.
    common = ("--build-dir", str(build))
    result = kernel_matrix("check-abi", "torch-cpu", *common, cwd=project)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "note torch-cpu: not built for img2gray, gray-cpu: not checked"
    assert [line for line in lines if line.startswith(("==", "passed"))] == [
        "== pure (pure)",
        "passed torch-cpu: Python only, no library to check",
        "== silu (silu)",
        "passed torch-cpu: Python only, no library to check",
    ]
    # Built for none of them: one line saying where it looked and what to give.
    result = kernel_matrix("check-abi", "torch-xpu", *common, cwd=project)
    assert result.returncode == ExitCode.CONFIG, result.stderr
    assert result.stderr == (
        f"error: torch-xpu: not a built variant of any kernel of {file.name} "
        f"(no {build}/<kernel>/torch-xpu/metadata.json for img2gray, gray-cpu, pure, silu); "
        "run `kernel-matrix build` first, or give --kernel NAME or a variant directory\n"
    )


@pytest.mark.build
def test_native_build_test_clean_and_publish_of_two_kernels(tmp_path):
    """build/<kernel>/<variant> for each kernel; their own tests; clean keeps them; each to its own Hub repo."""
    make_kernels(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    torch = ".".join(__import__("torch").__version__.split(".")[:2])
    text = f'torch:\n  "{torch}": ["13.0"]\ncpu: true\narchs:\n  x86_64: {{build-runner: [a], gpu-test-runner: [b]}}\n'
    file = write_matrix(tmp_path, ["kernel", "pure"], "kernel: kernel\n" + text)
    build = tmp_path / "build"
    common = ("-f", str(file), "--build-dir", str(build))
    result = kernel_matrix("build", *common, "--backend", "cpu", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    variant = f"torch{torch.replace('.', '')}-cxx11-cpu-x86_64-linux"
    assert (build / "img2gray" / variant / "metadata.json").is_file()
    assert sorted(p.name for p in (build / "pure").iterdir()) == ["torch-cpu"]
    assert not (build / variant).exists()
    result = kernel_matrix("test", *common, "--kernel", "pure", "--backend", "cpu", cwd=tmp_path)
    assert result.returncode == 0 and "1 passed" in result.stdout + result.stderr, result.stderr
    # clean: a variant the matrix no longer names goes, in a kernel's folder too; the named ones stay.
    stale = build / "pure" / "torch-metal"
    shutil.copytree(build / "pure" / "torch-cpu", stale)
    result = kernel_matrix("clean", *common, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not stale.exists() and (build / "pure" / "torch-cpu").is_dir() and (build / "img2gray" / variant).is_dir()
    # publish: both kernels, each to its [general.hub] repo-id (img2gray's CUDA variant is not built here).
    token = "hf_" + secrets.token_hex(16)
    with HubServer(trusted_orgs=["kernel-matrix"]) as hub:
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_TOKEN": token,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_CACHE": str(tmp_path / ".hf-cache"),
        }
        env.pop("HF_HUB_DISABLE_TELEMETRY", None)
        result = kernel_matrix("publish", *common, "--allow-partial", "--manylinux", "none", cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        pure = sorted({p.split("/")[1] for p in hub.files("kernel-matrix/pure", "v1") if p.startswith("build/")})
        assert pure == ["torch-cpu"]
        gray = sorted({p.split("/")[1] for p in hub.files("kernel-matrix/img2gray", "v1") if p.startswith("build/")})
        assert gray == [variant]
        # The real loader finds the Python-only kernel's CPU variant on the Hub, in a fresh process.
        code = (
            "import kernels, torch; "
            "print(kernels.get_kernel('kernel-matrix/pure', version=1, backend='cpu').double(torch.ones(2)).tolist())"
        )
        loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert loaded.returncode == 0 and loaded.stdout.strip() == "[2.0, 2.0]", loaded.stderr
        # --repo-id names one repo: refused for several kernels.
        result = kernel_matrix("publish", *common, "--repo-id", "kernel-matrix/x", "--allow-partial", env=env)
        assert result.returncode == ExitCode.CONFIG and "--kernel NAME" in result.stderr


@pytest.mark.processes
def test_a_selection_of_many_kernels_over_the_github_limit_runs_in_batches_of_one_kernel(tmp_path):
    """GitHub runs at most 256 jobs of one matrix, and a repository of many kernels has more cells
    (one of 56 kernels had 835, and its workflow's first matrix job failed): the plan's jobs batch
    each kernel's cells, every cell in one job, no job mixing kernels."""
    from kernel_matrix.planning.matrix import GITHUB_MATRIX_LIMIT

    per_kernel = len(Selection(REPO / "build_matrix.yaml").resolve().cells)
    count = GITHUB_MATRIX_LIMIT // per_kernel + 1
    file = str(write_matrix(tmp_path, img2gray_copies(tmp_path, count)))
    output = tmp_path / "github_output"
    output.write_text("")
    env = {**os.environ, "GITHUB_OUTPUT": str(output)}
    result = kernel_matrix("matrix", "--json", "-f", file, "--github-output", env=env)
    assert result.returncode == 0, result.stderr
    cells = json.loads(result.stdout)["include"]
    assert len(cells) == per_kernel * count > GITHUB_MATRIX_LIMIT
    assert f"note: {len(cells)} cells run as " in result.stderr
    jobs = json.loads(output.read_text().splitlines()[0].removeprefix("jobs="))["include"]
    assert len(jobs) <= GITHUB_MATRIX_LIMIT
    assert sorted((j["kernel"], v) for j in jobs for v in j["variants"].split(",")) == sorted(
        (c["kernel"], c["variant"]) for c in cells
    )
    for job in jobs:  # a kernel's folder: build/<kernel>/<variant>/ for each of its cells
        assert job["paths"].splitlines() == [f"build/{job['kernel']}/{v}/" for v in job["variants"].split(",")]
    # The kernels' cells share builder images: one images job each, naming a cell that needs it.
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    recipe = ("arch", "torch", "cuda", "torch_index", "image")
    by_name = {(c["kernel"], c["variant"]): c for c in cells}
    images = json.loads(outputs["images"])["include"]
    shared = [tuple(by_name[entry["kernel"], entry["variant"]][k] for k in recipe) for entry in images]
    assert len(images) == per_kernel and sorted(map(str, shared)) == sorted(
        {str(tuple(c[k] for k in recipe)) for c in cells}
    )
    assert all(entry["build_runner"] == by_name[entry["kernel"], entry["variant"]]["build_runner"] for entry in images)
