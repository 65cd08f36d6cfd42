"""The schema of build_matrix.yaml (see docs/guide/matrix.md).

Pydantic models with unknown keys forbidden; the version tables default to the
packaged data (kernel_matrix/data/*.yaml) and each row can be overridden here."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from kernel_matrix.config.capability import TargetCapability
from kernel_matrix.config.github_event import GITHUB_HOSTED_LABEL
from kernel_matrix.config.section import Section


def _version_text(value: object) -> object:
    # The loader keeps major.minor numbers (2.10) as text; other numbers (13,
    # 1e3) are not versions.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f'expected a major.minor version such as "13.0", got the number {value}')
    return value


MinorVersion = Annotated[str, BeforeValidator(_version_text), Field(pattern=r"^\d+\.\d+$")]
# A target of a CUDA version's default list: 9.0 (config.capability defines the format).
Capability = Annotated[TargetCapability, BeforeValidator(_version_text)]
Arch = Literal["x86_64", "aarch64"]
_MINOR = re.compile(r"^\d+\.\d+$")


def _cuda_builds(value: object) -> object:
    """A torch minor's CUDA builds: "all" it ships, or a list of major.minor versions."""
    if value == "all":
        return value
    if not isinstance(value, list) or not value:
        raise ValueError('expected "all" or a list of CUDA versions such as ["12.6", "13.0"]')
    for item in value:
        if not isinstance(item, str) or not _MINOR.match(item):
            raise ValueError(f'CUDA version {item!r} is not major.minor (such as "13.0")')
    return value


CudaBuilds = Annotated[object, BeforeValidator(_cuda_builds)]


def _label_list(value: object) -> object:
    # `build-runner: ubuntu-24.04` (one label, unbracketed) is the likely slip: say what a list is.
    if not isinstance(value, list):
        raise ValueError("expected a list of runner labels, such as [ubuntu-24.04] or [self-hosted, linux, x64, gpu]")
    return value


def _some_label(value: object) -> object:
    if value == []:
        raise ValueError("no runner label: the arch's builds need a runner, such as [ubuntu-24.04]")
    return _label_list(value)


Label = Annotated[str, Field(min_length=1)]
RunnerLabels = Annotated[list[Label], BeforeValidator(_some_label)]


def _self_hosted(label: str) -> str:
    """GPU test runners are self-hosted: a GitHub-hosted label (ubuntu-24.04-arm, ubuntu-latest)
    names a runner with no GPU, where a CUDA suite fails or its GPU cases skip unnoticed, and a
    self-hosted runner never carries one (docs/runner-host.md)."""
    if GITHUB_HOSTED_LABEL.fullmatch(label):
        raise ValueError(
            "a GitHub-hosted runner label, and GitHub's hosted runners have no GPU: name your self-hosted GPU "
            "runners' labels, or [] where there is none (CUDA variants tested on CPUs)"
        )
    return label


GpuLabels = Annotated[list[Annotated[Label, AfterValidator(_self_hosted)]], BeforeValidator(_label_list)]


class ArchRunners(Section):
    build_runner: RunnerLabels
    # [] where there is no GPU runner: the arch's CUDA variants are built, tested on CPUs and
    # released without a GPU test (`matrix` warns of it), as cibuildwheel's users test on CPUs.
    gpu_test_runner: GpuLabels
    # The compute capability of the GPU test runners' GPUs ("9.0" for an H100/H200): a
    # variant with no code for it (the loader refuses it there) gets no GPU test job.
    gpu_test_capability: TargetCapability | None = None


class TorchRelease(Section):
    pypi: MinorVersion | None = None  # the CUDA build on PyPI; None for a CPU-only PyPI wheel
    cuda: list[MinorVersion] = Field(min_length=1)


class CapabilityRow(Section):
    min_cuda: MinorVersion
    capabilities: list[Capability] = Field(min_length=1)


class CellSelector(Section):
    """A partial cell description: each given field must match. `kernel` (a build.toml
    name of the matrix's kernels) narrows an exclude to that kernel's cells."""

    torch: MinorVersion | None = None
    cuda: MinorVersion | Literal["cpu"] | None = None
    arch: Arch | None = None
    kernel: Annotated[str, Field(min_length=1)] | None = None


class CellSpec(Section):
    """A whole cell, for `include`."""

    torch: MinorVersion
    cuda: MinorVersion | Literal["cpu"]
    arch: Arch


class Upstream(Section):
    pypi: str = "https://pypi.org/simple"
    pytorch: str = "https://download.pytorch.org/whl"


class MatrixFile(Section):
    # The kernel folder(s), relative to this file: `kernel` for one, `kernels` for several.
    kernel: str | None = None
    kernels: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    # torch minor -> the CUDA versions to build for it, or "all" it ships.
    torch: dict[MinorVersion, CudaBuilds] = Field(min_length=1)
    cpu: bool = True
    archs: dict[Arch, ArchRunners] = Field(min_length=1)
    image: Literal["official", "offline"] = "official"
    images: dict[str, str] = {}
    torch_index: Literal["auto", "pypi", "pytorch"] = "auto"
    torch_releases: dict[MinorVersion, TorchRelease] = {}
    cuda_capabilities: list[CapabilityRow] | None = None
    exclude: list[CellSelector] = []
    include: list[CellSpec] = []
    upstream: Upstream = Upstream()

    @model_validator(mode="after")
    def _one_way_to_name_kernels(self) -> MatrixFile:
        if self.kernel is not None and self.kernels is not None:
            raise ValueError("give `kernel` (one folder) or `kernels` (a list), not both")
        return self

    def kernel_entries(self) -> list[tuple[tuple[str | int, ...], str]]:
        """(where in the file, folder) for each kernel the matrix builds; `kernel` by default."""
        if self.kernels is not None:
            return [(("kernels", index), entry) for index, entry in enumerate(self.kernels)]
        return [(("kernel",), self.kernel or "kernel")]
