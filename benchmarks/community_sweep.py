"""kernel-matrix on many real kernel-builder kernels: a compatibility sweep.

    python benchmarks/community_sweep.py KERNELS_DIR [--build NAME,...] [--build-dir DIR] [--out FILE]

KERNELS_DIR holds kernel folders (build.toml at their top), e.g. a checkout of
huggingface/kernels-community. Every kernel's build.toml goes through
`kernel-matrix matrix --kernel-dir` (cells of the full profile, or the one-line
error); the kernels named by --build are also built natively for this host
(`kernel-matrix build --cuda-capabilities 9.0`: one capability, to keep it
short), checked with `kernel-matrix check-abi`, and loaded with
`kernels.get_local_kernel`, in a fresh process each. The kernels are only read:
builds go to --build-dir (default: a temporary folder, removed after)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

LOAD = """
import sys, pathlib, kernels
module = kernels.get_local_kernel(pathlib.Path(sys.argv[1]), backend=sys.argv[2])
print(len([n for n in dir(module) if not n.startswith("_")]))
"""


def kernel_matrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernel_matrix", *args], capture_output=True, text=True, check=False)


def last_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return (lines or result.stderr.strip().splitlines() or ["no output"])[-1][:160].replace("|", "/")


def cells_of(kernel: Path) -> tuple[str, str]:
    """(backends, cells or the error line) from `kernel-matrix matrix --json`."""
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel), "--json")
    with open(kernel / "build.toml", "rb") as f:
        backends = " ".join(tomllib.load(f).get("general", {}).get("backends", []))
    if result.returncode != 0:
        return backends, f"exit {result.returncode}: {last_error(result)}"
    return backends, str(len(json.loads(result.stdout)["include"]))


def build_and_load(kernel: Path, build_dir: Path) -> list[str]:
    """[build, seconds, ABI, loads] for this host's variant of kernel."""
    started = time.perf_counter()
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel), "--cuda-capabilities", "9.0", "--build-dir", str(build_dir)
    )
    seconds = f"{time.perf_counter() - started:.0f}"
    if result.returncode != 0:
        return [f"exit {result.returncode}: {last_error(result)}", seconds, "-", "-"]
    variants = sorted(p for p in build_dir.iterdir() if (p / "metadata.json").is_file())
    abi = []
    for variant in variants:
        check = kernel_matrix("check-abi", str(variant))
        abi.append("ok" if check.returncode == 0 else f"exit {check.returncode}")
    backend = "cuda" if any("-cu" in v.name or v.name == "torch-cuda" for v in variants) else "cpu"
    load = subprocess.run(
        [sys.executable, "-c", LOAD, str(build_dir), backend], capture_output=True, text=True, check=False
    )
    loads = f"yes ({load.stdout.strip()} names)" if load.returncode == 0 else f"no: {load.stderr.strip()[-120:]}"
    return [", ".join(v.name for v in variants), seconds, " ".join(abi), loads]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels_dir", type=Path)
    parser.add_argument("--build", default="", help="comma-separated kernel folders to build, check and load")
    parser.add_argument("--build-dir", type=Path, help="where builds go (<dir>/<kernel>/); default: temporary")
    parser.add_argument("--out", type=Path, help="write the markdown table here too")
    args = parser.parse_args()
    to_build = [name for name in args.build.split(",") if name]
    work = args.build_dir or Path(tempfile.mkdtemp(prefix="km-sweep-"))
    rows = []
    try:
        for kernel in sorted(p for p in args.kernels_dir.iterdir() if (p / "build.toml").is_file()):
            backends, cells = cells_of(kernel)
            built = build_and_load(kernel, work / kernel.name) if kernel.name in to_build else ["", "", "", ""]
            rows.append([kernel.name, backends, cells, *built])
            print(" | ".join(rows[-1]), flush=True)
    finally:
        if args.build_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    header = ["kernel", "general.backends", "cells (full profile)", "built here", "s", "check-abi", "loads"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
