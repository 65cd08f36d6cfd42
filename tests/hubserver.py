"""An in-process Hugging Face Hub for tests.

HubServer speaks enough of the Hub's HTTP protocol that the real huggingface_hub
client (HfApi, hf_hub_download, snapshot_download) and the real `kernels` loader
can publish to it and load from it over loopback:

    with HubServer(trusted_orgs=["test-org"]) as server:
        api = HfApi(endpoint=server.url, token="hf_test_token")
        api.create_repo("test-org/img2gray", repo_type="kernel")

It keeps git semantics where the client or our code can observe them: every repo
has branches, tags and an append-only list of commits, each commit a full file
snapshot; revisions are branch names, tag names or full commit oids; file oids
are git blob sha1s and folder oids git tree sha1s. It keeps no LFS or Xet: the
preupload endpoint answers "regular" for every file, so clients send the content
inline (base64) in the commit.

Tests can inject faults (an HTTP status, a dropped connection before or after the
request is applied, a delay), read every request the clients made (with their
headers, to check a token was sent), and read commits and files directly.

Stdlib only: ThreadingHTTPServer, one thread per connection, one request per
connection, and one lock around all repo state so that each request applies
atomically."""

import base64
import hashlib
import itertools
import json
import re
import socketserver
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType
from urllib.parse import parse_qs, unquote, urlsplit

# API path segment -> repo type, and repo type -> prefix of its web and file URLs.
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}

USER = "test-user"  # the namespace of repos created without an organization
DEFAULT_BRANCH = "main"
# Like the Hub, a new repo starts with one commit on main holding a .gitattributes.
INITIAL_FILES = {".gitattributes": b"*.bin filter=lfs diff=lfs merge=lfs -text\n"}

_REPO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_REF_NAME = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
_FULL_OID = re.compile(r"[0-9a-f]{40}")


# ---------------------------------------------------------------- git objects


