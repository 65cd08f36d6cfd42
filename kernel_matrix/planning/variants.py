"""Build variant names and the tags in them: the one place they are formatted.

`torch<MAJ><MIN>-cxx11-<compute>-<cpu>-linux`, e.g. torch214-cxx11-cu130-x86_64-linux;
`torch-stable-abi<MAJ><MIN>-<compute>-<cpu>-linux` for a kernel built against torch's
stable ABI (one variant serves every torch from that version on); `torch-<backend>` for
a Python-only kernel; `tvm-ffi<MAJ><MIN>-<compute>-<cpu>-linux` for a [tvm-ffi] kernel
(no torch in it: one variant per compute and arch). Named as kernel-builder names them
(nix-builder/lib/variants/torch.nix and tvm-ffi.nix) and as the `kernels` loader parses
them (tests check every name we produce with the loader's parse_variant, loader.py).

kernels 0.19 also reads a new form of the same names, with the Python each build needs
(torch-2.15-cxx11-cuda-13.2-cpython-3.11-abi3-x86_64-linux); kernel-builder still names its
builds in the legacy form, which every supported loader reads, and so does kernel-matrix.
A variant named in the new form (--variant, `test VARIANT`) is the legacy-named build that
serves it: legacy_name."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from enum import Enum

from packaging.version import Version

from kernel_matrix.planning.torch_cuda import (
    cuda_major as cuda_major,  # tags use it; defined beside the torch-CUDA check
)

CPU_ARCHS = ("x86_64", "aarch64")
# A noarch (Python-only) variant's name, torch-<backend>: Variant.name writes it.
NOARCH_VARIANT = re.compile(r"^torch-[a-z]+\Z")
# What only kernels 0.19's new variant-name form has: the Python a build needs.
NEW_FORM_PYTHON = re.compile(r"-cpython-\d+\.\d+-abi3t?-")
# The tvm-ffi ABI a [tvm-ffi] kernel is built against: kernel-builder's one (nix-builder
# versions.nix, tvmFfiVersion), so the loader's tvm-ffi 0.1.x picks these variants.
TVM_FFI_VERSION = "0.1"


@dataclass(frozen=True)
class Variant:
    """What one build is for. `torch`, `cuda` and `arch` are also what a noarch or
    stable-ABI variant is built and tested with, though its name leaves some out."""

    torch: str  # "2.14"
    backend: str  # "cuda" or "cpu" (a noarch variant: any kernel-builder backend)
    cuda: str | None  # "13.0" for CUDA variants
    arch: str  # "x86_64" or "aarch64"
    stable_abi: str | None = None  # "2.10": built against torch's stable ABI of that version
    noarch: bool = False  # Python only: one variant per backend, for every torch and arch
    tvm_ffi: str | None = None  # "0.1": a [tvm-ffi] kernel, built against that tvm-ffi, not torch

    def __post_init__(self) -> None:
        if (self.backend == "cuda") != (self.cuda is not None):
            raise ValueError(f"a {self.backend} variant {'needs' if self.backend == 'cuda' else 'has no'} CUDA version")
        if self.arch not in CPU_ARCHS:
            raise ValueError(f"unsupported CPU architecture {self.arch!r} (supported: {', '.join(CPU_ARCHS)})")
        if self.noarch and self.stable_abi:
            raise ValueError("a noarch variant has no stable ABI version")
        if self.tvm_ffi and (self.noarch or self.stable_abi):
            raise ValueError("a tvm-ffi variant is neither noarch nor built against torch's stable ABI")

    @property
    def makes_wheel(self) -> bool:
        """Whether a legacy pip wheel is made of this variant: a torch extension's, per torch
        (not a Python-only variant, for every torch; nor a tvm-ffi library, for none)."""
        return not self.noarch and self.tvm_ffi is None

    @property
    def compute(self) -> str:
        return cuda_tag(self.cuda) if self.cuda else "cpu"

    @property
    def name(self) -> str:
        if self.noarch:
            return f"torch-{self.backend}"
        if self.tvm_ffi:
            return f"tvm-ffi{_flat(self.tvm_ffi)}-{self.compute}-{self.arch}-linux"
        if self.stable_abi:
            return f"torch-stable-abi{_flat(self.stable_abi)}-{self.compute}-{self.arch}-linux"
        return f"{torch_tag(self.torch)}-cxx11-{self.compute}-{self.arch}-linux"

    def __str__(self) -> str:
        return self.name


def legacy_name(name: str) -> str:
    """name as kernel-matrix names variants: one of kernels 0.19's new form as the legacy name
    of the build that serves it (abi3 for every CPython from 3.9 on), as the installed loader
    reads it; any other name (legacy, or one the loader reads no variant in) as it is."""
    if NEW_FORM_PYTHON.search(name) is None:  # no new form: nothing to ask the loader
        return name
    from kernel_matrix.loader import legacy_variant_name

    return legacy_variant_name(name) or name


def _flat(version: str) -> str:
    """'2.14' -> '214', '13.0' -> '130' (a local part such as +cu130 is dropped)."""
    release = Version(version).release
    return f"{release[0]}{release[1] if len(release) > 1 else 0}"


def cuda_tag(cuda: str) -> str:
    """'13.0' -> 'cu130': the tag of variant names, wheel labels and PyTorch's wheel indexes."""
    return f"cu{_flat(cuda)}"


def torch_tag(torch: str) -> str:
    """'2.14' (or '2.14.1+cu130') -> 'torch214'."""
    return f"torch{_flat(torch)}"


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


# A variant's CPU arch as the OCI platform a container engine runs it on (and an image is made for).
OCI_PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}


def oci_platform(arch: str) -> str:
    """'x86_64' -> 'linux/amd64': what the engine is told a cell's container runs as."""
    return OCI_PLATFORMS[arch]


def torch_minor(version: str) -> str:
    """'2.14.1+cu130' -> '2.14'."""
    release = Version(version).release
    return f"{release[0]}.{release[1]}"


class ImageKind(str, Enum):
    """Builder images: on the official CUDA images (hosts with a registry), or on a
    Debian root filesystem made here (debootstrap; hosts without one)."""

    OFFICIAL = "official"
    OFFLINE = "offline"
