"""Compile time of real kernels (../shared/corpus): each variant built natively
cold (an empty object cache), then again from the cache (the variant deleted,
the cache kept), then from a copy of the kernel in another folder sharing that
cache (`--cache-dir`: a second checkout), in this process's machine; the .so size,
and whether the copy's .so is the cold one's bytes. Writes
benchmarks/results/corpus-build.md.

    .venv/bin/python benchmarks/corpus_build.py [--cuda-capabilities 9.0] [KERNEL:BACKEND ...]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus" / "kernels-community"
DEFAULT = ["relu:cpu", "relu:cuda", "activation:cpu", "activation:cuda", "rotary:cpu", "quantization-gptq:cpu"]


def build(kernel_dir: Path, backend: str, build_dir: Path, capabilities: str, *cache: str) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "kernel_matrix", "build", "--kernel-dir", str(kernel_dir), "--backend", backend,
         "--build-dir", str(build_dir), "--cuda-capabilities", capabilities, *cache],
        check=True, capture_output=True, cwd=REPO,
    )  # fmt: skip
    return time.monotonic() - started


def library(build_dir: Path) -> tuple[Path, bytes]:
    """The one variant under build_dir, and its .so's bytes."""
    (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]
    (so,) = variant.glob("*.so")
    return variant, so.read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", default=DEFAULT, help="KERNEL:BACKEND")
    parser.add_argument("--cuda-capabilities", default="9.0")
    args = parser.parse_args()
    rows = []
    for cell in args.cells:
        kernel, backend = cell.split(":")
        with tempfile.TemporaryDirectory() as scratch:
            build_dir, checkout = Path(scratch) / "build", Path(scratch) / "elsewhere" / kernel
            cold = build(CORPUS / kernel, backend, build_dir, args.cuda_capabilities)
            variant, first = library(build_dir)
            shutil.rmtree(variant)
            cached = build(CORPUS / kernel, backend, build_dir, args.cuda_capabilities)
            shutil.copytree(CORPUS / kernel, checkout, ignore=shutil.ignore_patterns("__pycache__"))
            cache = ("--cache-dir", str(build_dir / ".cache"))
            moved = build(checkout, backend, Path(scratch) / "other-build", args.cuda_capabilities, *cache)
            same = library(Path(scratch) / "other-build")[1] == first
        rows.append(
            f"| {kernel} | {variant.name} | {cold:.1f} | {cached:.1f} | {cached / cold:.2f} | {moved:.1f} "
            f"| {moved / cold:.2f} | {'yes' if same else 'no'} | {len(first) / 1e3:.0f} KB |"
        )
        print(rows[-1], flush=True)
    table = [
        "# Corpus kernels: cold and cached native builds",
        "",
        f"`python benchmarks/corpus_build.py --cuda-capabilities {args.cuda_capabilities}`, on this machine "
        "(cold: empty object cache; cached: the variant deleted, the cache kept; elsewhere: a copy of the "
        "kernel in another folder, its own build folder, the same `--cache-dir`; all in the same run).",
        "",
        "| kernel | variant | cold s | cached s | cached/cold | elsewhere s | elsewhere/cold | same .so | .so |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    out = REPO / "benchmarks" / "results" / "corpus-build.md"
    out.write_text("\n".join(table) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
