"""img2gray's CUDA throughput against a device-to-device copy of the same bytes,
timed in the same process (CUDA events, median of many runs).

    python benchmarks/cuda_bandwidth.py <variant dir> [--out results.md]

bytes moved = 4 * H * W (3 read, 1 written per pixel); the ratio to the copy
is the figure of merit, not absolute GB/s."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch


def median_ms(fn, repeats: int = 50, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variant_dir", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import kernels

    variant = args.variant_dir.resolve()
    img2gray = kernels.get_local_kernel(variant.parent, backend="cuda")
    rows = ["| image | img2gray GB/s | copy GB/s | ratio |", "|---|---|---|---|"]
    for h, w in [(1080, 1920), (4320, 7680), (16384, 16384)]:
        rgb = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, device="cuda")
        out = torch.empty(h, w, dtype=torch.uint8, device="cuda")
        src = torch.empty(4 * h * w // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        nbytes = 4 * h * w
        kernel_ms = median_ms(lambda rgb=rgb, out=out: img2gray.img2gray(rgb, out=out))
        copy_ms = median_ms(lambda dst=dst, src=src: dst.copy_(src))  # reads + writes the same byte count
        kernel_gbs, copy_gbs = nbytes / kernel_ms / 1e6, nbytes / copy_ms / 1e6
        rows.append(f"| {h}x{w} | {kernel_gbs:.0f} | {copy_gbs:.0f} | {kernel_gbs / copy_gbs:.2f} |")
    table = "\n".join([f"{torch.cuda.get_device_name()} - {variant.name}", "", *rows])
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
