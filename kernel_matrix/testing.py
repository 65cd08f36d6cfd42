"""Run the kernel's own test suite against a built variant, as users get it:
loaded by the real `kernels` loader in a fresh Python process, never by
importing the kernel's source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .errors import ConfigError, TestFailure
from .variant_dir import METADATA

# The kernel's conftest.py reads the variant to load from here...
VARIANT_ENV = "KERNEL_MATRIX_VARIANT_DIR"
# ...or the installed package (a wheel's) to import.
INSTALLED_ENV = "KERNEL_MATRIX_INSTALLED_PACKAGE"


def resolve_variant_dir(target: str, build_dir: Path) -> Path:
    """A variant directory, given its path or its name under build_dir."""
    path = Path(target)
    candidate = path if path.is_dir() else build_dir / target
    if not (candidate / METADATA).is_file():
        raise ConfigError(
            f"{target}: not a built variant (no {candidate / METADATA}); "
            f"run `kernel-matrix build` first or pass a variant directory"
        )
    try:
        json.loads((candidate / METADATA).read_text())
    except ValueError as exc:
        raise ConfigError(f"{candidate / METADATA}: invalid JSON: {exc}") from None
    return candidate.resolve()


def run_installed_tests(
    package: str, tests_dir: Path, *, python: str | None = None, pytest_args: list[str] = ()
) -> None:
    """Run tests_dir against `package` as installed in python's environment (a wheel)."""
    _run_pytest({INSTALLED_ENV: package}, package, tests_dir, python=python, pytest_args=pytest_args)


def run_kernel_tests(
    variant_dir: Path, tests_dir: Path, *, python: str | None = None, pytest_args: list[str] = ()
) -> None:
    """Run tests_dir with pytest in a fresh interpreter; raise TestFailure if it fails."""
    _run_pytest({VARIANT_ENV: str(variant_dir)}, variant_dir.name, tests_dir, python=python, pytest_args=pytest_args)


def _run_pytest(
    selection: dict[str, str], name: str, tests_dir: Path, *, python: str | None, pytest_args: list[str]
) -> None:
    env = {**{k: v for k, v in os.environ.items() if k not in (VARIANT_ENV, INSTALLED_ENV)}, **selection}
    if python and os.sep in python:
        python = str(Path(python).absolute())  # the tests run in another folder
    argv = [
        python or sys.executable,
        "-m",
        "pytest",
        str(tests_dir.resolve()),
        "-p",
        "no:cacheprovider",
        f"--rootdir={tests_dir.resolve()}",
        *pytest_args,
    ]
    # cwd is the tests folder: nothing of the service or the kernel's sources is importable.
    try:
        code = subprocess.run(argv, cwd=tests_dir, env=env, check=False).returncode
    except OSError as exc:
        raise ConfigError(f"--python {python}: cannot run it: {exc.strerror}") from None
    if code != 0:
        raise TestFailure(f"the test suite of {name} failed (pytest exit {code})")
