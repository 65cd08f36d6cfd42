"""Build one variant natively: against a Python's installed torch, with the host's
compilers, into build/<variant>/. Container builds run the same steps inside
their images."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernel_matrix import PACKAGE_DIR
from kernel_matrix.building.compile import (
    DEFAULT_SOURCE_DATE_EPOCH,
    PY_LIMITED_API,
    PathMap,
    Progress,
    Step,
    caller_source_date_epoch,
    compile_environment,
    cxx_compile,
    cxx_standard,
    link_shared,
    nvcc_compile,
    run_steps,
)
from kernel_matrix.building.dependencies import Resolved
from kernel_matrix.building.dependencies import resolve as resolve_dependency
from kernel_matrix.building.inputs import build_inputs
from kernel_matrix.building.objcache import ObjectCache, write_key_record
from kernel_matrix.building.portable import Places
from kernel_matrix.building.provenance import compiler_version, git_state, toolchain
from kernel_matrix.building.torch_cmake import interface_defines
from kernel_matrix.building.variant_dir import (
    package_files,
    render_template,
    staged,
    write_metadata,
    write_python_package,
)
from kernel_matrix.config import genex
from kernel_matrix.config.buildtoml import (
    BUILDABLE_BACKENDS,
    BackendDepends,
    BuildConfig,
    CudaGeneral,
    CudaKernel,
    Dependency,
    General,
    KernelSection,
    Torch,
    TpuGeneral,
    TvmFfi,
    load_build_toml,
)
from kernel_matrix.errors import BuildError, ConfigError, ToolchainError
from kernel_matrix.hostfiles import write_file
from kernel_matrix.layout import BuildDir
from kernel_matrix.planning.capabilities import (
    capability_order,
    compilable_range,
    gencode_flags,
    generation,
    section_capabilities,
    select_capabilities,
    stable_abi_define,
    variant_archs,
)
from kernel_matrix.planning.resources import Parallelism, plan_parallelism
from kernel_matrix.planning.toolchain import TVM_FFI_REQUIREMENT, Nvcc, Toolchain, TorchInstall, TvmFfiInstall
from kernel_matrix.planning.torch_cuda import cuda_mismatch
from kernel_matrix.planning.variants import TVM_FFI_VERSION, Variant, torch_minor

# What CMake compiles as C++. A `.c` file is not among them: kernel-builder's cpu and cuda
# projects enable CXX (and CUDA), not C, and CMake leaves a source of a language it has not
# enabled uncompiled, as it leaves a header.
_CXX_SUFFIXES = {".cpp", ".cc", ".cxx", ".c++", ".C", ".CPP"}
_CUDA_SUFFIXES = {".cu"}
# A cuda-flags entry kernel-builder drops for CUDA < 12.8 (kernel.cmake).
_TEMPLATE_STUB_FLAG = re.compile(r"-static-global-template-stub=(true|false)")
# First on every include path: headers that keep newer glibc symbols out of the
# .so, so that it passes manylinux_2_28 when built on a newer system (see inside).
COMPAT_INCLUDE = PACKAGE_DIR / "compat" / "glibc-2.28"
# ...and included before every source: symbol versions older glibcs have (see inside).
COMPAT_SYMBOLS = COMPAT_INCLUDE / "kernel_matrix_symbols.h"
# registration.h: the macros a kernel-builder binding uses (TORCH_LIBRARY_EXPAND...).
REGISTRATION_INCLUDE = PACKAGE_DIR / "include"
# A tvm-ffi library's C++ standard: its CMake package's (tvm_ffi::header, cxx_std_17).
TVM_FFI_CXX_STANDARD = "17"


@dataclass(frozen=True)
class BuildPlan:
    """Everything that decides the build's output, build.toml's part resolved when it is
    planned: execution never parses the config again (the recipe digest, inputs.py, hashes
    build.toml's bytes with the files its flags name, as the object cache's scope does); its
    hash names the op namespace."""

    kernel_dir: Path
    variant: Variant
    torch: TorchInstall
    nvcc: Nvcc | None
    cxx: str
    capabilities: list[str]  # what the binding's .cu files are compiled for: archs, else the defaults
    archs: list[str]  # every section's, for metadata.json (none without a CUDA section)
    # From build.toml, as this variant builds it:
    general: General  # [general]: the names, version and license metadata.json records
    binding: Torch | TvmFfi  # the section of the binding's sources: [torch], or [tvm-ffi]
    # The [kernel.*] sections compiled into this variant: its backend's, minus CUDA sections
    # whose cuda-minver is above this CUDA (kernel-builder skips them).
    sections: dict[str, KernelSection]
    ext_dir: str  # the folder of the binding's Python package: torch-ext, or tvm-ffi-ext
    package_suffixes: frozenset[str]  # which files of that package the variant ships
    # The kernel's own registration.h, if it ships one (older kernels, upstream's cutlass-gemm
    # example): where `#include "registration.h"` finds it before kernel-matrix's.
    registration: Path | None
    python_depends: list[str]  # metadata.json's, the kernel's then its backend's
    kernel_depends: list[dict[str, Any]]
    # The CUDA sections a narrowed build (--cuda-capabilities) builds for their own
    # cuda-capabilities, none of which the narrowing names (section_capabilities says why).
    own_list_sections: list[str]
    # build.toml as parsed (JSON), only for the hash that names the op namespace.
    config_record: dict[str, Any] = field(repr=False)
    # [kernel.*] name -> the capabilities its .cu files are compiled for
    section_capabilities: dict[str, list[str]] = field(default_factory=dict)
    # What __DATE__ and __TIME__ expand to (recorded in metadata.json; it changes the
    # bytes, not the op namespace): the caller's SOURCE_DATE_EPOCH, or a rebuild's record.
    source_date_epoch: str = DEFAULT_SOURCE_DATE_EPOCH
    # A [tvm-ffi] kernel's: the apache-tvm-ffi it compiles against instead of torch.
    tvm_ffi: TvmFfiInstall | None = None

    @property
    def backend(self) -> str:
        return self.variant.backend

    @property
    def package_dir(self) -> Path:
        """The kernel's Python package: torch-ext/<name>/, or tvm-ffi-ext/<name>/."""
        return self.kernel_dir / self.ext_dir / self.general.python_name

    def flag_context(self, language: str) -> genex.Context:
        """What a flag's generator expressions are evaluated for: a file of language, these compilers."""
        return genex.Context(
            language,
            cxx_id="Clang" if "clang" in Path(self.cxx).name else "GNU",
            cxx_version=compiler_version(self.cxx),
            cuda_version=compiler_version(str(self.nvcc.path)) if self.nvcc else "0",
        )

    def flags(self, flags: list[str], language: str, where: str) -> list[str]:
        """A flag list of build.toml as the compiler gets it (config/genex.py), or one ConfigError
        line where an expression only this build meets cannot be evaluated."""
        try:
            return genex.expand(flags, self.flag_context(language))
        except genex.GenexError as exc:
            raise ConfigError(f"{self.kernel_dir / 'build.toml'}: {where}: {exc}") from None

    @property
    def framework(self) -> str:
        """What the binding is built against, as the build line names it: torch 2.14.1+cu130, tvm-ffi 0.1.15."""
        return f"tvm-ffi {self.tvm_ffi.version}" if self.tvm_ffi else f"torch {self.torch.version}"

    @property
    def library_name(self) -> str:
        """The compiled library: a torch extension is a Python (abi3) module; a tvm-ffi one
        is a plain library that tvm_ffi.load_module opens (kernel-builder: `<ops>.so`)."""
        return f"{self.module}.so" if self.tvm_ffi else f"{self.module}.abi3.so"

    def defines(self) -> list[str]:
        """What every source of the extension is compiled with, as kernel-builder's
        CMake does. TORCH_EXTENSION_NAME is the stable base name where kernel-matrix's
        registration.h is used (its macros take the namespace from module.cpp, so the
        binding's object is cached across source changes); a kernel's own
        registration.h registers under TORCH_EXTENSION_NAME itself and defines
        PyInit_<it>, so there it is the build's unique module name, as in kernel-builder."""
        if self.tvm_ffi is not None:  # kernel-builder's tvm-ffi preamble: no torch, no Python
            return [{"cuda": "CUDA_KERNEL", "cpu": "CPU_KERNEL"}[self.backend], f"TVM_FFI_EXTENSION_NAME={self.module}"]
        backend = {"cuda": ["USE_CUDA=1", "CUDA_KERNEL"], "cpu": ["CPU_KERNEL"]}[self.backend]
        stable = self.variant.stable_abi  # [torch] stable-abi for this backend
        return [
            *backend,
            *interface_defines(self.torch.torch_dir, cuda=self.backend == "cuda"),
            f"TORCH_EXTENSION_NAME={self.module if self.registration else self.module_base}",
            f"Py_LIMITED_API={PY_LIMITED_API}",
            "_GLIBCXX_USE_CXX11_ABI=1",
            *([stable_abi_define(stable)] if stable else []),
        ]

    @property
    def module(self) -> str:
        """The unique op namespace and extension module: _img2gray_cuda_1a2b3c4."""
        return f"{self.module_base}_{self.source_hash()[:7]}"

    @property
    def module_base(self) -> str:
        """The module name without the build's hash: _img2gray_cuda (the binding's TORCH_EXTENSION_NAME)."""
        return f"_{self.general.python_name}_{self.backend}"

    def source_files(self) -> list[str]:
        files = set(self.binding.src)
        for kernel in self.sections.values():
            files.update(kernel.src)
        files.update(
            str(p.relative_to(self.kernel_dir))
            for p in package_files(self.package_dir, self.kernel_dir, self.package_suffixes)
        )
        return sorted(files)

    def source_hash(self) -> str:
        """The hash of the plan and every source file's content, read once per plan."""
        return self._source_digest

    @cached_property
    def _source_digest(self) -> str:
        digest = hashlib.sha256()
        digest.update(
            json.dumps(
                [self.variant.name, self.torch.version, self.section_capabilities, self.config_record],
                sort_keys=True,
            ).encode()
        )
        for file in self.source_files():
            digest.update(file.encode() + b"\0" + (self.kernel_dir / file).read_bytes() + b"\0")
        return digest.hexdigest()


