"""Issue 35's acceptance, its first bullet: a kernel repository's first run on GitHub needs
nothing published anywhere but kernel-matrix's git repository. Three fresh repositories, as the
issue tried them:

- kernels-community's relu at the repository's root (a CPU cell);
- ErikKaum's maxsim at the root: CUDA only (a CUDA cell, built in its container and, with no GPU
  runner given, loaded on the CPU job, its suite not run), version 2 (tag v2), and a Hub id,
  erikkaum/maxsim, that is not the GitHub repository's owner;
- relu and activation side by side (two kernels, two build jobs; activation's suite needs a GPU,
  so the CPU job loads its variant instead of failing its suite, and publish is not blocked).

For each:
- kernel-matrix's GitHub repository is a local bare repository holding this checkout as a
  commit (tests/github_standin.py: git's url.<bare>.insteadOf https://github.com/OWNER/NAME,
  in the file GIT_CONFIG_GLOBAL names);
- the author's kernel-matrix is the wheel scripts/release-build makes (sdist, then the wheel
  from it) of that commit, installed in a fresh environment; the jobs' Python is another, which
  starts without kernel-matrix, as setup-python's does;
- `kernel-matrix init --repository OWNER/NAME --ref <commit>` writes the caller, whose matrix
  is narrowed to one cell this host can build (tests/end_to_end/test_adoption.py's mirror and
  offline builder for the CPU cell; the CUDA cell is the gate's, whose builder image
  tests/prepare_images.py makes);
- the caller's reusable workflow runs job by job through tests/end_to_end/test_workflows.py's evaluator
  (tests/end_to_end/test_adoption.py's Runner), every `run:` line as written, the install step included: pip
  installs kernel-matrix from that git repository at the commit. A push to main (build, CPU test,
  summary; no publish), then the version's tag (the same, and publish to the loopback Hub), then a
  fresh process's `kernels.get_kernel` of each kernel.

Every step sees a package index holding a squatter's `kernel-matrix` 999 (what anyone could
upload under the unclaimed name): a step that installed kernel-matrix by name would get it.
Not run here: test-gpu (no GPU), the legacy wheels (test_wheels.py) and release-wheels (gh),
as in test_adoption.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import CORPUS, needs_corpus
from github_standin import RELEASE, GitHub, snapshot_commit, stand_in
from hubserver import HubServer
from test_adoption import (  # noqa: F401 - mirror is a fixture
    RELU_CHECK,
    VARIANT,
    ActionsCache,
    Runner,
    git_repository,
    load_released,
    mirror,
    narrow,
)
from test_workflows import render, runs

pytestmark = [pytest.mark.build, pytest.mark.engine, pytest.mark.corpus]

SQUATTED = "999.0"


@pytest.fixture(scope="module")
def github(tmp_path_factory) -> tuple[GitHub, str]:
    github = stand_in(tmp_path_factory.mktemp("github"))
    return github, snapshot_commit(github)


@pytest.fixture
def on_github(github, monkeypatch) -> tuple[GitHub, str]:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(github[0].config))
    return github


def configured_find_links() -> list[str]:
    """What pip's configuration already names (PIP_FIND_LINKS replaces it, so it is named again)."""
    if os.environ.get("PIP_FIND_LINKS"):
        return os.environ["PIP_FIND_LINKS"].split()
    configured = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True
    )
    return configured.stdout.split() if configured.returncode == 0 else []


