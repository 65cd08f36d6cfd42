"""Container builds against a native build of the same variant, in one run.

    eval "$(scripts/docker-engine start)"
    python benchmarks/container_build.py [--variant NAME] [--out benchmarks/results/container-build.md]

Rows: a native build (`kernel-matrix build`), a container build with the
builder image already present, and a container rebuild with nothing changed.
The images are made first (not timed) if they are missing. Goals: the
container build at most 1.25x the native one; an unchanged rebuild well under 10 s."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", default="torch214-cxx11-cu130-x86_64-linux")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "kernel_matrix", "build"]
    with tempfile.TemporaryDirectory() as scratch:
        native_dir, container_dir = Path(scratch) / "native", Path(scratch) / "container"
        container = [*cli, "--variant", args.variant, "--image", "offline", "--build-dir", str(container_dir)]
        subprocess.run(container, check=True, capture_output=True)  # makes the images if missing
        shutil.rmtree(container_dir)
        native = timed([*cli, "--build-dir", str(native_dir)])
        cold = timed(container)
        unchanged = timed(container)
    rows = [
        f"Container builds of {args.variant} ({time.strftime('%Y-%m-%d')}, this host; images present)",
        "",
        "| build | seconds | ratio to native |",
        "|---|---|---|",
        f"| native (`kernel-matrix build`) | {native:.1f} | 1.00 |",
        f"| container, image present | {cold:.1f} | {cold / native:.2f} |",
        f"| container, nothing changed (skipped) | {unchanged:.1f} | {unchanged / native:.2f} |",
    ]
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
