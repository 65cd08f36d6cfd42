"""A kernel's build recipe, as the host hashes it: what decides which programs run inside
its compiles. The object cache is scoped by it (layout.cache_scope).

An object-cache entry's key and listed inputs are written by the build that made it.
Where build.toml's flags let a program run inside a compile (gcc's -wrapper, -B, -fplugin,
-specs or an @file of options; nvcc's -ccbin or --options-file; anything they pass on with
-X... or -W?,), that program can write any entry, also one for the key another build.toml
computes. So entries are read only by builds of the same recipe: a reverted build.toml
never reads what the build of the malicious one wrote. Within one recipe that runs only the
compiler, an entry's listed inputs are the compiler's own list, and can be believed.

The recipe is the sha256 of:
- kernel-matrix's version and the headers it puts on every compile (compat/, include/);
- build.toml's bytes;
- every file or folder of the kernel that a flag names (split at anything that is not part
  of a path: `-fplugin=./p.so`, `-wrapper,./w.sh`, `@flags.txt`, `-Btools`, `/src/...` as a
  container sees the kernel);
- where a flag can run a program (the list above), every file of the kernel folder but
  .git/ and build/: such a program can read any of them (a script hidden in a source file,
  found by a glob), so its entries are reused only by a byte-identical tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernel_matrix import PACKAGE_DIR, __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Flags that run, or choose, a program besides the compiler proper (gcc and nvcc), or read
# further flags from a file; matched at the start of a flag or of a part of a CMake
# generator expression ($<...:-wrapper>). A false match only costs reuse across commits.
_RUNS_PROGRAMS = re.compile(
    r"(?:^|[\s,:;=>\"'])(?:-wrapper|-B|--?specs|-fplugin|-iplugindir|-X|-W[apl],|-fuse-ld|-ccbin|--compiler-bindir"
    r"|--compiler-options|--linker-options|--nvlink-options|--archive-options|--options-file|-optf|--?run\b"
    r"|-save-temps|-no-integrated-cpp|@)"
)
# What separates the paths inside one flag ("-fplugin=./p.so", "-wrapper,./w.sh").
_NOT_PATH = re.compile(r"[^\w./+@~-]+")
# Where a build container sees the kernel (containers/cell.py mounts it there).
CONTAINER_KERNEL = "/src"
# Folders of the kernel left out of a whole-tree recipe: git's own, and the build folder of
# a kernel at a repository's root (what a build writes there would change the recipe).
_TREE_SKIP = (".git", "build")


def recipe_digest(kernel_dir: Path) -> str:
    """The sha256 (hex) of kernel_dir's build recipe, computed on the host from the files."""
    kernel_dir = kernel_dir.resolve()
    toml = kernel_dir / "build.toml"
    try:
        data = toml.read_bytes()
    except OSError:
        data = b""
    try:
        flags = list(_flags(tomllib.loads(data.decode())))
        strict = any(_RUNS_PROGRAMS.search(flag) for flag in flags)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        flags, strict = [], True  # the build refuses such a file; nothing it wrote is shared
    parts: dict[str, Any] = {
        "kernel-matrix": [__version__, _tree(PACKAGE_DIR / "compat"), _tree(PACKAGE_DIR / "include")],
        "build.toml": hashlib.sha256(data).hexdigest(),
        "named": {name: _describe(kernel_dir / name, kernel_dir) for name in sorted(_named(kernel_dir, flags))},
    }
    if strict:
        parts["tree"] = _tree(kernel_dir, skip=_TREE_SKIP)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _flags(value: Any, key: str = "") -> Iterator[str]:
    """Every string under a key ending in `flags` (cxx-flags, cuda-flags, hip-flags, ...)."""
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from _flags(inner, str(name))
    elif isinstance(value, list):
        for inner in value:
            yield from _flags(inner, key)
    elif isinstance(value, str) and key.endswith("flags"):
        yield value


def _named(kernel_dir: Path, flags: list[str]) -> set[str]:
    """The kernel's files and folders the flags name, relative to kernel_dir."""
    found: set[str] = set()
    for token in (t for flag in flags for t in _NOT_PATH.split(flag) if t):
        token = token.lstrip("@")
        # "-Btools", "-Iinclude": a one-letter option joined to its path.
        for candidate in {token, token[2:] if re.match(r"-[A-Za-z]", token) else ""} - {""}:
            if candidate == CONTAINER_KERNEL or candidate.startswith(CONTAINER_KERNEL + "/"):
                candidate = candidate[len(CONTAINER_KERNEL) :].lstrip("/") or "."
            path = Path(os.path.normpath(kernel_dir / candidate))  # lexically: links are described as links
            if path != kernel_dir and path.is_relative_to(kernel_dir) and os.path.lexists(path):
                found.add(path.relative_to(kernel_dir).as_posix())
    return found


def _describe(path: Path, kernel_dir: Path) -> Any:
    """A named path's content: a file's sha256, a folder's tree; a link's target text, and
    what it points at where that is in the kernel too."""
    if path.is_symlink():
        try:
            target = path.resolve()
        except (OSError, RuntimeError):  # a loop of links
            return {"link": os.readlink(path), "target": None}
        inside = target != kernel_dir and target.is_relative_to(kernel_dir) and target.exists()
        return {"link": os.readlink(path), "target": _describe(target, kernel_dir) if inside else None}
    if path.is_dir():
        return _tree(path)
    return _file_digest(path)


def _tree(root: Path, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Each file's sha256 and each link's target text under root, by relative path (links
    are not followed: what they point at is outside, or hashed where it is)."""
    entries: list[tuple[str, str]] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if here == root:
            dirs[:] = [d for d in dirs if d not in skip]
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if (here / d).is_symlink()]:
            path = here / name
            relative = path.relative_to(root).as_posix()
            entries.append((relative, f"link:{os.readlink(path)}" if path.is_symlink() else _file_digest(path)))
    return sorted(entries)


def _file_digest(path: Path) -> str:
    """A regular file's sha256; a FIFO or device is named, never read (it could block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "special"
        digest = hashlib.sha256()
        while chunk := f.read(1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
