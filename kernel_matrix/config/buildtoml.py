"""kernel/build.toml (kernel-builder's format, editions 4, 5 and 6): parsed and validated.

Unknown keys are errors, as in kernel-builder, so a typo never silently builds
something else. Every edition becomes the same BuildConfig (edition 5's shape):
edition 4 upgraded in memory, edition 6 mapped onto it (config/edition6.py)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from packaging.version import Version as PackagingVersion
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from kernel_matrix import data
from kernel_matrix.config import edition6, genex
from kernel_matrix.config.capability import Capability
from kernel_matrix.config.configfile import read_config
from kernel_matrix.config.didyoumean import did_you_mean
from kernel_matrix.config.section import Section
from kernel_matrix.config.sourcelines import Problems, redefined_key, toml_key_position, where
from kernel_matrix.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# Every backend kernel-builder knows; [kernel.*] sections take the first five.
Backend = Literal["cann", "cpu", "cuda", "metal", "neuron", "rocm", "tpu", "xpu"]
# What kernel-matrix compiles (Linux, x86_64/aarch64): sections of other
# backends are read, checked and skipped.
BUILDABLE_BACKENDS = ("cpu", "cuda")
# kernels-data's Dependency enum (deps.rs): C++ dependencies a kernel section may name.
Dependency = Literal[
    "torch",
    "cutlass_2_10",
    "cutlass_3_5",
    "cutlass_3_6",
    "cutlass_3_8",
    "cutlass_3_9",
    "cutlass_4_0",
    "cutlass_4_4",
    "cutlass_4_5",
    "sycl_tla",
    "metal-cpp",
]
# A version in build.toml is a string of dot-separated numbers ("2.10").
Version = Annotated[str, Field(pattern=r"^\d+(\.\d+)*$")]
# kernel-builder's kernel names (kernels-data config/name.rs).
_NAME_PATTERN = r"^[a-z][-a-z0-9]*[a-z0-9]$"
_NAME = re.compile(_NAME_PATTERN)
NAME_RULE = (
    "a kernel name starts with a lowercase letter, holds only lowercase letters, digits and dashes, "
    "and ends with a letter or digit (kernel-builder's rule)"
)


def _kernel_name(name: str) -> str:
    if not _NAME.match(name):
        fixed = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        raise ValueError(NAME_RULE + (f"; did you mean '{fixed}'?" if _NAME.match(fixed) else ""))
    return name


def _evaluable_flags(flags: list[str]) -> list[str]:
    """Flags whose CMake generator expressions kernel-matrix evaluates (config/genex.py): any
    other would reach the compiler as written, where kernel-builder's CMake evaluates it."""
    try:
        genex.check(flags)
    except genex.GenexError as exc:
        raise ValueError(str(exc)) from None
    return flags


# Compiler flags of the sections kernel-matrix compiles: each a flag, or a CMake generator
# expression of one, as kernel-builder passes them to CMake.
Flags = Annotated[list[str], AfterValidator(_evaluable_flags)]


# kernels-data config/git_url.rs: a URL of these schemes, or scp-like `user@host:path`.
GIT_SCHEMES = ("https", "http", "git", "ssh", "git+ssh", "git+https", "git+http")
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_SCP_HOST = re.compile(r"^[^\s/?#\[\]]+$")


def _git_url(url: str) -> str:
    """As kernel-builder's GitUrl::parse takes upstream and source (its own tests' cases), then
    as the loader reads metadata.json: the same kernels-data GitUrl, so a URL its URL parser
    refuses (`ssh://git@host:org/repo`, `https://`) is refused here, not at the first load."""
    if scheme := _URL_SCHEME.match(url):
        if scheme.group(1).lower() not in GIT_SCHEMES:
            raise ValueError(
                f"unsupported scheme '{scheme.group(1)}' in a git URL: expected one of {', '.join(GIT_SCHEMES)}"
            )
    else:
        host, colon, path = url.partition(":")
        if not (colon and _SCP_HOST.match(host) and path and not path.startswith("/")):
            raise ValueError("not a git URL: expected e.g. https://github.com/org/repo or git@github.com:org/repo.git")
    loader_git_url(url)
    return url


def loader_git_url(url: str) -> str:
    """url as the loader reads it from a metadata.json (kernels-data's GitUrl): normalized, as
    kernel-builder's card shows it (an scp-like address as ssh://host/path); ValueError where
    the loader refuses it."""
    from kernel_matrix.loader import Metadata

    probe = {"name": "probe", "version": 1, "id": "_probe", "license": "mit", "python-depends": []}
    try:
        metadata = Metadata.from_bytes(json.dumps({**probe, "backend": {"type": "cpu"}, "upstream": url}).encode())
    except ValueError as exc:  # "Cannot parse metadata: invalid git URL `<url>` at line 1 column 99"
        reason = re.sub(r" at line \d+ column \d+$", "", str(exc).removeprefix("Cannot parse metadata: "))
        # the URL, shown before this reason, is left out of it: once is enough, and it may hold a newline
        reason = reason.replace(f" `{url}`", "").replace("\n", "\\n")
        raise ValueError(f"the kernels loader cannot read it: {reason}") from None
    return metadata.upstream or url