def plan_build(
    kernel_dir: Path,
    *,
    python: str | None = None,
    backend: str | None = None,
    cuda_capabilities: list[str] | None = None,
    config: BuildConfig | None = None,
) -> BuildPlan:
    """This host's plan: its toolchain probed (python: the interpreter whose torch to
    build against), then `plan`. config: the kernel's build.toml, where the caller has
    read it already."""
    kernel_dir = kernel_dir.resolve()
    config = config or load_build_toml(kernel_dir)
    return plan(
        kernel_dir,
        config,
        Toolchain.probe(python, tvm_ffi=config.tvm_ffi is not None),
        backend=backend,
        cuda_capabilities=cuda_capabilities,
        source_date_epoch=caller_source_date_epoch(),
    )


def plan(
    kernel_dir: Path,
    config: BuildConfig,
    toolchain: Toolchain,
    *,
    backend: str | None = None,
    cuda_capabilities: list[str] | None = None,
    source_date_epoch: str = DEFAULT_SOURCE_DATE_EPOCH,
) -> BuildPlan:
    """The build of kernel_dir with toolchain, as a value: no process is started.
    backend: None for the CUDA variant where the toolchain builds one, else the CPU one.
    cuda_capabilities replaces the CUDA version's default list (a matrix cell passes its own)."""
    kernel_dir = kernel_dir.resolve()
    package_files(kernel_dir / config.ext_dir / config.general.python_name, kernel_dir, config.package_suffixes)
    torch, nvcc = toolchain.torch, toolchain.nvcc
    tvm_ffi = _tvm_ffi_of(config, toolchain, kernel_dir)
    if backend is None:
        # The CUDA variant when it can be built here; otherwise the CPU one. A tvm-ffi
        # kernel does not link torch: nvcc alone decides.
        can_build_cuda = (torch.cuda or tvm_ffi) and nvcc is not None and "cuda" in config.general.backends
        backend = "cuda" if can_build_cuda else "cpu"
    if backend not in config.general.backends:
        raise ConfigError(
            f"{kernel_dir / 'build.toml'}: backend '{backend}' is not in general.backends {config.general.backends}"
        )
    if backend == "cuda":
        if not torch.cuda and not tvm_ffi:
            raise ToolchainError(
                f"torch {torch.version} ({torch.python}) is a CPU build: a CUDA variant "
                "needs a CUDA build of torch (or build with --backend cpu)"
            )
        if nvcc is None:
            raise ToolchainError("nvcc not found (set CUDA_HOME or put nvcc on PATH), or build with --backend cpu")
        if torch.cuda and not tvm_ffi and (reason := cuda_mismatch(torch.cuda, nvcc.version, exact=False)):
            raise ToolchainError(f"nvcc {nvcc.version} cannot build for torch {torch.version}: {reason}")
    elif backend != "cpu":
        raise ToolchainError(f"native builds support the cpu and cuda backends, not '{backend}'")
    # A torch extension is for its torch's CUDA; a tvm-ffi library for the toolkit that compiled it.
    cuda = (nvcc.version if tvm_ffi and nvcc else torch.cuda) if backend == "cuda" else None
    if refusal := config.refuses(backend, torch_minor(torch.version), cuda):
        raise ToolchainError(f"{kernel_dir / 'build.toml'}: {refusal}: this torch and CUDA cannot build it")
    stable = config.torch.stable_abi_for(backend) if config.torch else None
    if stable and Version(torch_minor(torch.version)) < Version(stable):
        raise ToolchainError(
            f"{kernel_dir / 'build.toml'}: torch.stable-abi {stable} for {backend} needs torch >= {stable}, "
            f"not {torch.version}"
        )
    # A stable-ABI build is named for the ABI version, not the torch it was built with.
    variant = Variant(
        torch=torch_minor(torch.version),
        backend=backend,
        cuda=cuda,
        arch=toolchain.arch,
        stable_abi=stable or None,
        tvm_ffi=tvm_ffi.minor if tvm_ffi else None,
    )
    capabilities_of: dict[str, list[str]] = {}  # each CUDA section built: its capabilities
    capabilities: list[str] = []
    archs: list[str] = []
    own_list: list[str] = []
    if backend == "cuda":
        assert nvcc is not None  # a CUDA build without one was refused above
        if cuda_capabilities:
            _check_compilable(cuda_capabilities, nvcc.version)
        # What this nvcc can compile decides (nvcc 12.6 cannot build sm_100, whatever torch's CUDA is).
        capabilities_of = section_capabilities(
            config, nvcc.version, cuda_capabilities, build_toml=kernel_dir / "build.toml"
        )
        archs = variant_archs(capabilities_of)
        capabilities = archs or select_capabilities(None, nvcc.version, cuda_capabilities)
        own_list = _own_list_sections(config, capabilities_of, nvcc.version, cuda_capabilities)
    binding = config.torch or config.tvm_ffi
    assert binding is not None, "a compiled kernel has [torch] or [tvm-ffi]"
    return BuildPlan(
        kernel_dir=kernel_dir,
        variant=variant,
        torch=torch,
        nvcc=nvcc if backend == "cuda" else None,
        cxx=toolchain.cxx,
        capabilities=capabilities,
        archs=archs,
        general=config.general,
        binding=binding,
        sections={
            name: kernel
            for name, kernel in config.kernels_for(backend).items()
            if not (isinstance(kernel, CudaKernel) and name not in capabilities_of)
        },
        ext_dir=config.ext_dir,
        package_suffixes=config.package_suffixes,
        registration=_own_registration(kernel_dir, config.torch),
        python_depends=python_depends(config, backend),
        kernel_depends=kernel_depends(config, backend),
        own_list_sections=own_list,
        config_record=config.model_dump(mode="json"),
        section_capabilities=capabilities_of,
        source_date_epoch=source_date_epoch,
        tvm_ffi=tvm_ffi,
    )


