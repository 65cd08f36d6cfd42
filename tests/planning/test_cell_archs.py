"""Each kernel's CUDA cell is planned with the archs its build will declare (metadata.json's
backend.archs), or with why that build will refuse it. From there: the GPU test job of a cell
whose archs the GPU runners' declared capability cannot run is dropped; `kernel-matrix test`
skips, in one line, a variant the `kernels` loader would refuse on the GPU it runs on (kernels'
check_arch), instead of failing at the suite's first get_kernel; and `matrix` warns of the
cells whose build will fail.
"""

import itertools
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from conftest import KERNEL_DIR, img2gray_as, kernel_matrix, noarch_kernel
from test_sections import cu130_toolchain

from kernel_matrix.planning.capabilities import runs_on

ARCHS = ["7.5", "8.0", "8.6", "9.0", "9.0a", "10.0", "10.0a", "10.0f", "12.0", "12.0f", "12.1"]
ARCHS += [f"{arch}+PTX" for arch in ("8.0", "9.0a", "10.0f", "12.1")] + ["sm_90", "9", ""]
CAPABILITIES = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1), (13, 0)]


def test_runs_on_is_the_installed_loaders_check_arch_rule():
    """Every arch kernel-builder writes (plain, a, f, +PTX, and strings the loader does not
    know), alone and in pairs, on every capability: the same answer as the loader's."""
    from kernel_matrix.loader import internal

    _supports_cuda_capability = internal("archs")._supports_cuda_capability

    lists = [[a] for a in ARCHS] + [list(pair) for pair in itertools.combinations(ARCHS, 2)] + [[]]
    for archs, capability in itertools.product(lists, CAPABILITIES):
        assert runs_on(archs, capability) == _supports_cuda_capability(archs, capability), (archs, capability)


def blackwell_only(root: Path) -> Path:
    """A copy of img2gray whose CUDA section is for sm_100a and sm_120a only."""
    return img2gray_as(
        root,
        "gray-blackwell",
        'cuda-capabilities = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]',
        'cuda-capabilities = ["10.0a", "12.0a"]',
    )


def matrix_for(root: Path, kernel: Path, capability: str | None) -> Path:
    """The repository's matrix for `kernel`, its x86_64 GPU runners declared of `capability`."""
    if not kernel.is_relative_to(root):  # a matrix names kernel folders inside its own folder: a copy
        copy = root / "repository-kernel"
        if not copy.exists():
            shutil.copytree(kernel, copy, ignore=shutil.ignore_patterns("build", "__pycache__"))
        kernel = copy
    text = (KERNEL_DIR.parent / "build_matrix.yaml").read_text().replace("kernel: kernel", f"kernel: {kernel}")
    text = text.replace("gpu-test-capability:", "# gpu-test-capability:")  # the repository's own, if any
    if capability:
        marker = "    gpu-test-runner: [self-hosted, linux, x64, gpu]\n"
        assert marker in text
        text = text.replace(marker, f'{marker}    gpu-test-capability: "{capability}"\n')
    path = root / "build_matrix.yaml"
    path.write_text(text)
    return path


def plan(matrix: Path, tmp_path: Path) -> tuple[list[dict], dict]:
    """`matrix --json --github-output`: the cells, and the GPU jobs' cells by variant."""
    output = tmp_path / "github_output"
    output.write_text("")
    result = kernel_matrix(
        "matrix", "--file", str(matrix), "--json", "--github-output", env={**os.environ, "GITHUB_OUTPUT": str(output)}
    )
    assert result.returncode == 0, result.stderr
    cells = json.loads(result.stdout)["include"]
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    gpu_text = outputs["gpu_jobs"]
    by_variant = {c["variant"]: c for c in cells}
    gpu_jobs = json.loads(gpu_text)["include"] if gpu_text else []
    gpu = {v: by_variant[v] for job in gpu_jobs for v in job["variants"].split(",")}
    return cells, gpu


