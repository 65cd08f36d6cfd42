"""ABI checks of a built extension with kernel-abi-check (the checker
kernel-builder uses): Python's limited API, and manylinux symbol versions. Beside
them, a warning for each CUDA library the extension needs that its torch's wheel
does not install (planning/torch_wheels.py: torch 2.15's no longer brings cuRAND)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernel_matrix.checking.elf import needed_libraries
from kernel_matrix.errors import AbiError, ConfigError
from kernel_matrix.planning.torch_wheels import missing_libraries
from kernel_matrix.planning.variants import torch_minor

# abi3 for every CPython >= 3.9, as the variant's .abi3.so name promises.
PYTHON_ABI = "3.9"
MANYLINUX = "manylinux_2_28"


@dataclass(frozen=True)
class AbiReport:
    library: Path
    python_abi: str
    manylinux: str | None
    abi3_violations: list[str] = field(default_factory=list)
    manylinux_violations: list[str] = field(default_factory=list)
    # Not failures: the library builds and passes, but may not load where its users are.
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.abi3_violations and not self.manylinux_violations


def check_library(
    library: Path, *, python_abi: str = PYTHON_ABI, manylinux: str | None = MANYLINUX, torch: str | None = None
) -> AbiReport:
    """kernel-abi-check's verdicts on library; torch ("2.15"): the torch it is built for,
    whose wheel must bring the CUDA libraries it needs (else a warning each)."""
    # Imported here: the CLI (imported in build containers, which lack it) reads this module's policy.
    import kernel_abi_check

    try:
        obj = kernel_abi_check.ObjectFile(str(library))
        abi3 = [_describe(v) for v in obj.check_python_abi(python_abi)]
        linux = [_describe(v) for v in obj.check_manylinux(manylinux)] if manylinux else []
        needed = needed_libraries(library) if torch else []
    except (OSError, ValueError, RuntimeError) as exc:  # NotElf is a ValueError
        raise ConfigError(f"{library}: cannot check the ABI: {exc}") from None
    warnings = [f"{library.name}: {missing}" for missing in missing_libraries(needed, torch)] if torch else []
    return AbiReport(library, python_abi, manylinux, abi3, linux, warnings)


def abi_reports(
    variant_dir: Path, *, python_abi: str = PYTHON_ABI, manylinux: str | None = MANYLINUX
) -> list[AbiReport]:
    """A report for every library of a compiled variant; one without a .so is refused."""
    torch = target_torch(variant_dir)
    return [
        check_library(library, python_abi=python_abi, manylinux=manylinux, torch=torch)
        for library in variant_libraries(variant_dir)
    ]


# The torch of a variant's name: torch215-cxx11-... (kernel-builder's), torch-2.15-cxx11-...
# (the loader's newer form). A stable-ABI or tvm-ffi variant names no single torch.
_NAMED_TORCH = re.compile(r"^torch(?:(\d)(\d+)|-(\d+)\.(\d+))-cxx11-")


def target_torch(variant_dir: Path) -> str | None:
    """The torch minor a variant is built for ("2.15"): the torch its build compiled against
    (metadata.json's provenance), else the one its name gives; None where neither says."""
    try:
        metadata = json.loads((variant_dir / "metadata.json").read_text())
        version = metadata["provenance"]["toolchain"]["torch"]
        return torch_minor(str(version))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no metadata.json, or one without a torch: the name may still say
    match = _NAMED_TORCH.match(variant_dir.name)
    if match is None:
        return None
    major, minor = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    return f"{major}.{int(minor)}"


def gate(variant_dir: Path, name: str, *, manylinux: str | None = MANYLINUX) -> list[AbiReport]:
    """The ABI gate every variant passes before it replaces a built one or is released:
    kernel-abi-check on each .so; the first failing library is one AbiError line."""
    reports = abi_reports(variant_dir, manylinux=manylinux)
    for report in reports:
        if not report.ok:
            problems = "; ".join([*report.abi3_violations, *report.manylinux_violations][:3])
            rules = f"{report.manylinux or 'no manylinux policy'}, abi3 {report.python_abi}"
            raise AbiError(f"{name}: {report.library.name} fails the ABI check ({rules}): {problems}{hint(report)}")
    return reports


def hint(report: AbiReport) -> str:
    """What to do when the library needs a newer libstdc++ or glibc than manylinux_2_28 has:
    the compat header keeps the glibc symbols of the objects kernel-matrix compiles old, but
    C++ library code (std::to_chars, C++20, tvm-ffi's std::ostringstream) comes from the
    system's libstdc++, and a static library linked in (the CUDA runtime a tvm-ffi kernel
    links) binds glibc's newest symbols. The official builder links against glibc 2.28, and
    its gcc-toolset links those libstdc++ parts statically (libstdc++_nonshared)."""
    violations = report.manylinux_violations
    if not any("GLIBCXX" in v or "CXXABI" in v for v in violations):
        return ""  # glibc alone: the compat header's job, not an image's
    glibc = any(re.search(r"\bGLIBC \d", v) for v in violations)
    newer = "libstdc++ and glibc are" if glibc else "libstdc++ is"
    return f"; build it with --image official: this system's {newer} newer than manylinux_2_28's"


def variant_libraries(variant_dir: Path) -> list[Path]:
    libraries = sorted(variant_dir.glob("*.so"))
    if not libraries:
        raise ConfigError(f"{variant_dir}: no .so to check")
    return libraries


def _describe(violation: object) -> str:
    name = getattr(violation, "name", None)
    dep, version = getattr(violation, "dep", None), getattr(violation, "version", None)
    if name and dep and version:
        return f"{name} needs {dep} {version}"
    return str(violation)
