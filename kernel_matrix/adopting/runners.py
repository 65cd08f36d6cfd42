"""Where the jobs of the matrix `kernel-matrix init` writes run, and the cells it leaves
out: nothing may wait for a runner the author did not name.

- Build runners: GitHub-hosted labels only (the default grid's), which every
  repository has.
- GPU test runners: the self-hosted labels given with --gpu-runner, per arch; none by
  default (`gpu-test-runner: []`: CUDA variants are then tested on CPUs, as a
  repository without GPU runners must).
- Excludes: a kernel whose compiler flags are x86's own (-mavx512f ...) cannot compile
  on aarch64 (gcc there refuses them): those cells are left out, written into the
  matrix, not only advised."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, get_args

from kernel_matrix.config.buildtoml import BuildConfig, CudaKernel
from kernel_matrix.config.github_event import is_github_hosted
from kernel_matrix.config.matrix_schema import Arch
from kernel_matrix.errors import ConfigError

ARCHS: tuple[str, ...] = get_args(Arch)
# A runner label: GitHub's own are letters, digits, '-', '_' and '.'; a self-hosted
# runner's labels may not hold ',' (the runner's --labels separator) or spaces.
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# gcc's x86 options (a target feature or an x86 -march), which gcc for aarch64 refuses
# ("unrecognized command-line option '-mavx512f'"). kernel-matrix evaluates no
# processor in a flag's generator expressions (config/genex.py), so a flag applies on every arch.
X86_ONLY = re.compile(
    r"(?<![\w-])-m(?:avx|amx|sse|ssse3|fma|f16c|bmi|popcnt|lzcnt|movbe|pclmul|vpclmulqdq|aes|sha|gfni|vaes|adx|"
    r"xsave|rdrnd|rdseed|arch=(?:x86-64|i[3-6]86|haswell|broadwell|skylake|cascadelake|cooperlake|icelake|"
    r"tigerlake|sapphirerapids|alderlake|znver))"
)


def gpu_runners(values: Iterable[str]) -> dict[str, list[str]]:
    """--gpu-runner ARCH=LABEL[,LABEL...], once per arch: the labels of the self-hosted
    GPU runners that test that arch's CUDA variants (a job runs on a runner with every label)."""
    runners: dict[str, list[str]] = {}
    for value in values:
        arch, equals, labels = value.partition("=")
        where = f"--gpu-runner {value!r}"
        if not equals or arch not in ARCHS:
            raise ConfigError(f"{where}: expected ARCH=LABEL[,LABEL...], ARCH one of {', '.join(ARCHS)}")
        if arch in runners:
            raise ConfigError(f"{where}: {arch} given twice (give its labels in one --gpu-runner, comma-separated)")
        names = labels.split(",")
        bad = next((name for name in names if not LABEL.match(name)), None)
        if bad is not None:
            raise ConfigError(f"{where}: {bad!r} is not a runner label (letters, digits, '.', '_', '-')")
        if is_github_hosted(names):
            raise ConfigError(
                f"{where}: {names[0]} is a GitHub-hosted runner, which has no GPU: give your self-hosted GPU "
                "runners' labels"
            )
        runners[arch] = names
    return runners


def archs(default: dict[str, Any], gpu: dict[str, list[str]]) -> dict[str, Any]:
    """The default grid's archs with their GitHub-hosted build runners, and GPU test
    runners only where gpu names them."""
    written = {}
    for arch, runners in default.items():
        build = list(runners["build-runner"])
        if not is_github_hosted(build):  # data/default_matrix.yaml is kernel-matrix's own: a bug if not
            raise AssertionError(f"the default build-runner of {arch} is not a GitHub-hosted label: {build}")
        written[arch] = {"build-runner": build, "gpu-test-runner": gpu.get(arch, [])}
    missing = sorted(set(gpu) - set(written))
    if missing:
        raise ConfigError(
            f"--gpu-runner {missing[0]}=...: the matrix builds no {missing[0]} (its archs: {', '.join(written)})"
        )
    return written


def x86_flags(config: BuildConfig, backend: str) -> list[str]:
    """The x86-only flags a variant of this backend compiles with: its [kernel.*]
    sections' and the torch binding's."""
    binding = config.torch or config.tvm_ffi
    flags = list(binding.cxx_flags if binding is not None else [])
    for section in config.kernels_for(backend).values():
        flags += section.cxx_flags
        if isinstance(section, CudaKernel):  # nvcc hands -Xcompiler flags to the host compiler
            flags += section.cuda_flags
    return sorted({flag for flag in flags if X86_ONLY.search(flag)})


def aarch64_excludes(kernels: list[tuple[str, BuildConfig]], cpu_cells: bool) -> list[tuple[dict[str, str], str]]:
    """For each kernel whose flags are x86's own: the exclude that leaves out its aarch64
    cells (of the CPU backend alone where only its CPU sections have them), and why."""
    excludes = []
    for _, config in kernels:
        if config.noarch:
            continue
        name = config.general.name
        built = [backend for backend in ("cpu", "cuda") if backend in config.general.backends]
        affected = {backend: x86_flags(config, backend) for backend in built}
        affected = {backend: flags for backend, flags in affected.items() if flags}
        if not affected or (set(affected) == {"cpu"} and not cpu_cells):
            continue
        flags = sorted({flag for found in affected.values() for flag in found})
        named = flags[0] + (f" (and {len(flags) - 1} more)" if len(flags) > 1 else "")
        if set(affected) == {"cpu"} and "cuda" in built:
            excludes.append(({"kernel": name, "arch": "aarch64", "cuda": "cpu"}, f"its CPU sections' {named}"))
        else:
            excludes.append(({"kernel": name, "arch": "aarch64"}, f"its {named}"))
    return excludes