def _some_backend(backends: list[str]) -> list[str]:
    if not backends:  # kernel-builder takes it, and builds nothing
        raise ValueError(f"names no backend: give one or more of {', '.join(get_args(Backend))}")
    return backends


class Hub(Section):
    repo_id: str | None = None
    # The Hub branch publish writes instead of v<version> (kernel-builder's upload): a branch
    # name (the Hub refuses others), never a path ("..") or an option ("-").
    branch: str | None = Field(default=None, pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9_/-]|\.[A-Za-z0-9_/-]|\.$){0,199}$")


class KernelDependency(Section):
    """Another Hub kernel this one loads: by version (a v<N> branch) or revision."""

    repo_id: str
    version: int | None = Field(default=None, strict=True, ge=0)  # not a boolean; a usize in kernels-data
    revision: str | None = None

    @model_validator(mode="after")
    def _one_ref(self) -> KernelDependency:
        if (self.version is None) == (self.revision is None):
            raise ValueError("give exactly one of `version` and `revision`")
        return self


class BackendDepends(Section):
    python_depends: list[str] | None = None
    kernel_depends: list[KernelDependency] | None = None  # edition 5


class CudaGeneral(BackendDepends):
    minver: Version | None = None
    maxver: Version | None = None


class TpuGeneral(Section):  # edition 5
    python_depends: list[str] | None = None


# [general] build-layout (edition 6): the variant's Python package as files, or as
# <id>.zip beside the library (the loader imports zip builds from kernels 0.19).
BuildLayout = Literal["files", "zip"]


class General(Section):
    name: Annotated[str, AfterValidator(_kernel_name)]
    # strict: `version = true` is no version (pydantic would read it as 1).
    version: int = Field(ge=0, strict=True)
    # 5 or 6; absent in edition 4 files (upgraded in memory). Left out of model_dump, which
    # hashes into the op namespace: a file and its twin of another edition build the same variant.
    edition: int | None = Field(default=None, exclude=True)
    license: str
    upstream: Annotated[str, AfterValidator(_git_url)] | None = None
    source: Annotated[str, AfterValidator(_git_url)] | None = None
    backends: Annotated[list[Backend], AfterValidator(_some_backend)]
    build_layout: BuildLayout = "files"  # edition 6 (editions 4 and 5 have no such key: files)
    python_depends: list[str] | None = None
    kernel_depends: list[KernelDependency] | None = None  # edition 5
    hub: Hub = Hub()
    cuda: CudaGeneral | None = None
    neuron: BackendDepends | None = None
    xpu: BackendDepends | None = None
    tpu: TpuGeneral | None = None  # edition 5

    @property
    def python_name(self) -> str:
        """The Python package (torch-ext/<python_name>/): layer-norm -> layer_norm, as kernel-builder maps it."""
        return self.name.replace("-", "_")


class Torch(Section):
    src: list[str] = []
    include: list[str] = []
    pyext: list[str] = []
    minver: Version | None = None
    maxver: Version | None = None
    cxx_flags: Flags = []
    # Edition 4: one version for every backend; edition 5 also takes {backend = version}.
    stable_abi: Version | dict[Backend, Version] | None = None

    def stable_abi_for(self, backend: str) -> str | None:
        """The torch version whose stable ABI this backend's build targets, if any."""
        if isinstance(self.stable_abi, dict):
            # Any backend may be asked for: one the table does not name has none.
            return self.stable_abi.get(cast(Backend, backend))
        return self.stable_abi


class TorchNoarch(BaseModel):
    """A Python-only kernel. kernel-builder spells these keys in snake_case."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pyext: list[str] | None = None  # None: kernel-builder's default, py and pyi
    # Nothing is compiled for them: they are metadata.json's archs as written, any text, as
    # kernel-builder copies them (kernels-data precomputable_backend_archs). The loader skips
    # an arch it cannot read ("sm_90"), so such a variant loads on any GPU.
    cuda_capabilities: list[Annotated[str, Field(min_length=1)]] | None = None
    rocm_archs: list[str] | None = None


class TvmFfi(Section):
    src: list[str]
    include: list[str] = []
    pyext: list[str] = []
    cxx_flags: Flags = []


class TvmFfi6(TvmFfi):
    """Edition 6's [tvm-ffi]: src may be left out (a kernel of Rust sections has no C++ binding)."""

    src: list[str] = []


class MlxNoarch(Section):
    """Edition 6's [mlx-noarch]: a Python-only MLX kernel, for Metal only (read, checked, not built)."""

    pyext: list[str] | None = None


class _KernelSectionBase(Section):
    depends: list[Dependency]
    src: list[str] = Field(min_length=1)
    include: list[str] = []
    cxx_flags: list[str] = []


# Each backend's keys, shared by edition 5's section of that backend and edition 6's of its
# C++ language: one tagged by `backend`, the other by `language` (kernels-common v5.rs, v6.rs).
class _CpuKeys(_KernelSectionBase):
    cxx_flags: Flags = []


class _CudaKeys(_KernelSectionBase):
    cuda_capabilities: list[Capability] | None = None
    cxx_flags: Flags = []
    cuda_flags: Flags = []
    cuda_minver: Version | None = None


class _RocmKeys(_KernelSectionBase):
    rocm_archs: list[str] | None = None
    hip_flags: list[str] = []


