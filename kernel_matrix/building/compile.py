"""Compiler command lines for a native variant build, and running them.

Pure functions build argv lists; `run_steps` runs independent compiles in
parallel (through the object cache when given one) and the link last. Nothing
here knows about variant layouts.

The same sources and toolchain make the same bytes wherever they are built:
every compile records the folders it reads from under fixed names (`PathMap`),
nvcc keeps its temporary files beside the object (its default names carry its
process id) and names the source by its mapped path, and __DATE__/__TIME__ are
pinned (SOURCE_DATE_EPOCH)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from kernel_matrix.building.objcache import NOWHERE, ObjectCache, cacheable
from kernel_matrix.building.portable import Places
from kernel_matrix.errors import BuildError

# Python's stable API as kernel-builder's CMake gives it (Python3_add_library's USE_SABI 3):
# 3.2's, so a source compiles here only where it compiles there; the .so is abi3, and
# check-abi checks it against Python 3.9's stable ABI.
PY_LIMITED_API = "3"
# CMake's Release build, which kernel-builder's are (torch/setup.py's cfg; nixpkgs' cmake
# hook): -O3 and asserts compiled out.
RELEASE = ("-O3", "-DNDEBUG")


def cxx_standard(torch_version: str) -> str:
    """kernel-builder's C++ standard for a torch (utils.cmake): 17 below torch 2.12, 20 from
    it (its headers stop with `#error C++20 or later ... is required`). g++ gets it with
    GNU extensions (CMake's default, -std=gnu++20: `linux` defined, __int128 integral),
    nvcc as CMake passes it (-std=c++20)."""
    return "17" if Version(torch_version).release[:2] < (2, 12) else "20"


# __DATE__ and __TIME__ expand to this moment unless the caller sets its own
# (gcc, and nvcc through gcc, read it): a build's bytes never depend on the clock.
SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"
DEFAULT_SOURCE_DATE_EPOCH = "0"


def compile_environment(source_date_epoch: str) -> dict[str, str]:
    """Every compiler's environment: this process's, with __DATE__ and __TIME__ pinned."""
    return {**os.environ, SOURCE_DATE_EPOCH: source_date_epoch}


def caller_source_date_epoch() -> str:
    """The caller's SOURCE_DATE_EPOCH, else the default: read once, where a build is
    planned (native_build.plan_build), and passed on as a value from there."""
    return os.environ.get(SOURCE_DATE_EPOCH) or DEFAULT_SOURCE_DATE_EPOCH


@dataclass(frozen=True)
class PathMap:
    """Folders whose location differs between machines and checkouts (the kernel,
    torch's site-packages, kernel-matrix's headers) -> the name recorded for them.

    __FILE__ in a header (torch's TORCH_CHECK messages name their file) and debug
    information would otherwise embed the host's paths. Each folder is already on
    the command line (-I, the source), so the object cache keys and shares
    exactly as before; the build folder is never mapped (nor recorded anywhere)."""

    folders: Mapping[Path, str] = field(default_factory=dict)

    def _ordered(self) -> list[tuple[str, str]]:
        # gcc tries the last -ffile-prefix-map first and matches a string prefix, so
        # /x/kernel would also take /x/kernel_matrix/...: longer folders go last.
        # No trailing slash: -g records the working folder (the kernel) itself.
        pairs = [(str(old).rstrip("/"), new.rstrip("/")) for old, new in self.folders.items()]
        return sorted(pairs, key=lambda pair: len(pair[0]))

    def gcc_flags(self) -> list[str]:
        return [f"-ffile-prefix-map={old}={new}" for old, new in self._ordered()]

    def nvcc_flags(self) -> list[str]:
        """The same, for the host compiler nvcc runs."""
        return [f"-Xcompiler={flag}" for flag in self.gcc_flags()]

    def name(self, path: Path) -> str:
        """path as the compile records it."""
        text = str(path)
        for old, new in reversed(self._ordered()):
            if text.startswith(old):
                return new + text[len(old) :]
        return text


@dataclass(frozen=True)
class Step:
    label: str  # what the user sees: "compile csrc/img2gray_cuda.cu"
    argv: list[str]
    output: Path
    # A compile names the compilers that make its object (for the cache key);
    # a link names none and is never cached.
    compilers: tuple[str, ...] = ()
    # Arguments that change how, not what, it compiles (nvcc --threads): not in the cache key.
    tuning: tuple[str, ...] = ()
    # The folders the compile records by name (its PathMap's): the cache names them so too,
    # and shares the object with a checkout elsewhere (portable.py).
    places: Places = NOWHERE


@dataclass
class Progress:
    """How far run_steps is, for a report while it runs (a long build must not be
    silent): steps done of all (the compiles and the link), and the slowest compile
    so far, which is where a build's time goes."""

    total: int = 0
    done: int = 0
    slowest: tuple[float, str] | None = None  # seconds, label
    last: float = 0.0  # the seconds of the step that ended last

    def add(self, step: Step, cached: bool, seconds: float) -> None:
        self.done += 1
        self.last = seconds
        if not cached and step.compilers and (self.slowest is None or seconds > self.slowest[0]):
            self.slowest = (seconds, step.label)


def cxx_compile(
    cxx: str,
    source: Path,
    output: Path,
    *,
    includes: list[Path],
    defines: list[str],
    flags: list[str],
    std: str,
    system_includes: Sequence[Path] = (),
    pre_include: Path | None = None,
    path_map: PathMap | None = None,
) -> list[str]:
    path_map = path_map or PathMap()
    return [
        cxx,
        f"-std=gnu++{std}",
        *RELEASE,
        "-fPIC",
        "-fvisibility=hidden",
        # As kernel-builder's torch extensions (torch-extension.cmake): a static of a class
        # of default visibility stays the library's own, never one symbol across every
        # kernel the process loads (STB_GNU_UNIQUE).
        "-fno-gnu-unique",
        *path_map.gcc_flags(),
        # Where gcc would draw a random number for a symbol name, the source's name.
        f"-frandom-seed={path_map.name(source)}",
        *flags,
        *(["-include", str(pre_include)] if pre_include else []),
        *(f"-D{d}" for d in defines),
        *(f"-I{i}" for i in includes),
        *_system(system_includes),
        "-c",
        str(source),
        "-o",
        str(output),
    ]


def _system(includes: Sequence[Path]) -> list[str]:
    """torch's, Python's and CUDA's headers, as CMake passes an imported target's: a
    kernel's -Werror never stops at a warning inside them."""
    return [arg for include in includes for arg in ("-isystem", str(include))]


def nvcc_compile(
    nvcc: Path,
    cxx: str,
    source: Path,
    output: Path,
    *,
    includes: list[Path],
    gencode: list[str],
    flags: list[str],
    std: str,
    defines: Sequence[str] = (),
    system_includes: Sequence[Path] = (),
    pre_include: Path | None = None,
    path_map: PathMap | None = None,
) -> list[str]:
    path_map = path_map or PathMap()
    return [
        str(nvcc),
        f"-std=c++{std}",
        *RELEASE,
        # CMake's: a cuda-flags entry nvcc does not know (-fno-strict-aliasing) is the host compiler's.
        "-forward-unknown-to-host-compiler",
        f"-ccbin={cxx}",
        "-Xcompiler=-fPIC,-fvisibility=hidden",
        # nvcc's temporary files are /tmp/tmpxft_<process id>_..., and gcc records the
        # name of the file it compiled (the host stub) in the object: with -objtemp
        # they are <object>.cudafe1.cpp, beside the object, the same in every build.
        "-objtemp",
        *path_map.nvcc_flags(),
        # cudafe++ and cicc name anonymous namespaces (_GLOBAL__N__<hash>) after a
        # hash of the source's absolute path: give them its mapped name instead
        # (the later option wins over the one nvcc passes).
        f"-Xcudafe=--orig_src_path_name={path_map.name(source)}",
        # NVIDIA's switch for "deterministically identical ptx and object files"
        # where nvcc would use random numbers in symbol names (also passed to gcc).
        f"-frandom-seed={path_map.name(source)}",
        *gencode,
        *flags,
        *(["--pre-include", str(pre_include)] if pre_include else []),
        *(f"-D{d}" for d in defines),
        *(f"-I{i}" for i in includes),
        *_system(system_includes),
        "-c",
        str(source),
        "-o",
        str(output),
    ]


def link_shared(
    cxx: str,
    objects: list[Path],
    output: Path,
    *,
    lib_dirs: list[Path],
    libs: list[str],
    needed: Sequence[str] = (),
    flags: Sequence[str] = (),
) -> list[str]:
    """The link of the library. `needed` are linked whether or not an object uses
    them (DT_NEEDED even under --as-needed, Debian's and Ubuntu's default), as
    torch's CMake package links torch, torch_cpu and torch_cuda (Caffe2Targets.cmake:
    `-Wl,--no-as-needed,<lib> -Wl,--as-needed`): a kernel calling cuBLASLt itself
    resolves cublasLt* through libtorch_cuda's own dependencies."""
    # No rpath: torch and the CUDA runtime are already loaded by `import torch`
    # when the loader imports the kernel, and are found by soname.
    kept = ["-Wl,--no-as-needed", *(f"-l{lib}" for lib in needed), "-Wl,--as-needed"] if needed else []
    return [
        cxx,
        "-shared",
        *flags,
        *(str(o) for o in objects),
        *(f"-L{d}" for d in lib_dirs),
        *kept,
        *(f"-l{lib}" for lib in libs),
        "-o",
        str(output),
    ]


def run_steps(
    compiles: list[Step],
    link: Step,
    *,
    cwd: Path,
    on_done: Callable[[Step, bool], None] = lambda step, cached: None,
    jobs: int | None = None,
    cache: ObjectCache | None = None,
    progress: Progress | None = None,
    source_date_epoch: str = DEFAULT_SOURCE_DATE_EPOCH,
) -> None:
    """Run the compiles in parallel, then the link; the first failure raises BuildError.
    source_date_epoch: the moment __DATE__ and __TIME__ expand to, in every compiler's environment.
    on_done(step, cached) follows each step as it ends (progress, if given, is updated
    first); cached is True when the object came from the cache.
    Interrupted (Ctrl-C, or SIGTERM, which the CLI turns into KeyboardInterrupt), it
    stops the compilers that run and starts no other: a build of many files stops at once."""
    stop = threading.Event()  # after the first failure, compiles not yet started are skipped
    env = compile_environment(source_date_epoch)
    children = _Children()

    progress = progress if progress is not None else Progress()
    progress.total = len(compiles) + 1

    def run(step: Step) -> tuple[Step, BuildError | None, bool | None, float]:
        if stop.is_set():
            return step, None, None, 0.0
        started = time.monotonic()
        failure, cached = _run(step, cwd, cache, children, env)
        if failure is not None:
            stop.set()
        return step, failure, cached, time.monotonic() - started

    pool = ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1)
    try:
        futures = [pool.submit(run, step) for step in compiles]
        # Reported as each ends, not once all have: a build of many files says how far it is.
        for future in as_completed(futures):
            step, failure, cached, seconds = future.result()
            if failure is None and cached is not None:
                progress.add(step, cached, seconds)
                on_done(step, cached)
    except BaseException:
        stop.set()
        children.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for future in futures:  # the first failure in the build's order, whichever ended first
        if (failure := future.result()[1]) is not None:
            raise failure
    if stop.is_set():  # pragma: no cover - a failure is always in results
        raise BuildError("a compile failed")
    started = time.monotonic()
    try:
        failure, _ = _run(link, cwd, None, children, env)
    except BaseException:
        children.stop()
        raise
    if failure is not None:
        raise failure
    progress.add(link, False, time.monotonic() - started)
    on_done(link, False)


class _Children:
    """The compiler processes running now, each in its own process group (nvcc runs
    cicc, ptxas and the host compiler under it), so that stop() ends them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()
        self._stopped = False

    def run(self, argv: list[str], cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        with self._lock:
            if self._stopped:
                raise BuildError("interrupted")
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self._running.add(process)
        try:
            out, err = process.communicate()
        finally:
            with self._lock:
                self._running.discard(process)
        return subprocess.CompletedProcess(argv, process.returncode, out, err)

    def stop(self) -> None:
        """End the running compilers (by their process groups); start no new one."""
        with self._lock:
            self._stopped = True
            for process in self._running:
                with contextlib.suppress(ProcessLookupError):  # it has just ended
                    os.killpg(process.pid, signal.SIGTERM)


def _run(
    step: Step, cwd: Path, cache: ObjectCache | None, children: _Children, env: dict[str, str]
) -> tuple[BuildError | None, bool]:
    step.output.parent.mkdir(parents=True, exist_ok=True)
    if cache is not None and not (step.compilers and cacheable(list(step.compilers))):
        cache = None  # a compile whose compilers the cache cannot identify is not cached
    if cache is not None and cache.fetch(step.argv, step.output, list(step.compilers), env, step.places):
        return None, True
    depfile = step.output.with_name(step.output.name + ".d")
    # -MD -MF: gcc and nvcc both list what the compile read, for the cache's manifest.
    argv = [*step.argv, *step.tuning, *(["-MD", "-MF", str(depfile)] if cache is not None else [])]
    started = time.time()
    try:
        result = children.run(argv, cwd, env)
    except OSError as exc:
        return BuildError(f"{step.label}: cannot run {step.argv[0]}: {exc.strerror}"), False
    if result.returncode != 0:
        log = f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}"
        first = next((ln for ln in result.stderr.splitlines() if "error" in ln.lower()), "see the log")
        return BuildError(f"{step.label} failed (exit {result.returncode}): {first.strip()}", log=log), False
    if cache is not None:
        cache.store(
            step.argv, step.output, list(step.compilers), depfile, cwd=cwd, started=started, env=env, places=step.places
        )
    return None, False
