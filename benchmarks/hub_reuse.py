"""The Hub as a verified binary cache (issue 38): a cold build against one that takes the
published, signed variant, in the same run.

    eval "$(scripts/docker-engine start)"
    python benchmarks/hub_reuse.py [--out benchmarks/results/hub-reuse.md]

Works on a copy of kernel/ (img2gray), with the loopback Hub (tests/hubserver.py) and a
local Sigstore trust root (tests/sigstore_local.py: signing cannot reach Sigstore from
here). For each build kind (native CPU; the CUDA 13.0 cell in its builder image, where an
engine answers and nvcc is here, its image made first, untimed):
  1. cold: `kernel-matrix build --no-cache`                                     baseline
  2. the variant signed and published; `build --reuse-published --signed-by`:
     fetched, verified, compared, taken                       goal: nothing compiled
Each row: seconds, the ratio to the cold build, objects compiled, and whether the two
variants are byte-identical."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hubserver import HubServer  # noqa: E402
from sigstore_local import KERNEL_MATRIX_WORKFLOW, GitHubIdentity, LocalSigstore  # noqa: E402

from kernel_matrix.releasing.signatures import sign_variant  # noqa: E402

AUTHOR, REPO_ID = "octo-org/img2gray", "kernel-matrix/img2gray"


def run(*argv: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "kernel_matrix", *argv], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"kernel-matrix {' '.join(argv)} failed:\n{result.stderr[-2000:]}")
    return time.perf_counter() - started


def files(variant: Path) -> dict[str, bytes]:
    return {p.relative_to(variant).as_posix(): p.read_bytes() for p in sorted(variant.rglob("*")) if p.is_file()}


def kinds(kernel: Path) -> list[tuple[str, list[str]]]:
    """(label, build options) for each kind this host builds."""
    found = [("native, CPU", ["--kernel-dir", str(kernel), "--backend", "cpu"])]
    try:
        import docker

        docker.from_env().ping()
    except Exception:  # noqa: BLE001 - no engine: the native row only
        return found
    if shutil.which("nvcc"):
        cell = "torch214-cxx11-cu130-x86_64-linux"
        found.append((f"container, {cell}", ["--kernel-dir", str(kernel), "--variant", cell, "--image", "offline"]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        kernel = scratch / "img2gray"
        shutil.copytree(REPO / "kernel", kernel, ignore=shutil.ignore_patterns("__pycache__", "benchmarks"))
        local = LocalSigstore()
        root = local.write_trusted_root(scratch / "trusted_root.json")
        signer = local.signer(GitHubIdentity(repository=AUTHOR, signer_workflow=KERNEL_MATRIX_WORKFLOW))
        for label, options in kinds(kernel):
            with HubServer(trusted_orgs=["kernel-matrix"]) as server:
                env = {**os.environ, "HF_ENDPOINT": server.url, "HF_TOKEN": "hf_" + "0" * 32}
                env |= {"HF_HUB_DISABLE_XET": "1", "HF_HUB_CACHE": str(scratch / "hf-cache" / label)}
                env.pop("HF_HUB_DISABLE_TELEMETRY", None)
                create = f"from huggingface_hub import HfApi; HfApi().create_repo({REPO_ID!r}, repo_type='kernel')"
                subprocess.run([sys.executable, "-c", create], check=True, env=env)
                cold, reused = scratch / label / "cold", scratch / label / "reused"
                if "--variant" in options:  # the builder image, made before anything is timed
                    run("build", *options, "--build-dir", str(scratch / label / "warm"), env=env)
                cold_s = run("build", *options, "--no-cache", "--build-dir", str(cold), env=env)
                (variant,) = [p for p in cold.iterdir() if (p / "metadata.json").is_file()]
                sign_variant(variant, signer)
                publish = ["--kernel-dir", str(kernel), "--build-dir", str(cold), "--allow-partial"]
                run("publish", *publish, env=env)
                reuse = ["--reuse-published", "--signed-by", AUTHOR, "--trust-root", str(root)]
                reused_s = run("build", *options, *reuse, "--no-cache", "--build-dir", str(reused), env=env)
            stats = json.loads((reused / "logs" / f"{variant.name}.build.json").read_text())
            cold_stats = json.loads((cold / "logs" / f"{variant.name}.build.json").read_text())
            identical = files(reused / variant.name) == files(variant)
            rows.append((label, "cold", cold_s, 1.0, cold_stats["compiled"], "-"))
            rows.append((label, "reused", reused_s, reused_s / cold_s, stats["compiled"], "yes" if identical else "NO"))
    lines = [
        "# The Hub as a verified binary cache: cold build vs reused published variant",
        "",
        "`python benchmarks/hub_reuse.py --out benchmarks/results/hub-reuse.md`, this machine "
        f"({os.cpu_count()} cores), img2gray, the loopback Hub and a local trust root, in one run.",
        "",
        "| build | run | seconds | vs cold | objects compiled | byte-identical |",
        "|---|---|---|---|---|---|",
        *(f"| {k} | {r} | {s:.1f} | {ratio:.2f} | {c} | {same} |" for k, r, s, ratio, c, same in rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
