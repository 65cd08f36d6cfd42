"""How long expanding build_matrix.yaml takes (read, validate, expand, select,
JSON), against plain `yaml.safe_load` of the same file in the same process.

    python benchmarks/matrix_expand.py [--file build_matrix.yaml] [--out benchmarks/results/matrix-expand.md]

The goal: the full default matrix expands in under 0.5 s (the ratio shows what
validation with positions costs over bare parsing)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import yaml

from kernel_matrix.planning.matrix import github_matrix, load_matrix, select


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--file", type=Path, default=Path("build_matrix.yaml"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    load_matrix(args.file)  # warm imports and data tables, as a CLI run pays them once
    text = args.file.read_text()
    baseline = median_s(lambda: yaml.safe_load(text), args.repeats)
    cells = []

    def expand() -> None:
        cells[:] = select(load_matrix(args.file), profile="full")
        json.dumps(github_matrix(cells))

    expand_s = median_s(expand, args.repeats)
    rows = [
        f"Matrix expansion of {args.file} ({len(cells)} cells, profile full), median of {args.repeats} runs",
        "",
        "| step | seconds | ratio to yaml.safe_load |",
        "|---|---|---|",
        f"| yaml.safe_load (baseline) | {baseline:.5f} | 1.0 |",
        f"| load + validate + expand + select + JSON | {expand_s:.5f} | {expand_s / baseline:.1f} |",
        "",
        f"Goal: under 0.5 s. {'Met' if expand_s < 0.5 else 'NOT met'}.",
    ]
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
