"""Signed variants: each variant's metadata.json signed with Sigstore, as kernels-community
signs its own, and the signature checked against who may have made it.

Signing (publish --sign, in the release workflow's publish job): keyless, with the job's
GitHub OIDC identity (Fulcio certifies it, Rekor logs the signature); the bundle is written
beside metadata.json as metadata.json.sigstore, which is what `cosign sign-blob --bundle`
writes in kernels-community's workflow and what the `kernels` loader (>= 0.18) reads.
metadata.json's digest covers every other file of the variant (the bundle aside), so the
signature covers the whole variant.

Checking (verify --signed-by): the bundle must verify against the trust root (Sigstore's
public one, or --trust-root's), the certificate must name GitHub Actions as the issuer, the
author's repository as the source, and the author's release workflow at a tag as the build
configuration; then every file must match the digest. Each way a variant can fail is a
Finding of its own: unsigned, tampered (the signature does not match metadata.json, or is not
one the trust root vouches for), foreign (a valid signature, by someone else), mismatched (a
file differs from the signed digest)."""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_matrix.building.variant_dir import digest_files
from kernel_matrix.errors import ConfigError, NetworkError, ToolchainError
from kernel_matrix.hostfiles import write_file
from kernel_matrix.layout import METADATA, SIGNATURE

if TYPE_CHECKING:
    from cryptography.x509 import Certificate
    from sigstore.verify import Verifier

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
# Fulcio's certificate extensions (https://github.com/sigstore/fulcio/blob/main/docs/oid-info.md).
_OID = "1.3.6.1.4.1.57264.1."
ISSUER_V2, SOURCE_REPOSITORY_URI, SOURCE_REPOSITORY_ID, BUILD_CONFIG_URI = (_OID + n for n in ("8", "12", "15", "18"))
# What init writes: the kernel repository's workflow (calling kernel-matrix's reusable one,
# whose publish job signs), run for a v* tag or asked to publish on the default branch.
DEFAULT_WORKFLOW = ".github/workflows/kernel-matrix.yml"
DEFAULT_REFS = ("refs/tags/v*", "refs/heads/main")


class Finding(enum.Enum):
    """What checking one variant's signature found (each printed as its value)."""

    SIGNED = "signed"
    UNSIGNED = "unsigned"
    TAMPERED = "tampered"
    FOREIGN = "foreign-signed"
    MISMATCHED = "mismatched"


@dataclass(frozen=True)
class Signer:
    """Who may sign a kernel's variants: its repository's release workflow (path in the
    repository) run for a ref matching one of `refs` (globs), as GitHub's OIDC token names
    them (the token's build configuration: the repository's own workflow, also where it
    calls kernel-matrix's reusable one)."""

    repository: str  # owner/name
    workflow: str = DEFAULT_WORKFLOW
    refs: tuple[str, ...] = DEFAULT_REFS
    # GitHub's number for the repository, which a name does not keep: a repository deleted (or
    # renamed) and another made under its name has another number (Fulcio's Source Repository
    # Identifier). None: the name alone is checked.
    repository_id: str | None = None

    @property
    def repository_uri(self) -> str:
        return f"https://github.com/{self.repository}"

    @property
    def workflow_uris(self) -> list[str]:
        """The build configurations the certificate may name (globs, for the ref)."""
        return [f"{self.repository_uri}/{self.workflow}@{ref}" for ref in self.refs]


@dataclass(frozen=True)
class Checked:
    """One variant's finding and the line that says it."""

    variant: str
    finding: Finding
    line: str


def sign_variant(variant_dir: Path, sign: Callable[[bytes], str]) -> Path:
    """Sign variant_dir's metadata.json with `sign` (its bytes in, a bundle's JSON out) and
    write the bundle beside it; its path."""
    bundle = sign((variant_dir / METADATA).read_bytes())
    write_file(variant_dir / SIGNATURE, bundle)
    return variant_dir / SIGNATURE


