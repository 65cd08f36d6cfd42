"""Issue 38: signed variants. A variant's metadata.json is signed (its digest covers every
other file) and the bundle lies beside it as metadata.json.sigstore, as kernels-community
publishes; `verify --signed-by` checks it against the author's release workflow.

Signing cannot reach Sigstore from here: sigstore_local.py is a local trust root (a CA
issuing GitHub-OIDC-shaped certificates, a CT log key, a transparency log) whose bundles the
real sigstore Verifier and the real `kernels` loader check. Each way a variant can fail is
caught: unsigned, tampered, foreign-signed (another repository, workflow or ref), mismatched
(a file changed after signing)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import kernel_matrix
from hubserver import HubServer
from sigstore_local import KERNEL_MATRIX_WORKFLOW, GitHubIdentity, LocalSigstore
from test_reproducible import hub_env
from test_suite_environment import python_only_kernel

from kernel_matrix.errors import ExitCode
from kernel_matrix.layout import METADATA, SIGNATURE
from kernel_matrix.releasing import signatures
from kernel_matrix.releasing.signatures import Finding, Signer

AUTHOR = "octo-org/pure-kernel"
# The author's release workflow (what init writes) calling kernel-matrix's reusable release
# workflow, whose publish job signs: GitHub's token names the caller as the build configuration.
RELEASE = GitHubIdentity(
    repository=AUTHOR,
    ref="refs/tags/v1.0.0",
    signer_workflow=KERNEL_MATRIX_WORKFLOW,
)


@contextlib.contextmanager
def published(kernel: Path, build: Path, repo_id: str, cache: Path) -> Iterator[tuple[dict[str, str], HubServer]]:
    """The loopback Hub, repo_id made on it and build's variants published there by
    `kernel-matrix publish` (--allow-partial: the variants built, not the whole matrix);
    the environment its clients use, and the server (what it was asked)."""
    with HubServer(trusted_orgs=[repo_id.split("/")[0]]) as server:
        env = hub_env(server, cache)
        create = f"from huggingface_hub import HfApi; HfApi().create_repo({repo_id!r}, repo_type='kernel')"
        subprocess.run([sys.executable, "-c", create], check=True, env=env)
        publish = ["publish", "--kernel-dir", str(kernel), "--build-dir", str(build), "--allow-partial"]
        kernel_matrix(*publish, check=True, env=env)
        yield env, server


@pytest.fixture(scope="module")
def local_sigstore() -> LocalSigstore:
    return LocalSigstore()


@pytest.fixture(scope="module")
def trust_root(local_sigstore, tmp_path_factory) -> Path:
    return local_sigstore.write_trusted_root(tmp_path_factory.mktemp("sigstore") / "trusted_root.json")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """A Python-only kernel (its tests aside) and its variant, built by `kernel-matrix build`."""
    root = tmp_path_factory.mktemp("signed")
    kernel = python_only_kernel(root, "pure", {})
    build = root / "build"
    kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(build), "--backend", "cpu", check=True)
    (variant,) = [p for p in build.iterdir() if (p / METADATA).is_file()]
    return kernel, variant


@pytest.fixture
def variant(built, tmp_path) -> Path:
    """A copy of the built variant, to sign and break."""
    copy = tmp_path / built[1].name
    shutil.copytree(built[1], copy)
    return copy


def sign(variant: Path, local_sigstore: LocalSigstore, who: GitHubIdentity = RELEASE) -> None:
    signatures.sign_variant(variant, local_sigstore.signer(who))


AUTHORS_RELEASE = Signer(AUTHOR)


def check(variant: Path, trust_root: Path) -> signatures.Checked:
    return signatures.check_variant(variant, AUTHORS_RELEASE, signatures.verifier(trust_root))


def test_a_variant_signed_by_the_authors_release_workflow_verifies(variant, local_sigstore, trust_root):
    sign(variant, local_sigstore)
    checked = check(variant, trust_root)
    assert checked.finding is Finding.SIGNED, checked.line
    assert checked.line == (
        f"{variant.name}: signed by https://github.com/{AUTHOR}/.github/workflows/kernel-matrix.yml@refs/tags/v1.0.0, "
        "every file as signed"
    )
    # The bundle is outside the digest, as the loader leaves it out: the variant's files are unchanged.
    assert SIGNATURE not in json.loads((variant / METADATA).read_text())["digest"]["files"]


@pytest.mark.parametrize(
    ("who", "said"),
    [
        (
            GitHubIdentity(repository="mallory/pure-kernel", ref="refs/tags/v1.0.0"),
            "signed from https://github.com/mallory/",
        ),
        (
            GitHubIdentity(repository=AUTHOR, workflow=".github/workflows/ci.yml"),
            "signed by the workflow https://github",
        ),
        (GitHubIdentity(repository=AUTHOR, ref="refs/heads/dev"), "kernel-matrix.yml@refs/heads/dev, not"),
        (GitHubIdentity(repository=AUTHOR, ref="refs/tags/v1", issuer="https://accounts.example"), "issued for"),
        # refs/tags/v* as GitHub's tag rules read it: `*` within one segment.
        (GitHubIdentity(repository=AUTHOR, ref="refs/tags/v1/x"), "kernel-matrix.yml@refs/tags/v1/x, not"),
    ],
    ids=["another-repository", "another-workflow", "a-branch-not-a-tag", "another-issuer", "a-glob-across-slash"],
)
def test_a_signature_by_anyone_else_is_foreign(variant, local_sigstore, trust_root, who, said):
    sign(variant, local_sigstore, who)
    checked = check(variant, trust_root)
    assert checked.finding is Finding.FOREIGN and said in checked.line, checked.line


def test_a_repository_made_anew_under_the_authors_name_is_foreign_where_its_number_is_given(
    variant, local_sigstore, trust_root
):
    """A name can be taken again (the repository deleted or renamed, another made under it); GitHub's
    number for the repository cannot, and Fulcio certifies it (its Source Repository Identifier)."""
    sign(variant, local_sigstore, dataclasses.replace(RELEASE, repository_id="999999"))
    by_name = check(variant, trust_root)
    assert by_name.finding is Finding.SIGNED, by_name.line  # the name alone cannot tell
    numbered = dataclasses.replace(AUTHORS_RELEASE, repository_id=RELEASE.repository_id)
    by_number = signatures.check_variant(variant, numbered, signatures.verifier(trust_root))
    assert by_number.finding is Finding.FOREIGN, by_number.line
    assert f"signed from repository number 999999, not {RELEASE.repository_id}: another repository" in by_number.line
    sign(variant, local_sigstore)  # the author's own repository, its number as given
    again = signatures.check_variant(variant, numbered, signatures.verifier(trust_root))
    assert again.finding is Finding.SIGNED, again.line


def test_a_changed_byte_of_any_file_is_caught(variant, local_sigstore, trust_root):
    sign(variant, local_sigstore)
    package = variant / "__init__.py"
    package.write_bytes(package.read_bytes() + b"\n")
    checked = check(variant, trust_root)
    assert (checked.finding, checked.line) == (Finding.MISMATCHED, f"{variant.name}: mismatched: __init__.py differs")
    (variant / "extra.py").write_text("")
    assert check(variant, trust_root).line == f"{variant.name}: mismatched: __init__.py differs (and 1 more)"


def test_bytecode_the_digest_leaves_out_is_refused(variant, local_sigstore, trust_root):
    """The loader's digest skips __pycache__ and .pyc; Python would import a planted one first."""
    sign(variant, local_sigstore)
    (variant / "__pycache__").mkdir()
    (variant / "__pycache__" / "__init__.cpython-312.pyc").write_bytes(b"planted")
    checked = check(variant, trust_root)
    assert checked.finding is Finding.MISMATCHED, checked.line
    assert "__pycache__/__init__.cpython-312.pyc was added (bytecode" in checked.line


