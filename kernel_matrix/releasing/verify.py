"""`kernel-matrix verify`: rebuild variants from the kernel's sources and compare
every file, byte for byte (sha256), with what was published: variant folders, or
a release on the Hub (downloaded with huggingface_hub).

A build is reproducible (compile.py): the same sources, kernel-matrix and
toolchain give the same bytes in any folder. So a variant that differs from its
rebuild was not built from these sources with this toolchain, or was changed
since. metadata.json records what the rebuild needs (the git states, the
toolchain, SOURCE_DATE_EPOCH). Its provenance says how each build was made, so
it may differ between a variant and its rebuild elsewhere (a container's Python,
kernel-matrix's git state) while every byte the variant is made of, and the rest
of metadata.json, is the same: that is reported as a note, not a difference.
The rebuild is running/rebuild.py's: natively where this host builds the variant
(its torch, and nvcc for CUDA ones) with the toolchain it records; otherwise in its
cell's builder image (as `kernel-matrix build --variant` builds it); a variant of
another torch or CUDA is reported as not verified where no engine answers."""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, cast, get_args

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import HFValidationError, validate_repo_id

from kernel_matrix.building.variant_dir import variant_files
from kernel_matrix.checking.testing import hub_repo_id, resolve_variant_dir
from kernel_matrix.config.buildtoml import Backend, BuildConfig
from kernel_matrix.errors import (
    ConfigError,
    KernelMatrixError,
    NetworkError,
    NothingToDoError,
    NotReproducedError,
    ToolchainError,
    UntrustedError,
)
from kernel_matrix.layout import HUB_BUILD, METADATA, hub_path, is_built
from kernel_matrix.planning.capabilities import CAPABILITY, strip_ptx
from kernel_matrix.releasing import signatures
from kernel_matrix.releasing.publish import REPO_TYPE
from kernel_matrix.releasing.release import release_branch
from kernel_matrix.releasing.signatures import Signer

if TYPE_CHECKING:
    from sigstore.verify import Verifier

    from kernel_matrix.planning.selection import Kernel

# A variant's metadata.json, read as JSON (read_metadata checks backend.type).
Metadata = dict[str, Any]
# Fields of metadata.json named in a difference line before "and N more".
_SHOWN_FIELDS = 4


@dataclass(frozen=True)
class Verification:
    """One variant folder compared with its rebuild."""

    variant: str  # the name, as published
    files: int  # files compared
    differences: list[str]  # one line per differing file; empty: identical
    unverified: str | None = None  # why it could not be rebuilt here
    notes: list[str] = field(default_factory=list)  # provenance that differs from the rebuild's


class Rebuild(Protocol):
    """How verify rebuilds a variant (running/rebuild.py's Rebuilder): `rebuild` builds `name`
    into out/<name> as its metadata.json records it, or raises ToolchainError saying why not here."""

    @property
    def kernel_dir(self) -> Path: ...

    @property
    def log(self) -> Callable[[str], None]: ...

    def rebuild(self, name: str, metadata: Metadata, out: Path) -> Path: ...


def recorded(metadata: Metadata, key: str) -> str | None:
    """A field of metadata.json's provenance.toolchain (absent in older variants)."""
    toolchain = metadata.get("provenance", {}).get("toolchain", {})
    value = toolchain.get(key) if isinstance(toolchain, dict) else None
    return value if isinstance(value, str) else None


def verify_variants(
    variant_dirs: list[Path],
    rebuilder: Rebuild,
    *,
    label: Callable[[Path], str] = lambda path: path.name,
) -> list[Verification]:
    """Rebuild each variant (once per name) and compare it with each folder given."""
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="kernel-matrix-verify-") as scratch:
        rebuilt: dict[str, Path | str] = {}  # name -> the rebuild, or why there is none
        for variant_dir in variant_dirs:
            metadata = read_metadata(variant_dir)
            name = variant_dir.name
            if name not in rebuilt:
                rebuilder.log(f"rebuilding {name} from {rebuilder.kernel_dir}")
                try:
                    rebuilt[name] = rebuilder.rebuild(name, metadata, Path(scratch) / str(len(rebuilt)))
                except ToolchainError as exc:
                    rebuilt[name] = str(exc)
            made = rebuilt[name]
            if isinstance(made, str):
                outcomes.append(Verification(label(variant_dir), 0, [], unverified=made))
                continue
            differences, notes = compare(variant_dir, made, label(variant_dir))
            outcomes.append(Verification(label(variant_dir), len(variant_files(variant_dir)), differences, notes=notes))
    return outcomes


