"""Every shell command README.md shows works verbatim. Each one is either run here
(in a fresh clone, from its root, as a reader would type it) or run verbatim by the
test named for it below; a command no test covers fails the first test."""

import importlib
import re
import shutil
import subprocess

import pytest
from conftest import REPO
from github_standin import RELEASE, tagged_release

README = REPO / "README.md"
# The README and the docs it links (whose links test_every_link_... follows).
DOCS = [README, *sorted((REPO / "docs").rglob("*.md"))]
# Every command these show is run verbatim, but two pages' that need what this machine lacks: workflows.md's
# job-by-job reproduction (its build runs in the official CUDA image, from a registry; test-gpu needs a GPU)
# and runner-host.md's set-up of a GPU host (root, NVIDIA's packages, GitHub's runner).
NOT_RUN_HERE = {REPO / "docs" / "workflows.md", REPO / "docs" / "runner-host.md"}


def docs_text() -> str:
    return "\n".join(path.read_text() for path in DOCS if path not in NOT_RUN_HERE)


CI_RUN = REPO / ".ci" / "run"
# README's install line: kernel-matrix from its git repository at the commit its latest release
# is tagged at (never by a name on an index, which anyone may claim; never a branch, which moves).
INSTALL = f'pip install "kernel-matrix @ git+https://github.com/{RELEASE["repository"]}@{tagged_release()}"'

# How each command is run verbatim: by .ci/run (checked to hold it) or by the test of this module named.
RUN_BY = {
    # The first of the two commands: .ci/run's own setup (scripts/test starts with scripts/setup-dev), then the rest.
    "scripts/setup-dev && .venv/bin/kernel-matrix build && .venv/bin/kernel-matrix test": (
        "test_the_main_command_builds_and_tests"
    ),
    "scripts/test": ".ci/run",
    'eval "$(scripts/docker-engine start)"': ".ci/run",
    ".venv/bin/kernel-matrix build --kernel-dir ../shared/corpus/kernels-community/relu --build-dir build/relu "
    "--backend cpu": "test_the_commands_for_your_kernel",
    ".venv/bin/kernel-matrix test --kernel-dir ../shared/corpus/kernels-community/relu --build-dir build/relu "
    "--backend cpu": "test_the_commands_for_your_kernel",
    ".venv/bin/kernel-matrix check-abi --kernel-dir ../shared/corpus/kernels-community/relu --build-dir build/relu "
    "--backend cpu": "test_the_commands_for_your_kernel",
    ".venv/bin/kernel-matrix verify": "test_the_main_command_builds_and_tests",
    ".venv/bin/kernel-matrix build --profile local --only torch=2.14": "test_the_container_and_wheel_commands",
    ".venv/bin/kernel-matrix wheels --profile local --only torch=2.14": "test_the_container_and_wheel_commands",
    # "Use it in your kernel's repository": run from the wheel, in a fresh venv and kernel repository.
    INSTALL: "test_packaging::test_the_readme_commands_for_your_kernels_repository_from_git",
    "kernel-matrix init": "test_packaging::test_the_readme_commands_for_your_kernels_repository_from_git",
    'git add build_matrix.yaml .github/workflows && git commit -m "Build with kernel-matrix" '
    "&& git push": "test_packaging::test_the_readme_commands_for_your_kernels_repository_from_git",
}


def readme_commands(heading: str | None = None) -> list[str]:
    """Each command line of the ```sh blocks of README.md and docs/ (under one ## or ### heading, if given),
    its trailing comment removed."""
    text = docs_text()
    if heading is not None:
        text = re.split(r"^#+ ", re.split(rf"^#+ {re.escape(heading)}\n", text, flags=re.M)[1], flags=re.M)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_every_readme_command_is_run_verbatim_by_a_test():
    commands = readme_commands()
    assert len(commands) >= 8
    uncovered = [c for c in commands if c not in RUN_BY]
    assert uncovered == [], "README commands no test runs: add them to RUN_BY and run them"
    for command, runner in RUN_BY.items():
        if runner == ".ci/run":
            assert command in CI_RUN.read_text(), f".ci/run does not run {command!r}"
        elif "::" in runner:  # a test of another module
            module, _, name = runner.partition("::")
            assert callable(getattr(importlib.import_module(module), name, None)), runner
        else:
            assert callable(globals().get(runner)), runner
    assert command_lines(CI_RUN)[-1] == "scripts/test", ".ci/run must end with the README's test command"
    assert command_lines(REPO / "scripts" / "test")[0] == "scripts/setup-dev"