def test_a_signed_variant_of_another_kernel_or_version_is_mismatched(variant, local_sigstore, trust_root):
    sign(variant, local_sigstore)
    verifier = signatures.verifier(trust_root)
    ok = signatures.check_variant(variant, AUTHORS_RELEASE, verifier, kernel="pure", version=1)
    assert ok.finding is Finding.SIGNED, ok.line
    other = signatures.check_variant(variant, AUTHORS_RELEASE, verifier, kernel="other", version=1)
    assert other.line.endswith("mismatched: metadata.json names the kernel 'pure', not 'other'")
    later = signatures.check_variant(variant, AUTHORS_RELEASE, verifier, kernel="pure", version=2)
    assert later.line.endswith("mismatched: metadata.json has version 1, not 2 (its branch's)")


def test_a_changed_metadata_json_breaks_the_signature(variant, local_sigstore, trust_root):
    sign(variant, local_sigstore)
    metadata = variant / METADATA
    metadata.write_text(metadata.read_text().replace('"MIT"', '"GPL-3.0"'))
    checked = check(variant, trust_root)
    assert checked.finding is Finding.TAMPERED, checked.line
    assert checked.line.startswith(f"{variant.name}: tampered: the signature does not verify metadata.json")


def test_a_signature_the_trust_root_does_not_vouch_for_is_tampered(variant, trust_root):
    sign(variant, LocalSigstore())  # another CA and log: anyone can make one
    assert check(variant, trust_root).finding is Finding.TAMPERED


