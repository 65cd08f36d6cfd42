"""Which CUDA capabilities a variant is compiled for."""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from kernel_matrix import data

# The format is config.capability's; CAPABILITY is named here too for the callers
# that check a list of targets (--cuda-capabilities, verify's metadata.json).
from kernel_matrix.config.capability import CAPABILITY as CAPABILITY
from kernel_matrix.config.capability import PTX_SUFFIX


def default_capabilities(cuda_version: str, table: list[dict[str, Any]] | None = None) -> list[str]:
    """The row of `table` (default: data/cuda_capabilities.yaml) for cuda_version."""
    for row in table if table is not None else data.load("cuda_capabilities"):
        if Version(cuda_version) >= Version(row["min_cuda"]):
            return list(row["capabilities"])
    return []


def select_capabilities(requested: list[str] | None, cuda_version: str, defaults: list[str] | None = None) -> list[str]:
    """A [kernel.*] section's cuda-capabilities against the CUDA version's
    defaults (or the given ones: a matrix cell's), as kernel-builder's
    `cuda_archs_loose_intersection` does it: for each default target, the
    highest requested capability of the same major that is not above it
    ("8.0" serves an 8.6 target; "9.0a" is kept where 9.0 is a target).
    A "+PTX" capability ("9.0+PTX") also serves targets of later majors (its
    PTX is JIT-compiled there) and keeps its suffix: gencode_flags embeds its PTX.
    A target may be architecture-specific itself (--cuda-capabilities 9.0a):
    requested capabilities are compared with its base (9.0).
    No request: the defaults. Ascending; an empty result is returned as is
    (the caller reports it against build.toml)."""
    defaults = default_capabilities(cuda_version) if defaults is None else defaults
    if requested is None:
        return sorted(set(defaults), key=capability_order)
    with_ptx = {strip_ptx(c) for c in requested if c.endswith(PTX_SUFFIX)}
    requested = [strip_ptx(c) for c in requested]
    chosen = set()
    for target in defaults:
        serving = [
            c
            for c in requested
            if (_base(c).major == _base(target).major or c in with_ptx) and _base(c) <= _base(target)
        ]
        if serving:
            chosen.add(max(serving, key=capability_order))
    # Never below what this CUDA version's nvcc compiles: kernel-builder would pick 7.0
    # for a 7.5 target, which nvcc 13 cannot build.
    toolkit = data.load("cuda_toolkits").get(cuda_version)
    if toolkit:
        chosen = {c for c in chosen if _base(c) >= Version(toolkit["min_capability"])}
    # Architecture-specific capabilities (9.0a, 10.0f) replace their plain target.
    for capability in requested:
        if capability[-1:] in ("a", "f") and _base(capability) in {_base(t) for t in defaults}:
            chosen.discard(str(_base(capability)))
            chosen.add(capability)
    return sorted((c + PTX_SUFFIX if c in with_ptx else c for c in chosen), key=capability_order)


def strip_ptx(capability: str) -> str:
    return capability.removesuffix(PTX_SUFFIX)


def _base(capability: str) -> Version:
    return Version(strip_ptx(capability).rstrip("af"))


def capability_order(capability: str) -> tuple[Version, str]:
    return (_base(capability), capability)


def gencode_flags(capabilities: list[str], *, ptx_for_highest: bool = True) -> list[str]:
    """nvcc flags: machine code for each capability, plus PTX of every "+PTX" one
    (kernel-builder's set_gencode_flags_for_srcs) and, with ptx_for_highest, of the
    highest: kernel-builder's default list ends "12.1+PTX", so a section without
    cuda-capabilities gets it, but a section's own list is intersected with the
    defaults stripped of "+PTX" and gets PTX only where it writes "+PTX"."""
    flags = []
    ptx = [strip_ptx(c) for c in capabilities if c.endswith(PTX_SUFFIX)]
    if capabilities and ptx_for_highest:
        ptx.append(strip_ptx(capabilities[-1]))
    for cap in capabilities:
        sm = strip_ptx(cap).replace(".", "")
        flags.append(f"-gencode=arch=compute_{sm},code=sm_{sm}")
        if strip_ptx(cap) in ptx:
            flags.append(f"-gencode=arch=compute_{sm},code=compute_{sm}")
    # Once each: the binding gets every section's list, where 9.0 and 9.0+PTX may meet.
    return list(dict.fromkeys(flags))


def stable_abi_define(version: str) -> str:
    """torch's TORCH_TARGET_VERSION for a stable-ABI build against torch `version`
    ("2.10" -> 0x20a000000000000), formatted as kernel-builder's CMake does."""
    major, minor = (int(part) for part in (version.split(".") + ["0"])[:2])
    return f"TORCH_TARGET_VERSION={hex((major << 56) | (minor << 48))}"
