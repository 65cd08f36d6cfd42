"""Publish built variants to a Hugging Face Hub kernel repo.

A release is ONE commit on branch v<version>: it adds or changes the variant
files of this release (and the kernel's benchmarks/benchmark*.py, as
kernel-builder uploads them) and deletes every other file under build/ but those of
the variants the matrix names and this release does not carry (not built, or
outside its profile: kernel-builder's upload leaves other variants alone too),
so nobody sees half a release and no variant dropped from the matrix survives.
Unchanged content makes no commit. The kernel card (README.md) goes to main,
the optional tag to the release commit. The token comes from HF_TOKEN or the
huggingface_hub login and is never printed."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Literal, TypeVar

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile

from kernel_matrix.errors import ConfigError, NetworkError, PublishError
from kernel_matrix.layout import HUB_BUILD, hub_path
from kernel_matrix.releasing.release import ReleaseFile, git_blob_oid

if TYPE_CHECKING:  # checked against the httpx2 the environment has
    import httpx2 as httpx
else:
    try:  # huggingface_hub >= 2 speaks HTTP through the httpx2 fork
        import httpx2 as httpx
    except ImportError:  # pragma: no cover
        import httpx

# The Hub repo type of a kernel release (publish writes one, verify downloads one).
REPO_TYPE = "kernel"
TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
T = TypeVar("T")


@dataclass
class Plan:
    repo_id: str
    branch: str
    parent_commit: str | None  # the branch head the plan was made against; None: no branch yet
    added: list[ReleaseFile] = field(default_factory=list)
    changed: list[ReleaseFile] = field(default_factory=list)
    unchanged: list[ReleaseFile] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return bool(self.added or self.changed or self.deleted)

    def operations(self) -> list[CommitOperationAdd | CommitOperationDelete]:
        ops: list[CommitOperationAdd | CommitOperationDelete] = [
            CommitOperationAdd(f.path_in_repo, str(f.local)) for f in self.added + self.changed
        ]
        ops += [CommitOperationDelete(path) for path in self.deleted]
        return ops


@dataclass(frozen=True)
class Retry:
    attempts: int = 5
    base_delay_s: float = 1.0

    @staticmethod
    def from_env() -> Retry:
        # Tests shorten the waits; users rarely need to.
        return Retry(base_delay_s=float(os.environ.get("KERNEL_MATRIX_RETRY_BASE_S", "1.0")))


def transient(exc: BaseException) -> bool:
    if isinstance(exc, HfHubHTTPError):
        response = getattr(exc, "response", None)
        return response is not None and response.status_code in TRANSIENT_STATUS
    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError))


def with_retries(action: Callable[[], T], retry: Retry, on_retry: Callable[[str], None] = lambda m: None) -> T:
    """action(), retried with exponential backoff on transient failures only."""
    for attempt in range(1, retry.attempts + 1):
        try:
            return action()
        except Exception as exc:
            if not transient(exc) or attempt == retry.attempts:
                raise
            delay = retry.base_delay_s * 2 ** (attempt - 1)
            on_retry(f"transient failure ({_short(exc)}); retrying in {delay:g} s ({attempt}/{retry.attempts - 1})")
            time.sleep(delay)
    raise AssertionError("unreachable")


def _short(exc: BaseException) -> str:
    if isinstance(exc, HfHubHTTPError) and getattr(exc, "response", None) is not None:
        return f"HTTP {exc.response.status_code}"
    return type(exc).__name__


def branch_head(api: HfApi, repo_id: str, branch: str) -> str | None:
    refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
    return next((ref.target_commit for ref in refs.branches if ref.name == branch), None)


def remote_files(api: HfApi, repo_id: str, revision: str, folder: str) -> dict[str, str]:
    """path -> content id of every file under folder/ at revision: the sha256 of
    LFS/Xet files (the Hub stores binaries so; their blob oid hashes the pointer),
    else the git blob oid."""
    try:
        entries = api.list_repo_tree(
            repo_id, path_in_repo=folder, recursive=True, revision=revision, repo_type=REPO_TYPE
        )
        return {e.path: (e.lfs.sha256 if e.lfs else e.blob_id) for e in entries if isinstance(e, RepoFile)}
    except HfHubHTTPError as exc:
        if getattr(exc, "response", None) is not None and exc.response.status_code == 404:
            return {}  # no such folder yet
        raise


def _stale(path: str, *, new_branch: bool, kept_prefixes: tuple[str, ...]) -> bool:
    """Whether a file of the branch that this release does not hold goes, as kernel-builder's
    upload decides: everything a new branch inherited from main; on an existing branch, under
    build/ all but the kept variants', under benchmarks/ only benchmark*.py (upload.rs)."""
    if new_branch:
        return True
    if path.startswith(HUB_BUILD + "/"):
        return not path.startswith(kept_prefixes)
    name = path.rsplit("/", 1)[-1]
    return name.startswith("benchmark") and name.endswith(".py")


