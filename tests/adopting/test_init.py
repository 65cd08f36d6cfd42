"""A kernel's own repository (issue 20): the default matrix in a kernel's folder without
a build_matrix.yaml, and `kernel-matrix init`, whose files must pass actionlint and
zizmor as the project's own workflows do. Kernels are copies of ../shared/corpus."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import COMMUNITY, REPO, img2gray_as, img2gray_copies, kernel_matrix, needs_corpus, snapshot
from github_standin import GitHub, git, stand_in

import kernel_matrix as package

RELU = COMMUNITY / "relu"
EINOPS = COMMUNITY / "einops"
DEFAULT = REPO / "kernel_matrix" / "data" / "default_matrix.yaml"
RELEASE = yaml.safe_load((REPO / "kernel_matrix" / "data" / "release.yaml").read_text())
BIN = Path(sys.executable).parent
WORKFLOW = Path(".github/workflows/kernel-matrix.yml")


@pytest.fixture(scope="session")
def github(tmp_path_factory) -> GitHub:
    return stand_in(tmp_path_factory.mktemp("github"))


# The commit init pins where a test does not ask for the release's (pinned_by_default).
PINNED: dict[str, str] = {}


@pytest.fixture(autouse=True)
def on_github(github, monkeypatch) -> GitHub:
    """Every init of this module checks its pin against the stand-in for GitHub."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(github.config))
    PINNED["commit"] = github.head
    return github


@pytest.fixture
def relu(tmp_path) -> Path:
    """relu as published: build.toml at the root of its own repository."""
    target = tmp_path / "relu"
    shutil.copytree(RELU, target)
    return target


def cells(*args: str, cwd: Path) -> list[str]:
    result = kernel_matrix("matrix", "--json", *args, cwd=cwd, check=True)
    return [entry["variant"] for entry in json.loads(result.stdout)["include"]]


def test_the_default_matrix_is_the_repositorys_grid():
    ours, default = (yaml.safe_load(p.read_text()) for p in (REPO / "build_matrix.yaml", DEFAULT))
    assert default.pop("kernel") == "." and ours.pop("kernel") == "kernel"
    assert default == ours, "data/default_matrix.yaml and build_matrix.yaml differ beyond their kernel line"