def _own_registration(kernel_dir: Path, torch: Torch | None) -> Path | None:
    """The kernel's own registration.h, if it ships one: beside the binding's sources, in
    torch-ext/ or in [torch] include (a tvm-ffi binding has none)."""
    if torch is None:
        return None  # registration.h is a torch binding's
    folders = [kernel_dir / "torch-ext", *((kernel_dir / s).parent for s in torch.src)]
    folders += [kernel_dir / d for d in torch.include]
    return next((f / "registration.h" for f in folders if (f / "registration.h").is_file()), None)


def _own_list_sections(
    config: BuildConfig, capabilities_of: dict[str, list[str]], cuda: str, narrowed: list[str] | None
) -> list[str]:
    """The CUDA sections a narrowed build (narrowed: --cuda-capabilities) builds for their own
    cuda-capabilities, none of which the narrowing names (capabilities_of: each built one's)."""
    if not narrowed:
        return []
    return [
        name
        for name, kernel in config.kernels_for("cuda").items()
        if isinstance(kernel, CudaKernel)
        and kernel.cuda_capabilities
        and name in capabilities_of
        and not select_capabilities(kernel.cuda_capabilities, cuda, narrowed)
    ]


def _tvm_ffi_of(config: BuildConfig, toolchain: Toolchain, kernel_dir: Path) -> TvmFfiInstall | None:
    """The apache-tvm-ffi a [tvm-ffi] kernel builds against (None for the others): one of
    the tvm-ffi ABI kernel-builder builds for, which the loader's tvm-ffi then picks."""
    if config.tvm_ffi is None:
        return None
    found = toolchain.tvm_ffi
    if found is None:  # a toolchain probed without it (Toolchain.probe(tvm_ffi=True) probes it)
        raise ToolchainError(
            f"{kernel_dir / 'build.toml'}: a [tvm-ffi] kernel needs apache-tvm-ffi ({TVM_FFI_REQUIREMENT})"
        )
    if found.minor != TVM_FFI_VERSION:
        raise ToolchainError(
            f"{kernel_dir / 'build.toml'}: apache-tvm-ffi {found.version} is installed; [tvm-ffi] kernels are built "
            f"against tvm-ffi {TVM_FFI_VERSION}, as kernel-builder builds them (pip install '{TVM_FFI_REQUIREMENT}')"
        )
    return found


