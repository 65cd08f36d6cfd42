"""What a kernel's caller workflows run: kernel-matrix's repository at one commit, seen
on GitHub before `kernel-matrix init` writes it.

The caller names that commit twice, from one value: the reusable workflow's `uses:` and
the `kernel-matrix` input, `git+https://github.com/OWNER/NAME@<commit>`, which every job
installs. Never a package name (`kernel-matrix==X`): a name on an index can be claimed
by anyone, and the jobs that install it run beside HF_TOKEN. Never a branch or tag
either, which can be moved: those are resolved to the commit they name today.

A commit is checked in the repository itself, with git (protocol v2, which lets a
client fetch a commit by its SHA, as actions/checkout does): that it exists, that it
holds the reusable build workflow, its kernel-matrix version (the `# v<version>`
comment beside the pin), and that a branch or tag of the repository holds it. GitHub
also serves a fork's commits under the parent repository's name, and a reusable
workflow pinned at one runs the fork's code: such a commit is refused."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from kernel_matrix.errors import ConfigError, NetworkError, ToolchainError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

REUSABLE = "reusable-build.yml"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# What git prints where the server answered that the repository is not there (or is
# private: GitHub then asks for credentials, which init never gives); anything else
# that stops ls-remote is taken as the network's.
NOT_FOUND = re.compile(
    r"repository not found|not found|could not read username|authentication failed|"
    r"does not appear to be a git repository|does not exist",
    re.IGNORECASE,
)
# What upload-pack answers for a SHA it does not have.
UNKNOWN_OBJECT = re.compile(r"not our ref|no such remote ref|couldn't find remote ref|unadvertised object", re.I)
# The git environment of the caller's own repository (a hook's GIT_DIR, say) must not
# redirect the temporary repository init reads the pin into.
REPOSITORY_VARIABLES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)
GIT_SECONDS = 120


def github_url(repository: str) -> str:
    return f"https://github.com/{repository}"


@dataclass(frozen=True)
class Pin:
    """A commit of kernel-matrix's repository, as checked there."""

    repository: str  # OWNER/NAME on GitHub
    commit: str  # 40 hex digits
    version: str  # the kernel-matrix version the commit's pyproject.toml names
    workflows: frozenset[str]  # the reusable workflows the commit holds

    @property
    def install(self) -> str:
        """What every job installs as kernel-matrix: this commit, from git."""
        return f"git+{github_url(self.repository)}@{self.commit}"

    def uses(self, workflow: str) -> str:
        return f"{self.repository}/.github/workflows/{workflow}@{self.commit}"

    @property
    def comment(self) -> str:
        """Beside a `uses:` pin, as every pin of kernel-matrix's own workflows has one."""
        return f"  # v{self.version}"


def resolve(repository: str, ref: str, *, given: bool) -> tuple[Pin, str | None]:
    """The commit `ref` (a 40-hex SHA, a tag or a branch) names in OWNER/NAME on GitHub,
    checked there; and a line to print where ref was a tag or branch (None for a SHA).
    given: whether --ref came from the command line (else it is the release's own)."""
    url = github_url(repository)
    option = f"--ref {ref}" if given else f"the release's commit {ref} (--ref)"
    with tempfile.TemporaryDirectory(prefix="kernel-matrix-pin-") as scratch:
        git = _Git(Path(scratch), url, option)
        refs = git.remote_refs()
        note = None
        commit = ref
        if not COMMIT.match(ref):
            commit, kind = _named(refs, ref, repository)
            note = (
                f"note: --ref {ref}: a {kind} of {repository}, which can move: pinned the commit it names now, "
                f"{commit} (give that SHA to pin it yourself)"
            )
        pin = git.commit(repository, commit)
        if commit not in refs.values() and not git.on_a_branch_or_tag(commit):
            raise ConfigError(
                f"{option}: commit {commit} is on no branch or tag of {repository} (GitHub serves a fork's commits "
                "under its parent's name too): pin a commit of the repository itself"
            )
    return pin, note


def _named(refs: dict[str, str], ref: str, repository: str) -> tuple[str, str]:
    """The commit of the tag or branch `ref` (a short name, or a full refs/... one)."""
    found: dict[str, str] = {}
    for kind, prefix in (("tag", "refs/tags/"), ("branch", "refs/heads/")):
        name = ref if ref.startswith(prefix) else prefix + ref
        # An annotated tag: its ^{} line is the commit it points to.
        commit = refs.get(name + "^{}") or refs.get(name)
        if commit is not None:
            found[kind] = commit
    if not found:
        raise ConfigError(
            f"--ref {ref}: {repository} has no branch or tag of that name (and a commit is pinned by its full "
            "40-character SHA)"
        )
    if len(set(found.values())) > 1:
        raise ConfigError(
            f"--ref {ref}: both a branch and a tag of {repository}, at different commits: give refs/tags/{ref}, "
            f"refs/heads/{ref} or the commit's SHA"
        )
    kind = " and ".join(found)
    return next(iter(found.values())), kind


