"""Test one built variant against exactly the torch its matrix cell names: what the build
workflow's test jobs run (`kernel-matrix test-variant`), and what a developer runs after
`kernel-matrix build --variant VARIANT` (or after downloading the variant's artifact into the
build folder), from the folder holding it (the kernel's repository).

    kernel-matrix test-variant [--cpu-only] [--kernel NAME] [--build-dir DIR] VARIANT[,VARIANT...]

    test-gpu (self-hosted GPU runner)   kernel-matrix test-variant --kernel NAME VARIANT
    test-cpu (GitHub-hosted runner)     kernel-matrix test-variant --cpu-only --kernel NAME VARIANT

--kernel picks the kernel in a matrix of several (they share variant names). --build-dir is
the build folder (default build). VARIANT,VARIANT,... (a build workflow job's batch of one
kernel's cells, where a matrix has more cells than GitHub's 256 jobs) tests each in turn, every
one even after a failure, and fails if any failed, with the exit code their failures share
(none of them built: 3), else 6 (docs/exit-codes.md); each one's environment (unless
TEST_VARIANT_VENV names one for all) is removed once it is tested, as a CI runner's disk holds
few torch installs.

It makes a virtual environment for the cell (reused on the next run), installs kernel-matrix
($KERNEL_MATRIX_INSTALL: a pip requirement, the running kernel-matrix by default, `.` in
kernel-matrix's own repository), the cell's torch (`torch_spec` from `torch_index`, as
`kernel-matrix matrix --json --variant VARIANT` gives them; "pypi" is pip's default index), the
variant's python-depends and what the kernel's tests import, then runs `kernel-matrix test` on
the variant's folder, all with the environment's own kernel-matrix.

Without --cpu-only a CUDA variant needs a GPU that torch can use, here and in the suite (`kernel-
matrix test --require-gpu`): without one this fails, since the suite would silently skip its CUDA
cases. With --cpu-only every GPU is hidden
(CUDA_VISIBLE_DEVICES=), so the suite runs its CPU cases and skips its CUDA ones, the same on a
laptop, a GitHub-hosted runner or a GPU machine; a CUDA variant of a kernel without cpu in its
backends is loaded by the kernels loader instead, its suite left to a GPU. A CUDA variant still
gets its cell's CUDA build of torch either way: its .so links torch's CUDA libraries, which load
without a GPU.

PYTHON (default python3) makes the environment; TEST_VARIANT_VENV (default
<build-dir>/.cache/test-variant/[KERNEL-]VARIANT, removed by `kernel-matrix clean`) is where it
goes. KERNEL_MATRIX_FILE (default build_matrix.yaml, or the kernel's embedded default) is the
matrix."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_matrix.errors import ExitCode, failure_code, shared_exit_code
from kernel_matrix.layout import DEFAULT_BUILD_DIR, BuildDir, is_built

USAGE = "usage: kernel-matrix test-variant [--cpu-only] [--kernel NAME] [--build-dir DIR] VARIANT[,VARIANT...]"
# A variant's and a kernel's name: one folder name, so that neither the variant's folder nor its
# environment (which a batch removes once tested) is ever a path elsewhere (`../x`).
_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


@dataclass(frozen=True)
class Request:
    variants: tuple[str, ...]  # one, or a batch
    cpu_only: bool = False
    kernel: str | None = None
    build_dir: Path = DEFAULT_BUILD_DIR


class Refused(Exception):
    """One variant's test stops here: the line to print and its exit code."""

    def __init__(self, line: str, code: ExitCode) -> None:  # line: printed as "error: <line>"
        super().__init__(line)
        self.code = code


def parse(argv: Sequence[str]) -> Request | None:
    """The command line as the workflows write it (each option at most once, before the one
    VARIANT argument); None where it is not that: a usage error."""
    options: dict[str, str | bool] = {}
    rest = list(argv)
    while len(rest) > 1:
        flag = rest.pop(0)
        if flag == "--cpu-only" and flag not in options:
            options[flag] = True
        elif flag in ("--kernel", "--build-dir") and flag not in options and len(rest) > 1 and rest[0]:
            options[flag] = rest.pop(0)
        else:
            return None
    if len(rest) != 1 or not rest[0] or rest[0].startswith("-"):
        return None
    kernel, build_dir = options.get("--kernel"), options.get("--build-dir", str(DEFAULT_BUILD_DIR))
    return Request(
        variants=tuple(rest[0].split(",")) if "," in rest[0] else (rest[0],),
        cpu_only=options.get("--cpu-only") is True,
        kernel=kernel if isinstance(kernel, str) else None,
        build_dir=Path(str(build_dir)),
    )