def _check_compilable(capabilities: list[str], cuda_version: str) -> None:
    """Refuse a capability this CUDA version's nvcc cannot compile (--cuda-capabilities 7.0 for
    CUDA 13, whose nvcc starts at 7.5) before anything compiles: nvcc would stop at the first
    file. A matrix row was checked against the same table when the matrix was read."""
    compilable = compilable_range(cuda_version)
    if compilable is None:
        return  # a toolkit the table does not know: nvcc says what it cannot do
    low, high = compilable
    for capability in capabilities:
        if not low <= generation(capability) <= high:
            raise ConfigError(
                f"cuda capability {capability}: CUDA {cuda_version}'s nvcc compiles {low} to {high} "
                "(--cuda-capabilities, or a matrix row)"
            )


@dataclass(frozen=True)
class SectionSource:
    """How one [kernel.*] source is compiled: by the first section that lists it, with
    what every section listing it adds."""

    section: str  # the first section listing it (its object's folder)
    section_includes: list[Path]  # the sections' own include dirs
    dependency_includes: list[Path]  # their dependencies' headers
    cxx_flags: list[str]
    cuda_flags: list[str]
    capabilities: list[str]
    ptx_for_highest: bool


def section_sources(plan: BuildPlan, dependencies: dict[str, Resolved]) -> dict[str, SectionSource]:
    """Each source of the plan's sections, compiled once. kernel-builder adds every section's
    sources to one CMake target, which compiles a file once however many sections list it
    (flash-mla lists csrc/api/api_impl.cu in its sm90 and its sm100 section); each section
    appends its gencode and its flags to the file's COMPILE_OPTIONS (kernel.cmake,
    utils.cmake). So here: the sections' flags one after the other in build.toml's order,
    their capabilities and include dirs together (kernel-builder keeps one section's include
    dirs, whichever its hash map visits last; all of them, in order, is the deterministic
    superset). A file compiled twice would define its symbols twice in the link."""
    kernel_dir = plan.kernel_dir
    merged: dict[str, SectionSource] = {}
    every = all_dependency_includes(plan, dependencies)
    for name, kernel in plan.sections.items():
        # Generator expressions evaluated for the language each list is given to (as the
        # COMPILE_LANGUAGE wrappers of kernel-builder's kernel.cmake apply them).
        cuda_flags = (
            plan.flags(kernel.cuda_flags, "CUDA", f"[kernel.{name}] cuda-flags")
            if isinstance(kernel, CudaKernel)
            else []
        )
        if plan.nvcc is not None and Version(plan.nvcc.version) < Version("12.8"):
            # As kernel-builder's kernel.cmake: nvcc < 12.8 does not know this flag.
            cuda_flags = [f for f in cuda_flags if not _TEMPLATE_STUB_FLAG.fullmatch(f)]
        use = SectionSource(
            section=name,
            section_includes=[kernel_dir / d for d in kernel.include],
            # Its own first, then the other sections' (kernel-builder puts them all on every compile's path).
            dependency_includes=list(
                dict.fromkeys([*(dependencies[d].include for d in kernel.depends if d != "torch"), *every])
            ),
            cxx_flags=plan.flags(kernel.cxx_flags, "CXX", f"[kernel.{name}] cxx-flags"),
            cuda_flags=cuda_flags,
            capabilities=plan.section_capabilities.get(name, []),
            # kernel-builder: PTX of the highest only for the default list (its "12.1+PTX").
            ptx_for_highest=not (isinstance(kernel, CudaKernel) and kernel.cuda_capabilities),
        )
        for src in kernel.src:
            if (first := merged.get(src)) is None:
                merged[src] = use
                continue
            merged[src] = replace(
                first,
                section_includes=list(dict.fromkeys([*first.section_includes, *use.section_includes])),
                dependency_includes=list(dict.fromkeys([*first.dependency_includes, *use.dependency_includes])),
                cxx_flags=[*first.cxx_flags, *use.cxx_flags],
                cuda_flags=[*first.cuda_flags, *use.cuda_flags],
                capabilities=sorted({*first.capabilities, *use.capabilities}, key=capability_order),
                ptx_for_highest=first.ptx_for_highest or use.ptx_for_highest,
            )
    return merged