class _XpuKeys(_KernelSectionBase):
    sycl_flags: list[str] = []


class CpuKernel(_CpuKeys):
    backend: Literal["cpu"]


class CudaKernel(_CudaKeys):
    backend: Literal["cuda"]


class MetalKernel(_KernelSectionBase):
    backend: Literal["metal"]


class RocmKernel(_RocmKeys):
    backend: Literal["rocm"]


class XpuKernel(_XpuKeys):
    backend: Literal["xpu"]


# A [kernel.<name>] section: its `backend` says which of these it is.
KernelSection = Annotated[CpuKernel | CudaKernel | MetalKernel | RocmKernel | XpuKernel, Field(discriminator="backend")]
_KERNEL_MODELS: dict[str, type[Section]] = {
    "cpu": CpuKernel,
    "cuda": CudaKernel,
    "metal": MetalKernel,
    "rocm": RocmKernel,
    "xpu": XpuKernel,
}


class CppCpuKernel(_CpuKeys):
    language: Literal["cpp-cpu"]


class CppCudaKernel(_CudaKeys):
    language: Literal["cpp-cuda"]


class CppMetalKernel(_KernelSectionBase):
    language: Literal["cpp-metal"]


class CppRocmKernel(_RocmKeys):
    language: Literal["cpp-rocm"]


class CppXpuKernel(_XpuKeys):
    language: Literal["cpp-xpu"]


def _has_tileiras(version: str) -> str:
    if PackagingVersion(version) < PackagingVersion(edition6.MIN_TILEIRAS_VERSION):
        raise ValueError(
            f"must be at least {edition6.MIN_TILEIRAS_VERSION}, the first CUDA version with cuTile (kernels-common)"
        )
    return version


class _RustKeys(Section):
    cargo_manifest: str  # the crate's Cargo.toml, relative to the kernel's folder
    src: list[str]


class RustCpuKernel(_RustKeys):
    language: Literal["rust-cpu"]


class RustCudaOxideKernel(_RustKeys):
    language: Literal["rust-cuda-oxide"]
    cuda_capabilities: list[str] | None = None


class RustCutileKernel(_RustKeys):
    language: Literal["rust-cutile"]
    tileiras_minver: Annotated[Version, AfterValidator(_has_tileiras)]


# Edition 6's [kernel.<name>] section: its `language` says which of these it is.
KernelSection6 = Annotated[
    CppCpuKernel
    | CppCudaKernel
    | CppMetalKernel
    | CppRocmKernel
    | CppXpuKernel
    | RustCpuKernel
    | RustCudaOxideKernel
    | RustCutileKernel,
    Field(discriminator="language"),
]
_KERNEL_MODELS_6: dict[str, type[Section]] = {
    "cpp-cpu": CppCpuKernel,
    "cpp-cuda": CppCudaKernel,
    "cpp-metal": CppMetalKernel,
    "cpp-rocm": CppRocmKernel,
    "cpp-xpu": CppXpuKernel,
    "rust-cpu": RustCpuKernel,
    "rust-cuda-oxide": RustCudaOxideKernel,
    "rust-cutile": RustCutileKernel,
}
FRAMEWORKS = ("torch", "torch-noarch", "tvm-ffi")
FRAMEWORKS_6 = (*FRAMEWORKS, "mlx-noarch")


class _BuildFile(Section):
    """What every edition's file has beside its binding and [kernel.*] sections."""

    general: General
    torch: Torch | None = None
    torch_noarch: TorchNoarch | None = None
    mlx_noarch: MlxNoarch | None = None  # edition 6 (_check_edition refuses it in older ones)


class BuildFile6(_BuildFile):
    """An edition 6 file as written: checked as kernels-common reads it (v6.rs), then
    mapped onto BuildConfig (edition6.as_edition_5), which the rest of kernel-matrix reads."""

    tvm_ffi: TvmFfi6 | None = None
    kernel: dict[str, KernelSection6] = {}


