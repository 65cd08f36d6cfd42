"""A content-addressed cache of compiled objects, for gcc and nvcc alike (the
idea of ccache's direct mode, small enough to read).

A compile is looked up by its command line (output path aside) and the identity
of its compilers. That key's manifest lists, for each object made with it, every
file the compile read (from the compiler's -MD output: the source and all its
headers) with its hash; a hit needs every file of one entry unchanged, and then
that object is copied instead of compiled. The kernel's folder and the others that
move between checkouts are named by name in both (portable.py), so a second checkout
of a kernel, with the same files, takes the first one's objects. One command line has several entries
when the files differ: builder images of four torch versions put their headers at
the same paths, so the binding's command line is the same in each.

So the torch-free CUDA file, compiled with the same nvcc, flags and headers,
compiles once per CUDA version and is reused by every torch version's build; a
binding compiled against torch's headers misses when those headers differ.

What an entry claims (its key and listed inputs) is written by the build that
made it, and a container build runs what the kernel's build.toml asks for (a
-wrapper runs any program): the cache cannot check the claim without compiling
again. So the claim is only ever believed by builds that could have made it:
caches are scoped (layout.cache_scope) by kernel, trust and recipe (the host's
digest of build.toml and the files its flags name, building/recipe.py), the host
picks the scopes a build reads and the one its new entries are merged into, and a
pull request's build never writes where a trusted build reads. Within one recipe
that runs only the compiler, an entry's inputs are the compiler's own list.

What an entry names is checked when it is used, by what the reader computes: the
object's name is a plain sha256 and its bytes hash to it, else the entry is
refused (`refusals` says how many, and why) and the file compiled. Within a
scope, newer entries go first and the oldest are dropped (MAX_ENTRIES per command
line, `prune` for the scope's size, MAX_RECIPES scopes per kernel and trust)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from kernel_matrix.building.portable import Places, listed_soundly
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
# Recipe scopes kept per kernel and trust level after a build: the one it used and the
# most recently used others (a branch built beside another recipe's).
MAX_RECIPES = 3
# A make rule's prerequisites are separated by unescaped whitespace.
_DEP_SPLIT = re.compile(r"(?<!\\)\s+")


_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
# A compile whose Step names no folders: every path as it is.
NOWHERE = Places()
# Why fetch refused an entry whose inputs matched: (one, several).
_REFUSED = {
    "misnamed": ("entry whose object is not named by a sha256", "entries whose object is not named by a sha256"),
    "mismatch": ("object whose bytes do not match its name", "objects whose bytes do not match their names"),
    "special": ("object that is not a plain file", "objects that are not plain files"),
}


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
        # Entries whose inputs matched but which were not used: (reason, another entry
        # hit) -> how many; fetch runs in the compiles' threads.
        self.refused: Counter[tuple[str, bool]] = Counter()
        self._lock = threading.Lock()
        # The folder holding this scope and its kernel's other recipes' (for_kernel's only).
        self._recipes: Path | None = None

    @staticmethod
    def for_kernel(
        cache_root: Path, kernel: str, *, trusted: bool, recipe: str, writes: Path | None = None
    ) -> ObjectCache:
        """The cache a build of `kernel` with `recipe` (recipe.recipe_digest of its folder,
        computed by the host) uses: its own scope at its trust level, and for an untrusted
        build (a pull request's) the kernel's trusted scope of the same recipe, read only."""
        also = () if trusted else (cache_scope(cache_root, kernel, trusted=True, recipe=recipe),)
        own = cache_scope(cache_root, kernel, trusted=trusted, recipe=recipe)
        cache = ObjectCache(own, also_reads=also, writes=writes)
        cache._recipes = own.parent
        return cache

    def fetch(
        self,
        argv: list[str],
        output: Path,
        compilers: list[str],
        env: Mapping[str, str] | None = None,
        places: Places = NOWHERE,
    ) -> bool:
        """Copy the cached object for this compile to output; False on a miss.
        env: the compile's environment (default: this process's); places: the folders
        named by name (portable.py), as the compile's Step gives them. An entry whose inputs
        match is used only if its object is named by a plain sha256 and its bytes hash to
        that name: else it is refused (counted for `refusals`) and the next one tried."""
        key = self._key(argv, output, compilers, env, places)
        refused: list[str] = []
        hit = False
        for root in self.reads:
            for entry in self._entries(key, root):
                if not self._inputs_match(entry, places):
                    continue
                if (data := self._checked_object(root, entry, refused)) is not None:
                    try:
                        output.write_bytes(data)  # the bytes just checked, not the file read again
                    except OSError:
                        break
                    hit = True
                    break
            if hit:
                break
        with self._lock:
            self.refused.update((reason, hit) for reason in refused)
        return hit

    def refusals(self) -> list[str]:
        """One line per reason entries were refused in this build, e.g. "cache: refused 1
        object whose bytes do not match its name; compiled"; [] where none was."""
        lines = []
        order = list(_REFUSED)
        for (reason, hit), count in sorted(self.refused.items(), key=lambda i: (order.index(i[0][0]), i[0][1])):
            singular, plural = _REFUSED[reason]
            outcome = "another entry's object used" if hit else "compiled"
            lines.append(f"cache: refused {count} {singular if count == 1 else plural}; {outcome}")
        return lines

    def _inputs_match(self, entry: dict[str, Any], places: Places) -> bool:
        """Every file the entry lists has the hash it lists, where this build finds it (a
        well-formed entry only)."""
        if not _inputs_sound(entry):
            return False
        # Pairs, not a mapping: two listed names of one file each keep their own digest.
        paths = [(places.path(name), digest) for name, digest in entry["inputs"].items()]
        if any(path is None for path, _ in paths):
            return False  # a folder this build has not
        try:
            return all(self._hash(path) == digest for path, digest in paths if path is not None)
        except OSError:
            return False  # an input vanished, or is no plain file

    @staticmethod
    def _checked_object(root: Path, entry: dict[str, Any], refused: list[str]) -> bytes | None:
        """The entry's object's bytes, where its name is a sha256 and they hash to it; else
        None, and why it is refused is added to refused (a vanished object is a miss)."""
        if not _object_named(entry):
            refused.append("misnamed")
            return None
        try:
            data = read_object(root / "objects", entry["object"])
        except FileNotFoundError:
            return None  # pruned meanwhile
        except OSError:
            refused.append("special")
            return None
        if data is None:
            refused.append("mismatch")
        return data

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
        places: Places = NOWHERE,
    ) -> None:
        """Record a compile's object and what it read (never fails the build).

        started: when the compile began. A file changed since then may not be
        what the compiler read, so such a compile is not recorded (as ccache does)."""
        try:
            read = parse_depfile(depfile.read_text(), base=cwd)
            if not read or any(_changed_since(p, started) for p in read):
                return
            inputs = {places.listed(p): self._hash(p) for p in read}
            key = self._key(argv, output, compilers, env, places)
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
        added. An object must hash to its name, and replaces only a file there that
        does not (a planted one); an entry must be well-formed and name such an
        object. New entries go first, replacing one with the same inputs; the
        oldest beyond MAX_ENTRIES go."""
        for path in sorted((staged / "objects").glob("*")):
            target = self.root / "objects" / path.name
            try:
                data = read_object(path.parent, path.name)
                if data is not None and not _holds(target.parent, target.name):
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
        return freed + self._prune_recipes()

    def _prune_recipes(self) -> int:
        """Keep this scope and the MAX_RECIPES - 1 most recently used other recipes' scopes
        of its kernel and trust level (a recipe no longer built is never read again); what
        else is there (an older layout's objects/ and manifests/) goes too. Returns the
        bytes freed."""
        if self._recipes is None or not self.root.is_dir():
            return 0
        with contextlib.suppress(OSError):
            os.utime(self.root)  # used now: the newest
        others = [p for p in self._recipes.iterdir() if p.name != self.root.name]
        recipes = sorted((p for p in others if _SHA256.match(p.name) and p.is_dir()), key=_mtime, reverse=True)
        freed = 0
        for path in [p for p in others if p not in recipes] + recipes[MAX_RECIPES - 1 :]:
            freed += sum(_size(f) for f in path.rglob("*")) if path.is_dir() and not path.is_symlink() else 0
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return freed

    def _sound(self, entry: dict[str, Any]) -> bool:
        """A well-formed entry naming an object of this scope (merge's check; fetch checks
        the same and the object's bytes, at the moment of use)."""
        return _inputs_sound(entry) and _object_named(entry) and (self.root / "objects" / entry["object"]).is_file()

    def _entries(self, key: str, root: Path | None = None) -> list[dict[str, Any]]:
        try:
            entries = json.loads(_read_plain(self._manifest_path(key, root or self.root)))
        except (OSError, ValueError):
            return []
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    def _key(
        self,
        argv: list[str],
        output: Path,
        compilers: list[str],
        env: Mapping[str, str] | None = None,
        places: Places = NOWHERE,
    ) -> str:
        return key_of(key_parts(argv, output, compilers, env, places))

    def _manifest_path(self, key: str, root: Path | None = None) -> Path:
        return (root or self.root) / "manifests" / key[:2] / f"{key}.json"

    def _hash(self, path: Path) -> str:
        stat_result = path.stat()
        known = self._hashes.get(path)
        if known and known[:2] == (stat_result.st_mtime_ns, stat_result.st_size):
            return known[2]
        # A listed input is the cache's word: followed where a link, never waited on.
        digest = hashlib.sha256(_read_plain(path, follow=True)).hexdigest()
        self._hashes[path] = (stat_result.st_mtime_ns, stat_result.st_size, digest)
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
    argv: list[str],
    output: Path,
    compilers: list[str],
    env: Mapping[str, str] | None = None,
    places: Places = NOWHERE,
) -> tuple[list[str], list[str | None], dict[str, str | None]]:
    """What a compile is looked up by: its command line without its output, the folders
    of places by name, what its compilers say they are, and the variables that change a
    compile unseen. Two builds whose compiles miss each other's entries differ here, or
    in the files they read."""
    env = os.environ if env is None else env
    environment = {name: env.get(name) for name in COMPILER_ENVIRONMENT}
    command = places.command([a for a in argv if a != str(output)])
    return command, [compiler_identity(c) for c in compilers], environment


def key_of(parts: tuple[list[str], list[str | None], dict[str, str | None]]) -> str:
    return hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()


def write_key_record(
    path: Path, compiles: list[tuple[str, list[str], Path, list[str], Places]], env: Mapping[str, str]
) -> None:
    """path: each compile's key and its parts (label, key, argv as run, without its output;
    the folders the key names by name; compilers, environment), as JSON: diffing two builds'
    records shows why one missed the other's objects. Never fails the build."""
    records = []
    for label, argv, output, compilers, places in compiles:
        _, identities, environment = parts = key_parts(argv, output, compilers, env, places)
        records.append(
            {
                "step": label,
                "key": key_of(parts),
                "argv": [a for a in argv if a != str(output)],
                "folders": [[str(folder), name] for folder, name in places.folders.items()],
                "compilers": identities,
                "environment": environment,
            }
        )
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records, indent=1) + "\n")


