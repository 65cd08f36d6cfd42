"""Publishing end to end: the real CLI and huggingface_hub client against the
Hub-protocol server on loopback, then the real `kernels` loader in a fresh process."""

import json
import os
import secrets
import subprocess
import sys
import textwrap

import pytest
from conftest import KERNEL_DIR, kernel_matrix
from hubserver import HubServer

from kernel_matrix.errors import ExitCode

pytestmark = pytest.mark.build
ORG, REPO_ID, BRANCH = "kernel-matrix", "kernel-matrix/img2gray", "v1"


@pytest.fixture
def hub():
    with HubServer(trusted_orgs=[ORG]) as server:
        yield server


@pytest.fixture
def token():
    return "hf_" + secrets.token_hex(16)


@pytest.fixture
def release_dir(built, tmp_path):
    """A project with the built variants in build/ and a matrix naming exactly them."""
    import shutil

    project = tmp_path / "project"
    (project / "build").mkdir(parents=True)
    for variant in built.values():
        shutil.copytree(variant, project / "build" / variant.name)
    write_matrix(project, built.values())
    return project


def write_matrix(project, variants):
    cudas, minors = set(), set()
    for variant in variants:
        meta = json.loads((variant / "metadata.json").read_text())
        torch_tag, _, compute = variant.name.split("-")[:3]
        minors.add(f"{torch_tag[5]}.{torch_tag[6:]}")
        if meta["backend"]["type"] == "cuda":
            cudas.add(f"{compute[2:-1]}.{compute[-1]}")
    (minor,) = minors
    cpu = any(json.loads((v / "metadata.json").read_text())["backend"]["type"] == "cpu" for v in variants)
    (project / "build_matrix.yaml").write_text(
        f'torch:\n  "{minor}": {json.dumps(sorted(cudas)) if cudas else "[]"}\ncpu: {str(cpu).lower()}\n'
        "archs:\n  x86_64: {build-runner: [a], gpu-test-runner: [b]}\n"
    )


def publish(project, hub, token, *args, **env):
    environment = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": token,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_CACHE": str(project / ".hf-cache"),
        "KERNEL_MATRIX_RETRY_BASE_S": "0.01",
        **env,
    }
    environment.pop("HF_HUB_DISABLE_TELEMETRY", None)  # breaks every request with huggingface_hub 2.4
    return kernel_matrix(
        "publish",
        "--kernel-dir",
        str(KERNEL_DIR),
        "--build-dir",
        str(project / "build"),
        "--file",
        str(project / "build_matrix.yaml"),
        "--manylinux",
        "none",
        *args,
        cwd=project,
        env=environment,
    )


def release_commits(hub):
    return [c for c in hub.commits(REPO_ID) if c.title.startswith("Release ")]


def branch_variants(hub):
    return sorted({path.split("/")[1] for path in hub.files(REPO_ID, BRANCH) if path.startswith("build/")})


def test_publish_then_get_kernel_loads_the_right_variant(release_dir, hub, token, built):
    result = publish(release_dir, hub, token)
    assert result.returncode == 0, result.stderr
    assert len(release_commits(hub)) == 1
    assert branch_variants(hub) == sorted(v.name for v in built.values())
    files = hub.files(REPO_ID, BRANCH)
    for variant in built.values():
        for path in variant.rglob("*"):
            if path.is_file():
                assert files[f"build/{variant.name}/{path.relative_to(variant).as_posix()}"] == path.read_bytes()
    card = hub.files(REPO_ID, "main")["README.md"].decode()
    assert f'get_kernel("{REPO_ID}", version=1)' in card and all(v.name in card for v in built.values())
    assert card.startswith("---\nlibrary_name: kernels\n")  # the Hub lists it under `kernels`

    # The real loader, default trust check (answered by the server), in a fresh process.
    script = textwrap.dedent(f"""
        import numpy as np, torch, kernels
        img2gray = kernels.get_kernel("{REPO_ID}", version=1)
        rgb = torch.randint(0, 256, (123, 77, 3), dtype=torch.uint8)
        x = rgb.numpy().astype(np.float32)
        want = ((np.float32(0.21) * x[..., 0] + np.float32(0.72) * x[..., 1]) + np.float32(0.07) * x[..., 2])
        assert torch.equal(img2gray.img2gray(rgb), torch.from_numpy(want.astype(np.uint8)))
        print(img2gray.__file__)
    """)
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_CACHE": str(release_dir / "user-cache"),
    }
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)
    env.pop("HF_TOKEN", None)
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=release_dir)
    assert loaded.returncode == 0, loaded.stderr
    import torch

    expected = next(v.name for v in built.values() if ("-cpu-" in v.name) == (torch.version.cuda is None))
    assert f"/build/{expected}/__init__.py" in loaded.stdout


