"""Build one variant natively: against a Python's installed torch, with the host's
compilers, into build/<variant>/. Container builds run the same steps inside
their images."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from .buildtoml import BuildConfig, load_build_toml
from .capabilities import gencode_flags, select_capabilities
from .compile import PY_LIMITED_API, Step, cxx_compile, link_shared, nvcc_compile, run_steps
from .errors import BuildError, ConfigError, ToolchainError
from .objcache import ObjectCache
from .provenance import git_state
from .resources import Parallelism, plan_parallelism
from .toolchain import Nvcc, TorchInstall, find_cxx, find_nvcc, probe_torch
from .variant_dir import package_files, render_template, staged, write_metadata, write_python_package
from .variants import Variant, host_arch, torch_minor

_CXX_SUFFIXES = {".cpp", ".cc", ".cxx", ".c"}
_CUDA_SUFFIXES = {".cu"}
# First on every include path: headers that keep newer glibc symbols out of the
# .so, so that it passes manylinux_2_28 when built on a newer system (see inside).
COMPAT_INCLUDE = Path(__file__).resolve().parent / "compat" / "glibc-2.28"
# registration.h: the macros a kernel-builder binding uses (TORCH_LIBRARY_EXPAND...).
REGISTRATION_INCLUDE = Path(__file__).resolve().parent / "include"


@dataclass(frozen=True)
class BuildPlan:
    """Everything that decides the build's output; its hash names the op namespace."""

    config: BuildConfig
    kernel_dir: Path
    variant: Variant
    torch: TorchInstall
    nvcc: Nvcc | None
    cxx: str
    capabilities: list[str]

    @property
    def backend(self) -> str:
        return self.variant.backend

    @property
    def module(self) -> str:
        """The unique op namespace and extension module: _img2gray_cuda_1a2b3c4."""
        return f"{self.module_base}_{self.source_hash()[:7]}"

    @property
    def module_base(self) -> str:
        """The module name without the build's hash: _img2gray_cuda (the binding's TORCH_EXTENSION_NAME)."""
        return f"_{self.config.general.python_name}_{self.backend}"

    def source_files(self) -> list[str]:
        files = set(self.config.torch.src)
        for kernel in self.config.kernels_for(self.backend).values():
            files.update(kernel.src)
        package = self.kernel_dir / "torch-ext" / self.config.general.python_name
        files.update(str(p.relative_to(self.kernel_dir)) for p in package_files(package, self.kernel_dir))
        return sorted(files)

    def source_hash(self) -> str:
        digest = hashlib.sha256()
        digest.update(
            json.dumps(
                [self.variant.name, self.torch.version, self.capabilities, self.config.model_dump(mode="json")],
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
) -> BuildPlan:
    """cuda_capabilities replaces the CUDA version's default list (a matrix cell passes its own)."""
    kernel_dir = kernel_dir.resolve()
    config = load_build_toml(kernel_dir)
    package_files(kernel_dir / "torch-ext" / config.general.python_name, kernel_dir)  # refuses links out, early
    torch = probe_torch(python)
    nvcc = find_nvcc()
    if backend is None:
        # The CUDA variant when it can be built here; otherwise the CPU one.
        can_build_cuda = torch.cuda and nvcc is not None and "cuda" in config.general.backends
        backend = "cuda" if can_build_cuda else "cpu"
    if backend not in config.general.backends:
        raise ConfigError(
            f"{kernel_dir / 'build.toml'}: backend '{backend}' is not in general.backends {config.general.backends}"
        )
    if backend == "cuda":
        if not torch.cuda:
            raise ToolchainError(
                f"torch {torch.version} ({torch.python}) is a CPU build: a CUDA variant "
                "needs a CUDA build of torch (or build with --backend cpu)"
            )
        if nvcc is None:
            raise ToolchainError("nvcc not found (set CUDA_HOME or put nvcc on PATH), or build with --backend cpu")
        if nvcc.version.split(".")[0] != torch.cuda.split(".")[0]:
            raise ToolchainError(
                f"nvcc {nvcc.version} cannot build for torch {torch.version}: "
                f"the CUDA major versions differ (torch was built with CUDA {torch.cuda})"
            )
    elif backend != "cpu":
        raise ToolchainError(f"native builds support the cpu and cuda backends, not '{backend}'")
    cuda = torch.cuda if backend == "cuda" else None
    variant = Variant(torch=torch_minor(torch.version), backend=backend, cuda=cuda, arch=host_arch())
    capabilities: list[str] = []
    if backend == "cuda":
        requested = [
            cap
            for k in config.kernels_for("cuda").values()
            if k.backend == "cuda"
            for cap in (k.cuda_capabilities or [])
        ] or None
        # What this nvcc can compile decides (nvcc 12.6 cannot build sm_100, whatever torch's CUDA is).
        capabilities = select_capabilities(requested, nvcc.version, cuda_capabilities)
        if not capabilities:
            raise ConfigError(
                f"{kernel_dir / 'build.toml'}: none of cuda-capabilities {requested} can be built with CUDA {cuda}"
            )
    return BuildPlan(
        config=config,
        kernel_dir=kernel_dir,
        variant=variant,
        torch=torch,
        nvcc=nvcc if backend == "cuda" else None,
        cxx=find_cxx(),
        capabilities=capabilities,
    )


def build_steps(
    plan: BuildPlan, work: Path, so_path: Path, *, parallel: Parallelism | None = None
) -> tuple[list[Step], Step]:
    """The compile steps (independent) and the link step of a plan."""
    kernel_dir, config = plan.kernel_dir, plan.config
    generated = work / "generated"
    generated.mkdir(parents=True, exist_ok=True)
    module_source = generated / "module.cpp"
    module_source.write_text(render_template("module.cpp.in", module=plan.module))
    backend_define = f"{plan.backend.upper()}_KERNEL"  # as kernel-builder defines it
    compiles: list[Step] = []
    # Insertion-ordered, not a set: a set's order changes from run to run, and
    # so would the binding's command line (and its cache key).
    include_dirs: dict[Path, None] = {}

    own = [d / "registration.h" for d in [kernel_dir / "torch-ext", *(kernel_dir / i for i in config.torch.include)]]
    if any(path.is_file() for path in own):
        # Its macros would register the ops under TORCH_EXTENSION_NAME, which here
        # is the stable base name, while _ops.py looks under the build's namespace.
        found = next(path for path in own if path.is_file())
        raise ConfigError(f"{found}: kernel-matrix provides registration.h; remove the kernel's own copy")
    for name, kernel in config.kernels_for(plan.backend).items():
        includes = [kernel_dir / d for d in kernel.include]
        include_dirs.update(dict.fromkeys(includes))
        for src in kernel.src:
            source = kernel_dir / src
            include_dirs[source.parent] = None
            output = work / "obj" / name / (Path(src).name + ".o")
            if source.suffix in _CUDA_SUFFIXES:
                assert plan.nvcc is not None
                argv = nvcc_compile(
                    plan.nvcc.path,
                    plan.cxx,
                    source,
                    output,
                    includes=[COMPAT_INCLUDE, source.parent, *includes],
                    gencode=gencode_flags(plan.capabilities),
                    flags=[*kernel.cuda_flags, *(f"-Xcompiler={f}" for f in kernel.cxx_flags)],
                )
                compilers, tuning = (str(plan.nvcc.path), plan.cxx), ()
            elif source.suffix in _CXX_SUFFIXES:
                argv = cxx_compile(
                    plan.cxx,
                    source,
                    output,
                    includes=[COMPAT_INCLUDE, source.parent, *includes],
                    defines=[backend_define],
                    flags=kernel.cxx_flags,
                )
                compilers, tuning = (plan.cxx,), ()
            else:
                continue  # headers
            compiles.append(Step(f"compile {src}", argv, output, compilers=compilers, tuning=tuning))

    torch_includes = [
        COMPAT_INCLUDE,
        *include_dirs,
        REGISTRATION_INCLUDE,
        *plan.torch.include_dirs,
        plan.torch.python_include,
        *(kernel_dir / d for d in config.torch.include),
    ]
    if plan.nvcc is not None:
        torch_includes.append(plan.nvcc.cuda_home / "include")
    limited_api = f"Py_LIMITED_API={PY_LIMITED_API}"
    # The stable name, not the build's: the binding's object does not change when
    # another source does, so the cache reuses it (registration.h says how).
    defines = [backend_define, f"TORCH_EXTENSION_NAME={plan.module_base}", limited_api, "_GLIBCXX_USE_CXX11_ABI=1"]
    # at::parallel_for is inline OpenMP when torch is built with OpenMP: without
    # the flag it silently runs on one thread.
    openmp = ["-fopenmp"] if plan.torch.parallel_openmp else []
    for src in config.torch.src:
        source = kernel_dir / src
        if source.suffix in _CXX_SUFFIXES:
            output = work / "obj" / "torch" / (source.name + ".o")
            argv = cxx_compile(
                plan.cxx,
                source,
                output,
                includes=[source.parent, *torch_includes],
                defines=defines,
                flags=[*openmp, *config.torch.cxx_flags],
            )
            compiles.append(Step(f"compile {src}", argv, output, compilers=(plan.cxx,)))
    # The build's own module: a few lines, compiled every time (not cached: its path is the stage's).
    argv = cxx_compile(
        plan.cxx,
        module_source,
        work / "obj" / "module.cpp.o",
        includes=[plan.torch.python_include],
        defines=[limited_api],
        flags=[],
    )
    compiles.append(Step("compile module.cpp (generated)", argv, work / "obj" / "module.cpp.o"))
    # nvcc compiles a file's CUDA architectures in parallel with the cores the
    # other compiles leave idle (one .cu among four compiles on 16 cores: 4 threads).
    threads = parallel.nvcc_threads(len(compiles)) if parallel else 1
    if plan.nvcc is not None and threads > 1:
        nvcc = str(plan.nvcc.path)
        compiles = [replace(s, tuning=(f"--threads={threads}",)) if s.argv[0] == nvcc else s for s in compiles]

    libs = ["c10", "torch", "torch_cpu"]
    lib_dirs = [plan.torch.lib_dir]
    if plan.nvcc is not None:
        cudart = plan.nvcc.cudart
        libs += ["c10_cuda", "torch_cuda", f":{cudart.name}"]  # -l:NAME also takes a versioned file name
        lib_dirs.append(cudart.parent)
    link = Step(
        f"link {so_path.name}",
        link_shared(plan.cxx, [s.output for s in compiles], so_path, lib_dirs=lib_dirs, libs=libs, flags=openmp),
        so_path,
    )
    return compiles, link


@dataclass(frozen=True)
class BuildResult:
    variant_dir: Path
    compiled: int  # objects compiled
    cached: int  # objects taken from the cache


def build_variant(
    plan: BuildPlan,
    out_dir: Path,
    *,
    on_step: Callable[[Step, bool], None] = lambda step, cached: None,
    jobs: int | None = None,
    cache: ObjectCache | None = None,
) -> BuildResult:
    """Build plan's variant into out_dir/<variant>/, atomically.

    jobs: parallel compiles (default: from cores and memory); cache: where
    compiled objects are looked up and stored (None: always compile)."""
    final = out_dir.resolve() / plan.variant.name
    general = plan.config.general
    parallel = plan_parallelism(1, max_jobs=str(jobs) if jobs else None)
    counts = {True: 0, False: 0}

    def done(step: Step, cached: bool) -> None:
        if step.compilers:
            counts[cached] += 1
        on_step(step, cached)

    with staged(final) as stage:
        work = stage / ".work"
        so_path = stage / f"{plan.module}.abi3.so"
        compiles, link = build_steps(plan, work, so_path, parallel=parallel)
        try:
            run_steps(compiles, link, cwd=plan.kernel_dir, on_done=done, jobs=parallel.compiles, cache=cache)
        except BuildError as exc:
            if not exc.log:
                raise
            log_path = out_dir.resolve() / "logs" / f"{plan.variant.name}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(exc.log)
            raise BuildError(f"{exc} (full log: {log_path})") from None
        shutil.rmtree(work)
        write_python_package(
            stage,
            plan.kernel_dir / "torch-ext" / general.python_name,
            name=general.python_name,
            module=plan.module,
            kernel_dir=plan.kernel_dir,
        )
        write_metadata(
            stage,
            name=general.name,
            module=plan.module,
            version=general.version,
            license=general.license,
            backend=plan.backend,
            archs=plan.capabilities if plan.backend == "cuda" else None,
            kernel_git=git_state(plan.kernel_dir),
            python_depends=[],
        )
    return BuildResult(final, compiled=counts[False], cached=counts[True])