class BuildConfig(_BuildFile):
    tvm_ffi: TvmFfi | None = None
    kernel: dict[str, KernelSection] = {}

    @property
    def noarch(self) -> bool:
        """A Python-only kernel: one variant per backend (torch-<backend>), nothing compiled."""
        return self.torch_noarch is not None

    @property
    def ext_dir(self) -> str:
        """The folder holding the binding's Python package: tvm-ffi-ext/ for a [tvm-ffi]
        kernel, torch-ext/ for the others (kernel-builder's layouts)."""
        return "tvm-ffi-ext" if self.tvm_ffi is not None else "torch-ext"

    @property
    def package_suffixes(self) -> frozenset[str]:
        """Which files of torch-ext/<python_name>/ a variant ships, as kernel-builder installs
        them. [torch]: every .py, and the extensions pyext adds (build-variants.cmake globs
        *.py and kernels-data's data_extensions: pyext without py and pyi). [torch-noarch]:
        the files of the source set, pyext's extensions, by default py and pyi
        (nix-builder source-set.nix; torch/noarch/setup.py copies them all), .py always.
        A helper script or a prebuilt library left in the package folder is not published."""
        if self.torch_noarch is not None:
            extensions = ["py", "pyi"] if self.torch_noarch.pyext is None else self.torch_noarch.pyext
            return frozenset({".py", *(f".{ext}" for ext in extensions)})
        binding = self.torch or self.tvm_ffi  # [tvm-ffi]: the same rule (kernels-data data_extensions)
        extra = binding.pyext if binding is not None else []
        return frozenset({".py", *(f".{ext}" for ext in extra if ext not in ("py", "pyi"))})

    def kernels_for(self, backend: str) -> dict[str, CpuKernel | CudaKernel | MetalKernel | RocmKernel | XpuKernel]:
        """The [kernel.*] sections compiled into a variant of this backend: that
        backend's only, as kernel-builder builds them (a CUDA variant that also
        serves CPU tensors lists its CPU sources in its CUDA section)."""
        return {name: k for name, k in self.kernel.items() if k.backend == backend}

    def refuses(self, backend: str, torch: str, cuda: str | None) -> str | None:
        """Why this kernel rules out a backend, torch minor and CUDA version: general.backends,
        [torch] minver/maxver, [general.cuda] minver/maxver (None: it does not)."""
        if backend not in self.general.backends:
            return f"backend '{backend}' is not in general.backends {self.general.backends}"
        torch_range = (self.torch.minver, self.torch.maxver) if self.torch else (None, None)
        limits = [("torch", torch, *torch_range)]
        if cuda and self.general.cuda:
            limits.append(("general.cuda", cuda, self.general.cuda.minver, self.general.cuda.maxver))
        for what, version, low, high in limits:
            if low and PackagingVersion(version) < PackagingVersion(low):
                return f"{what}.minver is {low}, not {version}"
            if high and PackagingVersion(version) > PackagingVersion(high):
                return f"{what}.maxver is {high}, not {version}"
        return None

    def unbuilt(self) -> str | None:
        """Why kernel-matrix builds no variant of this kernel (a compiled kernel of backends
        it does not build: Metal, ROCm, XPU only; an [mlx-noarch] kernel), or None.
        kernel-builder builds those on their own platforms."""
        backends = self.general.backends
        if self.mlx_noarch is not None:  # edition 6: read and checked like a Metal section, not built
            return "[mlx-noarch]: an MLX kernel for Metal; kernel-matrix builds torch and tvm-ffi kernels"
        if self.noarch or set(backends) & set(BUILDABLE_BACKENDS):
            return None
        return f"general.backends {backends}: kernel-matrix builds {' and '.join(BUILDABLE_BACKENDS)} kernels"

    def skipped_sections(self) -> list[str]:
        """[kernel.*] sections of backends kernel-matrix does not build (metal, rocm, xpu)."""
        return [name for name, k in self.kernel.items() if k.backend not in BUILDABLE_BACKENDS]


def located(kernel_dir: Path, *loc: str) -> str:
    """`<kernel_dir>/build.toml:line:col` of a key path (its table's header where the key
    is not written), for a line about a file load_build_toml has read."""
    path = kernel_dir / "build.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # read before; gone or changed since
        return str(path)
    return where(path, *toml_key_position(text, loc))


# What `kernel-builder update-build` writes (kernels 0.19: edition 6, which its Nix builder requires).
UPDATE_BUILD_WRITES = "edition 6"
# The editions load_build_toml reads (4: a file without `edition`, upgraded in memory);
# `matrix --check-upstream` compares the newest with kernels-common's (tests/planning/test_upstream.py
# checks this list against what the reader accepts).
EDITIONS = (4, 5, 6)
EDITION_4_NOTE = (
    "no `edition` in [general]: read as edition 4 and upgraded in memory, as kernel-builder "
    f"does; `kernel-builder update-build` writes {UPDATE_BUILD_WRITES}"
)


def edition_4_note(kernel_dir: Path, config: BuildConfig) -> str | None:
    """The line that says a file without `edition` is upgraded in memory, at [general]."""
    return f"{located(kernel_dir, 'general')}: note: {EDITION_4_NOTE}" if config.general.edition is None else None


def skipped_note(kernel_dir: Path, config: BuildConfig) -> str | None:
    """The line that says which [kernel.*] sections a build of this kernel leaves out
    (backends kernel-matrix does not build), at the first one; None when none is."""
    skipped = config.skipped_sections()
    if not skipped or config.unbuilt():  # a kernel of those backends alone: `matrix` warns of it as a whole
        return None
    sections = ", ".join(f"[kernel.{name}] ({config.kernel[name].backend})" for name in skipped)
    built = " and ".join(BUILDABLE_BACKENDS)
    return f"{located(kernel_dir, 'kernel', skipped[0])}: note: {sections} skipped: kernel-matrix builds {built}"


def no_section_note(kernel_dir: Path, config: BuildConfig, backend: str) -> str | None:
    """A line for a compiled kernel built for a backend that general.backends lists but no
    [kernel.*] section is for: only the binding's sources compile into its library, and
    its references to the other backends' code are then undefined (the load after the
    build says so). kernel-builder makes no such variant either: it takes the backend for
    a Python-only one (nix-builder lib/build.nix, kernelBackends) and runs `setup.py
    build_kernel --backend <backend>`, an option the setup.py it generates for a [torch]
    or [tvm-ffi] kernel does not have (templates/*/setup.py: BuildKernel.user_options = [])."""
    if config.noarch or config.kernels_for(backend):
        return None
    binding = "tvm-ffi" if config.tvm_ffi else "torch"
    return (
        f'{located(kernel_dir, "general", "backends")}: note: no [kernel.*] section has backend = "{backend}": '
        f"the {backend} variant compiles only [{binding}] src (the binding); add a section with "
        f'backend = "{backend}", or leave "{backend}" out of general.backends '
        f"(kernel-builder builds no {backend} variant of this kernel)"
    )