@pytest.mark.processes
def test_a_cells_archs_are_what_its_build_declares(tmp_path):
    """The cu130 x86_64 cell's archs are the capabilities the build of that cell plans
    (planned as values: the cell's list is the build's --cuda-capabilities)."""
    from kernel_matrix.building import native_build
    from kernel_matrix.config.buildtoml import load_build_toml

    for kernel in (KERNEL_DIR, blackwell_only(tmp_path)):
        cells, _ = plan(matrix_for(tmp_path, kernel, None), tmp_path)
        cell = next(c for c in cells if c["variant"] == "torch211-cxx11-cu130-x86_64-linux")
        build = native_build.plan(
            kernel, load_build_toml(kernel), cu130_toolchain(), backend="cuda", cuda_capabilities=cell["capabilities"]
        )
        assert cell["archs"] == build.archs
        assert all(c["archs"] == [] for c in cells if c["backend"] == "cpu")
    assert cell["archs"] == ["10.0a", "12.0a"]


# kernel-builder's default lists (kernel-builder/src/pyproject/templates/torch/preamble.cmake,
# CUDA_DEFAULT_KERNEL_ARCHS): a section without cuda-capabilities is built for its CUDA version's
# list, whose highest capability also gets PTX, and metadata.json's archs carry the "+PTX".
KERNEL_BUILDER_DEFAULTS = {
    "12.6": "7.0;7.2;7.5;8.0;8.6;8.7;8.9;9.0+PTX",
    "12.8": "7.0;7.2;7.5;8.0;8.6;8.7;8.9;9.0;10.0;10.1;12.0+PTX",
    "13.0": "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0;12.1+PTX",
}


@pytest.mark.processes
def test_a_section_on_the_default_list_declares_kernel_builders_default_archs(tmp_path):
    kernel = img2gray_as(
        tmp_path, "gray-default", 'cuda-capabilities = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]\n', ""
    )
    cells, _ = plan(matrix_for(tmp_path, kernel, None), tmp_path)
    for cuda, expected in KERNEL_BUILDER_DEFAULTS.items():
        archs = {tuple(c["archs"]) for c in cells if c["cuda"] == cuda}
        # As kernel-builder's metadata.json lists them: sorted as strings (kernel.cmake's list(SORT)).
        assert archs == {tuple(sorted(expected.split(";")))}, cuda
        assert cuda == "12.6" or next(iter(archs))[0] == "10.0"  # "10.0" before "7.5"


@pytest.mark.processes
def test_a_python_only_cells_archs_are_its_torch_noarch_cuda_capabilities(tmp_path):
    kernel = noarch_kernel(tmp_path, "gray-noarch", '["cpu", "cuda"]', noarch='cuda_capabilities = ["10.0a"]\n')
    cells, gpu = plan(matrix_for(tmp_path, kernel, "9.0"), tmp_path)
    assert {c["variant"]: c["archs"] for c in cells} == {"torch-cpu": [], "torch-cuda": ["10.0a"]}
    assert gpu == {}  # its metadata.json says 10.0a: the loader refuses it on sm_90


@pytest.mark.processes
def test_a_python_only_kernel_names_a_backend_once_and_keeps_to_its_cuda_range(tmp_path):
    """kernel-builder's backends are a set, and it builds noarch variants from the build sets
    [general.cuda] leaves: torch-cuda takes the newest torch of a CUDA within the range."""
    kernel = noarch_kernel(tmp_path, "gray-twice", '["cuda", "cuda", "cpu"]')
    cells, _ = plan(matrix_for(tmp_path, kernel, None), tmp_path)
    assert sorted(c["variant"] for c in cells) == ["torch-cpu", "torch-cuda"]

    kernel = noarch_kernel(tmp_path, "gray-cuda12", '["cuda"]', general='[general.cuda]\nmaxver = "12.9"\n')
    cells, _ = plan(matrix_for(tmp_path, kernel, None), tmp_path)
    (cell,) = cells
    assert cell["variant"] == "torch-cuda" and cell["cuda"].startswith("12.")
    full = plan(matrix_for(tmp_path, KERNEL_DIR, None), tmp_path)[0]
    newest = max(int(c["torch"].split(".")[1]) for c in full if (c["cuda"] or "").startswith("12."))
    assert cell["torch"] == f"2.{newest}"  # the newest torch with a CUDA 12 build (2.15 has none)

    kernel = noarch_kernel(tmp_path, "gray-old", '["cuda", "cpu"]', general='[general.cuda]\nmaxver = "12.0"\n')
    cells, _ = plan(matrix_for(tmp_path, kernel, None), tmp_path)
    assert [c["variant"] for c in cells] == ["torch-cpu"]  # no CUDA of the grid is that old


