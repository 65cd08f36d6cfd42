"""Build matrix cells in containers: the builder image of the cell's torch (and
CUDA), the kernel mounted read-only, the network off, and inside it the same
`kernel-matrix build` that builds natively, as the invoking user, into a private
folder; the variant replaces build/<cell> only once it is checked to be that cell.
A cell whose inputs are unchanged is skipped (the variant keeps the provenance
of the build that made it)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from . import images
from .engine import Mount, container
from .errors import BuildError, EngineError, KernelMatrixError
from .matrix import Cell
from .provenance import SOURCE_GIT_ENV, git_state
from .variant_dir import replace_dir
from .variants import host_arch

PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    status: str  # "built", "up to date" or "FAILED"
    seconds: float
    image: str | None
    message: str  # the error line, or the variant directory

    @property
    def ok(self) -> bool:
        return self.status != "FAILED"


def summary_markdown(results: list[CellResult]) -> str:
    """The results as a Markdown table (for build/summary.md and the GitHub job summary)."""
    rows = [f"| {r.cell.name} | {r.status} | {r.seconds:.1f} | {r.image or '-'} | {r.message} |" for r in results]
    return "\n".join(["| variant | status | seconds | image | result |", "|---|---|---|---|---|", *rows])


def _file_digests(root: Path, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    return [
        (p.relative_to(root).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.relative_to(root).parts[0] not in skip
    ]


def input_hash(cell: Cell, image_id: str, kernel_dir: Path) -> str:
    """Everything a cell's variant is made from: the cell, the builder image, the
    kernel's sources and kernel-matrix itself (not its tests or benchmarks)."""
    parts = [
        cell.to_json(),
        image_id,
        _file_digests(kernel_dir, skip=("tests", "benchmarks")),
        _file_digests(PACKAGE_DIR),
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _inputs_record(build_dir: Path, cell: Cell) -> Path:
    # Beside the variants, not inside: it is not part of what is published.
    return build_dir / ".inputs" / f"{cell.name}.sha256"


def builder_for(client: docker.DockerClient, cell: Cell, image_kind: str, pip: images.PipSetup, log=print) -> str:
    """The cell's builder image, made (once) if it is missing."""
    base = images.offline_base(client, log=log) if image_kind == "offline" else cell.image
    return images.builder_image(
        client, base, torch=cell.variant.torch, cuda=cell.variant.cuda, torch_index=cell.torch_index, pip=pip, log=log
    )


def shell_command(cell: Cell, image: str, kernel_dir: Path, command: list[str], *, interactive: bool) -> list[str]:
    """`docker run` of a shell (or command) in the cell's builder image, the kernel
    mounted read-write at /src: the counterpart of kernel-builder's dev shell."""
    env = {
        "PYTHONPATH": "/opt/kernel-matrix",
        "HOME": "/tmp",
        # The builder's python (kernel-matrix's needs) and, for CUDA cells, nvcc come first.
        "PATH": f"{images.VENV}/bin:{images.CUDA_HOME}/bin:/usr/local/bin:/usr/bin:/bin",
        **({"CUDA_HOME": images.CUDA_HOME} if cell.variant.cuda else {}),
    }
    return [
        "docker",
        "run",
        "--rm",
        *(["-it"] if interactive else []),
        "--network",
        "none",
        "--user",
        f"{os.getuid()}:{os.getgid()}",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--mount",
        f"type=bind,source={kernel_dir.resolve()},target=/src",
        "--mount",
        f"type=bind,source={PACKAGE_DIR},target=/opt/kernel-matrix/kernel_matrix,readonly",
        *(arg for key, value in env.items() for arg in ("--env", f"{key}={value}")),
        "--workdir",
        "/src",
        image,
        *(command or ["bash"]),
    ]


def build_cells(
    client: docker.DockerClient,
    cells: list[Cell],
    *,
    kernel_dir: Path,
    build_dir: Path,
    image_kind: str,
    jobs: int | None,
    log=print,
) -> list[CellResult]:
    """Every cell, one after the other; a failing cell never stops the others."""
    build_dir.mkdir(parents=True, exist_ok=True)
    pip = images.PipSetup.from_host()
    results = []
    for cell in cells:
        started = time.monotonic()
        image = None
        try:
            image = builder_for(client, cell, image_kind, pip, log)
            inputs = input_hash(cell, client.images.get(image).id, kernel_dir.resolve())
            record = _inputs_record(build_dir, cell)
            built = (build_dir / cell.name / "metadata.json").is_file()
            if built and record.is_file() and record.read_text() == inputs:
                results.append(CellResult(cell, "up to date", time.monotonic() - started, image, "nothing changed"))
                continue
            variant_dir = build_cell(client, cell, image, kernel_dir=kernel_dir, build_dir=build_dir, jobs=jobs)
            record.parent.mkdir(exist_ok=True)
            record.write_text(inputs)
            results.append(CellResult(cell, "built", time.monotonic() - started, image, str(variant_dir)))
        except (KernelMatrixError, docker.errors.DockerException) as exc:
            # One cell's failure is recorded; the next cell still builds.
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            results.append(CellResult(cell, "FAILED", time.monotonic() - started, image, message))
    return results


def build_cell(
    client: docker.DockerClient, cell: Cell, image: str, *, kernel_dir: Path, build_dir: Path, jobs: int | None
) -> Path:
    """Build one cell; its variant replaces build_dir/<cell> only if the build made exactly that variant."""
    if cell.variant.arch != host_arch():
        raise EngineError(f"{cell.name}: an {cell.variant.arch} cell cannot be built on this {host_arch()} host")
    kernel_dir, build_dir = kernel_dir.resolve(), build_dir.resolve()
    source = git_state(kernel_dir)
    env = {"PYTHONPATH": "/opt/kernel-matrix", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    if source is not None:
        env[SOURCE_GIT_ENV] = f"{source.commit}:{int(source.dirty)}"  # the container has no git
    if cell.variant.cuda:
        env["CUDA_HOME"] = images.CUDA_HOME
    logs = build_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # The container writes into a folder of its own: what it made is checked
    # before it may replace anything in build_dir.
    with tempfile.TemporaryDirectory(prefix=f".{cell.name}.container-", dir=build_dir) as private:
        Path(private).chmod(0o755)
        mounts = [
            Mount(kernel_dir, "/src"),
            Mount(PACKAGE_DIR, "/opt/kernel-matrix/kernel_matrix"),
            Mount(Path(private), "/out", read_only=False),
        ]
        argv = [
            f"{images.VENV}/bin/python",
            "-m",
            "kernel_matrix",
            "build",
            "--kernel-dir",
            "/src",
            "--build-dir",
            "/out",
            "--backend",
            cell.variant.backend,
            *(["--jobs", str(jobs)] if jobs else []),
            # The matrix's capabilities for this CUDA version (its cuda-capabilities override, if any).
            *(["--cuda-capabilities", ",".join(cell.capabilities)] if cell.capabilities else []),
        ]
        with container(client, image, mounts=mounts, network="none", env=env) as box:
            result = box.run(argv)
        log_path = logs / f"{cell.name}.container.log"
        log_path.write_text(f"$ {' '.join(argv)}\n{result.output.replace('/out/', f'{build_dir}/')}")
        for inner_log in (Path(private) / "logs").glob("*.log"):
            shutil.copyfile(inner_log, logs / inner_log.name)
        if result.exit_code != 0:
            last = next((ln for ln in reversed(result.output.splitlines()) if ln.strip()), "no output")
            last = last.replace("/out/", f"{build_dir}/")
            raise BuildError(f"{cell.name}: the build in {image} failed (exit {result.exit_code}): {last.strip()}")
        made = sorted(p.name for p in Path(private).iterdir() if (p / "metadata.json").is_file())
        if made != [cell.name]:
            raise BuildError(f"{cell.name}: the build in {image} made {made or 'nothing'} (see {log_path})")
        final = build_dir / cell.name
        replace_dir(Path(private) / cell.name, final)
    return final