def make_plan(
    api: HfApi,
    repo_id: str,
    branch: str,
    files: list[ReleaseFile],
    kept: Collection[str] = (),
    new_branch: bool | None = None,
) -> Plan:
    """kept: variants whose files on the branch stay (this release does not carry them).
    new_branch: whether the release makes the branch (default: whether it is missing now); a
    retry after the branch was made keeps the first answer, and so the same deletions."""
    head = branch_head(api, repo_id, branch)
    new_branch = head is None if new_branch is None else new_branch
    # A new branch starts from main but inherits none of its build/ (or benchmarks/) files.
    remote = {
        **remote_files(api, repo_id, head or "main", HUB_BUILD),
        **remote_files(api, repo_id, head or "main", "benchmarks"),
    }
    plan = Plan(repo_id=repo_id, branch=branch, parent_commit=head)
    local_paths = set()
    for file in files:
        local_paths.add(file.path_in_repo)
        remote_id = remote.get(file.path_in_repo)
        same = remote_id in (file.blob_oid, file.sha256)
        (plan.added if remote_id is None else plan.unchanged if same else plan.changed).append(file)
    kept_prefixes = tuple(hub_path(variant) for variant in kept)
    plan.deleted = sorted(
        path for path in set(remote) - local_paths if _stale(path, new_branch=new_branch, kept_prefixes=kept_prefixes)
    )
    return plan


def dry_run(api: HfApi, repo_id: str, branch: str, files: list[ReleaseFile], kept: Collection[str] = ()) -> Plan:
    """The plan publish would carry out, from read-only calls."""
    with explain_refusals(repo_id):
        try:
            return make_plan(api, repo_id, branch, files, kept)
        except RepositoryNotFoundError:
            return Plan(repo_id=repo_id, branch=branch, parent_commit=None, added=list(files))


@dataclass
class Published:
    """What a release left on the Hub: its commit, the card's, its tag."""

    plan: Plan
    commit: str | None  # the release commit, None when nothing changed
    card_commit: str | None
    tag: str | None


def publish(
    api: HfApi,
    repo_id: str,
    branch: str,
    files: list[ReleaseFile],
    *,
    card: str,
    message: str,
    tag: str | None = None,
    kept: Collection[str] = (),
    retry: Retry | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> Published:
    retry = retry or Retry.from_env()
    guard = explain_refusals(repo_id)
    with guard:
        with_retries(lambda: api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True), retry, log)

        # Plan and commit together, so that a retry after a lost response
        # re-reads the branch and finds the release already there.
        sent: list[Plan] = []  # plans whose commit request went out
        new_branch = with_retries(lambda: branch_head(api, repo_id, branch), retry, log) is None

        def commit_release() -> tuple[Plan, str | None]:
            plan = make_plan(api, repo_id, branch, files, kept, new_branch=new_branch)
            if not plan.has_changes:
                # Nothing left to do: either nothing changed, or an earlier
                # attempt's commit landed although its answer was lost.
                return (sent[0], plan.parent_commit) if sent else (plan, None)
            if plan.parent_commit is None:
                api.create_branch(repo_id, branch=branch, repo_type=REPO_TYPE, exist_ok=True)
                plan.parent_commit = branch_head(api, repo_id, branch)
            sent.append(plan)
            info = api.create_commit(
                repo_id,
                plan.operations(),
                commit_message=message,
                revision=branch,
                repo_type=REPO_TYPE,
                parent_commit=plan.parent_commit,
            )
            return plan, info.oid

        plan, commit = with_retries(commit_release, retry, log)
        card_commit = with_retries(lambda: _update_card(api, repo_id, card), retry, log)
        if tag:
            release = commit or plan.parent_commit  # the commit that holds this release
            with_retries(lambda: _tag(api, repo_id, tag, release), retry, log)
    return Published(plan=plan, commit=commit, card_commit=card_commit, tag=tag)