@pytest.mark.processes
def test_gpu_runners_of_a_declared_capability_get_only_the_cells_they_can_run(tmp_path):
    kernel = blackwell_only(tmp_path)
    cells, gpu = plan(matrix_for(tmp_path, kernel, None), tmp_path)
    cuda = {c["variant"] for c in cells if c["backend"] == "cuda" and c["cuda"] != "12.6"}
    assert cuda and set(gpu) == cuda  # no capability declared: every CUDA cell its build does not refuse

    # x86_64's GPU runners are declared; aarch64's are not, and keep every CUDA cell. So do
    # cells whose build will refuse the section (CUDA 12.6 builds no 10.0a): they have no archs.
    # A cell whose build will fail (no archs) gets no GPU job either.
    def kept(cells, runs):
        return {c["variant"] for c in cells if c["archs"] and (c["arch"] == "aarch64" or runs(c))}

    cells, gpu = plan(matrix_for(tmp_path, kernel, "9.0"), tmp_path)
    assert set(gpu) == kept(cells, lambda c: False)  # sm_100a/sm_120a code cannot run on sm_90
    assert any(c["archs"] and c["arch"] == "x86_64" for c in cells)
    cells, gpu = plan(matrix_for(tmp_path, kernel, "10.0"), tmp_path)
    assert set(gpu) == kept(cells, lambda c: True)  # the CUDA versions that build it build 10.0a
    assert all(c["gpu_test"] == (c["variant"] in gpu) for c in cells)

    cells, gpu = plan(matrix_for(tmp_path, KERNEL_DIR, "9.0"), tmp_path)
    assert set(gpu) == {c["variant"] for c in cells if c["backend"] == "cuda"}  # img2gray builds 9.0 everywhere


@pytest.mark.processes
def test_a_capability_that_is_not_one_is_refused_at_its_line(tmp_path):
    matrix = matrix_for(tmp_path, KERNEL_DIR, "sm_90")
    result = kernel_matrix("matrix", "--file", str(matrix))
    assert result.returncode == 2
    line = next(n for n, text in enumerate(matrix.read_text().splitlines(), 1) if "gpu-test-capability" in text)
    assert result.stderr.count("\n") == 1 and f"{matrix}:{line}:" in result.stderr and "sm_90" in result.stderr


def a_gpu_host(tmp_path: Path, capability: list[int] | None, installed: dict | None = None) -> Path:
    """An interpreter for `kernel-matrix test --python` on a machine whose torch sees a GPU of
    this capability (None: no GPU): it answers the GPU probe (`-c CODE`), the installed
    package's metadata.json probe (`-c CODE PACKAGE`) with `installed`, and fails anything
    else (the suite), with exit 3. This machine has no GPU; the H200 run does this for real."""
    python = tmp_path / "gpu-python"
    python.write_text(
        "#!/bin/sh\n"
        f"[ \"$1\" = -c ] && [ $# -eq 3 ] && echo '{json.dumps(installed)}' && exit 0\n"
        f"[ \"$1\" = -c ] && echo '{json.dumps(capability)}' && exit 0\nexit 3\n"
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def a_cuda_variant(tmp_path: Path, archs: list[str]) -> Path:
    """A variant folder whose metadata.json says CUDA, these archs (test only reads it)."""
    variant = tmp_path / "build" / "torch211-cxx11-cu130-x86_64-linux"
    variant.mkdir(parents=True)
    metadata = {"id": "_img2gray_cuda_0", "name": "img2gray", "version": 1, "backend": {"type": "cuda", "archs": archs}}
    (variant / "metadata.json").write_text(json.dumps(metadata))
    return variant


@pytest.mark.parametrize(
    ("archs", "capability", "skipped"),
    [
        (["10.0a", "12.0a"], [9, 0], True),  # a Blackwell-only variant on an H200
        (["8.0", "9.0"], [10, 0], True),  # sm_90 code does not run on sm_100
        (["10.0a", "12.0a"], [10, 0], False),
        (["8.0+PTX"], [10, 0], False),  # its PTX is JIT-compiled there
        (["9.0"], None, False),  # no GPU (--cpu-only hides them): the suite's CPU cases run
    ],
)
@pytest.mark.processes
def test_test_skips_a_variant_the_loader_refuses_on_this_gpu(tmp_path, archs, capability, skipped):
    variant = a_cuda_variant(tmp_path, archs)
    python = a_gpu_host(tmp_path, capability)
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(KERNEL_DIR), "--python", str(python))
    if skipped:
        assert result.returncode == 0, result.stderr
        major, minor = capability
        assert result.stderr.strip() == (  # the console's lines go to stderr
            f"skipped {variant.name}: this GPU (capability {major}.{minor}) runs none of the variant's archs "
            f"({', '.join(archs)}): kernels.get_kernel refuses it on this GPU (check_arch); "
            "test it on a GPU it was built for"
        )
    else:  # the suite ran (and failed: the interpreter only answers the probe)
        assert result.returncode == 6
        assert "pytest exit 3" in result.stderr
    note = f"note {variant.name}: no GPU that this torch can use: the suite's CUDA cases will skip or fail here"
    assert (note in result.stderr) == (capability is None)


