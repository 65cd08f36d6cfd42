"""A local Sigstore for tests (signing cannot reach Sigstore from here): a certificate
authority issuing certificates shaped like Fulcio's for a GitHub Actions OIDC token, a
certificate-transparency log key (the SCT every certificate must embed) and a transparency
log (Rekor's: an in-memory RFC 6962 Merkle log, each entry with its signed timestamp,
inclusion proof and signed checkpoint). Its bundles are the format `cosign sign-blob
--bundle` writes; the real sigstore Verifier, given trusted_root(), accepts them. Nothing
here talks to a network.

What is not modelled: the OIDC token exchange with Fulcio and Rekor's HTTP API (keyless
signing against the public instance happens only on GitHub)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from sigstore._internal.rekor import _hashedrekord_from_parts
from sigstore._utils import sha256_digest
from sigstore.models import Bundle, TransparencyLogEntry
from sigstore_models.rekor.v1 import TransparencyLogEntry as RekorEntry

from kernel_matrix.releasing.signatures import GITHUB_ISSUER

SCT_LIST_OID = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
# The workflow whose publish job signs: kernel-matrix's reusable one, at the commit a caller pins.
KERNEL_MATRIX_WORKFLOW = "kernel-matrix/kernel-matrix/.github/workflows/reusable-build.yml@" + "c" * 40


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_id(key: ec.EllipticCurvePublicKey) -> bytes:
    return hashlib.sha256(_spki(key)).digest()


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _utf8(text: str) -> bytes:
    raw = text.encode()
    return b"\x0c" + _der_length(len(raw)) + raw


def _leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _tree_hash(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    split = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _tree_hash(leaves[:split]) + _tree_hash(leaves[split:])).digest()


def _audit_path(index: int, leaves: list[bytes]) -> list[bytes]:
    if len(leaves) <= 1:
        return []
    split = 1 << ((len(leaves) - 1).bit_length() - 1)
    if index < split:
        return [*_audit_path(index, leaves[:split]), _tree_hash(leaves[split:])]
    return [*_audit_path(index - split, leaves[split:]), _tree_hash(leaves[:split])]


@dataclass
class GitHubIdentity:
    """The claims of a GitHub Actions job's OIDC token, as Fulcio puts them in a certificate:
    the caller's workflow (the build configuration) and the workflow that ran the signing job
    (kernel-matrix's reusable one, or the same)."""

    repository: str
    workflow: str = ".github/workflows/kernel-matrix.yml"
    ref: str = "refs/tags/v1.0.0"
    signer_workflow: str | None = None  # owner/repo/path@ref of a reusable workflow
    issuer: str = GITHUB_ISSUER
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    repository_id: str = "700100"  # GitHub's numbers for the repository and its owner
    owner_id: str = "700001"

    @property
    def config_uri(self) -> str:
        return f"https://github.com/{self.repository}/{self.workflow}@{self.ref}"

    @property
    def signer_uri(self) -> str:
        return f"https://github.com/{self.signer_workflow}" if self.signer_workflow else self.config_uri

    def extensions(self) -> list[x509.UnrecognizedExtension]:
        def oid(n: int) -> x509.ObjectIdentifier:
            return x509.ObjectIdentifier(f"1.3.6.1.4.1.57264.1.{n}")

        repository_uri = f"https://github.com/{self.repository}"
        legacy = {1: self.issuer, 2: "push", 3: self.sha, 4: "Release", 5: self.repository, 6: self.ref}
        current = {
            8: self.issuer,
            9: self.signer_uri,
            10: self.sha,
            11: "github-hosted",
            12: repository_uri,
            13: self.sha,
            14: self.ref,
            15: self.repository_id,
            16: f"https://github.com/{self.repository.split('/')[0]}",
            17: self.owner_id,
            18: self.config_uri,
            19: self.sha,
            20: "push",
            21: f"{repository_uri}/actions/runs/1/attempts/1",
        }
        return [x509.UnrecognizedExtension(oid(n), v.encode()) for n, v in legacy.items()] + [
            x509.UnrecognizedExtension(oid(n), _utf8(v)) for n, v in current.items()
        ]


@dataclass
class LocalSigstore:
    """One local instance: its keys, its CA certificate and its log."""

    ca_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    rekor_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    ct_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    leaves: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        self.start = now - dt.timedelta(days=30)
        name = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "local"), x509.NameAttribute(NameOID.COMMON_NAME, "fulcio")]
        )
        public = self.ca_key.public_key()
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.start)
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )

    def write_trusted_root(self, path: Path) -> Path:
        """The trusted_root.json that vouches for this instance (what --trust-root reads)."""
        start = self.start.strftime("%Y-%m-%dT%H:%M:%SZ")

        def log(key: ec.EllipticCurvePrivateKey, url: str) -> dict:
            return {
                "baseUrl": url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": _b64(_spki(key.public_key())),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": start},
                },
                "logId": {"keyId": _b64(_key_id(key.public_key()))},
            }

        root = {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [log(self.rekor_key, "https://rekor.invalid")],
            "certificateAuthorities": [
                {
                    "subject": {"organization": "local", "commonName": "fulcio"},
                    "uri": "https://fulcio.invalid",
                    "certChain": {
                        "certificates": [{"rawBytes": _b64(self.ca_cert.public_bytes(serialization.Encoding.DER))}]
                    },
                    "validFor": {"start": start},
                }
            ],
            "ctlogs": [log(self.ct_key, "https://ctfe.invalid")],
            "timestampAuthorities": [],
        }
        path.write_text(json.dumps(root))
        return path

    def _certificate(
        self, public: ec.EllipticCurvePublicKey, who: GitHubIdentity, start: dt.datetime
    ) -> x509.Certificate:
        serial = x509.random_serial_number()

        def build(sct_list: bytes) -> x509.Certificate:
            builder = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([]))
                .issuer_name(self.ca_cert.subject)
                .public_key(public)
                .serial_number(serial)
                .not_valid_before(start)
                .not_valid_after(start + dt.timedelta(minutes=10))
                .add_extension(
                    x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
                )
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False
                )
                .add_extension(
                    x509.SubjectAlternativeName([x509.UniformResourceIdentifier(who.signer_uri)]), critical=True
                )
            )
            for extension in who.extensions():
                builder = builder.add_extension(extension, critical=False)
            octets = b"\x04" + _der_length(len(sct_list)) + sct_list
            return builder.add_extension(x509.UnrecognizedExtension(SCT_LIST_OID, octets), critical=False).sign(
                self.ca_key, hashes.SHA256()
            )

        # The SCT signs the certificate as it is without the SCT (RFC 6962's precertificate entry).
        tbs = build(b"\x00\x00").tbs_precertificate_bytes
        millis = int(start.timestamp()) * 1000
        entry = _key_id(self.ca_key.public_key()) + len(tbs).to_bytes(3, "big") + tbs
        signed = self.ct_key.sign(
            struct.pack("!BBQH", 0, 0, millis, 1) + entry + struct.pack("!H", 0), ec.ECDSA(hashes.SHA256())
        )
        sct = struct.pack("!B32sQH", 0, _key_id(self.ct_key.public_key()), millis, 0)
        sct += struct.pack("!BBH", 4, 3, len(signed)) + signed
        return build(struct.pack("!HH", len(sct) + 2, len(sct)) + sct)

    def _log(self, cert: x509.Certificate, signature: bytes, hashed, integrated: int) -> TransparencyLogEntry:
        record = _hashedrekord_from_parts(cert, signature, hashed).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        body = rfc8785.dumps(record)
        self.leaves.append(_leaf_hash(body))
        index, size, root = len(self.leaves) - 1, len(self.leaves), _tree_hash(self.leaves)
        log_id = _key_id(self.rekor_key.public_key())
        promise = rfc8785.dumps(
            {"body": _b64(body), "integratedTime": integrated, "logID": log_id.hex(), "logIndex": index}
        )
        note = f"rekor.local - 1\n{size}\n{_b64(root)}\n"
        note_signature = self.rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        entry = RekorEntry.from_dict(
            {
                "logIndex": str(index),
                "logId": {"keyId": _b64(log_id)},
                "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
                "integratedTime": str(integrated),
                "inclusionPromise": {
                    "signedEntryTimestamp": _b64(self.rekor_key.sign(promise, ec.ECDSA(hashes.SHA256())))
                },
                "inclusionProof": {
                    "logIndex": str(index),
                    "rootHash": _b64(root),
                    "treeSize": str(size),
                    "hashes": [_b64(h) for h in _audit_path(index, self.leaves)],
                    "checkpoint": {"envelope": f"{note}\n\u2014 rekor.local {_b64(log_id[:4] + note_signature)}\n"},
                },
                "canonicalizedBody": _b64(body),
            }
        )
        return TransparencyLogEntry(entry)

    def sign(self, data: bytes, who: GitHubIdentity) -> Bundle:
        """What keyless signing by `who` gives: an ephemeral key, its certificate, the log entry."""
        now = int(time.time())
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._certificate(key.public_key(), who, dt.datetime.fromtimestamp(now - 5, dt.timezone.utc))
        hashed = sha256_digest(data)
        signature = key.sign(hashed.digest, ec.ECDSA(Prehashed(hashes.SHA256())))
        return Bundle.from_parts(cert, signature, self._log(cert, signature, hashed, integrated=now))

    def signer(self, who: GitHubIdentity):
        """signatures.sign_variant's `sign`: bytes in, the bundle's JSON out."""
        return lambda data: self.sign(data, who).to_json()
