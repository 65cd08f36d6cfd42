"""Which CUDA capabilities a variant is compiled for."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from kernel_matrix import data
from kernel_matrix.errors import ConfigError

if TYPE_CHECKING:
    from kernel_matrix.config.buildtoml import BuildConfig

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
    `cuda_archs_loose_intersection` (utils.cmake) does it:
    - an architecture- or family-specific capability ("9.0a", "10.0f") whose base is a
      target is kept, and takes that target;
    - each other target gets the highest requested plain capability of the same major
      that is not above it ("8.0" serves an 8.6 target); a "+PTX" capability
      ("9.0+PTX") also serves targets of later majors (its PTX is JIT-compiled there)
      and keeps its suffix: gencode_flags embeds its PTX.
    A target may be architecture-specific itself (--cuda-capabilities 9.0a): its base
    is what is compared. No request (or an empty one, as kernel-builder's template
    reads it): the defaults. Never below what this CUDA version's nvcc compiles
    (kernel-builder would pick 7.0 for a 7.5 target, which nvcc 13 cannot build).
    Ascending; an empty result is returned as is (the caller reports it against build.toml)."""
    defaults = default_capabilities(cuda_version) if defaults is None else defaults
    if not requested:
        return sorted(set(defaults), key=capability_order)
    with_ptx = {strip_ptx(c) for c in requested if c.endswith(PTX_SUFFIX)}
    sources = list(dict.fromkeys(strip_ptx(c) for c in requested))
    targets = list(dict.fromkeys(strip_ptx(t) for t in defaults))
    chosen: list[str] = []
    open_targets = list(targets)
    for capability in [c for c in sources if c[-1] in "af"]:
        sources.remove(capability)
        taken = [t for t in targets if generation(t) == generation(capability)]
        if taken:
            open_targets = [t for t in open_targets if t not in taken]
            chosen.append(capability)
    sources.sort(key=Version)
    for target in open_targets:
        base = generation(target)
        serving = [c for c in sources if Version(c) <= base and (c in with_ptx or Version(c).major == base.major)]
        if serving:
            chosen.append(serving[-1])
    if compilable := compilable_range(cuda_version):
        chosen = [c for c in chosen if generation(c) >= compilable[0]]
    return sorted({c + PTX_SUFFIX if c in with_ptx else c for c in chosen}, key=capability_order)


def compilable_range(cuda_version: str) -> tuple[Version, Version] | None:
    """The lowest and highest capability this CUDA version's nvcc compiles
    (data/cuda_toolkits.yaml), or None for a toolkit the table does not know."""
    toolkit = data.load("cuda_toolkits").get(cuda_version)
    return (Version(toolkit["min_capability"]), Version(toolkit["max_capability"])) if toolkit else None


class UnbuildableSection(ConfigError):
    """A [kernel.*] section this CUDA version's nvcc cannot build: none of its
    cuda-capabilities, or a family-specific one before CUDA 12.9."""

    def __init__(self, build_toml: Path, section: str, problem: str) -> None:
        from kernel_matrix.config.buildtoml import located

        # At the section's cuda-capabilities (its header where it has none).
        self.where = located(build_toml.parent, "kernel", section, "cuda-capabilities")
        super().__init__(f"{self.where}: {problem}")
        self.build_toml, self.problem = build_toml, problem


