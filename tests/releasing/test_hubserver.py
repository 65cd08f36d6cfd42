"""The test Hub (tests/hubserver.py) against the real huggingface_hub client: what later tests rely on when they
publish built variants to it and load them with kernels.get_kernel."""

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx2
import pytest
from hubserver import HubServer
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    constants,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub.errors import HfHubHTTPError, RemoteEntryNotFoundError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile, RepoFolder
from huggingface_hub.utils import _detect_agent

TOKEN = "hf_test_token"
ORG = "test-org"
REPO = f"{ORG}/img2gray"
BINARY = random.Random(0).randbytes(200_000)  # stands in for a variant's .so


def blob_oid(data: bytes) -> str:
    """git hash-object, computed here rather than taken from the server under test."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture(autouse=True)
def isolated_client(monkeypatch):
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    # huggingface_hub read the variable at import; this is the value it checks when it downloads.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    # The first time it builds request headers, huggingface_hub fetches an "agent harness" registry from
    # constants.ENDPOINT, which is huggingface.co in this process. A registry already in memory stops that.
    monkeypatch.setattr(_detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}})


@pytest.fixture
def hub():
    with HubServer(trusted_orgs=[ORG]) as server:
        yield server
    assert not server.errors, server.errors[0]


@pytest.fixture
def api(hub) -> HfApi:
    return HfApi(endpoint=hub.url, token=TOKEN)


def publish_v1(api: HfApi, tmp_path: Path) -> dict[str, bytes]:
    """Branch v1 with a release commit (bytes, str path and Path additions) and a clean-up commit (a file and a
    folder deleted). Returns the build/ files v1 ends up with."""
    api.create_repo(REPO, repo_type="kernel")
    api.create_branch(REPO, branch="v1", repo_type="kernel")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "_ops.py").write_bytes(b"OPS = 1\n")
    (tmp_path / "_ops.abi3.so").write_bytes(BINARY)
    release = [
        CommitOperationAdd("build/torch-cpu/__init__.py", b"from ._ops import OPS\n"),
        CommitOperationAdd("build/torch-cpu/_ops.py", str(tmp_path / "_ops.py")),
        CommitOperationAdd("build/torch-cpu/_ops.abi3.so", tmp_path / "_ops.abi3.so"),
        CommitOperationAdd("build/torch-cpu/stale.py", b"stale\n"),
        CommitOperationAdd("build/torch-old/__init__.py", b"old\n"),
        CommitOperationAdd("build/torch-old/sub/deep.py", b"old\n"),
    ]
    api.create_commit(REPO, release, commit_message="Release v1", revision="v1", repo_type="kernel")
    clean_up = [CommitOperationDelete("build/torch-cpu/stale.py"), CommitOperationDelete("build/torch-old/")]
    api.create_commit(REPO, clean_up, commit_message="Drop stale files", revision="v1", repo_type="kernel")
    return {
        "build/torch-cpu/__init__.py": b"from ._ops import OPS\n",
        "build/torch-cpu/_ops.py": b"OPS = 1\n",
        "build/torch-cpu/_ops.abi3.so": BINARY,
    }


def head(api: HfApi, branch: str) -> str:
    refs = api.list_repo_refs(REPO, repo_type="kernel")
    return next(ref.target_commit for ref in refs.branches if ref.name == branch)


def add(path: str, data: bytes) -> list[CommitOperationAdd]:
    return [CommitOperationAdd(path, data)]


# ---------------------------------------------------------------- repos, commits, trees, refs


def test_create_kernel_repo_and_exist_ok(api, hub):
    url = api.create_repo(REPO, repo_type="kernel")
    assert (url, url.repo_type, url.repo_id) == (f"{hub.url}/kernels/{REPO}", "kernel", REPO)

    with pytest.raises(HfHubHTTPError) as refused:
        api.create_repo(REPO, repo_type="kernel")
    assert refused.value.response.status_code == 409
    assert api.create_repo(REPO, repo_type="kernel", exist_ok=True).repo_id == REPO

    # Like the Hub: one initial commit on main, holding .gitattributes.
    [initial] = hub.commits(REPO)
    assert list(hub.files(REPO)) == [".gitattributes"]
    assert head(api, "main") == initial.oid == api.repo_info(REPO, repo_type="kernel").sha


def test_commits_on_a_new_branch(api, hub, tmp_path):
    expected = publish_v1(api, tmp_path)

    assert {p: d for p, d in hub.files(REPO, "v1").items() if p.startswith("build/")} == expected
    assert list(hub.files(REPO, "main")) == [".gitattributes"]  # the branch started from main, main did not move
    assert [c.title for c in hub.commits(REPO)] == ["initial commit", "Release v1", "Drop stale files"]
    assert head(api, "v1") == hub.commits(REPO)[-1].oid


def test_tree_lists_git_oids_and_sizes(api, hub, tmp_path):
    expected = publish_v1(api, tmp_path)

    entries = list(api.list_repo_tree(REPO, recursive=True, revision="v1", repo_type="kernel"))
    files = {e.path: (e.blob_id, e.size) for e in entries if isinstance(e, RepoFile) and e.path.startswith("build/")}
    assert files == {path: (blob_oid(data), len(data)) for path, data in expected.items()}
    assert {e.path for e in entries if isinstance(e, RepoFolder)} == {"build", "build/torch-cpu"}

    # What kernels' get_variants asks: the folders right under build/.
    variants = list(api.list_repo_tree(REPO, path_in_repo="build", revision="v1", repo_type="kernel"))
    assert [(type(e), e.path) for e in variants] == [(RepoFolder, "build/torch-cpu")]
    with pytest.raises(RemoteEntryNotFoundError):  # main has no build/: 404, as on the Hub
        list(api.list_repo_tree(REPO, path_in_repo="build", repo_type="kernel"))


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to compute reference tree oids")
def test_folder_oids_are_git_tree_oids(api, hub, tmp_path):
    publish_v1(api, tmp_path / "src")
    work = tmp_path / "git"
    for path, data in hub.files(REPO, "v1").items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(data)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    tree = git("write-tree")
    folders = [e for e in api.list_repo_tree(REPO, recursive=True, revision="v1", repo_type="kernel")]
    folders = {e.path: e.tree_id for e in folders if isinstance(e, RepoFolder)}
    assert folders == {path: git("rev-parse", f"{tree}:{path}") for path in folders}


def test_refs_show_branches_and_tags(api, hub, tmp_path):
    publish_v1(api, tmp_path)
    release = head(api, "v1")
    api.create_tag(REPO, tag="v1.0.0", revision="v1", repo_type="kernel")
    with pytest.raises(HfHubHTTPError) as refused:
        api.create_tag(REPO, tag="v1.0.0", revision="v1", repo_type="kernel")
    assert refused.value.response.status_code == 409
    api.create_tag(REPO, tag="v1.0.0", revision="v1", repo_type="kernel", exist_ok=True)
    api.create_commit(REPO, add("NOTES", b"later\n"), commit_message="Later", revision="v1", repo_type="kernel")

    refs = api.list_repo_refs(REPO, repo_type="kernel")
    assert {(b.name, b.ref, b.target_commit) for b in refs.branches} == {
        ("main", "refs/heads/main", hub.commits(REPO)[0].oid),
        ("v1", "refs/heads/v1", hub.commits(REPO)[-1].oid),
    }
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v1.0.0", "refs/tags/v1.0.0", release)]
    assert "NOTES" not in hub.files(REPO, "v1.0.0")  # the tag stayed on the release


def test_paths_info_and_commit_history(api, tmp_path):
    publish_v1(api, tmp_path)
    paths = ["build/torch-cpu/_ops.abi3.so", "build/torch-cpu", "build/torch-old"]
    infos = api.get_paths_info(REPO, paths, revision="v1", repo_type="kernel")
    assert [(type(i), i.path) for i in infos] == [(RepoFile, paths[0]), (RepoFolder, paths[1])]  # missing: left out
    assert infos[0].blob_id == blob_oid(BINARY)

    history = api.list_repo_commits(REPO, revision="v1", repo_type="kernel")
    assert [c.title for c in history] == ["Drop stale files", "Release v1", "initial commit"]
    assert [c.title for c in api.list_repo_commits(REPO, repo_type="kernel")] == ["initial commit"]


# ---------------------------------------------------------------- downloads


def test_downloads_return_the_exact_bytes(api, hub, tmp_path):
    expected = publish_v1(api, tmp_path / "src")
    release = head(api, "v1")
    api.create_tag(REPO, tag="v1.0.0", revision="v1", repo_type="kernel")
    download = {"repo_type": "kernel", "endpoint": hub.url, "token": TOKEN}

    for revision in ("v1", "v1.0.0", release):
        path = hf_hub_download(
            REPO, "build/torch-cpu/_ops.abi3.so", revision=revision, cache_dir=tmp_path / revision, **download
        )
        assert Path(path).read_bytes() == BINARY
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(REPO, "build/nope.py", revision="v1", cache_dir=tmp_path / "x", **download)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "build/torch-cpu/_ops.py", revision="v9", cache_dir=tmp_path / "x", **download)

    folder = Path(
        snapshot_download(
            REPO, revision="v1", allow_patterns=["build/torch-cpu/*"], cache_dir=tmp_path / "snapshot", **download
        )
    )
    assert folder.name == release
    assert {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == expected

    # Every request carried the token, and the server kept it for tests to look for.
    assert {r.headers.get("authorization") for r in hub.requests} == {f"Bearer {TOKEN}"}


def test_model_files_have_no_url_prefix(api, hub, tmp_path):
    api.create_repo(f"{ORG}/tiny")
    api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=f"{ORG}/tiny")
    path = hf_hub_download(f"{ORG}/tiny", "config.json", endpoint=hub.url, token=TOKEN, cache_dir=tmp_path)
    assert Path(path).read_bytes() == b"{}"
    assert any(r.path == f"/{ORG}/tiny/resolve/main/config.json" for r in hub.requests)


@pytest.mark.processes
def test_the_env_route_in_a_fresh_process(api, hub, tmp_path):
    """How the kernels loader meets the server: HF_ENDPOINT is read when huggingface_hub is imported."""
    expected = publish_v1(api, tmp_path / "src")
    script = textwrap.dedent(
        """
        import hashlib, json, sys
        from huggingface_hub import HfApi, hf_hub_download
        from huggingface_hub.hf_api import RepoFile

        tree = HfApi().list_repo_tree(sys.argv[1], recursive=True, revision="v1", repo_type="kernel")
        path = hf_hub_download(sys.argv[1], "build/torch-cpu/_ops.abi3.so", revision="v1", repo_type="kernel")
        files = sorted(e.path for e in tree if isinstance(e, RepoFile))
        print(json.dumps({"files": files, "path": path, "sha1": hashlib.sha1(open(path, "rb").read()).hexdigest()}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)  # breaks requests in huggingface_hub 2.4
    env |= {
        "HF_ENDPOINT": hub.url,
        "HF_HUB_CACHE": str(tmp_path / "cache"),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HOME": str(tmp_path / "home"),  # no stored token, and the agent registry cache stays here
        "HF_TOKEN": TOKEN,
    }
    first = len(hub.requests)
    result = subprocess.run(
        [sys.executable, "-c", script, REPO], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr

    out = json.loads(result.stdout.splitlines()[-1])
    assert out["files"] == sorted([".gitattributes", *expected])
    assert out["path"].startswith(str(tmp_path / "cache"))
    assert out["sha1"] == hashlib.sha1(BINARY).hexdigest()
    repo_requests = [r for r in hub.requests[first:] if REPO in r.path]
    assert {(r.method, r.path.split("?")[0].split("/v1")[0]) for r in repo_requests} == {
        ("GET", f"/api/kernels/{REPO}/tree"),
        ("HEAD", f"/kernels/{REPO}/resolve"),
        ("GET", f"/kernels/{REPO}/resolve"),
    }
    assert {r.headers.get("authorization") for r in repo_requests} == {f"Bearer {TOKEN}"}


# ---------------------------------------------------------------- writes on main, trust


def test_readme_upload_to_main_is_validated(api, hub):
    api.create_repo(REPO, repo_type="kernel")
    card = b"---\nlicense: apache-2.0\n---\n# img2gray\n"
    upload = {"path_in_repo": "README.md", "repo_id": REPO, "repo_type": "kernel"}

    info = api.upload_file(path_or_fileobj=card, commit_message="Add the kernel card", **upload)
    assert hub.files(REPO)["README.md"] == card
    assert info.oid == hub.commits(REPO)[-1].oid == head(api, "main")
    assert any(r.method == "POST" and r.path == "/api/validate-yaml" for r in hub.requests)

    # The same bytes again: preupload reports the file's oid, so the client skips the commit altogether.
    assert api.upload_file(path_or_fileobj=card, **upload).oid == info.oid
    assert len(hub.commits(REPO)) == 2

    with pytest.raises(ValueError, match="Invalid metadata"):
        api.upload_file(path_or_fileobj=b"---\nlicense: mit\n# never closed\n", **upload)
    assert len(hub.commits(REPO)) == 2


def test_a_stale_parent_commit_is_rejected(api, hub):
    api.create_repo(REPO, repo_type="kernel")
    base = head(api, "main")
    api.create_commit(REPO, add("a", b"1"), commit_message="First", repo_type="kernel", parent_commit=base)
    new_head = head(api, "main")

    with pytest.raises(HfHubHTTPError) as refused:
        api.create_commit(REPO, add("b", b"2"), commit_message="Stale", repo_type="kernel", parent_commit=base)
    assert refused.value.response.status_code == 412
    assert head(api, "main") == new_head and "b" not in hub.files(REPO)

    # Short oids name the head too.
    api.create_commit(REPO, add("b", b"2"), commit_message="Fresh", repo_type="kernel", parent_commit=new_head[:7])
    assert hub.files(REPO)["b"] == b"2"


def test_organization_overview_reports_trust(api, hub):
    assert api.get_organization_overview(ORG).trustedKernelPublisher is True
    hub.set_trusted(ORG, False)
    assert api.get_organization_overview(ORG).trustedKernelPublisher is False
    hub.set_trusted("other-org", True)
    assert api.get_organization_overview("other-org").trustedKernelPublisher is True
    with pytest.raises(HfHubHTTPError) as missing:
        api.get_organization_overview("nobody")
    assert missing.value.response.status_code == 404


def test_require_token(api, hub):
    hub.require_token = TOKEN
    api.create_repo(REPO, repo_type="kernel")
    for token in ("hf_wrong", False):  # False: send no Authorization header at all
        with pytest.raises(HfHubHTTPError) as refused:
            HfApi(endpoint=hub.url, token=token).list_repo_refs(REPO, repo_type="kernel")
        assert refused.value.response.status_code == 401


# ---------------------------------------------------------------- fault injection


def test_an_injected_500_leaves_the_repo_unchanged(api, hub):
    api.create_repo(REPO, repo_type="kernel")
    before = hub.commits(REPO)
    fault = hub.inject("POST", "/commit/", status=500)

    with pytest.raises(HfHubHTTPError) as failed:  # the client does not retry a commit
        api.create_commit(REPO, add("a", b"1"), commit_message="Release", repo_type="kernel")
    assert failed.value.response.status_code == 500
    assert hub.commits(REPO) == before and fault.hits == 1

    api.create_commit(REPO, add("a", b"1"), commit_message="Release", repo_type="kernel")  # the fault is used up
    assert [c.title for c in hub.commits(REPO)] == ["initial commit", "Release"]


def test_a_dropped_request_is_not_applied(api, hub):
    api.create_repo(REPO, repo_type="kernel")
    hub.inject("POST", "/commit/", drop=True)

    with pytest.raises(httpx2.RemoteProtocolError):
        api.create_commit(REPO, add("a", b"1"), commit_message="Release", repo_type="kernel")
    assert len(hub.commits(REPO)) == 1
    assert [r.status for r in hub.requests if "/commit/" in r.path] == [None]  # no answer was sent


def test_drop_after_apply_applies_exactly_once(api, hub):
    api.create_repo(REPO, repo_type="kernel")
    base = head(api, "main")
    hub.inject("POST", "/commit/", drop_after_apply=True)

    with pytest.raises(httpx2.RemoteProtocolError):
        api.create_commit(REPO, add("a", b"1"), commit_message="Release", repo_type="kernel", parent_commit=base)
    assert [c.title for c in hub.commits(REPO)] == ["initial commit", "Release"]
    assert hub.files(REPO)["a"] == b"1"

    # Retrying the same content makes no second commit: preupload reports the file's oid, the client sees nothing
    # changed and skips the commit call.
    retry = api.create_commit(REPO, add("a", b"1"), commit_message="Release", repo_type="kernel", parent_commit=base)
    assert retry.oid == hub.commits(REPO)[-1].oid
    # Different content on the stale parent is refused rather than committed on top.
    with pytest.raises(HfHubHTTPError) as refused:
        api.create_commit(REPO, add("a", b"2"), commit_message="Release", repo_type="kernel", parent_commit=base)
    assert refused.value.response.status_code == 412
    assert len(hub.commits(REPO)) == 2


def test_an_injected_delay(api, hub):
    api.create_repo(REPO, repo_type="kernel")
    fault = hub.inject("GET", "/refs", delay_s=0.3)

    start = time.monotonic()
    assert [b.name for b in api.list_repo_refs(REPO, repo_type="kernel").branches] == ["main"]
    assert time.monotonic() - start >= 0.3 and fault.hits == 1

    start = time.monotonic()
    api.list_repo_refs(REPO, repo_type="kernel")
    assert time.monotonic() - start < 0.3  # times=1: only the first request waited


def test_the_client_retries_a_5xx_preupload_by_itself(api, hub):
    """Unlike the commit, preupload goes through the client's http_backoff (429 and 5xx, 1 s first wait)."""
    api.create_repo(REPO, repo_type="kernel")
    fault = hub.inject("POST", "/preupload/", status=503)

    api.create_commit(REPO, add("a", b"1"), commit_message="Release", repo_type="kernel")
    assert [r.status for r in hub.requests if "/preupload/" in r.path] == [503, 200]
    assert fault.hits == 1 and len(hub.commits(REPO)) == 2


def test_persistent_faults_and_clear(api, hub):
    api.create_repo(REPO, repo_type="kernel")
    fault = hub.inject("GET", "/refs", status=404, times=None)
    for _ in range(2):
        with pytest.raises(HfHubHTTPError):
            api.list_repo_refs(REPO, repo_type="kernel")
    hub.clear_faults()
    api.list_repo_refs(REPO, repo_type="kernel")
    assert fault.hits == 2

    with pytest.raises(ValueError):
        hub.inject(status=500, drop=True)
