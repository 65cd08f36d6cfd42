"""Issue 20's acceptance: kernel-matrix used from a kernel's own repository, as a kernel
author would, end to end on this machine.

kernel-matrix is installed from the wheel built from this checkout into a separate
virtual environment (no project source on the path; torch and the other
dependencies come from .venv's site-packages). In a fresh git repository holding two
corpus kernels (relu and einops; one kernel at a repository's root is tests/end_to_end/test_first_run.py's
first push and tag, from the same Runner), it runs
`kernel-matrix init`, then the generated caller workflow: its job is resolved to
this checkout's reusable workflow, and each job's steps run here, as the runner
would, through the evaluator of tests/end_to_end/test_workflows.py: plan, build (in the
cell's builder image), test-cpu (the kernel's own tests through test-variant),
summary and publish (to the local Hub test server, on a tag push). The released
kernel is then loaded by `kernels.get_kernel` in a fresh process. The same for
img2gray through kernel-matrix's own build.yml.

What cannot run here is said where it is skipped: test-gpu (no GPU), the
legacy-wheel steps (cibuildwheel's own test covers them) and release-wheels (gh).
The matrix is narrowed to one cell for time: torch 2.13's CPU build, whose wheel
this host has, served by a local mirror of the PyTorch index (a trusted run may
choose one), in the offline builder. The mirror's address is the same in every run,
so that builder image is made once per machine, as CI keeps its images; and the
build job's cache steps (actions/cache/restore and save) keep its objects between
this module's runs, as GitHub keeps them between a repository's, where the workflow
uses them (pushes and pull requests; a tag's release build compiles cold)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import CORPUS, REPO, needs_corpus
from github_standin import GitHub, snapshot_commit, stand_in
from hubserver import HubServer
from registry import LoopbackRegistry
from test_workflows import download, load, render, runs, upload

pytestmark = [pytest.mark.build, pytest.mark.engine]

CPU_TORCH = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
VARIANT = "torch213-cxx11-cpu-x86_64-linux"
SKIPPED_USES = ("actions/checkout@", "actions/setup-python@")  # the workspace is the checkout; python is the venv's


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with kernel-matrix from this checkout's wheel; its dependencies (torch included)
    from .venv's site-packages, added as a path, so .venv's editable kernel-matrix stays out."""
    work = tmp_path_factory.mktemp("installed")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", work / "dist", REPO],
        check=True,
    )
    (wheel,) = (work / "dist").glob("kernel_matrix-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz-dependencies.pth").write_text(
        next(p for p in map(Path, sys.path) if p.name == "site-packages").as_posix()
    )
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", wheel], check=True)
    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import kernel_matrix; print(kernel_matrix.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=work,
    ).stdout
    assert where.startswith(str(site)), where  # the wheel's copy, not this checkout
    return venv


@pytest.fixture(scope="module")
def github(tmp_path_factory) -> tuple[GitHub, str]:
    """kernel-matrix's repository on GitHub, stood in for by a local bare repository (git's insteadOf,
    github_standin.py), and its commit holding this checkout as it is, which init pins: the jobs'
    install step then installs this checkout's code from git at that commit, as written."""
    github = stand_in(tmp_path_factory.mktemp("github"))
    return github, snapshot_commit(github)


@pytest.fixture
def on_github(github, monkeypatch) -> tuple[GitHub, str]:
    """init, and every step the Runner runs (pip's git among them), read GitHub through the stand-in."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(github[0].config))
    return github


@pytest.fixture(scope="module")
def mirror() -> Path:
    """A PEP 503 mirror of PyTorch's CPU index holding the CPU torch 2.13 this host has. Its
    address is part of the builder image's recipe, so it is the same in every run: the image
    made for it once is reused, as CI's builder images are (.ci/run), instead of made again."""
    if not CPU_TORCH.is_file():
        pytest.skip(f"{CPU_TORCH} is not on this host")
    root = Path(tempfile.gettempdir()) / f"kernel-matrix-test-mirror-{os.getuid()}"
    project = root / "cpu" / "torch"
    project.mkdir(parents=True, exist_ok=True)
    href = CPU_TORCH.name.replace("+", "%2B")
    # Written whole and renamed into place: runs of the suite at the same time share it.
    for name, write in (
        (CPU_TORCH.name, lambda p: p.symlink_to(CPU_TORCH)),
        ("index.html", lambda p: p.write_text(f'<a href="{href}">{CPU_TORCH.name}</a>\n')),
    ):
        staged = project / f".{name}.{os.getpid()}"
        staged.unlink(missing_ok=True)
        write(staged)
        staged.replace(project / name)
    return root


