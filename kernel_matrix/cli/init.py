"""`kernel-matrix init [DIR]`: set up a kernel's repository to build with kernel-matrix.

It writes these files, never over an existing one:
- build_matrix.yaml: `kernel: .` (a build.toml in DIR) or `kernels:` (the folders
  below DIR that hold one), the torch minors of the default grid within their
  [torch] minver/maxver, GitHub-hosted build runners, GPU test runners only where
  --gpu-runner names them, and the excludes the kernels' compiler flags need;
- .github/workflows/kernel-matrix.yml: a caller of kernel-matrix's reusable build
  workflow, pinned at one commit (the latest release's, data/release.yaml, or
  --ref's), which installs kernel-matrix from that commit (init_pin.py);
- .github/workflows/kernel-matrix-upstream.yml: the daily check for torch releases
  the matrix lacks, at the same pin, where that commit has its reusable workflow.

All come from fixed templates (templates/*.in) whose only variable parts are
YAML scalars and blocks written by yaml.safe_dump; the result is parsed back and
checked before anything is written. init reads and writes nothing through a link
out of DIR."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from packaging.version import Version

from kernel_matrix import __version__
from kernel_matrix.cli import init_runners
from kernel_matrix.cli.console import console, stdout, styled
from kernel_matrix.cli.init_pin import REUSABLE, Pin, resolve
from kernel_matrix.cli.init_search import MATRIX, default_spec, find_kernels, torch_minors
from kernel_matrix.config.buildtoml import BuildConfig
from kernel_matrix.config.flake import TORCH_VERSIONS, flake_line
from kernel_matrix.config.github_event import check_repository
from kernel_matrix.errors import ConfigError
from kernel_matrix.planning.github_jobs import batching
from kernel_matrix.planning.selection import Selection

WORKFLOW = Path(".github/workflows/kernel-matrix.yml")
UPSTREAM = "reusable-upstream.yml"
UPSTREAM_WORKFLOW = Path(".github/workflows/kernel-matrix-upstream.yml")
# GitHub's rules: an owner is letters, digits and single inner hyphens, 39 at most; a
# repository name letters, digits, '.', '_' and '-', 100 at most, here not starting with '.'
# or '-' (never '.' or '..', a path; and what reusable-build.yml takes as its install's URL).
# A commit, a tag or a branch: git's ref characters, without '..', '@{' or a leading '-' or '/'.
REF = re.compile(r"^(?!.*\.\.)(?!.*@\{)(?![-/.])[A-Za-z0-9._/+-]{1,200}(?<![/.])$")
# An abbreviated commit, which GitHub does not take as a reusable workflow's ref.
SHORT_COMMIT = re.compile(r"^[0-9a-f]{7,39}$")
# Where the Hub says who may create `kernel`-type repositories (kernel-builder's docs: the
# owning user or organization needs kernel-creation access, "Request Kernels Creation").
HUB_KERNEL_ACCESS = "https://huggingface.co/settings/account"


@dataclass(frozen=True)
class Release:
    """The latest release of kernel-matrix (data/release.yaml): the commit init pins by default."""

    repository: str
    commit: str
    version: str

    @staticmethod
    def packaged() -> Release:
        from kernel_matrix.data import load

        data = load("release")
        return Release(str(data["repository"]), str(data["commit"]), str(data["version"]))


def init(
    directory: Annotated[
        Path, typer.Argument(metavar="[DIR]", help="The kernel's repository (default: this folder).")
    ] = Path("."),
    repository: Annotated[
        str | None,
        typer.Option(help="The GitHub repository of the reusable workflow, OWNER/NAME (default: this release's)."),
    ] = None,
    ref: Annotated[
        str | None,
        typer.Option(
            help="The commit of that repository to pin, by its full SHA, or a tag or branch, which init resolves to "
            "the commit it names (default: this release's commit). Checked on GitHub."
        ),
    ] = None,
    gpu_runner: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu-runner",
            metavar="ARCH=LABEL[,LABEL...]",
            help="The labels of your self-hosted GPU runners for an arch (x86_64, aarch64), which test its CUDA "
            "variants; once per arch. None by default: CUDA variants are tested on CPUs.",
        ),
    ] = None,
) -> None:
    """Write build_matrix.yaml and .github/workflows/kernel-matrix.yml into a kernel's repository.

    The matrix names the kernel in DIR (its build.toml) or the kernel folders below
    it; the workflow calls kernel-matrix's reusable workflow at a pinned commit, checked
    on GitHub, and installs kernel-matrix from that commit (and kernel-matrix-upstream.yml,
    where that commit has it, checks daily for new torch releases). Existing files are
    never overwritten (exit 2, nothing written); no GitHub: exit 9, nothing written."""
    release = Release.packaged()
    if repository is not None:
        check_repository(repository, "--repository")
    repository = repository or release.repository
    ref = _checked(ref, REF, "--ref", "a commit, tag or branch")
    if ref is not None and SHORT_COMMIT.match(ref):  # GitHub pins a reusable workflow by a full SHA
        raise ConfigError(f"--ref {ref!r}: a commit is pinned by its full 40-character SHA")
    gpu = init_runners.gpu_runners(gpu_runner or [])
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a folder (give the kernel's repository)")
    targets = [directory / MATRIX, directory / WORKFLOW, directory / UPSTREAM_WORKFLOW]
    for target in targets:
        _inside(directory, target)
    _absent(targets[:2])
    kernels, left_out = find_kernels(directory)
    # Where kernel-matrix runs from: seen on GitHub before anything is written (no network: nothing written).
    pin, resolved = resolve(repository, ref or release.commit, given=ref is not None)
    daily = UPSTREAM in pin.workflows  # a commit before reusable-upstream.yml gets no daily check
    _absent(targets[2:] if daily else [])
    if resolved:
        console.print(resolved, soft_wrap=True)
    for folder, reason in left_out:  # a repository's other kernels still get their CI
        console.print(f"note: {folder}: left out of {MATRIX}: {reason}", soft_wrap=True)
    spec = default_spec()
    excludes = init_runners.aarch64_excludes(kernels, bool(spec.get("cpu", True))) if "aarch64" in spec["archs"] else []
    for exclude, why in excludes:
        cells = "aarch64 CPU cells" if exclude.get("cuda") == "cpu" else "aarch64 cells"
        console.print(
            f"note: {MATRIX}: exclude {_flow(exclude)}: {exclude['kernel']}'s {cells} cannot compile ({why}: x86 "
            "flags, which gcc for aarch64 refuses)",
            soft_wrap=True,
        )
    excluded = {exclude["kernel"]: exclude for exclude, _ in excludes}
    for folder, config in kernels:
        if note := flake_note(directory / folder, config.general.name, excluded.get(config.general.name)):
            console.print(note, soft_wrap=True)
    branch, why = push_branch(directory)
    texts = {
        targets[0]: matrix_text(kernels, gpu, [exclude for exclude, _ in excludes]),
        targets[1]: workflow_text(pin, branch),
    }
    if daily:
        texts[targets[2]] = upstream_text(pin, " ".join(c.general.name for _, c in kernels))
    if pin.commit == release.commit and Version(__version__) != Version(pin.version):  # a build between releases
        console.print(
            f"note: kernel-matrix {__version__} is not a release: the workflow runs release {pin.version} "
            f"(commit {pin.commit[:12]}), whose commands may differ from this one's; --ref COMMIT pins "
            "another commit (and installs kernel-matrix from it)",
            soft_wrap=True,
        )
    for target, text in texts.items():
        _inside(directory, target)  # again, just before: nothing made a link of a folder meanwhile
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(target, "x", encoding="utf-8") as stream:  # "x": never over a file made meanwhile
                stream.write(text)
        except OSError as exc:
            raise ConfigError(f"{target}: cannot be written ({exc.strerror or exc})") from None
        stdout.print(styled(("wrote", "green"), f" {target}"))
    # Pushes and tags run the full profile: for a repository of many kernels, more cells than a
    # GitHub Actions matrix runs jobs are batched, and a selection that cannot run at all (more
    # kernels x archs than jobs) is said now, not at the push.
    try:
        planned = Selection(targets[0], profile="full").resolve()
        jobs = planned.github_jobs(planned.cells)
    except ConfigError as exc:
        console.print(f"note: pushes and tags run the full profile, which cannot run as written: {exc}", soft_wrap=True)
    else:
        if note := batching(len(planned.cells), jobs):
            console.print(f"note: pushes and tags run the full profile: its {note}", soft_wrap=True)
    written = " ".join(target.relative_to(directory).as_posix() for target in texts)
    _next_steps(directory, pin, kernels, gpu, (branch, why), written)


def _absent(targets: list[Path]) -> None:
    for target in targets:
        if os.path.lexists(target):
            raise ConfigError(f"{target}: exists; init never overwrites a file (nothing written)")


def _inside(directory: Path, target: Path) -> None:
    """Refuse a target whose folder (as far as it exists) is a link out of directory:
    init writes into the kernel's repository, never through .github -> elsewhere."""
    folder = target.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    root = directory.resolve()
    if not folder.resolve().is_relative_to(root):
        link = next(
            (p for p in (target.parent, *target.parent.parents) if p.is_symlink() and p != directory), target.parent
        )
        raise ConfigError(
            f"{link}: a link out of the repository (to {folder.resolve()}); init never writes through one "
            "(nothing written)"
        )


