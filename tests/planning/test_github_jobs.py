"""The build workflow's job matrices: a job a cell up to GitHub's 256 jobs of one matrix,
and over it, batches of one kernel's cells that share a runner, as small as fit
(kernel_matrix/planning/github_jobs.py). The workflow's steps running such a batch are
simulated in test_workflows.py."""

import json
import os
from math import ceil

import pytest
from conftest import REPO, cli_matrix, kernel_matrix, matrix_text

from kernel_matrix.errors import ConfigError
from kernel_matrix.planning.github_jobs import github_jobs, plan_jobs
from kernel_matrix.planning.matrix import GITHUB_MATRIX_LIMIT
from kernel_matrix.planning.selection import Selection


def planned(limit: int, file=REPO / "build_matrix.yaml"):
    resolved = Selection(file).resolve()
    cells = list(resolved.cells)
    return cells, plan_jobs(
        cells, lambda cell: resolved.kernel(cell).name, resolved.build_paths, str(resolved.matrix.path), limit
    )


def shared(cell):
    """What the cells of one job must share: kernel, arch, runners, noarch, CPU test."""
    v = cell.variant
    return (cell.kernel, v.arch, cell.build_runner, cell.test_runner, v.noarch, v.backend)


def test_under_the_limit_each_cell_is_a_job_in_the_cells_order():
    cells, jobs = planned(GITHUB_MATRIX_LIMIT)
    assert [job.cells for job in jobs] == [(cell,) for cell in cells]
    assert [job.name for job in jobs] == [f"img2gray-{cell.name}" for cell in cells]


@pytest.mark.parametrize("limit", [4, 5, 7, 13, 20])  # the repository's matrix: 4 groups, 32 cells
def test_over_the_limit_the_smallest_batches_that_fit(limit):
    cells, jobs = planned(limit)
    groups = {}
    for cell in cells:
        groups.setdefault(shared(cell)[:5], []).append(cell)
    assert len(cells) > limit >= len(jobs) and len(groups) == 4
    # Every cell in exactly one job, a job's cells of one kernel and runner, in the cells' order.
    assert sorted(c.name for job in jobs for c in job.cells) == sorted(c.name for c in cells)
    for job in jobs:
        assert len({shared(cell)[:4] for cell in job.cells}) == 1
        assert list(job.cells) == sorted(job.cells, key=cells.index)
        assert job.paths == tuple(cell.name for cell in job.cells)  # one kernel: build/<variant>/
    size = max(len(job.cells) for job in jobs)
    # The smallest batch size that fits: one fewer would need more jobs than the limit.
    assert size == 1 or sum(ceil(len(g) / (size - 1)) for g in groups.values()) > limit
    names = [job.name for job in jobs]
    assert len(set(names)) == len(names)


def test_more_groups_than_jobs_is_one_line_with_the_counts():
    cells, _ = planned(GITHUB_MATRIX_LIMIT)
    with pytest.raises(ConfigError) as raised:
        planned(1)
    message = str(raised.value)
    assert "\n" not in message and f"the selection's {len(cells)} cells need at least" in message
    assert "a GitHub Actions matrix takes at most 1" in message


def test_the_gpu_jobs_are_the_jobs_narrowed_to_the_cells_the_gpu_runners_test():
    cells, jobs = planned(4)
    gpu = github_jobs(jobs, lambda cell: cell.gpu_testable)["include"]
    assert gpu and all(entry["variants"] for entry in gpu)
    testable = sorted(c.name for c in cells if c.gpu_testable)
    assert sorted(v for entry in gpu for v in entry["variants"].split(",")) == testable
    assert {entry["job"] for entry in gpu} <= {job.name for job in jobs}  # their artifacts are the build jobs'


