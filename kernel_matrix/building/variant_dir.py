"""The directory a variant is published as (what `kernels` >= 0.14 loads):

    build/<variant>/__init__.py, other torch-ext/<name>/*.py
                    _ops.py                      (binds the unique op namespace)
                    _<name>_<backend>_<hash>.abi3.so
                    metadata.json                (with a sha256 digest of every file)

No `<name>/` compat folder: kernel-builder stopped generating it
(huggingface/kernels#736); `kernel-matrix test` makes `import <name>` the
variant package from a temporary folder instead (testing.py).

A variant is assembled in a staging directory beside its final place and
renamed into place, so a failed or interrupted build never leaves a partial one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from kernel_matrix import __version__
from kernel_matrix.building.provenance import GitState, builder_git_state
from kernel_matrix.errors import ConfigError
from kernel_matrix.hostfiles import write_file
from kernel_matrix.layout import METADATA, SIGNATURE

# metadata.json's build-layout: the variant's files as they are (kernels-common
# config/mod.rs BuildLayout). kernel-builder's other layout, "zip" (the Python package as
# <id>.zip beside the library, loaded by kernels >= 0.19 only), is not built here.
BUILD_LAYOUT = "files"
# metadata.json's kernels-minver, the oldest loader that loads the variant (the loader
# refuses it below), derived as kernels-common's Build::required_kernels_version does: the
# baseline, the first loader that fetches kernel-depends where the variant has any (and the
# first that imports the zip layout, for a zip build).
KERNELS_BASELINE = "0.14.0"
KERNELS_KERNEL_DEPENDS = "0.17.0"
KERNELS_ZIP_LAYOUT = "0.19.0"

# What the digest leaves out, as the kernels loader does.
_UNHASHED_DIRS = {"__pycache__"}
_UNHASHED_SUFFIXES = {".pyc"}


def render_template(template: str, **values: str) -> str:
    text = resources.files("kernel_matrix").joinpath(f"templates/{template}").read_text()
    return Template(text).substitute(values)


def package_files(package_src: Path, kernel_dir: Path, suffixes: frozenset[str]) -> list[Path]:
    """The files of the kernel's Python package (torch-ext/<name>/) that a variant
    ships (those ending in one of suffixes: BuildConfig.package_suffixes), in order.

    Links are followed only to regular files inside the kernel directory: a
    link to a host file would otherwise be copied into the variant and published."""
    root = kernel_dir.resolve()
    found = []
    for directory, dirs, files in os.walk(package_src, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in _UNHASHED_DIRS)
        for name in [*dirs, *files]:
            path = Path(directory) / name
            if path.is_symlink() and path.is_dir():
                # kernel-builder's noarch setup.py walks the package with rglob, which drops a
                # linked folder without a word (the import fails later): refused here, saying so.
                raise ConfigError(
                    f"{path}: a link to a folder, which is not followed (kernel-builder's build drops it): "
                    "copy the folder into the package, or link its files one by one"
                )
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                raise ConfigError(f"{path}: a link out of {root}: the package may only hold the kernel's own files")
        found += [Path(directory) / f for f in files if Path(f).suffix not in _UNHASHED_SUFFIXES]
    # The package folder itself (or torch-ext/) may be a link: every file must resolve inside.
    for path in found:
        if not path.resolve().is_relative_to(root):
            raise ConfigError(
                f"{path}: resolves out of {root} (a linked folder): the package may only hold the kernel's own files"
            )
    return sorted(p for p in found if p.is_file() and p.suffix in suffixes)


def write_python_package(
    variant_dir: Path,
    package_src: Path,
    *,
    name: str,
    module: str,
    kernel_dir: Path,
    suffixes: frozenset[str],
    ops_template: str = "_ops.py.in",
) -> None:
    """Copy the kernel's Python package (subpackages too, and the data files its
    pyext names) and generate _ops.py from ops_template: a torch extension's (_ops.py.in),
    a Python-only kernel's (_ops_noarch.py.in: no library) or a tvm-ffi library's."""
    for source in package_files(package_src, kernel_dir, suffixes):
        target = variant_dir / source.relative_to(package_src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    write_file(variant_dir / "_ops.py", render_template(ops_template, module=module))


def variant_files(variant_dir: Path) -> list[Path]:
    """Every file of a variant, metadata.json included, but what the loader's digest
    leaves out (__pycache__, .pyc, and the signature beside metadata.json, which signs
    it), in order."""
    return [
        path
        for path in sorted(variant_dir.rglob("*"))
        if path.is_file()
        and not _UNHASHED_DIRS & set(path.relative_to(variant_dir).parts)
        and path.suffix not in _UNHASHED_SUFFIXES
        and path.relative_to(variant_dir).as_posix() != SIGNATURE
    ]


def digest_files(variant_dir: Path) -> dict[str, str]:
    """sha256 (base64) of every file but metadata.json, keyed by relative POSIX path."""
    digests = {}
    for path in variant_files(variant_dir):
        relative = path.relative_to(variant_dir).as_posix()
        if relative != METADATA:
            digests[relative] = base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode("ascii")
    return digests


def kernels_minver(kernel_depends: list[dict[str, Any]] | None) -> str:
    """metadata.json's kernels-minver for a variant of BUILD_LAYOUT with these kernel-depends
    (the kernel's and its backend's)."""
    return KERNELS_KERNEL_DEPENDS if kernel_depends else KERNELS_BASELINE


def write_metadata(
    variant_dir: Path,
    *,
    name: str,
    module: str,
    version: int,
    license: str,
    backend: str,
    archs: list[str] | None,
    kernel_git: GitState | None,
    python_depends: list[str],
    kernel_depends: list[dict[str, Any]] | None = None,
    upstream: str | None = None,
    source: str | None = None,
    toolchain: dict[str, str] | None = None,
    inputs: str | None = None,
) -> dict[str, Any]:
    """toolchain: provenance.toolchain(), for compiled variants. The git states
    (the kernel's and kernel-matrix's) and the toolchain are what a rebuild
    needs to give the same bytes; nothing here depends on where or when it is built.
    inputs: the hash of all of them (building/inputs.py), what a later build compares."""
    builder_git = builder_git_state()
    metadata = {
        "name": name,
        "id": module,
        "version": version,
        # kernel-builder's keys, in its order (kernels-common metadata.rs `Metadata`).
        "build-layout": BUILD_LAYOUT,
        "kernels-minver": kernels_minver(kernel_depends),
        "license": license,
        **({"upstream": upstream} if upstream else {}),
        **({"source": source} if source else {}),
        "python-depends": python_depends,
        "kernel-depends": kernel_depends or [],
        "backend": {"type": backend, **({"archs": archs} if archs is not None else {})},
        "digest": {"algorithm": "sha256", "files": digest_files(variant_dir)},
        "provenance": {
            # The loader reads kernel-builder's git state beside its version.
            "kernel-builder": {"version": f"kernel-matrix {__version__}", **(_git(builder_git) if builder_git else {})},
            **({"kernel": _git(kernel_git)} if kernel_git else {}),
            **({"toolchain": toolchain} if toolchain else {}),
            **({"inputs": inputs} if inputs else {}),
        },
    }
    write_file(variant_dir / METADATA, json.dumps(metadata, indent=2, sort_keys=False) + "\n")
    return metadata


def _git(state: GitState) -> dict[str, Any]:
    return {"commit": state.commit, "dirty": state.dirty}


@contextmanager
def staged(final: Path) -> Iterator[Path]:
    """Yield an empty staging directory; on success it replaces `final` whole.

    On any exception (or interrupt) the staging directory is removed and
    `final`, old or absent, is left as it was.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    # Named first and made inside the try, not by mkdtemp before it: an interrupt that lands
    # just after the folder is made (Ctrl-C as a build starts) still removes it. Only a folder
    # this call made is removed: a name already taken is refused by mkdir, never cleaned up.
    stage = final.parent / f".{final.name}.staging-{secrets.token_hex(8)}"
    made = True
    try:
        try:
            stage.mkdir(mode=0o700)
        except FileExistsError:
            made = False
            raise
        yield stage
        replace_dir(stage, final)
    finally:
        if made:
            shutil.rmtree(stage, ignore_errors=True)


def replace_dir(new: Path, final: Path) -> None:
    """Move the directory new to final, replacing any old final whole."""
    # Directories cannot be renamed over non-empty ones: move the old one aside
    # first, so that `final` is never a mix of two builds.
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
        os.replace(final, old / final.name)
    os.replace(new, final)
    os.chmod(final, 0o755)  # mkdtemp makes 0700 directories
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