def load_build_toml(kernel_dir: Path) -> BuildConfig:
    """Parse kernel_dir/build.toml. Its problems are one ConfigError, a
    `file:line:col: message` line each: all of them, except where the file
    cannot be read further (too deep, not TOML, an edition kernel-builder no
    longer reads), which stops at that one."""
    path = kernel_dir / "build.toml"
    text = read_config(path, "build.toml")  # its size, before any of it is parsed
    _check_nesting(path, text)
    try:
        raw = tomllib.loads(text)
    except RecursionError:  # a backstop: _check_nesting's limit is far below Python's
        raise ConfigError(f"{path}: nested too deeply; refusing to read it") from None
    except tomllib.TOMLDecodeError as exc:
        # Python < 3.14 keeps the position only in the message text.
        position = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        line, col = (int(position.group(1)), int(position.group(2))) if position else (1, 1)
        message = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        if message.startswith(("Cannot overwrite a value", "Cannot declare")) and (found := redefined_key(text)):
            line, col, key, earlier = found
            message = f"'{key}' is set twice (first at line {earlier}): TOML allows a key or table once"
        raise ConfigError(f"{where(path, line, col)}: invalid TOML: {message}") from None
    problems = Problems(path)
    schema = _check_edition(problems, text, raw)
    if schema is None:
        problems.raise_if_any()  # another format: reading it as edition 5 would only say so again
    assert schema is not None  # _check_edition said why it is none
    checked = None
    try:
        checked = schema.model.model_validate(raw)
    except ValidationError as exc:
        for line, col, message in _validation_problems(text, raw, exc, schema):
            problems.add(line, col, message)
    # These read the parsed text, not the model, so they run where it did not validate too.
    _check_framework(problems, text, raw, schema)
    _check_sources(problems, text, kernel_dir, raw)
    _check_python_depends(problems, text, raw)
    if schema is _EDITION_6 and checked is not None:  # as kernels-common checks them: once its keys are read
        edition6.check(problems, text, raw)
    problems.raise_if_any()
    if isinstance(checked, BuildConfig):
        return checked
    # Edition 6, checked, is read as its edition 5 twin (its C++ sections are edition 5's): the same model.
    return BuildConfig.model_validate(edition6.as_edition_5(raw))


# Arrays and inline tables nest two or three levels in a real build.toml; tomllib
# parses them recursively (5000 levels was a RecursionError traceback).
MAX_TOML_DEPTH = 32


def _check_nesting(path: Path, text: str) -> None:
    """Refuse arrays or inline tables nested over MAX_TOML_DEPTH levels before
    tomllib reads them: brackets and braces are counted outside strings and
    comments (a table header's brackets count too, and close on their line)."""
    depth, line, i, n = 0, 1, 0, len(text)
    while i < n:
        char = text[i]
        if char == "\n":
            line += 1
        elif char == "#":  # a comment, to the end of its line
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif char in "\"'":
            quote = char * 3 if text.startswith(char * 3, i) else char
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                if text[i] == "\\" and char == '"':
                    i += 1  # a basic string's escape: \" does not end it
                elif text[i] == "\n":
                    if len(quote) == 1:
                        break  # a one-line string ends at its line (tomllib says what is wrong)
                    line += 1
                i += 1
            i += len(quote)
            # A multi-line string may end with one or two more quotes, which are its text.
            while len(quote) == 3 and i < n and text[i] == char:
                i += 1
            continue
        elif char in "[{":
            depth += 1
            if depth > MAX_TOML_DEPTH:
                raise ConfigError(
                    f"{path}:{line}: arrays or tables nested over {MAX_TOML_DEPTH} levels deep; refusing to read it"
                )
        elif char in "]}":
            depth = max(depth - 1, 0)
        i += 1


# What edition 5 added; an edition 4 file (no `edition` key) may not use it.
_EDITION_5_ONLY = [
    ("general", "kernel-depends"),
    ("general", "tpu"),
    *(("general", backend, "kernel-depends") for backend in ("cuda", "neuron", "xpu")),
]


@dataclass(frozen=True)
class _Schema:
    """How the file of an edition is checked: its model, the key that says which model a
    [kernel.*] section is (and those models), and its frameworks."""

    model: type[_BuildFile]
    tag: str
    kernels: dict[str, type[Section]]
    frameworks: tuple[str, ...]


_EDITION_5 = _Schema(BuildConfig, "backend", _KERNEL_MODELS, FRAMEWORKS)  # and edition 4, upgraded
_EDITION_6 = _Schema(BuildFile6, "language", _KERNEL_MODELS_6, FRAMEWORKS_6)