def _flow(data: Any) -> str:
    return yaml.safe_dump(data, default_flow_style=True, sort_keys=False, width=1000).strip()


def flake_note(kernel_dir: Path, name: str, written: dict[str, str] | None = None) -> str | None:
    """A line where the kernel's flake.nix passes torchVersions, which may narrow its builds
    (fewer torch versions, systems or CUDA versions than build.toml allows, e.g. x86_64 only
    for a kernel built with -mavx512f). kernel-matrix reads build.toml, not Nix: the
    matrix's `exclude`, narrowed to the kernel, says the same. written: the exclude init
    wrote for the kernel's x86 flags, if any."""
    found = flake_line(kernel_dir, TORCH_VERSIONS)
    if found is None:
        return None
    flake, line = found
    start = (
        f"note: {flake}:{line}: torchVersions may narrow kernel-builder's builds of this kernel; kernel-matrix "
        f"reads build.toml only: "
    )
    if written is not None:
        return f"{start}{MATRIX}'s `exclude` holds what its x86 flags need ({_flow(written)}); say any other there"
    example = _flow({"kernel": name, "arch": "aarch64", "cuda": "cpu"})
    return f"{start}say the same in {MATRIX}'s `exclude` (e.g. `- {example}`: those cells of {name} only)"


def _checked(value: str | None, pattern: re.Pattern[str], option: str, what: str) -> str | None:
    if value is not None and not pattern.match(value):
        raise ConfigError(f"{option} {value!r}: expected {what}")
    return value