def test_publishing_again_makes_no_commit(release_dir, hub, token):
    assert publish(release_dir, hub, token).returncode == 0
    before = len(hub.commits(REPO_ID))
    again = publish(release_dir, hub, token)
    assert again.returncode == 0, again.stderr
    assert "already holds this release: no commit" in again.stderr
    assert len(hub.commits(REPO_ID)) == before


def test_a_variant_dropped_from_the_matrix_is_deleted_from_the_branch(release_dir, hub, token, built):
    if len(built) < 2:
        pytest.skip("needs two built variants")
    assert publish(release_dir, hub, token).returncode == 0
    kept = [v for v in built.values() if "-cpu-" not in v.name]
    write_matrix(release_dir, kept)
    result = publish(release_dir, hub, token)
    assert result.returncode == 0, result.stderr
    assert branch_variants(hub) == [v.name for v in kept]
    assert len(release_commits(hub)) == 2


def test_a_partial_release_keeps_the_variants_it_does_not_carry(release_dir, hub, token, built):
    """--allow-partial (or a smaller --profile): the branch keeps what it has of the matrix's other
    variants, as kernel-builder's upload leaves them. They were deleted: get_kernel(version=1)
    stopped loading for the users of a variant one run did not build."""
    import shutil

    if len(built) < 2:
        pytest.skip("needs two built variants")
    assert publish(release_dir, hub, token).returncode == 0
    unbuilt = next(v.name for v in built.values() if "-cpu-" in v.name)
    shutil.rmtree(release_dir / "build" / unbuilt)
    plan = publish(release_dir, hub, token, "--allow-partial", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "note: 1 variants of the matrix are not in this release" in plan.stderr
    assert "  deleted  build/" not in plan.stdout
    result = publish(release_dir, hub, token, "--allow-partial")
    assert result.returncode == 0, result.stderr
    assert "already holds this release: no commit" in result.stderr
    assert branch_variants(hub) == sorted(v.name for v in built.values())
    assert len(release_commits(hub)) == 1


def test_a_version_branch_name_as_tag_is_refused_before_any_request(release_dir, hub, token):
    """--tag v2 on version 1's release would take the name version 2's branch needs."""
    result = publish(release_dir, hub, token, "--tag", "v2")
    assert result.returncode == ExitCode.CONFIG, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --tag v2: v<N> is the name of version N's branch, which `get_kernel(..., version=N)` loads, "
        "and this release goes to v1: use another tag (e.g. v2.0.0)"
    )
    assert hub.requests == []


