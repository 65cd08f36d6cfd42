"""A build.toml of edition 4 or 5 rewritten as edition 6, as kernel-builder 0.19's
`update-build` rewrites it (kernels 0.19.1's kernels-common: compat.rs reads the old
edition, v4.rs/v5.rs upgrade it to the in-memory Build, v6.rs writes that back).

Written here from kernels-common's source, not from kernel-matrix's reader, so the two can
disagree: a test that compares the edition 6 file with its original then says which is wrong."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import tomli_w

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# v4.rs and v5.rs `From<Kernel> for super::Kernel`: every backend-tagged section is C++ code.
LANGUAGE_OF_BACKEND = {
    "cpu": "cpp-cpu",
    "cuda": "cpp-cuda",
    "metal": "cpp-metal",
    "rocm": "cpp-rocm",
    "xpu": "cpp-xpu",
}


def to_edition_6(text: str) -> str:
    """The edition 6 file of an edition 4 or 5 build.toml's text (written by a TOML writer:
    comments are not kept, as update-build keeps none)."""
    old = tomllib.loads(text)
    assert old["general"].get("edition") in (None, 5), "only editions 4 and 5 are upgraded"
    general: dict[str, Any] = {}
    for key, value in old["general"].items():
        if key != "edition":
            general[key] = value
        if key == "version":  # where update-build writes it (v6.rs General's field order)
            general["edition"] = 6
    # v4.rs and v5.rs set BuildLayout::Files, and v6.rs writes the field (it has no default skip).
    general["build-layout"] = "files"
    new: dict[str, Any] = {"general": general}
    for key, value in old.items():
        if key == "kernel":
            new["kernel"] = {name: _section(section) for name, section in value.items()}
        elif key != "general":
            new[key] = value
    return tomli_w.dumps(new)


def _section(section: dict[str, Any]) -> dict[str, Any]:
    """A [kernel.*] section: `backend = "X"` becomes `language = "cpp-X"`, the rest as it is."""
    converted = {"language": LANGUAGE_OF_BACKEND[section["backend"]]}
    converted.update((key, value) for key, value in section.items() if key != "backend")
    return converted


def edition_6_copy(kernel_dir: Path, destination: Path, *, with_tests: bool = False) -> Path:
    """A copy of kernel_dir (its sources, package and, if asked, its tests) at destination
    with its build.toml rewritten as edition 6; destination."""
    skip = ["__pycache__", "build", "benchmarks", *([] if with_tests else ["tests"])]
    shutil.copytree(kernel_dir, destination, ignore=shutil.ignore_patterns(*skip))
    toml = destination / "build.toml"
    toml.write_text(to_edition_6(toml.read_text()))
    return destination
