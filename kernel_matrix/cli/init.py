"""`kernel-matrix init [DIR]`: set up a kernel's repository to build with kernel-matrix.

It writes these files, never over an existing one:
- build_matrix.yaml: `kernel: .` (a build.toml in DIR) or `kernels:` (the folders
  below DIR that hold one), the torch minors of the default grid within their
  [torch] minver/maxver, the default runner labels to edit;
- .github/workflows/kernel-matrix.yml: a caller of kernel-matrix's reusable build
  workflow, pinned at the commit of the latest release (data/release.yaml);
- .github/workflows/kernel-matrix-upstream.yml: the daily check for torch releases
  the matrix lacks, at the same pin, where that commit has its reusable workflow.

All come from fixed templates (templates/*.in) whose only variable parts are
YAML scalars and blocks written by yaml.safe_dump; the result is parsed back and
checked before anything is written."""

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
from kernel_matrix.cli.console import console, stdout, styled
from kernel_matrix.config.buildtoml import BuildConfig, load_build_toml
from kernel_matrix.config.flake import TORCH_VERSIONS, flake_line
from kernel_matrix.errors import ConfigError
from kernel_matrix.planning.github_jobs import batching
from kernel_matrix.planning.selection import Selection

MATRIX = Path("build_matrix.yaml")
WORKFLOW = Path(".github/workflows/kernel-matrix.yml")
REUSABLE = "reusable-build.yml"
UPSTREAM = "reusable-upstream.yml"
UPSTREAM_WORKFLOW = Path(".github/workflows/kernel-matrix-upstream.yml")
# How deep below DIR kernel folders are looked for (kernels-community/<kernel>/build.toml is 1).
SEARCH_DEPTH = 3
# Folders that hold no kernel of the repository: build output, environments, dependencies.
NOT_KERNELS = {"build", "dist", "node_modules", "venv", "__pycache__"}
REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
# A commit, a tag or a branch: git's ref characters, without '..', '@{' or a leading '-' or '/'.
REF = re.compile(r"^(?!.*\.\.)(?!.*@\{)(?![-/.])[A-Za-z0-9._/+-]{1,200}(?<![/.])$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# An abbreviated commit, which GitHub does not take as a reusable workflow's ref.
SHORT_COMMIT = re.compile(r"^[0-9a-f]{7,39}$")


@dataclass(frozen=True)
class Release:
    """Where the reusable workflows of the latest release live (data/release.yaml)."""

    repository: str
    commit: str
    version: str
    workflows: tuple[str, ...]  # the reusable workflows that commit holds

    @staticmethod
    def packaged() -> Release:
        from kernel_matrix.data import load

        data = load("release")
        workflows = tuple(str(name) for name in data["workflows"])
        return Release(str(data["repository"]), str(data["commit"]), str(data["version"]), workflows)


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
        typer.Option(help="The commit (or tag) of that workflow to pin (default: this release's commit)."),
    ] = None,
) -> None:
    """Write build_matrix.yaml and .github/workflows/kernel-matrix.yml into a kernel's repository.

    The matrix names the kernel in DIR (its build.toml) or the kernel folders below
    it; the workflow calls kernel-matrix's reusable workflow at a pinned commit (and
    kernel-matrix-upstream.yml, where that commit has it, checks daily for new torch
    releases). Existing files are never overwritten (exit 2, nothing written)."""
    release = Release.packaged()
    repository = _checked(repository, REPOSITORY, "--repository", "OWNER/NAME") or release.repository
    ref = _checked(ref, REF, "--ref", "a commit or tag") or release.commit
    if SHORT_COMMIT.match(ref):  # GitHub pins a reusable workflow by a full SHA, a tag or a branch
        raise ConfigError(f"--ref {ref!r}: a commit is pinned by its full 40-character SHA")
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a folder (give the kernel's repository)")
    # The daily check where the pinned commit has its reusable workflow (another --ref: a later commit).
    daily = ref != release.commit or UPSTREAM in release.workflows
    targets = [directory / MATRIX, directory / WORKFLOW, *([directory / UPSTREAM_WORKFLOW] if daily else [])]
    for target in targets:
        if os.path.lexists(target):
            raise ConfigError(f"{target}: exists; init never overwrites a file (nothing written)")
    kernels, left_out = find_kernels(directory)
    for folder, reason in left_out:  # a repository's other kernels still get their CI
        console.print(f"note: {folder}: left out of {MATRIX}: {reason}", soft_wrap=True)
    for folder, config in kernels:
        if note := flake_note(directory / folder, config.general.name):
            console.print(note, soft_wrap=True)
    branch, why = push_branch(directory)
    version = release.version if ref == release.commit else None
    texts = {targets[0]: matrix_text(kernels), targets[1]: workflow_text(repository, ref, version, branch)}
    if daily:
        texts[targets[2]] = upstream_text(repository, ref, version, " ".join(c.general.name for _, c in kernels))
    if ref == release.commit and Version(__version__) != Version(release.version):  # a build between releases
        console.print(
            f"note: kernel-matrix {__version__} is not a release: the workflow runs release {release.version} "
            f"(commit {release.commit[:12]}), whose commands may differ from this one's; --ref COMMIT pins "
            "another commit (and installs kernel-matrix from it)",
            soft_wrap=True,
        )
    for target, text in texts.items():
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
        resolved = Selection(targets[0], profile="full").resolve()
        jobs = resolved.github_jobs(resolved.cells)
    except ConfigError as exc:
        console.print(f"note: pushes and tags run the full profile, which cannot run as written: {exc}", soft_wrap=True)
    else:
        if note := batching(len(resolved.cells), jobs):
            console.print(f"note: pushes and tags run the full profile: its {note}", soft_wrap=True)
    written = " ".join(target.relative_to(directory).as_posix() for target in targets)
    _next_steps(directory, repository, ref, [name for name, _ in kernels], (branch, why), written)


def flake_note(kernel_dir: Path, name: str) -> str | None:
    """A line where the kernel's flake.nix passes torchVersions, which may narrow its builds
    (fewer torch versions, systems or CUDA versions than build.toml allows, e.g. x86_64 only
    for a kernel built with -mavx512f). kernel-matrix reads build.toml, not Nix: the
    matrix's `exclude`, narrowed to the kernel, says the same."""
    found = flake_line(kernel_dir, TORCH_VERSIONS)
    if found is None:
        return None
    flake, line = found
    example = yaml.safe_dump(
        [{"kernel": name, "arch": "aarch64", "cuda": "cpu"}], default_flow_style=True, sort_keys=False
    ).strip()
    return (
        f"note: {flake}:{line}: torchVersions may narrow kernel-builder's builds of this kernel; kernel-matrix "
        f"reads build.toml only: say the same in {MATRIX}'s `exclude` (e.g. `- {example[1:-1]}`: "
        f"those cells of {name} only)"
    )


def _checked(value: str | None, pattern: re.Pattern[str], option: str, what: str) -> str | None:
    if value is not None and not pattern.match(value):
        raise ConfigError(f"{option} {value!r}: expected {what}")
    return value


def find_kernels(directory: Path) -> tuple[list[tuple[str, BuildConfig]], list[tuple[str, str]]]:
    """(folder relative to directory, its build.toml) for the kernel in directory, or
    else for each folder below it (SEARCH_DEPTH levels) that holds a build.toml; and the
    folders left out with why: a build.toml kernel-matrix refuses (its first line), a
    kernel it builds no variant of (its backends, or a torch range outside the default
    grid), a second kernel of one name, a kernel deeper than the search looks, and (for
    a kernel in directory itself) the kernels below it. A kernel in directory itself is
    refused for the same reasons."""
    within, deeper = _build_toml_folders(directory)
    too_deep = [
        (folder, f"deeper than the {SEARCH_DEPTH} folders init searches; add it to {MATRIX}'s kernels: to build it")
        for folder in deeper
    ]
    if (directory / "build.toml").is_file():
        below = [*within, *deeper]
        config = load_build_toml(directory)
        if reason := config.unbuilt() or _outside_the_grid(config):
            elsewhere = ""
            if below:
                elsewhere = f"; init in a folder without a build.toml sets up the kernels below ({', '.join(below)})"
            raise ConfigError(
                f"{directory / 'build.toml'}: {reason}: init has nothing to set up (nothing written){elsewhere}"
            )
        root = f"init set up the kernel in this folder's build.toml; add it to {MATRIX}'s kernels: to build it too"
        return [(".", config)], [(folder, root) for folder in below]
    found: list[tuple[str, BuildConfig]] = []
    left_out: list[tuple[str, str]] = list(too_deep)
    for folder in within:
        try:
            config = load_build_toml(directory / folder)
        except ConfigError as exc:
            lines = str(exc).splitlines()
            more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
            left_out.append((folder, lines[0] + more))
            continue
        namesake = next((f for f, c in found if c.general.name == config.general.name), None)
        if reason := config.unbuilt() or _outside_the_grid(config):
            left_out.append((folder, reason))
        elif namesake is not None:  # one matrix cannot hold two kernels of one name
            left_out.append((folder, f"a second kernel named {config.general.name!r} (the first: {namesake})"))
        else:
            found.append((folder, config))
    if not found:
        reasons = "".join(f"\n{folder}: {reason}" for folder, reason in sorted(left_out))
        raise ConfigError(
            f"{directory}: holds no build.toml kernel-matrix builds, nor does any folder below it: init sets up a "
            f"kernel's repository (kernel-builder's layout){reasons}"
        )
    return sorted(found), sorted(left_out)


def _build_toml_folders(directory: Path) -> tuple[list[str], list[str]]:
    """The folders below directory (relative, sorted) that hold a build.toml, SEARCH_DEPTH
    levels down and never below one (a kernel's own subfolders hold no other kernel); and
    those deeper, where the search does not go, so that init names them rather than skip
    them without a word."""
    within: list[str] = []
    deeper: list[str] = []
    for root, folders, files in os.walk(directory):
        here = Path(root)
        relative = here.relative_to(directory)
        if relative.parts and "build.toml" in files:
            within.append(relative.as_posix())
            folders.clear()
            continue
        # Sorted, so the matrix lists kernels in the same order on every machine.
        folders[:] = sorted(f for f in folders if _searched(f))
        if len(relative.parts) >= SEARCH_DEPTH:
            for folder in folders:
                found = (p.parent.relative_to(directory) for p in (here / folder).rglob("build.toml"))
                deeper += sorted(f.as_posix() for f in found if all(map(_searched, f.parts)))[:1]
            folders.clear()
    return within, deeper


def _searched(folder: str) -> bool:
    """Whether init looks for kernels in a folder of this name."""
    return not folder.startswith(".") and folder not in NOT_KERNELS


def default_spec() -> dict[str, Any]:
    """The default matrix (data/default_matrix.yaml) as data."""
    from kernel_matrix.data import load

    spec: dict[str, Any] = load("default_matrix")
    return spec


def _allowed(minor: str, config: BuildConfig) -> bool:
    """Whether the kernel's [torch] minver/maxver allow this torch minor."""
    low, high = (config.torch.minver, config.torch.maxver) if config.torch else (None, None)
    return not (low and Version(minor) < Version(low)) and not (high and Version(minor) > Version(high))


def _outside_the_grid(config: BuildConfig) -> str | None:
    """Why the default grid has no torch for this kernel ([torch] minver/maxver), or None."""
    grid: dict[str, Any] = default_spec()["torch"]
    if config.torch is None or any(_allowed(minor, config) for minor in grid):
        return None
    return (
        f"[torch] minver/maxver ({config.torch.minver or '-'}..{config.torch.maxver or '-'}) allow none of the "
        f"default torch minors ({', '.join(grid)})"
    )


def torch_minors(kernels: list[tuple[str, BuildConfig]]) -> dict[str, Any]:
    """The default grid's torch minors that at least one kernel's [torch] minver/maxver
    allows (each kernel then takes its own range of them, as kernel-builder does)."""
    grid: dict[str, Any] = default_spec()["torch"]
    # Never empty: find_kernels left out the kernels whose range allows none of them.
    return {minor: cudas for minor, cudas in grid.items() if any(_allowed(minor, c) for _, c in kernels)}


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


def matrix_text(kernels: list[tuple[str, BuildConfig]]) -> str:
    names = [name for name, _ in kernels]
    wanted: dict[str, Any] = {"kernel": "."} if names == ["."] else {"kernels": names}
    wanted["torch"] = torch_minors(kernels)
    wanted["archs"] = default_spec()["archs"]
    text = _fill(
        "build_matrix.yaml.in",
        {
            "kernels": _block({k: v for k, v in wanted.items() if k.startswith("kernel")}),
            "torch": _block(wanted["torch"], 2),
            "archs": _block(wanted["archs"], 2, flow=True),
        },
    )
    written = yaml.safe_load(text)
    assert {k: written[k] for k in wanted} == wanted, "build_matrix.yaml does not read back as written"
    return text


def workflow_text(repository: str, ref: str, version: str | None, branch: str = "main") -> str:
    """The caller of reusable-build.yml: pushes to `branch` and v* tags, pull requests and
    manual runs. version: the release `ref` is the commit of (None: another ref, whose
    reusable workflow would install a kernel-matrix of its version from PyPI, which a
    commit between releases is not: the caller then installs kernel-matrix from that ref)."""
    uses, comment, install = _pin(repository, REUSABLE, ref, version)
    text = _fill(
        "caller-workflow.yml.in",
        {"uses": _scalar(uses) + comment, "branch": _scalar(branch), "install": _install_line(install)},
    )
    written = yaml.safe_load(text)
    job = written["jobs"]["kernel-matrix"]
    assert job["uses"] == uses and job["with"].get("kernel-matrix") == install, "the workflow reads back otherwise"
    assert written[True]["push"]["branches"] == [branch], "the workflow reads back otherwise"  # YAML 1.1: on is true
    return text


def upstream_text(repository: str, ref: str, version: str | None, kernels: str) -> str:
    """The caller of reusable-upstream.yml, at the same pin: daily, at a minute that
    `kernels` (the repository's kernel names) choose, not every caller's at once."""
    uses, comment, install = _pin(repository, UPSTREAM, ref, version)
    minute = int(hashlib.sha256(kernels.encode()).hexdigest(), 16) % 60
    text = _fill(
        "caller-upstream.yml.in",
        {"uses": _scalar(uses) + comment, "cron": _scalar(f"{minute} 5 * * *"), "install": _install_line(install)},
    )
    job = yaml.safe_load(text)["jobs"]["check-upstream"]
    assert job["uses"] == uses and job["with"].get("kernel-matrix") == install, "the workflow reads back otherwise"
    return text


def _pin(repository: str, workflow: str, ref: str, version: str | None) -> tuple[str, str, str | None]:
    """A reusable workflow's `uses:`, the release comment beside a commit of a release (as
    every pin in kernel-matrix's own workflows), and the kernel-matrix a ref between
    releases installs (None: the release's own, the workflow's default)."""
    comment = f"  # v{Version(version)}" if version is not None and COMMIT.match(ref) else ""
    install = None if version is not None else f"git+https://github.com/{repository}@{ref}"
    return f"{repository}/.github/workflows/{workflow}@{ref}", comment, install


def _install_line(install: str | None) -> str:
    return "" if install is None else f"      kernel-matrix: {_scalar(install)}"


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
    directory: Path, repository: str, ref: str, kernels: list[str], push: tuple[str, str], written: str
) -> None:
    branch, why = push
    docs = f"https://github.com/{repository}/blob/{ref}/docs"
    where = "" if directory == Path(".") else f" (in {directory})"
    steps = [
        f"Edit the runner labels in {directory / MATRIX} (archs: build-runner, gpu-test-runner) to this "
        "repository's runners; `kernel-matrix matrix` prints the cells.",
        "Create the environment `hub` (Settings > Environments): required reviewers, deployment branches and "
        f"tags {branch} and v*, and the environment secret HF_TOKEN, a Hub token that may write to "
        + ("each kernel's" if len(kernels) > 1 else "the kernel's")
        + " [general.hub] repo-id (not a repository secret: only the publish job reads it).",
        f"GPU test runners: self-hosted, labelled as gpu-test-runner says, never with a GitHub-hosted label "
        f"({docs}/runner-host.md); with none, `gpu-test-runner: []` releases CUDA variants tested on CPUs.",
        "Outside contributors: Settings > Actions > General > require approval for all external contributors; "
        "in an organization, a runner group for the GPU runners, for this repository only, whose workflow "
        f"access is {repository}/.github/workflows/{REUSABLE}@{ref} (the GPU test job is defined there, and "
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