def squatter_index(folder: Path) -> Path:
    """A find-links folder with a `kernel-matrix` wheel that is not kernel-matrix."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"kernel_matrix-{SQUATTED}-py3-none-any.whl"
    info = f"kernel_matrix-{SQUATTED}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("kernel_matrix/__init__.py", "raise SystemExit('the squatted kernel-matrix ran')\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: kernel-matrix\nVersion: {SQUATTED}\n")
        wheel_info = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        archive.writestr(f"{info}/WHEEL", wheel_info)
        archive.writestr(f"{info}/RECORD", "")
    return folder


@pytest.fixture(scope="module")
def author(tmp_path_factory, github) -> Path:
    """The kernel author's environment: the wheel scripts/release-build makes of the stand-in's commit
    (its sdist beside it), installed alone; its dependencies (torch among them) from .venv's
    site-packages, added as a path."""
    _, commit = github
    work = tmp_path_factory.mktemp("author")
    source = work / "kernel-matrix"
    source.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=github[0].bare, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", source], input=archive, check=True)
    built = subprocess.run(
        ["scripts/release-build"], cwd=source, env={**os.environ, "PYTHON": sys.executable}, capture_output=True
    )
    assert built.returncode == 0, built.stderr.decode()[-3000:]
    (wheel,) = (source / "dist").glob("kernel_matrix-*.whl")
    assert len(list((source / "dist").glob("kernel_matrix-*.tar.gz"))) == 1
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz-dependencies.pth").write_text(
        next(p for p in map(Path, sys.path) if p.name == "site-packages").as_posix()
    )
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", wheel], check=True)
    return venv


@pytest.fixture
def runner_python(tmp_path_factory) -> Path:
    """What setup-python gives a job: a Python without kernel-matrix, so that the install step installs it
    (from git) rather than finding one. Its other packages (the dependencies, torch) are .venv's, seen through
    a folder of links to everything of .venv's site-packages but kernel-matrix's own entries and .pth hooks.
    One per repository: test-variant installs the cell's torch into it (2.13's CPU build for a CPU cell)."""
    work = tmp_path_factory.mktemp("runner")
    packages = next(p for p in map(Path, sys.path) if p.name == "site-packages")
    view = work / "dependencies"
    view.mkdir()
    for entry in packages.iterdir():
        if not entry.name.startswith(("kernel_matrix", "__editable__")) and entry.suffix != ".pth":
            (view / entry.name).symlink_to(entry)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz-dependencies.pth").write_text(view.as_posix())
    probe = subprocess.run([venv / "bin" / "python", "-c", "import kernel_matrix"], capture_output=True, cwd=work)
    assert probe.returncode != 0, "the job's Python must start without kernel-matrix"
    return venv


class FirstRun(Runner):
    """test_adoption's Runner for a push to a ref of the caller's repository (a branch or a tag), every step
    with the squatter's index in pip's find-links."""

    def __init__(self, *args, ref: str, squatter: Path):
        super().__init__(*args)
        kind = "tag" if ref.startswith("refs/tags/") else "branch"
        self.context["github"] |= {"ref": ref, "ref_type": kind, "ref_name": ref.split("/", 2)[2]}
        self.context["env"] = {name: render(value, self.context) for name, value in self.workflow["env"].items()}
        self.squatter = squatter
        self.installs: list[tuple[str, str]] = []  # (job, what the step hands pip as kernel-matrix)

    def environment(self, step_env: dict, workspace: Path, job: str) -> dict[str, str]:
        for name in ("KERNEL_MATRIX", "KERNEL_MATRIX_INSTALL"):
            if name in step_env:
                self.installs.append((job, str(step_env[name])))
        env = super().environment(step_env, workspace, job)
        env["PIP_FIND_LINKS"] = " ".join([str(self.squatter), *configured_find_links()])
        return env

    def push(self) -> list[dict]:
        """A push to a branch: plan, each cell's build and test-cpu, summary; no publish. The cells."""
        plan = self.run_job("plan")
        self.context["needs"] = {"plan": {"outputs": plan}}
        jobs = json.loads(plan["jobs"])["include"]
        for job in jobs:
            self.run_job("build", job)
        for job in jobs:
            assert runs(self.jobs["test-cpu"], self.context | {"matrix": job})
            self.run_job("test-cpu", job)
        assert plan["gpu_jobs"] == "", "no GPU runner was given: no GPU job"
        self.context["results"] = {"test-gpu": "skipped"}
        self.run_job("summary")
        assert not runs(self.jobs["publish"], self.context)
        return jobs


@dataclass(frozen=True)
class Published:
    """A kernel of the repository as a user loads it: its Hub id, a check of the loaded module, the variant."""

    repo_id: str
    check: str
    variant: str


@dataclass(frozen=True)
class Repository:
    """A fresh kernel repository: where each corpus kernel goes in it ('.' is its root), its cell."""

    kernels: dict[str, str]  # folder in the repository -> the corpus kernel (owner/name)
    cuda: bool  # a CUDA cell (the gate's: the newest torch PyPI ships for this host's CUDA), else 2.13's CPU
    tag: str  # the tag that releases it: v<build.toml's general.version>
    published: tuple[Published, ...]


MAXSIM_CHECK = "assert callable(kernel.score_pairs_packed)"
ACTIVATION_CHECK = (
    "x = torch.randn(4, 16); out = torch.empty(4, 8); kernel.silu_and_mul(out, x); "
    "torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :8]) * x[:, 8:])"
)
REPOSITORIES = {
    "relu": Repository(
        {".": "kernels-community/relu"}, False, "v1", (Published("kernels-community/relu", RELU_CHECK, VARIANT),)
    ),
    "maxsim": Repository({".": "ErikKaum/maxsim"}, True, "v2", (Published("erikkaum/maxsim", MAXSIM_CHECK, ""),)),
    "relu-and-activation": Repository(
        {"relu": "kernels-community/relu", "activation": "kernels-community/activation"},
        False,
        "v1",
        (
            Published("kernels-community/relu", RELU_CHECK, VARIANT),
            Published("kernels-community/activation", ACTIVATION_CHECK, VARIANT),
        ),
    ),
}


def narrow_to_cuda(matrix_file: Path, cell) -> None:
    """init's matrix cut to the gate's CUDA cell (its torch from PyPI, in the offline builder whose image
    tests/prepare_images.py makes), for one capability, the GPU test runners' (it compiles one arch)."""
    spec = yaml.safe_load(matrix_file.read_text())
    spec["torch"] = {cell.variant.torch: [cell.variant.cuda]}
    spec["cpu"] = False
    spec["archs"] = {"x86_64": spec["archs"]["x86_64"]}
    spec["image"] = "offline"
    spec["cuda-capabilities"] = [{"min-cuda": cell.variant.cuda, "capabilities": ["9.0"]}]
    matrix_file.write_text(yaml.safe_dump(spec, sort_keys=False))


