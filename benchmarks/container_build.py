"""Container builds against a native build of the same variant, in one run.

    eval "$(scripts/docker-engine start)"
    python benchmarks/container_build.py [--out benchmarks/results/container-build.md]

Works on a copy of kernel/ (it edits the CUDA file). The builder images are
made first, untimed, if missing. Rows, all against the native build of the
same variant in this run:
  - native cold build (`kernel-matrix build`, empty object cache)     baseline
  - container cold build of that variant (image present, empty cache)  goal <= 1.25x
  - the local profile (all its cells) cold, for scale
  - the local profile again, nothing changed                          goal <= 10 s
  - the local profile after the .cu changed (one CUDA, every torch)    goal <= 1.5x one variant's container build
Then image sizes and disk per variant."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{result.stderr[-2000:]}")
    return time.perf_counter() - started


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", default="torch214-cxx11-cu130-x86_64-linux")
    parser.add_argument("--profile", default="local")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "kernel_matrix", "build"]
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        kernel = scratch / "kernel"
        shutil.copytree(REPO / "kernel", kernel, ignore=shutil.ignore_patterns("__pycache__", "benchmarks"))
        on = ["--kernel-dir", str(kernel), "--image", "offline"]
        profile = [*cli, "--profile", args.profile, *on, "--build-dir", str(scratch / "profile")]
        timed([*profile[:-1], str(scratch / "warm-up")])  # makes any missing image; untimed

        native = timed([*cli, "--kernel-dir", str(kernel), "--build-dir", str(scratch / "native")])
        one = timed([*cli, "--variant", args.variant, *on, "--build-dir", str(scratch / "one")])
        profile_cold = timed(profile)
        unchanged = timed(profile)
        cuda_file = kernel / "csrc" / "img2gray_cuda.cu"
        cuda_file.write_text(cuda_file.read_text() + "\n// touched by the benchmark\n")
        touched = timed(profile)

        built = sorted(d for d in (scratch / "profile").iterdir() if (d / "metadata.json").is_file())
        cells = len(built)
        cached = [
            json.loads((scratch / "profile" / "logs" / f"{d.name}.build.json").read_text()).get("cached", 0)
            for d in built
        ]
        disk = [(d.name, du(d), sum(p.stat().st_size for p in d.glob("*.so"))) for d in built]
    images = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}\t{{.Size}}", "kernel-matrix/*"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split("\n")
    rows = [
        f"Container builds ({time.strftime('%Y-%m-%d')}, this host; builder images present; "
        f"`python benchmarks/container_build.py`)",
        "",
        "| build | seconds | ratio | goal |",
        "|---|---|---|---|",
        f"| native `kernel-matrix build` ({args.variant}), cold | {native:.1f} | 1.00 (baseline) | |",
        f"| container `--variant {args.variant}`, cold | {one:.1f} | {one / native:.2f} x native | <= 1.25 |",
        f"| container `--profile {args.profile}` ({cells} cells), cold | {profile_cold:.1f} | "
        f"{profile_cold / one:.2f} x one variant | |",
        f"| the same, nothing changed | {unchanged:.1f} | - | <= 10 s |",
        f"| the same after the .cu changed (objects cached per cell: {cached}) | {touched:.1f} | "
        f"{touched / one:.2f} x one variant | <= 1.5 |",
        "",
        "| variant | disk | .so |",
        "|---|---|---|",
        *(f"| {name} | {size / 1e6:.2f} MB | {so / 1e6:.2f} MB |" for name, size, so in disk),
        "",
        "| image | size |",
        "|---|---|",
        *(f"| {line.split(chr(9))[0]} | {line.split(chr(9))[1]} |" for line in images if "\t" in line),
    ]
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