def run(request: Request, install: str) -> int:
    """Test the request's variant, or each of its batch in turn; the exit code."""
    if len(request.variants) == 1:
        return _one(request, request.variants[0], install)
    failed: list[tuple[str, ExitCode]] = []
    for variant in request.variants:
        print(f"== test-variant {variant}", file=sys.stderr, flush=True)
        code = _one(request, variant, install)
        if code != ExitCode.OK:
            failed.append((variant, failure_code(code) or ExitCode.FAILURE))
        name = _environment_name(request.kernel, variant)
        if not os.environ.get("TEST_VARIANT_VENV") and _FOLDER_NAME.fullmatch(name):
            shutil.rmtree(BuildDir(request.build_dir).test_environment(name), ignore_errors=True)
    if failed:
        names = " ".join(variant for variant, _ in failed)
        print(f"error: {len(failed)} of {len(request.variants)} variants failed: {names}", file=sys.stderr)
        return int(shared_exit_code((code for _, code in failed), ExitCode.TEST))
    print(f"all {len(request.variants)} variants passed", file=sys.stderr)
    return int(ExitCode.OK)


def _one(request: Request, variant: str, install: str) -> int:
    if not variant:  # an empty name in a batch's list
        print(USAGE, file=sys.stderr)
        return int(ExitCode.CONFIG)
    try:
        return _test(request, variant, install)
    except Refused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return int(refused.code)
    except Exception as exc:  # a bug: one line, and a batch goes on with its other variants
        print(f"error: testing {variant} failed unexpectedly: {type(exc).__name__}: {exc}", file=sys.stderr)
        return int(ExitCode.FAILURE)


def _environment_name(kernel: str | None, variant: str) -> str:
    return f"{kernel}-{variant}" if kernel else variant


def _test(request: Request, variant: str, install: str) -> int:
    # Names become folders (the variant's, its environment's): one folder name each, never a path.
    for what, name in (("variant", variant), ("kernel", request.kernel)):
        if name is not None and not _FOLDER_NAME.fullmatch(name):
            raise Refused(f"{what} {name!r}: not a {what} name (one folder name)", ExitCode.CONFIG)
    root = BuildDir(request.build_dir)
    # <build-dir>/VARIANT (a matrix of one kernel) or <build-dir>/KERNEL/VARIANT (of several):
    # checked here before any environment is made, and at the matrix's own path below.
    mine = BuildDir(request.build_dir, request.kernel)
    if not (root.is_built(variant) or (request.kernel and mine.is_built(variant))):
        raise Refused(_not_built(mine.variant(variant), variant), ExitCode.NOTHING_TO_DO)
    python = os.environ.get("PYTHON") or "python3"
    if _status([python, "-c", "import sys; sys.exit(sys.version_info < (3, 10))"]) != 0:
        raise Refused(f"kernel-matrix needs Python >= 3.10 ({python} is {_version(python)})", ExitCode.TOOLCHAIN)

    venv = Path(
        os.environ.get("TEST_VARIANT_VENV") or root.test_environment(_environment_name(request.kernel, variant))
    )
    env_python, env_kernel_matrix = str(venv / "bin" / "python"), str(venv / "bin" / "kernel-matrix")
    if not os.access(env_python, os.X_OK):
        _say(f"creating {venv}")
        if _status([python, "-m", "venv", str(venv)]) != 0:
            raise Refused(f"{python} -m venv {venv} failed (above)", ExitCode.TOOLCHAIN)
    _say(f"installing {install} into {venv}")
    _pip(env_python, install)

    kernel_option = ["--kernel", request.kernel] if request.kernel else []
    cell = _cell(env_kernel_matrix, variant, kernel_option)
    try:
        variant_dir = root.planned(cell["path"])
    except ValueError as exc:
        raise Refused(f"kernel-matrix matrix --variant {variant}: {exc}", ExitCode.FAILURE) from None
    if not is_built(variant_dir):
        raise Refused(_not_built(variant_dir, variant), ExitCode.NOTHING_TO_DO)
    # The cell's torch may need a newer Python than the environment's (torch 2.15: >= 3.11): one line, not pip's.
    if _status([env_python, "-m", "kernel_matrix.planning.torch_wheels", cell["torch_spec"]]) != 0:
        raise Refused(f"the environment's Python cannot install {cell['torch_spec']} (above)", ExitCode.TOOLCHAIN)
    if cell["torch_index"] == "pypi":
        _say(f"installing {cell['torch_spec']} from the default index")
        _pip(env_python, cell["torch_spec"])
    else:
        _say(f"installing {cell['torch_spec']} from {cell['torch_index']}")
        _pip(env_python, "--index-url", cell["torch_index"], cell["torch_spec"])
    # What kernel/tests imports besides torch and kernels (installed with kernel-matrix).
    _pip(env_python, "pytest", "numpy")
    # The variant's python-depends (einops, nvidia-cutlass-dsl, ...): the loader refuses it
    # without them. Only the names the kernels loader knows map to a package.
    listed = _run([env_python, "-m", "kernel_matrix.checking.python_depends", str(variant_dir), cell["backend"]])
    if listed.returncode != 0:
        raise Refused(f"{variant_dir}: its python-depends (above)", _code(listed.returncode))
    depends = listed.stdout.split()
    if depends:
        _say(f"installing its python-depends: {' '.join(depends)}")
        _pip(env_python, *depends)

    test_env = dict(os.environ)
    if request.cpu_only:
        _say("--cpu-only: GPUs hidden (CUDA_VISIBLE_DEVICES=), the suite's CUDA cases skip")
        test_env["CUDA_VISIBLE_DEVICES"] = ""
    # The torch installed must be the cell's build (exactly its CUDA version, or a CPU build),
    # and (unless --cpu-only) a CUDA cell must see a GPU: kernel-matrix's torch_cuda check, the
    # one the builder images and native builds make.
    gpu = ["--gpu"] if cell["backend"] == "cuda" and not request.cpu_only else []
    checked = [env_python, "-m", "kernel_matrix.planning.torch_cuda", cell["cuda"] or "none", "--exact", *gpu]
    if _status(checked, env=test_env) != 0:
        raise Refused(f"{venv}'s torch cannot test {variant} (above)", ExitCode.TOOLCHAIN)
    # The GPU job's suite must see the GPU too (its CUDA cases run, or the job fails), as the check above did.
    required = ["--require-gpu"] if gpu else []
    tested = _run([env_kernel_matrix, "test", str(variant_dir), *kernel_option, *required], env=test_env, output=False)
    # As bash's exec gave it: a child killed by signal N is 128 + N.
    return 128 - tested.returncode if tested.returncode < 0 else tested.returncode


