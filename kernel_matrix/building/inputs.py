"""The hash of everything a compiled variant is made from, recorded in its metadata.json
(provenance.inputs) so that a later build can tell whether a published variant is the one
it would make (releasing/reuse.py).

What goes in: the plan's source hash (the variant, torch, each section's capabilities,
build.toml, every source and package file: what names the op namespace), every other file
of the kernel but its tests and benchmarks (a header reached by #include alone), the
recipe digest (the files build.toml's flags name), the toolchain (torch, Python, the C++
compiler and nvcc by version, SOURCE_DATE_EPOCH, each dependency's pin and digest), and
kernel-matrix itself (every file of its package, its builder image's recipe included:
another kernel-matrix may build other bytes). What stays out: where and when it is built,
which the build never records."""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_matrix import PACKAGE_DIR
from kernel_matrix.building.recipe import recipe_digest

if TYPE_CHECKING:
    from kernel_matrix.building.native_build import BuildPlan

# The kernel's folders that are not built from: its tests and benchmarks, git's, build output.
KERNEL_SKIP = ("tests", "benchmarks", ".git", "build")


def build_inputs(plan: BuildPlan, toolchain: dict[str, str]) -> str:
    """The sha256 (hex) of what plan's variant is built from; toolchain: the record
    metadata.json's provenance keeps (toolchain_record and the dependencies')."""
    record = {
        "sources": plan.source_hash(),
        # Every file of the kernel, not only those build.toml names: a header reached by
        # #include alone changes the library too.
        "tree": file_digests(plan.kernel_dir, skip=KERNEL_SKIP),
        "recipe": recipe_digest(plan.kernel_dir),
        "capabilities": plan.capabilities,
        # The tools by version; not the builder image's id, which is this machine's own
        # (every CI job makes its image again): the image's recipe is kernel-matrix's.
        "toolchain": {name: value for name, value in toolchain.items() if name != "builder-image"},
        "kernel-matrix": kernel_matrix_digest(),
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


@cache
def kernel_matrix_digest(package_dir: Path = PACKAGE_DIR) -> str:
    """The sha256 of kernel-matrix's own package, every file (its builder image's recipe
    too), once per process."""
    return hashlib.sha256(json.dumps(file_digests(package_dir)).encode()).hexdigest()


def file_digests(root: Path, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Each file's content hash under root, by relative path, but __pycache__ and the
    top-level folders in skip; a link's target text (never what it points at: it may be a
    device or a host file, and the build refuses links out anyway)."""

    def digest(p: Path) -> str:
        data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
        return hashlib.sha256(data).hexdigest()

    return [
        (p.relative_to(root).as_posix(), digest(p))
        for p in sorted(root.rglob("*"))
        if (p.is_symlink() or p.is_file()) and "__pycache__" not in p.parts and p.relative_to(root).parts[0] not in skip
    ]