def git_blob_oid(data: bytes) -> str:
    """What `git hash-object` says for a file: the oid the Hub reports for regular files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def git_tree_oid(files: Mapping[str, bytes], folder: str = "") -> str:
    """The git tree oid of `folder` ("" for the root) in a {path: content} snapshot."""
    prefix = f"{folder}/" if folder else ""
    entries: dict[str, tuple[str, str]] = {}  # name -> (mode, oid)
    for path, data in files.items():
        if path.startswith(prefix):
            name, is_folder, _ = path[len(prefix) :].partition("/")
            if is_folder:
                entries[name] = ("40000", "")  # oid filled in below, once per sub-folder
            else:
                entries[name] = ("100644", git_blob_oid(data))
    for name, (mode, _) in entries.items():
        if mode == "40000":
            entries[name] = (mode, git_tree_oid(files, prefix + name))

    # git orders tree entries by name, comparing a folder's name as if it ended in "/".
    def git_order(name: str) -> str:
        return name + "/" if entries[name][0] == "40000" else name

    body = b"".join(
        f"{entries[name][0]} {name}\0".encode() + bytes.fromhex(entries[name][1])
        for name in sorted(entries, key=git_order)
    )
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def _folders(files: Iterable[str]) -> set[str]:
    """Every folder that holds a file of the snapshot, at any depth."""
    folders = set()
    for path in files:
        parts = path.split("/")[:-1]
        folders.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return folders


def _now() -> str:
    # The one date format huggingface_hub's parse_datetime reads.
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_commit_counter = itertools.count()


@dataclass(frozen=True)
class Commit:
    """One commit, as HubServer.commits() returns it."""

    oid: str
    parent: str | None
    title: str
    message: str
    files: Mapping[str, bytes]  # the full snapshot, read-only
    author: str
    date: str


@dataclass
class _Repo:
    repo_type: str
    repo_id: str
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit oid
    tags: dict[str, str] = field(default_factory=dict)  # name -> commit oid
    commits: dict[str, Commit] = field(default_factory=dict)  # oid -> commit, in creation order, never shrinks

    def find(self, revision: str) -> Commit | None:
        # Branch and tag names never collide (creating either refuses a name in use), so the order does not matter.
        oid = self.branches.get(revision) or self.tags.get(revision) or revision
        return self.commits.get(oid)

    def commit(
        self, branch: str, files: Mapping[str, bytes], title: str, message: str = "", author: str = USER
    ) -> "Commit":
        parent = self.branches.get(branch)
        # Unique per commit, like a real oid: the counter tells apart commits with identical content.
        seed = f"{self.repo_type}/{self.repo_id}\n{parent}\n{next(_commit_counter)}\n{title}"
        commit = Commit(
            oid=hashlib.sha1(seed.encode()).hexdigest(),
            parent=parent,
            title=title,
            message=message,
            files=MappingProxyType(dict(files)),
            author=author,
            date=_now(),
        )
        self.commits[commit.oid] = commit
        self.branches[branch] = commit.oid
        return commit


# ---------------------------------------------------------------- HTTP values


class HubError(Exception):
    """An error answer, shaped like the Hub's: the client maps X-Error-Code to its exception classes
    (RepoNotFound -> RepositoryNotFoundError, RevisionNotFound, EntryNotFound -> RemoteEntryNotFoundError)."""

    def __init__(self, status: int, message: str, *, code: str | None = None, headers: dict | None = None, **body):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers, self.body = headers or {}, body

    def response(self) -> "_Response":
        headers = {"X-Error-Message": self.message, **self.headers}
        if self.code:
            headers["X-Error-Code"] = self.code
        return _json({"error": self.message, **self.body}, self.status, headers)


@dataclass
class _Request:
    method: str
    target: str  # as sent: quoted path and query
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def segments(self) -> list[str]:
        # Unquote each segment on its own: clients quote revisions and tree paths whole ("refs%2Fpr%2F1", "build%2Fx").
        return [unquote(s) for s in self.path.strip("/").split("/")]

    def flag(self, name: str) -> bool:
        return parse_qs(urlsplit(self.target).query).get(name, [""])[-1].lower() in ("1", "true")

    def json(self) -> dict:
        try:
            data = json.loads(self.body or b"{}")
        except ValueError as exc:
            raise HubError(400, f"Invalid JSON body: {exc}") from None
        if not isinstance(data, dict):
            raise HubError(400, "JSON body must be an object")
        return data


@dataclass
class _Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def _json(data, status: int = 200, headers: dict | None = None) -> _Response:
    return _Response(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})


@dataclass
class RecordedRequest:
    method: str
    path: str  # as sent: quoted path and query
    headers: dict[str, str]  # lower-case names, e.g. headers["authorization"] == "Bearer hf_..."
    status: int | None = None  # None: no answer (still in flight, or the connection was dropped)


@dataclass
class Fault:
    """One injected failure; see HubServer.inject. `hits` counts the requests it has hit."""

    method: str | None
    path_contains: str
    status: int | None = None
    drop: bool = False
    drop_after_apply: bool = False
    delay_s: float = 0.0
    remaining: int | None = 1  # None: every matching request, until clear_faults()
    hits: int = 0

    def matches(self, request: _Request) -> bool:
        return (
            (self.remaining is None or self.remaining > 0)
            and (self.method is None or self.method == request.method)
            and self.path_contains in unquote(request.path)
        )


# ---------------------------------------------------------------- the server


class HubServer:
    """A Hub on 127.0.0.1 at a free port; see the module docstring. Thread-safe."""

    def __init__(self, *, trusted_orgs: Iterable[str] = (), require_token: str | None = None) -> None:
        # When set, requests without "Authorization: Bearer <require_token>" get 401.
        self.require_token = require_token
        self._lock = threading.RLock()
        self._repos: dict[tuple[str, str], _Repo] = {}  # (repo type, repo id) -> repo
        self._trusted: dict[str, bool] = dict.fromkeys(trusted_orgs, True)
        self._faults: list[Fault] = []
        self._requests: list[RecordedRequest] = []
        self.errors: list[str] = []  # tracebacks of bugs in this server (answered 500)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> "HubServer":
        self._httpd = _HTTPServer(("127.0.0.1", 0), self)
        # A short poll interval keeps shutdown (and so every test using the server) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="hubserver", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
            self._httpd = self._thread = None

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("HubServer is not running: use it as a context manager, or call start()")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # -- test controls

    def inject(
        self,
        method: str | None = None,
        path_contains: str = "",
        *,
        status: int | None = None,
        drop: bool = False,
        drop_after_apply: bool = False,
        delay_s: float = 0.0,
        times: int | None = 1,
    ) -> Fault:
        """Make the next `times` requests (None: all) whose method is `method` (None: any) and whose unquoted
        path contains `path_contains` fail, first match wins:
        - status: answered with that HTTP status, not applied;
        - drop: the connection is closed without an answer, not applied;
        - drop_after_apply: applied, then the connection is closed without an answer (the response is lost);
        - delay_s: wait that long first (alone: then served normally; the request still applies if the client
          gave up meanwhile, as on a slow real server).
        HEAD and GET are different methods: hf_hub_download HEADs a file before it GETs it."""
        if sum([status is not None, drop, drop_after_apply]) > 1:
            raise ValueError("choose at most one of status, drop and drop_after_apply")
        if status is None and not drop and not drop_after_apply and not delay_s:
            raise ValueError("a fault needs a status, drop, drop_after_apply or delay_s")
        fault = Fault(method, path_contains, status, drop, drop_after_apply, delay_s, times)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def set_trusted(self, org: str, trusted: bool = True) -> None:
        """What /api/organizations/{org}/overview answers as trustedKernelPublisher (default: False)."""
        with self._lock:
            self._trusted[org] = trusted

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def commits(self, repo_id: str, repo_type: str = "kernel") -> list[Commit]:
        """All commits of the repo, on any branch, oldest first (the first is the initial commit)."""
        with self._lock:
            return list(self._lookup(repo_type, repo_id).commits.values())

    def files(self, repo_id: str, revision: str = DEFAULT_BRANCH, repo_type: str = "kernel") -> dict[str, bytes]:
        """The snapshot at a branch, tag or commit oid: {path: content}."""
        with self._lock:
            commit = self._lookup(repo_type, repo_id).find(revision)
            if commit is None:
                raise KeyError(f"{repo_type} repo {repo_id} has no revision {revision!r}")
            return dict(commit.files)

    def _lookup(self, repo_type: str, repo_id: str) -> _Repo:
        try:
            return self._repos[(repo_type, repo_id)]
        except KeyError:
            raise KeyError(f"no {repo_type} repo {repo_id}") from None

    # -- per request, called by _Handler

    def _record(self, request: _Request) -> RecordedRequest:
        record = RecordedRequest(request.method, request.target, dict(request.headers))
        with self._lock:
            self._requests.append(record)
        return record

    def _take_fault(self, request: _Request) -> Fault | None:
        with self._lock:
            fault = next((f for f in self._faults if f.matches(request)), None)
            if fault is not None:
                fault.hits += 1
                if fault.remaining is not None:
                    fault.remaining -= 1
            return fault

    def _dispatch(self, request: _Request) -> _Response:
        try:
            if self.require_token and request.headers.get("authorization") != f"Bearer {self.require_token}":
                # This message keeps the client from reporting a 401 as "repository not found".
                raise HubError(401, "Invalid credentials in Authorization header")
            with self._lock:  # one request at a time: each applies atomically
                return self._route(request)
        except HubError as exc:
            return exc.response()
        except Exception:
            self.errors.append(traceback.format_exc())
            return _json({"error": f"HubServer bug:\n{traceback.format_exc()}"}, 500)

    def _route(self, req: _Request) -> _Response:
        match (req.method, req.segments):
            case ("GET", ["api", "agent-harnesses"]):
                # huggingface_hub fetches this registry from its ENDPOINT the first time it builds request headers
                # (to name the AI agent, if any, in the user agent). Empty: no agent is ever detected.
                return _json({"standardEnvVars": [], "harnesses": {}})
            case ("POST", ["api", "validate-yaml"]):
                return self._validate_yaml(req)
            case ("POST", ["api", "repos", "create"]):
                return self._create_repo(req)
            case ("GET", ["api", "organizations", org, "overview"]):
                return self._organization_overview(org)
            case ("GET", ["api", types, ns, name]):
                return self._repo_info(req, self._repo(types, ns, name), DEFAULT_BRANCH)
            case ("GET", ["api", types, ns, name, "revision", rev]):
                return self._repo_info(req, self._repo(types, ns, name), rev)
            case ("GET", ["api", types, ns, name, "refs"]):
                return self._refs(self._repo(types, ns, name))
            case ("GET", ["api", types, ns, name, "tree", rev, *folder]):
                return self._tree(req, self._repo(types, ns, name), rev, "/".join(folder))
            case ("POST", ["api", types, ns, name, "paths-info", rev]):
                return self._paths_info(req, self._repo(types, ns, name), rev)
            case ("GET", ["api", types, ns, name, "commits", rev]):
                return self._list_commits(self._repo(types, ns, name), rev)
            case ("POST", ["api", types, ns, name, "preupload", rev]):
                return self._preupload(req, self._repo(types, ns, name), rev)
            case ("POST", ["api", types, ns, name, "commit", rev]):
                return self._commit(req, self._repo(types, ns, name), rev)
            case ("POST", ["api", types, ns, name, "branch", branch]):
                return self._create_branch(req, self._repo(types, ns, name), branch)
            case ("POST", ["api", types, ns, name, "tag", rev]):
                return self._create_tag(req, self._repo(types, ns, name), rev)
            # File URLs: /{ns}/{name}/resolve/... for models, /{types}/{ns}/{name}/resolve/... for the others.
            case ("GET" | "HEAD", [types, ns, name, "resolve", rev, *path]) if types in REPO_TYPES:
                return self._resolve(req, self._repo(types, ns, name), rev, "/".join(path))
            case ("GET" | "HEAD", [ns, name, "resolve", rev, *path]):
                return self._resolve(req, self._repo("models", ns, name), rev, "/".join(path))
        raise HubError(404, f"HubServer does not implement {req.method} {req.path}")

    # -- helpers for the endpoints

    def _repo(self, types: str, ns: str, name: str) -> _Repo:
        repo = self._repos.get((REPO_TYPES.get(types, ""), f"{ns}/{name}"))
        if repo is None:
            raise HubError(404, "Repository not found", code="RepoNotFound")
        return repo

    def _resolve_revision(self, repo: _Repo, revision: str) -> Commit:
        commit = repo.find(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")
        return commit

    def _repo_url(self, repo: _Repo) -> str:
        return f"{self.url}/{URL_PREFIXES[repo.repo_type]}{repo.repo_id}"

    # -- organization and README endpoints

    def _organization_overview(self, org: str) -> _Response:
        # An organization exists once it owns a repo or has a trust setting; the user's namespace is none.
        owners = {repo_id.split("/")[0] for _, repo_id in self._repos} - {USER}
        if org not in owners | set(self._trusted):
            raise HubError(404, f"Organization {org} not found")
        # trustedKernelPublisher is what kernels.get_kernel checks before it downloads anything.
        return _json(
            {"name": org, "fullname": org, "avatarUrl": "", "trustedKernelPublisher": self._trusted.get(org, False)}
        )

    def _validate_yaml(self, req: _Request) -> _Response:
        # huggingface_hub calls this before it commits a README.md. Stdlib has no YAML parser: only check that a
        # front matter block that opens also closes.
        lines = [line.strip() for line in str(req.json().get("content", "")).splitlines()]
        if lines and lines[0] == "---" and "---" not in lines[1:]:
            return _json({"errors": [{"message": "YAML metadata block is not closed by '---'"}], "warnings": []}, 400)
        return _json({"errors": [], "warnings": []})

    # -- repo endpoints

    def _create_repo(self, req: _Request) -> _Response:
        body = req.json()
        repo_type = body.get("type") or "model"
        name, owner = body.get("name") or "", body.get("organization") or USER
        if repo_type not in URL_PREFIXES:
            raise HubError(400, f"Invalid repo type {repo_type!r}")
        if not _REPO_NAME.fullmatch(name) or not _REPO_NAME.fullmatch(owner) or "--" in name:
            raise HubError(400, f"Invalid repo name {owner}/{name}")
        repo = _Repo(repo_type, f"{owner}/{name}")
        if (repo_type, repo.repo_id) in self._repos:
            # create_repo(exist_ok=True) expects exactly this 409.
            raise HubError(409, f"You already created this {repo_type} repo", url=self._repo_url(repo))
        repo.commit(DEFAULT_BRANCH, INITIAL_FILES, "initial commit", author="system")
        self._repos[(repo_type, repo.repo_id)] = repo
        return _json({"url": self._repo_url(repo), "name": repo.repo_id, "id": repo.repo_id})

    def _repo_info(self, req: _Request, repo: _Repo, revision: str) -> _Response:
        commit = self._resolve_revision(repo, revision)
        with_blobs = req.flag("blobs")  # repo_info(files_metadata=True)
        siblings = [
            {"rfilename": path, **({"size": len(data), "blobId": git_blob_oid(data)} if with_blobs else {})}
            for path, data in sorted(commit.files.items())
        ]
        return _json(
            {
                "id": repo.repo_id,
                "author": repo.repo_id.split("/")[0],
                "sha": commit.oid,  # snapshot_download resolves a branch or tag through this
                "lastModified": commit.date,
                "private": False,
                "gated": False,
                "siblings": siblings,
            }
        )

    def _refs(self, repo: _Repo) -> _Response:
        def refs(names: dict[str, str], kind: str) -> list[dict]:
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": oid} for n, oid in sorted(names.items())]

        return _json(
            {
                "branches": refs(repo.branches, "heads"),
                "tags": refs(repo.tags, "tags"),
                "converts": [],
                "pullRequests": [],
            }
        )

    def _list_commits(self, repo: _Repo, revision: str) -> _Response:
        commits, commit = [], self._resolve_revision(repo, revision)
        while commit is not None:  # newest first, following parents like `git log`
            commits.append(
                {
                    "id": commit.oid,
                    "title": commit.title,
                    "message": commit.message,
                    "authors": [{"user": commit.author}],
                    "date": commit.date,
                }
            )
            commit = repo.commits.get(commit.parent) if commit.parent else None
        return _json(commits)

    # -- tree endpoints

    @staticmethod
    def _entry(files: Mapping[str, bytes], path: str) -> dict:
        if path in files:
            return {"type": "file", "oid": git_blob_oid(files[path]), "size": len(files[path]), "path": path}
        return {"type": "directory", "oid": git_tree_oid(files, path), "size": 0, "path": path}

    def _tree(self, req: _Request, repo: _Repo, revision: str, folder: str) -> _Response:
        files = self._resolve_revision(repo, revision).files
        folder = folder.strip("/")
        if folder and folder not in _folders(files):
            # What kernels' get_variants and our publish code see for a repo without build/.
            raise HubError(404, f"{folder} does not exist on {revision!r}", code="EntryNotFound")
        prefix = f"{folder}/" if folder else ""
        below = [p for p in sorted(set(files) | _folders(files)) if p.startswith(prefix)]
        if not req.flag("recursive"):
            below = [p for p in below if "/" not in p[len(prefix) :]]
        # One page: the real Hub pages by 1000 through a Link header, which the client follows when present.
        return _json([self._entry(files, p) for p in below])

    def _paths_info(self, req: _Request, repo: _Repo, revision: str) -> _Response:
        files = self._resolve_revision(repo, revision).files
        paths = parse_qs(req.body.decode()).get("paths", [])  # form-encoded, one "paths" field per path
        known = set(files) | _folders(files)
        return _json([self._entry(files, p.strip("/")) for p in paths if p.strip("/") in known])

    # -- write endpoints

    def _preupload(self, req: _Request, repo: _Repo, revision: str) -> _Response:
        files = self._resolve_revision(repo, revision).files
        wanted = req.json().get("files")
        if not isinstance(wanted, list) or not all(isinstance(f, dict) and "path" in f for f in wanted):
            raise HubError(400, "preupload expects {'files': [{'path', 'size', 'sample'}, ...]}")
        answers = []
        for f in wanted:
            # "regular" for every file: the client then sends content inline in the commit (no LFS, no Xet). The
            # oid of the current file lets the client skip files that did not change, as against the real Hub.
            current = files.get(f["path"])
            oid = git_blob_oid(current) if current is not None else None
            answers.append({"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": oid})
        return _json({"files": answers})

    def _commit(self, req: _Request, repo: _Repo, branch: str) -> _Response:
        if req.flag("create_pr"):
            raise HubError(400, "HubServer does not support pull requests (create_pr)")
        if branch not in repo.branches:
            self._resolve_revision(repo, branch)  # 404 unless it is a tag or a commit
            raise HubError(400, f"Can only commit to a branch, and {branch!r} is not one")
        header, *operations = _ndjson(req.body)
        summary = header.get("value", {}).get("summary") if header.get("key") == "header" else None
        if not summary:
            raise HubError(400, "The first line of a commit must be its header, with a summary")
        head = repo.branches[branch]
        parent = header["value"].get("parentCommit")
        if parent is not None and not (len(parent) >= 5 and head.startswith(parent.lower())):  # 7-char ids are fine
            raise HubError(412, "A commit has happened since. Please refresh and try again.")
        files = dict(repo.commits[head].files)
        for operation in operations:
            _apply(files, operation)
        clashes = sorted(_folders(files) & set(files))
        if clashes:
            raise HubError(400, f"Paths would be both a file and a folder: {clashes}")
        commit = repo.commit(branch, files, summary, header["value"].get("description", ""))
        return _json(
            {
                "success": True,
                "commitOid": commit.oid,
                "commitUrl": f"{self._repo_url(repo)}/commit/{commit.oid}",
                "hookOutput": "",
                "pullRequestUrl": None,
            }
        )

    def _create_branch(self, req: _Request, repo: _Repo, branch: str) -> _Response:
        body = req.json()
        _check_ref_name(branch)
        if branch in repo.branches or branch in repo.tags:
            raise HubError(409, f"Reference already exists: {branch}")
        if body.get("emptyBranch"):
            raise HubError(400, "HubServer does not support empty branches")
        # Like the Hub: from the head of main unless told otherwise.
        repo.branches[branch] = self._resolve_revision(repo, body.get("startingPoint") or DEFAULT_BRANCH).oid
        return _json({})

    def _create_tag(self, req: _Request, repo: _Repo, revision: str) -> _Response:
        tag = req.json().get("tag") or ""
        _check_ref_name(tag)
        if tag in repo.tags or tag in repo.branches:
            raise HubError(409, f"Reference already exists: {tag}")
        repo.tags[tag] = self._resolve_revision(repo, revision).oid
        return _json({})

    # -- file endpoint

    def _resolve(self, req: _Request, repo: _Repo, revision: str, path: str) -> _Response:
        commit = self._resolve_revision(repo, revision)
        if path not in commit.files:
            # With X-Repo-Commit the client caches that the file does not exist at this commit.
            raise HubError(404, "Entry not found", code="EntryNotFound", headers={"X-Repo-Commit": commit.oid})
        data = commit.files[path]
        headers = {
            "X-Repo-Commit": commit.oid,  # hf_hub_download refuses an answer without it
            "ETag": f'"{git_blob_oid(data)}"',  # the cache key of the blob in the client's cache
            "Content-Type": "application/octet-stream",
        }
        # No Range support: the client sends one only to resume a transfer that broke mid-body, which no fault here
        # produces, and it handles the full 200 answer too.
        return _Response(200, data, headers)


# ---------------------------------------------------------------- commit payload


def _ndjson(body: bytes) -> list[dict]:
    try:
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    except ValueError as exc:
        raise HubError(400, f"Invalid NDJSON commit payload: {exc}") from None
    if not lines or not all(isinstance(line, dict) for line in lines):
        raise HubError(400, "A commit payload is one JSON object per line, the header first")
    return lines


def _apply(files: dict[str, bytes], operation: dict) -> None:
    """Apply one commit line to the snapshot, or refuse the whole commit."""
    key, value = operation.get("key"), operation.get("value") or {}
    path = value.get("path")
    match key:
        case "file":
            _check_path(path)
            try:
                if value.get("encoding", "base64") == "base64":
                    files[path] = base64.b64decode(value["content"], validate=True)
                else:
                    files[path] = str(value["content"]).encode()
            except (KeyError, ValueError):
                raise HubError(400, f"Invalid content for {path}") from None
        case "deletedFile":
            if path not in files:
                # The client adds its "file or folder?" hint when it sees this wording.
                raise HubError(404, f"A file with this name doesn't exist: {path}", code="EntryNotFound")
            del files[path]
        case "deletedFolder":
            prefix = str(path).rstrip("/") + "/"
            doomed = [p for p in files if p.startswith(prefix)]
            if not doomed:
                raise HubError(404, f"A folder with this name doesn't exist: {path}", code="EntryNotFound")
            for p in doomed:
                del files[p]
        case "lfsFile":
            raise HubError(400, f"HubServer stores no LFS files ({path}): its preupload answers 'regular' for all")
        case _:
            raise HubError(400, f"Unknown commit operation {key!r}")


def _check_path(path) -> None:
    parts = path.split("/") if isinstance(path, str) else [""]
    if any(part in ("", ".", "..") for part in parts) or parts[0] == ".git":
        raise HubError(400, f"Invalid path in repo: {path!r}")


def _check_ref_name(name: str) -> None:
    # refs/pr/N and refs/convert/* are the Hub's own; a 40-hex name would read as a commit oid.
    if not _REF_NAME.fullmatch(name) or name.startswith("refs/") or _FULL_OID.fullmatch(name) or ".." in name:
        raise HubError(400, f"Invalid reference name: {name!r}")


# ---------------------------------------------------------------- HTTP plumbing


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler sleeping in an injected delay must not hold up shutdown
    request_queue_size = 64  # snapshot_download opens several connections at once

    def __init__(self, address: tuple[str, int], hub: HubServer) -> None:
        self.hub = hub
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host name up (socket.getfqdn), which can take seconds where DNS is slow.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class _Handler(BaseHTTPRequestHandler):
    # One request per connection: a dropped connection then loses exactly one request, and no idle keep-alive
    # connection outlives the server. Loopback connections are cheap.
    protocol_version = "HTTP/1.0"
    server: _HTTPServer

    def _serve(self) -> None:
        hub = self.server.hub
        request = _Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, self._read_body())
        record = hub._record(request)
        fault = hub._take_fault(request)
        if fault is not None and fault.delay_s:
            time.sleep(fault.delay_s)
        if fault is not None and fault.drop:
            return  # closes the connection without an answer; the request was read in full, so the client sees no
            # error while sending and then "Server disconnected without sending a response"
        if fault is not None and fault.status is not None:
            response = HubError(fault.status, f"Injected failure (HubServer.inject, HTTP {fault.status})").response()
        else:
            response = hub._dispatch(request)
        if fault is not None and fault.drop_after_apply:
            return  # applied, but the answer is lost
        record.status = response.status
        self._send(response)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _serve

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chunks = []
        while size := int(self.rfile.readline().split(b";")[0], 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after each chunk
        while self.rfile.readline().strip():  # trailers, up to the blank line
            pass
        return b"".join(chunks)

    def _send(self, response: _Response) -> None:
        try:
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))  # for HEAD too: the file's size
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, e.g. its timeout fired during an injected delay

    def log_message(self, format: str, *args) -> None:
        pass  # HubServer.requests is the log
