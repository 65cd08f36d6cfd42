"""What a native build compiles with: the target Python's torch, and nvcc.

torch is never imported here: a probe reads its version and paths from the
target interpreter's files, so the CLI starts fast and can build against a
torch installed for another Python (or one whose CUDA libraries are absent)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from kernel_matrix.errors import ToolchainError
from kernel_matrix.planning.matrix import Machine
from kernel_matrix.planning.variants import host_arch

# Runs in the target interpreter. torch/version.py is plain assignments, so it is
# executed on its own instead of importing torch (seconds, and CUDA libraries).
_PROBE = r"""
import importlib.util, json, sys, sysconfig
spec = importlib.util.find_spec("torch")
if spec is None or not spec.submodule_search_locations:
    print(json.dumps({"error": "torch is not installed for " + sys.executable}))
    raise SystemExit(0)
root = list(spec.submodule_search_locations)[0]
ns = {}
with open(root + "/version.py") as f:
    exec(f.read(), ns)
print(json.dumps({
    "torch_dir": root,
    "version": ns["__version__"],
    "cuda": ns.get("cuda"),
    "python_include": sysconfig.get_paths()["include"],
    "python": sys.executable,
}))
"""


@dataclass(frozen=True)
class TorchInstall:
    python: str
    torch_dir: Path
    version: str  # "2.14.1+cu130"
    cuda: str | None  # "13.0", or None for a CPU build
    python_include: Path

    @property
    def include_dirs(self) -> list[Path]:
        include = self.torch_dir / "include"
        return [include, include / "torch" / "csrc" / "api" / "include"]

    @property
    def lib_dir(self) -> Path:
        return self.torch_dir / "lib"

    @property
    def cuda_library_include_dirs(self) -> list[Path]:
        """The headers of the CUDA libraries torch's wheel depends on (cuSPARSE,
        cuBLAS, cuSOLVER, cuRAND: ATen/cuda/CUDAContext.h includes them), from
        the nvidia-* wheels beside it (nvidia/cu13/include, nvidia/<lib>/include)."""
        return sorted(p for p in (self.torch_dir.parent / "nvidia").glob("*/include") if p.is_dir())

    @property
    def parallel_openmp(self) -> bool:
        """Whether torch's intra-op parallelism (at::parallel_for) is OpenMP."""
        config = self.torch_dir / "include" / "ATen" / "Config.h"
        return "#define AT_PARALLEL_OPENMP 1" in config.read_text(errors="replace") if config.is_file() else False


def probe_torch(python: str | None = None) -> TorchInstall:
    python = python or sys.executable
    try:
        result = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run the Python interpreter {python!r}: {exc}") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainError(f"probing torch with {python} failed: {last}")
    info = json.loads(result.stdout)
    if "error" in info:
        raise ToolchainError(info["error"])
    torch = TorchInstall(
        python=info["python"],
        torch_dir=Path(info["torch_dir"]),
        version=info["version"],
        cuda=info["cuda"],
        python_include=Path(info["python_include"]),
    )
    if not (torch.python_include / "Python.h").is_file():
        raise ToolchainError(f"Python headers are missing: {torch.python_include}/Python.h (install python3-dev)")
    if not (torch.torch_dir / "include" / "torch").is_dir():
        raise ToolchainError(f"torch at {torch.torch_dir} has no C++ headers")
    return torch


# Runs in the target interpreter: where apache-tvm-ffi's headers and library are
# (tvm_ffi.libinfo, what its CMake package reads through `python -m tvm_ffi.config`).
_TVM_FFI_PROBE = r"""
import json, sys
try:
    import tvm_ffi
    from tvm_ffi import libinfo
except ImportError as exc:
    print(json.dumps({"error": f"{exc}"}))
    raise SystemExit(0)
print(json.dumps({
    "package": tvm_ffi.__path__[0],
    "version": tvm_ffi.__version__,
    "include": libinfo.find_include_path(),
    "dlpack_include": libinfo.find_dlpack_include_path(),
    "library": libinfo.find_libtvm_ffi(),
}))
"""
# What a [tvm-ffi] kernel's builder installs (kernel-builder builds with apache-tvm-ffi 0.1).
TVM_FFI_REQUIREMENT = "apache-tvm-ffi>=0.1,<0.2"


