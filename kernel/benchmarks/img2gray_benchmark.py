"""img2gray against its baselines, side by side in one run, timed three ways.

    python kernel/benchmarks/img2gray_benchmark.py BUILD_DIR --device cuda|cpu [--out DIR] [--quick]

BUILD_DIR holds build/<variant>/ dirs; the variant for this machine is loaded
with kernels.get_local_kernel, as users get it.

CUDA rows: our op, a device-to-device copy of the same bytes (4 per pixel: 3
read, 1 written; the copy moves 2 bytes a pixel from one buffer to another),
torch.compile of the reference expression, torch eager, and the published
kernel (one thread per pixel, 16x16 blocks; compiled with CuPy where it is
installed). Each is timed three ways, in microseconds per call (medians):

- per_call: one call between two CUDA events, synchronised after each
  (the method of the first version of this benchmark; it flatters whatever
  has a large host overhead, which then hides between the calls);
- b2b: back to back, as pipelines call it: torch.utils.benchmark's Timer
  (blocks of many calls, the GPU synchronised before and after each block);
  a call costs max(host time, GPU time), and inputs that fit in the L2 cache
  (60 MB on an H200) stay there between calls, for every row alike;
- do_bench: triton.testing.do_bench, which clears the L2 before each call and
  times each call with events (the GPU time from DRAM).

Each candidate first runs back to back for 0.3 s (warm_up says why). host_us
is the host time to issue one call (a burst of 20 calls, no synchronisation
inside; the queue never fills); sm_MHz and W the SM clock and the board's
power (NVML) right after the back-to-back run. "% of copy" is the copy's time
over the row's time, in the same run and timing method.

b2b and host_us are medians over --rounds rounds; a round times every
candidate of the size once, in turn, so that our op and the copy meet the
same GPU clocks and the same host noise (on the H200 host, one-shot host
times of the same call varied up to 2x within a run). The rounds table gives
each round's ratio to the copy for our two forms at the sizes with a target.

The host-overhead table (2160x3840) splits one call of img2gray into its
parts (op calls without the Python wrapper, the allocation) beside the copy
and an allocating copy (clone), once at the start of the process and once
after the size sweep (torch.compile, triton and large allocations loaded).

CPU rows: our op, OpenCV cvtColor(RGB2GRAY) and torch eager, with 1 and 2
threads, timed with torch.utils.benchmark's Timer (back to back).

Writes img2gray-<device>.csv and .md (and .png with matplotlib) to --out.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import platform
import statistics
import time
import timeit
from pathlib import Path

import torch
import torch.utils.benchmark as torch_benchmark

CUDA_SIZES = [(256, 256), (512, 512), (1080, 1920), (2160, 3840), (4320, 7680), (16384, 16384), (64, 512, 512)]
CPU_SIZES = [(256, 256), (512, 512), (1080, 1920), (2160, 3840), (4320, 7680), (16, 512, 512)]
HOST_SIZE = (2160, 3840)
# Issue 15's targets: % of the copy's bandwidth back to back, for our two forms.
TARGET_SIZES = {HOST_SIZE: 92, (4320, 7680): 92, (16384, 16384): 95}
OURS = ("img2gray", "img2gray out=")

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


def warm_up(fn, seconds: float = 0.3) -> None:
    """Calls fn back to back for a while first. On the H200 the first kernels
    timed after a stretch of other work (copies) ran up to 50% slower for
    hundreds of milliseconds, however long they were timed: the clocks settle
    to each workload. The copy is insensitive; img2gray, with more arithmetic
    per byte, is not. So each candidate gets the same warm-up."""
    fn()
    torch.cuda.synchronize()
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()


def sm_clock_mhz() -> int | str:
    try:
        return torch.cuda.clock_rate()
    except Exception:  # no NVML
        return "-"


def power_w() -> int | str:
    try:
        return round(torch.cuda.power_draw() / 1000)
    except Exception:  # no NVML
        return "-"


def per_call_us(fn, min_runs: int = 20, budget_s: float = 0.3) -> float:
    """One call between two events, synchronised each time (no maintained
    timer does this; kept to compare with the first version's numbers)."""
    torch.cuda.synchronize()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - started < budget_s and len(times) < 500):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def b2b_us(fn, min_run_time: float) -> float:
    """Back to back: torch.utils.benchmark syncs the GPU around each block of calls."""
    timer = torch_benchmark.Timer(stmt="fn()", globals={"fn": fn})
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e6


