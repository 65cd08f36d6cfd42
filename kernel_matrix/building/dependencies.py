"""A kernel's `depends` beyond torch (CUTLASS), supplied as kernel-builder supplies them.

Each name kernels-data knows has a pin in data/dependencies.yaml: the upstream
version and commit, and the sha256 of the header tree as kernel-builder installs
it (`include/` with `tools/util/include/` merged in). A pin is fetched once, on
the host (builder containers have no network), into its own cache folder
<cache>/<name>-<digest>/include, checked against the digest before it is moved
in, and read-only from then on. It comes from PyPI (hash-checked pip) where a
wheel carries exactly the tag's headers, else from the upstream archive of the
commit. $KERNEL_MATRIX_DEPS_DIR/<name>/include still overrides any pin.

Read-only modes stop nothing for the user who owns the folder, so a fetched tree is
hashed again when a build uses it (once per process while no file of it changes: a
stamp of every file's inode, size and times, kept in memory) and fetched again where
it differs from the pin, a line saying so; what metadata.json records is the digest
of the files compiled, links followed as the compiler follows them."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path, PurePosixPath
from typing import IO

from kernel_matrix.data import load
from kernel_matrix.errors import ToolchainError
from kernel_matrix.layout import user_cache

# Overrides: <dir>/<dependency>/include, used as it is (not pinned, not checked).
DEPS_DIR_ENV = "KERNEL_MATRIX_DEPS_DIR"
# Where pins are fetched to (default: the user's cache folder).
DEPS_CACHE_ENV = "KERNEL_MATRIX_DEPS_CACHE"
# How long one download may stall before the fetch gives up.
_TIMEOUT_S = 120


@dataclass(frozen=True)
class Wheel:
    """A PyPI wheel holding the pin's headers under `root` (e.g. cutlass_library/source)."""

    requirement: str  # nvidia-cutlass==3.8.0.0
    sha256: str  # of the wheel file: pip refuses any other
    root: str


@dataclass(frozen=True)
class Pin:
    name: str
    what: str  # "CUTLASS 3.8.0", for messages
    backend: str
    version: str
    repository: str | None = None  # NVIDIA/cutlass
    commit: str | None = None
    archive: str | None = None  # the upstream archive of the commit
    headers: tuple[str, ...] = ()  # folders of the source tree merged into include/
    digest: str | None = None  # tree_digest of the laid-out include/
    wheel: Wheel | None = None
    supplied: str | None = None  # why kernel-matrix does not fetch it (None: it does)

    @property
    def folder_name(self) -> str:
        assert self.digest is not None
        return f"{self.name}-{self.digest[:16]}"


@cache
def pins() -> dict[str, Pin]:
    """data/dependencies.yaml, by dependency name."""
    table = load("dependencies")
    found = {}
    for name, row in table.items():
        wheel = row.get("wheel")
        commit = row.get("commit")
        found[name] = Pin(
            name=name,
            what=row["what"],
            backend=row["backend"],
            version=str(row["version"]),
            repository=row.get("repository"),
            commit=commit,
            archive=row["archive"].format(commit=commit) if "archive" in row else None,
            headers=tuple(row.get("headers", ())),
            digest=row.get("digest"),
            wheel=Wheel(wheel["requirement"], wheel["sha256"], wheel["root"]) if wheel else None,
            supplied=row.get("supplied"),
        )
    return found


