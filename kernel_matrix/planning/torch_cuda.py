"""Is an installed torch the CUDA build that a cell or a compiler needs? The one
definition, for the three places that ask:

- a builder image, right after pip installed the cell's torch (same CUDA major
  as the cell: the toolchain comes from PyPI for that major);
- a native build (nvcc's CUDA major must be torch's);
- test-variant (running/test_variant.py), before a cell's tests (exactly the cell's CUDA: the
  variant links that torch's CUDA libraries).

The builder image runs this file as a script in its venv before kernel-matrix
is there, and torch there has none of its dependencies (it cannot be
imported): so the standard library only, and torch's version is read from
torch/version.py without importing torch.

    python torch_cuda.py WANTED [--exact] [--gpu]

WANTED is a CUDA version, or "none" for a CPU build of torch. --exact: the same
version, not only the same major. --gpu: torch must also see a GPU (this
imports torch). Exit 0, or 1 with one line saying why.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path


def cuda_major(cuda: str) -> int:
    """'13.0' -> 13: nvcc builds only for a torch of its own CUDA major."""
    return int(cuda.split(".")[0])


def cuda_mismatch(built_for: str | None, wanted: str | None, *, exact: bool) -> str | None:
    """Why a torch built for CUDA `built_for` (None: a CPU build) does not serve
    CUDA `wanted` (None: a CPU build is wanted); None when it does."""
    if built_for is None or wanted is None:
        same = built_for == wanted
    else:
        same = built_for == wanted if exact else cuda_major(built_for) == cuda_major(wanted)
    if same:
        return None
    have = f"CUDA {built_for}" if built_for else "no CUDA (a CPU build)"
    need = f"CUDA {wanted}" if wanted else "no CUDA (a CPU build)"
    scope = "" if exact or not (built_for and wanted) else " (the same major version)"
    return f"torch is built for {have}, and {need} is needed{scope}"


def installed_torch() -> tuple[str, str | None]:
    """(version, CUDA version or None) of the torch this interpreter would import, from torch/version.py."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: torch is not installed in this environment")
    info = runpy.run_path(str(Path(next(iter(spec.submodule_search_locations))) / "version.py"))
    return str(info["__version__"]), info.get("cuda") or None


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    flags = set(argv) - set(args)
    if len(args) != 1 or not flags <= {"--exact", "--gpu"}:
        print("usage: torch_cuda.py WANTED|none [--exact] [--gpu]", file=sys.stderr)
        return 2
    wanted = None if args[0] == "none" else args[0]
    version, built_for = installed_torch()
    print(f"torch {version} (CUDA {built_for})", file=sys.stderr)
    if reason := cuda_mismatch(built_for, wanted, exact="--exact" in flags):
        print(f"error: {reason}: point the cell's torch-index at an index with that build", file=sys.stderr)
        return 1
    if "--gpu" in flags:
        import torch

        if not torch.cuda.is_available():
            print(
                "error: a CUDA variant, and torch sees no GPU (driver too old for this CUDA, or no GPU given to "
                "the runner); --cpu-only runs its CPU cases without one",
                file=sys.stderr,
            )
            return 1
        print(f"GPU: {torch.cuda.get_device_name(0)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