def _block(data: dict[str, Any], indent: int = 0, *, flow: bool = False) -> str:
    """data as block YAML, each line indented; flow: collections of scalars in flow
    style ([ubuntu-24.04]), which would also make a mapping of scalars one line."""
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None if flow else False, width=1000)
    return "\n".join(" " * indent + line for line in text.rstrip("\n").splitlines())


def _scalar(value: str) -> str:
    """One YAML scalar (plain where it can be, quoted where it must)."""
    text = yaml.safe_dump(value, width=1000)
    return text.removesuffix("\n...\n").rstrip("\n")


def _fill(name: str, values: dict[str, str]) -> str:
    """templates/<name> with each $key replaced once (an empty value removes its line); a
    template always has every key."""
    text = resources.files("kernel_matrix").joinpath(f"templates/{name}").read_text(encoding="utf-8")
    for key, value in values.items():
        if text.count(f"${key}\n") != 1:  # a placeholder is a line's end
            raise AssertionError(f"{name}: ${key} is not in the template once")
        text = text.replace(f"${key}\n", value + "\n" if value else "")  # an empty value: no line
    return text


def matrix_text(
    kernels: list[tuple[str, BuildConfig]],
    gpu: dict[str, list[str]] | None = None,
    exclude: list[dict[str, str]] | None = None,
) -> str:
    """build_matrix.yaml: the kernels, their torch minors of the default grid, its archs
    with GitHub-hosted build runners and gpu's GPU test runners (none: []), and exclude."""
    names = [name for name, _ in kernels]
    wanted: dict[str, Any] = {"kernel": "."} if names == ["."] else {"kernels": names}
    wanted["torch"] = torch_minors(kernels)
    wanted["archs"] = init_runners.archs(default_spec()["archs"], gpu or {})
    wanted["exclude"] = exclude or []
    text = _fill(
        "build_matrix.yaml.in",
        {
            "kernels": _block({k: v for k, v in wanted.items() if k.startswith("kernel")}),
            "torch": _block(wanted["torch"], 2),
            "archs": _block(wanted["archs"], 2, flow=True),
            "exclude": _block({"exclude": wanted["exclude"]}, flow=True),
        },
    )
    written = yaml.safe_load(text)
    assert {k: written[k] for k in wanted} == wanted, "build_matrix.yaml does not read back as written"
    return text


def workflow_text(pin: Pin, branch: str = "main") -> str:
    """The caller of reusable-build.yml at the pin: pushes to `branch` and v* tags, pull
    requests and manual runs; every job installs kernel-matrix from the pinned commit."""
    text = _fill(
        "caller-workflow.yml.in",
        {
            "uses": _scalar(pin.uses(REUSABLE)) + pin.comment,
            "branch": _scalar(branch),
            "install": _scalar(pin.install),
        },
    )
    written = yaml.safe_load(text)
    job = written["jobs"]["kernel-matrix"]
    assert job["uses"] == pin.uses(REUSABLE) and job["with"]["kernel-matrix"] == pin.install, "reads back otherwise"
    assert written[True]["push"]["branches"] == [branch], "the workflow reads back otherwise"  # YAML 1.1: on is true
    return text