def narrow(matrix_file: Path, mirror: Path) -> None:
    """The generated matrix, cut to one cell for this host, with the mirror (the file stays init's otherwise)."""
    spec = yaml.safe_load(matrix_file.read_text())
    spec["torch"] = {"2.13": ["13.0"]}
    spec["cpu"] = True
    spec["exclude"] = [{"cuda": "13.0"}]
    spec["archs"] = {"x86_64": spec["archs"]["x86_64"]}
    spec["image"] = "offline"
    spec["upstream"] = {"pytorch": mirror.as_uri()}
    matrix_file.write_text(yaml.safe_dump(spec, sort_keys=False))


def git_repository(path: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
    env["GIT_COMMITTER_EMAIL"] = "a@b"
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "kernel"]):
        subprocess.run(["git", *argv], cwd=path, check=True, env=env)


class ActionsCache:
    """actions/cache for this module's runs (GitHub keeps caches per repository; every run here is
    owner/kernel's): the step restores the entry saved under its key, or else the newest whose key
    starts with one of its restore-keys; its post step, once the job's steps all passed, saves the
    path under the key when no entry had it. So the build job's object cache works as in CI: a run
    that builds a kernel cell built before restores its objects and compiles nothing of it."""

    def __init__(self, root: Path):
        self.root = root
        self.entries: dict[str, Path] = {}  # key: the saved copy, oldest first
        self.restored: list[str | None] = []  # each restore step's entry (None: none found)
        self.saved: list[str] = []  # each save step's key

    def restore(self, spec: dict, context: dict, workspace: Path) -> dict[str, str]:
        """actions/cache/restore: the entry of the key, else the newest of a restore-key; its outputs."""
        options = {name: render(value, context) for name, value in spec["with"].items()}
        key, path = options["key"], workspace / options["path"]
        prefixes = [p.strip() for p in (options.get("restore-keys") or "").splitlines() if p.strip()]
        newest_first = list(reversed(self.entries))
        found = next((k for k in newest_first if k == key), None)
        found = found or next((k for p in prefixes for k in newest_first if k.startswith(p)), None)
        if found is not None:
            shutil.copytree(self.entries[found], path, symlinks=True, dirs_exist_ok=True)
        self.restored.append(found)
        return {"cache-hit": "true" if found == key else "false", "cache-primary-key": key}

    def save(self, spec: dict, context: dict, workspace: Path) -> None:
        """actions/cache/save: the path under the key, unless an entry has that key."""
        options = {name: render(value, context) for name, value in spec["with"].items()}
        key, path = options["key"], workspace / options["path"]
        assert key, "actions/cache/save needs a key"
        if key not in self.entries and path.is_dir():
            self.entries[key] = self.root / str(len(self.entries))
            shutil.copytree(path, self.entries[key], symlinks=True)
        self.saved.append(key)


@pytest.fixture(scope="module")
def actions_cache(tmp_path_factory) -> ActionsCache:
    return ActionsCache(tmp_path_factory.mktemp("actions-cache"))


