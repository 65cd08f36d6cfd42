"""What a torch minor's wheel requires beside torch itself (data/torch_wheels.yaml): the
Python versions it installs on, and the CUDA libraries pip installs with it
(data/cuda_libraries.yaml names their files). A minor the table lacks is unknown: no
Python is refused for it and no library is reported missing."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from kernel_matrix import data
from kernel_matrix.errors import ExitCode


def python_requirement(torch: str) -> SpecifierSet | None:
    """torch's Requires-Python (torch: "2.15"), or None for a minor the table lacks."""
    row = data.load("torch_wheels").get(torch)
    return SpecifierSet(row["python"]) if row else None


def allows_python(torch: str, python: str) -> bool:
    """Whether torch's wheel installs on Python `python` ("3.11")."""
    required = python_requirement(torch)
    return required is None or required.contains(python, prereleases=True)


def pick_python(torch: str, available: Sequence[str]) -> str | None:
    """The oldest of `available` that torch allows (builder images keep the oldest, so a
    variant's abi3 library is built where its oldest users run), or None if none is."""
    allowed = [p for p in available if allows_python(torch, p)]
    return min(allowed, key=Version) if allowed else None


def cuda_libraries(torch: str) -> frozenset[str] | None:
    """The CUDA libraries (cuda_libraries.yaml's names) torch's wheel has pip install."""
    row = data.load("torch_wheels").get(torch)
    return frozenset(row["cuda-libraries"]) if row else None


def library_of(needed: str) -> str | None:
    """The CUDA library a DT_NEEDED file name belongs to ('libcurand.so.10' -> 'curand'),
    or None for any other (torch's own, the C library, the CUDA driver's libcuda)."""
    stem = needed.split(".so", 1)[0]
    for library, files in data.load("cuda_libraries").items():
        if stem in files:
            return str(library)
    return None


@dataclass(frozen=True)
class MissingLibrary:
    """A library file a variant needs whose CUDA library its torch's wheel does not install."""

    needed: str  # "libcurand.so.10"
    library: str  # "curand"
    torch: str  # "2.15"
    last_with_it: str | None  # the newest earlier minor whose wheel installed it ("2.14")

    def __str__(self) -> str:
        if self.last_with_it:
            change = f"which torch {self.torch}'s wheel no longer installs (torch {self.last_with_it}'s did)"
        else:
            change = f"which torch {self.torch}'s wheel does not install"
        return (
            f"needs {self.needed} ({self.library}), {change}: it fails to load in a pip-installed torch "
            f"{self.torch} unless its user installs {self.library} too; link it statically or drop the dependency"
        )


def missing_libraries(needed: Iterable[str], torch: str) -> list[MissingLibrary]:
    """Of the file names a library needs (its DT_NEEDED entries), the CUDA libraries torch's
    wheel does not bring, in their order; [] for a minor the table lacks."""
    provided = cuda_libraries(torch)
    if provided is None:
        return []
    missing = []
    for name in needed:
        library = library_of(name)
        if library is not None and library not in provided:
            missing.append(MissingLibrary(name, library, torch, _last_with(library, torch)))
    return missing


def _last_with(library: str, torch: str) -> str | None:
    earlier = [
        minor
        for minor, row in data.load("torch_wheels").items()
        if Version(minor) < Version(torch) and library in row["cuda-libraries"]
    ]
    return max(earlier, key=Version) if earlier else None


def refuses_this_python(torch_spec: str) -> str | None:
    """Why this interpreter cannot install the torch of `torch_spec` ("torch==2.15.*", a
    cell's torch_spec), or None where it can (or the table does not know that torch)."""
    match = re.fullmatch(r"torch==(\d+\.\d+)(?:\.\*)?", torch_spec.strip())
    if match is None:
        return None
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if allows_python(match.group(1), python):
        return None
    return (
        f"torch {match.group(1)} needs Python {python_requirement(match.group(1))}, and {sys.executable} is "
        f"Python {python}: make the environment with a newer one (PYTHON=python3.11)"
    )


def main(argv: list[str]) -> int:
    """`python -m kernel_matrix.planning.torch_wheels TORCH_SPEC`: exit 4 (TOOLCHAIN), one line, where
    this Python cannot install that torch (test-variant asks before pip would fail to resolve)."""
    if len(argv) != 1:
        print("usage: python -m kernel_matrix.planning.torch_wheels TORCH_SPEC", file=sys.stderr)
        return 2
    if reason := refuses_this_python(argv[0]):
        print(f"error: {reason}", file=sys.stderr)
        return int(ExitCode.TOOLCHAIN)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