def test_variants_built_from_a_dirty_tree_are_named_before_publishing(release_dir, hub, token, built):
    """kernel-builder's upload warns of them; the `kernels` loader warns at each of their loads."""
    variant = next(iter(built.values())).name
    for other in built.values():  # one dirty, whatever the tree these were built from
        metadata_path = release_dir / "build" / other.name / "metadata.json"
        metadata = json.loads(metadata_path.read_text())
        for source in ("kernel", "kernel-builder"):
            git = metadata["provenance"].setdefault(source, {})
            git.update({"commit": git.get("commit", "0" * 40), "dirty": other.name == variant})
        metadata_path.write_text(json.dumps(metadata, indent=2) + "\n")  # the digest leaves metadata.json out
    result = publish(release_dir, hub, token, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert (
        f"warning: 1 variants were built from a git tree with uncommitted changes ({variant}): "
        "their recorded commit does not identify their sources"
    ) in result.stderr


def publish_kernel(kernel, project, hub, token, *args):
    """publish of the kernel folder `kernel` (a copy of kernel/), with project's build/ and matrix."""
    environment = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": token, "HF_HUB_DISABLE_XET": "1"}
    environment.pop("HF_HUB_DISABLE_TELEMETRY", None)
    return kernel_matrix(
        "publish",
        *("--kernel-dir", str(kernel), "--build-dir", str(project / "build")),
        *("--file", str(project / "build_matrix.yaml"), "--manylinux", "none"),
        *args,
        cwd=project,
        env=environment,
    )


# A CARD.md as kernel-builder's `init` writes one (its minijinja template, trimmed), with every value it fills.
CARD_TEMPLATE = """---
library_name: kernels
{% if license %}license: {{ license }}
{% endif %}---

Card of {{ repo_id }}, version {{ version }}.
{% if functions %}
{% for func in functions %}
- `{{ func }}`
{% endfor %}
{% endif %}
{% if layers %}layers: {{ layers | join(", ") }}
{% endif %}
{% if has_benchmark %}Run `kernels benchmark {{ repo_id }} --version {{ version }}`.
{% endif %}
{% if upstream %}Upstream: {{ upstream }}
{% endif %}
"""


def test_a_kernels_card_template_and_benchmarks_go_where_kernel_builder_uploads_them(release_dir, hub, token, tmp_path):
    """CARD.md rendered into main's README.md (fill-card's values); benchmarks/benchmark*.py on
    the version branch, where `kernels benchmark` finds them, the stale ones deleted."""
    import shutil

    kernel = tmp_path / "kernel"
    shutil.copytree(KERNEL_DIR, kernel, ignore=shutil.ignore_patterns("__pycache__"))
    (kernel / "CARD.md").write_text(CARD_TEMPLATE)
    toml = kernel / "build.toml"  # fill-card shows the URL as the loader reads it: scp-like as ssh://
    toml.write_text(
        toml.read_text().replace("[general.hub]\n", 'upstream = "git@github.com:org/img2gray.git"\n\n[general.hub]\n')
    )
    layers = kernel / "torch-ext" / "img2gray" / "layers.py"
    layers.write_text("class Img2Gray:\n    pass\n\n\nclass Other:\n    pass\n")
    init = kernel / "torch-ext" / "img2gray" / "__init__.py"
    init.write_text(init.read_text().replace('__all__ = ["img2gray"]', '__all__ = ["img2gray", "layers"]'))
    benchmarks = kernel / "benchmarks"
    shutil.rmtree(benchmarks, ignore_errors=True)
    benchmarks.mkdir()
    for name in ("benchmark.py", "benchmark_sizes.py", "helper.py"):
        (benchmarks / name).write_text(f"# {name}\n")
    result = publish_kernel(kernel, release_dir, hub, token)
    assert result.returncode == 0, result.stderr
    assert hub.files(REPO_ID, "main")["README.md"].decode() == (
        "---\nlibrary_name: kernels\nlicense: apache-2.0\n---\n\n"
        f"Card of {REPO_ID}, version 1.\n- `img2gray`\nlayers: Img2Gray, Other\n"
        f"Run `kernels benchmark {REPO_ID} --version 1`.\nUpstream: ssh://git@github.com/org/img2gray.git\n"
    )
    files = hub.files(REPO_ID, BRANCH)
    assert {p for p in files if p.startswith("benchmarks/")} == {
        "benchmarks/benchmark.py",
        "benchmarks/benchmark_sizes.py",
    }
    assert files["benchmarks/benchmark.py"] == b"# benchmark.py\n"

    (benchmarks / "benchmark_sizes.py").unlink()
    again = publish_kernel(kernel, release_dir, hub, token)
    assert again.returncode == 0, again.stderr
    assert {p for p in hub.files(REPO_ID, BRANCH) if p.startswith("benchmarks/")} == {"benchmarks/benchmark.py"}


def test_a_card_template_that_does_not_render_is_one_line_before_any_request(release_dir, hub, token, tmp_path):
    import shutil

    kernel = tmp_path / "kernel"
    shutil.copytree(KERNEL_DIR, kernel, ignore=shutil.ignore_patterns("__pycache__"))
    for template, said in [
        ("# [card]\n\n{% if license %}\nno end\n", ":4: the card template does not parse: "),
        ("{{ version / 0 }}\n", ": the card template cannot be rendered: ZeroDivisionError: "),
        ("{{ ''.__class__.__mro__ }}\n", ": the card template cannot be rendered: SecurityError: "),  # sandbox
        ('{{ "x".encode("a\\nerror: forged") }}\n', ": the card template cannot be rendered: LookupError: "),
        (None, ": a link: the card template must be a file of the kernel"),  # it would publish a host file
    ]:
        (kernel / "CARD.md").unlink(missing_ok=True)
        if template is None:
            (kernel / "CARD.md").symlink_to("/etc/hostname")
        else:
            (kernel / "CARD.md").write_text(template)
        result = publish_kernel(kernel, release_dir, hub, token)
        assert result.returncode == ExitCode.CONFIG, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"error: {kernel / 'CARD.md'}{said}"), line
    assert hub.requests == []