# git check-ref-format's rules for one tag name (refs/tags/<tag>): no control
# characters, space, ~ ^ : ? * [ \ or "@{"; no "..", "//", leading or trailing
# "/" or trailing "."; no component starting with "." or ending in ".lock".
_BAD_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|//|@\{|^/|/$|\.$|(^|/)\.|\.lock(/|$)")


def check_tag(tag: str) -> str:
    """A tag name git and the Hub accept as refs/tags/<tag>; ConfigError otherwise."""
    if not tag or tag == "@" or tag.startswith("refs/") or _BAD_REF.search(tag):
        raise ConfigError(
            f"--tag {tag!r}: not a valid tag name (git check-ref-format: no spaces, '..', '~^:?*[\\', "
            "leading '.', '/' at either end; and not a full ref such as refs/heads/main)"
        )
    return tag


# The branches `kernels` loads a version from: get_kernel(repo, version=N) reads v<N>.
_VERSION_BRANCH = re.compile(r"v[0-9]+")


def check_tag_beside_branch(tag: str, branch: str) -> None:
    """A tag named like another version's branch (v2 on a release to v1) would hold the name
    that version's branch needs: the Hub keeps one ref of a name, and `revision="v2"` reads
    either. Refused before anything is published; a tag equal to the release's branch is
    left out with a note by the caller."""
    if tag != branch and _VERSION_BRANCH.fullmatch(tag):
        raise ConfigError(
            f"--tag {tag}: v<N> is the name of version N's branch, which `get_kernel(..., version=N)` "
            f"loads, and this release goes to {branch}: use another tag (e.g. {tag}.0.0)"
        )


def _tag(api: HfApi, repo_id: str, tag: str, commit: str | None) -> None:
    """Tag the release commit (None: main's head); an existing tag must already point at it."""
    refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
    existing = next((ref.target_commit for ref in refs.tags if ref.name == tag), None)
    if existing is None:
        api.create_tag(repo_id, tag=tag, revision=commit, repo_type=REPO_TYPE)
    elif existing != commit:
        raise PublishError(
            f"{repo_id}: tag {tag} already points at {existing[:12]}, not at this release "
            f"({commit[:12] if commit else 'main'}): use a new tag"
        )


def _update_card(api: HfApi, repo_id: str, card: str) -> str | None:
    """Put the kernel card on main unless it is already there, byte for byte."""
    current = api.get_paths_info(repo_id, ["README.md"], revision="main", repo_type=REPO_TYPE)
    if any(isinstance(f, RepoFile) and f.blob_id == git_blob_oid(card.encode()) for f in current):
        return None
    info = api.upload_file(
        path_or_fileobj=card.encode(),
        path_in_repo="README.md",
        repo_id=repo_id,
        repo_type=REPO_TYPE,
        revision="main",
        commit_message="Update the kernel card",
    )
    return info.oid


class explain_refusals:
    """Turn the Hub's refusals into one line naming the repo and what to do."""

    def __init__(self, repo_id: str) -> None:
        self.repo_id = repo_id

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if exc is None:
            return False
        if isinstance(exc, (RepositoryNotFoundError, RevisionNotFoundError)) or _status(exc) == 404:
            raise PublishError(
                f"{self.repo_id}: not found on {_endpoint()} (HTTP 404): check the repo id, or "
                "that your token may create repos in that organization"
            ) from None
        if _status(exc) in (401, 403):
            raise PublishError(
                f"{self.repo_id}: HTTP {_status(exc)} from {_endpoint()}: set HF_TOKEN (or run "
                "`hf auth login`) with a token that can write to this repo"
            ) from None
        if _status(exc) in (409, 412):
            raise PublishError(
                f"{self.repo_id}: the branch moved while publishing (HTTP {_status(exc)}): run publish again"
            ) from None
        if _status(exc) == 400 and "type" in str(getattr(exc, "server_message", "") or ""):
            raise PublishError(
                f"{self.repo_id}: {_endpoint()} rejected repo type '{REPO_TYPE}': the server "
                "does not support kernel repos"
            ) from None
        if transient(exc):
            raise NetworkError(
                f"{self.repo_id}: {_endpoint()} kept failing ({_short(exc)}); the failed step changed "
                "nothing: run publish again"
            ) from None
        if isinstance(exc, HfHubHTTPError):
            raise PublishError(f"{self.repo_id}: {_endpoint()} refused: {_short(exc)}") from None
        return False


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _endpoint() -> str:
    return constants.ENDPOINT
