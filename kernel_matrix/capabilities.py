"""Which CUDA capabilities a variant is compiled for."""

from __future__ import annotations

from packaging.version import Version

from . import data


def default_capabilities(cuda_version: str, table: list[dict] | None = None) -> list[str]:
    """The row of `table` (default: data/cuda_capabilities.yaml) for cuda_version."""
    for row in table if table is not None else data.load("cuda_capabilities"):
        if Version(cuda_version) >= Version(row["min_cuda"]):
            return list(row["capabilities"])
    return []


def select_capabilities(requested: list[str] | None, cuda_version: str, defaults: list[str] | None = None) -> list[str]:
    """build.toml's list intersected with the CUDA version's defaults (or the
    given ones: a matrix cell's), ascending.

    An empty result is returned as is: the caller reports it against build.toml.
    """
    defaults = default_capabilities(cuda_version) if defaults is None else defaults
    chosen = defaults if requested is None else [c for c in defaults if c in set(requested)]
    return sorted(chosen, key=Version)


def gencode_flags(capabilities: list[str]) -> list[str]:
    """nvcc flags: machine code for each capability, plus PTX of the highest."""
    flags = []
    for cap in capabilities:
        sm = cap.replace(".", "")
        flags.append(f"-gencode=arch=compute_{sm},code=sm_{sm}")
    if capabilities:
        top = capabilities[-1].replace(".", "")
        flags.append(f"-gencode=arch=compute_{top},code=compute_{top}")
    return flags