def test_dry_run_prints_the_plan_and_writes_nothing(release_dir, hub, token, built):
    result = publish(release_dir, hub, token, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "dry run" in result.stdout and "added" in result.stdout
    n_files = sum(1 for v in built.values() for p in v.rglob("*") if p.is_file())
    table_rows = {}  # the summary table comes first, then one line per file
    for line in result.stdout.replace("│", " ").splitlines():
        if line.strip():
            table_rows.setdefault(line.split()[0], line.split()[1:])
    assert table_rows["added"][0] == str(n_files) and table_rows["changed"][0] == "0"
    assert table_rows["deleted"][0] == "0" and table_rows["unchanged"][0] == "0"
    assert sum(line.strip().startswith("added    build/") for line in result.stdout.splitlines()) == n_files
    assert not [r for r in hub.requests if r.method not in ("GET", "HEAD")]


def test_a_5xx_on_the_commit_is_retried_into_exactly_one_commit(release_dir, hub, token):
    hub.inject("POST", "/commit/v1", status=500, times=2)
    result = publish(release_dir, hub, token)
    assert result.returncode == 0, result.stderr
    assert "retrying" in result.stderr
    assert len(release_commits(hub)) == 1


def test_a_lost_answer_after_the_commit_does_not_commit_twice(release_dir, hub, token):
    hub.inject("POST", "/commit/v1", drop_after_apply=True)
    result = publish(release_dir, hub, token)
    assert result.returncode == 0, result.stderr
    (commit,) = release_commits(hub)
    assert f"commit {commit.oid}" in result.stderr  # reported as made by this run


def drop_cpu_variant(project, built):
    """Change the release: the matrix no longer names the CPU variant."""
    if len(built) < 2:
        pytest.skip("needs two built variants")
    write_matrix(project, [v for v in built.values() if "-cpu-" not in v.name])


def test_failing_on_every_retry_leaves_the_branch_unchanged(release_dir, hub, token, built):
    assert publish(release_dir, hub, token).returncode == 0
    before, commits = hub.files(REPO_ID, BRANCH), len(hub.commits(REPO_ID))
    drop_cpu_variant(release_dir, built)
    hub.inject("POST", "/commit/v1", status=503, times=None)
    result = publish(release_dir, hub, token)
    assert result.returncode == ExitCode.NETWORK
    assert result.stderr.count("retrying") == 4
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {REPO_ID}: {hub.url} kept failing (HTTP 503)")
    assert hub.files(REPO_ID, BRANCH) == before and len(hub.commits(REPO_ID)) == commits


def test_a_tampered_variant_is_refused_before_any_request(release_dir, hub, token):
    variant = next(p for p in (release_dir / "build").iterdir() if p.name.startswith("torch"))
    (variant / "_ops.py").write_text((variant / "_ops.py").read_text() + "# tampered\n")
    result = publish(release_dir, hub, token)
    assert result.returncode == ExitCode.CONFIG
    assert "files differ from its metadata digest" in result.stderr and "_ops.py" in result.stderr
    assert hub.requests == []


def test_auth_refusal_is_one_clear_line_and_the_token_never_shows(release_dir, hub, token):
    hub.require_token = "hf_the_right_one"
    result = publish(release_dir, hub, token)
    assert result.returncode == ExitCode.PUBLISH
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {REPO_ID}: HTTP 401 from {hub.url}: set HF_TOKEN (or run `hf auth login`) with a token that can "
        "write to this repo"
    )
    assert token not in result.stdout + result.stderr


