"""Makes the builder image the container tests build in, beside the tests (scripts/test starts
it before pytest), so that no test worker spends minutes making it while the other waits.

On a machine whose engine has no image yet, making it is ~110 s, mostly downloads and
debootstrap, little CPU: of CI's gate on 2 cores it was 137 s of one worker (the first
container test) and 69 s of the other, which waited on the image's lock (test_reuse's
container cell, 14 s with the image made). The tests still find the image by its recipe's
hash, as every build does; one that starts before it is made waits on the same lock
(images.py), so a run is the same with or without this, only shorter.

With no container engine at DOCKER_HOST or no CUDA cell for this host it does nothing: the
tests that need one say why themselves. Exit status: 0 made or found, 1 making it failed
(the message on stderr; the tests that need the image try again and fail with it)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import newest_local_pypi_cuda_cell  # noqa: E402

from kernel_matrix.containers.engine import connect  # noqa: E402
from kernel_matrix.containers.images import PipSetup, builder_for  # noqa: E402
from kernel_matrix.errors import EngineError  # noqa: E402


def log(line: str) -> None:
    print(f"prepare_images: {line}", flush=True)


def main() -> int:
    try:
        client = connect()
    except EngineError as exc:
        log(f"no image made: {exc}")
        return 0
    cell = newest_local_pypi_cuda_cell()
    if isinstance(cell, str):
        log(f"no image made: {cell}")
        return 0
    start = time.monotonic()
    try:
        tag = builder_for(client, cell, "offline", PipSetup.from_host(), log=log)
    except EngineError as exc:
        print(f"prepare_images: {exc}", file=sys.stderr)
        return 1
    log(f"{tag} ready after {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