def test_a_missing_bundle_is_unsigned(variant, trust_root):
    checked = check(variant, trust_root)
    assert (checked.finding, checked.line) == (Finding.UNSIGNED, f"{variant.name}: unsigned (no {SIGNATURE})")


def test_the_loader_verifies_the_signature_and_digest_with_a_policy_naming_the_author(
    variant, local_sigstore, trust_root, monkeypatch, tmp_path
):
    """What `kernels` (>= 0.18) runs on a Hub variant: its own verify_signature and
    verify_digest, with the policy an author's users give it (the author's repository and
    release workflow). The loader takes Sigstore's public trust root only: its Verifier is
    pointed at the local one (the one seam, a module attribute read at each call)."""
    from kernels._rust import KernelLocation, Metadata, Oid
    from sigstore.models import TrustedRoot

    from kernel_matrix.loader import internal

    verify, digest = internal("verify"), internal("digest")
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "receipts"))  # no receipt of an earlier success
    root = TrustedRoot.from_file(str(trust_root))

    class LocalVerifier(verify.Verifier):
        @classmethod
        def production(cls, *, offline: bool = False):
            return cls(trusted_root=root)

    monkeypatch.setattr(verify, "Verifier", LocalVerifier)
    authors = verify.GitHubWorkflowPolicy(repo_id=AUTHOR, signer_uris=[RELEASE.signer_uri])
    location = KernelLocation.remote(AUTHOR, Oid.from_str("a" * 40), variant.name)
    sign(variant, local_sigstore)
    result = verify.verify_signature(variant, location=location, policy=authors, cache=False)
    assert isinstance(result, verify.SignatureVerificationResult.Success), result
    metadata = Metadata.read_from_file(variant / METADATA)
    assert isinstance(
        digest.verify_digest(variant, metadata=metadata, location=None, cache=False),
        digest.DigestVerificationResult.Success,
    )
    # Another repository's policy (kernels-community's default) refuses it.
    refused = verify.verify_signature(variant, location=location, cache=False)
    assert isinstance(refused, verify.SignatureVerificationResult.SignatureVerificationFailure)
    # A changed file: the signature still holds, the loader's digest check does not.
    (variant / "__init__.py").write_text("def double(x):\n    return x * 3\n")
    assert isinstance(
        digest.verify_digest(variant, metadata=metadata, location=None, cache=False),
        digest.DigestVerificationResult.DigestVerificationFailure,
    )