def test_the_token_is_sent_but_never_printed(release_dir, hub, token, built):
    outputs = [publish(release_dir, hub, token, "--dry-run"), publish(release_dir, hub, token)]
    hub.inject("POST", "/commit/v1", status=500)
    drop_cpu_variant(release_dir, built)
    outputs.append(publish(release_dir, hub, token, "--tag", "v1.0.0"))
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    assert hub.files(REPO_ID, "v1.0.0") == hub.files(REPO_ID, BRANCH)  # --tag tagged the release commit
    assert any(r.headers.get("authorization") == f"Bearer {token}" for r in hub.requests)
    for output in outputs:
        assert token not in output.stdout and token not in output.stderr
    for path in release_dir.rglob("*"):
        if path.is_file() and path.stat().st_size < 10_000_000:
            assert token.encode() not in path.read_bytes(), path


def test_an_incomplete_release_is_refused_unless_allowed(release_dir, hub, token):
    matrix = release_dir / "build_matrix.yaml"
    matrix.write_text(
        matrix.read_text().replace("archs:\n", "archs:\n  aarch64: {build-runner: [a], gpu-test-runner: [b]}\n")
    )
    result = publish(release_dir, hub, token)
    assert result.returncode == ExitCode.CONFIG and "are not built" in result.stderr
    assert hub.requests == []
    assert publish(release_dir, hub, token, "--allow-partial").returncode == 0


def test_lfs_files_are_compared_by_their_sha256(tmp_path):
    # The Hub stores binaries through LFS/Xet: their tree blob oid hashes the
    # pointer, so unchanged .so files must be recognised by sha256.
    from huggingface_hub.hf_api import RepoFile

    from kernel_matrix.releasing import publish as hub
    from kernel_matrix.releasing.release import release_files

    variant = tmp_path / "build" / "torch214-cxx11-cpu-x86_64-linux"
    variant.mkdir(parents=True)
    (variant / "_ops.py").write_text("ops\n")
    (variant / "lib.abi3.so").write_bytes(b"\x7fELF" + bytes(range(200)))
    files = {f.path_in_repo: f for f in release_files(tmp_path / "build", [variant.name])}
    so, ops = files[f"build/{variant.name}/lib.abi3.so"], files[f"build/{variant.name}/_ops.py"]

    class Api:
        def list_repo_refs(self, *args, **kwargs):
            return type("Refs", (), {"branches": []})()

        def list_repo_tree(self, *args, **kwargs):
            return [
                RepoFile(
                    path=so.path_in_repo,
                    size=so.size,
                    oid="0" * 40,
                    lfs={"oid": so.sha256, "size": so.size, "pointerSize": 130},
                ),
                RepoFile(path=ops.path_in_repo, size=ops.size, oid=ops.blob_oid),
            ]

    plan = hub.make_plan(Api(), "org/k", "v1", list(files.values()))
    assert not plan.has_changes and len(plan.unchanged) == 2