def upstream_text(pin: Pin, kernels: str) -> str:
    """The caller of reusable-upstream.yml, at the same pin: daily, at a minute that
    `kernels` (the repository's kernel names) choose, not every caller's at once."""
    minute = int(hashlib.sha256(kernels.encode()).hexdigest(), 16) % 60
    text = _fill(
        "caller-upstream.yml.in",
        {
            "uses": _scalar(pin.uses(UPSTREAM)) + pin.comment,
            "cron": _scalar(f"{minute} 5 * * *"),
            "install": _scalar(pin.install),
        },
    )
    job = yaml.safe_load(text)["jobs"]["check-upstream"]
    assert job["uses"] == pin.uses(UPSTREAM) and job["with"]["kernel-matrix"] == pin.install, "reads back otherwise"
    return text


def _git(directory: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    """git in the kernel's repository; None where git cannot be run."""
    try:
        return subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _ignored(directory: Path, path: str) -> bool:
    """Whether git ignores path in directory's repository (True outside one: nothing to say)."""
    found = _git(directory, "check-ignore", "--quiet", "--no-index", path)
    return found is None or found.returncode != 1  # 0: ignored; 128: not a repository


def push_branch(directory: Path) -> tuple[str, str]:
    """The branch whose pushes build, and why that one: origin's default branch, else the
    branch checked out (a new repository's), else main. Not a feature branch that init
    happens to run on: after the merge its pushes would build nothing."""
    for ref, why in (("refs/remotes/origin/HEAD", "origin's default branch"), ("HEAD", "the branch checked out")):
        found = _git(directory, "symbolic-ref", "--quiet", "--short", ref)
        branch = found.stdout.strip().removeprefix("origin/") if found is not None and found.returncode == 0 else ""
        if REF.match(branch) and "*" not in branch:
            return branch, why
    return "main", "no git branch found"


def _next_steps(
    directory: Path,
    pin: Pin,
    kernels: list[tuple[str, BuildConfig]],
    gpu: dict[str, list[str]],
    push: tuple[str, str],
    written: str,
) -> None:
    branch, why = push
    docs = f"https://github.com/{pin.repository}/blob/{pin.commit}/docs"
    where = "" if directory == Path(".") else f" (in {directory})"
    hub = [(config.general.name, config.general.hub.repo_id) for _, config in kernels]
    named = ", ".join(f"{repo_id} ({name})" for name, repo_id in hub if repo_id)
    unnamed = [name for name, repo_id in hub if not repo_id]
    if gpu:
        labelled = "; ".join(f"{arch}: {', '.join(labels)}" for arch, labels in gpu.items())
        gpu_step = (
            f"GPU test runners: self-hosted, with the labels given ({labelled}), never a GitHub-hosted label "
            f"({docs}/runner-host.md); the GPU test jobs wait for them."
        )
    else:
        gpu_step = (
            f"GPU tests: none ({directory / MATRIX} has gpu-test-runner: [] for every arch: CUDA variants are "
            "tested on CPUs and released without a GPU test). With self-hosted GPU runners "
            f"({docs}/runner-host.md), give their labels there, or to init: --gpu-runner x86_64=LABEL,...."
        )
    steps = [
        gpu_step,
        "Create the environment `hub` (Settings > Environments): required reviewers, deployment branches and "
        f"tags {branch} and v*, and the environment secret HF_TOKEN, a Hub token that may write to "
        + ("each kernel's" if len(kernels) > 1 else "the kernel's")
        + " [general.hub] repo-id (not a repository secret: only the publish job reads it).",
        (f"Publishing creates and writes the Hub kernel repositories {named}" if named else "Publishing writes no")
        + (f"; {', '.join(unnamed)}: no [general.hub] repo-id in build.toml, which publish needs" if unnamed else "")
        + ": `kernel`-type repositories, which only a Hub user or organization with kernel-creation access can "
        f"create (request it at {HUB_KERNEL_ACCESS}, 'Request Kernels Creation').",
        "Outside contributors: Settings > Actions > General > require approval for all external contributors; "
        "in an organization, a runner group for the GPU runners, for this repository only, whose workflow "
        f"access is {pin.uses(REUSABLE)} (the GPU test job is defined there, and "
        f"GitHub gives a group's runners only to jobs defined in the workflows it selects) ({docs}/runner-host.md).",
        f"Commit and push{where}: git add {written} && git commit -m 'Build with kernel-matrix' && git push "
        f"(a new branch: git push -u origin HEAD, then a pull request). Pushes to {branch} ({why}) and v* tags "
        "build: another branch goes in the workflow's on.push.branches.",
    ]
    if not _ignored(directory, "build/"):  # where variants, logs and caches (gigabytes) go
        steps.insert(-1, "Add build/ to .gitignore: kernel-matrix writes variants, logs and caches there.")
    stdout.print(styled(("Next steps:", "bold")))
    for number, step in enumerate(steps, 1):
        stdout.print(f"  {number}. {step}", soft_wrap=True)