@pytest.mark.processes
def test_a_cuda_only_kernel_that_cannot_be_loaded_without_a_gpu_fails_rather_than_passes(tmp_path):
    """No GPU and no cpu backend: the variant is loaded instead of its suite run. Where nothing could
    be loaded (a CPU build of torch here) that is a failure, not a pass; a kernel whose kernel-depends
    come from the Hub (which the load cannot reach) is skipped, saying so."""
    kernel = tmp_path / "kernel"
    shutil.copytree(KERNEL_DIR, kernel, ignore=shutil.ignore_patterns("build", "__pycache__"))
    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace('backends = ["cpu", "cuda"]', 'backends = ["cuda"]', 1))
    variant = a_cuda_variant(tmp_path, ["9.0"])
    python = tmp_path / "cpu-torch-python"  # answers the GPU probe: none; the load: a CPU torch
    python.write_text(
        "#!/bin/sh\n"
        "[ $# -eq 6 ] && printf 'skip: torch 2.14.1 here loads cpu kernels only' > \"$6\" && exit 0\n"
        '[ "$1" = -c ] && echo null && exit 0\nexit 3\n'
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), "--python", str(python))
    assert result.returncode == 6, result.stderr
    assert result.stderr.strip().endswith(
        f"{variant.name}: cannot be loaded here: torch 2.14.1 here loads cpu kernels only"
    ), result.stderr
    metadata = json.loads((variant / "metadata.json").read_text())
    metadata["kernel-depends"] = [{"repo-id": "kernels-community/other", "version": 1}]
    (variant / "metadata.json").write_text(json.dumps(metadata))
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), "--python", str(python))
    assert result.returncode == 0, result.stderr
    assert "not loaded (its kernel-depends come from the Hub" in result.stderr and "suite not run" in result.stderr


@pytest.mark.processes
def test_no_note_where_the_gpus_are_hidden_on_purpose(tmp_path):
    """test-variant --cpu-only hides the GPUs (CUDA_VISIBLE_DEVICES=): its CUDA cases skip, as meant."""
    variant = a_cuda_variant(tmp_path, ["9.0"])
    python = a_gpu_host(tmp_path, None)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(KERNEL_DIR), "--python", str(python), env=env)
    assert result.returncode == 6 and "no GPU" not in result.stderr


