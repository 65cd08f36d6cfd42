"""What a kernel's flake.nix says to kernel-builder that build.toml does not: the
genKernelFlakeOutputs arguments kernel-matrix acts on or points out. Nix is not
evaluated: the file is searched for the argument's name (a line of its own in every
kernels-community flake), and it is never trusted to widen anything."""

from __future__ import annotations

import re
from pathlib import Path

FLAKE = "flake.nix"
# genKernelFlakeOutputs { torchVersions = ...; }: narrows (or changes) the build sets.
TORCH_VERSIONS = re.compile(r"^\s*torchVersions\s*=")
# genKernelFlakeOutputs { doGetKernelCheck = false; }: no load check after the build.
NO_GET_KERNEL_CHECK = re.compile(r"^\s*doGetKernelCheck\s*=\s*false\s*;")
MAX_FLAKE_BYTES = 256 * 1024


def flake_line(kernel_dir: Path, pattern: re.Pattern[str]) -> tuple[Path, int] | None:
    """The kernel's flake.nix and the number of the first line matching pattern, or None."""
    flake = kernel_dir / FLAKE
    try:
        # Never a host file through a link out of the kernel's folder.
        inside = flake.resolve().is_relative_to(kernel_dir.resolve())
        if not inside or not flake.is_file() or flake.stat().st_size > MAX_FLAKE_BYTES:
            return None
        text = flake.read_text(encoding="utf-8", errors="replace")
    except (OSError, RuntimeError):  # RuntimeError: a link loop (before Python 3.13)
        return None
    found = next((n for n, row in enumerate(text.splitlines(), 1) if pattern.match(row)), None)
    return None if found is None else (flake, found)