@contextlib.contextmanager
def keyless_signing() -> Iterator[Callable[[bytes], str]]:
    """Sigstore's keyless signing with the ambient OIDC identity (a GitHub Actions job with
    `id-token: write`): a `sign` function (bytes in, the bundle's JSON out) for every variant
    of a release, one certificate for all. ToolchainError where there is no identity;
    NetworkError where Sigstore cannot be reached or refuses (one line, nothing signed)."""
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityError, IdentityToken, detect_credential
    from sigstore.sign import SigningContext

    try:
        credential = detect_credential()
    except IdentityError as exc:
        raise ToolchainError(f"publish --sign: no OIDC identity to sign with: {exc}") from None
    if credential is None:
        raise ToolchainError(
            "publish --sign: no OIDC identity to sign with (a GitHub Actions job with `permissions: id-token: "
            "write` has one; elsewhere publish without --sign)"
        )
    try:
        context = SigningContext.from_trust_config(ClientTrustConfig.production())
        session = context.signer(IdentityToken(credential), cache=True)
        signer = session.__enter__()
    except Exception as exc:  # noqa: BLE001 - sigstore's and its HTTP client's own kinds
        raise NetworkError(f"publish --sign: cannot start signing: {_one_line(exc)}") from None

    def sign(data: bytes) -> str:
        try:
            return signer.sign_artifact(data).to_json()
        except Exception as exc:  # noqa: BLE001 - Fulcio's, Rekor's, the network's
            raise NetworkError(f"publish --sign: signing failed: {_one_line(exc)}") from None

    try:
        yield sign
    finally:
        session.__exit__(None, None, None)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


@functools.cache
def verifier(trust_root: Path | None) -> Verifier:
    """Sigstore's verifier for trust_root (a trusted_root.json: a private Sigstore's, or a
    test's), else for Sigstore's public instance (fetched and checked through TUF); made
    once per process (a build's cells share it)."""
    from sigstore.models import TrustedRoot
    from sigstore.verify import Verifier

    if trust_root is None:
        try:
            return Verifier.production()
        except Exception as exc:  # noqa: BLE001 - sigstore's TUF client raises its own kinds (TUFError)
            raise NetworkError(f"Sigstore's trust root cannot be fetched: {_one_line(exc)}") from None
    try:
        return Verifier(trusted_root=TrustedRoot.from_file(str(trust_root)))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--trust-root {trust_root}: not a Sigstore trusted root: {_one_line(exc)}") from None


def check_variant(
    variant_dir: Path, signer: Signer, verify_with: Verifier, *, kernel: str | None = None, version: int | None = None
) -> Checked:
    """The Finding for variant_dir: its bundle against metadata.json and the trust root,
    the certificate against signer, every file against metadata.json's digest (bytecode,
    which the digest leaves out, is refused), and metadata.json's kernel name and version
    against `kernel` and `version` where given (a signed variant copied to another kernel's
    repo or another version's branch is still signed)."""
    from sigstore.errors import VerificationError
    from sigstore.models import Bundle, InvalidBundle

    name = variant_dir.name
    bundle_path = variant_dir / SIGNATURE
    if not bundle_path.is_file():
        return Checked(name, Finding.UNSIGNED, f"{name}: unsigned (no {SIGNATURE})")
    metadata = (variant_dir / METADATA).read_bytes()
    try:
        bundle = Bundle.from_json(bundle_path.read_bytes())
        # The signature, the certificate chain and the log entry first; who signed after.
        verify_with.verify_artifact(metadata, bundle, _AnyIdentity())
    except (InvalidBundle, VerificationError, ValueError) as exc:
        why = " ".join(str(exc).split())[:200]
        return Checked(name, Finding.TAMPERED, f"{name}: tampered: the signature does not verify {METADATA}: {why}")
    mismatch = _identity_mismatch(bundle.signing_certificate, signer)
    if mismatch:
        return Checked(name, Finding.FOREIGN, f"{name}: foreign-signed: {mismatch}")
    differs = _digest_mismatch(variant_dir, metadata) or _misplaced(metadata, kernel, version)
    if differs:
        return Checked(name, Finding.MISMATCHED, f"{name}: mismatched: {differs}")
    config = _extension(bundle.signing_certificate, BUILD_CONFIG_URI)
    return Checked(name, Finding.SIGNED, f"{name}: signed by {config}, every file as signed")


class _AnyIdentity:
    """A sigstore verification policy that takes any certificate: who signed is checked
    after (_identity_mismatch), so that a foreign signature is told from a broken one.
    (sigstore's own UnsafeNoOp does the same, and warns on every use.)"""

    def verify(self, cert: Certificate) -> None:
        return None