@pytest.mark.processes
def test_matrix_warns_of_the_cells_whose_build_will_refuse_a_section(tmp_path):
    """kernel-builder plans every CUDA version within [general.cuda]'s range and its build
    fails where a section is left no capability (CUDA 12.6 compiles no sm_100a): kernel-matrix
    plans the same cells, and says before any job runs which will fail and what leaves them out."""
    kernel = blackwell_only(tmp_path)
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "will fail to build" in line]
    # At the section's cuda-capabilities line: the one to change.
    lines = (kernel / "build.toml").read_text().splitlines()
    line = lines.index('cuda-capabilities = ["10.0a", "12.0a"]') + 1
    assert warnings == [
        f"{kernel / 'build.toml'}:{line}:1: warning: [kernel.img2gray_cuda]: none of cuda-capabilities "
        "['10.0a', '12.0a'] can be built with CUDA 12.6: 8 cell(s) of gray-blackwell will fail to build "
        "(torch211-cxx11-cu126-aarch64-linux, torch211-cxx11-cu126-x86_64-linux, torch212-cxx11-cu126-aarch64-linux, "
        '...); general.cuda.minver = "12.8" leaves them out'
    ]
    with (kernel / "build.toml").open("a") as toml:
        toml.write('\n[general.cuda]\nminver = "12.8"\n')
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel), "--json")
    assert result.returncode == 0 and "will fail to build" not in result.stderr
    cells = json.loads(result.stdout)["include"]
    assert not any(c["cuda"] == "12.6" for c in cells) and all(c["archs"] for c in cells if c["backend"] == "cuda")


@pytest.mark.processes
def test_the_warning_names_the_maxver_where_the_newest_cuda_versions_refuse_a_section(tmp_path):
    kernel = img2gray_as(
        tmp_path,
        "gray-volta",
        'cuda-capabilities = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]',
        'cuda-capabilities = ["7.0"]',
    )
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel))
    warnings = [line for line in result.stderr.splitlines() if "will fail to build" in line]
    # A line per CUDA version that refuses it (CUDA 13 compiles 7.5 and up), each with the bound.
    assert [w.split("can be built with CUDA ")[1][:4] for w in warnings] == ["13.0", "13.2"], result.stderr
    assert all(w.endswith('; general.cuda.maxver = "12.8" leaves them out') for w in warnings)


@pytest.mark.processes
def test_the_warnings_bound_comes_from_the_whole_matrix_not_the_selection(tmp_path):
    """The pr profile plans CUDA 12.6 (refused) and 13.2 for the newest torch of a grid that
    ends at 2.14: the bound that leaves 12.6 out is still 12.8, which the full profile builds."""
    kernel = blackwell_only(tmp_path)
    default = (KERNEL_DIR.parent / "kernel_matrix" / "data" / "default_matrix.yaml").read_text()
    matrix = tmp_path / "build_matrix.yaml"
    lines = [line for line in default.splitlines(keepends=True) if not line.startswith('  "2.15":')]
    matrix.write_text("".join(lines).replace("kernel: .\n", f"kernel: {kernel.name}\n"))
    result = kernel_matrix("matrix", "--file", str(matrix), "--profile", "pr")
    warnings = [line for line in result.stderr.splitlines() if "will fail to build" in line]
    assert warnings and all(w.endswith('general.cuda.minver = "12.8" leaves them out') for w in warnings)


@pytest.mark.processes
def test_a_kernel_the_selection_leaves_without_a_cell_is_named(tmp_path):
    img2gray_as(tmp_path, "gray")
    img2gray_as(tmp_path, "gray-old", "[torch]\n", '[torch]\nmaxver = "2.12"\n')
    matrix = tmp_path / "build_matrix.yaml"
    matrix.write_text(
        (KERNEL_DIR.parent / "build_matrix.yaml").read_text().replace("kernel: kernel", "kernels: [gray, gray-old]")
    )
    assert "gray-old" not in kernel_matrix("matrix", cwd=tmp_path).stderr  # the full profile has its cells
    result = kernel_matrix("matrix", "--profile", "pr", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr.splitlines() == [
        "gray-old/build.toml: warning: its backends and torch/CUDA ranges leave none of this selection's cells: "
        "gray-old is not built or tested here"
    ]


@pytest.mark.processes
def test_a_family_specific_capability_is_refused_before_cuda_12_9(tmp_path):
    """nvcc 12.8 compiles no sm_100f (family-specific targets came with CUDA 12.9): its cells
    are warned of, and its build refuses the section in one line, not at nvcc's first file."""
    kernel = img2gray_as(
        tmp_path,
        "gray-family",
        'cuda-capabilities = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]',
        'cuda-capabilities = ["10.0f"]',
    )
    cells, _ = plan(matrix_for(tmp_path, kernel, None), tmp_path)
    assert {c["cuda"]: c["archs"] for c in cells if c["backend"] == "cuda"} == {
        "12.6": [],
        "12.8": [],
        "13.0": ["10.0f"],
        "13.2": ["10.0f"],
    }
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel))
    assert (
        "[kernel.img2gray_cuda]: cuda-capabilities ['10.0f'] are family-specific, which CUDA 12.8's nvcc cannot "
        "compile (CUDA 12.9 and later can)" in result.stderr
    )


