"""The hash of everything a compiled variant is made from, recorded in its metadata.json
(provenance.inputs) so that a later build can tell whether a published variant is the one
it would make (releasing/reuse.py).

What goes in: the plan's source hash (the variant, torch, each section's capabilities,
build.toml, every source and package file: what names the op namespace), the recipe
digest (the files build.toml's flags name), the toolchain (torch, Python, the C++
compiler and nvcc by version, SOURCE_DATE_EPOCH, each dependency's pin and digest), and
kernel-matrix itself (the bytes of its package: another kernel-matrix may build other
bytes). What stays out: where and when it is built, which the build never records."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_matrix import PACKAGE_DIR
from kernel_matrix.building.recipe import recipe_digest

if TYPE_CHECKING:
    from kernel_matrix.building.native_build import BuildPlan

# Files of kernel-matrix's package that decide what it builds (code, templates, headers).
_PACKAGE_SUFFIXES = {".py", ".in", ".h", ".hpp", ".cpp", ".yaml", ".toml", ".json"}


def build_inputs(plan: BuildPlan, toolchain: dict[str, str]) -> str:
    """The sha256 (hex) of what plan's variant is built from; toolchain: the record
    metadata.json's provenance keeps (toolchain_record and the dependencies')."""
    record = {
        "sources": plan.source_hash(),
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
    """The sha256 of kernel-matrix's own package files, by relative path (once per process)."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and path.suffix in _PACKAGE_SUFFIXES and "__pycache__" not in path.parts:
            digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