def all_dependency_includes(plan: BuildPlan, dependencies: dict[str, Resolved]) -> list[Path]:
    """Every dependency's headers of the plan's sections, in kernel-builder's order: the
    sections by name, each one's depends as listed (nix-builder lib/build.nix extraDeps:
    unique (flatten (mapAttrsToList ... depends))). kernel-builder puts them all on every
    compile's include path (the build inputs of the one derivation; the CMake of a CUTLASS
    dependency's include_directories), the binding's included: a binding that includes a
    CUTLASS header compiles there."""
    sections = plan.sections
    names = dict.fromkeys(d for name in sorted(sections) for d in sections[name].depends if d != "torch")
    return [dependencies[name].include for name in names]


def build_steps(
    plan: BuildPlan, work: Path, so_path: Path, *, parallel: Parallelism | None = None
) -> tuple[list[Step], Step]:
    """The compile steps (independent) and the link step of a plan.

    As kernel-builder compiles a torch extension: every source sees torch's
    headers and the extension's defines; a [kernel.*] section adds its include
    dirs, its dependencies' headers and its flags (cxx-flags for C++ files,
    cuda-flags for .cu files), and its .cu files get its own capabilities. A
    source that reads no torch header still makes the same object for every
    torch version (the command lines are the same in every builder image), so
    the object cache shares it."""
    kernel_dir, binding, tvm_ffi = plan.kernel_dir, plan.binding, plan.tvm_ffi
    defines = plan.defines()
    compiles: list[Step] = []

    if tvm_ffi is None:
        binding_includes = [REGISTRATION_INCLUDE]
        # torch's, Python's and CUDA's headers: -isystem, as CMake passes those of imported targets.
        system_includes = [*plan.torch.include_dirs, plan.torch.python_include]
        if plan.nvcc is not None:  # the toolkit's headers first, then those of torch's CUDA library wheels
            system_includes += [plan.nvcc.cuda_home / "include", *plan.torch.cuda_library_include_dirs]
        # at::parallel_for is inline OpenMP when torch is built with OpenMP: without
        # the flag it silently runs on one thread.
        openmp = ["-fopenmp"] if plan.torch.parallel_openmp else []
        std = cxx_standard(plan.torch.version)
        installed = {plan.torch.torch_dir.parent: "site-packages", plan.torch.python_include: "python-include"}
        # What every .cu of a torch extension gets in kernel-builder: torch's CMake package's
        # nvcc flags (share/cmake/Caffe2/public/cuda.cmake) and its own ENABLE_FP8.
        torch_nvcc_flags = ["--expt-relaxed-constexpr", "--expt-extended-lambda", "-DENABLE_FP8"]
    else:
        # A tvm-ffi library sees tvm-ffi's headers (and dlpack's), CUDA's, and no torch or Python.
        binding_includes = []
        system_includes = [*tvm_ffi.include_dirs, *([plan.nvcc.cuda_home / "include"] if plan.nvcc else [])]
        openmp = []
        std = TVM_FFI_CXX_STANDARD
        installed = {tvm_ffi.package.parent: "site-packages"}
        torch_nvcc_flags = []  # kernel-builder's tvm-ffi target: a section's own cuda-flags only
    # kernel-builder's torch extension target includes the kernel's csrc/ for every source
    # (utils.cmake, `target_include_directories(... PRIVATE csrc ...)`): csrc/cpu/x.cpp finds
    # csrc/x.h. Its tvm-ffi target does not.
    csrc = [kernel_dir / "csrc"] if (kernel_dir / "csrc").is_dir() and tvm_ffi is None else []
    # Insertion-ordered, not a set: a set's order changes from run to run, and
    # so would the binding's command line (and its cache key).
    section_dirs: dict[Path, None] = {}
    dependencies = plan_dependencies(plan)  # fetched here if not in the cache yet
    # The same bytes from any checkout and any torch install (compile.PathMap).
    path_map = PathMap(
        {
            kernel_dir: plan.general.name,
            **installed,
            REGISTRATION_INCLUDE.parent: "kernel_matrix",
            # A pin's folder is named by its digest, an override's by the host: both recorded by name.
            **{found.folder: f"deps/{name}" for name, found in dependencies.items()},
        }
    )
    # The stage's scratch folder is new every build; -g records it (nvcc's host stub
    # is compiled there). Mapped outside the cache key, which leaves the output out too.
    scratch = PathMap({work: "build"})
    places = Places(path_map.folders)

    def compile_step(
        source: Path,
        output: Path,
        includes: list[Path],
        flags: list[str],
        cuda_flags: list[str],
        capabilities: list[str],
        ptx_for_highest: bool = True,
    ) -> Step | None:
        includes = [COMPAT_INCLUDE, source.parent, *csrc, *includes]
        if source.suffix in _CUDA_SUFFIXES:
            assert plan.nvcc is not None
            argv = nvcc_compile(
                plan.nvcc.path,
                plan.cxx,
                source,
                output,
                includes=includes,
                defines=defines,
                gencode=gencode_flags(capabilities, ptx_for_highest=ptx_for_highest),
                std=std,
                system_includes=system_includes,
                flags=[*torch_nvcc_flags, *cuda_flags],
                pre_include=COMPAT_SYMBOLS,
                path_map=path_map,
            )
            compilers: tuple[str, ...] = (str(plan.nvcc.path), plan.cxx)
            tuning = scratch.nvcc_flags()
        elif source.suffix in _CXX_SUFFIXES:
            argv = cxx_compile(
                plan.cxx,
                source,
                output,
                includes=includes,
                defines=defines,
                flags=[*openmp, *flags],
                std=std,
                system_includes=system_includes,
                pre_include=COMPAT_SYMBOLS,
                path_map=path_map,
            )
            compilers, tuning = (plan.cxx,), scratch.gcc_flags()
        else:
            return None  # headers, and sources of other languages
        return Step(
            f"compile {source.relative_to(kernel_dir)}",
            argv,
            output,
            compilers=compilers,
            tuning=tuple(tuning),
            places=places,
        )

    for src, use in section_sources(plan, dependencies).items():
        source = kernel_dir / src
        section_dirs.update(dict.fromkeys(use.section_includes))
        section_dirs[source.parent] = None
        output = work / "obj" / use.section / (src.replace("/", "__") + ".o")
        step = compile_step(
            source,
            output,
            [*use.section_includes, *use.dependency_includes, *binding_includes],
            use.cxx_flags,
            use.cuda_flags,
            use.capabilities,
            ptx_for_highest=use.ptx_for_highest,
        )
        if step is not None:
            compiles.append(step)
    # The binding sees its own include dirs and the sections' (as one CMake target does), and
    # every section's dependencies (as kernel-builder's compiles all do).
    own_includes = [
        *(kernel_dir / d for d in binding.include),
        *section_dirs,
        *all_dependency_includes(plan, dependencies),
        *binding_includes,
    ]
    for src in binding.src:
        source = kernel_dir / src
        output = work / "obj" / ("torch" if tvm_ffi is None else "tvm-ffi") / (src.replace("/", "__") + ".o")
        step = compile_step(
            source,
            output,
            own_includes,
            plan.flags(binding.cxx_flags, "CXX", f"[{plan.ext_dir.removesuffix('-ext')}] cxx-flags"),
            [],
            plan.capabilities,
        )
        if step is not None:
            compiles.append(step)
    if tvm_ffi is None:
        compiles.append(_module_step(plan, work, path_map, scratch, std))
    # nvcc compiles a file's CUDA architectures in parallel with the cores the
    # other compiles leave idle (one .cu among four compiles on 16 cores: 4 threads).
    threads = parallel.nvcc_threads(len(compiles)) if parallel else 1
    if plan.nvcc is not None and threads > 1:
        nvcc = str(plan.nvcc.path)
        compiles = [
            replace(s, tuning=(*s.tuning, f"--threads={threads}")) if s.argv[0] == nvcc else s for s in compiles
        ]

    needed: list[str] = []  # torch's libraries, linked as torch's CMake package links them (link_shared)
    if tvm_ffi is None:
        libs, needed = ["c10"], ["torch", "torch_cpu"]
        lib_dirs = [plan.torch.lib_dir]
    else:  # libtvm_ffi.so, by its file name (tvm-ffi's CMake package links the file itself)
        libs, lib_dirs = [f":{tvm_ffi.library.name}"], [tvm_ffi.library.parent]
    if plan.nvcc is not None and tvm_ffi is None:
        cudart = plan.nvcc.cudart
        needed.append("torch_cuda")
        libs += ["c10_cuda", f":{cudart.name}"]  # -l:NAME also takes a versioned file name
        lib_dirs.append(cudart.parent)
    elif plan.nvcc is not None:
        # CMake's default for a CUDA library (CMAKE_CUDA_RUNTIME_LIBRARY Static), as kernel-builder
        # links a tvm-ffi one: no torch loads a libcudart.so for it. And cudart_static's own needs.
        cudart = plan.nvcc.cudart_static
        libs += [f":{cudart.name}", "dl", "pthread", "rt"]
        lib_dirs.append(cudart.parent)
    link = Step(
        f"link {so_path.name}",
        link_shared(
            plan.cxx, [s.output for s in compiles], so_path, lib_dirs=lib_dirs, libs=libs, needed=needed, flags=openmp
        ),
        so_path,
    )
    return compiles, link