@needs_corpus
@pytest.mark.parametrize("name", list(REPOSITORIES))
def test_a_kernel_repositorys_first_push_and_tag_need_only_kernel_matrixs_git_repository(
    name,
    author,
    runner_python,
    mirror,  # noqa: F811 - test_adoption's fixture
    engine,
    on_github,
    request,
    tmp_path,
):
    spec = REPOSITORIES[name]
    cell = request.getfixturevalue("local_cuda_cell") if spec.cuda else None  # skips here where there is none
    github, commit = on_github
    pinned = f"git+https://github.com/{RELEASE['repository']}@{commit}"
    repository = tmp_path / name
    for folder, kernel in spec.kernels.items():
        shutil.copytree(CORPUS / kernel, repository / folder, ignore=shutil.ignore_patterns("__pycache__"))
    init = subprocess.run(
        [author / "bin" / "kernel-matrix", "init", "--repository", RELEASE["repository"], "--ref", commit],
        cwd=repository,
        capture_output=True,
        text=True,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    assert "HF_TOKEN" in init.stdout + init.stderr  # the next steps name the secret to add
    for kernel in spec.published:  # and the Hub repositories publish will write (create-access on the Hub)
        assert kernel.repo_id in init.stdout, init.stdout
    caller = repository / ".github" / "workflows" / "kernel-matrix.yml"
    (job,) = yaml.safe_load(caller.read_text())["jobs"].values()
    # One commit, twice: the reusable workflow and the kernel-matrix every job installs.
    assert job["uses"] == f"{RELEASE['repository']}/.github/workflows/reusable-build.yml@{commit}"
    assert job["with"]["kernel-matrix"] == pinned
    matrix_file = repository / "build_matrix.yaml"
    # What init wrote plans no job for a runner the author did not give, on the full grid too.
    assert all(arch["gpu-test-runner"] == [] for arch in yaml.safe_load(matrix_file.read_text())["archs"].values())
    if cell is not None:
        narrow_to_cuda(matrix_file, cell)
        published = tuple(Published(k.repo_id, k.check, cell.name) for k in spec.published)
    else:
        narrow(matrix_file, mirror)
        published = spec.published
    git_repository(repository)
    squatter = squatter_index(tmp_path / "squatter")
    cache = ActionsCache(tmp_path / "actions-cache")

    orgs = sorted({kernel.repo_id.split("/")[0] for kernel in published})
    with HubServer(trusted_orgs=orgs) as hub:
        runner = (caller, repository, runner_python, hub)
        push = FirstRun(*runner, tmp_path / "push", cache, ref="refs/heads/main", squatter=squatter)
        cells = push.push()
        assert len(cells) == len(published)
        # A push reads and writes the cross-run object cache (nothing yet to read on the first).
        assert cache.restored == [None] * len(cells) and len(cache.saved) == len(cells)
        for kernel in published:
            with pytest.raises(KeyError, match="no kernel repo"):  # nothing was published: no repo was even made
                hub.commits(kernel.repo_id)

        tag = FirstRun(*runner, tmp_path / "tag", cache, ref=f"refs/tags/{spec.tag}", squatter=squatter)
        tag.run()
        # The tag's release build neither restored nor saved a cache: it compiled cold.
        assert cache.restored == [None] * len(cells) and len(cache.saved) == len(cells)
        python = runner_python / "bin" / "python"
        for kernel in published:
            assert f"build/{kernel.variant}/metadata.json" in hub.files(kernel.repo_id, spec.tag)
            # In a fresh process of the Python the jobs ran, with the cell's torch (test-variant installed it).
            loaded = load_released(hub, kernel.repo_id, tmp_path, kernel.check, python, version=int(spec.tag[1:]))
            assert f"/build/{kernel.variant}/" in loaded

    # Every job installed kernel-matrix from the pinned commit and nothing else: the install steps of
    # plan, build, test-cpu and publish, and test-variant's cell environment.
    installs = push.installs + tag.installs
    assert {value for _, value in installs} == {pinned}, installs
    assert {job for job, _ in tag.installs} == {"plan", "build", "test-cpu", "publish"}
    # pip records where the jobs' kernel-matrix came from: git, at that commit; the squatter's never came.
    (record,) = (runner_python / "lib").glob("python3*/site-packages/kernel_matrix-*.dist-info/direct_url.json")
    origin = json.loads(record.read_text())
    assert origin["url"] == f"https://github.com/{RELEASE['repository']}", origin
    assert origin["vcs_info"]["commit_id"] == commit, origin
    installed = list((runner_python / "lib").glob(f"python3*/site-packages/kernel_matrix-{SQUATTED}.dist-info"))
    assert installed == [], "a step installed kernel-matrix by name: the squatter's package"