@pytest.mark.processes
def test_the_plan_command_batches_a_matrix_over_the_limit(tmp_path):
    """400 cells of one kernel: `matrix --json` lists every cell, the job matrix holds 200 jobs of two, and
    the plan says so."""
    releases = "\n".join(f'  "2.{m}": {{ pypi: "13.0", cuda: ["12.6", "12.8", "13.0", "13.2"] }}' for m in range(40))
    torch = "\n".join(f'  "2.{m}": all' for m in range(40))
    path = tmp_path / "big.yaml"
    matrix_text(tmp_path)  # the kernel copied beside it: a matrix names kernel folders inside its own
    path.write_text(
        f"kernel: kernel\ntorch:\n{torch}\narchs:\n  x86_64: {{build-runner: [a], gpu-test-runner: [b]}}\n"
        f"  aarch64: {{build-runner: [a], gpu-test-runner: [b]}}\ntorch-releases:\n{releases}\n"
    )
    output = tmp_path / "github_output"
    output.write_text("")
    env = {**os.environ, "GITHUB_OUTPUT": str(output)}
    result = kernel_matrix("matrix", "--file", str(path), "--json", "--github-output", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == cli_matrix(file=path) and len(json.loads(result.stdout)["include"]) == 400
    assert result.stderr == (
        "note: 400 cells run as 200 jobs of up to 2 cells of one kernel each "
        f"(a GitHub Actions matrix runs at most {GITHUB_MATRIX_LIMIT} jobs)\n"
        f"note: the cells need 400 builder images, more than a matrix's {GITHUB_MATRIX_LIMIT} jobs: "
        "none is shared, each build job makes its own\n"
    )
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    jobs = json.loads(outputs["jobs"])["include"]
    assert len(jobs) == 200 and {len(job["variants"].split(",")) for job in jobs} == {2}
    assert all(len(job["paths"].splitlines()) == 2 for job in jobs)
    # Two cells a job: two cells' time, for builds that may run one after the other.
    assert {(job["build_minutes"], job["test_minutes"]) for job in jobs} == {(180, 120)}
    gpu = json.loads(outputs["gpu_jobs"])["include"]
    assert sum(len(job["variants"].split(",")) for job in gpu) == 40 * 4 * 2  # the CUDA cells
    # 400 builder images (a torch each): more than a matrix of images jobs takes, so none is shared.
    assert outputs["images"] == ""


@pytest.mark.processes
def test_variant_takes_a_jobs_list_of_names():
    """A batch's `variants` (A,B) is what --variant takes, as `build` and `wheels` read it in the job."""
    cells = cli_matrix("pr")["include"]
    names = [cell["variant"] for cell in cells[:2]]
    result = kernel_matrix("matrix", "--json", "--variant", ",".join(names))
    assert result.returncode == 0, result.stderr
    assert [cell["variant"] for cell in json.loads(result.stdout)["include"]] == names
    result = kernel_matrix("matrix", "--json", "--variant", ", ".join(names))  # as written in a shell
    assert result.returncode == 0, result.stderr
    assert [cell["variant"] for cell in json.loads(result.stdout)["include"]] == names
    result = kernel_matrix("matrix", "--json", "--variant", f"{names[0]},")
    assert (
        result.returncode == 2
        and result.stderr == f"error: --variant '{names[0]},': an empty variant name (expected NAME or NAME,NAME,...)\n"
    ), result.stderr


def test_a_jobs_time_limit_grows_with_its_cells_up_to_githubs():
    cells, jobs = planned(GITHUB_MATRIX_LIMIT)
    assert (jobs[0].to_json()["build_minutes"], jobs[0].to_json()["test_minutes"]) == (90, 60)
    group = [cell for cell in cells if shared(cell)[:5] == shared(cells[0])[:5]]
    (job,) = planned_from(group, limit=1)
    assert len(group) >= 4 and job.to_json()["build_minutes"] == 360  # 90 a cell, at most GitHub's 360
    assert job.to_json(job.cells[:1])["test_minutes"] == 60  # the cells it tests (a GPU job's)


def planned_from(cells, limit):
    resolved = Selection(REPO / "build_matrix.yaml").resolve()
    return plan_jobs(cells, lambda cell: "img2gray", resolved.build_paths, "m", limit)