def test_a_hub_branch_in_build_toml_is_where_the_release_goes(release_dir, hub, token, tmp_path):
    """[general.hub] branch (kernels-community/sonic-moe's "ep-support"): kernel-builder's upload
    writes that branch, never v<version>, which users load with version=N."""
    import shutil

    kernel = tmp_path / "kernel"
    shutil.copytree(KERNEL_DIR, kernel, ignore=shutil.ignore_patterns("__pycache__"))
    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace("[general.hub]\n", '[general.hub]\nbranch = "ep-support"\n'))
    result = publish_kernel(kernel, release_dir, hub, token)
    assert result.returncode == 0, result.stderr
    assert f"{REPO_ID}@ep-support" in result.stdout + result.stderr
    card = hub.files(REPO_ID, "main")["README.md"].decode()  # loaded by the branch's name, not version=1
    assert f'get_kernel("{REPO_ID}", revision="ep-support")' in card and "branch `ep-support`" in card
    assert any(p.startswith("build/") for p in hub.files(REPO_ID, "ep-support"))
    with pytest.raises(KeyError):  # no v1 branch was made
        hub.files(REPO_ID, BRANCH)


class TreeApi:
    """The two calls make_plan makes, answered from {revision: {path: content id}}."""

    def __init__(self, trees, branches):
        self.trees, self.branches = trees, branches

    def list_repo_refs(self, *args, **kwargs):
        refs = [type("Ref", (), {"name": b, "target_commit": b})() for b in self.branches]
        return type("Refs", (), {"branches": refs})()

    def list_repo_tree(self, repo_id, path_in_repo, revision, **kwargs):
        from huggingface_hub.hf_api import RepoFile

        tree = self.trees[revision]
        return [RepoFile(path=p, size=1, oid=oid) for p, oid in tree.items() if p.startswith(f"{path_in_repo}/")]


@pytest.mark.parametrize("new_branch", [True, False])
def test_what_a_release_deletes_is_what_kernel_builders_upload_deletes(tmp_path, new_branch):
    """upload.rs: a new branch keeps nothing it inherited from main under build/ and benchmarks/
    (a kept variant's old files included: the version would load them); an existing branch loses
    the stale files of its variants, not those of variants the release does not carry, and of
    benchmarks/ only benchmark*.py."""
    from kernel_matrix.releasing import publish as hub
    from kernel_matrix.releasing.release import release_files

    variant = tmp_path / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    (variant / "_ops.py").write_text("ops\n")
    files = release_files(tmp_path / "build", ["torch-cpu"])
    tree = {
        "build/torch-cpu/old.py": "1",
        "build/torch-cuda/x.py": "2",
        "build/torch-gone/x.py": "3",
        "benchmarks/benchmark_old.py": "4",
        "benchmarks/util.py": "5",
    }
    api = TreeApi({"main": tree} if new_branch else {"v1": tree}, [] if new_branch else ["v1"])
    plan = hub.make_plan(api, "org/k", "v1", files, kept=["torch-cuda"])
    kept = set() if new_branch else {"build/torch-cuda/x.py", "benchmarks/util.py"}
    assert set(plan.deleted) == set(tree) - kept


def test_file_names_that_are_not_utf8_never_reach_a_publish(tmp_path):
    """A benchmark of such a name is passed over (upload.rs's to_str()); a variant's file is refused
    in one line before any request: huggingface_hub fails on it half-way through a commit."""
    import os

    from kernel_matrix.errors import ConfigError
    from kernel_matrix.releasing.release import benchmark_files, release_files

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "benchmark.py").write_text("b\n")
    (tmp_path / "benchmarks" / os.fsdecode(b"benchmark_\xff.py")).write_text("b\n")
    assert [f.path_in_repo for f in benchmark_files(tmp_path)] == ["benchmarks/benchmark.py"]
    variant = tmp_path / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    (variant / os.fsdecode(b"data_\xff.py")).write_text("x\n")
    with pytest.raises(ConfigError, match=r"data_\\udcff\.py': a file name that is not UTF-8 cannot go to the Hub"):
        release_files(tmp_path / "build", ["torch-cpu"])


