"""Attack: a pull request's build_matrix.yaml names the self-hosted GPU runner as
its build runner, so that its code builds on the GPU host. `kernel-matrix matrix`
refuses it under a pull-request event, and gives a fork's code no GPU cells; the
workflow's side of the rule is in tests/end_to_end/test_workflows.py."""

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO, kernel_matrix, matrix_text

from kernel_matrix.config.github_event import PULL_REQUEST_EVENTS, GithubEvent, is_github_hosted

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
    matrix_text(tmp_path)  # the kernel it names, copied beside it
    path = tmp_path / "build_matrix.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("head", ["someone/kernel", "owner/kernel", None], ids=["fork", "same-repo", "deleted-fork"])
@pytest.mark.processes
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


@pytest.mark.processes
def test_the_same_matrix_is_accepted_for_pushes(tmp_path):
    matrix = write(tmp_path, HOSTILE)
    result = kernel_matrix("matrix", "-f", str(matrix), "--json", env=github_run(tmp_path, "push"))
    assert result.returncode == 0, result.stderr
    assert all(
        cell["build_runner"][0] == "self-hosted"
        for cell in json.loads(result.stdout)["include"]
        if cell["arch"] == "x86_64"
    )


@pytest.mark.processes
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


# --- one definition of "this event runs a pull request's files", in the code and the workflows -------------------

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
# What `init` writes into a kernel's repository asks it the same way.
CALLER_TEMPLATES = sorted((REPO / "kernel_matrix" / "templates").glob("caller-*.yml.in"))
# How every workflow condition asks it: the events of PULL_REQUEST_EVENTS, in one JSON list.
PULL_REQUEST_RUN = (
    f"contains(fromJSON('{json.dumps(sorted(PULL_REQUEST_EVENTS), separators=(',', ':'))}'), github.event_name)"
)


def event_name_conditions(path: Path) -> list[str]:
    """Every expression of a workflow that reads github.event_name: each `${{ }}`, and each `if:` written
    without one (GitHub reads an `if:` as an expression either way)."""

    def walk(node, key=None):
        if isinstance(node, dict):
            for name, value in node.items():
                yield from walk(value, name)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)
        elif isinstance(node, str):
            wrapped = re.findall(r"\$\{\{(.*?)\}\}", node, re.S)
            yield from wrapped if wrapped or key != "if" else [node]

    return [e for e in walk(yaml.safe_load(path.read_text())) if "event_name" in e]


def test_every_workflow_condition_on_the_event_is_the_codes_definition():
    """A workflow that decided "pull request" by `github.event_name == 'pull_request'` let the other events that
    run a pull request's files (pull_request_target, review events, merge_group) build on the matrix's runners
    while kernel-matrix itself treated them as pull requests: every such condition is PULL_REQUEST_RUN, and any
    other comparison names an event outside the list (push, workflow_dispatch: who may release)."""
    found = []
    for path in WORKFLOWS + CALLER_TEMPLATES:
        for expression in event_name_conditions(path):
            rest = " ".join(expression.split()).replace(PULL_REQUEST_RUN, "PULL_REQUEST_RUN")
            found.append((path.name, rest.count("PULL_REQUEST_RUN")))
            # What is left: plain comparisons with a literal, of events the list does not hold.
            compared = re.findall(r"github\.event_name (?:==|!=) '([^']*)'", rest)
            assert rest.count("github.event_name") == len(compared), (path.name, expression)
            assert not set(compared) & PULL_REQUEST_EVENTS, (path.name, expression)
    # The places that ask it: the selection (profile), the three runners (build, test-cpu, images), the GPU
    # fork rule, the images job's `if` (never for a pull request), and the concurrency groups of the callers
    # and ci.yml; ci.yml's two jobs (the gate, but on a schedule or by hand; everything then and on main).
    assert sorted(found) == sorted(
        [("build.yml", 1)] * 2
        + [("ci.yml", 1)] * 2
        + [("ci.yml", 0)] * 2
        + [("caller-workflow.yml.in", 1)] * 2
        + [("reusable-build.yml", 1)] * 6
        + [("reusable-build.yml", 0)] * 2  # publish and release-wheels: a push or a dispatch
    ), found


@pytest.mark.parametrize(
    "name",
    sorted(PULL_REQUEST_EVENTS | {"push", "workflow_dispatch", "schedule", "workflow_run", "release", "pull"}),
)
def test_the_workflows_condition_means_what_the_code_means(tmp_path, name):
    """The condition, evaluated as GitHub does (tests/end_to_end/test_workflows.py's evaluator), against GithubEvent."""
    from test_workflows import Expression

    event = GithubEvent.from_environment({"GITHUB_EVENT_NAME": name, "GITHUB_REPOSITORY": "owner/kernel"})
    assert Expression(PULL_REQUEST_RUN).evaluate({"github": {"event_name": name}}) is event.pull_request
    assert event.pull_request is (name in PULL_REQUEST_EVENTS)