# metadata.json is a few kilobytes; one from the Hub is anyone's.
_MAX_METADATA_BYTES = 1024 * 1024
_MAX_METADATA_DEPTH = 16
# provenance.toolchain.source-date-epoch: seconds, as BuildPlan.source_date_epoch records them.
_EPOCH = re.compile(r"^\d{1,18}$")
# Other backends' archs (rocm's gfx90a): never used to build, but printed.
_ARCH = re.compile(r"^[A-Za-z0-9_.+-]{1,32}$")
# C0 and C1 controls and DEL: no value kernel-matrix writes holds one; printed, they drive a terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def read_metadata(variant_dir: Path, shown: str | None = None) -> Metadata:
    """A variant's metadata.json, checked as untrusted input: a release on the Hub
    is anyone's, and what verify uses of it (the backend and its CUDA archs, the
    SOURCE_DATE_EPOCH) reaches the compiler's command line and the environment.
    shown: how error lines name the file (default: its path)."""
    path = variant_dir / METADATA
    if shown is not None:
        try:
            return read_metadata(variant_dir)
        except ConfigError as exc:
            raise ConfigError(f"{shown}{str(exc).removeprefix(str(path))}") from None
    try:
        if path.stat().st_size > _MAX_METADATA_BYTES:
            raise ConfigError(f"{path}: more than {_MAX_METADATA_BYTES} bytes: not a variant's metadata")
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc}): not a built variant") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise ConfigError(f"{path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply: not a variant's metadata") from None
    backend = metadata.get("backend") if isinstance(metadata, dict) else None
    if not isinstance(backend, dict) or not isinstance(backend.get("type"), str):
        raise ConfigError(f"{path}: no backend.type: not a variant's metadata")
    _check_metadata(path, metadata)
    return cast(Metadata, metadata)


def _check_metadata(path: Path, metadata: dict[str, Any]) -> None:
    """One ConfigError line for the first value of metadata.json that no build of
    kernel-matrix writes: what verify would pass to a compiler, the environment
    or a terminal."""

    def refuse(key: str, value: object, expected: str) -> NoReturn:
        shown = json.dumps(value)  # control characters escaped: one line
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise ConfigError(f"{path}: {key} = {shown}: expected {expected}; not a variant kernel-matrix built")

    def strings(value: object, key: str, depth: int) -> None:
        if depth > _MAX_METADATA_DEPTH:
            refuse(key, "...", f"at most {_MAX_METADATA_DEPTH} levels of nesting")
        if isinstance(value, str) and _CONTROL.search(value):
            refuse(key, value, "no control characters")
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for name, item in items:
            if isinstance(name, str) and _CONTROL.search(name):
                refuse(f"{key}.{name}", item, "a key without control characters")
            strings(item, f"{key}.{name}" if key else str(name), depth + 1)

    strings(metadata, "", 0)
    backend = metadata["backend"]
    kind = backend["type"]
    if kind not in get_args(Backend):
        refuse("backend.type", kind, f"one of {', '.join(get_args(Backend))}")
    archs = backend.get("archs")
    if archs is not None:
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            refuse("backend.archs", archs, "a list of strings")
        for arch in archs:
            # A CUDA variant's archs become nvcc's -gencode flags in the rebuild.
            if not (CAPABILITY.fullmatch(strip_ptx(arch)) if kind == "cuda" else _ARCH.fullmatch(arch)):
                refuse(
                    "backend.archs",
                    arch,
                    "a CUDA capability such as 9.0, 9.0a or 9.0+PTX" if kind == "cuda" else "an arch name",
                )
    # Read with .get() by the rebuild: each level a mapping where it is there.
    provenance = metadata.get("provenance", {})
    if not isinstance(provenance, dict):
        refuse("provenance", provenance, "a mapping")
    toolchain = provenance.get("toolchain", {})
    if not isinstance(toolchain, dict):
        refuse("provenance.toolchain", toolchain, "a mapping")
    epoch = toolchain.get("source-date-epoch")
    if epoch is not None and not (isinstance(epoch, str) and _EPOCH.fullmatch(epoch)):
        # It becomes SOURCE_DATE_EPOCH in the rebuild's compiler environment.
        refuse("provenance.toolchain.source-date-epoch", epoch, "seconds since 1970 (digits)")


def compare(given: Path, rebuilt: Path, label: str) -> tuple[list[str], list[str]]:
    """Lines for the files that differ between two variant folders (or are in one
    only), and notes for a metadata.json that differs in its provenance alone."""
    ours, theirs = _digests(given), _digests(rebuilt)
    lines, notes = [], []
    for path in sorted(ours.keys() | theirs.keys()):
        if path not in theirs:
            lines.append(f"{label}/{path}: not made by the rebuild")
        elif path not in ours:
            lines.append(f"{label}/{path}: missing (the rebuild makes it)")
        elif ours[path] != theirs[path]:
            fields = _metadata_fields(given / path, rebuilt / path) if path == METADATA else None
            if fields and all(key.startswith("provenance.") for key in fields):
                notes.append(f"{label}/{path}: the same but for how it was built: {_describe(fields)}")
                continue
            detail = f": {_describe(fields)}" if fields else ""
            lines.append(f"{label}/{path}: differs (sha256 {ours[path][:16]}, rebuilt {theirs[path][:16]}){detail}")
    return lines, notes


def _digests(variant_dir: Path) -> dict[str, str]:
    return {
        path.relative_to(variant_dir).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in variant_files(variant_dir)
    }


def _metadata_fields(given: Path, rebuilt: Path) -> dict[str, tuple[object, object]] | None:
    """The fields of two metadata.json files that differ: {dotted key: (given, rebuilt)}."""
    try:
        ours, theirs = _flatten(json.loads(given.read_text())), _flatten(json.loads(rebuilt.read_text()))
    except ValueError:
        return None
    return {
        key: (ours.get(key), theirs.get(key))
        for key in sorted(ours.keys() | theirs.keys())
        if ours.get(key) != theirs.get(key)
    }


def _describe(fields: dict[str, tuple[object, object]]) -> str:
    shown = [f"{key} {_show(a)} vs {_show(b)}" for key, (a, b) in list(fields.items())[:_SHOWN_FIELDS]]
    more = f" and {len(fields) - _SHOWN_FIELDS} more" if len(fields) > _SHOWN_FIELDS else ""
    return "; ".join(shown) + more


def _flatten(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        flat: dict[str, object] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def _show(value: object) -> str:
    return "absent" if value is None else json.dumps(value)


def download_release(repo_id: str, revision: str, dest: Path, variants: list[str]) -> list[Path]:
    """The release's variant folders (build/<variant>/), or only the named ones,
    downloaded into dest with huggingface_hub (HF_ENDPOINT, HF_TOKEN as usual)."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ConfigError(f"--repo-id {repo_id!r}: {str(exc).splitlines()[0]}") from None
    patterns = [hub_path(name, "*") for name in variants] or [f"{HUB_BUILD}/*"]
    where = f"{repo_id}@{revision}"
    try:
        # The release's file names are anyone's: each is checked before anything is
        # downloaded (huggingface_hub refuses one leaving local_dir, with a ValueError).
        listed = HfApi().list_repo_files(repo_id, repo_type=REPO_TYPE, revision=revision)
        unsafe = next((name for name in listed if not _safe_release_path(name)), None)
        if unsafe is not None:
            raise ConfigError(
                f"{where}: the release holds a file named {json.dumps(unsafe)[:120]}, not a plain path inside "
                "the repo: refusing to download it (nothing verified)"
            )
        snapshot_download(repo_id, repo_type=REPO_TYPE, revision=revision, allow_patterns=patterns, local_dir=dest)
    except RevisionNotFoundError:
        raise ConfigError(
            f"{where}: the repo has no revision {revision!r} (a release is a branch v<version>)"
        ) from None
    except (RepositoryNotFoundError, GatedRepoError):
        raise ConfigError(f"{where}: no such kernel repo, or HF_TOKEN may not read it") from None
    except LocalEntryNotFoundError as exc:  # the connection failed (or HF_HUB_OFFLINE without a copy)
        raise NetworkError(f"{where}: cannot download: {first_line(exc)}") from None
    except HfHubHTTPError as exc:
        raise NetworkError(f"{where}: the Hub refused the download: {first_line(exc)}") from None
    except OSError as exc:
        raise NetworkError(f"{where}: cannot download: {first_line(exc)}") from None
    except ValueError as exc:  # huggingface_hub's own refusal of a path, should the listing have changed since
        raise ConfigError(f"{where}: refusing the release's files: {first_line(exc)} (nothing verified)") from None
    build = dest / HUB_BUILD
    found = sorted(d for d in build.iterdir() if is_built(d)) if build.is_dir() else []
    missing = sorted(set(variants) - {d.name for d in found})
    if missing:
        raise NothingToDoError(f"{where}: no variant {', '.join(missing)} in {HUB_BUILD}/")
    if not found:
        raise NothingToDoError(f"{where}: no variant in {HUB_BUILD}/ (nothing to verify)")
    for variant_dir in found:  # every one checked before any is rebuilt
        read_metadata(variant_dir, shown=f"{where}: {hub_path(variant_dir.name, METADATA)}")
    return found


def _safe_release_path(name: str) -> bool:
    """A repo file name that stays where it is put: relative, no . or .. or empty
    parts, no backslash (a separator elsewhere) or control character."""
    parts = name.split("/")
    return (
        bool(name)
        and "\\" not in name
        and not _CONTROL.search(name)
        and all(part not in ("", ".", "..") for part in parts)
    )


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def verify_command(
    variants: list[str],
    *,
    repo_id: str | None,
    revision: str | None,
    config: BuildConfig,
    build_dir: Path,
    rebuilder: Rebuild | None,
    log: Callable[[str], None],
    report: Callable[[str], None],
    signer: Signer | None = None,
    trust_root: Path | None = None,
) -> None:
    """The CLI's `verify` (its options checked there): local variant folders, or with
    repo_id the release's (`variants`: the ones to verify, default all), each rebuilt by
    rebuilder. With signer, each variant's signature first (signatures.py; without a
    rebuilder, only that). config: the kernel's build.toml (its release branch). Reports each
    identical (and signed) variant; raises UntrustedError (one line per variant whose
    signature is not signer's), NotReproducedError (one line per differing file) or
    ToolchainError (variants not rebuilt here)."""
    checker = signatures.verifier(trust_root) if signer is not None else None
    untrusted: list[str] = []

    def check(found: list[Path], label: Callable[[Path], str]) -> list[Verification]:
        if signer is not None and checker is not None:
            for variant_dir in found:
                checked = signatures.check_variant(variant_dir, signer, checker)
                if checked.finding is signatures.Finding.SIGNED:
                    report(checked.line)
                else:
                    untrusted.append(checked.line)
        return verify_variants(found, rebuilder, label=label) if rebuilder is not None else []

    if repo_id is None:
        # Named by path: two folders of one variant (a copy and the original) stay apart.
        outcomes = check([resolve_variant_dir(v, build_dir) for v in variants], label=str)
    else:
        revision = revision or release_branch(config)
        with tempfile.TemporaryDirectory(prefix="kernel-matrix-release-") as scratch:
            log(f"downloading {repo_id}@{revision}")
            found = download_release(repo_id, revision, Path(scratch), variants)
            outcomes = check(found, label=lambda path: hub_path(path.name).rstrip("/"))
    for outcome in outcomes:
        for note in outcome.notes:
            log(f"note: {note}")
        if outcome.unverified is None and not outcome.differences:
            report(f"identical: {outcome.variant} ({outcome.files} files)")
    differences = [line for outcome in outcomes for line in outcome.differences]
    unverified = [f"not verified: {o.variant}: {o.unverified}" for o in outcomes if o.unverified is not None]
    if untrusted:
        raise UntrustedError("\n".join([*untrusted, *differences, *unverified]))
    if differences:
        raise NotReproducedError("\n".join([*differences, *unverified]))
    if unverified:
        raise ToolchainError("\n".join(unverified))


# The branches `get_kernel(..., version=N)` reads: where every release of a version lives.
VERSION_BRANCH = re.compile(r"^v\d+$")


def verify_published(
    kernels: list[tuple[Kernel, str | None]],
    signer: Signer,
    *,
    repo_id: str | None,
    trust_root: Path | None,
    log: Callable[[str], None],
    report: Callable[[str], None],
) -> None:
    """`verify --published`: every published release of each kernel (repo_id: the one
    kernel's Hub repo, else each one's build.toml names), checked by signature and digest,
    nothing rebuilt. Reports each signed variant; raises UntrustedError naming every
    variant that is not."""
    if repo_id is not None and len(kernels) != 1:
        raise ConfigError("--repo-id names one kernel's repo: give --kernel NAME in a matrix of several")
    checker = signatures.verifier(trust_root)
    untrusted = []
    for chosen, _ in kernels:
        repo = repo_id or hub_repo_id(chosen.config)
        untrusted += _published_release(repo, chosen.config, signer, checker, log=log, report=report)
    if untrusted:
        raise UntrustedError("\n".join(untrusted))


def _published_release(
    repo_id: str,
    config: BuildConfig,
    signer: Signer,
    checker: Verifier,
    *,
    log: Callable[[str], None],
    report: Callable[[str], None],
) -> list[str]:
    """Each version branch of repo_id (v1, v2, ...) and build.toml's [general.hub] branch,
    checked: a line per variant that is not signer's, whole (none published: a note)."""
    try:
        refs = HfApi().list_repo_refs(repo_id, repo_type=REPO_TYPE)
    except (RepositoryNotFoundError, GatedRepoError):
        log(f"note: {repo_id}: no such kernel repo (or HF_TOKEN may not read it): nothing published to check")
        return []
    except (HfHubHTTPError, OSError) as exc:
        raise NetworkError(f"{repo_id}: cannot list its branches: {first_line(exc)}") from None
    branches = sorted(
        ref.name for ref in refs.branches if VERSION_BRANCH.match(ref.name) or ref.name == config.general.hub.branch
    )
    if not branches:
        log(f"note: {repo_id} has no version branch (v1, v2, ...): nothing published to check")
    untrusted = []
    for branch in branches:
        untrusted += _published_branch(repo_id, branch, config, signer, checker, log=log, report=report)
    return untrusted


def _published_branch(
    repo_id: str,
    branch: str,
    config: BuildConfig,
    signer: Signer,
    checker: Verifier,
    *,
    log: Callable[[str], None],
    report: Callable[[str], None],
) -> list[str]:
    """One release branch's variants checked: the lines of those that are not signer's,
    whole, of this kernel and version. A branch none of whose variants is signed was
    published before signing (or by hand): a note, not a failure, as the loader warns
    and loads; a branch with one signed variant must have all of them signed."""
    version = int(branch[1:]) if VERSION_BRANCH.match(branch) else config.general.version
    where = f"{repo_id}@{branch}"
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-matrix-release-") as scratch:
            log(f"downloading {where}")
            checked = [
                signatures.check_variant(variant_dir, signer, checker, kernel=config.general.name, version=version)
                for variant_dir in download_release(repo_id, branch, Path(scratch), [])
            ]
    except KernelMatrixError as exc:  # this branch only: the others are still checked
        return [f"{where}: cannot check: {exc}"]
    if checked and all(c.finding is signatures.Finding.UNSIGNED for c in checked):
        log(f"note: {where}: none of its {len(checked)} variants is signed (published before signing): not checked")
        return []
    untrusted = []
    for one in checked:
        if one.finding is signatures.Finding.SIGNED:
            report(f"{where}: {one.line}")
        else:
            untrusted.append(f"{where}: {one.line}")
    return untrusted