def _check_edition(problems: Problems, text: str, raw: dict[str, Any]) -> _Schema | None:
    """Editions 5 and 6 as they are; a file without `edition` as kernel-builder's builds take
    it: edition 4 upgraded in memory, edition 3 and older refused with how to migrate them.
    The schema to check the file with, or None where the file is no edition 4, 5 or 6
    (nothing else in it is checked)."""
    section = raw.get("general")
    general: dict[str, Any] = section if isinstance(section, dict) else {}
    edition = general.get("edition")
    if edition == 6 and not isinstance(edition, bool):
        return _EDITION_6
    if edition is not None and (edition != 5 or isinstance(edition, bool)):
        # A newer edition than kernel-builder's own: update-build cannot help, only its author.
        newer = isinstance(edition, int) and not isinstance(edition, bool) and edition > 6
        advice = (
            "no kernel-builder release reads a newer one (kernels 0.19.1, kernels-common config/)"
            if newer
            else f"`kernel-builder update-build` writes {UPDATE_BUILD_WRITES}"
        )
        problems.add(
            *toml_key_position(text, ("general", "edition")),
            f"general.edition = {edition!r} is not supported: kernel-builder reads `edition = 6` and `edition = 5`, "
            f"and edition 4 as a file without `edition`; {advice}",
        )
        return None
    if edition is None and "backends" not in general:
        problems.add(*toml_key_position(text, ("general",)), _no_backends(raw))
        return None
    for loc in edition6.EDITION_6_ONLY:
        if _lookup(raw, loc) is not None:
            problems.add(
                *toml_key_position(text, loc),
                f"'{'.'.join(loc)}' needs edition 6 (`kernel-builder update-build` writes it)",
            )
    if edition == 5:
        return _EDITION_5
    for loc in _EDITION_5_ONLY:
        if _lookup(raw, loc) is not None:
            problems.add(
                *toml_key_position(text, loc), f"'{'.'.join(loc)}' needs edition 5: add `edition = 5` to [general]"
            )
    if isinstance(_lookup(raw, ("torch", "stable-abi")), dict):
        problems.add(
            *toml_key_position(text, ("torch", "stable-abi")),
            "a per-backend [torch.stable-abi] table needs edition 5: add `edition = 5`",
        )
    return _EDITION_5 if _check_edition_4(problems, text, raw, general) else None


# Edition 3's keys (kernels-data config/v3.rs, deny_unknown_fields): a file with others is no edition 3.
_EDITION_3_GENERAL = {
    *("name", "version", "license", "upstream", "backends"),
    *("cuda", "hub", "neuron", "python-depends", "xpu"),
}
_EDITION_3_TORCH = {"include", "minver", "maxver", "pyext", "src"}
# Its [kernel.*] keys by backend (v3.rs Kernel): update-build refuses a file with any other.
_EDITION_3_KERNEL_COMMON = {"backend", "cxx-flags", "depends", "include", "src"}
_EDITION_3_KERNEL = {
    "cpu": _EDITION_3_KERNEL_COMMON,
    "cuda": _EDITION_3_KERNEL_COMMON | {"cuda-capabilities", "cuda-flags", "cuda-minver"},
    "metal": _EDITION_3_KERNEL_COMMON,
    "rocm": _EDITION_3_KERNEL_COMMON | {"rocm-archs", "hip-flags"},
    "xpu": _EDITION_3_KERNEL_COMMON | {"sycl-flags"},
}


def _check_edition_4(problems: Problems, text: str, raw: dict[str, Any], general: dict[str, Any]) -> bool:
    """A file without `edition` is edition 4 where it has general.version and a framework
    section; without them kernel-builder reads it as edition 3 (kernels-data config/compat.rs),
    which its builds refuse (config/parse.rs: only edition 4 is upgraded in memory). False
    where the file is no edition 4."""
    framework = [name for name in FRAMEWORKS if name in raw]
    if "version" in general and framework:
        return True
    torch = raw.get("torch")
    edition_4_keys = [
        *(["[torch-noarch]"] if "torch-noarch" in raw else []),
        *(f"general.{key}" for key in general if key not in _EDITION_3_GENERAL),
        *(f"torch.{key}" for key in (torch if isinstance(torch, dict) else {}) if key not in _EDITION_3_TORCH),
    ]
    if edition_4_keys:  # not edition 3's keys: an edition 4 file that lacks its version
        problems.add(
            *toml_key_position(text, ("general",)),
            f"missing required key 'general.version': a file without `edition` that has {edition_4_keys[0]} is "
            "edition 4, which needs it",
        )
        return False
    missing = [
        *(["no general.version"] if "version" not in general else []),
        *(["no [torch] or [torch-noarch] section"] if not framework else []),
    ]
    # What update-build's edition-3 reader (kernels-data config/v3.rs) refuses before it migrates.
    name = general.get("name")
    backends = general.get("backends")
    unknown = [b for b in backends if b not in get_args(Backend)] if isinstance(backends, list) else []
    kernels = raw.get("kernel")
    unread = [
        f"kernel.{section}.{key}"
        for section, table in (kernels.items() if isinstance(kernels, dict) else [])
        if isinstance(table, dict)
        for key in table
        if key not in _EDITION_3_KERNEL.get(str(table.get("backend")), _EDITION_3_KERNEL_COMMON)
    ]
    blockers = [
        *([f"general.name matches {_NAME_PATTERN} ({name!r} does not)"] if not _NAME.match(str(name)) else []),
        *(["general.license is set"] if "license" not in general else []),
        *([f"general.backends names only {', '.join(get_args(Backend))} ({unknown[0]!r} is none)"] if unknown else []),
        *([f"{unread[0]} is removed (no edition has that key)"] if unread else []),
    ]
    advice = f"migrate it with `kernel-builder update-build` (it writes {UPDATE_BUILD_WRITES})"
    if blockers:
        advice = f"`kernel-builder update-build` migrates it to {UPDATE_BUILD_WRITES} once {' and '.join(blockers)}"
    problems.add(
        *toml_key_position(text, ("general",)),
        f"edition 3 (no `edition`, {' and '.join(missing)}): kernel-builder no longer builds this format; {advice}",
    )
    return False


