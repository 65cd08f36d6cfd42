"""The build job of .github/workflows/reusable-build.yml with its object cache, as
GitHub runs it: each run starts from a fresh checkout (an empty build/) and
restores build/.cache/objects from the previous run's saved cache.

    eval "$(scripts/docker-engine start)"
    python benchmarks/workflow_cache.py [--out benchmarks/results/workflow-cache.md]

Works on a copy of kernel/ in a repository of its own (it edits the CUDA file).
The job's command, `kernel-matrix build --kernel K --variant V`, runs three times
in one process, the cell's builder image made first (untimed) if missing:
  1. cold: nothing restored                                              baseline
  2. the cache of run 1 restored, nothing changed          goal: no object compiled
  3. the cache of run 2 restored, the .cu changed          goal: that file compiled only
Each row: seconds, the ratio to the cold run, and the build table's "objects cached"."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def job(checkout: Path, variant: str, restored: Path | None) -> tuple[float, str]:
    """One build job: a fresh build/ with the cache restored into it, then the job's command.
    Returns its seconds and the cell's "objects cached"; the cache it saves is left in build/."""
    build = checkout / "build"
    shutil.rmtree(build, ignore_errors=True)
    if restored is not None:
        shutil.copytree(restored, build / ".cache" / "objects")
    argv = [sys.executable, "-m", "kernel_matrix", "build", "--kernel", "img2gray", "--variant", variant]
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{result.stderr[-2000:]}")
    row = next(line for line in (build / "summary.md").read_text().splitlines() if variant in line)
    return seconds, row.split("|")[6].strip()  # kernel, variant, status, seconds, .so size, objects cached


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", default="torch214-cxx11-cu130-x86_64-linux")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_name:
        checkout = Path(scratch_name) / "repo"
        checkout.mkdir()
        shutil.copytree(REPO / "kernel", checkout / "kernel", ignore=shutil.ignore_patterns("__pycache__"))
        text = (REPO / "build_matrix.yaml").read_text()
        # This host has no registry: the offline builder, as the local profile uses.
        (checkout / "build_matrix.yaml").write_text(text.replace("image: official", "image: offline"))
        saved = Path(scratch_name) / "saved"

        def save() -> None:  # actions/cache's post step: build/.cache/objects as the job left it
            shutil.rmtree(saved, ignore_errors=True)
            shutil.copytree(checkout / "build" / ".cache" / "objects", saved)

        job(checkout, args.variant, None)  # the builder image, made if missing; untimed
        rows = []
        cold, cached = job(checkout, args.variant, None)
        rows.append(("1. cold: nothing restored", cold, cached))
        save()
        seconds, cached = job(checkout, args.variant, saved)
        rows.append(("2. cache restored, nothing changed", seconds, cached))
        save()
        cu = checkout / "kernel" / "csrc" / "img2gray_cuda.cu"
        cu.write_text(cu.read_text() + "\n// changed by benchmarks/workflow_cache.py\n")
        seconds, cached = job(checkout, args.variant, saved)
        rows.append(("3. cache restored, the .cu changed", seconds, cached))
    lines = [
        f"# The build job with its object cache ({args.variant}, offline builder, {sys.platform})",
        "",
        "`python benchmarks/workflow_cache.py`: the reusable workflow's build command three times in one",
        "process, each from an empty build/ with the previous run's build/.cache/objects restored.",
        "",
        "| run | seconds | vs cold | objects cached |",
        "|---|---|---|---|",
        *(f"| {name} | {seconds:.1f} | {seconds / cold:.2f}x | {cached} |" for name, seconds, cached in rows),
    ]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