def do_bench_us(fn, rep_ms: int) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=max(5, rep_ms // 4), rep=rep_ms, return_mode="median") * 1e3


def host_us(fn, calls: int = 20, repeats: int = 21) -> float:
    """Host time to issue one call: a short burst of calls after a
    synchronisation, timed on the host clock without waiting for the GPU (few
    enough calls that the launch queue never blocks the host). No maintained
    timer measures the issuing side alone."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def graph_us(fn, calls: int = 100) -> float | None:
    """GPU time alone: `calls` calls captured in a CUDA graph, replayed (median of 20)."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except RuntimeError as error:  # an op that cannot be captured
        print(f"(no graph timing: {error})")
        return None
    warm_up(graph.replay, 0.1)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
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


def bench_cuda(img2gray, quick: bool, rounds: int) -> tuple[list[dict], list[dict]]:
    rows, round_rows = [], []
    compiled = torch.compile(reference)
    published = published_kernel()
    min_run_time, rep_ms, warm_s = (0.05, 20, 0.05) if quick else (0.2, 50, 0.3)
    for shape in CUDA_SIZES:
        rgb = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, device="cuda")
        out = torch.empty(shape, dtype=torch.uint8, device="cuda")
        pixels = rgb.numel() // 3
        src = torch.randint(0, 256, (2 * pixels,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        candidates = {
            "img2gray": lambda: img2gray.img2gray(rgb),
            "img2gray out=": lambda: img2gray.img2gray(rgb, out=out),
            "copy": lambda: dst.copy_(src),
            "clone (allocating copy)": lambda: src.clone(),
            "torch.compile": lambda: compiled(rgb),
            "torch eager": lambda: reference(rgb),
        }
        if published is not None:
            candidates["published 16x16"] = lambda: published(rgb, out)
        # Fewer calls where one takes milliseconds (torch eager at 16384^2).
        burst = (20, 21) if pixels <= 1 << 24 else (5, 5)
        samples: dict[str, list[dict]] = {name: [] for name in candidates}
        for _ in range(rounds):
            for name, fn in candidates.items():
                warm_up(fn, warm_s)
                b2b = b2b_us(fn, min_run_time)
                samples[name].append(
                    {"b2b": b2b, "sm_MHz": sm_clock_mhz(), "W": power_w(), "host": host_us(fn, *burst)}
                )
        times = {}
        for name, fn in candidates.items():
            warm_up(fn, warm_s)
            times[name] = {
                "b2b": statistics.median(s["b2b"] for s in samples[name]),
                "host": statistics.median(s["host"] for s in samples[name]),
                "sm_MHz": "/".join(str(s["sm_MHz"]) for s in samples[name]),
                "W": "/".join(str(s["W"]) for s in samples[name]),
                "per_call": per_call_us(fn),
                "do_bench": do_bench_us(fn, rep_ms),
            }
        copy = times["copy"]
        for name, t in times.items():
            rows.append(
                {
                    "device": "cuda",
                    "shape": "x".join(map(str, shape)),
                    "impl": name,
                    "per_call_us": round(t["per_call"], 2),
                    "b2b_us": round(t["b2b"], 2),
                    "do_bench_us": round(t["do_bench"], 2),
                    "host_us": round(t["host"], 2),
                    "sm_MHz": t["sm_MHz"],
                    "W": t["W"],
                    "b2b_GB/s": round(4 * pixels / (t["b2b"] * 1e-6) / 1e9, 1),
                    "% of copy per_call": round(100 * copy["per_call"] / t["per_call"], 1),
                    "% of copy b2b": round(100 * copy["b2b"] / t["b2b"], 1),
                    "% of copy do_bench": round(100 * copy["do_bench"] / t["do_bench"], 1),
                }
            )
        if shape in TARGET_SIZES:
            for i in range(rounds):
                copy_round = samples["copy"][i]
                for name in OURS:
                    ours = samples[name][i]
                    round_rows.append(
                        {
                            "shape": "x".join(map(str, shape)),
                            "round": i + 1,
                            "impl": name,
                            "b2b_us": round(ours["b2b"], 2),
                            "copy b2b_us": round(copy_round["b2b"], 2),
                            "% of copy": round(100 * copy_round["b2b"] / ours["b2b"], 1),
                            "time / copy's": round(ours["b2b"] / copy_round["b2b"], 2),
                            "sm_MHz / copy's": f"{ours['sm_MHz']} / {copy_round['sm_MHz']}",
                            "W / copy's": f"{ours['W']} / {copy_round['W']}",
                        }
                    )
        summary = ", ".join(f"{r['impl']} {r['% of copy b2b']}%" for r in rows[-len(candidates) :])
        print(f"{'x'.join(map(str, shape))}, % of copy b2b: {summary}", flush=True)
    return rows, round_rows


def host_overhead(img2gray) -> list[dict]:
    """Where a call's time goes at HOST_SIZE: each part alone, beside the copy."""
    rgb = torch.randint(0, 256, (*HOST_SIZE, 3), dtype=torch.uint8, device="cuda")
    out = torch.empty(HOST_SIZE, dtype=torch.uint8, device="cuda")
    pixels = rgb.numel() // 3
    src = torch.randint(0, 256, (2 * pixels,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ops = img2gray.ops
    parts = {
        "copy: dst.copy_(src)": (lambda: dst.copy_(src), True),
        "clone: src.clone() (allocating copy)": (lambda: src.clone(), True),
        "img2gray(rgb)": (lambda: img2gray.img2gray(rgb), True),
        "img2gray(rgb, out=out)": (lambda: img2gray.img2gray(rgb, out=out), True),
        "ops.to_gray.default(rgb)": (lambda: ops.to_gray.default(rgb), True),
        "ops.img2gray.default(rgb, out)": (lambda: ops.img2gray.default(rgb, out), True),
        "ops.img2gray(rgb, out) (packet)": (lambda: ops.img2gray(rgb, out), False),
        "torch.empty(H, W, uint8, cuda)": (
            lambda: torch.empty(rgb.shape[:-1], dtype=torch.uint8, device=rgb.device),
            False,
        ),
    }
    rows = []
    for name, (fn, on_gpu) in parts.items():
        warm_up(fn)
        rows.append({"call": name, "b2b_us": round(b2b_us(fn, 0.2), 2), "sm_MHz": sm_clock_mhz()})
        rows[-1]["host_us"] = round(host_us(fn), 2)
        gpu = graph_us(fn) if on_gpu else None
        rows[-1]["gpu_us (graph)"] = "-" if gpu is None else round(gpu, 2)
    return rows


def bench_cpu(img2gray, quick: bool) -> list[dict]:
    import cv2
    import numpy as np

    rows = []
    min_run_time = 0.05 if quick else 0.3
    for shape in CPU_SIZES:
        rgb = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8)
        out = torch.empty(shape, dtype=torch.uint8)
        flat = rgb.numpy().reshape(-1, shape[-1], 3)  # OpenCV takes 2-D images: batch folded into rows
        cv_out = np.empty(flat.shape[:2], dtype=np.uint8)
        pixels = rgb.numel() // 3
        for threads in (1, 2):
            cv2.setNumThreads(threads)
            candidates = {
                "img2gray": lambda: img2gray.img2gray(rgb, out=out),
                "opencv": lambda: cv2.cvtColor(flat, cv2.COLOR_RGB2GRAY, dst=cv_out),
                "torch eager": lambda: reference(rgb),
            }
            times = {}
            for name, fn in candidates.items():
                # CPU only: the plain clock (no accelerator to synchronise).
                timer = torch_benchmark.Timer(
                    stmt="fn()", globals={"fn": fn}, num_threads=threads, timer=timeit.default_timer
                )
                times[name] = timer.blocked_autorange(min_run_time=min_run_time).median * 1e3
            for name, ms in times.items():
                rows.append(
                    {
                        "device": "cpu",
                        "shape": "x".join(map(str, shape)),
                        "impl": name,
                        "threads": threads,
                        "median_ms": round(ms, 4),
                        "GB/s": round(4 * pixels / (ms * 1e-3) / 1e9, 1),
                        "time / opencv": round(ms / times["opencv"], 3),
                    }
                )
    return rows


def markdown(rows: list[dict]) -> str:
    columns = list(rows[0])
    return "\n".join(
        [
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
            *("| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build_dir", type=Path, help="the folder holding build/<variant>/ (or the build/ folder)")
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--quick", action="store_true", help="shorter timing runs (a smoke test)")
    parser.add_argument("--rounds", type=int, default=3, help="back-to-back rounds per CUDA size (median)")
    args = parser.parse_args()
    import kernels

    img2gray = kernels.get_local_kernel(args.build_dir.resolve(), backend="cuda" if args.device == "cuda" else "cpu")
    host_rows, host_rows_after, round_rows = [], [], []
    if args.device == "cuda":
        host_rows = host_overhead(img2gray)
        rows, round_rows = bench_cuda(img2gray, args.quick, args.rounds)
        host_rows_after = host_overhead(img2gray)
        machine = torch.cuda.get_device_name()
    else:
        rows = bench_cpu(img2gray, args.quick)
        machine = platform.processor() or platform.machine()
    header = (
        f"{machine}, torch {torch.__version__}, variant {Path(img2gray.__file__).parent.name}, {datetime.date.today()}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"img2gray-{args.device}"
    with open(f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    parts = [header, "", markdown(rows)]
    if host_rows:
        where = "x".join(map(str, HOST_SIZE))
        parts += [
            "",
            f"Each round at the sizes with a target ({args.rounds} rounds; the table above takes their medians):",
            "",
            markdown(round_rows),
            "",
            f"Host overhead at {where}, at the start of the process (b2b: torch.utils.benchmark back to back; "
            "host: issuing time per call; gpu: CUDA-graph replay, the device time alone):",
            "",
            markdown(host_rows),
            "",
            f"Host overhead at {where} again, after the size sweep:",
            "",
            markdown(host_rows_after),
            "",
            _acceptance(rows),
        ]
    text = "\n".join(parts) + "\n"
    Path(f"{stem}.md").write_text(text)
    print(text)
    _plot(rows, header, Path(f"{stem}.png"))


def _acceptance(rows: list[dict]) -> str:
    """The issue-15 targets, computed from this run's rows (medians of the rounds)."""
    by = {(r["shape"], r["impl"]): r for r in rows}
    host_shape = "x".join(map(str, HOST_SIZE))
    lines = ["Issue 15 targets, from this run:", ""]
    for impl in OURS:
        ratio = by[(host_shape, impl)]["b2b_us"] / by[(host_shape, "copy")]["b2b_us"]
        host_ratio = by[(host_shape, impl)]["host_us"] / by[(host_shape, "copy")]["host_us"]
        lines.append(
            f"- {impl} at {host_shape}: b2b {ratio:.2f}x the copy's time (target <= 1.3x); "
            f"host time {host_ratio:.2f}x the copy's"
        )
    for shape, target in TARGET_SIZES.items():
        name = "x".join(map(str, shape))
        for impl in OURS:
            r = by[(name, impl)]
            lines.append(
                f"- {name}, {impl}: {r['% of copy b2b']}% of the copy's bandwidth back to back "
                f"(target >= {target}%), {r['% of copy do_bench']}% under do_bench, {r['% of copy per_call']}% per call"
            )
    return "\n".join(lines)


def _plot(rows: list[dict], title: str, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib not installed: no {path})")
        return
    if rows[0]["device"] == "cuda":
        methods = ["per_call", "b2b", "do_bench"]
        fig, axes = plt.subplots(1, 3, figsize=(16, 5), sharey=True)
        for ax, method in zip(axes, methods, strict=True):
            for impl in dict.fromkeys(r["impl"] for r in rows):
                points = [r for r in rows if r["impl"] == impl]
                shares = [r[f"% of copy {method}"] for r in points]
                ax.plot([r["shape"] for r in points], shares, marker="o", label=impl)
            ax.set_title(method, fontsize=10)
            ax.tick_params(axis="x", rotation=30)
            ax.axhline(100, color="grey", linewidth=0.5)
        axes[0].set_ylabel("bandwidth, % of a device copy of the same bytes")
        axes[-1].legend(fontsize=8)
        fig.suptitle(title, fontsize=9)
    else:
        fig, ax = plt.subplots(figsize=(10, 5))
        for key in sorted({(r["impl"], r["threads"]) for r in rows}):
            points = [r for r in rows if (r["impl"], r["threads"]) == key]
            ax.plot(
                [r["shape"] for r in points],
                [r["GB/s"] for r in points],
                marker="o",
                label=f"{key[0]} ({key[1]} threads)",
            )
        ax.set_ylabel("GB/s (4 bytes per pixel)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