def _no_backends(raw: dict[str, Any]) -> str:
    """Why a file with neither `edition` nor general.backends is no format kernel-builder reads."""
    tables = [raw.get(name) for name in ("general", "torch")]  # kernel-builder 0.x put it in either
    if any(isinstance(table, dict) and "universal" in table for table in tables):
        return (
            "a kernel-builder 0.x build.toml (`universal`): neither kernel-builder nor its "
            "`update-build` reads this format any more; rewrite [general] as edition 5 (`edition = 5`, "
            "`backends = [...]`, `version`, `license`) with [torch], or [torch-noarch] where universal = true"
        )
    return "no general.backends: every build.toml kernel-builder reads names its backends (add `backends = [...]`)"


def _lookup(data: object, loc: tuple[str, ...]) -> object:
    for key in loc:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _check_framework(problems: Problems, text: str, raw: dict[str, Any], schema: _Schema) -> None:
    # Every edition's frameworks are counted: an edition 5 file's [mlx-noarch] is its
    # framework, which _check_edition refuses (it needs edition 6).
    found = [name for name in FRAMEWORKS_6 if name in raw]
    if len(found) != 1:
        *others, last = [f"[{name}]" for name in schema.frameworks]
        problems.add(
            *(toml_key_position(text, (found[1],)) if len(found) > 1 else (1, 1)),
            f"a kernel has exactly one of {', '.join(others)} and {last} "
            f"(found {', '.join(f'[{n}]' for n in found) or 'none'})",
        )


def _section_model(raw: dict[str, Any], loc: tuple[str | int, ...], schema: _Schema) -> type[BaseModel] | None:
    """The model of the table at loc (for "did you mean" on an unknown key)."""
    model: type[BaseModel] | None = schema.model
    for index, part in enumerate(loc):
        if model is schema.model and part == "kernel" and index + 1 < len(loc):
            tag = _lookup(raw, ("kernel", str(loc[index + 1]), schema.tag))
            return schema.kernels.get(str(tag)) if index + 2 == len(loc) else None
        field = next((f for n, f in (model.model_fields.items() if model else []) if (f.alias or n) == part), None)
        if field is None:
            return None
        inner = [a for a in getattr(field.annotation, "__args__", (field.annotation,)) if isinstance(a, type)]
        model = next((a for a in inner if issubclass(a, BaseModel)), None)
    return model


def _validation_problems(
    text: str, raw: dict[str, Any], exc: ValidationError, schema: _Schema
) -> list[tuple[int, int, str]]:
    """(line, col, message) for each place the model refuses, once: a value of a
    union (stable-abi) fails once per member, and the first says enough."""
    problems: dict[tuple[str | int, ...], tuple[int, int, str]] = {}
    for error in exc.errors():
        loc = _key_path(raw, error, schema)
        if loc not in problems:
            problems[loc] = _describe(text, raw, loc, error, schema)
    # A union's member that refuses a key inside the value says more than one that refuses the
    # value as a whole (`stable-abi = {gpu = "2.10"}`: not a string, and 'gpu' no backend).
    return [problem for loc, problem in problems.items() if not any(o[: len(loc)] == loc != o for o in problems)]


def _key_path(raw: dict[str, Any], error: Mapping[str, Any], schema: _Schema) -> tuple[str | int, ...]:
    """pydantic's error location as keys of the file: less a [kernel.*] section's
    backend (language) tag and union members' names ("str"), which are none."""
    loc = tuple(error["loc"])
    if len(loc) >= 3 and loc[0] == "kernel" and loc[2] in schema.kernels:
        loc = loc[:2] + loc[3:]
    missing = loc[-1:] if error["type"] == "missing" else ()  # the key to add: not in the file
    path: list[str | int] = []
    node: object = raw
    for part in loc[: len(loc) - len(missing)]:
        children = node if isinstance(node, dict) else dict(enumerate(node)) if isinstance(node, list) else {}
        if part in children:
            node = children[part]
            path.append(part)
    return (*path, *missing)