def _cell(kernel_matrix: str, variant: str, kernel_option: list[str]) -> dict[str, Any]:
    """The variant's cell as the environment's kernel-matrix plans it."""
    planned = _run([kernel_matrix, "matrix", "--json", "--variant", variant, *kernel_option])
    if planned.returncode != 0:
        raise Refused(f"kernel-matrix matrix --variant {variant} failed (above)", _code(planned.returncode))
    try:
        cells = json.loads(planned.stdout)["include"]
    except (ValueError, KeyError, TypeError):
        raise Refused(
            f"kernel-matrix matrix --json printed no matrix: {planned.stdout[:200]!r}", ExitCode.FAILURE
        ) from None
    if not cells:
        raise Refused(f"kernel-matrix matrix --variant {variant} planned no cell", ExitCode.FAILURE)
    if len(cells) != 1:
        raise Refused("several kernels have this variant: name one with --kernel", ExitCode.CONFIG)
    cell: dict[str, Any] = cells[0]
    # What this reads of it, from the environment's kernel-matrix (KERNEL_MATRIX_INSTALL: maybe
    # another release than the one running this).
    fields = ("path", "backend", "torch_spec", "torch_index")
    if not isinstance(cell, dict) or not all(isinstance(cell.get(key), str) for key in fields):
        raise Refused(
            f"kernel-matrix matrix --json: a cell without {', '.join(fields)}: {cell!r:.200}", ExitCode.FAILURE
        )
    if not isinstance(cell.get("cuda"), str | None):
        raise Refused(f"kernel-matrix matrix --json: a cell whose cuda is {cell.get('cuda')!r:.50}", ExitCode.FAILURE)
    return cell


def _not_built(where: Path, variant: str) -> str:
    return (
        f"{where} is not a built variant (kernel-matrix build --variant {variant}, "
        "or download its artifact into the build folder)"
    )


def _pip(python: str, *args: str) -> None:
    argv = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    if _status(argv) != 0:
        raise Refused(f"pip could not install {' '.join(args)} (above)", ExitCode.TOOLCHAIN)


def _status(argv: list[str], env: dict[str, str] | None = None) -> int:
    try:
        return subprocess.run(argv, env=env, check=False).returncode
    except OSError as exc:  # no such program
        print(f"{argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127


def _run(argv: list[str], env: dict[str, str] | None = None, output: bool = True) -> subprocess.CompletedProcess[str]:
    """A child of the environment, its stdout captured (output); a program that is not there is
    the environment's failure, one line."""
    try:
        return subprocess.run(argv, env=env, stdout=subprocess.PIPE if output else None, text=True, check=False)
    except OSError as exc:
        raise Refused(f"{argv[0]}: {exc.strerror} (the environment is incomplete)", ExitCode.TOOLCHAIN) from None


def _version(python: str) -> str:
    try:
        shown = subprocess.run([python, "--version"], capture_output=True, text=True, check=False)
    except OSError:
        return "not there"
    return (shown.stdout + shown.stderr).strip() or f"exit {shown.returncode}"


def _code(status: int) -> ExitCode:
    """A kernel-matrix child's exit status as the code it means (a bug's 1 otherwise)."""
    return failure_code(status) or ExitCode.FAILURE


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
