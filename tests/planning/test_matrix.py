"""build_matrix.yaml and the matrix engine."""

import json
from pathlib import Path

import pytest
from conftest import REPO, cli_matrix, kernel_matrix

from kernel_matrix.errors import ConfigError
from kernel_matrix.loader import parse_variant
from kernel_matrix.planning.matrix import Machine, github_matrix, load_matrix, select

DEFAULT = REPO / "build_matrix.yaml"
GOLDEN = Path(__file__).resolve().parent.parent / "golden"
# `local` depends on the machine: the golden file is for the development machine's kind.
DEV_MACHINE = Machine(arch="x86_64", nvcc="13.0")


@pytest.mark.parametrize("profile", ["full", "pr", "local"])
def test_golden_matrix_json(profile, request):
    got = json.dumps(cli_matrix(profile, machine=DEV_MACHINE), indent=1) + "\n"
    golden = GOLDEN / f"matrix-{profile}.json"
    if request.config.getoption("--regen-golden"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(got)
    assert got == golden.read_text(), f"regenerate with: pytest tests/planning/test_matrix.py --regen-golden ({golden})"


def test_default_matrix_covers_the_required_cells():
    names = {c.name for c in load_matrix(DEFAULT).cells}
    for minor in ("211", "212", "213", "214"):
        for arch in ("x86_64", "aarch64"):
            assert f"torch{minor}-cxx11-cu130-{arch}-linux" in names
            assert f"torch{minor}-cxx11-cpu-{arch}-linux" in names
    assert "torch211-cxx11-cu130-x86_64-linux" in names  # the H200 test machine's


def test_local_profile_on_the_development_machine_is_the_cu130_x86_64_cells():
    cells = select(load_matrix(DEFAULT), profile="local", machine=DEV_MACHINE)
    assert [c.name for c in cells] == [f"torch2{m}-cxx11-cu130-x86_64-linux" for m in (11, 12, 13, 14, 15)]
    no_nvcc = select(load_matrix(DEFAULT), profile="local", machine=Machine(arch="aarch64", nvcc=None))
    assert {c.variant.backend for c in no_nvcc} == {"cpu"} and {c.variant.arch for c in no_nvcc} == {"aarch64"}


def test_pr_profile_is_small_and_covers_every_cuda_major_of_the_newest_torch():
    full = load_matrix(DEFAULT)
    pr = select(full, profile="pr")
    newest = max(c.variant.torch for c in full.cells)
    assert {c.variant.torch for c in pr} == {newest}
    majors = {c.variant.cuda.split(".")[0] for c in full.cells if c.variant.torch == newest and c.variant.cuda}
    assert {c.variant.cuda.split(".")[0] for c in pr if c.variant.cuda} == majors
    assert len(pr) < len(full.cells) / 3


@pytest.mark.parametrize("profile", ["full", "pr", "local"])
def test_every_generated_variant_name_parses_with_the_loader(profile):
    for cell in select(load_matrix(DEFAULT), profile=profile, machine=DEV_MACHINE):
        assert parse_variant(cell.name).variant_str == cell.name


def test_cells_carry_everything_a_job_needs():
    cells = github_matrix(load_matrix(DEFAULT).cells)["include"]
    by_name = {c["variant"]: c for c in cells}
    cell = by_name["torch211-cxx11-cu130-x86_64-linux"]
    assert cell["torch_index"] == "pypi"  # PyPI's torch 2.11 is the CUDA 13.0 build
    assert by_name["torch211-cxx11-cu126-x86_64-linux"]["torch_index"].endswith("/whl/cu126")
    assert by_name["torch214-cxx11-cpu-aarch64-linux"]["torch_index"].endswith("/whl/cpu")
    assert cell["gpu_test"] and "gpu" in cell["test_runner"]
    assert "9.0" in cell["capabilities"] and "7.0" not in cell["capabilities"]
    for c in cells:
        assert set(c) == set(cell)


def test_filters():
    matrix = load_matrix(DEFAULT)
    only = select(matrix, only="torch=2.13,cuda=13.0")
    assert {c.name for c in only} == {"torch213-cxx11-cu130-x86_64-linux", "torch213-cxx11-cu130-aarch64-linux"}
    assert [c.name for c in select(matrix, variants=["torch212-cxx11-cpu-x86_64-linux"])] == [
        "torch212-cxx11-cpu-x86_64-linux"
    ]
    assert {c.variant.backend for c in select(matrix, only="backend=cpu")} == {"cpu"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"only": "torch=2.16"}, "no cell has torch 2.16 (known: 2.11, 2.12, 2.13, 2.14, 2.15); did you mean 2.15?"),
        ({"only": "cuda=13.1"}, "did you mean 13.2?"),
        ({"only": "torc=2.13"}, "did you mean torch?"),
        ({"variants": ["torch214-cxx11-cu131-x86_64-linux"]}, "did you mean torch214-cxx11-cu13"),
        ({"profile": "prr"}, "unknown profile 'prr'"),
        ({"only": "torch=2.11,cuda=13.2"}, "the selection is empty"),
    ],
)
def test_bad_selections_are_one_clear_error(kwargs, message):
    with pytest.raises(ConfigError) as raised:
        select(load_matrix(DEFAULT), **kwargs)
    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.processes
def test_cli_json_is_the_github_matrix():
    result = kernel_matrix("matrix", "--json", "--profile", "pr")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == cli_matrix("pr")


@pytest.mark.processes
def test_cli_table_lists_the_cells():
    result = kernel_matrix("matrix", "--only", "torch=2.11,arch=x86_64")
    assert result.returncode == 0, result.stderr
    for column in ("variant", "torch", "CUDA", "arch", "image", "runner"):
        assert column in result.stdout
    assert "torch211-cxx11-cu128-x86_64-linux" in result.stdout
