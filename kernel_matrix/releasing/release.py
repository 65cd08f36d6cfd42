"""What a release is made of: the built variant directories, each checked
before anything leaves the machine (metadata, digest, ABI, completeness)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_matrix.checking.abi import gate
from kernel_matrix.config.buildtoml import BuildConfig
from kernel_matrix.containers.container_output import UnsafeOutputError, check_tree
from kernel_matrix.errors import ConfigError, NothingToDoError
from kernel_matrix.layout import HUB_BUILD, METADATA, SIGNATURE, BuildDir, hub_path
from kernel_matrix.releasing.signatures import sign_variant

if TYPE_CHECKING:
    from kernel_matrix.planning.selection import Kernel, Resolved


@dataclass(frozen=True)
class ReleaseFile:
    path_in_repo: str  # build/<variant>/<file>
    local: Path
    size: int
    blob_oid: str  # git's blob sha1, what the Hub's tree reports for plain files
    sha256: str  # what it reports for LFS/Xet files (binaries such as the .so)


def release_branch(config: BuildConfig) -> str:
    """Where a kernel's release goes, as kernel-builder uploads: [general.hub] branch where
    build.toml names one, else v<version>, the branch `get_kernel(..., version=N)` reads."""
    return config.general.hub.branch or f"v{config.general.version}"


def is_dirty(metadata: dict[str, Any]) -> bool:
    """A variant built from a git tree with uncommitted changes (the kernel's, or its
    builder's): what kernel-builder's upload and the `kernels` loader warn of."""
    provenance = metadata.get("provenance") or {}
    return any(
        isinstance(source, dict) and source.get("dirty") is True
        for source in (provenance.get("kernel"), provenance.get("kernel-builder"))
    )


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def checked_metadata(variant_dir: Path, config: BuildConfig, *, manylinux: str | None) -> dict[str, Any]:
    """The variant's metadata.json, after checking it matches the kernel, its
    digest holds, and its libraries pass the ABI gate."""
    from kernel_matrix.loader import Digest, DigestAlgorithm, DigestValidationError, Metadata

    try:  # an artifact or a copy may carry links: only plain files are released
        check_tree(variant_dir)
    except UnsafeOutputError as exc:
        raise ConfigError(f"{variant_dir}: {str(exc).replace('the container', 'the variant')}") from None
    metadata_path = variant_dir / METADATA
    try:
        metadata = Metadata.read_from_file(metadata_path)
    except ValueError as exc:
        raise ConfigError(f"{metadata_path}: the loader cannot read it: {exc}") from None
    general = config.general
    if str(metadata.name) != general.name or metadata.version != general.version:
        raise ConfigError(
            f"{metadata_path}: built as {metadata.name} v{metadata.version}, but build.toml says "
            f"{general.name} v{general.version}: rebuild it"
        )
    if metadata.digest is None:
        raise ConfigError(f"{metadata_path}: no digest: rebuild it with kernel-matrix build")
    try:
        metadata.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, variant_dir))
    except DigestValidationError as exc:
        problems = "; ".join(str(v) for v in exc.violations)
        raise ConfigError(f"{variant_dir}: files differ from its metadata digest ({problems})") from None
    if not config.noarch:  # a Python-only variant has no library to check
        gate(variant_dir, str(variant_dir), manylinux=manylinux)
    checked: dict[str, Any] = json.loads(metadata_path.read_text())
    return checked


def _release_file(path_in_repo: str, path: Path) -> ReleaseFile:
    data = path.read_bytes()
    return ReleaseFile(path_in_repo, path, len(data), git_blob_oid(data), hashlib.sha256(data).hexdigest())


def _utf8(name: str) -> bool:
    """A name the Hub can hold: a file name that is not UTF-8 (Python's surrogate escapes)
    cannot be sent, and would fail half-way through a publish."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def release_files(build_dir: Path, variants: list[str]) -> list[ReleaseFile]:
    files = []
    for variant in variants:
        root = BuildDir(build_dir).variant(variant)
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                relative = path.relative_to(root).as_posix()
                if not _utf8(relative):
                    raise ConfigError(f"{ascii(str(path))}: a file name that is not UTF-8 cannot go to the Hub")
                files.append(_release_file(hub_path(variant, relative), path))
    return files


def benchmark_files(kernel_dir: Path) -> list[ReleaseFile]:
    """The kernel's benchmarks/benchmark*.py, which kernel-builder's upload puts in the version
    branch's benchmarks/ (what `kernels benchmark <repo> --version N` runs). Plain files only:
    a link could carry a host file into the release."""
    folder = kernel_dir / "benchmarks"
    if folder.is_symlink() or not folder.is_dir():
        return []
    return [
        _release_file(f"benchmarks/{path.name}", path)
        for path in sorted(folder.iterdir())
        # a name that is not UTF-8 is passed over, as upload.rs passes over one to_str() refuses
        if path.name.startswith("benchmark") and path.name.endswith(".py") and _utf8(path.name)
        if path.is_file() and not path.is_symlink()
    ]


@dataclass(frozen=True)
class Release:
    config: BuildConfig  # the kernel's build.toml
    metadata: dict[str, dict[str, Any]]  # variant name -> metadata.json, in matrix order
    files: list[ReleaseFile]
    # Variants the whole matrix names that this release does not carry (not built, with
    # --allow-partial, or outside its profile): what the branch has of them stays.
    kept: tuple[str, ...] = ()
    kernel_dir: Path | None = None  # the kernel's folder: its CARD.md template, if it has one


def prepare_release(
    config: BuildConfig,
    build_dir: Path,
    expected: list[str],
    *,
    allow_partial: bool,
    manylinux: str | None,
    named: list[str] | None = None,
    kernel_dir: Path | None = None,
) -> Release:
    """The built variants of `expected`, each checked; refuses an incomplete
    release unless allow_partial. named: every variant of the kernel the whole
    matrix names (default: expected); those not released are kept on the branch.
    kernel_dir: the kernel's folder, whose benchmarks/benchmark*.py are released too."""
    where = BuildDir(build_dir)
    built = [name for name in expected if where.is_built(name)]
    missing = [name for name in expected if name not in built]
    if missing and not allow_partial:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise ConfigError(
            f"{len(missing)} of {len(expected)} variants to release are not built in {build_dir} "
            f"({shown}); build them or pass --allow-partial"
        )
    if not built:
        raise NothingToDoError(f"none of the {len(expected)} variants to release is built in {build_dir}")
    metadata = {name: checked_metadata(where.variant(name), config, manylinux=manylinux) for name in built}
    kept = tuple(name for name in (expected if named is None else named) if name not in built)
    files = release_files(build_dir, built) + (benchmark_files(kernel_dir) if kernel_dir else [])
    return Release(config=config, metadata=metadata, files=files, kept=kept, kernel_dir=kernel_dir)


def signed_release(release: Release, sign: Callable[[bytes], str]) -> Release:
    """release with each variant's metadata.json signed by `sign` (signatures.py): the bundle
    written beside it in the build folder and released with it (a bundle already there,
    from an earlier signing, is replaced)."""
    bundles = []
    for file in release.files:
        parts = file.path_in_repo.split("/")
        if len(parts) == 3 and parts[0] == HUB_BUILD and parts[2] == METADATA:
            bundle = sign_variant(file.local.parent, sign)
            bundles.append(_release_file(hub_path(parts[1], SIGNATURE), bundle))
    kept = [file for file in release.files if not file.path_in_repo.endswith("/" + SIGNATURE)]
    return replace(release, files=[*kept, *bundles])


def prepare_releases(
    resolved: Resolved, build_root: Path, repo_id: str | None, *, allow_partial: bool, manylinux: str | None
) -> list[tuple[str, Release]]:
    """Each selected kernel's release and the Hub repo it goes to, all checked before any
    is published. repo_id (--repo-id) replaces [general.hub] repo-id, for one kernel only."""
    releases = []
    for item in resolved.work(build_root):
        target = _repo_id(repo_id, item.kernel, several=len(resolved.kernels) > 1)
        expected = [c.name for c in item.cells]
        release = prepare_release(
            item.kernel.config,
            item.build_dir.path,
            expected,
            allow_partial=allow_partial,
            manylinux=manylinux,
            named=[c.name for c in resolved.matrix_cells[item.kernel.name]],
            kernel_dir=item.kernel.dir,
        )
        releases.append((target, release))
    return releases


def _repo_id(option: str | None, kernel: Kernel, *, several: bool) -> str:
    """--repo-id (one kernel only), else the kernel's [general.hub] repo-id; checked as the Hub checks it."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if option is not None and several:
        raise ConfigError("--repo-id names one repo: publish one kernel (--kernel NAME) with it")
    repo_id = option if option is not None else kernel.config.general.hub.repo_id
    if not repo_id:
        raise ConfigError(f"{kernel.dir / 'build.toml'}: no [general.hub] repo-id, and no --repo-id given")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ConfigError(f"repo id {repo_id!r}: {str(exc).splitlines()[0]}") from None
    return repo_id
