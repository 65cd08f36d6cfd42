"""Container build, wheel and publish: this commit against a baseline commit, in one run.

    eval "$(scripts/docker-engine start)"
    python benchmarks/against_baseline.py [--baseline 55e160e] [--rounds 3] \
        [--out benchmarks/results/against-baseline.md]

Issue 13's acceptance: the restructuring (55e160e is the last commit before it)
must leave container builds, wheels and publishing no slower. Each side is a
`git archive` of its commit, run as `python -m kernel_matrix` from that tree
with this environment's packages. Per round, alternating sides (so that both
meet the same machine state), for one CUDA cell:

  - container cold build: `build --variant V --no-cache` into a fresh folder
  - wheel: `wheels --variant V` from that folder
  - publish: `publish --allow-partial` of that folder to a fresh repo on the
    local Hub test server (tests/hubserver.py, loopback), real huggingface_hub

Builder images are made first, untimed (each side's image recipe may differ).
The table gives each side's median and HEAD's time over the baseline's."""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from hubserver import HubServer  # noqa: E402  (the test server, beside the tests)

VARIANT = "torch214-cxx11-cu130-x86_64-linux"
IMAGE = ("--image", "offline")  # this host has no registry for the official CUDA images
ORG = "bench-org"


def export(rev: str, into: Path) -> str:
    """`git archive` of rev into `into`; returns the short commit."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="tar")
    return commit


def run(tree: Path, *args: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "kernel_matrix", *args],
        cwd=tree,
        env=env | {"PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{tree.name}: kernel-matrix {' '.join(args)} failed:\n{result.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="55e160e")
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "against-baseline.md")
    args = parser.parse_args()
    if not os.environ.get("DOCKER_HOST"):
        sys.exit('no engine: eval "$(scripts/docker-engine start)" first')
    work = Path(tempfile.mkdtemp(prefix="km-against-"))
    try:
        sides = {"baseline": work / "baseline", "head": work / "head"}
        commits = {"baseline": export(args.baseline, sides["baseline"]), "head": export(args.head, sides["head"])}
        times: dict[str, dict[str, list[float]]] = {side: {"build": [], "wheels": [], "publish": []} for side in sides}
        with HubServer(trusted_orgs=[ORG]) as hub:
            env = dict(os.environ) | {
                "HF_ENDPOINT": hub.url,
                "HF_TOKEN": "hf_bench_token",
                "HF_HUB_DISABLE_TELEMETRY": "1",
            }
            for side, tree in sides.items():  # images and pip caches, untimed
                print(f"{side} {commits[side]}: warming up (builder images)", flush=True)
                warm = work / f"warm-{side}"
                run(tree, "build", "--variant", VARIANT, *IMAGE, "--build-dir", str(warm), env=env)
                run(tree, "wheels", "--variant", VARIANT, *IMAGE, "--build-dir", str(warm), env=env)
            for i in range(args.rounds):
                for side, tree in sides.items():
                    out = work / f"{side}-{i}"
                    t = times[side]
                    t["build"].append(
                        run(tree, "build", "--variant", VARIANT, *IMAGE, "--no-cache", "--build-dir", str(out), env=env)
                    )
                    t["wheels"].append(
                        run(tree, "wheels", "--variant", VARIANT, *IMAGE, "--build-dir", str(out), env=env)
                    )
                    repo = f"{ORG}/img2gray-{side}-{i}"
                    t["publish"].append(
                        run(tree, "publish", "--build-dir", str(out), "--repo-id", repo, "--allow-partial", env=env)
                    )
                    print(f"round {i + 1} {side}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in t.items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    labels = {
        "build": f"container cold build `build --variant {VARIANT} --no-cache`",
        "wheels": f"wheel `wheels --variant {VARIANT}`",
        "publish": "publish `publish --allow-partial` to the local Hub server",
    }
    lines = [
        f"HEAD ({commits['head']}) against the baseline ({commits['baseline']}), {args.rounds} rounds each, "
        f"alternating; medians (`python benchmarks/against_baseline.py`, {time.strftime('%Y-%m-%d')}).",
        "",
        "| step | baseline s | HEAD s | HEAD / baseline | rounds (baseline; HEAD) |",
        "|---|---|---|---|---|",
    ]
    for key, label in labels.items():
        base, head = (statistics.median(times[side][key]) for side in sides)
        rounds = "; ".join(" ".join(f"{s:.1f}" for s in times[side][key]) for side in sides)
        lines.append(f"| {label} | {base:.1f} | {head:.1f} | {head / base:.2f} | {rounds} |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
