"""Attack: a pull request's build_matrix.yaml names the self-hosted GPU runner as
its build runner, so that its code builds on the GPU host. `kernel-matrix matrix`
refuses it under a pull-request event, and gives a fork's code no GPU cells; the
workflow's side of the rule is in tests/test_workflows.py."""

import json
import os

import pytest
from conftest import kernel_matrix, matrix_text

from kernel_matrix.config.github_event import GithubEvent, is_github_hosted

HOSTILE = matrix_text().replace("build-runner: [ubuntu-24.04]", "build-runner: [self-hosted, linux, x64, gpu]")


def github_run(tmp_path, event_name, head="someone/kernel"):
    """The environment a GitHub runner gives a step of a run of owner/kernel."""
    payload = tmp_path / "event.json"
    pull_request = {"number": 7, "head": {"repo": {"full_name": head} if head else None}}
    payload.write_text(json.dumps({"pull_request": pull_request} if event_name == "pull_request" else {}))
    return {
        **os.environ,
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": str(payload),
        "GITHUB_REPOSITORY": "owner/kernel",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
    }


def write(tmp_path, text):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("head", ["someone/kernel", "owner/kernel", None], ids=["fork", "same-repo", "deleted-fork"])
def test_a_pull_requests_matrix_may_not_name_a_self_hosted_build_runner(tmp_path, head):
    matrix = write(tmp_path, HOSTILE)
    line = HOSTILE.splitlines().index("    build-runner: [self-hosted, linux, x64, gpu]") + 1
    result = kernel_matrix("matrix", "-f", str(matrix), "--json", env=github_run(tmp_path, "pull_request", head))
    assert result.returncode == 2 and result.stdout == ""
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"error: {matrix}:{line}:")
    assert "archs.x86_64.build-runner" in errors[0] and "self-hosted" in errors[0]
    assert not (tmp_path / "output").exists(), "no job output at all"


def test_the_same_matrix_is_accepted_for_pushes(tmp_path):
    matrix = write(tmp_path, HOSTILE)
    result = kernel_matrix("matrix", "-f", str(matrix), "--json", env=github_run(tmp_path, "push"))
    assert result.returncode == 0, result.stderr
    assert all(
        cell["build_runner"][0] == "self-hosted"
        for cell in json.loads(result.stdout)["include"]
        if cell["arch"] == "x86_64"
    )


def test_a_forks_pull_request_gets_no_gpu_jobs(tmp_path):
    env = github_run(tmp_path, "pull_request", "someone/kernel")
    result = kernel_matrix("matrix", "--json", "--profile", "pr", "--github-output", env=env)
    assert result.returncode == 0, result.stderr
    cuda = {cell["variant"] for cell in json.loads(result.stdout)["include"] if cell["backend"] == "cuda"}
    outputs = dict(line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines())
    assert cuda and cuda <= {job["variants"] for job in json.loads(outputs["jobs"])["include"]}
    assert outputs["gpu_jobs"] == ""
    # The same pull request from a branch of the repository itself is tested on the GPU runners.
    (tmp_path / "output").unlink()
    env = github_run(tmp_path, "pull_request", "owner/kernel")
    assert kernel_matrix("matrix", "--json", "--profile", "pr", "--github-output", env=env).returncode == 0
    outputs = dict(line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines())
    assert {job["variants"] for job in json.loads(outputs["gpu_jobs"])["include"]} == cuda


@pytest.mark.parametrize(
    ("labels", "hosted"),
    [
        (["ubuntu-24.04"], True),
        (["ubuntu-24.04-arm"], True),
        (["ubuntu-latest"], True),
        (["macos-15-intel"], True),
        (["windows-2025"], True),
        (["self-hosted"], False),
        (["gpu"], False),
        (["ubuntu-24.04", "gpu"], False),
        (["ubuntu-gpu"], False),
        (["linux"], False),
        ([], False),
    ],
)
def test_github_hosted_labels(labels, hosted):
    assert is_github_hosted(labels) is hosted


@pytest.mark.parametrize(
    ("name", "payload", "fork"),
    [
        ("pull_request", {"pull_request": {"head": {"repo": {"full_name": "Owner/Kernel"}}}}, False),
        ("pull_request", {"pull_request": {"head": {"repo": {"full_name": "evil/kernel"}}}}, True),
        ("pull_request", {"pull_request": {"head": {"repo": None}}}, True),
        ("pull_request", "not json", True),
        ("workflow_run", {"workflow_run": {"head_repository": {"full_name": "evil/kernel"}}}, True),
        ("push", {}, False),
    ],
)
def test_where_the_code_comes_from(tmp_path, name, payload, fork):
    path = tmp_path / "event.json"
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    event = GithubEvent.from_environment(
        {"GITHUB_EVENT_NAME": name, "GITHUB_EVENT_PATH": str(path), "GITHUB_REPOSITORY": "owner/kernel"}
    )
    assert event.from_fork is fork
    assert event.hosted_runners_only is (fork or name == "pull_request")
    assert GithubEvent.from_environment({}).hosted_runners_only is False  # a developer's machine
