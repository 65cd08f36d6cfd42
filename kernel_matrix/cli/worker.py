"""The build container's entry point: `python -m kernel_matrix.cli.worker REQUEST`.

REQUEST is the BuildRequest file the host wrote (kernel_matrix/containers/build_request.py).
It runs the native build of `kernel-matrix build` for exactly that cell, with the
cache scopes the host chose; errors are one line and the CLI's exit codes."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from kernel_matrix.building.objcache import ObjectCache
from kernel_matrix.cli import interrupt_on_sigterm
from kernel_matrix.cli.build import build_native
from kernel_matrix.cli.console import error
from kernel_matrix.containers.build_request import BuildRequest
from kernel_matrix.errors import ConfigError, KernelMatrixError
from kernel_matrix.layout import BuildDir
from kernel_matrix.planning.selection import Kernel


def run(request: BuildRequest) -> None:
    cache = None
    if request.cache_reads:
        own, *others = map(Path, request.cache_reads)
        writes = Path(request.cache_writes) if request.cache_writes else None
        cache = ObjectCache(own, also_reads=tuple(others), writes=writes)
    build_native(
        Kernel.load(Path(request.kernel_dir)),
        BuildDir(Path(request.out_dir)),
        python=None,
        backend=request.backend,
        jobs=request.jobs,
        capabilities=list(request.capabilities) or None,
        cache=cache,
        expected=request,
    )


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) != 1:
            raise ConfigError("usage: python -m kernel_matrix.cli.worker REQUEST_FILE")
        run(BuildRequest.read(Path(args[0])))
    except KernelMatrixError as exc:
        for line in str(exc).splitlines():
            error(line)
        raise SystemExit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
