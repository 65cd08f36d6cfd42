"""A content-addressed cache of compiled objects, for gcc and nvcc alike (the
idea of ccache's direct mode, small enough to read).

A compile is looked up by its command line (output path aside) and the identity
of its compilers. That key's manifest lists, for each object made with it, every
file the compile read (from the compiler's -MD output: the source and all its
headers) with its hash; a hit needs every file of one entry unchanged, and then
that object is copied instead of compiled. One command line has several entries
when the files differ: builder images of four torch versions put their headers at
the same paths, so the binding's command line is the same in each.

So the torch-free CUDA file, compiled with the same nvcc, flags and headers,
compiles once per CUDA version and is reused by every torch version's build; a
binding compiled against torch's headers misses when those headers differ.

What an entry claims (its key and listed inputs) is written by the build that
made it, and a container build is the kernel's own code: the cache cannot check
the claim without compiling again. So the claim is only ever believed by the
build that could have made it: caches are scoped (layout.cache_scope) by kernel
and trust, the host picks the scopes a build reads and the one its new entries
are merged into, and a pull request's build never writes where a trusted build
reads. Within a scope, newer entries go first and the oldest are dropped
(MAX_ENTRIES per command line, `prune` for the scope's size)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from kernel_matrix.layout import cache_scope

# Variables that change what gcc or nvcc compile without showing on the command line
# (SOURCE_DATE_EPOCH: __DATE__ and __TIME__; compile.py pins it when unset).
COMPILER_ENVIRONMENT = (
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "SOURCE_DATE_EPOCH",
)
# A scope's size after a build: the least recently written command lines go first.
MAX_SCOPE_BYTES = 8 * 1024**3
# Objects kept per command line: one per torch version and CUDA toolchain in use, with room.
MAX_ENTRIES = 16
# A make rule's prerequisites are separated by unescaped whitespace.
_DEP_SPLIT = re.compile(r"(?<!\\)\s+")


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ObjectCache:
    """root: the scope compiles are looked up in and new entries go to.
    also_reads: further scopes looked up after it (a pull request's build also
    reads the trusted scope, never writes it). writes: where new entries go
    instead of root: a container build reads its scopes read-only and writes into
    a folder of its own, which the host checks and merges (`merge`) into the scope
    it chose once the cell has built."""

    def __init__(self, root: Path, *, also_reads: tuple[Path, ...] = (), writes: Path | None = None):
        self.root = root
        self.reads = (root, *also_reads)
        self.writes = writes or root
        self._hashes: dict[Path, tuple[int, int, str]] = {}

    @staticmethod
    def for_kernel(cache_root: Path, kernel: str, *, trusted: bool, writes: Path | None = None) -> ObjectCache:
        """The cache a build of `kernel` uses: its own scope at its trust level, and for an
        untrusted build (a pull request's) the kernel's trusted scope too, read only."""
        also = () if trusted else (cache_scope(cache_root, kernel, trusted=True),)
        return ObjectCache(cache_scope(cache_root, kernel, trusted=trusted), also_reads=also, writes=writes)

    def fetch(self, argv: list[str], output: Path, compilers: list[str], env: Mapping[str, str] | None = None) -> bool:
        """Copy the cached object for this compile to output; False on a miss.
        env: the compile's environment (default: this process's)."""
        key = self._key(argv, output, compilers, env)
        for root in self.reads:
            for entry in self._entries(key, root):
                try:
                    if all(self._hash(Path(path)) == digest for path, digest in entry["inputs"].items()):
                        shutil.copyfile(root / "objects" / entry["object"], output)
                        return True
                except (OSError, KeyError, TypeError, AttributeError):
                    continue  # an input or the object vanished: try the next entry
        return False

    def store(
        self,
        argv: list[str],
        output: Path,
        compilers: list[str],
        depfile: Path,
        *,
        cwd: Path,
        started: float,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Record a compile's object and what it read (never fails the build).

        started: when the compile began. A file changed since then may not be
        what the compiler read, so such a compile is not recorded (as ccache does)."""
        try:
            read = parse_depfile(depfile.read_text(), base=cwd)
            if not read or any(_changed_since(p, started) for p in read):
                return
            inputs = {str(p): self._hash(p) for p in read}
            key = self._key(argv, output, compilers, env)
            data = output.read_bytes()
            content = hashlib.sha256(data).hexdigest()
            self._write(self.writes / "objects" / content, data)
            # Newest first; parallel builds may each add one and the last rename
            # wins, which only costs the loser's entry a compile next time.
            entries = [{"inputs": inputs, "object": content}]
            entries += [e for e in self._entries(key, self.writes) if e.get("inputs") != inputs][: MAX_ENTRIES - 1]
            self._write(self._manifest_path(key, self.writes), json.dumps(entries, sort_keys=True).encode())
        except OSError:
            pass  # a full or read-only cache only costs the next build a compile

    def merge(self, staged: Path) -> int:
        """Take a container build's new entries from staged (checked by
        container_output.check_tree: plain files only) into this cache's scope,
        the one the host chose for that build; returns how many entries were
        added. An object must hash to its name and is never overwritten; an
        entry must be well-formed and name such an object. New entries go first,
        replacing one with the same inputs; the oldest beyond MAX_ENTRIES go."""
        for path in sorted((staged / "objects").glob("*")):
            target = self.root / "objects" / path.name
            try:
                data = path.read_bytes()
                if _SHA256.match(path.name) and hashlib.sha256(data).hexdigest() == path.name and not target.exists():
                    self._write(target, data)
            except OSError:
                continue
        added = 0
        for path in sorted((staged / "manifests").glob("*/*.json")):
            key = path.stem
            if not _SHA256.match(key) or path.parent.name != key[:2]:
                continue
            new = [e for e in self._entries(key, staged) if self._sound(e)][:MAX_ENTRIES]
            if not new:
                continue
            fresh = [e.get("inputs") for e in new]
            kept = [e for e in self._entries(key, self.root) if e.get("inputs") not in fresh]
            added += len(new)
            merged = (new + kept)[:MAX_ENTRIES]
            self._write(self._manifest_path(key, self.root), json.dumps(merged, sort_keys=True).encode())
        return added

    def prune(self, max_bytes: int) -> int:
        """Keep this scope under max_bytes: objects no entry names are deleted, then the
        least recently written command lines' entries and their objects, oldest first.
        Returns the bytes freed."""
        # Another build sharing the cache may replace or prune a file meanwhile: a vanished
        # one counts as oldest, and nothing here fails a build.
        manifests = sorted((self.root / "manifests").glob("*/*.json"), key=_mtime, reverse=True)
        kept: set[str] = set()
        size = 0
        freed = 0
        objects = self.root / "objects"
        for manifest in manifests:  # newest first: they stay while they fit
            names = {e.get("object") for e in self._entries(manifest.stem, self.root)}
            sizes = {n: _size(objects / n) for n in names if isinstance(n, str) and n not in kept}
            if size + sum(sizes.values()) > max_bytes:
                freed += _size(manifest)
                manifest.unlink(missing_ok=True)
                continue
            size += sum(sizes.values())
            kept.update(sizes)
        for path in objects.glob("*") if objects.is_dir() else []:
            if path.name not in kept:
                freed += _size(path)
                path.unlink(missing_ok=True)
        return freed

    def _sound(self, entry: dict[str, Any]) -> bool:
        inputs, obj = entry.get("inputs"), entry.get("object")
        return (
            isinstance(inputs, dict)
            and bool(inputs)
            and all(
                isinstance(p, str) and p.startswith("/") and isinstance(d, str) and _SHA256.match(d)
                for p, d in inputs.items()
            )
            and isinstance(obj, str)
            and _SHA256.match(obj) is not None
            and (self.root / "objects" / obj).is_file()
        )

    def _entries(self, key: str, root: Path | None = None) -> list[dict[str, Any]]:
        try:
            entries = json.loads(self._manifest_path(key, root or self.root).read_text())
        except (OSError, ValueError):
            return []
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    def _key(self, argv: list[str], output: Path, compilers: list[str], env: Mapping[str, str] | None = None) -> str:
        return key_of(key_parts(argv, output, compilers, env))

    def _manifest_path(self, key: str, root: Path | None = None) -> Path:
        return (root or self.root) / "manifests" / key[:2] / f"{key}.json"

    def _hash(self, path: Path) -> str:
        stat = path.stat()
        known = self._hashes.get(path)
        if known and known[:2] == (stat.st_mtime_ns, stat.st_size):
            return known[2]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        self._hashes[path] = (stat.st_mtime_ns, stat.st_size, digest)
        return digest

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        # Parallel builds may store the same entry: each writes a file of its
        # own and renames it, so a reader sees a whole file or none.
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # Readable by the unprivileged user builds run as (mkstemp makes 0600 files).
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)


