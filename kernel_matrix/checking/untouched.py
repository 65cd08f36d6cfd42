"""A variant folder comes out of `kernel-matrix test` (and the build's load check) as it went
in. Since kernels 0.18 the loader checks a variant's files against its metadata.json digest
on every load, local ones included (LOCAL_KERNELS): a file a kernel's suite writes into the
folder (anything but __pycache__/*.pyc, which the digest leaves out) makes every later load
fail, on the user's machine as on the Hub. The files are compared before and after by name,
size and modification time, which a write changes, so that a variant of gigabytes is not read
twice."""

from __future__ import annotations

import os
from pathlib import Path

from kernel_matrix.building.variant_dir import variant_files

Snapshot = dict[str, tuple[int, int]]


def snapshot(variant_dir: Path) -> Snapshot:
    """Every file of the variant the loader's digest covers (metadata.json too): its size and
    modification time, by relative POSIX path."""
    state = {}
    for path in variant_files(variant_dir):
        stat = path.stat()
        state[path.relative_to(variant_dir).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return state


def written(variant_dir: Path, before: Snapshot, during: str) -> str | None:
    """The line that says what `during` (what ran) wrote into variant_dir since `before`: the
    first file added, changed or removed (and how many more); None where nothing was."""
    try:
        after = snapshot(variant_dir)
    except OSError as exc:  # the folder itself went away
        return f"{variant_dir}: {during} removed or replaced the variant folder ({exc.strerror or exc})"
    added = sorted(after.keys() - before.keys())
    changed = sorted(name for name in after.keys() & before.keys() if after[name] != before[name])
    removed = sorted(before.keys() - after.keys())
    found = [(name, "wrote") for name in added] + [(name, "changed") for name in changed]
    found += [(name, "removed") for name in removed]
    if not found:
        return None
    name, what = found[0]
    more = f" (and {len(found) - 1} more file{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    return (
        f"{variant_dir / name.replace('/', os.sep)}: {during} {what} this file in the variant folder{more}; "
        "the kernels loader (>= 0.18) then refuses the variant, whose files no longer match its metadata.json "
        "digest: write elsewhere (pytest's tmp_path)"
    )