@pytest.mark.processes
def test_a_python_only_kernels_archs_are_any_text_as_kernel_builder_copies_them(tmp_path):
    """[torch-noarch] cuda_capabilities are metadata, not compiled for: kernel-builder copies any text
    ("sm_90"), and the loader skips an arch it cannot read, so the variant is tested on the GPU runners."""
    kernel = noarch_kernel(tmp_path, "gray-sm", '["cuda"]', noarch='cuda_capabilities = ["sm_90", "9.0"]\n')
    cells, gpu = plan(matrix_for(tmp_path, kernel, "9.0"), tmp_path)
    assert [c["archs"] for c in cells] == [["sm_90", "9.0"]] and set(gpu) == {"torch-cuda"}
    assert runs_on(["sm_90"], (8, 0)) and not runs_on(["sm_90", "9.0"], (8, 0))
    empty = noarch_kernel(tmp_path, "gray-empty", '["cuda"]', noarch='cuda_capabilities = [""]\n')
    result = kernel_matrix("matrix", "--kernel-dir", str(empty))
    assert result.returncode == 2 and "torch-noarch.cuda_capabilities" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("archs", "capability", "skipped"),
    [(["10.0a"], [9, 0], True), (["9.0"], [9, 0], False), (["9.0"], None, False)],
)
@pytest.mark.processes
def test_an_installed_wheel_is_skipped_where_its_archs_do_not_run(tmp_path, archs, capability, skipped):
    """A wheel ships metadata.json beside its library: `test --installed` reads it from the
    package as installed in --python's environment, and checks the GPU there as for a variant."""
    metadata = {"id": "_img2gray_cuda_0", "name": "img2gray", "version": 1, "backend": {"type": "cuda", "archs": archs}}
    python = a_gpu_host(tmp_path, capability, installed=metadata)
    result = kernel_matrix("test", "--installed", "img2gray", "--kernel-dir", str(KERNEL_DIR), "--python", str(python))
    if skipped:
        assert result.returncode == 0, result.stderr
        assert result.stderr.strip() == (
            "skipped img2gray (installed): this GPU (capability 9.0) runs none of the variant's archs (10.0a): "
            "kernels.get_kernel refuses it on this GPU (check_arch); test it on a GPU it was built for"
        )
    else:  # the suite ran (and failed: the interpreter only answers the probes)
        assert result.returncode == 6 and "failed (pytest exit 3)" in result.stderr, result.stderr
        assert ("no GPU that this torch can use" in result.stderr) == (capability is None)


@pytest.mark.processes
def test_an_arch_without_gpu_runners_releases_its_cuda_cells_tested_on_cpus(tmp_path):
    """gpu-test-runner: [] (no GPU runner): no GPU job for that arch's CUDA cells, which the build and
    CPU test jobs still take (publish then does not wait for GPU tests), and `matrix` warns at the key."""
    matrix = matrix_for(tmp_path, KERNEL_DIR, None)
    text = matrix.read_text().replace("gpu-test-runner: [self-hosted, linux, x64, gpu]", "gpu-test-runner: []", 1)
    matrix.write_text(text)
    cells, gpu = plan(matrix, tmp_path)
    cuda = [c["variant"] for c in cells if c["backend"] == "cuda"]
    assert {v for v in cuda if "x86_64" in v} and not [v for v in gpu if "x86_64" in v]
    assert [v for v in gpu if "aarch64" in v] == [v for v in cuda if "aarch64" in v]  # the other arch keeps its
    result = kernel_matrix("matrix", "--file", str(matrix))
    assert result.returncode == 0, result.stderr
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "gpu-test-runner: []" in row)
    count = len([v for v in cuda if "x86_64" in v])
    warning = f"{matrix}:{line}:5: warning: archs.x86_64.gpu-test-runner is []: every kernel's variants of its "
    assert f"{warning}{count} CUDA grid cells" in result.stderr
