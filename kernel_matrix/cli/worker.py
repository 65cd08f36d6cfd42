"""The build container's entry point: `python -m kernel_matrix.cli.worker REQUEST`.

REQUEST is the BuildRequest file the host wrote (kernel_matrix/containers/build_request.py).
It runs the native build of `kernel-matrix build` for exactly that cell, with the
cache scopes the host chose; errors are one line and the CLI's exit codes, and the
exit code is also written as the build's outcome (container_output.OUTCOME, beside its
logs), where the host reads which failure it was."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from pathlib import Path

from kernel_matrix.building.objcache import ObjectCache
from kernel_matrix.cli import interrupt_on_sigterm
from kernel_matrix.cli.console import console, error
from kernel_matrix.cli.render import built_grid
from kernel_matrix.containers.build_request import BuildRequest
from kernel_matrix.containers.container_output import OUTCOME
from kernel_matrix.errors import ConfigError, ExitCode, KernelMatrixError
from kernel_matrix.hostfiles import write_file
from kernel_matrix.layout import BuildDir
from kernel_matrix.planning.selection import Kernel
from kernel_matrix.running.native import build_native


def run(request: BuildRequest) -> None:
    cache = None
    if request.cache_reads:
        own, *others = map(Path, request.cache_reads)
        writes = Path(request.cache_writes) if request.cache_writes else None
        cache = ObjectCache(own, also_reads=tuple(others), writes=writes)
    built = build_native(
        Kernel.load(Path(request.kernel_dir)),
        BuildDir(Path(request.out_dir)),
        python=None,
        backend=request.backend,
        jobs=request.jobs,
        capabilities=list(request.capabilities) or None,
        cache=cache,
        expected=request,
        candidate=(Path(request.candidate), request.candidate_from or "the Hub") if request.candidate else None,
        console=console,
    )
    if not built.reused:  # the container's log, as `kernel-matrix build` shows it
        console.print(built_grid(built))


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    args = sys.argv[1:] if argv is None else argv
    request = None
    try:
        if len(args) != 1:
            raise ConfigError("usage: python -m kernel_matrix.cli.worker REQUEST_FILE")
        request = BuildRequest.read(Path(args[0]))
        run(request)
        write_outcome(request, ExitCode.OK)
    except KernelMatrixError as exc:
        for line in str(exc).splitlines():
            error(line)
        if request is not None:
            write_outcome(request, exc.exit_code)
        raise SystemExit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def write_outcome(request: BuildRequest, code: ExitCode) -> None:
    """The build's exit code, as {"exit_code": 7}, beside the cell's logs in its output folder:
    only where that folder is there (the host makes a container's), so that a build refused
    before it wrote anything still leaves nothing behind where it makes the folder itself."""
    out = Path(request.out_dir)
    if not out.is_dir():
        return
    path = BuildDir(out).log(request.variant, OUTCOME)
    # The exit status still says it failed: an outcome that cannot be written costs only which failure.
    with contextlib.suppress(KernelMatrixError, OSError):
        write_file(path, json.dumps({"exit_code": int(code)}) + "\n")


if __name__ == "__main__":
    main()