def test_verify_signed_by_checks_local_variants_one_line_each(built, variant, local_sigstore, trust_root, tmp_path):
    kernel, _ = built
    sign(variant, local_sigstore)
    unsigned = tmp_path / "unsigned" / variant.name
    unsigned.parent.mkdir()
    shutil.copytree(variant, unsigned)
    (unsigned / SIGNATURE).unlink()
    options = ["--kernel-dir", str(kernel), "--signed-by", AUTHOR, "--trust-root", str(trust_root)]
    good = kernel_matrix("verify", str(variant), *options, "--signatures-only")
    assert good.returncode == 0, good.stderr
    assert f"{variant.name}: signed by https://github.com/{AUTHOR}/" in good.stdout
    bad = kernel_matrix("verify", str(variant), str(unsigned), *options, "--signatures-only")
    assert bad.returncode == ExitCode.UNTRUSTED, bad.stderr
    assert [line for line in bad.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {variant.name}: unsigned (no {SIGNATURE})"
    ]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--signatures-only"], "--signatures-only: give --signed-by OWNER/NAME"),
        (["--signed-by", "a/.."], "--signed-by 'a/..': expected OWNER/NAME"),
        (["--signed-by", "a/b", "--signer-repository-id", "12a"], "'12a': not a repository number"),
        (["--signer-repository-id", "12"], "--signer-repository-id: give --signed-by OWNER/NAME too"),
    ],
)
def test_bad_signature_options_are_one_line(built, options, said):
    kernel, variant = built
    result = kernel_matrix("verify", str(variant), "--kernel-dir", str(kernel), *options)
    assert result.returncode == ExitCode.CONFIG and result.stderr.count("\n") == 1, result.stderr
    assert said in result.stderr


def test_publish_sign_without_an_oidc_identity_is_one_line_and_publishes_nothing(built, tmp_path):
    kernel, variant = built
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTIONS_", "GITHUB_"))}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing answers: publishing would fail otherwise
    options = ["--kernel-dir", str(kernel), "--build-dir", str(variant.parent), "--allow-partial"]
    result = kernel_matrix("publish", "--sign", *options, env=env)
    assert result.returncode == ExitCode.TOOLCHAIN and result.stderr.count("\n") == 1, result.stderr
    assert "publish --sign: no OIDC identity to sign with" in result.stderr
    assert not (variant / SIGNATURE).exists()


def test_a_signed_release_on_the_hub_verifies_and_a_tampered_file_is_named(built, local_sigstore, trust_root, tmp_path):
    """Publish signed variants to the local Hub; `verify --repo-id --signed-by` (what the nightly
    check runs) finds them signed; a file changed on the Hub afterwards is named."""
    kernel, built_variant = built
    build = tmp_path / "build"
    variant = build / built_variant.name
    shutil.copytree(built_variant, variant)
    sign(variant, local_sigstore)
    repo_id = "kernel-matrix/pure"
    with published(kernel, build, repo_id, tmp_path / "hf-cache") as (env, _):  # its CPU variant only
        verify = ["verify", "--repo-id", repo_id, "--kernel-dir", str(kernel), "--signed-by", AUTHOR]
        verify += ["--trust-root", str(trust_root), "--signatures-only"]
        good = kernel_matrix(*verify, env=env)
        assert good.returncode == 0, good.stderr
        assert f"{variant.name}: signed by" in good.stdout
        # The daily check: every version branch of the kernel's repo (build.toml's repo-id).
        daily = ["verify", "--published", "--kernel-dir", str(kernel), "--signed-by", AUTHOR]
        daily += ["--trust-root", str(trust_root)]
        checked = kernel_matrix(*daily, env=env)
        assert checked.returncode == 0, checked.stderr
        assert f"{repo_id}@v1: {variant.name}: signed by https://github.com/{AUTHOR}/" in checked.stdout
        # A repository with nothing published yet: a note, nothing to fail.
        empty = kernel_matrix(*daily, "--repo-id", "kernel-matrix/unpublished", env=env)
        assert empty.returncode == 0 and "nothing published to check" in empty.stderr, empty.stderr
        tamper = textwrap.dedent(f"""
            from huggingface_hub import HfApi
            HfApi().upload_file(path_or_fileobj=b"def double(x):\\n    return x * 3\\n",
                path_in_repo="build/{variant.name}/__init__.py", repo_id={repo_id!r}, repo_type="kernel",
                revision="v1", commit_message="tamper")
        """)
        subprocess.run([sys.executable, "-c", tamper], check=True, env=env)
        bad = kernel_matrix(*verify, env=env)
        daily_bad = kernel_matrix(*daily, env=env)
    assert bad.returncode == ExitCode.UNTRUSTED, bad.stderr
    assert f"error: {variant.name}: mismatched: __init__.py differs" in bad.stderr
    assert daily_bad.returncode == ExitCode.UNTRUSTED, daily_bad.stderr
    assert f"error: {repo_id}@v1: {variant.name}: mismatched: __init__.py differs" in daily_bad.stderr