class Runner:
    """Runs the jobs of the reusable workflow a caller names, for a tag push, on this machine."""

    def __init__(
        self,
        caller: Path,
        repository: Path,
        venv: Path,
        hub: HubServer,
        tmp: Path,
        cache: ActionsCache,
        registry: LoopbackRegistry | None = None,
    ):
        workflow = load(caller)
        (self.job,) = workflow["jobs"].values()
        uses = self.job["uses"]
        path, _, ref = uses.partition("@")
        # A kernel's caller names kernel-matrix's repository at a commit; ours, the local file.
        assert path.endswith("/.github/workflows/reusable-build.yml"), uses
        assert uses.startswith("./") or len(ref) == 40, uses
        self.workflow = load(REPO / ".github" / "workflows" / "reusable-build.yml")
        self.jobs = self.workflow["jobs"]
        self.repository, self.venv, self.hub, self.tmp, self.cache = repository, venv, hub, tmp, cache
        # The images job runs where a registry stands in for ghcr.io; without one it is skipped, as for a
        # pull request (or share-builders: false), and each build makes its own image.
        self.registry = registry
        github = {
            "repository": "owner/kernel",
            "repository_id": "700100",
            "actor": "owner",
            "run_id": 1,
            "workflow": workflow["name"],
            "token": "ghs_job_token",
            "event_name": "push",
            "ref": "refs/tags/v1",
            "ref_type": "tag",
            "ref_name": "v1",
            "event": {"repository": {"default_branch": "main"}},
        }
        caller_context = {"github": github, "inputs": {}, "secrets": {"HF_TOKEN": "hf_test_token"}}
        called = {name: spec.get("default") for name, spec in self.workflow["on"]["workflow_call"]["inputs"].items()}
        called |= {name: render(value, caller_context) for name, value in self.job.get("with", {}).items()}
        # Keyless signing needs GitHub's OIDC token and Sigstore's public instance, which exist only
        # on GitHub: these runs publish unsigned (tests/releasing/test_signatures.py signs with a local trust root).
        called["sign"] = False
        # kernel-matrix is installed from git at the pinned commit (or, in kernel-matrix's own repository,
        # from its checkout), never by a package name.
        pinned = f"git+https://github.com/{path.split('/.github/')[0]}@{ref}"
        assert called["kernel-matrix"] in (".", pinned), called["kernel-matrix"]
        secrets = {name: render(value, caller_context) for name, value in self.job.get("secrets", {}).items()}
        self.context = {"github": github, "inputs": called, "secrets": secrets, "status": "success", "results": {}}
        self.context["env"] = {name: render(value, self.context) for name, value in self.workflow["env"].items()}
        if registry is not None:  # the workflow's REGISTRY (ghcr.io): the registry on loopback
            self.context["env"]["REGISTRY"] = registry.host
        self.artifacts: dict[str, dict[str, bytes]] = {}
        self.ran: list[str] = []

    def workspace(self, name: str) -> Path:
        """A fresh checkout of the caller's repository for one job."""
        target = self.tmp / "jobs" / name
        subprocess.run(["git", "clone", "-q", self.repository, target], check=True)
        return target

    def environment(self, step_env: dict, workspace: Path, job: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KERNEL_MATRIX_", "PIP_NO_"))}
        env.pop("HF_HUB_DISABLE_TELEMETRY", None)
        runner = self.tmp / "runner" / job
        runner.mkdir(parents=True, exist_ok=True)
        env |= {
            "PATH": f"{self.venv / 'bin'}{os.pathsep}{env['PATH']}",
            "GITHUB_EVENT_NAME": "push",
            "GITHUB_REPOSITORY": "owner/kernel",
            "GITHUB_OUTPUT": str(runner / "output"),
            "GITHUB_STEP_SUMMARY": str(runner / "summary"),
            "GITHUB_PATH": str(runner / "path"),
            "RUNNER_TEMP": str(runner),
            # Each job's own docker credentials, as each GitHub runner has (docker login writes them there).
            "DOCKER_CONFIG": str(runner / "docker-config"),
            # The Hub is the local test server; the cell environment is the installed venv.
            "HF_ENDPOINT": self.hub.url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_CACHE": str(self.tmp / "hf-cache"),
            "TEST_VARIANT_VENV": str(self.venv),
        }
        for name, value in {**self.context["env"], **step_env}.items():
            env[name] = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        # The install step's `git+https://github.com/...@COMMIT` reaches the stand-in for GitHub through
        # GIT_CONFIG_GLOBAL (os.environ's, set by on_github): pip builds this checkout's code at that commit.
        return env

    def run_job(self, name: str, matrix: dict | None = None) -> dict[str, str]:
        job = (matrix.get("job") or f"{matrix['kernel']}-{matrix['variant']}") if matrix else ""
        workspace = self.workspace(name + (f"-{job}" if job else ""))
        github = self.context["github"] | {"workspace": str(workspace)}
        runner = {"temp": str(self.tmp / "runner" / name)}  # RUNNER_TEMP, as environment() sets it
        context = self.context | {"github": github, "matrix": matrix or {}, "steps": {}, "runner": runner}
        outputs: dict[str, str] = {}
        wheels_skipped = False
        for s in self.jobs[name]["steps"]:
            if not runs(s, context):
                continue
            uses = s.get("uses", "")
            if uses.startswith(SKIPPED_USES):
                continue
            if uses.startswith("actions/cache/restore@"):
                context["steps"][s["id"]] = {"outputs": self.cache.restore(s, context, workspace)}
                continue
            if uses.startswith("actions/cache/save@"):
                self.cache.save(s, context, workspace)
                continue
            if uses.startswith("actions/upload-artifact@"):
                if wheels_skipped and s["with"]["name"].startswith("wheel-"):
                    continue
                artifact, entries = upload(s, context, workspace)
                if entries or s["with"].get("if-no-files-found") != "ignore":
                    self.artifacts[artifact] = entries
                continue
            if uses.startswith("actions/download-artifact@"):
                download(s, context, self.artifacts, workspace)
                continue
            command = s["run"]
            if command.startswith("kernel-matrix wheels"):
                wheels_skipped = True  # cibuildwheel's repair is tested in test_wheels.py; its wheel's upload too
                continue
            step_env = {k: render(v, context) for k, v in s.get("env", {}).items()}
            env = self.environment(step_env, workspace, name)
            result = subprocess.run(
                ["bash", "-e", "-c", command], cwd=workspace, env=env, capture_output=True, text=True
            )
            assert result.returncode == 0, (
                f"{name}: {command}: exit {result.returncode}\n{result.stdout}{result.stderr}"
            )
            self.ran.append(f"{name}: {command.split()[0]} {command.split()[1] if ' ' in command else ''}".strip())
            output = Path(env["GITHUB_OUTPUT"])
            if output.exists():
                for line in output.read_text().splitlines():
                    key, _, value = line.partition("=")
                    outputs[key] = value
                output.unlink()
        return outputs

    def run(self) -> None:
        """plan, then each job of the graph for a tag push, in order."""
        plan = self.run_job("plan")
        self.context["needs"] = {"plan": {"outputs": plan}}
        jobs = json.loads(plan["jobs"])["include"]
        assert jobs, plan
        images = "skipped"
        if self.registry is not None:
            assert runs(self.jobs["images"], self.context)
            for entry in json.loads(plan["images"])["include"]:
                self.run_job("images", entry)
            images = "success"
        self.context["needs"]["images"] = {"result": images}
        self.context["results"] = {"images": images}
        for job in jobs:
            assert runs(self.jobs["build"], self.context | {"matrix": job})
            self.run_job("build", job)
        for job in jobs:
            if runs(self.jobs["test-cpu"], self.context | {"matrix": job}):
                self.run_job("test-cpu", job)
        # test-gpu: no GPU here (its condition and runner are tested in test_workflows.py): skipped where
        # the plan has no GPU job, else taken as passed.
        self.context["results"] = {"images": images, "test-gpu": "success" if plan["gpu_jobs"] else "skipped"}
        self.run_job("summary")
        assert runs(self.jobs["publish"], self.context)
        self.run_job("publish")
        # release-wheels: gh and GitHub's releases API; tested with a stand-in in test_workflows.py.


def load_released(hub: HubServer, repo_id: str, cwd: Path, check: str, python: Path, version: int = 1) -> str:
    """kernels.get_kernel in a fresh process of python (the venv the tests ran with: torch 2.13, CPU)."""
    script = textwrap.dedent(f"""
        import torch, kernels
        kernel = kernels.get_kernel({repo_id!r}, version={version})
        {check}
        print(kernel.__file__)
    """)
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_CACHE": str(cwd / "user-cache")}
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)
    env.pop("HF_TOKEN", None)
    result = subprocess.run([python, "-c", script], capture_output=True, text=True, env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


RELU_CHECK = "x = torch.randn(64, 64); torch.testing.assert_close(kernel.relu(x), torch.relu(x))"


def adopt(
    folders: dict[str, Path], tmp_path: Path, installed: Path, mirror: Path, pinned: str
) -> tuple[Path, subprocess.CompletedProcess]:
    """A fresh repository holding the kernels, and `kernel-matrix init` run in it, pinning the commit
    of kernel-matrix's stand-in repository that holds this checkout."""
    repository = tmp_path / "repository"
    for name, source in folders.items():
        shutil.copytree(source, repository / name, ignore=shutil.ignore_patterns("__pycache__"))
    init = subprocess.run(
        [installed / "bin" / "kernel-matrix", "init", "--ref", pinned],
        cwd=repository,
        capture_output=True,
        text=True,
        check=False,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    # The jobs' install step is what puts kernel-matrix in their environment (pip would take the wheel's
    # copy for the pinned one, of the same version): from git at the commit init pinned.
    subprocess.run([installed / "bin" / "python", "-m", "pip", "uninstall", "-q", "-y", "kernel-matrix"], check=True)
    narrow(repository / "build_matrix.yaml", mirror)
    git_repository(repository)
    return repository, init


@needs_corpus
def test_a_repository_of_several_kernels_adopts_kernel_matrix(
    installed, mirror, engine, actions_cache, tmp_path, on_github
):
    kernels = {"relu": CORPUS / "kernels-community" / "relu", "einops": CORPUS / "kernels-community" / "einops"}
    repository, _ = adopt(kernels, tmp_path, installed, mirror, on_github[1])
    assert sorted(yaml.safe_load((repository / "build_matrix.yaml").read_text())["kernels"]) == ["einops", "relu"]
    caller = repository / ".github" / "workflows" / "kernel-matrix.yml"
    with HubServer(trusted_orgs=["kernels-community"]) as hub:
        Runner(caller, repository, installed, hub, tmp_path, actions_cache).run()
        python = installed / "bin" / "python"
        loaded = load_released(hub, "kernels-community/relu", tmp_path, RELU_CHECK, python)
        assert f"/build/{VARIANT}/" in loaded
        einops = load_released(hub, "kernels-community/einops", tmp_path, "assert hasattr(kernel, 'rearrange')", python)
        assert "/build/torch-cpu/" in einops


def test_kernel_matrix_builds_its_own_example_kernel_through_build_yml(
    installed, mirror, engine, actions_cache, tmp_path
):
    """build.yml, our own caller: `kernel-matrix: .` installs this checkout in every job."""
    repository = tmp_path / "repository"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO / name).is_file():
            (repository / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repository / name)
    narrow(repository / "build_matrix.yaml", mirror)
    git_repository(repository)
    with HubServer(trusted_orgs=["kernel-matrix"]) as hub, LoopbackRegistry(tmp_path / "registry") as registry:
        caller = repository / ".github" / "workflows" / "build.yml"
        runner = Runner(caller, repository, installed, hub, tmp_path, actions_cache, registry)
        assert runner.context["inputs"]["kernel-matrix"] == "."
        runner.run()
        # The images job pushed the cell's builder image to the repository's packages (the registry
        # on loopback) and listed it by digest; the build job downloaded that list and built with it.
        ((name, files),) = [(n, f) for n, f in runner.artifacts.items() if n.startswith("builder-image-")]
        assert name == f"builder-image-img2gray-{VARIANT}"
        ((listed,),) = [json.loads(data) for data in files.values()]
        repository_path = "owner/kernel/kernel-matrix-builder"
        assert listed["reference"].startswith(f"{registry.host}/{repository_path}@sha256:")
        assert registry.tags(repository_path) == [listed["tag"].split(":")[1]]
        assert (tmp_path / "runner" / "build" / "builder-images" / f"img2gray-{VARIANT}.json").is_file()
        assert "images: kernel-matrix builder-images" in runner.ran
        check = (
            textwrap.dedent("""
            rgb = torch.randint(0, 256, (5, 7, 3), dtype=torch.uint8)
            assert kernel.img2gray(rgb).shape == (5, 7)
        """)
            .strip()
            .replace("\n", "; ")
        )
        loaded = load_released(hub, "kernel-matrix/img2gray", tmp_path, check, installed / "bin" / "python")
    assert f"/build/{VARIANT}/" in loaded
