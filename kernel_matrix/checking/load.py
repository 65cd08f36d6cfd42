"""Load a variant just built with the real `kernels` loader, before it replaces the
built one: kernel-builder's get-kernel-check (nix-builder/pkgs/get-kernel-check),
which fails a build whose kernel does not import. Build and ABI check pass a library
that references a symbol no source defines, or a package without __init__.py; only
loading it shows that.

Loading runs the kernel's own Python, as kernel-builder's check does: in a child process
of the build's interpreter with a HOME of its own (an empty temporary folder: no Hub token
file, no caches), an environment of the variables a loader needs and none other (no
HF_TOKEN or other secret), the Hub offline, no GPU, in a process group of its own that is
ended with it. That keeps the token out of what a well-meaning kernel reads; it is no
sandbox: the child runs as this user (it could read /proc and this user's files, and a
process that leaves the group outlives it), as a native build's compiles and `test` do.
A kernel that is not trusted is built in containers (--variant, --profile).
Builds in a cell's container are not loaded there (the builder image has no `kernels`,
and keeps only the CUDA libraries' headers): the workflow's test jobs load them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from kernel_matrix.checking import untouched
from kernel_matrix.checking.confine import writes_confined_to
from kernel_matrix.checking.scrubbed_env import scrubbed_environment
from kernel_matrix.errors import BuildError
from kernel_matrix.hostfiles import write_file
from kernel_matrix.inert import printable
from kernel_matrix.layout import METADATA

LOAD_SECONDS = 300
# The most of the import's output kept in the load log, and of the exception's line shown.
LOG_BYTES = 1024 * 1024
MESSAGE_CHARS = 500
# What the child inherits: where programs and libraries are found, the locale, and the
# interpreter's own search path where the caller set one. Nothing else (no token, no key).
INHERITED = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CUDA_HOME", "CUDA_PATH", "LANG", "LC_ALL")
# The child writes its verdict to the file argv[4] names: "skip: <why>" where the loader
# cannot be asked here, "error: <exception>" where the kernel does not load, "ok".
# The variant is linked under its own name into a folder of its own: get_local_kernel
# finds it by that name.
_LOAD = """
import inspect, pathlib, sys, traceback
variant, name, backend, verdict = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], pathlib.Path(sys.argv[4])
def say(text):
    verdict.write_text(text)
    raise SystemExit(0)
try:
    import torch
except ImportError:
    say("skip: torch is not installed in " + sys.executable)
try:
    import kernels
except ImportError:
    say("skip: kernels is not installed in " + sys.executable)
if "backend" not in inspect.signature(kernels.get_local_kernel).parameters:
    say("skip: kernels " + getattr(kernels, "__version__", "?") + " in " + sys.executable + " is older than 0.14")
own = "cuda" if torch.version.cuda else "rocm" if getattr(torch.version, "hip", None) else "cpu"
if backend not in ("cpu", own):
    say(f"skip: torch {torch.__version__} here loads {'cpu' if own == 'cpu' else own + ' and cpu'} kernels only")
link = pathlib.Path(verdict.parent, "variant", name)
link.parent.mkdir()
link.symlink_to(variant, target_is_directory=True)
try:
    kernels.get_local_kernel(link.parent, backend=backend)
except Exception as exc:
    traceback.print_exc()  # into the load log
    first = (str(exc).strip().splitlines() or [""])[0].replace(str(link), name)
    if isinstance(exc, ImportError) and "requires Python dependency" in first:  # python-depends not here
        say("skip: " + first)
    say(f"error: {type(exc).__name__}: {first}")
say("ok")
"""


def load_check(variant_dir: Path, name: str, *, python: str, backend: str, log: Path | None = None) -> str | None:
    """Load variant_dir (staged or final) as the variant `name` for `backend` with
    `python`'s `kernels`. Returns why it was not checked (a note), None when it loaded;
    BuildError with the loader's exception when it does not load (what the import printed
    goes to `log` then, where given)."""
    metadata = json.loads((variant_dir / METADATA).read_text())
    if isinstance(metadata, dict) and metadata.get("kernel-depends"):
        return "its kernel-depends come from the Hub, which the check does not reach"
    # An absolute interpreter: the child starts in its empty HOME, where a relative one is not.
    python = os.path.abspath(shutil.which(python) or python)
    with tempfile.TemporaryDirectory(prefix="kernel-matrix-load-", ignore_cleanup_errors=True) as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        verdict, output = Path(scratch) / "verdict", Path(scratch) / "output"
        # The names it inherits, scrubbed as the kernel's suite's environment is (scrubbed_env).
        env = scrubbed_environment(home, inherit=INHERITED)
        env |= {
            "PYTHONDONTWRITEBYTECODE": "1",  # the staged variant is what is published: no __pycache__
            # No GPU, as in kernel-builder's build sandbox: the library is loaded, and the loader's
            # check of the archs against this machine's GPU (a build for another GPU) is not made.
            "CUDA_VISIBLE_DEVICES": "",
            "HIP_VISIBLE_DEVICES": "",
        }
        argv = [python, "-c", _LOAD, str(variant_dir.resolve()), name, backend, str(verdict)]
        before = untouched.snapshot(variant_dir)
        try:
            # It writes its verdict into scratch, and nowhere else but the variant, where a write
            # is named below (confine.py; unconfined, and silent about it, where Linux cannot).
            with output.open("wb") as sink, writes_confined_to([Path(scratch), variant_dir]) as confinement:
                child = subprocess.Popen(
                    argv,
                    cwd=home,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=sink,
                    start_new_session=True,
                    preexec_fn=confinement.preexec_fn,
                )
                try:
                    code = child.wait(timeout=LOAD_SECONDS)
                except subprocess.TimeoutExpired:
                    code = None
                finally:
                    # Its process group: whatever the kernel's import started ends with the check.
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
        except (OSError, subprocess.SubprocessError) as exc:  # SubprocessError: its confinement failed
            return f"{python} did not start ({getattr(exc, 'strerror', None) or exc})"
        # The import may not write into the variant: what it wrote would be published, and the
        # loader (>= 0.18) refuses every later load of files that no longer match the digest.
        wrote = untouched.written(variant_dir, before, f"importing {name}")
        if wrote:
            raise BuildError(wrote)
        said = _head(verdict, MESSAGE_CHARS)
        failed = code is None or not (said == "ok" or said.startswith("skip: "))
        if failed and log is not None:  # what the import printed: its last MiB
            with output.open("rb") as printed:
                printed.seek(max(0, output.stat().st_size - LOG_BYTES))
                write_file(log, printed.read(LOG_BYTES))
    where = f" (full output: {log})" if log is not None else ""
    if code is None:
        raise BuildError(f"{name}: loading it with kernels.get_local_kernel took over {LOAD_SECONDS} s{where}")
    if said.startswith("skip: "):
        return printable(said.removeprefix("skip: "))
    if said != "ok":
        why = said.removeprefix("error: ") if said.startswith("error: ") else f"the loader's process ended ({code})"
        raise BuildError(
            f"{name}: built, but kernels.get_local_kernel does not load it (kernel-builder's get-kernel-check "
            f"fails such a build): {printable(why)}{where}"
        )
    return None


def _head(path: Path, chars: int) -> str:
    """The first chars of a file the child may have written (empty if it did not)."""
    try:
        with path.open("rb") as stream:
            return stream.read(chars * 4).decode(errors="replace")[:chars]
    except OSError:
        return ""
