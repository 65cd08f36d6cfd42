"""The edit loop (`scripts/test --fast`) against what it ran at a baseline commit, in the same
run on the same machine (issue 37: under a minute on 2 cores).

    python benchmarks/test_loops.py [--baseline e4b64c2] [--out benchmarks/results/test-loops.md]

Both sides run the fast loop's pytest command as their scripts/test wrote it, on .venv's
Python, from a checkout of their own commit (the baseline in a temporary git worktree, which
is removed afterwards); `python -m kernel_matrix` in their tests runs the checkout's package, as
each test runs the CLI from its checkout's root. Lints and mypy are timed once (the same tools
on nearly the same code) and added to both; scripts/setup-dev is left out of both (its pip step
is skipped on an unchanged checkout since the stamp was added, 20 s a run before). Needs no
container engine. Writes the table (a ratio against the baseline) and prints it."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"


def fast_pytest_argv(checkout: Path) -> list[str]:
    """The pytest arguments of `scripts/test --fast` at checkout, read from its script."""
    script = (checkout / "scripts" / "test").read_text()
    fast = script[script.index('if [ "$fast" = 1 ]') :]
    workers = re.findall(r'workers=\(-n "\$\{KERNEL_MATRIX_TEST_WORKERS:-(\d+)\}" --dist (\w+)\)', script)
    # The fast branch's own workers line where it has one, else the script's.
    count, dist = workers[-1] if "workers=(" in fast else workers[0]
    marks = re.search(r'-m "([^"]+)"', fast)
    assert marks, "no -m in the fast branch"
    return ["-m", "pytest", "-n", count, "--dist", dist, "-q", "-p", "no:cacheprovider", "-m", marks.group(1)]


def timed(argv: list[str], cwd: Path) -> tuple[float, str]:
    started = time.monotonic()
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    seconds = time.monotonic() - started
    last = (result.stdout.strip().splitlines() or [""])[-1]
    if result.returncode != 0:
        raise SystemExit(f"{shlex.join(map(str, argv))} in {cwd} exited {result.returncode}:\n{result.stdout[-3000:]}")
    return seconds, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="e4b64c2")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "test-loops.md")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    started = time.monotonic()
    for command in (["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy", "kernel_matrix"]):
        timed([REPO / ".venv" / "bin" / command[0], *command[1:]], REPO)
    lints = time.monotonic() - started
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", worktree, args.baseline], cwd=REPO, check=True)
        try:
            for label, checkout in ((f"baseline {args.baseline}", worktree), (f"now {head.strip()}", REPO)):
                argv = fast_pytest_argv(checkout)
                seconds, last = timed([PYTHON, *argv], checkout)
                rows.append((label, " ".join(argv[1:]), seconds, last))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", worktree], cwd=REPO, check=False)
    base = rows[0][2] + lints
    lines = [
        "# The edit loop, `scripts/test --fast` (benchmarks/test_loops.py)",
        "",
        f"One run on this machine ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}: each side's fast pytest "
        f"command, plus ruff, `ruff format --check` and mypy ({lints:.1f} s, timed once). The baseline's "
        "worktree has no ../shared beside it: its tests that read the corpus skip (the result column counts "
        "them), which only shortens the baseline.",
        "",
        "| loop | pytest | pytest s | with lints s | ratio | result |",
        "|---|---|---|---|---|---|",
    ]
    for label, command, seconds, last in rows:
        total = seconds + lints
        lines.append(f"| {label} | `{command}` | {seconds:.1f} | {total:.1f} | {total / base:.2f} | {last} |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
