"""build.toml edition 6 (kernels 0.19.1's kernels-common, config/v6.rs): what it adds to
edition 5, what kernels-common refuses beyond its keys, and the edition 5 twin kernel-matrix
builds from it.

Edition 6 tags a [kernel.*] section by `language` (cpp-cuda, rust-cpu, ...) instead of
`backend`, adds `[general] build-layout` and the [mlx-noarch] framework. Its C++ sections
are edition 5's sections of one backend, key for key, so an edition 6 file of C++ sections
is mapped onto edition 5's model and builds exactly what its edition 5 twin builds."""

from __future__ import annotations

import copy
from typing import Any

from kernel_matrix.config.sourcelines import Problems, toml_key_position

# Every `language` of a [kernel.*] section, and the backend its code is built for (kernels-common
# mod.rs Kernel::backend).
LANGUAGE_BACKENDS = {
    "cpp-cpu": "cpu",
    "cpp-cuda": "cuda",
    "cpp-metal": "metal",
    "cpp-rocm": "rocm",
    "cpp-xpu": "xpu",
    "rust-cpu": "cpu",
    "rust-cuda-oxide": "cuda",
    "rust-cutile": "cuda",
}
RUST_LANGUAGES = ("rust-cpu", "rust-cuda-oxide", "rust-cutile")
# The first CUDA version with tileiras, cuTile's compiler (mod.rs MIN_TILEIRAS_VERSION).
MIN_TILEIRAS_VERSION = "13.2"
# Keys only edition 6 has: kernels-common's v4.rs and v5.rs (deny_unknown_fields) refuse them.
EDITION_6_ONLY = [("general", "build-layout"), ("mlx-noarch",)]


def as_edition_5(raw: dict[str, Any]) -> dict[str, Any]:
    """The edition 5 twin of an edition 6 file that has no Rust section (kernels-common's
    v5 -> v6 upgrade, v5.rs and v6.rs, in reverse): a section's `language = "cpp-X"` is
    `backend = "X"`, and a [tvm-ffi] without src has none (`src = []`). The rest is the same
    keys in both editions; `edition` stays 6, and build-layout is kept (edition 5's is files)."""
    twin = copy.deepcopy(raw)
    for section in (twin.get("kernel") or {}).values():
        section["backend"] = LANGUAGE_BACKENDS[section.pop("language")]
    if isinstance(twin.get("tvm-ffi"), dict):
        twin["tvm-ffi"].setdefault("src", [])
    return twin


def check(problems: Problems, text: str, raw: dict[str, Any]) -> None:
    """What kernels-common refuses in an edition 6 file beyond its keys (v6.rs TryFrom: an
    [mlx-noarch] kernel for a backend other than Metal, a Rust section without [tvm-ffi]),
    and what kernel-matrix does not build: the zip build layout, Rust sections (a line
    each, at its `language`)."""
    general = raw.get("general")
    if isinstance(general, dict) and general.get("build-layout") == "zip":
        problems.add(
            *toml_key_position(text, ("general", "build-layout")),
            "'general.build-layout' = 'zip': kernel-matrix builds the files layout only, "
            'not the Python package as <id>.zip beside the library; set build-layout = "files" or leave it out',
        )
    backends = general.get("backends") if isinstance(general, dict) else None
    other = next((b for b in backends if b != "metal"), None) if isinstance(backends, list) else None
    if "mlx-noarch" in raw and other is not None:
        problems.add(
            *toml_key_position(text, ("general", "backends")),
            f"general.backends names '{other}': [mlx-noarch] only supports the `metal` backend (kernels-common)",
        )
    sections = raw.get("kernel")
    for name, section in sections.items() if isinstance(sections, dict) else []:
        language = section.get("language") if isinstance(section, dict) else None
        if language not in RUST_LANGUAGES:
            continue
        where = toml_key_position(text, ("kernel", name, "language"))
        if "tvm-ffi" not in raw:
            problems.add(
                *where,
                f'[kernel.{name}] language = "{language}": Rust kernels require a `[tvm-ffi]` framework '
                "(kernels-common)",
            )
        else:
            problems.add(
                *where,
                f'[kernel.{name}] language = "{language}": kernel-matrix does not build Rust kernels (kernel-builder '
                "builds them with the Rust toolchains of its Nix flake, which kernel-matrix's builder images do not "
                "have); build this kernel with kernel-builder, or leave this section out",
            )
