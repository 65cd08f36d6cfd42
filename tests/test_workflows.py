"""The GitHub Actions workflows: structure, security rules, and that the plan
job's output is exactly what the build job's fromJSON reads."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, kernel_matrix

from kernel_matrix.matrix import github_matrix, load_matrix, select

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflows_are_locked_down(path):
    workflow = load(path)
    text = path.read_text()
    assert "pull_request_target" not in text
    assert workflow["permissions"] in ({}, {"contents": "read"})
    for job in workflow["jobs"].values():
        assert "timeout-minutes" in job
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
                if step["uses"].startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False
            # Expressions reach commands through env, never by text substitution.
            assert "${{" not in step.get("run", "")


def test_build_workflow_triggers_and_matrix():
    workflow = load(REPO / ".github" / "workflows" / "build.yml")
    assert set(workflow["on"]) == {"push", "pull_request", "workflow_dispatch"}
    assert workflow["on"]["push"]["tags"] == ["v*"]
    build = workflow["jobs"]["build"]
    assert build["needs"] == "plan"
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.cells) }}"
    assert build["strategy"]["fail-fast"] is False
    assert build["runs-on"] == "${{ matrix.build_runner }}"
    plan_step = next(s for s in workflow["jobs"]["plan"]["steps"] if s.get("id") == "plan")
    assert "--github-output cells" in plan_step["run"]


def test_a_schedule_checks_upstream_releases():
    workflow = load(REPO / ".github" / "workflows" / "upstream.yml")
    assert "schedule" in workflow["on"] and "workflow_dispatch" in workflow["on"]
    (job,) = workflow["jobs"].values()
    assert job["steps"][-1]["run"] == "kernel-matrix matrix --check-upstream"


def test_the_plan_command_writes_the_matrix_the_build_job_reads(tmp_path):
    output = tmp_path / "github_output"
    output.write_text("earlier=1\n")
    result = kernel_matrix(
        "matrix",
        "--json",
        "--profile",
        "pr",
        "--github-output",
        "cells",
        env={**os.environ, "GITHUB_OUTPUT": str(output)},
    )
    assert result.returncode == 0, result.stderr
    lines = output.read_text().splitlines()
    assert lines[0] == "earlier=1" and len(lines) == 2 and lines[1].startswith("cells=")
    cells = json.loads(lines[1].removeprefix("cells="))  # what fromJSON parses
    assert cells == github_matrix(select(load_matrix(REPO / "build_matrix.yaml"), profile="pr"))
    assert all({"variant", "build_runner", "test_runner", "artifact"} <= set(cell) for cell in cells["include"])


def test_zizmor_finds_nothing():
    zizmor = shutil.which("zizmor", path=str(Path(sys.executable).parent))
    assert zizmor, "zizmor is installed by scripts/setup-dev (the test extra)"
    result = subprocess.run(
        [zizmor, "--offline", "--no-progress", str(REPO / ".github" / "workflows")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings" in result.stdout + result.stderr