def _inputs_sound(entry: dict[str, Any]) -> bool:
    """An entry's inputs: absolute paths or a folder's by name (portable.py), each with a sha256."""
    inputs = entry.get("inputs")
    return (
        isinstance(inputs, dict)
        and bool(inputs)
        and all(listed_soundly(p) and isinstance(d, str) and _SHA256.match(d) for p, d in inputs.items())
    )


def _object_named(entry: dict[str, Any]) -> bool:
    """An entry's object is a plain sha256: one name in the scope's objects/, never a path."""
    obj = entry.get("object")
    return isinstance(obj, str) and _SHA256.match(obj) is not None


def read_object(objects: Path, name: str) -> bytes | None:
    """The bytes of objects/name where name is a sha256 and they hash to it; None where
    they do not. OSError where it is not a plain file or cannot be read."""
    if not _SHA256.match(name):
        return None
    data = _read_plain(objects / name)
    return data if hashlib.sha256(data).hexdigest() == name else None


def _read_plain(path: Path, *, follow: bool = False) -> bytes:
    """A plain file's bytes: a link is not followed (unless follow), a FIFO or device is
    refused rather than waited on (OSError). What the cache holds may have been put there
    by anyone who can write its folder."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a plain file")
        return f.read()


def _holds(objects: Path, name: str) -> bool:
    """Whether objects/name is there and hashes to its name."""
    try:
        return read_object(objects, name) is not None
    except OSError:
        return False


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
