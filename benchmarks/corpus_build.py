"""Compile time of real kernels (../shared/corpus): each variant built natively
cold (an empty object cache), then again from the cache (the variant deleted,
the cache kept), in this process's machine; the .so size. Writes
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


def build(kernel: str, backend: str, build_dir: Path, capabilities: str) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "kernel_matrix", "build", "--kernel-dir", str(CORPUS / kernel), "--backend", backend,
         "--build-dir", str(build_dir), "--cuda-capabilities", capabilities],
        check=True, capture_output=True, cwd=REPO,
    )  # fmt: skip
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", default=DEFAULT, help="KERNEL:BACKEND")
    parser.add_argument("--cuda-capabilities", default="9.0")
    args = parser.parse_args()
    rows = []
    for cell in args.cells:
        kernel, backend = cell.split(":")
        with tempfile.TemporaryDirectory() as scratch:
            build_dir = Path(scratch) / "build"
            cold = build(kernel, backend, build_dir, args.cuda_capabilities)
            (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]
            size = sum(p.stat().st_size for p in variant.glob("*.so"))
            shutil.rmtree(variant)
            cached = build(kernel, backend, build_dir, args.cuda_capabilities)
        ratio = cached / cold
        rows.append(f"| {kernel} | {variant.name} | {cold:.1f} | {cached:.1f} | {ratio:.2f} | {size / 1e3:.0f} KB |")
        print(rows[-1], flush=True)
    table = [
        "# Corpus kernels: cold and cached native builds",
        "",
        f"`python benchmarks/corpus_build.py --cuda-capabilities {args.cuda_capabilities}`, on this machine "
        "(cold: empty object cache; cached: the variant deleted, the cache kept; both in the same run).",
        "",
        "| kernel | variant | cold s | cached s | cached/cold | .so |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    out = REPO / "benchmarks" / "results" / "corpus-build.md"
    out.write_text("\n".join(table) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