def _describe(
    text: str, raw: dict[str, Any], loc: tuple[str | int, ...], error: Mapping[str, Any], schema: _Schema
) -> tuple[int, int, str]:
    hint = ""
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):  # a [kernel.*] section's backend (language)
        tag = _lookup(raw, (*map(str, loc), schema.tag))
        hint = _other_edition_tag(raw, loc, schema)
        loc = (*loc, schema.tag)
        if tag is None:
            error = {"type": "missing"}
        else:
            choices = list(schema.kernels)
            # An edition 5 backend where edition 6 wants a language: cuda is cpp-cuda.
            close = f"; did you mean 'cpp-{tag}'?" if f"cpp-{tag}" in choices else did_you_mean(tag, choices, quote="'")
            error = {"type": "", "input": tag, "msg": f"expected one of {', '.join(choices)}{close}"}
    line, col = toml_key_position(text, loc)
    dotted = ".".join(str(part) for part in loc)
    if error["type"] == "extra_forbidden":
        model = _section_model(raw, loc[:-1], schema)
        known = [f.alias or n for n, f in model.model_fields.items()] if model else []
        what = f"unknown key '{dotted}'" + did_you_mean(loc[-1], known, quote="'")
        if len(loc) == 3 and loc[0] == "kernel" and loc[2] in ("backend", "language"):
            hint = _other_edition_tag(raw, loc[:2], schema)
    elif error["type"] == "missing":
        what = f"missing required key '{dotted}'"
    else:
        value = _as_written(text, line, loc, error.get("input"))
        what = f"'{dotted}' = {value}: {error['msg'].removeprefix('Value error, ')}"
    return line, col, what + hint


def _other_edition_tag(raw: dict[str, Any], section: tuple[str | int, ...], schema: _Schema) -> str:
    """What to say of a [kernel.*] section tagged as the other edition tags it: edition 6
    names a section's `language`, editions 4 and 5 its `backend`."""
    table = _lookup(raw, tuple(map(str, section)))
    if not isinstance(table, dict):
        return ""
    if schema is _EDITION_6 and "backend" in table:
        backend = table["backend"]
        language = f'`language = "cpp-{backend}"`' if f"cpp-{backend}" in _KERNEL_MODELS_6 else "`language`"
        return f"; edition 6 tags a section by its language: {language}, not `backend`"
    if schema is _EDITION_5 and "language" in table:
        return "; `language` is edition 6's (`edition = 6` in [general]): editions 4 and 5 tag a section by `backend`"
    return ""


def _as_written(text: str, line: int, loc: tuple[str | int, ...], value: object) -> str:
    """A number or boolean as the file writes it (`minver = 2.10` is the float 2.1 once
    parsed); other values as Python shows them."""
    if isinstance(value, (int, float)) and loc and isinstance(loc[-1], str):
        lines = text.splitlines()
        written = re.match(
            rf"\s*{re.escape(loc[-1])}\s*=\s*([^\s#,\]}}]+)", lines[line - 1] if line <= len(lines) else ""
        )
        if written:
            return written.group(1)
    return repr(value)


def _check_python_depends(problems: Problems, text: str, raw: dict[str, Any]) -> None:
    """python-depends names kernel-builder knows: [general]'s from its general list, those of
    [general.cuda], [general.xpu] and [general.tpu] from that backend's (kernels-data
    config/mod.rs `all_python_depends`). The loader refuses a variant naming another."""
    known = data.load("python_depends")
    places: list[tuple[tuple[str, ...], list[str]]] = [(("general", "python-depends"), known["general"])]
    places += [(("general", b, "python-depends"), known["backends"].get(b, [])) for b in ("cuda", "xpu", "tpu")]
    for loc, names in places:
        entries = _lookup(raw, loc)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, str) and entry not in names:
                line, col = toml_key_position(text, loc)
                problems.add(
                    line,
                    col,
                    f"{'.'.join(loc)}: unknown dependency {json.dumps(entry)}: kernel-builder knows "
                    + (", ".join(names) or "none here")
                    + did_you_mean(entry, names),
                )


# A [kernel.<name>] section's name: it names a folder of object files, so no
# path separators or dots (the kernels of kernels-community use a-z, 0-9, _ and -).
SECTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _check_sources(problems: Problems, text: str, kernel_dir: Path, raw: dict[str, Any]) -> None:
    """Section names are plain names; every path resolves inside the kernel
    directory (what the kernel's commit covers); source files exist. Read from
    the parsed text: a list the model refused is checked as far as it holds text."""
    sections = raw.get("kernel")
    sections = sections if isinstance(sections, dict) else {}
    for name in sections:
        if not SECTION_NAME.match(name):
            line = next(
                (i for i, ln in enumerate(text.splitlines(), 1) if ln.lstrip().startswith("[") and name in ln), 1
            )
            problems.add(
                line,
                1,
                f"[kernel.{json.dumps(name)}]: a section name may only hold letters, digits, '_' and '-'",
            )
    root = kernel_dir.resolve()
    lists: list[tuple[tuple[str, ...], bool]] = [(("torch", key), key == "src") for key in ("src", "include")]
    lists += [(("kernel", name, key), key == "src") for name in sections for key in ("src", "include")]
    for loc, are_files in lists:
        entries = _lookup(raw, loc)
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, str):
                continue  # the model says what is wrong with it
            line, col = toml_key_position(text, loc)
            resolved = (root / entry).resolve()
            if Path(entry).is_absolute() or not resolved.is_relative_to(root):
                problems.add(
                    line,
                    col,
                    f"{'.'.join(loc)} entry '{entry}' is outside the kernel directory {root} (links followed): "
                    "only the kernel's own files are built",
                )
            elif are_files and not resolved.is_file():
                problems.add(line, col, f"source file '{entry}' does not exist in {kernel_dir}")
