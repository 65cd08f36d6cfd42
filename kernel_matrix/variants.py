"""Build variant names: the one place they are formatted.

`torch<MAJ><MIN>-cxx11-<compute>-<cpu>-linux`, e.g. torch214-cxx11-cu130-x86_64-linux,
as the `kernels` loader parses them (tests check every name we produce with
kernels.variants.parse_variant)."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from enum import Enum

from packaging.version import Version

CPU_ARCHS = ("x86_64", "aarch64")


@dataclass(frozen=True)
class Variant:
    torch: str  # "2.14"
    backend: str  # "cuda" or "cpu"
    cuda: str | None  # "13.0" for CUDA variants
    arch: str  # "x86_64" or "aarch64"

    def __post_init__(self) -> None:
        if (self.backend == "cuda") != (self.cuda is not None):
            raise ValueError(f"a {self.backend} variant {'needs' if self.backend == 'cuda' else 'has no'} CUDA version")
        if self.arch not in CPU_ARCHS:
            raise ValueError(f"unsupported CPU architecture {self.arch!r} (supported: {', '.join(CPU_ARCHS)})")

    @property
    def compute(self) -> str:
        if self.cuda is None:
            return "cpu"
        cuda = Version(self.cuda)
        return f"cu{cuda.major}{cuda.minor}"

    @property
    def name(self) -> str:
        torch = Version(self.torch)
        return f"torch{torch.major}{torch.minor}-cxx11-{self.compute}-{self.arch}-linux"

    def __str__(self) -> str:
        return self.name


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def torch_minor(version: str) -> str:
    """'2.14.1+cu130' -> '2.14'."""
    release = Version(version).release
    return f"{release[0]}.{release[1]}"


class ImageKind(str, Enum):
    """Builder images: on the official CUDA images (hosts with a registry), or on a
    Debian root filesystem made here (debootstrap; hosts without one)."""

    OFFICIAL = "official"
    OFFLINE = "offline"