def test_the_release_is_this_version_or_this_is_a_development_version_after_it():
    """data/release.yaml names the latest release: a commit holding the reusable workflow and the
    package of that version. This package is that release (its code the same as at the commit, but
    for release.yaml) or a development version after it, which never claims a released number."""
    from packaging.version import Version

    assert set(RELEASE) == {"repository", "commit", "version"}  # init reads the workflows at the commit itself
    assert re.fullmatch(r"[\w-]+/[\w.-]+", RELEASE["repository"]) and re.fullmatch(r"[0-9a-f]{40}", RELEASE["commit"])
    assert f'version = "{package.__version__}"' in (REPO / "pyproject.toml").read_text()
    ours, released = Version(package.__version__), Version(RELEASE["version"])
    assert ours >= released
    reusable = subprocess.run(
        ["git", "cat-file", "-e", f"{RELEASE['commit']}:.github/workflows/reusable-build.yml"], cwd=REPO, check=False
    )
    if reusable.returncode != 0 and (REPO / ".git" / "shallow").exists():
        pytest.skip("a shallow clone: the pinned commit is not here")
    assert reusable.returncode == 0, f"{RELEASE['commit']} holds no .github/workflows/reusable-build.yml"
    pinned = subprocess.run(
        ["git", "show", f"{RELEASE['commit']}:pyproject.toml"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert f'version = "{RELEASE["version"]}"' in pinned.stdout, "the pinned commit is not that version's"
    # On this checkout's branch: a commit of kernel-matrix's own history, not one of a fork.
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", RELEASE["commit"], "HEAD"], cwd=REPO, check=False)
    assert ancestor.returncode == 0, f"{RELEASE['commit']} is not in this branch's history"
    if ours == released:  # the release itself: what the pin runs is this code
        changed = subprocess.run(
            ["git", "diff", "--name-only", RELEASE["commit"], "--", "kernel_matrix", ".github", "pyproject.toml"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert changed in ([], ["kernel_matrix/data/release.yaml"]), changed
    else:
        assert ours.is_devrelease, f"{ours}: a version after release {released} that is not one is a dev version"


# --- the default matrix ---------------------------------------------------------------------------------------------


@needs_corpus
@pytest.mark.processes
def test_a_kernels_folder_without_a_matrix_gets_the_default(relu, tmp_path):
    got = cells("--profile", "pr", cwd=relu)
    explicit = tmp_path / "explicit.yaml"
    shutil.copy(DEFAULT, explicit)
    explicit.write_text(explicit.read_text().replace("kernel: .\n", f"kernel: {relu}\n"))
    assert got == cells("--profile", "pr", "--file", str(explicit), cwd=relu) and got
    table = kernel_matrix("matrix", cwd=relu, check=True).stdout
    assert "kernel-matrix's default matrix (no build_matrix.yaml here)" in table


@needs_corpus
@pytest.mark.processes
def test_a_matrix_file_in_the_folder_or_file_overrides_the_default(relu, tmp_path):
    narrow = DEFAULT.read_text()
    for minor in ("2.11", "2.12", "2.13", "2.15"):
        narrow = narrow.replace(f'  "{minor}": all', "")
    (relu / "build_matrix.yaml").write_text(narrow)
    assert {c.split("-")[0] for c in cells(cwd=relu)} == {"torch214"}
    (relu / "build_matrix.yaml").unlink()
    other = tmp_path / "other.yaml"
    other.write_text(narrow.replace("kernel: .\n", f"kernel: {relu}\n").replace('"2.14"', '"2.13"'))
    assert {c.split("-")[0] for c in cells("-f", str(other), cwd=relu)} == {"torch213"}
    # A --file that is not there is an error, never the default.
    missing = kernel_matrix("matrix", "-f", "nope.yaml", cwd=relu)
    assert (
        missing.returncode == 2
        and missing.stderr == "error: nope.yaml: cannot read the matrix file (No such file or directory)\n"
    )


@pytest.mark.processes
def test_a_folder_without_matrix_or_build_toml_says_how_to_get_one(tmp_path):
    result = kernel_matrix("matrix", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert "cannot read the matrix file" in result.stderr and "kernel-matrix init" in result.stderr


@needs_corpus
@pytest.mark.build
def test_build_test_check_abi_and_clean_from_a_kernels_folder(relu, object_cache):
    subprocess.run(["git", "init", "-q"], cwd=relu, check=True)  # clean acts inside a git checkout only
    kernel_matrix("build", "--backend", "cpu", "--cache-dir", str(object_cache), cwd=relu, check=True)
    (variant,) = [p.name for p in (relu / "build").iterdir() if (p / "metadata.json").is_file()]
    assert variant.startswith("torch") and variant.endswith("-cpu-x86_64-linux")
    assert "passed" in kernel_matrix("test", "--backend", "cpu", cwd=relu, check=True).stderr
    kernel_matrix("check-abi", variant, cwd=relu, check=True)
    kernel_matrix("clean", cwd=relu, check=True)


# --- init -----------------------------------------------------------------------------------------------------------


def init(*args: str, cwd: Path, pinned_by_default: bool = False) -> subprocess.CompletedProcess:
    """kernel-matrix init; without --ref, at this checkout's commit on the stand-in for GitHub (which
    a shallow clone has too), unless pinned_by_default: at the release's (data/release.yaml)."""
    if "--ref" not in args and not pinned_by_default:
        args = (*args, "--ref", PINNED["commit"])
    result = kernel_matrix("init", *args, cwd=cwd)
    result.stderr = without_release_note(result.stderr)
    return result


# What init says when kernel-matrix is a development version (checked on its own below).
RELEASE_NOTE = f"note: kernel-matrix {package.__version__} is not a release: the workflow runs release "


def without_release_note(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith(RELEASE_NOTE))


@needs_corpus
@pytest.mark.processes
def test_init_writes_a_matrix_and_a_pinned_caller(relu, github):
    """By default, the release's commit, checked on GitHub: `uses:` and the kernel-matrix every job
    installs name that one commit (from git, never a package name), with its version beside it."""
    github.needs_release()
    result = init(cwd=relu, pinned_by_default=True)
    assert result.returncode == 0, result.stderr
    assert "wrote build_matrix.yaml" in result.stdout and "HF_TOKEN" in result.stdout and "hub" in result.stdout
    assert "note:" not in result.stderr  # its full profile runs as written
    matrix = yaml.safe_load((relu / "build_matrix.yaml").read_text())
    default = yaml.safe_load(DEFAULT.read_text())
    assert matrix["kernel"] == "." and matrix["torch"] == default["torch"]
    # The default's GitHub-hosted build runners; no GPU runner the author did not name.
    assert matrix["archs"] == {
        arch: {"build-runner": runners["build-runner"], "gpu-test-runner": []}
        for arch, runners in default["archs"].items()
    }
    assert matrix["exclude"] == []
    # The written matrix is the default's grid: the same cells as without it.
    with_file = cells(cwd=relu)
    (relu / "build_matrix.yaml").rename(relu / "written.yaml")
    assert with_file == cells(cwd=relu)

    text = (relu / WORKFLOW).read_text()
    workflow = yaml.safe_load(text)
    on = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert on["push"] == {"branches": ["main"], "tags": ["v*"]} and "pull_request" in on
    ours = yaml.safe_load((REPO / ".github" / "workflows" / "build.yml").read_text())[True]
    assert on["workflow_dispatch"]["inputs"] == ours["workflow_dispatch"]["inputs"]
    assert workflow["permissions"] == {}
    (job,) = workflow["jobs"].values()
    assert job["uses"] == f"{RELEASE['repository']}/.github/workflows/reusable-build.yml@{RELEASE['commit']}"
    assert f"@{RELEASE['commit']}  # v{RELEASE['version']}\n" in text
    # release-wheels's release, publish's signatures (an OIDC token): the most its jobs ask for.
    assert job["permissions"] == {"contents": "write", "id-token": "write", "packages": "write"}
    assert job["with"]["kernel-matrix"] == f"git+https://github.com/{RELEASE['repository']}@{RELEASE['commit']}"
    assert set(job["with"]) == {"matrix-file", "profile", "only", "publish", "dry-run", "kernel-matrix"}
    assert job["secrets"] == {"HF_TOKEN": "${{ secrets.HF_TOKEN }}"}
    # The daily check only where the pinned commit has its reusable workflow (0.1.0's had not).
    daily = relu / ".github" / "workflows" / "kernel-matrix-upstream.yml"
    held = git("ls-tree", "--name-only", RELEASE["commit"], ".github/workflows/", cwd=REPO).split()
    assert daily.exists() == (".github/workflows/reusable-upstream.yml" in held)
    # From a development version, which release the workflow runs (init() strips the note).
    for written in (relu / "written.yaml", relu / WORKFLOW, daily):
        written.unlink(missing_ok=True)
    again = kernel_matrix("init", cwd=relu)
    note = f"{RELEASE_NOTE}{RELEASE['version']} (commit {RELEASE['commit'][:12]})"
    assert (note in again.stderr) == (package.__version__ != RELEASE["version"]), again.stderr


@needs_corpus
@pytest.mark.processes
def test_init_writes_the_daily_upstream_check_in_a_file_of_its_own(relu, github):
    """At a pin that has reusable-upstream.yml: a file of its own (GitHub disables a public repository's
    scheduled workflows after 60 days without activity, and the build must not go with it), daily at a
    minute of the repository's own, with the build workflow's pin and install."""
    commit = github.head
    assert init("--ref", commit, cwd=relu).returncode == 0
    workflows = relu / ".github" / "workflows"
    text = (workflows / "kernel-matrix-upstream.yml").read_text()
    daily = yaml.safe_load(text)
    assert set(daily[True]) == {"schedule", "workflow_dispatch"} and daily["permissions"] == {}
    (job,) = daily["jobs"].values()
    assert job["uses"] == f"{RELEASE['repository']}/.github/workflows/reusable-upstream.yml@{commit}"
    assert f"@{commit}  # v{package.__version__}\n" in text  # the version that commit's pyproject.toml names
    assert job["permissions"] == {"contents": "read"} and "secrets" not in job
    assert job["with"] == {
        "matrix-file": "build_matrix.yaml",
        "kernel-matrix": f"git+https://github.com/{RELEASE['repository']}@{commit}",
    }
    build = yaml.safe_load((workflows / "kernel-matrix.yml").read_text())
    assert "schedule" not in build[True]
    (cron,) = daily[True]["schedule"]
    from kernel_matrix.adopting.files import upstream_text
    from kernel_matrix.adopting.pin import Pin

    pin = Pin("o/r", commit, "1.0", frozenset({"reusable-build.yml", "reusable-upstream.yml"}))
    minutes = {
        yaml.safe_load(upstream_text(pin, name))[True]["schedule"][0]["cron"] for name in ("relu", "rotary", "maxsim")
    }
    assert len(minutes) == 3 and cron["cron"] in minutes  # relu's, and not every repository's


@needs_corpus
@pytest.mark.processes
def test_init_limits_torch_to_the_build_toml_range(relu):
    toml = relu / "build.toml"
    toml.write_text(toml.read_text().replace("[torch]\n", '[torch]\nminver = "2.12"\nmaxver = "2.13"\n'))
    assert init(cwd=relu).returncode == 0
    assert list(yaml.safe_load((relu / "build_matrix.yaml").read_text())["torch"]) == ["2.12", "2.13"]


@pytest.mark.processes
def test_init_names_a_flakes_torch_versions_limit_which_it_does_not_read(tmp_path):
    # quantization-gptq's flake keeps x86_64 only (its build.toml compiles with -mavx512f).
    kernel = img2gray_as(tmp_path, "gptq-like")
    (kernel / "flake.nix").write_text(
        "{\n  outputs = { self, kernel-builder }:\n    kernel-builder.lib.genKernelFlakeOutputs {\n"
        "      torchVersions = allVersions: allVersions;\n    };\n}\n"
    )
    result = init(cwd=kernel)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "torchVersions" in line]
    assert notes == [
        f"note: {Path('.') / 'flake.nix'}:4: torchVersions may narrow kernel-builder's builds of this kernel; "
        "kernel-matrix reads build.toml only: say the same in build_matrix.yaml's `exclude` (e.g. `- {kernel: "
        "gptq-like, arch: aarch64, cuda: cpu}`: those cells of gptq-like only)"
    ]
    (kernel / "build_matrix.yaml").unlink()
    shutil.rmtree(kernel / ".github")
    (kernel / "flake.nix").write_text(
        "{ outputs = { self, kernel-builder }: kernel-builder.lib.genKernelFlakeOutputs { path = ./.; }; }\n"
    )
    assert "torchVersions" not in init(cwd=kernel).stderr


@needs_corpus
@pytest.mark.processes
def test_init_refuses_a_range_outside_the_grid(relu):
    toml = relu / "build.toml"
    toml.write_text(toml.read_text().replace("[torch]\n", '[torch]\nminver = "3.0"\n'))
    result = init(cwd=relu)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "minver" in result.stderr
    assert not (relu / "build_matrix.yaml").exists() and not (relu / ".github").exists()


@needs_corpus
@pytest.mark.processes
def test_init_lists_the_kernel_folders_of_a_repository(tmp_path):
    repo = tmp_path / "kernels"
    shutil.copytree(RELU, repo / "relu")
    shutil.copytree(EINOPS, repo / "einops")
    (repo / "build").mkdir()  # never a kernel folder
    assert init(str(repo), cwd=tmp_path).returncode == 0
    assert yaml.safe_load((repo / "build_matrix.yaml").read_text())["kernels"] == ["einops", "relu"]
    assert {c.split("-")[0] for c in cells(cwd=repo)} >= {"torch"}  # einops' noarch cells
    assert any(c.endswith("-cpu-x86_64-linux") for c in cells("--kernel", "relu", cwd=repo))


@pytest.mark.processes
def test_init_of_a_repository_of_many_kernels_says_its_full_profile_runs_in_batches(tmp_path):
    """A repository of 56 kernels planned 835 cells for every push, more than GitHub runs jobs of
    one matrix: init writes its files and says how the pushes' jobs batch them."""
    from kernel_matrix.planning.matrix import GITHUB_MATRIX_LIMIT

    per_kernel = len(cells(cwd=REPO))
    names = img2gray_copies(tmp_path, GITHUB_MATRIX_LIMIT // per_kernel + 1)
    result = init(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((tmp_path / "build_matrix.yaml").read_text())["kernels"] == sorted(names)
    (note,) = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert note.startswith(f"note: pushes and tags run the full profile: its {per_kernel * len(names)} cells run as ")
    assert f"at most {GITHUB_MATRIX_LIMIT} jobs" in note


@pytest.mark.processes
def test_init_leaves_out_the_kernels_it_cannot_build_and_says_why(tmp_path):
    """A repository's kernels that kernel-matrix refuses (a build.toml of two frameworks) or
    builds no variant of (Metal only) are left out, a line each; the others, a [tvm-ffi]
    kernel too, still get their CI. With none left, init writes nothing and says why for each."""
    img2gray_as(tmp_path, "gray")
    img2gray_as(tmp_path, "gray-tvm", "[torch]\n", "[tvm-ffi]\n")
    img2gray_as(tmp_path, "gray-two", "[torch]\n", "[torch-noarch]\n[torch]\n")
    img2gray_as(tmp_path, "gray-metal", 'backends = ["cpu", "cuda"]', 'backends = ["metal"]')
    result = init(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((tmp_path / "build_matrix.yaml").read_text())["kernels"] == ["gray", "gray-tvm"]
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: gray-")]
    second = next(
        n
        for n, t in enumerate((tmp_path / "gray-two" / "build.toml").read_text().splitlines(), 1)
        if t == "[torch-noarch]"
    )
    assert notes == [
        "note: gray-metal: left out of build_matrix.yaml: general.backends ['metal']: kernel-matrix builds cpu and "
        "cuda kernels",
        f"note: gray-two: left out of build_matrix.yaml: gray-two/build.toml:{second}:1: "
        "a kernel has exactly one of [torch], [torch-noarch] and [tvm-ffi] (found [torch], [torch-noarch])",
    ]

    shutil.rmtree(tmp_path / "gray")
    shutil.rmtree(tmp_path / "gray-tvm")
    for written in (tmp_path / "build_matrix.yaml", tmp_path / WORKFLOW):
        written.unlink()
    result = init(cwd=tmp_path)
    assert result.returncode == 2 and not (tmp_path / "build_matrix.yaml").exists()
    assert result.stderr.splitlines()[0].startswith("error: .: holds no build.toml kernel-matrix builds")
    assert [line.split(":")[1].strip() for line in result.stderr.splitlines()[1:]] == ["gray-metal", "gray-two"]


@pytest.mark.processes
def test_init_leaves_out_a_second_kernel_of_one_name_and_one_outside_the_grid(tmp_path):
    """huggingface/kernel-builder's examples: two folders named relu (a matrix holds one), and
    one whose [torch] range allows no torch of the grid. A kernel of its own folder that init
    cannot set up is refused, nothing written."""
    img2gray_as(tmp_path / "a", "gray")
    img2gray_as(tmp_path / "b", "gray")
    img2gray_as(tmp_path, "gray-old", "[torch]\n", '[torch]\nminver = "2.9"\nmaxver = "2.9"\n')
    result = init(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((tmp_path / "build_matrix.yaml").read_text())["kernels"] == ["a/gray"]
    assert [line for line in result.stderr.splitlines() if line.startswith("note: ")] == [
        "note: b/gray: left out of build_matrix.yaml: a second kernel named 'gray' (the first: a/gray)",
        "note: gray-old: left out of build_matrix.yaml: [torch] minver/maxver (2.9..2.9) allow none of the "
        "default torch minors (2.11, 2.12, 2.13, 2.14, 2.15)",
    ]
    result = init(cwd=tmp_path / "gray-old")
    assert result.returncode == 2 and list((tmp_path / "gray-old").glob("build_matrix.yaml")) == []
    assert result.stderr.startswith("error: build.toml: [torch] minver/maxver (2.9..2.9) allow none of")
    assert result.stderr.count("\n") == 1


@pytest.mark.processes
def test_matrix_names_a_kernel_of_the_matrix_it_builds_no_variant_of(tmp_path):
    img2gray_as(tmp_path, "gray")
    img2gray_as(tmp_path, "gray-metal", 'backends = ["cpu", "cuda"]', 'backends = ["metal"]')
    matrix = tmp_path / "build_matrix.yaml"
    matrix.write_text((REPO / "build_matrix.yaml").read_text().replace("kernel: kernel", "kernels: [gray, gray-metal]"))
    result = kernel_matrix("matrix", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert {c["kernel"] for c in json.loads(result.stdout)["include"]} == {"gray"}
    assert result.stderr.splitlines() == [
        "gray-metal/build.toml: warning: general.backends ['metal']: kernel-matrix builds cpu "
        "and cuda kernels, so gray-metal has no cell to build"
    ]
    # A kernel whose torch range misses the grid: named too, not dropped silently.
    img2gray_as(tmp_path, "gray-old", "[torch]\n", '[torch]\nminver = "2.9"\nmaxver = "2.9"\n')
    matrix.write_text(matrix.read_text().replace("kernels: [gray, gray-metal]", "kernels: [gray, gray-old]"))
    result = kernel_matrix("matrix", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr.splitlines() == [
        "gray-old/build.toml: warning: its backends and torch/CUDA ranges leave none of build_matrix.yaml's "
        "cells, so gray-old has no cell to build"
    ]


@needs_corpus
@pytest.mark.processes
def test_init_never_overwrites(relu):
    (relu / WORKFLOW).parent.mkdir(parents=True)
    (relu / WORKFLOW).write_text("mine\n")
    result = init(cwd=relu)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"error: {WORKFLOW}: exists; init never overwrites a file (nothing written)\n"
    assert not (relu / "build_matrix.yaml").exists() and (relu / WORKFLOW).read_text() == "mine\n"


@pytest.mark.processes
def test_init_refuses_a_folder_without_kernels_and_bad_options(tmp_path):
    for args, expected in [
        ((), "holds no build.toml"),
        (("nope",), "nope: not a folder"),
        (("--repository", "a b"), "--repository 'a b': expected OWNER/NAME"),
        (("--ref", "main..x"), "--ref 'main..x': expected a commit, tag or branch"),
        (("--ref", "86ef390"), "--ref '86ef390': a commit is pinned by its full 40-character SHA"),
    ]:
        result = init(*args, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and expected in result.stderr, args
    assert list(tmp_path.iterdir()) == []


def remove_written(repository: Path) -> None:
    (repository / "build_matrix.yaml").unlink()
    shutil.rmtree(repository / ".github")


@needs_corpus
@pytest.mark.processes
def test_init_takes_another_repository_and_a_tag_which_it_pins_by_its_commit(relu, github, tmp_path):
    """--repository and a --ref that is a tag: what the caller runs is the commit the tag names now (a tag
    can be moved), said in one line; uses: and the install name that commit, in that repository."""
    fork = tmp_path / "fork.git"
    git("clone", "--quiet", "--bare", str(github.bare), str(fork))
    git("tag", "-a", "-m", "a release", "release-7", github.head, cwd=fork)  # an annotated tag: its commit is peeled
    github.serve("me/fork", fork)
    result = init("--repository", "me/fork", "--ref", "release-7", cwd=relu)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "release-7" in line] == [
        f"note: --ref release-7: a tag of me/fork, which can move: pinned the commit it names now, {github.head} "
        "(give that SHA to pin it yourself)"
    ]
    text = (relu / WORKFLOW).read_text()
    assert f"uses: me/fork/.github/workflows/reusable-build.yml@{github.head}  # v{package.__version__}\n" in text
    assert "release-7" not in text
    for path in (relu / ".github" / "workflows").glob("*.yml"):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            assert job["uses"].startswith("me/fork/") and job["uses"].endswith(f"@{github.head}")
            assert job["with"]["kernel-matrix"] == f"git+https://github.com/me/fork@{github.head}"


@needs_corpus
@pytest.mark.processes
def test_init_builds_pushes_to_the_branch_checked_out(relu):
    subprocess.run(["git", "init", "-q", "-b", "master", str(relu)], check=True)
    result = init(cwd=relu)
    assert result.returncode == 0, result.stderr
    workflow = yaml.safe_load((relu / WORKFLOW).read_text())
    assert workflow[True]["push"]["branches"] == ["master"]
    assert "Pushes to master (the branch checked out) and v* tags build" in result.stdout
    assert "deployment branches and tags master and v*" in result.stdout
    assert "Add build/ to .gitignore" in result.stdout  # a repository that does not ignore it yet
    assert f"{RELEASE['repository']}/.github/workflows/reusable-build.yml@{PINNED['commit']}" in result.stdout
    (relu / ".gitignore").write_text("build/\n")
    remove_written(relu)
    # A clone: origin's default branch, not the feature branch init runs on.
    subprocess.run(["git", "-C", str(relu), "checkout", "-q", "-b", "add-kernel-matrix"], check=True)
    subprocess.run(
        ["git", "-C", str(relu), "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/trunk"], check=True
    )
    cloned = init(cwd=relu)
    assert "Add build/ to .gitignore" not in cloned.stdout
    assert yaml.safe_load((relu / WORKFLOW).read_text())[True]["push"]["branches"] == ["trunk"]
    assert "Pushes to trunk (origin's default branch)" in cloned.stdout


def tool(name: str) -> str:
    path = shutil.which(name, path=str(BIN))
    if path is None:
        pytest.fail(f"{name} is missing from {BIN}: scripts/setup-dev installs it (the test extra)")
    return path


@needs_corpus
@pytest.mark.parametrize("pin", ["release", "a later commit"])
@pytest.mark.processes
def test_the_written_workflows_pass_actionlint_and_zizmor_against_what_they_call(relu, pin, github):
    """Each written workflow lints clean, also against the reusable workflows it calls as they are at its
    pin: the release's commit (so a caller never names a workflow or input its release lacks), or, for
    --ref, this checkout's commit."""
    pinned = github.needs_release() if pin == "release" else github.head
    assert init(cwd=relu, pinned_by_default=pin == "release").returncode == 0
    workflows = relu / ".github" / "workflows"
    written = sorted(p.relative_to(relu) for p in workflows.glob("*.yml"))
    assert Path(".github/workflows/kernel-matrix.yml") in written
    actionlint = [tool("actionlint"), "-no-color", "-shellcheck", tool("shellcheck")]
    actionlint += ["-config-file", str(REPO / ".github" / "actionlint.yaml")]
    result = subprocess.run([*actionlint, *map(str, written)], cwd=relu, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "", result.stdout
    # actionlint cannot read a remote reusable workflow, so it checks the `with:` and
    # `secrets:` of a call only against the called file's inputs when that is local: the
    # same calls, to the reusable workflows as the pin holds them. It finds local workflows
    # from the repository's root, which it knows by .git: without one it checks nothing.
    subprocess.run(["git", "init", "-q"], cwd=relu, check=True)
    for reusable in ("reusable-build.yml", "reusable-upstream.yml"):
        held = subprocess.run(
            ["git", "show", f"{pinned}:.github/workflows/{reusable}"],
            cwd=github.bare,
            capture_output=True,
            text=True,
            check=False,
        )
        if held.returncode == 0:
            (workflows / reusable).write_text(held.stdout)
    for caller in written:
        text = (relu / caller).read_text()
        local = re.sub(r"uses: \S+/(\.github/workflows/[\w-]+\.yml)@\S+", r"uses: ./\1", text)
        assert local.count("uses: ./.github/workflows/reusable-") == 1
        (workflows / "local.yml").write_text(local)
        result = subprocess.run([*actionlint, ".github/workflows/local.yml"], cwd=relu, capture_output=True, text=True)
        assert result.returncode == 0 and result.stdout == "", f"{caller}: {result.stdout}"
    # A mistake is caught that way: an input the reusable workflow does not have.
    (workflows / "local.yml").write_text(local.replace("matrix-file:", "matrix-fil:"))
    result = subprocess.run([*actionlint, ".github/workflows/local.yml"], cwd=relu, capture_output=True, text=True)
    assert result.returncode == 1 and 'input "matrix-fil" is not defined' in result.stdout
    # zizmor as the project runs it, and its auditor persona (every finding, false positives too): none.
    for persona in ("regular", "auditor"):
        result = subprocess.run(
            [tool("zizmor"), "--offline", "--no-progress", f"--persona={persona}", *map(str, written)],
            cwd=relu,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0 and "No findings to report" in result.stdout, result.stdout + result.stderr


@pytest.mark.processes
def test_init_names_the_kernels_it_does_not_look_at(tmp_path):
    """A kernel at the root with kernels below it, and a kernel deeper than init searches: each is
    named in a line, not skipped without a word; the root kernel's note says how to build both."""
    root = img2gray_as(tmp_path, "gray")
    img2gray_as(root / "examples", "gray-example")
    result = init(cwd=root)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("note: ")] == [
        "note: examples/gray-example: left out of build_matrix.yaml: init set up the kernel in this folder's "
        "build.toml; add it to build_matrix.yaml's kernels: to build it too"
    ]
    # What the note says works: both kernels in one matrix.
    matrix = root / "build_matrix.yaml"
    spec = yaml.safe_load(matrix.read_text())
    assert spec.pop("kernel") == "."
    matrix.write_text(yaml.safe_dump({**spec, "kernels": [".", "examples/gray-example"]}))
    result = kernel_matrix("matrix", "--json", "--profile", "pr", cwd=root)
    assert result.returncode == 0, result.stderr
    assert {c["kernel"] for c in json.loads(result.stdout)["include"]} == {"gray", "gray-example"}

    repo = tmp_path / "repo"
    img2gray_as(repo / "kernels", "gray-a")
    img2gray_as(repo / "a" / "b" / "c", "gray-deep")
    result = init(cwd=repo)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((repo / "build_matrix.yaml").read_text())["kernels"] == ["kernels/gray-a"]
    assert [line for line in result.stderr.splitlines() if line.startswith("note: ")] == [
        "note: a/b/c/gray-deep: left out of build_matrix.yaml: deeper than the 3 folders init searches; add it to "
        "build_matrix.yaml's kernels: to build it"
    ]


@pytest.mark.processes
def test_init_of_a_root_kernel_it_cannot_build_names_the_kernels_below(tmp_path):
    root = img2gray_as(tmp_path, "gray-old", "[torch]\n", '[torch]\nminver = "2.9"\nmaxver = "2.9"\n')
    img2gray_as(root / "kernels", "gray")
    result = init(cwd=root)
    assert result.returncode == 2 and not (root / "build_matrix.yaml").exists()
    assert result.stderr.count("\n") == 1 and result.stderr.rstrip().endswith(
        "init in a folder without a build.toml sets up the kernels below (kernels/gray)"
    )


@pytest.mark.processes
def test_init_finishes_when_its_reader_stops_reading(tmp_path):
    """`kernel-matrix init | head -1`: the reader leaves after one line. init still writes both
    files and exits 0, saying nothing (Python and click would stop at the next write, exit 1)."""
    kernel = img2gray_as(tmp_path, "gray")
    read, write = os.pipe()
    os.close(read)  # gone before the first line: every write meets EPIPE
    try:
        result = subprocess.run(
            [sys.executable, "-m", "kernel_matrix", "init", "--ref", PINNED["commit"]],
            cwd=kernel,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write)
    assert result.returncode == 0 and without_release_note(result.stderr) == ""
    assert (kernel / "build_matrix.yaml").is_file()
    assert (kernel / ".github" / "workflows" / "kernel-matrix.yml").is_file()


def committed_repository(kernel: Path) -> None:
    """kernel's folder as a git repository whose files are all committed."""
    git("init", "--quiet", "--initial-branch", "main", cwd=kernel)
    git("add", "-A", cwd=kernel)
    git(
        "-c", "user.name=Author", "-c", "user.email=author@example.com", "commit", "--quiet", "-m", "kernel", cwd=kernel
    )


@pytest.mark.processes
def test_init_update_rewrites_only_the_workflows_at_the_new_pin(github, tmp_path):
    """A repository an earlier init set up (here at a commit that is not the newest) takes a later
    kernel-matrix with `init --update`: its workflow files are written again at the new pin, its
    build_matrix.yaml (the author's) is left byte for byte, and git shows the update."""
    kernel = img2gray_as(tmp_path, "gray")
    assert init(cwd=kernel).returncode == 0
    (kernel / "build_matrix.yaml").write_text((kernel / "build_matrix.yaml").read_text() + "# the author's own\n")
    committed_repository(kernel)
    matrix = (kernel / "build_matrix.yaml").read_bytes()
    later = github.commit(github.head, "a later release", ref="refs/heads/later")
    result = init("--update", "--ref", later, cwd=kernel)
    assert result.returncode == 0, result.stderr
    assert (kernel / "build_matrix.yaml").read_bytes() == matrix
    workflow = (kernel / WORKFLOW).read_text()
    assert f"reusable-build.yml@{later}" in workflow and github.head not in workflow
    upstream = kernel / ".github" / "workflows" / "kernel-matrix-upstream.yml"
    assert f"reusable-upstream.yml@{later}" in upstream.read_text()
    assert git("status", "--porcelain", "--untracked-files=all", cwd=kernel).count("\n") == 1  # two files, no more
    changed = git("diff", "--name-only", cwd=kernel).splitlines()
    assert sorted(changed) == [".github/workflows/kernel-matrix-upstream.yml", ".github/workflows/kernel-matrix.yml"]
    assert "updated" in result.stdout and "git diff" in result.stdout
    assert not list(kernel.rglob("*.kernel-matrix-init"))  # the staged files are gone
    # What --update writes is what init writes at that pin.
    fresh = img2gray_as(tmp_path / "fresh", "gray")
    assert init("--ref", later, cwd=fresh).returncode == 0
    assert (fresh / WORKFLOW).read_text() == workflow


@pytest.mark.processes
def test_init_update_refuses_what_git_could_not_give_back(github, tmp_path):
    """--update replaces files only where git holds them as they are, and needs an earlier init's
    workflow: otherwise one line, exit 2, and nothing written. Runners stay build_matrix.yaml's."""
    kernel = img2gray_as(tmp_path, "gray")

    def files() -> dict[Path, bytes]:  # the repository's own (git's index may be refreshed)
        return {path: data for path, data in snapshot(kernel).items() if path.parts[0] != ".git"}

    nothing = init("--update", cwd=kernel)
    assert nothing.returncode == 2 and "nothing to update" in nothing.stderr, nothing.stderr
    assert init(cwd=kernel).returncode == 0
    before = files()
    loose = init("--update", cwd=kernel)  # not a git repository
    assert loose.returncode == 2 and "not a git repository" in loose.stderr, loose.stderr
    assert files() == before
    committed_repository(kernel)
    workflow = kernel / WORKFLOW
    workflow.write_text(workflow.read_text() + "# an edit of the author's, not committed\n")
    before = files()
    edited = init("--update", cwd=kernel)
    assert edited.returncode == 2, edited.stderr
    (line,) = edited.stderr.strip().splitlines()
    assert line == (
        f"error: {WORKFLOW}: changes git does not hold (M); commit or stash them first, so that --update "
        "replaces nothing git cannot give back (nothing written)"
    )
    runners = init("--update", "--gpu-runner", "x86_64=gpu", cwd=kernel)
    assert runners.returncode == 2 and "--gpu-runner with --update" in runners.stderr, runners.stderr
    assert files() == before