def key_parts(
    argv: list[str], output: Path, compilers: list[str], env: Mapping[str, str] | None = None
) -> tuple[list[str], list[str | None], dict[str, str | None]]:
    """What a compile is looked up by: its command line without its output, what its
    compilers say they are, and the variables that change a compile unseen. Two builds
    whose compiles miss each other's entries differ here, or in the files they read."""
    env = os.environ if env is None else env
    environment = {name: env.get(name) for name in COMPILER_ENVIRONMENT}
    return [a for a in argv if a != str(output)], [compiler_identity(c) for c in compilers], environment


def key_of(parts: tuple[list[str], list[str | None], dict[str, str | None]]) -> str:
    return hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()


def write_key_record(
    path: Path, compiles: list[tuple[str, list[str], Path, list[str]]], env: Mapping[str, str]
) -> None:
    """path: each compile's key and its parts (label, key, argv, compilers, environment), as
    JSON: diffing two builds' records shows why one missed the other's objects. Never
    fails the build."""
    records = []
    for label, argv, output, compilers in compiles:
        command, identities, environment = parts = key_parts(argv, output, compilers, env)
        records.append(
            {
                "step": label,
                "key": key_of(parts),
                "argv": command,
                "compilers": identities,
                "environment": environment,
            }
        )
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records, indent=1) + "\n")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _changed_since(path: Path, started: float) -> bool:
    stat = path.stat()
    return max(stat.st_mtime, stat.st_ctime) >= started


def parse_depfile(text: str, base: Path = Path("/")) -> list[Path]:
    """The prerequisites of a make rule as gcc/nvcc -MD write it; relative
    paths are the compiler's, so they are taken from base (its working directory)."""
    _, _, prerequisites = text.replace("\\\n", " ").partition(": ")
    words = [w.replace("\\ ", " ") for w in _DEP_SPLIT.split(prerequisites.strip()) if w]
    return sorted({(base / w).resolve() for w in words})


@cache
def compiler_identity(compiler: str) -> str | None:
    """What the compiler says it is (path and --version); a new compiler misses
    every entry. None when it cannot say: such compiles are not cached."""
    try:
        result = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0 or not result.stdout.strip():
        return None
    return f"{shutil.which(compiler) or compiler}\n{result.stdout}"


def cacheable(compilers: list[str]) -> bool:
    return all(compiler_identity(c) is not None for c in compilers)
