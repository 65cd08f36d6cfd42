"""Who asked for this run: the GitHub Actions event, read from the environment
the runner sets (GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, GITHUB_REPOSITORY).

A pull request's files are its author's. Its build_matrix.yaml must not choose
where its code runs: a pull request builds on GitHub-hosted runners only, and a
pull request from a fork never reaches the self-hosted GPU runners. The workflow
enforces the same rule on its own side (.github/workflows/build.yml), because a
pull request's plan job runs the pull request's copy of this code."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Set (to anything but "" or "0") to treat a local run as a pull request's: for building
# someone else's kernel or branch, whose files may not choose indexes, images or caches.
UNTRUSTED_ENV = "KERNEL_MATRIX_UNTRUSTED"
# Events that run a pull request's files (its head or merge commit).
PULL_REQUEST_EVENTS = frozenset(
    {"pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment", "merge_group"}
)
# The labels of GitHub's own runners: one label names one image
# (ubuntu-24.04, ubuntu-24.04-arm, ubuntu-latest, windows-2025, macos-15-intel ...).
# Self-hosted runners must never carry such a label (docs/runner-host.md).
GITHUB_HOSTED_LABEL = re.compile(r"^(ubuntu|windows|macos)-(latest|\d+(\.\d+)?)(-(arm|arm64|intel|large|xlarge))?$")
# A repository's OWNER/NAME as GitHub takes them: never a path such as a/.. in a URL made of it.
OWNER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


def check_repository(repository: str, option: str) -> str:
    """repository, where it is OWNER/NAME as GitHub takes them; else ConfigError naming option."""
    from kernel_matrix.errors import ConfigError

    owner, slash, name = repository.partition("/")
    if not slash or not OWNER.fullmatch(owner) or not NAME.fullmatch(name):
        raise ConfigError(
            f"{option} {repository!r}: expected OWNER/NAME, a GitHub owner (letters, digits, inner hyphens) "
            "and repository name (letters, digits, '.', '_', '-'; not starting with '.' or '-')"
        )
    return repository


@dataclass(frozen=True)
class GithubEvent:
    name: str | None  # None outside GitHub Actions
    from_fork: bool  # the code comes from another repository than the one the workflow runs in
    declared_untrusted: bool = False  # KERNEL_MATRIX_UNTRUSTED: a local run of someone else's files

    @property
    def pull_request(self) -> bool:
        return self.name in PULL_REQUEST_EVENTS

    @property
    def hosted_runners_only(self) -> bool:
        """Whether this run's jobs may only run on GitHub-hosted runners."""
        return self.pull_request or self.from_fork

    @property
    def trusted(self) -> bool:
        """Whether this run's files are the repository's own: only such a run may choose
        package indexes and base images, and write the cache a release build reads."""
        return not (self.pull_request or self.from_fork or self.declared_untrusted)

    @staticmethod
    def from_environment(environ: dict[str, str] | None = None) -> GithubEvent:
        environ = dict(os.environ if environ is None else environ)
        name = environ.get("GITHUB_EVENT_NAME") or None
        untrusted = environ.get(UNTRUSTED_ENV, "") not in ("", "0")
        if name is None:
            return GithubEvent(name=None, from_fork=False, declared_untrusted=untrusted)
        payload: dict[str, Any] = {}
        path = environ.get("GITHUB_EVENT_PATH")
        if path:
            try:
                loaded = json.loads(Path(path).read_text(encoding="utf-8"))
                payload = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                payload = {}
        fork = _from_fork(name, payload, environ.get("GITHUB_REPOSITORY", ""))
        return GithubEvent(name=name, from_fork=fork, declared_untrusted=untrusted)


def _from_fork(name: str, payload: dict[str, Any], repository: str) -> bool:
    """A pull request (or a run it triggered) whose head is in another repository.
    A head that cannot be read (a deleted fork, a missing payload) counts as a fork."""
    if name in PULL_REQUEST_EVENTS - {"merge_group"}:
        head = _get(payload, "pull_request", "head", "repo", "full_name")
    elif name == "workflow_run":
        head = _get(payload, "workflow_run", "head_repository", "full_name")
    else:
        return False
    return not (isinstance(head, str) and head and head.lower() == repository.lower())


def _get(data: object, *keys: str) -> object:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def is_github_hosted(labels: tuple[str, ...] | list[str]) -> bool:
    """One label, and one of GitHub's own: a self-hosted runner needs `self-hosted`
    or a label of its own, and several labels only ever select self-hosted ones."""
    return len(labels) == 1 and GITHUB_HOSTED_LABEL.fullmatch(labels[0]) is not None


def write_github_output(outputs: dict[str, str]) -> None:
    """Job outputs, appended to $GITHUB_OUTPUT as name=value lines."""
    import os

    from kernel_matrix.errors import ConfigError

    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        raise ConfigError("--github-output: GITHUB_OUTPUT is not set (it is, in a GitHub Actions job)")
    with open(path, "a", encoding="utf-8") as f:
        for name, value in outputs.items():
            f.write(f"{name}={value}\n")  # compact JSON has no newline, so one line holds it
