"""Issue 38: the Hub as a verified binary cache. A variant records the hash of its build
inputs (provenance.inputs); `build --reuse-published --signed-by OWNER/REPO` takes the
variant published on the kernel's release branch where it was built from the same inputs
and verifies (signature and digest), and compiles otherwise, saying why.

With the loopback Hub and the local trust root (sigstore_local.py): publish signed, build
again with reuse (nothing compiled, byte-identical, the suite passes on it); change a
source (that build compiles); tamper a published file (the build compiles, naming it).
Native: img2gray's CPU variant, compiled by the host's g++."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import kernel_matrix
from sigstore_local import KERNEL_MATRIX_WORKFLOW, GitHubIdentity, LocalSigstore
from test_signatures import published

from kernel_matrix.layout import METADATA, SIGNATURE
from kernel_matrix.releasing import signatures

pytestmark = pytest.mark.build

AUTHOR = "octo-org/img2gray"
REPO_ID = "kernel-matrix/img2gray"
RELEASE = GitHubIdentity(repository=AUTHOR, ref="refs/tags/v1.0.0", signer_workflow=KERNEL_MATRIX_WORKFLOW)


def files(variant: Path) -> dict[str, bytes]:
    return {p.relative_to(variant).as_posix(): p.read_bytes() for p in sorted(variant.rglob("*")) if p.is_file()}


def stats(build: Path, variant: str) -> dict:
    return json.loads((build / "logs" / f"{variant}.build.json").read_text())


def test_a_published_variant_built_from_the_same_inputs_is_reused_and_anything_else_is_built(kernel_copy, tmp_path):
    local_sigstore = LocalSigstore()
    trust_root = local_sigstore.write_trusted_root(tmp_path / "trusted_root.json")
    native = ["--kernel-dir", str(kernel_copy), "--backend", "cpu", "--no-cache"]
    cold = tmp_path / "cold"
    kernel_matrix("build", *native, "--build-dir", str(cold), check=True)
    (variant,) = [p for p in cold.iterdir() if (p / METADATA).is_file()]
    assert len(json.loads((variant / METADATA).read_text())["provenance"]["inputs"]) == 64
    signatures.sign_variant(variant, local_sigstore.signer(RELEASE))
    reuse = ["--reuse-published", "--signed-by", AUTHOR, "--trust-root", str(trust_root)]
    with published(kernel_copy, cold, REPO_ID, tmp_path / "hf-cache") as (env, hub):
        # The same inputs: the published variant, verified, byte for byte; its suite passes on it.
        again = tmp_path / "again"
        reused = kernel_matrix("build", *native, *reuse, "--build-dir", str(again), env=env)
        assert reused.returncode == 0, reused.stdout + reused.stderr
        said = f"{variant.name}: reused from {REPO_ID}@v1 (signed, built from the same inputs): nothing compiled"
        assert said in reused.stderr
        assert stats(again, variant.name)["compiled"] == 0
        assert files(again / variant.name) == files(variant) and SIGNATURE in files(variant)
        tested = kernel_matrix("test", "--kernel-dir", str(kernel_copy), "--build-dir", str(again), "--backend", "cpu")
        assert tested.returncode == 0, tested.stdout[-2000:] + tested.stderr

        # Signed for a v* tag, which a caller naming only its default branch's ref does not take.
        other_ref = tmp_path / "other-ref"
        only_trunk = ["--signer-ref", "refs/heads/trunk", "--build-dir", str(other_ref)]
        built = kernel_matrix("build", *native, *reuse, *only_trunk, env=env)
        assert built.returncode == 0, built.stderr
        assert f"{variant.name}: built: {REPO_ID}@v1: foreign-signed" in built.stderr
        assert stats(other_ref, variant.name)["compiled"] > 0

        # A changed source: other inputs, so it compiles; of the published variant only its
        # metadata.json (where the inputs are recorded) was downloaded.
        source = kernel_copy / "csrc" / "img2gray_cpu.cpp"
        original = source.read_text()
        source.write_text(original + "\n// changed\n")
        changed = tmp_path / "changed"
        asked_before = len(hub.requests)
        built = kernel_matrix("build", *native, *reuse, "--build-dir", str(changed), env=env)
        assert built.returncode == 0, built.stderr
        assert f"{variant.name}: built: {REPO_ID}@v1 holds it built from other inputs" in built.stderr
        asked = hub.requests[asked_before:]
        read = {unquote(r.path) for r in asked if r.method in ("GET", "HEAD") and "/resolve/" in r.path}
        assert read and all(path.endswith(f"build/{variant.name}/{METADATA}") for path in read), read
        assert stats(changed, variant.name)["compiled"] > 0
        source.write_text(original)

        # A published file changed after signing: not reused, and the line names it.
        (library,) = [name for name in files(variant) if name.endswith(".so")]
        tamper = textwrap.dedent(f"""
            from huggingface_hub import HfApi
            HfApi().upload_file(path_or_fileobj=b"not the library", path_in_repo="build/{variant.name}/{library}",
                repo_id={REPO_ID!r}, repo_type="kernel", revision="v1", commit_message="tamper")
        """)
        subprocess.run([sys.executable, "-c", tamper], check=True, env=env)
        tampered = tmp_path / "tampered"
        rebuilt = kernel_matrix("build", *native, *reuse, "--build-dir", str(tampered), env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"{variant.name}: built: {REPO_ID}@v1: mismatched: {library} differs" in rebuilt.stderr
    assert stats(tampered, variant.name)["compiled"] > 0
    assert files(tampered / variant.name)[library] == files(variant)[library]  # what it compiled, not the Hub's


@pytest.mark.engine
def test_a_container_cell_takes_the_published_variant_its_host_verified(
    engine, kernel_copy, local_cuda_cell, object_cache, tmp_path
):
    """A cell built in its builder image: the host fetches and verifies the published variant
    (the container has no network), the build inside compares its inputs and takes it."""
    local_sigstore = LocalSigstore()
    trust_root = local_sigstore.write_trusted_root(tmp_path / "trusted_root.json")
    cell = ["--variant", local_cuda_cell.name, "--image", "offline", "--kernel-dir", str(kernel_copy)]
    first = tmp_path / "first"
    kernel_matrix("build", *cell, "--build-dir", str(first), "--cache-dir", str(object_cache), check=True)
    variant = first / local_cuda_cell.name
    signatures.sign_variant(variant, local_sigstore.signer(RELEASE))
    with published(kernel_copy, first, REPO_ID, tmp_path / "hf-cache") as (env, _):
        again = tmp_path / "again"
        reuse = ["--reuse-published", "--signed-by", AUTHOR, "--trust-root", str(trust_root)]
        result = kernel_matrix("build", *cell, *reuse, "--build-dir", str(again), "--no-cache", env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"{local_cuda_cell.name}: reused from {REPO_ID}@v1: nothing compiled" in result.stderr
    assert stats(again, local_cuda_cell.name) == {**stats(again, local_cuda_cell.name), "compiled": 0, "reused": True}
    assert files(again / local_cuda_cell.name) == files(variant)


def test_reuse_needs_a_signer(tmp_path):
    result = kernel_matrix("build", "--reuse-published", "--build-dir", str(tmp_path / "b"))
    assert result.returncode == 2 and "--reuse-published: give --signed-by OWNER/NAME" in result.stderr
    assert not (tmp_path / "b").exists()


def test_the_inputs_hash_is_the_same_for_the_same_build_anywhere_and_differs_with_a_source(kernel_copy):
    from kernel_matrix.building.inputs import build_inputs
    from kernel_matrix.building.native_build import plan_build, recorded_toolchain

    def inputs(kernel: Path) -> str:
        plan = plan_build(kernel, backend="cpu")
        return build_inputs(plan, recorded_toolchain(plan))

    first = inputs(kernel_copy)
    elsewhere = kernel_copy.parent / "elsewhere"
    shutil.copytree(kernel_copy, elsewhere)
    assert inputs(elsewhere) == first  # where it is built is no input
    source = elsewhere / "csrc" / "img2gray_cpu.cpp"
    source.write_text(source.read_text() + "\n")
    assert inputs(elsewhere) != first
