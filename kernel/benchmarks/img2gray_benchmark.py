"""img2gray against its baselines, side by side in one run (medians).

    python kernel/benchmarks/img2gray_benchmark.py BUILD_DIR --device cuda|cpu [--out DIR]

BUILD_DIR holds build/<variant>/ dirs; the variant for this machine is loaded
with kernels.get_local_kernel, as users get it.

CUDA rows: our op, a device-to-device copy of the same bytes (4 per pixel: 3
read, 1 written), torch.compile of the reference expression, torch eager, and
the published kernel (one thread per pixel, 16x16 blocks; compiled with CuPy
where it is installed). Timed with CUDA events, median of many runs.
CPU rows: our op, OpenCV cvtColor(RGB2GRAY) and torch eager, with 1 and 2 threads.

Writes img2gray-<device>.csv and .md (and .png with matplotlib) to --out.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import platform
import statistics
import time
from pathlib import Path

import torch

CUDA_SIZES = [(256, 256), (512, 512), (1080, 1920), (2160, 3840), (4320, 7680), (16384, 16384), (64, 512, 512)]
CPU_SIZES = [(256, 256), (512, 512), (1080, 1920), (2160, 3840), (4320, 7680), (16, 512, 512)]

PUBLISHED_KERNEL = r"""
extern "C" __global__ void img2gray_kernel(const unsigned char* input, unsigned char* output, int width, int height) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < width && y < height) {
    int idx = (y * width + x) * 3;
    unsigned char r = input[idx], g = input[idx + 1], b = input[idx + 2];
    output[y * width + x] = (unsigned char)(0.21f * r + 0.72f * g + 0.07f * b);
  }
}
"""


def reference(rgb: torch.Tensor) -> torch.Tensor:
    x = rgb.float()
    return (0.21 * x[..., 0] + 0.72 * x[..., 1] + 0.07 * x[..., 2]).to(torch.uint8)


def cuda_median_ms(fn, min_runs: int = 20, budget_s: float = 1.0) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - started < budget_s and len(times) < 500):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def cpu_median_ms(fn, min_runs: int = 10, budget_s: float = 1.0) -> float:
    fn()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - started < budget_s and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def published_kernel():
    try:
        import cupy
    except ImportError:
        return None
    kernel = cupy.RawKernel(PUBLISHED_KERNEL, "img2gray_kernel")

    def run(rgb: torch.Tensor, out: torch.Tensor) -> None:
        height, width = rgb.numel() // (3 * rgb.shape[-2]), rgb.shape[-2]  # batch folded into rows
        grid = ((width + 15) // 16, (height + 15) // 16)
        kernel(grid, (16, 16), (cupy.asarray(rgb), cupy.asarray(out), cupy.int32(width), cupy.int32(height)))

    return run


def bench_cuda(img2gray) -> list[dict]:
    rows = []
    compiled = torch.compile(reference)
    published = published_kernel()
    for shape in CUDA_SIZES:
        rgb = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, device="cuda")
        out = torch.empty(shape, dtype=torch.uint8, device="cuda")
        pixels = rgb.numel() // 3
        src = torch.empty(2 * pixels, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        candidates = {
            "img2gray": lambda: img2gray.img2gray(rgb, out=out),
            "copy": lambda: dst.copy_(src),
            "torch.compile": lambda: compiled(rgb),
            "torch eager": lambda: reference(rgb),
        }
        if published is not None:
            candidates["published 16x16"] = lambda: published(rgb, out)
        times = {name: cuda_median_ms(fn) for name, fn in candidates.items()}
        for name, ms in times.items():
            rows.append(_row("cuda", shape, name, "-", ms, pixels, times["copy"], "copy"))
    return rows


def bench_cpu(img2gray) -> list[dict]:
    import cv2
    import numpy as np

    rows = []
    for shape in CPU_SIZES:
        rgb = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8)
        out = torch.empty(shape, dtype=torch.uint8)
        flat = rgb.numpy().reshape(-1, shape[-1], 3)  # OpenCV takes 2-D images: batch folded into rows
        cv_out = np.empty(flat.shape[:2], dtype=np.uint8)
        pixels = rgb.numel() // 3
        for threads in (1, 2):
            torch.set_num_threads(threads)
            cv2.setNumThreads(threads)
            times = {
                "img2gray": cpu_median_ms(lambda: img2gray.img2gray(rgb, out=out)),
                "opencv": cpu_median_ms(lambda: cv2.cvtColor(flat, cv2.COLOR_RGB2GRAY, dst=cv_out)),
                "torch eager": cpu_median_ms(lambda: reference(rgb)),
            }
            for name, ms in times.items():
                rows.append(_row("cpu", shape, name, threads, ms, pixels, times["opencv"], "opencv"))
    return rows


def _row(device, shape, name, threads, ms, pixels, baseline_ms, baseline) -> dict:
    return {
        "device": device,
        "shape": "x".join(map(str, shape)),
        "impl": name,
        "threads": threads,
        "median_ms": round(ms, 4),
        "GB/s": round(4 * pixels / (ms * 1e-3) / 1e9, 1),
        f"time / {baseline}": round(ms / baseline_ms, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build_dir", type=Path, help="the folder holding build/<variant>/ (or the build/ folder)")
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    import kernels

    img2gray = kernels.get_local_kernel(args.build_dir.resolve(), backend="cuda" if args.device == "cuda" else "cpu")
    rows = bench_cuda(img2gray) if args.device == "cuda" else bench_cpu(img2gray)
    machine = torch.cuda.get_device_name() if args.device == "cuda" else f"{platform.processor() or platform.machine()}"
    header = (
        f"{machine}, torch {torch.__version__}, variant {Path(img2gray.__file__).parent.name}, {datetime.date.today()}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"img2gray-{args.device}"
    with open(f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    columns = list(rows[0])
    table = "\n".join(
        [
            header,
            "",
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
            *("| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows),
        ]
    )
    Path(f"{stem}.md").write_text(table + "\n")
    print(table)
    _plot(rows, header, Path(f"{stem}.png"))


def _plot(rows: list[dict], title: str, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib not installed: no {path})")
        return
    fig, ax = plt.subplots(figsize=(10, 5))
    for key in sorted({(r["impl"], r["threads"]) for r in rows}):
        points = [r for r in rows if (r["impl"], r["threads"]) == key]
        label = key[0] if key[1] == "-" else f"{key[0]} ({key[1]} threads)"
        ax.plot([r["shape"] for r in points], [r["GB/s"] for r in points], marker="o", label=label)
    ax.set_ylabel("GB/s (4 bytes per pixel)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