def _misplaced(metadata: bytes, kernel: str | None, version: int | None) -> str | None:
    """Why metadata.json is not the named kernel's at the named version (None: it is)."""
    recorded = json.loads(metadata)
    if kernel is not None and recorded.get("name") != kernel:
        return f"{METADATA} names the kernel {str(recorded.get('name'))[:60]!r}, not {kernel!r}"
    if version is not None and recorded.get("version") != version:
        return f"{METADATA} has version {str(recorded.get('version'))[:20]}, not {version} (its branch's)"
    return None


def _glob(pattern: str) -> re.Pattern[str]:
    """A ref glob as GitHub's branch and tag rules read it: `*` matches within one path
    segment (never `/`, nor the `@` before a ref), everything else literally."""
    return re.compile("".join("[^/@]*" if part == "*" else re.escape(part) for part in re.split(r"(\*)", pattern)))


def _identity_mismatch(certificate: Certificate, signer: Signer) -> str | None:
    """Why the certificate is not signer's (None where it is)."""
    issuer = _extension(certificate, ISSUER_V2)
    if issuer != GITHUB_ISSUER:
        return f"issued for {issuer or 'an unknown issuer'}, not GitHub Actions ({GITHUB_ISSUER})"
    source = _extension(certificate, SOURCE_REPOSITORY_URI)
    if source != signer.repository_uri:
        return f"signed from {source}, not {signer.repository_uri}"
    if (
        signer.repository_id is not None
        and (number := _extension(certificate, SOURCE_REPOSITORY_ID)) != signer.repository_id
    ):
        return (
            f"signed from repository number {number or '(none given)'}, not {signer.repository_id}: another "
            f"repository that had the name {signer.repository}"
        )
    config = _extension(certificate, BUILD_CONFIG_URI) or ""
    if not any(_glob(uri).fullmatch(config) for uri in signer.workflow_uris):
        return f"signed by the workflow {config}, not {' or '.join(signer.workflow_uris)}"
    return None


def _extension(certificate: Certificate, oid: str) -> str | None:
    """A Fulcio v2 extension's value (a DER UTF8String), None where absent or malformed."""
    from cryptography.x509 import ExtensionNotFound, ObjectIdentifier

    try:
        raw: bytes = certificate.extensions.get_extension_for_oid(ObjectIdentifier(oid)).value.value  # type: ignore[attr-defined]
    except ExtensionNotFound:
        return None
    if len(raw) < 2 or raw[0] != 0x0C:  # UTF8String
        return None
    length, start = raw[1], 2
    if length & 0x80:  # long form: the next (length & 0x7f) bytes are the length
        size = length & 0x7F
        if not 1 <= size <= 4:  # 0x80 is BER's indefinite length, never DER's
            return None
        length, start = int.from_bytes(raw[2 : 2 + size], "big"), 2 + size
    if start + length != len(raw):  # the value and nothing after it
        return None
    return raw[start:].decode(errors="replace")


def _digest_mismatch(variant_dir: Path, metadata: bytes) -> str | None:
    """The first file that differs from metadata.json's digest (and how many more), None
    where every file matches."""
    try:
        recorded: Any = json.loads(metadata)["digest"]
        algorithm, files = recorded["algorithm"], recorded["files"]
    except (ValueError, KeyError, TypeError):
        return f"{METADATA} has no digest of the variant's files"
    if algorithm != "sha256" or not isinstance(files, dict):
        return f"{METADATA}'s digest is {str(algorithm)[:20]}, not sha256 of each file"
    actual = digest_files(variant_dir)
    # Bytecode the digest (as the loader's) leaves out would still be imported before the
    # source it claims to be: a signed variant carries none.
    bytecode = sorted(
        path.relative_to(variant_dir).as_posix()
        for path in variant_dir.rglob("*")
        if path.is_file() and (path.suffix == ".pyc" or "__pycache__" in path.relative_to(variant_dir).parts)
    )
    differing = sorted(
        [f"{path} was added (bytecode, which the digest leaves out)" for path in bytecode]
        + [f"{path} differs" for path in actual.keys() & files.keys() if actual[path] != files[path]]
        + [f"{path} was added" for path in actual.keys() - files.keys()]
        + [f"{path} is missing" for path in files.keys() - actual.keys()]
    )
    if not differing:
        return None
    more = f" (and {len(differing) - 1} more)" if len(differing) > 1 else ""
    return differing[0] + more