def section_capabilities(
    config: BuildConfig, cuda_version: str, narrowed: list[str] | None, *, build_toml: Path
) -> dict[str, list[str]]:
    """Each CUDA [kernel.*] section's capabilities when built with CUDA cuda_version
    (the nvcc's: what it can compile decides), narrowed (--cuda-capabilities, a matrix
    row) or not. A section whose cuda-minver is above that CUDA is left out, as
    kernel-builder leaves it. Raises UnbuildableSection, naming build_toml."""
    from kernel_matrix.config.buildtoml import CudaKernel

    toolkit = data.load("cuda_toolkits").get(cuda_version)
    family_specific = not toolkit or toolkit.get("family_specific", False)  # an unknown one: nvcc will say
    sections: dict[str, list[str]] = {}
    for name, kernel in config.kernels_for("cuda").items():
        assert isinstance(kernel, CudaKernel)
        if kernel.cuda_minver and Version(cuda_version) < Version(kernel.cuda_minver):
            continue  # as kernel-builder: the section needs a newer CUDA
        chosen = select_capabilities(kernel.cuda_capabilities, cuda_version, narrowed)
        if not chosen and narrowed and kernel.cuda_capabilities:
            # A narrowed build (--cuda-capabilities 9.0, a matrix row) that leaves a section with
            # its own list nothing: that section is built for its own list, as kernel-builder
            # always builds such a section (kernel.cmake intersects it with the CUDA version's
            # full list; the local narrowing replaces only the default list of sections with
            # none). Leaving it out would leave the binding's calls into it unresolved.
            chosen = select_capabilities(kernel.cuda_capabilities, cuda_version)
        if not kernel.cuda_capabilities and chosen and not chosen[-1].endswith(PTX_SUFFIX):
            # A section on the default list: kernel-builder's list ends "+PTX" (preamble.cmake,
            # "12.1+PTX"), so its highest capability's PTX is embedded (gencode_flags) and its
            # metadata.json archs say so: the loader then lets it run on later GPUs too.
            chosen[-1] += PTX_SUFFIX
        if not chosen:
            raise UnbuildableSection(
                build_toml,
                name,
                f"[kernel.{name}]: none of cuda-capabilities {kernel.cuda_capabilities} can be built with "
                f"CUDA {cuda_version}",
            )
        family = [c for c in chosen if strip_ptx(c).endswith("f")]
        if family and not family_specific:
            # nvcc stops at the first file (kernel-builder's build fails there too): say so now.
            raise UnbuildableSection(
                build_toml,
                name,
                f"[kernel.{name}]: cuda-capabilities {family} are family-specific, which CUDA {cuda_version}'s "
                "nvcc cannot compile (CUDA 12.9 and later can)",
            )
        sections[name] = chosen
    return sections


def variant_archs(sections: dict[str, list[str]]) -> list[str]:
    """What a CUDA variant's [kernel.*] sections are compiled for together: metadata.json's
    backend.archs (kernel-builder's ALL_GPU_ARCHS, kernel.cmake). Empty with no CUDA section:
    kernel-builder writes no archs then (build-variants.cmake), and the loader checks none.
    Sorted as kernel-builder sorts them, as strings (accumulate_gpu_archs' `list(SORT)`:
    "10.0" before "9.0"); the loader reads them in any order."""
    return sorted({c for caps in sections.values() for c in caps})


def runs_on(archs: list[str], capability: tuple[int, int]) -> bool:
    """Whether the `kernels` loader lets a variant of these archs load on a GPU of this
    capability ((9, 0)): its check_arch rule (kernels/archs.py, `_cuda_arch_supports`),
    which tests/planning/test_cell_archs.py compares with the installed loader's.
    "9.0a" runs on 9.0 only; "10.0f" on 10.x from 10.0; "8.0+PTX" on 8.0 and anything
    newer (its PTX is JIT-compiled); plain "8.0" on 8.x from 8.0. No archs, or none in a
    format the loader knows: it does not refuse."""
    known = [parsed for parsed in map(_parsed, archs) if parsed is not None]
    return not known or any(_supports(parsed, capability) for parsed in known)


def _supports(parsed: tuple[tuple[int, int], str, bool], capability: tuple[int, int]) -> bool:
    (major, minor), suffix, ptx = parsed
    if suffix == "a":
        return capability == (major, minor)
    if suffix == "f" or not ptx:
        return capability[0] == major and capability[1] >= minor
    return capability >= (major, minor)


def _parsed(arch: str) -> tuple[tuple[int, int], str, bool] | None:
    """((major, minor), "a"/"f"/"", +PTX) of a metadata arch, or None when not one."""
    plain = strip_ptx(arch)
    if not CAPABILITY.match(plain):
        return None
    return gpu_target(plain), plain[-1] if plain[-1] in "af" else "", arch.endswith(PTX_SUFFIX)


def strip_ptx(capability: str) -> str:
    return capability.removesuffix(PTX_SUFFIX)


def generation(capability: str) -> Version:
    """The GPU generation a capability compiles for: "9.0a", "9.0+PTX" -> 9.0."""
    return Version(strip_ptx(capability).rstrip("af"))


def gpu_target(capability: str) -> tuple[int, int]:
    """A GPU's capability as the loader's check_arch takes it: "9.0" -> (9, 0)."""
    version = generation(capability)
    return version.major, version.minor


def capability_order(capability: str) -> tuple[Version, str]:
    return (generation(capability), capability)


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
