"""`kernel-matrix test-variant`: the build workflow's test jobs' command, shipped in the
package so that a kernel's own repository runs it as kernel-matrix's does
(kernel_matrix/scripts/test-variant says what it does)."""

from __future__ import annotations

import os
import subprocess

import typer

from kernel_matrix import PACKAGE_DIR, __version__

SCRIPT = PACKAGE_DIR / "scripts" / "test-variant"
SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def test_variant(ctx: typer.Context) -> None:
    """Test a built variant against exactly its cell's torch, in an environment of its own:
    [--cpu-only] [--kernel NAME] VARIANT (from the folder holding build/)."""
    # The cell's environment gets this very release, unless the caller names another (`.`).
    env = {"KERNEL_MATRIX_INSTALL": f"kernel-matrix=={__version__}", **os.environ}
    raise typer.Exit(subprocess.run(["bash", str(SCRIPT), *ctx.args], env=env, check=False).returncode)
