"""`kernel-matrix init [DIR]`: set up a kernel's repository to build with kernel-matrix.

It writes these files, never over an existing one (but the workflows with --update, where git holds them):
- build_matrix.yaml: `kernel: .` (a build.toml in DIR) or `kernels:` (the folders
  below DIR that hold one), the torch minors of the default grid within their
  [torch] minver/maxver, GitHub-hosted build runners, GPU test runners only where
  --gpu-runner names them, and the excludes the kernels' compiler flags need;
- .github/workflows/kernel-matrix.yml: a caller of kernel-matrix's reusable build
  workflow, pinned at one commit (the latest release's, data/release.yaml, or
  --ref's), which installs kernel-matrix from that commit (adopting/pin.py);
- .github/workflows/kernel-matrix-upstream.yml: the daily check for torch releases
  the matrix lacks, at the same pin, where that commit has its reusable workflow.

What they hold, and the kernels, pin and runners they name, is kernel_matrix/adopting/'s;
this module checks the options, says what it found and writes. init reads and writes
nothing through a link out of DIR."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Annotated

import typer
from packaging.version import Version

from kernel_matrix import __version__
from kernel_matrix.adopting import runners
from kernel_matrix.adopting.files import (
    UPSTREAM,
    UPSTREAM_WORKFLOW,
    WORKFLOW,
    Release,
    flake_note,
    flow,
    matrix_text,
    upstream_text,
    workflow_text,
)
from kernel_matrix.adopting.pin import REUSABLE, Pin, resolve
from kernel_matrix.adopting.repository import REF, absent, held_by_git, ignored, inside, push_branch
from kernel_matrix.adopting.search import MATRIX, default_spec, find_kernels
from kernel_matrix.cli.console import console, stdout, styled
from kernel_matrix.config.buildtoml import BuildConfig
from kernel_matrix.config.github_event import check_repository
from kernel_matrix.errors import ConfigError
from kernel_matrix.layout import DEFAULT_BUILD_DIR
from kernel_matrix.planning.github_jobs import batching
from kernel_matrix.planning.selection import Selection

# An abbreviated commit, which GitHub does not take as a reusable workflow's ref.
SHORT_COMMIT = re.compile(r"^[0-9a-f]{7,39}$")
# Where the Hub says who may create `kernel`-type repositories (kernel-builder's docs: the
# owning user or organization needs kernel-creation access, "Request Kernels Creation").
HUB_KERNEL_ACCESS = "https://huggingface.co/settings/account"


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
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="For a repository an earlier init set up: rewrite only kernel-matrix's workflow files, at the pin "
            "(this release's commit, or --ref's); build_matrix.yaml stays as it is. Only files that git holds as "
            "they are get rewritten, so that `git diff` shows the update and your edits come back with git.",
        ),
    ] = False,
) -> None:
    """Write build_matrix.yaml and .github/workflows/kernel-matrix.yml into a kernel's repository.

    The matrix names the kernel in DIR (its build.toml) or the kernel folders below
    it; the workflow calls kernel-matrix's reusable workflow at a pinned commit, checked
    on GitHub, and installs kernel-matrix from that commit (and kernel-matrix-upstream.yml,
    where that commit has it, checks daily for new torch releases). Existing files are
    never overwritten (exit 2, nothing written) but by --update; no GitHub: exit 9, nothing written."""
    release = Release.packaged()
    if repository is not None:
        check_repository(repository, "--repository")
    repository = repository or release.repository
    ref = _checked(ref, REF, "--ref", "a commit, tag or branch")
    if ref is not None and SHORT_COMMIT.match(ref):  # GitHub pins a reusable workflow by a full SHA
        raise ConfigError(f"--ref {ref!r}: a commit is pinned by its full 40-character SHA")
    gpu = runners.gpu_runners(gpu_runner or [])
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a folder (give the kernel's repository)")
    targets = [directory / MATRIX, directory / WORKFLOW, directory / UPSTREAM_WORKFLOW]
    for target in targets:
        inside(directory, target)
    if update:
        if gpu:
            raise ConfigError(
                f"--gpu-runner with --update: the runners are {directory / MATRIX}'s, which --update leaves as it is"
            )
        held_by_git(directory, targets[1:])
    else:
        absent(targets[:2])
    kernels, left_out = find_kernels(directory)
    # Where kernel-matrix runs from: seen on GitHub before anything is written (no network: nothing written).
    pin, resolved = resolve(repository, ref or release.commit, given=ref is not None)
    daily = UPSTREAM in pin.workflows  # a commit before reusable-upstream.yml gets no daily check
    absent(targets[2:] if daily and not update else [])
    if resolved:
        console.print(resolved, soft_wrap=True)
    if update:
        branch, _ = push_branch(directory)
        _write(directory, _workflows(targets, pin, branch, kernels, daily), replace=True)
        written = " ".join(t.relative_to(directory).as_posix() for t in targets[1:] if t.exists())
        stdout.print(
            f"Review the update with git diff, then commit and push: git add {written} && git commit -m "
            f"'kernel-matrix {pin.version} ({pin.commit[:12]})' && git push",
            soft_wrap=True,
        )
        return
    for folder, reason in left_out:  # a repository's other kernels still get their CI
        console.print(f"note: {folder}: left out of {MATRIX}: {reason}", soft_wrap=True)
    spec = default_spec()
    excludes = runners.aarch64_excludes(kernels, bool(spec.get("cpu", True))) if "aarch64" in spec["archs"] else []
    for exclude, why in excludes:
        cells = "aarch64 CPU cells" if exclude.get("cuda") == "cpu" else "aarch64 cells"
        console.print(
            f"note: {MATRIX}: exclude {flow(exclude)}: {exclude['kernel']}'s {cells} cannot compile ({why}: x86 "
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
        **_workflows(targets, pin, branch, kernels, daily),
    }
    _write(directory, texts, replace=False)
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


def _workflows(
    targets: list[Path], pin: Pin, branch: str, kernels: list[tuple[str, BuildConfig]], daily: bool
) -> dict[Path, str]:
    """The workflow files' texts at pin: the build's caller, and the daily check where pin has it."""
    texts = {targets[1]: workflow_text(pin, branch)}
    if daily:
        texts[targets[2]] = upstream_text(pin, " ".join(c.general.name for _, c in kernels))
    release = Release.packaged()
    if pin.commit == release.commit and Version(__version__) != Version(pin.version):  # a build between releases
        console.print(
            f"note: kernel-matrix {__version__} is not a release: the workflow runs release {pin.version} "
            f"(commit {pin.commit[:12]}), whose commands may differ from this one's; --ref COMMIT pins "
            "another commit (and installs kernel-matrix from it)",
            soft_wrap=True,
        )
    return texts


def _write(directory: Path, texts: dict[Path, str], *, replace: bool) -> None:
    """Each text to its file: a new file (never over one made meanwhile), or with replace a new
    file moved over the old one (a link there is replaced, never written through)."""
    for target, text in texts.items():
        inside(directory, target)  # again, just before: nothing made a link of a folder meanwhile
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.kernel-matrix-init") if replace else target
        try:
            with open(staged, "x", encoding="utf-8") as stream:  # "x": never over a file made meanwhile
                stream.write(text)
            if replace:
                os.replace(staged, target)
        except OSError as exc:
            if replace:
                with contextlib.suppress(OSError):
                    staged.unlink()
            raise ConfigError(f"{target}: cannot be written ({exc.strerror or exc})") from None
        stdout.print(styled(("updated" if replace else "wrote", "green"), f" {target}"))


def _checked(value: str | None, pattern: re.Pattern[str], option: str, what: str) -> str | None:
    if value is not None and not pattern.match(value):
        raise ConfigError(f"{option} {value!r}: expected {what}")
    return value


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
    build_dir = f"{DEFAULT_BUILD_DIR.as_posix()}/"
    if not ignored(directory, build_dir):  # where variants, logs and caches (gigabytes) go
        steps.insert(-1, f"Add {build_dir} to .gitignore: kernel-matrix writes variants, logs and caches there.")
    stdout.print(styled(("Next steps:", "bold")))
    for number, step in enumerate(steps, 1):
        stdout.print(f"  {number}. {step}", soft_wrap=True)
