"""A second job's time to a ready builder image (issue 38): made from its recipe, as every
job did before, against pulled by digest from the registry the first job pushed it to, in
the same run.

    eval "$(scripts/docker-engine start)"
    python benchmarks/builder_images.py [--out benchmarks/results/builder-images.md]

The first job is this machine's engine: `kernel-matrix builder-images --push` makes the
cell's builder (if this engine has none yet) and pushes it to a real registry on loopback
(tests/registry.py, the stand-in for ghcr.io). The second job is a fresh engine of its own
(scripts/docker-engine with another KERNEL_MATRIX_ENGINE_DIR: no image at all, as on a new
GitHub runner), in which, for the same cell:
  1. made: images.builder_for, what a build does without a list    baseline
     (debootstrap's base, pip downloads of torch and the build tools, installed offline)
  2. pulled: `build --builder-images` pulls the pushed image by digest, checks its recipe
     label, and builds the cell with it                             goal: no image made
Each is timed to the builder being ready; row 2 also says whether its build made any image
and whether the variant it built loads. The fresh engine is deleted afterwards."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from registry import LoopbackRegistry  # noqa: E402

from kernel_matrix.containers import images, registry  # noqa: E402

CELL = "torch213-cxx11-cpu-x86_64-linux"  # torch 2.13's CPU build: the wheel this machine's pip has on disk
REPOSITORY = "owner/kernel/kernel-matrix-builder"


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "kernel_matrix", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise SystemExit(f"kernel-matrix {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def engine(folder: Path, command: str) -> dict[str, str]:
    """scripts/docker-engine's command for an engine kept in folder; the environment that reaches it."""
    env = os.environ | {"KERNEL_MATRIX_ENGINE_DIR": str(folder), "KERNEL_MATRIX_ENGINE_STARTED": "1"}
    said = subprocess.run([REPO / "scripts" / "docker-engine", command], env=env, capture_output=True, text=True)
    if said.returncode != 0:
        raise SystemExit(f"scripts/docker-engine {command}: {said.stderr}")
    env["DOCKER_HOST"] = f"unix://{folder}/docker.sock"
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the table here (markdown)")
    parser.add_argument("--variant", default=CELL)
    options = parser.parse_args()
    first = os.environ.copy()
    if "DOCKER_HOST" not in first:
        raise SystemExit('no engine: eval "$(scripts/docker-engine start)" first')
    import docker

    rows = []
    with tempfile.TemporaryDirectory(prefix="km-bench-images-") as scratch:
        work = Path(scratch)
        with LoopbackRegistry(work / "registry") as server:
            repository = f"{server.host}/{REPOSITORY}"
            listed = work / "builder-images.json"
            started = time.monotonic()
            cli(
                "builder-images",
                "--variant",
                options.variant,
                "--image",
                "offline",
                "--push",
                repository,
                "--out",
                str(listed),
                env=first,
            )
            first_job = time.monotonic() - started
            (shared,) = registry.read_listed(listed)

            # The second job: a fresh engine, under a folder only this run uses (not /work/...: the
            # engine's data root must be on a file system overlay2 works on, as /var/lib is).
            second_dir = Path(tempfile.mkdtemp(prefix="km-bench-engine-", dir="/var/tmp"))
            second = engine(second_dir, "start")
            try:
                client = docker.DockerClient(base_url=second["DOCKER_HOST"])
                assert not client.images.list(), "the second engine must start empty"
                # 1. made from the recipe
                (cell,) = [c for c in _cells(options.variant)]
                started = time.monotonic()
                made = images.builder_for(client, cell, "offline", images.PipSetup.from_host(), log=lambda m: None)
                made_seconds = time.monotonic() - started
                assert made == shared.tag, f"the recipe differs between engines: {made} vs {shared.tag}"
                for image in client.images.list():
                    client.images.remove(image.id, force=True)
                assert not client.images.list()
                # 2. pulled by digest, then the cell built with it
                started = time.monotonic()
                registry.pull_listed(client, [shared], log=lambda m: None)
                pulled_seconds = time.monotonic() - started
                build_dir = work / "build"
                built = cli(
                    "build",
                    "--variant",
                    options.variant,
                    "--image",
                    "offline",
                    "--builder-images",
                    str(listed),
                    "--build-dir",
                    str(build_dir),
                    "--no-cache",
                    env=second,
                )
                made_any = "creating kernel-matrix/" in built.stdout + built.stderr
                variant = build_dir / options.variant
                loads = (variant / "metadata.json").is_file()
            finally:
                engine(second_dir, "purge")
    rows.append(("made from the recipe (baseline)", made_seconds, 1.0, "-"))
    rows.append(
        (
            "pulled by digest",
            pulled_seconds,
            pulled_seconds / made_seconds,
            f"{'an image was made' if made_any else 'no image made'}; variant {'built' if loads else 'missing'}",
        )
    )
    lines = [
        "# A second job's time to a ready builder image: made vs pulled by digest",
        "",
        f"`python benchmarks/builder_images.py`, {time.strftime('%Y-%m-%d')}, cell {options.variant} "
        f"(offline builder, {os.cpu_count()} cores), one run. The first job made the builder (where its engine "
        f"had none) and pushed it to a registry on loopback in {first_job:.0f} s (`builder-images --push`); the "
        "second job is a fresh engine with no image.",
        "",
        "| second job | seconds | ratio to made | build |",
        "|---|---:|---:|---|",
        *[f"| {name} | {seconds:.1f} | {ratio:.2f} | {build} |" for name, seconds, ratio, build in rows],
        "",
        "Loopback is faster than ghcr.io from a GitHub runner: the pull's time there is the image's "
        "size (the CPU builder: about 0.5 GB compressed) over the runner's network.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if options.out:
        options.out.write_text(text)


def _cells(name: str):
    from kernel_matrix.cli.options import resolve, selection_of

    return [c for c in resolve(selection_of(REPO / "build_matrix.yaml", "full", variant=[name])).cells]


if __name__ == "__main__":
    main()
