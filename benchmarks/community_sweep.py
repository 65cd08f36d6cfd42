"""kernel-matrix on many real kernel-builder kernels: a compatibility sweep.

    python benchmarks/community_sweep.py KERNELS_DIR [--build NAME,...] [--build-dir DIR] [--out FILE]
    python benchmarks/community_sweep.py KERNELS_DIR --device-results SUMMARY.tsv [--running RUNNING.tsv] [--out FILE]

KERNELS_DIR holds kernel folders (build.toml at their top), e.g. a checkout of
huggingface/kernels-community. Every kernel's build.toml goes through
`kernel-matrix matrix --kernel-dir` (cells of the full profile, or the one-line
error); the kernels named by --build are also built natively for this host
(`kernel-matrix build --cuda-capabilities 9.0`: one capability, to keep it
short), checked with `kernel-matrix check-abi`, and loaded with
`kernels.get_local_kernel`, in a fresh process each. The kernels are only read:
builds go to --build-dir (default: a temporary folder, removed after).

--device-results takes the summary of benchmarks/h200_sweep.sh (one tab-separated
line per BUILD, ABI, LOAD and TEST, run on the H200 by kernel-matrix itself) instead
of building here, and --running its list of builds still going when it was read
(RUNNING, kernel, [objects done/total], seconds). To reproduce the H200 table:

    benchmarks/h200_sweep.sh start CARRY /tmp/sw 1380      # on the device; see the script for CARRY
    benchmarks/h200_sweep.sh wait /tmp/sw $OUT 540         # repeated until DONE
    python benchmarks/community_sweep.py /tmp/kc --device-results summary.tsv --running running.tsv \\
        --out benchmarks/results/community-sweep-table.md
"""

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


CELLS_HEADER = ["kernel", "general.backends", "cells (full profile)"]
DEVICE = "H200"  # the device column's machine (--device: the lent machine may be an H100)
DEVICE_HEADER = ["built sm_90 (variant)", "build s", "ABI", "loads", "own suite", "device"]


def device_results(summary: Path, running: Path | None) -> dict[str, dict[str, list[list[str]]]]:
    """{kernel: {BUILD|ABI|LOAD|TEST|RUNNING: [fields after the kernel, ...]}} from h200_sweep.sh's files."""
    found: dict[str, dict[str, list[list[str]]]] = {}
    for path in (summary, running):
        if path is None or not path.is_file():
            continue
        for line in path.read_text().splitlines():
            what, kernel, *fields = line.split("\t")
            found.setdefault(kernel, {}).setdefault(what, []).append([f.strip() for f in fields])
    return found


def cell(text: str, width: int = 110) -> str:
    """One table cell: no pipes, no runs of spaces (kernel-matrix's own tables), at most width characters."""
    text = " ".join(text.replace("|", "/").replace("│", " ").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def built_columns(kernel: str, runs: dict[str, list[list[str]]]) -> list[str]:
    """[built sm_90 (variant), build s] from BUILD (rc, seconds, kind: variants, progress, last line) or RUNNING."""
    if "BUILD" not in runs:
        if "RUNNING" in runs:
            progress, seconds = runs["RUNNING"][-1][:2]
            return [f"not finished in {seconds} on 16 cores (objects {progress.strip('[]')})", "-"]
        return ["not run", "-"]
    rc, seconds, variants, _progress, last = runs["BUILD"][-1]
    if rc == "0":
        return [f"yes ({variants.split(': ', 1)[-1]})", seconds]
    if rc == "skipped":
        return [cell(last), "-"]
    return [cell(f"exit {rc}: {last}"), seconds]


def abi_column(runs: dict[str, list[list[str]]]) -> str:
    """check-abi of every variant with a library: ok, or its error line; '-' where nothing is compiled."""
    checks = runs.get("ABI", [])
    if not checks:
        return "-" if runs.get("BUILD", [["1"]])[-1][0] == "0" else ""
    return "; ".join("ok" if rc == "0" else cell(f"exit {rc}: {line}") for _variant, rc, line in checks)


def load_column(runs: dict[str, list[list[str]]]) -> str:
    if "LOAD" not in runs:
        return ""
    backend, rc, line = runs["LOAD"][-1]
    return f"yes ({backend}, {line.split()[-2]} names)" if rc == "0" else cell(f"no ({backend}): {line}", 90)


def suite_columns(runs: dict[str, list[list[str]]]) -> list[str]:
    """[own suite, device]: pytest's summary line (or kernel-matrix's), and where it ran."""
    if "TEST" not in runs:
        loaded = runs.get("LOAD", [["", "1"]])[-1][1] == "0"
        return ["not finished: running at the last read of the device", DEVICE] if loaded else ["", ""]
    variant, rc, seconds, pytest_line, km_line = runs["TEST"][-1]
    device = f"{DEVICE} host CPUs" if "cpu" in variant else DEVICE
    if rc == "124":  # stopped at its limit: pytest's summary of what ran by then, where it printed one
        by_then = f": by then {pytest_line}" if pytest_line != "-" else ""
        return [cell(f"not finished in {seconds} s (suite timeout){by_then}"), device]
    result = pytest_line if pytest_line != "-" else km_line
    return [cell(("" if rc == "0" else f"FAIL (exit {rc}): ") + result), device]


def device_row(kernel: str, runs: dict[str, list[list[str]]]) -> list[str]:
    return [*built_columns(kernel, runs), abi_column(runs), load_column(runs), *suite_columns(runs)]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels_dir", type=Path)
    parser.add_argument("--build", default="", help="comma-separated kernel folders to build, check and load")
    parser.add_argument("--build-dir", type=Path, help="where builds go (<dir>/<kernel>/); default: temporary")
    parser.add_argument("--device-results", type=Path, help="h200_sweep.sh's summary.tsv: its results, no builds here")
    parser.add_argument("--running", type=Path, help="h200_sweep.sh's running.tsv: builds not finished")
    parser.add_argument("--out", type=Path, help="write the markdown table here too")
    parser.add_argument("--device", default="H200", help="the machine the device results came from (H200, H100)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    to_build = [name for name in args.build.split(",") if name]
    device = device_results(args.device_results, args.running) if args.device_results else None
    work = args.build_dir or Path(tempfile.mkdtemp(prefix="km-sweep-"))
    rows = []
    try:
        for kernel in sorted(p for p in args.kernels_dir.iterdir() if (p / "build.toml").is_file()):
            backends, cells = cells_of(kernel)
            if device is not None:
                rest = device_row(kernel.name, device.get(kernel.name, {})) if cells.isdigit() else [""] * 6
                rows.append([kernel.name, backends, cell(cells), *rest])
            else:
                built = build_and_load(kernel, work / kernel.name) if kernel.name in to_build else ["", "", "", ""]
                rows.append([kernel.name, backends, cells, *built])
            print(" | ".join(rows[-1]), flush=True)
    finally:
        if args.build_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    header = CELLS_HEADER + (DEVICE_HEADER if device is not None else ["built here", "s", "check-abi", "loads"])
    text = table(header, rows)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