def test_every_link_between_the_readme_and_the_docs_leads_to_a_file():
    """The README was split into docs/ by reader: a relative link that leads nowhere is a page lost."""
    broken = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if not re.match(r"[a-z]+:", target) and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(REPO)}: {target}")
    assert broken == []
    assert len(README.read_text().splitlines()) < 150, "the README is for a kernel author's five minutes"


def command_lines(script) -> list[str]:
    lines = [line.strip() for line in script.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "set ", "cd ", "trap ", "export "))]


@pytest.fixture
def clone(tmp_path):
    """A fresh clone of this checkout (its committed and uncommitted files), with the
    project's .venv, as a reader has it after scripts/setup-dev."""
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(target)], check=True)
    for path in subprocess.run(
        ["git", "ls-files", "-m", "-o", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines():
        source = REPO / path
        if source.is_file():
            (target / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / path)
    if not (REPO / ".venv" / "bin" / "kernel-matrix").exists():
        pytest.skip("no .venv: scripts/setup-dev makes it")
    (target / ".venv").symlink_to(REPO / ".venv")
    return target


def run(command: str, cwd) -> subprocess.CompletedProcess:
    result = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result


@pytest.mark.build
def test_the_main_command_builds_and_tests(clone):
    (first,) = [c for c in readme_commands() if c.startswith("scripts/setup-dev && ")]
    run(first.removeprefix("scripts/setup-dev && "), clone)  # setup-dev itself: every CI run starts with it
    built = [p for p in (clone / "build").iterdir() if (p / "metadata.json").is_file()]
    assert len(built) == 1 and built[0].name.startswith("torch")
    # "Reproducible builds": verify the variant just built (this host's, whatever torch it has).
    (verify,) = [c for c in readme_commands() if c.split()[1:2] == ["verify"]]
    assert f"identical: {built[0]} (" in run(verify, clone).stdout


@pytest.mark.build
def test_the_container_and_wheel_commands(clone, engine):
    commands = [c for c in readme_commands() if "--profile local --only torch=2.14" in c]
    assert [c.split()[1] for c in commands] == ["build", "wheels"]
    for command in commands:
        run(command, clone)
    from kernel_matrix.planning.toolchain import find_nvcc

    wheels = sorted(p.name for p in (clone / "build" / "wheels").glob("*.whl"))
    # The local profile is this host's CUDA (13.0: the wheel the README names), or CPU without nvcc.
    named = "img2gray-1+torch214cu130-cp39-abi3-manylinux_2_28_x86_64.whl"
    assert named in docs_text()
    cuda = find_nvcc()
    label = {None: "cpu", "13.0": "cu130"}.get(cuda.version if cuda else None, "other")
    assert wheels == [f"img2gray-1+torch214{label}-cp39-abi3-manylinux_2_28_x86_64.whl"]


@pytest.mark.build
def test_the_commands_for_your_kernel():
    """From the project root, beside ../shared (where the corpus is: skipped elsewhere)."""
    commands = readme_commands("Use it for your kernel")
    assert len(commands) == 3 and all(c.startswith(".venv/bin/kernel-matrix ") for c in commands)
    if not (REPO.parent / "shared" / "corpus" / "kernels-community" / "relu").is_dir():
        pytest.skip("no ../shared/corpus beside the project")
    if not (REPO / ".venv" / "bin" / "kernel-matrix").exists():
        pytest.skip("no .venv: scripts/setup-dev makes it")
    target = REPO / "build" / "relu"
    shutil.rmtree(target, ignore_errors=True)
    try:
        for command in commands:
            run(command, REPO)
    finally:
        shutil.rmtree(target, ignore_errors=True)
