"""The `kernels` loader as kernel-matrix uses it, for every release it supports (0.17, 0.18,
0.19): its public API where it has one (`kernels.Metadata`), and the few internals it has
none for, whose module paths differ between releases: kernels 0.19 moved every module under
`kernels._internals`, with no shims left behind. This module is the only one that knows
those paths; the rest of kernel-matrix reaches the loader through it.

Importing it imports `kernels` (a quarter of a second): import it where it is used, as the
commands that never ask the loader anything should not pay for it."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
from importlib import resources
from types import ModuleType
from typing import Any

import kernels
from kernels import Metadata as Metadata  # public in every supported release

# The digest types live in the loader's Rust module, kernels._rust, in every supported
# release; kernels does not export them.
from kernels._rust import Digest as Digest
from kernels._rust import DigestAlgorithm as DigestAlgorithm
from kernels._rust import DigestValidationError as DigestValidationError

# Where kernels >= 0.19 keeps the modules that were kernels.<name> before.
_INTERNALS = "kernels._internals"


def version() -> str:
    """The installed loader's version, e.g. "0.19.1"."""
    return str(kernels.__version__)


def internal(name: str) -> ModuleType:
    """The loader's module `name` (variants, archs, ...): kernels._internals.<name> from
    0.19 on, kernels.<name> before."""
    package = _INTERNALS if importlib.util.find_spec(_INTERNALS) is not None else "kernels"
    return importlib.import_module(f"{package}.{name}")


def parse_variant(name: str) -> Any:
    """The loader's parse of a variant name (ValueError where it reads none): what
    get_kernel compares with the running torch, CUDA and Python."""
    return internal("variants").parse_variant(name)


def arch_parts(parsed: Any) -> tuple[Any, str, str]:
    """A parsed arch variant's backend, CPU and OS: kernels 0.19 keeps them in .backend and
    .system, older releases in .arch."""
    where = parsed.system if hasattr(parsed, "system") else parsed.arch
    backend = parsed.backend if hasattr(parsed, "system") else parsed.arch.backend
    return backend, str(where.platform), str(where.os)


def is_tvm_ffi(framework: object) -> bool:
    """Whether a parsed variant's framework is tvm-ffi (the loader picks such a variant
    only where apache-tvm-ffi of its version is installed)."""
    return isinstance(framework, internal("variants").TvmFfi)


def legacy_variant_name(name: str) -> str | None:
    """`name` in the legacy form kernel-matrix (and kernel-builder) names variants in, as
    the installed loader reads it: a name of kernels 0.19's new form
    (torch-2.15-cxx11-cuda-13.2-cpython-3.11-abi3-x86_64-linux) as the legacy name of the
    build that serves it (torch215-cxx11-cu132-x86_64-linux: abi3 for every CPython from 3.9
    on, so for 3.11 too). None where the loader reads no variant in it, or one no legacy
    name covers (abi3t, free-threaded Python)."""
    variants = internal("variants")
    try:
        parsed = variants.parse_variant(name)
    except ValueError:
        return None
    python = getattr(parsed, "python", None)
    if python is None or getattr(python, "legacy", True):  # a loader before 0.19, or the legacy form
        return str(parsed.variant_str)
    if python.abi != "abi3":
        return None
    legacy = variants.ArchVariant(
        framework=_as_legacy(parsed.framework),
        backend=_as_legacy(parsed.backend),
        python=variants.Python(),  # the legacy form's implicit cpython-3.9-abi3
        system=parsed.system,
    )
    return str(legacy.variant_str)


def _as_legacy(part: Any) -> Any:
    """A framework or backend of a parsed variant, to be written in the legacy form (those
    without a version, CPU, have no form to choose)."""
    fields = {f.name for f in dataclasses.fields(part)} if dataclasses.is_dataclass(part) else set()
    return dataclasses.replace(part, legacy=True) if "legacy" in fields else part


def python_depends_table() -> dict[str, Any]:
    """The loader's table of the python-depends it knows: {"general": {name: info},
    "backends": {backend: {name: info}}} (python_depends.json, beside its variants module)."""
    package = internal("variants").__name__.rpartition(".")[0]
    table: dict[str, Any] = json.loads(resources.files(package).joinpath("python_depends.json").read_text())
    return table