def tree_digest(root: Path) -> str:
    """sha256 of a header tree: each regular file's POSIX path under root and the
    sha256 of its bytes, in path order. Modes and times are left out (archives,
    wheels and installs differ there, the compiler does not). Links are followed, as
    the compiler follows them: a linked folder's files are part of the tree."""
    digest = hashlib.sha256()
    for relative, path in _tree_files(root):
        digest.update(f"{relative}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def _tree_files(root: Path) -> list[tuple[str, Path]]:
    """(POSIX path under root, path) of each regular file under root, in path order, linked
    folders followed once each (a link back up would repeat the tree without end)."""
    found: list[tuple[str, Path]] = []
    seen = {os.path.realpath(root)}
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = {d: os.path.realpath(os.path.join(folder, d)) for d in dirs}
        dirs[:] = sorted(d for d in dirs if real[d] not in seen)
        seen.update(real[d] for d in dirs)
        for name in files:
            path = Path(folder, name)
            if path.is_file():  # a link's target; a FIFO or device is nothing the compiler reads
                found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


# Trees hashed by this process: include folder -> (stamp, digest). The stamp holds
# every file's inode, size and change time, which no edit keeps (ctime cannot be set
# back), so a tree is hashed again only once something in it changed.
_RACY_NS = 2_000_000_000
_HASHED: dict[Path, tuple[tuple[tuple[str, int, int, int, int, int], ...], str]] = {}


def current_digest(include: Path) -> str:
    """tree_digest of include as it is now: hashed once per process while nothing changes."""
    files = _tree_files(include)
    stamp = tuple(
        (relative, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        for relative, st in ((relative, path.stat()) for relative, path in files)
    )
    known = _HASHED.get(include)
    if known is not None and known[0] == stamp:
        return known[1]
    digest = tree_digest(include)
    # A change within the clock's granularity of the last one may keep every time: such a
    # tree is hashed again next time (as git treats an index entry as new as the index).
    if all(entry[5] < time.time_ns() - _RACY_NS for entry in stamp):
        _HASHED[include] = (stamp, digest)
    return digest


def cache_root() -> Path:
    if root := os.environ.get(DEPS_CACHE_ENV):
        return Path(root)
    return user_cache() / "deps"


@dataclass(frozen=True)
class Resolved:
    name: str
    folder: Path  # holds include/
    pin: Pin | None  # None: taken from $KERNEL_MATRIX_DEPS_DIR

    @property
    def include(self) -> Path:
        return self.folder / "include"

    def fingerprint(self) -> str:
        """The tree digest of the headers as they are now (computed from the files, never
        the pin's stated value: a pin's folder may have been edited since it was checked)."""
        return current_digest(self.include)

    def record(self) -> str:
        """What metadata.json says the variant was built against: the pin, where the
        headers' digest is the pin's (also for an override with the pin's headers), so
        that a build with them records, and verify compares, what a build from the pin
        does; else the digest of the headers compiled. A pin's folder that no longer
        holds the pin's headers (changed during the build) is refused."""
        pin = self.pin or pins().get(self.name)
        digest = self.fingerprint()
        if pin is not None and pin.digest == digest:
            return f"{pin.what}, {pin.repository}@{pin.commit}, headers sha256:{digest}"
        if self.pin is not None:
            raise ToolchainError(
                f"{self.name}: the headers in {self.folder} changed during the build (sha256 {digest}, "
                f"not the pinned {self.pin.digest}): build again"
            )
        return f"${DEPS_DIR_ENV}/{self.name} (not pinned), headers sha256:{digest}"


def override(name: str) -> Path | None:
    """$KERNEL_MATRIX_DEPS_DIR/<name>, where it holds an include folder, links resolved
    (the folder that is compiled, hashed and mounted)."""
    root = os.environ.get(DEPS_DIR_ENV)
    return (Path(root) / name).resolve() if root and (Path(root) / name / "include").is_dir() else None


def resolve(name: str, where: str) -> Resolved:
    """The folder (holding include/) of dependency `name`: the override, else the
    pin's cache folder, fetched first if missing. where: who asks, for the error line."""
    if (folder := override(name)) is not None:
        return Resolved(name, folder, None)
    pin = pins().get(name)
    if pin is None:
        raise ToolchainError(f"{where} depends on {name}, which kernel-builder does not know")
    if pin.supplied is not None:
        raise ToolchainError(
            f"{where} depends on {name} ({pin.what}): {pin.supplied}; put its headers in ${DEPS_DIR_ENV}/{name}/include"
        )
    return Resolved(name, fetch(pin, cache_root()), pin)


# Where a builder container finds the folders: overrides and pins as on the host,
# so that the build inside resolves each name as the host did, without fetching.
CONTAINER_DEPS = PurePosixPath("/deps")


def container_mounts(names: Iterable[str], where: str) -> tuple[list[tuple[Path, str]], dict[str, str]]:
    """(host folder, container folder) of each dependency in `names` (fetched here
    first: containers have no network), and the environment that points the build
    inside at them. Nothing else of the host's is mounted."""
    mounts: list[tuple[Path, str]] = []
    env: dict[str, str] = {}
    for name in sorted(set(names) - {"torch"}):
        found = resolve(name, where)
        if found.pin is None:
            mounts.append((found.folder, str(CONTAINER_DEPS / "override" / name)))
            env[DEPS_DIR_ENV] = str(CONTAINER_DEPS / "override")
        else:
            mounts.append((found.folder, str(CONTAINER_DEPS / "pinned" / found.folder.name)))
            env[DEPS_CACHE_ENV] = str(CONTAINER_DEPS / "pinned")
    return mounts, env


def fetch(pin: Pin, root: Path) -> Path:
    """root/<name>-<digest>, fetched and checked if not there yet; there, hashed again
    (once per process while unchanged) and fetched again where it is not the pin's."""
    final = root / pin.folder_name
    if (final / "include").is_dir():
        got = current_digest(final / "include")
        if got == pin.digest:
            return final
        _discard(pin, final, got)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{pin.folder_name}.", dir=root) as scratch:
            _fetch_into(pin, Path(scratch), final)
    except OSError as exc:
        raise ToolchainError(
            f"{pin.name}: cannot write {final} ({exc.strerror or exc}); set {DEPS_CACHE_ENV} to a writable folder"
        ) from None
    return final


def _discard(pin: Pin, final: Path, got: str) -> None:
    """Move aside and delete a pin's folder whose headers are not the pin's (one line says
    so); refused where it cannot be (a read-only mount, another user's folder)."""
    print(
        f"{pin.name}: the headers in {final} have sha256 {got}, not the pinned {pin.digest} "
        "(changed since they were fetched): fetching them again",
        file=sys.stderr,
    )
    aside = final.with_name(f".{final.name}.discarded-{os.getpid()}")
    try:
        os.rename(final, aside)
    except FileNotFoundError:
        return  # another build discarded it meanwhile
    except OSError as exc:
        raise ToolchainError(
            f"{pin.name}: the headers in {final} have sha256 {got}, not the pinned {pin.digest}, and the folder "
            f"cannot be replaced ({exc.strerror or exc}): refused; remove it"
        ) from None
    for folder, dirs, _ in os.walk(aside):  # read-only folders, as a pin is kept
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(folder, name), 0o755, follow_symlinks=False)
    with contextlib.suppress(OSError):
        aside.chmod(0o755)
    shutil.rmtree(aside, ignore_errors=True)


def _fetch_into(pin: Pin, scratch: Path, final: Path) -> None:
    """Fetch pin into scratch, check it, and move it to final, read-only."""
    stage = scratch / "tree"
    include = stage / "include"
    include.mkdir(parents=True)
    source = f"{pin.wheel.requirement} (PyPI)" if pin.wheel else pin.archive
    # On stderr: stdout may be a table or JSON another program reads.
    print(f"fetching {pin.name} ({pin.what}) from {source} into {final}", file=sys.stderr)
    if pin.wheel is not None:
        _from_wheel(pin, pin.wheel, scratch, include)
    else:
        _from_archive(pin, scratch, include)
    got = tree_digest(include)
    if got != pin.digest:
        raise ToolchainError(
            f"{pin.name}: the headers from {source} have sha256 {got}, not the pinned {pin.digest}: refused"
        )
    for path in stage.rglob("*"):  # a pin is never edited in place
        path.chmod(0o555 if path.is_dir() else 0o444)
    stage.chmod(0o555)
    try:
        os.rename(stage, final)
    except OSError:
        if not (final / "include").is_dir():  # not another build that fetched it meanwhile
            raise
    # (TemporaryDirectory removes a read-only copy that lost that race too.)


def _unreachable(pin: Pin, source: str, reason: str) -> ToolchainError:
    return ToolchainError(
        f"{pin.name} ({pin.what}): cannot fetch {source} ({reason}); on a host without access put its "
        f"headers in ${DEPS_DIR_ENV}/{pin.name}/include"
    )


def _from_wheel(pin: Pin, wheel: Wheel, scratch: Path, include: Path) -> None:
    """pip, through the host's pip configuration (its indexes and proxies), and only
    the wheel whose sha256 is pinned."""
    requirements = scratch / "requirements.txt"
    requirements.write_text(f"{wheel.requirement} --hash=sha256:{wheel.sha256}\n")
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes"]
    argv += ["--disable-pip-version-check", "-q", "-r", str(requirements), "-d", str(scratch / "wheel")]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    found = list((scratch / "wheel").glob("*.whl"))
    if result.returncode != 0 or len(found) != 1:
        lines = [ln.strip() for ln in result.stderr.splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "no wheel")
        # pip's hash error is a paragraph: its first sentence says it.
        reason = reason.removeprefix("ERROR: ").split(". ")[0]
        raise _unreachable(pin, f"{wheel.requirement} (sha256 {wheel.sha256[:12]}...) with pip", reason)
    with zipfile.ZipFile(found[0]) as archive:
        members = ((PurePosixPath(info.filename), info) for info in archive.infolist() if not info.is_dir())
        _lay_out(pin, wheel.root, ((path, partial(archive.open, info)) for path, info in members), include)


def _from_archive(pin: Pin, scratch: Path, include: Path) -> None:
    assert pin.archive is not None
    download = scratch / "source.tar.gz"
    try:
        with urllib.request.urlopen(pin.archive, timeout=_TIMEOUT_S) as response, download.open("wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise _unreachable(pin, pin.archive, str(reason)) from None
    try:
        with tarfile.open(download, "r:gz") as archive:
            # GitHub's archives hold one top folder, cutlass-<commit>/: the tree is under it.
            members = (
                (PurePosixPath(*PurePosixPath(m.name).parts[1:]), partial(archive.extractfile, m))
                for m in archive
                if m.isfile()
            )
            _lay_out(pin, "", members, include)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ToolchainError(f"{pin.name}: {pin.archive} is not a readable .tar.gz ({exc})") from None


def _lay_out(
    pin: Pin, root: str, members: Iterable[tuple[PurePosixPath, Callable[[], IO[bytes] | None]]], include: Path
) -> None:
    """Copy the files under each of the pin's header folders (below root) into include/,
    merged, as CUTLASS's CMake install lays them out (kernel-builder's headers)."""
    prefixes = [PurePosixPath(root, folder) for folder in pin.headers]
    for path, open_member in members:
        prefix = next((p for p in prefixes if path.is_relative_to(p)), None)
        if prefix is None:
            continue
        relative = path.relative_to(prefix)
        if ".." in relative.parts or relative.is_absolute():
            continue
        target = include / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        source = open_member()
        if source is None:
            continue
        with source, target.open("wb") as out:
            shutil.copyfileobj(source, out)