class _Git:
    """git in a temporary bare repository, reading from url."""

    def __init__(self, scratch: Path, url: str, option: str) -> None:
        self.directory, self.url, self.option = scratch / "pin.git", url, option
        self.environment = {k: v for k, v in os.environ.items() if k not in REPOSITORY_VARIABLES}
        self.environment["GIT_TERMINAL_PROMPT"] = "0"  # never wait for a password no one will type
        self._run("init", "--quiet", "--bare", str(self.directory), local=False)
        self._run("remote", "add", "github", url)

    def _run(self, *args: str, local: bool = True) -> subprocess.CompletedProcess[str]:
        where = ["-C", str(self.directory)] if local else []
        try:
            return subprocess.run(
                ["git", *where, "-c", "protocol.version=2", *args],
                capture_output=True,
                text=True,
                timeout=GIT_SECONDS,
                check=False,
                env=self.environment,
            )
        except FileNotFoundError:
            raise ToolchainError("git is not installed: init checks the commit it pins with it") from None
        except subprocess.TimeoutExpired:
            raise NetworkError(
                f"{self.option}: {self.url} did not answer in {GIT_SECONDS} s: init pins a commit only once it has "
                "seen it there; run init again where GitHub can be reached"
            ) from None

    def _unreachable(self, result: subprocess.CompletedProcess[str]) -> NetworkError:
        return NetworkError(
            f"{self.option}: cannot reach {self.url} ({_last_line(result.stderr)}): init pins a commit only once "
            "it has seen it there; run init again where GitHub can be reached"
        )

    def remote_refs(self) -> dict[str, str]:
        """The repository's branches and tags (and peeled tags, name^{}): name -> commit."""
        result = self._run("ls-remote", "--heads", "--tags", "github")
        if result.returncode != 0:
            if NOT_FOUND.search(result.stderr):
                raise ConfigError(
                    f"--repository {self.url.removeprefix('https://github.com/')}: no such repository on GitHub "
                    f"({_last_line(result.stderr)})"
                )
            raise self._unreachable(result)
        refs = {}
        for line in result.stdout.splitlines():
            commit, _, name = line.partition("\t")
            refs[name] = commit
        return refs

    def commit(self, repository: str, commit: str) -> Pin:
        """The commit, fetched alone (its files, no history): that it exists, and what it holds."""
        fetched = self._run("fetch", "--quiet", "--no-tags", "--depth=1", "github", commit)
        if fetched.returncode != 0:
            if UNKNOWN_OBJECT.search(fetched.stderr):
                raise ConfigError(f"{self.option}: {repository} has no commit {commit}")
            raise self._unreachable(fetched)
        kind = self._run("cat-file", "-t", commit).stdout.strip()
        if kind != "commit":
            raise ConfigError(f"{self.option}: {commit} is a {kind or 'missing object'} of {repository}, not a commit")
        listed = self._run("ls-tree", "--name-only", commit, ".github/workflows/").stdout.split()
        workflows = frozenset(Path(name).name for name in listed if Path(name).name.startswith("reusable-"))
        if REUSABLE not in workflows:
            raise ConfigError(
                f"{self.option}: commit {commit} of {repository} has no .github/workflows/{REUSABLE}: not a commit of "
                "kernel-matrix (or one before its reusable workflow)"
            )
        return Pin(repository, commit, self._version(commit, repository), workflows)

    def _version(self, commit: str, repository: str) -> str:
        text = self._run("show", f"{commit}:pyproject.toml").stdout
        try:
            version = tomllib.loads(text)["project"]["version"]
            return str(Version(str(version)))
        except (tomllib.TOMLDecodeError, KeyError, TypeError, InvalidVersion):
            raise ConfigError(
                f"{self.option}: commit {commit} of {repository} names no kernel-matrix version in its pyproject.toml"
            ) from None

    def on_a_branch_or_tag(self, commit: str) -> bool:
        """Whether a branch or tag of the repository holds the commit: their history, commits only."""
        fetched = self._run(
            "fetch",
            "--quiet",
            "--no-tags",
            "--filter=tree:0",
            "github",
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
        )
        if fetched.returncode != 0:
            raise self._unreachable(fetched)
        holding = self._run("for-each-ref", "--count=1", "--contains", commit, "refs/heads", "refs/tags")
        return holding.returncode == 0 and holding.stdout.strip() != ""


def _last_line(text: str) -> str:
    lines = [line.removeprefix("fatal: ").strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "git said nothing"