@dataclass(frozen=True)
class TvmFfiInstall:
    """apache-tvm-ffi in the build's Python: a [tvm-ffi] kernel compiles against its
    headers and links its libtvm_ffi.so (which the `tvm_ffi` module has loaded when
    the kernel's library is loaded through it)."""

    package: Path  # site-packages/tvm_ffi
    version: str  # "0.1.15.post2"
    include_dirs: tuple[Path, ...]  # tvm/ffi and dlpack
    library: Path  # .../tvm_ffi/lib/libtvm_ffi.so

    @property
    def minor(self) -> str:
        """'0.1.15.post2' -> '0.1': the variant's tvm-ffi version."""
        release = Version(self.version).release
        return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def probe_tvm_ffi(python: str) -> TvmFfiInstall:
    try:
        result = subprocess.run(
            [python, "-c", _TVM_FFI_PROBE], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run the Python interpreter {python!r}: {exc}") from None
    info = json.loads(result.stdout) if result.returncode == 0 and result.stdout.strip() else {}
    if "error" in info or not info:
        why = info.get("error") or (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainError(
            f"a [tvm-ffi] kernel is built against apache-tvm-ffi, which {python} cannot import ({why}): "
            f"pip install '{TVM_FFI_REQUIREMENT}'"
        )
    return TvmFfiInstall(
        package=Path(info["package"]),
        version=info["version"],
        include_dirs=(Path(info["include"]), Path(info["dlpack_include"])),
        library=Path(info["library"]),
    )


@dataclass(frozen=True)
class Nvcc:
    path: Path
    version: str  # "13.0"
    cuda_home: Path  # holds include/cuda_runtime_api.h and the CUDA runtime library

    @property
    def cudart(self) -> Path:
        """The CUDA runtime to link: lib64/ in toolkits, lib/ (versioned name only) in PyPI's nvidia wheels."""
        for folder in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            found = sorted((self.cuda_home / folder).glob("libcudart.so*"), key=lambda p: len(p.name))
            if found:
                return found[0]
        raise ToolchainError(f"no libcudart.so under {self.cuda_home} (set CUDA_HOME to the toolkit root)")

    @property
    def cudart_static(self) -> Path:
        """The static CUDA runtime, beside the shared one (toolkits and PyPI's wheel ship both)."""
        static = self.cudart.parent / "libcudart_static.a"
        if not static.is_file():
            raise ToolchainError(f"no libcudart_static.a beside {self.cudart} (set CUDA_HOME to the toolkit root)")
        return static


def find_nvcc() -> Nvcc | None:
    """nvcc from $CUDA_HOME, else PATH, else /usr/local/cuda; None if absent."""
    candidates = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc")
    if found := shutil.which("nvcc"):
        candidates.append(Path(found))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for path in candidates:
        if path.is_file():
            return Nvcc(path=path, version=nvcc_version(path), cuda_home=cuda_home_of(path))
    return None


def cuda_home_of(nvcc: Path) -> Path:
    """The toolkit root nvcc really uses (nvcc is often a wrapper script or a link)."""
    if os.environ.get("CUDA_HOME"):
        return Path(os.environ["CUDA_HOME"])
    try:
        out = subprocess.run(
            [str(nvcc), "--dryrun", "-c", "x.cu"], capture_output=True, text=True, timeout=60, check=False
        ).stderr
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolchainError(f"{nvcc} --dryrun failed: {exc}") from None
    match = re.search(r"^#\$ TOP=(.+)$", out, re.MULTILINE)
    return Path(match.group(1).strip()).resolve() if match else nvcc.resolve().parent.parent


def nvcc_version(path: Path) -> str:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolchainError(f"{path} --version failed: {exc}") from None
    match = re.search(r"release (\d+)\.(\d+)", out)
    if not match:
        raise ToolchainError(f"cannot read the CUDA version from `{path} --version`")
    return f"{match.group(1)}.{match.group(2)}"


@dataclass(frozen=True)
class Toolchain:
    """What a native build compiles with, probed once at the edge (`probe`): planning
    (native_build.plan) is then a pure function of the kernel, the cell and this value."""

    torch: TorchInstall
    nvcc: Nvcc | None
    cxx: str
    arch: str  # the CPU the variant is for: x86_64, aarch64
    tvm_ffi: TvmFfiInstall | None = None  # probed for a [tvm-ffi] kernel only

    @staticmethod
    def probe(python: str | None = None, *, tvm_ffi: bool = False) -> Toolchain:
        torch = probe_torch(python)
        return Toolchain(
            torch=torch,
            nvcc=find_nvcc(),
            cxx=find_cxx(),
            arch=host_arch(),
            # the interpreter as given (a wrapper's environment too), as the torch probe runs it
            tvm_ffi=probe_tvm_ffi(python or sys.executable) if tvm_ffi else None,
        )


def this_machine() -> Machine:
    """This host, as the matrix's `local` profile sees it: its arch and its nvcc's CUDA
    version (a probe: the CLI calls it, the matrix takes the value)."""
    nvcc = find_nvcc()
    return Machine(arch=host_arch(), nvcc=nvcc.version if nvcc else None)


def find_cxx() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise ToolchainError("no C++ compiler: set CXX or install g++")
    return cxx