def _module_step(plan: BuildPlan, work: Path, path_map: PathMap, scratch: PathMap, std: str) -> Step:
    """The torch extension's own module (PyInit_<module>): a few lines, compiled every
    time (not cached: its path is the stage's)."""
    module_source = work / "generated" / "module.cpp"
    module_source.parent.mkdir(parents=True, exist_ok=True)
    # Weak where the kernel's own registration.h defines PyInit_<module> (REGISTER_EXTENSION):
    # the linker takes the kernel's, and this one only where its binding defines none.
    weak = "__attribute__((weak)) " if plan.registration else ""
    module_source.write_text(render_template("module.cpp.in", module=plan.module, linkage=weak))
    argv = cxx_compile(
        plan.cxx,
        module_source,
        work / "obj" / "module.cpp.o",
        includes=[],
        system_includes=[plan.torch.python_include],
        defines=[f"Py_LIMITED_API={PY_LIMITED_API}"],
        flags=[],
        std=std,
        # In the stage: mapped like the scratch folder (this step is never cached).
        path_map=PathMap({**path_map.folders, **scratch.folders}),
    )
    return Step("compile module.cpp (generated)", argv, work / "obj" / "module.cpp.o")


def declared_dependencies(config: BuildConfig) -> set[Dependency]:
    """The dependencies beyond torch that the sections kernel-matrix builds declare."""
    return {d for backend in BUILDABLE_BACKENDS for k in config.kernels_for(backend).values() for d in k.depends} - {
        "torch"
    }