def test_a_card_template_reads_nothing_outside_the_kernel_and_ends_within_its_limits(tmp_path, monkeypatch):
    """A linked package folder gives the card no names from where it points; a template that
    would compute for ever (or fill the memory) stops at the renderer's limits, in one line."""
    import shutil

    from kernel_matrix.config.buildtoml import load_build_toml
    from kernel_matrix.errors import ConfigError
    from kernel_matrix.releasing import card_template

    kernel = tmp_path / "kernel"
    shutil.copytree(KERNEL_DIR, kernel, ignore=shutil.ignore_patterns("__pycache__"))
    outside = tmp_path / "host" / "img2gray"
    outside.mkdir(parents=True)
    (outside / "__init__.py").write_text('__all__ = ["HOST_SECRET"]\n')
    shutil.rmtree(kernel / "torch-ext" / "img2gray")
    (kernel / "torch-ext" / "img2gray").symlink_to(outside)
    config = load_build_toml(kernel)
    (kernel / "CARD.md").write_text("{{ functions }} {{ has_benchmark }}")
    assert card_template.render_card_template(config, "org/k", kernel) == "None False"

    monkeypatch.setattr(card_template, "CPU_SECONDS", 1)
    (kernel / "CARD.md").write_text("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}")
    with pytest.raises(ConfigError) as stopped:
        card_template.render_card_template(config, "org/k", kernel)
    assert str(stopped.value) == (
        f"{kernel / 'CARD.md'}: the card template cannot be rendered: it ran past its limits (1 s of CPU time "
        "and 2 GiB of memory)"
    )
    (kernel / "CARD.md").write_text('{{ ("x" * 10**8) * 100 }}')  # 10 GB
    with pytest.raises(ConfigError, match="it ran past its limits"):
        card_template.render_card_template(config, "org/k", kernel)


def test_two_kernels_naming_one_hub_repo_are_refused_before_any_request(hub, token, tmp_path):
    """A kernel folder `evil/` of a repository of many kernels, whose build.toml names `pure`'s
    [general.hub] repo-id: published after `pure`, its release replaced pure's variants on pure's
    branch, and get_kernel("kernel-matrix/pure") loaded evil. Both are built (Python-only kernels:
    no compile); publish (of both, or of evil alone) refuses with both build.toml lines, exit 2,
    and the Hub receives no request at all."""
    from conftest import noarch_kernel

    hub_table = '\n[general.hub]\nrepo-id = "kernel-matrix/pure"\n'
    project = tmp_path / "project"
    for name in ("pure", "evil"):
        noarch_kernel(project, name, '["cpu"]', general=hub_table)
        built = kernel_matrix(
            "build", "--kernel-dir", str(project / name), "--build-dir", str(project / "build" / name), cwd=project
        )
        assert built.returncode == 0, built.stderr
        assert (project / "build" / name / "torch-cpu" / "metadata.json").is_file()
    (project / "build_matrix.yaml").write_text(
        'kernels: [pure, evil]\ntorch:\n  "2.14": all\narchs:\n  x86_64: {build-runner: [a], gpu-test-runner: [b]}\n'
    )
    environment = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": token, "HF_HUB_DISABLE_XET": "1"}
    environment.pop("HF_HUB_DISABLE_TELEMETRY", None)
    line = 'repo-id = "kernel-matrix/pure"'
    at = {name: (project / name / "build.toml").read_text().splitlines().index(line) + 1 for name in ("pure", "evil")}
    for only in ((), ("--kernel", "evil")):
        result = kernel_matrix("publish", "--allow-partial", *only, cwd=project, env=environment)
        assert result.returncode == ExitCode.CONFIG, result.stdout + result.stderr
        (error,) = result.stderr.strip().splitlines()
        assert error.startswith(
            f"error: evil/build.toml:{at['evil']}:1: [general.hub] repo-id = 'kernel-matrix/pure' "
            f"is also the repo of kernel 'pure' (pure/build.toml:{at['pure']}:1)"
        ), error
    assert hub.requests == []  # nothing created, planned or uploaded
