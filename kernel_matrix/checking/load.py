"""Load a variant just built with the real `kernels` loader, before it replaces the
built one: kernel-builder's get-kernel-check (nix-builder/pkgs/get-kernel-check),
which fails a build whose kernel does not import. Build and ABI check pass a library
that references a symbol no source defines, or a package without __init__.py; only
loading it shows that.

The loader imports the kernel's own Python, so it runs in a child process of the
build's interpreter with the Hub offline and without the Hub token. Builds in a cell's
container are not loaded there (the builder image has no `kernels`, and keeps only the
CUDA libraries' headers): the workflow's test jobs load them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from kernel_matrix.errors import BuildError
from kernel_matrix.layout import METADATA

# What a Hub token may be named in the environment: never passed to the kernel's code.
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_TOKEN")
LOAD_SECONDS = 300
# Prints "skip: <why>" where the loader cannot be asked (not installed, a backend this
# torch does not load), raises where the kernel does not load. The variant is linked
# under its own name into a folder of its own: get_local_kernel finds it by that name.
_LOAD = """
import pathlib, sys, tempfile
try:
    import kernels
except ImportError:
    print("skip: kernels is not installed in " + sys.executable)
    raise SystemExit(0)
import torch
variant, name, backend = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
own = "cuda" if torch.version.cuda else "rocm" if getattr(torch.version, "hip", None) else "cpu"
if backend not in ("cpu", own):
    print(f"skip: torch {torch.__version__} here loads {'cpu' if own == 'cpu' else own + ' and cpu'} kernels only")
    raise SystemExit(0)
with tempfile.TemporaryDirectory() as folder:
    (pathlib.Path(folder) / name).symlink_to(variant, target_is_directory=True)
    try:
        kernels.get_local_kernel(pathlib.Path(folder), backend=backend)
    except Exception as exc:
        link = str(pathlib.Path(folder) / name)
        first = (str(exc).strip().splitlines() or [""])[0].replace(link, name)
        if isinstance(exc, ImportError) and "requires Python dependency" in first:  # python-depends not here
            print("skip: " + first)
            raise SystemExit(0)
        print(f"error: {type(exc).__name__}: {first}")
        raise SystemExit(3)
"""


def load_check(variant_dir: Path, name: str, *, python: str, backend: str) -> str | None:
    """Load variant_dir (staged or final) as the variant `name` for `backend` with
    `python`'s `kernels`. Returns why it was not checked (a note), None when it loaded;
    BuildError with the loader's last line when it does not load."""
    metadata = json.loads((variant_dir / METADATA).read_text())
    if isinstance(metadata, dict) and metadata.get("kernel-depends"):
        return "its kernel-depends come from the Hub, which the check does not reach"
    env = {key: value for key, value in os.environ.items() if key not in TOKEN_VARIABLES}
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the staged variant is what is published: no __pycache__
    # No GPU, as in kernel-builder's build sandbox: the library is loaded, and the loader's
    # check of the archs against this machine's GPU (a build for another GPU) is not made.
    env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = ""
    try:
        result = subprocess.run(
            [python, "-c", _LOAD, str(variant_dir.resolve()), name, backend],
            capture_output=True,
            text=True,
            env=env,
            timeout=LOAD_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BuildError(f"{name}: loading it with kernels.get_local_kernel took over {LOAD_SECONDS} s") from None
    except OSError as exc:
        return f"{python} did not start ({exc.strerror or exc})"
    said = result.stdout.strip().splitlines()
    if result.returncode != 0:
        # The loader's exception as the child printed it, else the last line of a crash.
        lines = [line[len("error: ") :] for line in said if line.startswith("error: ")]
        lines = lines or [line.strip() for line in result.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit status {result.returncode}"
        raise BuildError(
            f"{name}: built, but kernels.get_local_kernel does not load it (kernel-builder's get-kernel-check "
            f"fails such a build): {last}"
        )
    return said[-1].removeprefix("skip: ") if said and said[-1].startswith("skip: ") else None