def plan_dependencies(plan: BuildPlan) -> dict[str, Resolved]:
    """Each dependency of the plan's sections, by name: its folder (holding include/),
    from $KERNEL_MATRIX_DEPS_DIR or the pin's cache (dependencies.resolve)."""
    found: dict[str, Resolved] = {}
    problems: dict[str, str] = {}  # every dependency that cannot be had, not only the first
    for name, kernel in plan.sections.items():
        for dependency in kernel.depends:
            if dependency != "torch" and dependency not in found and dependency not in problems:
                where = f"{plan.kernel_dir / 'build.toml'}: [kernel.{name}]"
                try:
                    found[dependency] = resolve_dependency(dependency, where)
                except ToolchainError as exc:
                    problems[dependency] = str(exc)
    if problems:
        raise ToolchainError("\n".join(problems.values()))
    return found


@dataclass(frozen=True)
class BuildResult:
    variant_dir: Path
    compiled: int  # objects compiled
    cached: int  # objects taken from the cache


def toolchain_record(plan: BuildPlan) -> dict[str, str]:
    """What compiled plan's variant, as metadata.json's provenance records it (and verify compares)."""
    record = toolchain(
        torch_version=plan.torch.version,
        python=plan.torch.python,
        cxx=plan.cxx,
        nvcc=str(plan.nvcc.path) if plan.nvcc else None,
        source_date_epoch=plan.source_date_epoch,
    )
    if plan.tvm_ffi is None:
        return record
    # No torch in a tvm-ffi library: the tvm-ffi it compiled against takes torch's place.
    version = plan.tvm_ffi.version
    return {("tvm-ffi" if k == "torch" else k): (version if k == "torch" else v) for k, v in record.items()}


def recorded_toolchain(plan: BuildPlan) -> dict[str, str]:
    """metadata.json's provenance.toolchain: toolchain_record, and the headers of its
    `depends`, part of what compiled it (variant_dir's provenance has no place of their own
    for them): name -> pin and digest."""
    return toolchain_record(plan) | {name: found.record() for name, found in plan_dependencies(plan).items()}


def build_variant(
    plan: BuildPlan,
    out_dir: Path,
    *,
    on_step: Callable[[Step, bool], None] = lambda step, cached: None,
    jobs: int | None = None,
    cache: ObjectCache | None = None,
    progress: Progress | None = None,
    check: Callable[[Path], None] | None = None,
) -> BuildResult:
    """Build plan's variant into out_dir/<variant>/, atomically.

    jobs: parallel compiles (default: from cores and memory); cache: where
    compiled objects are looked up and stored (None: always compile); check: called
    with the finished variant before it replaces the built one (a raise keeps the old)."""
    final = out_dir.resolve() / plan.variant.name
    general = plan.general
    parallel = plan_parallelism(1, max_jobs=str(jobs) if jobs else None)
    counts = {True: 0, False: 0}

    def done(step: Step, cached: bool) -> None:
        if step.compilers:
            counts[cached] += 1
        on_step(step, cached)

    with staged(final) as stage:
        work = stage / ".work"
        so_path = stage / plan.library_name
        compiles, link = build_steps(plan, work, so_path, parallel=parallel)
        if cache is not None:  # what each compile is looked up by: why a build missed another's objects
            write_key_record(
                BuildDir(out_dir.resolve()).log(plan.variant.name, "cache-keys.json"),
                [(s.label, s.argv, s.output, list(s.compilers), s.places) for s in compiles if s.compilers],
                compile_environment(plan.source_date_epoch),
            )
        try:
            run_steps(
                compiles,
                link,
                cwd=plan.kernel_dir,
                on_done=done,
                jobs=parallel.compiles,
                cache=cache,
                progress=progress,
                source_date_epoch=plan.source_date_epoch,
            )
        except BuildError as exc:
            if not exc.log:
                raise
            log_path = BuildDir(out_dir.resolve()).log(plan.variant.name, "log")
            write_file(log_path, exc.log)
            raise BuildError(f"{exc} (full log: {log_path})") from None
        shutil.rmtree(work)
        check_shared_libstdcxx(so_path, plan.cxx)
        write_python_package(
            stage,
            plan.package_dir,
            name=general.python_name,
            module=plan.module,
            kernel_dir=plan.kernel_dir,
            suffixes=plan.package_suffixes,
            ops_template="_ops_tvm_ffi.py.in" if plan.tvm_ffi else "_ops.py.in",
        )
        write_metadata(
            stage,
            name=general.name,
            module=plan.module,
            version=general.version,
            license=general.license,
            backend=plan.backend,
            archs=plan.archs if plan.backend == "cuda" and plan.archs else None,
            kernel_git=git_state(plan.kernel_dir),
            python_depends=plan.python_depends,
            kernel_depends=plan.kernel_depends,
            upstream=general.upstream,
            source=general.source,
            toolchain=recorded_toolchain(plan),
            inputs=build_inputs(plan, recorded_toolchain(plan)),
        )
        if check is not None:
            check(stage)
    return BuildResult(final, compiled=counts[False], cached=counts[True])


