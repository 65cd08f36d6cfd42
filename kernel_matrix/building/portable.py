"""How the object cache names the folders that sit elsewhere in another checkout or
install — the kernel, torch's site-packages, Python's headers, kernel-matrix's own, a
dependency's — so that two checkouts of one kernel share compiled objects (what
ccache's base_dir is for: several clones, CI workspaces, test folders).

Such a folder is named by its place in the build's path map (compile.PathMap) and the
name the compile records for it: a command line holds `\\0<i>:<name>\\0` where it held
the folder (no argument can hold a NUL, so nothing else reads the same), and a file the
compile read under it is listed as `$<i>/<path inside>`.

This is sound because the compile itself records these folders only by those names
(-ffile-prefix-map): an object compiled in /a/relu is byte for byte the one compiled in
/b/relu from the same files (tests/building/test_reproducible.py). Whether the files are the same
is still checked, file by file, where this build finds them, when an entry is used."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

# Where an argument can start a path: at its start, after '=' or ',' (-ffile-prefix-map=,
# -Xcompiler=, -Wl,) or after a one-letter option (-I/x). A folder's name inside a longer
# path (/a/x/k holding /x/k) is never taken for the folder.
_PATH_START = re.compile(r"(?:^|(?<=[=,])|(?<=^-[A-Za-z]))(?=/)")
# What may follow a folder in an argument for it to be that folder (not /x/kernel_matrix for /x/kernel).
_FOLDER_END = "/=,"
_LISTED = re.compile(r"\$(\d+)/(.+)")
# A folder's token in a keyed argument (Places.argument writes it).
_TOKEN = re.compile("\0\\d+:([^\0]*)\0")
# A prefix map of a named folder, as compile.PathMap writes it for gcc and for nvcc's host compiler.
_NAMED_PREFIX_MAP = re.compile(r"(?:-Xcompiler=)?-ffile-prefix-map=\0")


class Places:
    """folders: each folder and the name the compile records for it, in the build's
    (fixed) order; {} names nothing, and every path stays as it is."""

    def __init__(self, folders: Mapping[Path, str] | None = None):
        self.folders = dict(folders or {})
        named = [(str(f).rstrip("/"), i, name) for i, (f, name) in enumerate(self.folders.items())]
        # The longest first: /x/kernel_matrix is tried before /x/kernel.
        self._folders = sorted((f for f in named if f[0]), key=lambda f: len(f[0]), reverse=True)
        self._by_index = {i: folder for folder, i, _ in self._folders}

    def argument(self, arg: str) -> str:
        """arg with each folder it names, where a path starts, replaced by the folder's token."""
        parts: list[str] = []
        done = 0
        for start in (m.start() for m in _PATH_START.finditer(arg)):
            if start < done:
                continue
            for folder, i, name in self._folders:
                end = start + len(folder)
                if arg.startswith(folder, start) and (end == len(arg) or arg[end] in _FOLDER_END):
                    parts += [arg[done:start], f"\0{i}:{name}\0"]
                    done = end
                    break
        return "".join([*parts, arg[done:]])

    def command(self, argv: list[str]) -> list[str]:
        """argv as the cache keys it: each argument's folders named, and each run of adjacent
        prefix maps of named folders in one order. PathMap writes its maps together, ordered by
        the folders' lengths (gcc needs /x/kernel_matrix's map tried before /x/kernel's), which
        differ between checkouts; each order maps every folder to its name, so the object is
        the same. A map elsewhere on the line (build.toml's own) keeps its place."""
        command = [self.argument(a) for a in argv]
        start = 0
        while start < len(command):
            end = start
            while end < len(command) and _NAMED_PREFIX_MAP.match(command[end]):
                end += 1
            command[start:end] = sorted(command[start:end])
            start = end + 1
        return command

    def listed(self, path: Path) -> str:
        """How a file the compile read is listed: `$<i>/<path inside>` under a folder, else its path."""
        text = str(path)
        for folder, i, _ in self._folders:
            if text.startswith(folder + "/"):
                return f"${i}/{text[len(folder) + 1 :]}"
        return text

    def path(self, listed: str) -> Path | None:
        """The file a listed name is in this build; None where it names a folder this build
        has not, or climbs out of it."""
        if listed.startswith("/"):
            return Path(listed)
        match = _LISTED.fullmatch(listed)
        if match is None or int(match[1]) not in self._by_index:
            return None
        inside = PurePosixPath(match[2])
        if inside.is_absolute() or any(part in ("..", ".", "") for part in match[2].split("/")):
            return None
        return Path(self._by_index[int(match[1])]) / inside


def shown(arg: str) -> str:
    """A keyed argument for people: each folder's token as <name>."""
    return _TOKEN.sub(r"<\1>", arg)


def listed_soundly(name: object) -> bool:
    """A listed input's name is a path or `$<i>/<path inside>` (what `Places.listed` writes)."""
    return isinstance(name, str) and (name.startswith("/") or _LISTED.fullmatch(name) is not None)