def needed_libraries(library: Path) -> list[str] | None:
    """The DT_NEEDED entries of a shared library (readelf, from the binutils every
    compiler links with); None where readelf is missing."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    result = subprocess.run([readelf, "-d", str(library)], capture_output=True, text=True, check=False)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", result.stdout)


def check_shared_libstdcxx(library: Path, cxx: str) -> None:
    """An extension must use the process's libstdc++, the one torch uses: a private,
    statically linked copy keeps its own iostream and locale state, and the first
    std:: object that crosses to torch (an error message formatting a shape) crashes.
    Some toolchains' g++ links libstdc++ statically by default."""
    needed = needed_libraries(library)
    if needed is not None and not any(name.startswith("libstdc++.so") for name in needed):
        raise ToolchainError(
            f"{cxx} linked libstdc++ statically into {library.name}: the extension would crash when it hands "
            "std:: objects to torch; use a g++ that links libstdc++ shared (set CXX, e.g. CXX=/usr/bin/g++)"
        )


def write_build_stats(path: Path, seconds: float, result: BuildResult, *, reused: bool = False) -> None:
    """logs/<variant>.build.json: what a container build reports in its summary (reused: the
    variant is a published one, nothing compiled)."""
    stats = {"seconds": round(seconds, 2), "compiled": result.compiled, "cached": result.cached}
    if reused:
        stats["reused"] = True
    write_file(path, json.dumps(stats) + "\n")


def _backend_general(config: BuildConfig, backend: str) -> CudaGeneral | BackendDepends | TpuGeneral | None:
    """The backend's [general.<backend>] table, where build.toml has one."""
    general = config.general
    return {"cuda": general.cuda, "xpu": general.xpu, "tpu": general.tpu, "neuron": general.neuron}.get(backend)


def python_depends(config: BuildConfig, backend: str) -> list[str]:
    """metadata.json's python-depends: the kernel's, then its backend's (kernel-builder's order).
    Only [general.cuda], [general.tpu] and [general.xpu] add theirs: kernels-data's
    backend_python_depends reads no other table, so a [general.neuron] list is not written."""
    table = _backend_general(config, backend) if backend in ("cuda", "tpu", "xpu") else None
    return [*(config.general.python_depends or []), *((table.python_depends if table else None) or [])]


def kernel_depends(config: BuildConfig, backend: str) -> list[dict[str, Any]]:
    """metadata.json's kernel-depends: the kernel's, then its backend's, each as
    kernel-builder writes it ({"repo-id", "version"} or {"repo-id", "revision"})."""
    table = _backend_general(config, backend)
    own = table.kernel_depends if isinstance(table, BackendDepends) else None  # [general.tpu] has none
    depends = [*(config.general.kernel_depends or []), *(own or [])]
    return [d.model_dump(mode="json", by_alias=True, exclude_none=True) for d in depends]


def build_noarch(
    kernel_dir: Path,
    out_dir: Path,
    *,
    backends: list[str] | None = None,
    config: BuildConfig | None = None,
    check: Callable[[Path, str], None] | None = None,
) -> list[Path]:
    """A Python-only kernel ([torch-noarch]): one variant per backend, torch-<backend>/,
    holding its package, _ops.py and metadata.json; nothing is compiled. check: called
    with each finished variant and its backend before it replaces the built one."""
    kernel_dir = kernel_dir.resolve()
    config = config or load_build_toml(kernel_dir)
    general, noarch = config.general, config.torch_noarch
    assert noarch is not None
    package = kernel_dir / "torch-ext" / general.python_name
    files = package_files(package, kernel_dir, config.package_suffixes)
    for backend in backends or []:
        if backend not in general.backends:
            raise ConfigError(
                f"{kernel_dir / 'build.toml'}: backend '{backend}' is not in general.backends {general.backends}"
            )
    digest = hashlib.sha256(json.dumps(config.model_dump(mode="json"), sort_keys=True).encode())
    for path in files:
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    made = []
    for backend in backends or general.backends:
        module = f"_{general.python_name}_{backend}_{digest.hexdigest()[:7]}"
        archs = {"cuda": noarch.cuda_capabilities, "rocm": noarch.rocm_archs}.get(backend)
        with staged(out_dir.resolve() / f"torch-{backend}") as stage:
            write_python_package(
                stage,
                package,
                name=general.python_name,
                module=module,
                kernel_dir=kernel_dir,
                suffixes=config.package_suffixes,
                ops_template="_ops_noarch.py.in",
            )
            write_metadata(
                stage,
                name=general.name,
                module=module,
                version=general.version,
                license=general.license,
                backend=backend,
                archs=archs,
                kernel_git=git_state(kernel_dir),
                python_depends=python_depends(config, backend),
                kernel_depends=kernel_depends(config, backend),
                upstream=general.upstream,
                source=general.source,
            )
            if check is not None:
                check(stage, backend)
        made.append(out_dir.resolve() / f"torch-{backend}")
    return made
