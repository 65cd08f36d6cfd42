"""`kernel-matrix test-variant`: the build workflow's test jobs' command, shipped in the
package so that a kernel's own repository runs it as kernel-matrix's does
(kernel_matrix/scripts/test-variant says what it does)."""

from __future__ import annotations

import json
import os
import subprocess
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import typer

from kernel_matrix import PACKAGE_DIR, __version__

SCRIPT = PACKAGE_DIR / "scripts" / "test-variant"
SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def test_variant(ctx: typer.Context) -> None:
    """Test a built variant against exactly its cell's torch, in an environment of its own:
    [--cpu-only] [--kernel NAME] VARIANT (from the folder holding build/)."""
    # The cell's environment gets this very kernel-matrix, unless the caller names another (`.`).
    env = {"KERNEL_MATRIX_INSTALL": running_install(), **os.environ}
    raise typer.Exit(subprocess.run(["bash", str(SCRIPT), *ctx.args], env=env, check=False).returncode)


def running_install() -> str:
    """What pip installs as the kernel-matrix running this: where it was installed from
    (PEP 610's direct_url.json: a checkout or a wheel file that is still there, a git
    commit), else this version from the package index (a release)."""
    try:
        text = metadata.distribution("kernel-matrix").read_text("direct_url.json")
        origin = json.loads(text) if text else {}
    except (metadata.PackageNotFoundError, ValueError):
        origin = {}
    url = origin.get("url") if isinstance(origin, dict) else None
    if isinstance(url, str) and url.startswith("file://"):
        path = Path(unquote(urlparse(url).path))
        if path.exists():
            return str(path)
    vcs = origin.get("vcs_info") if isinstance(origin, dict) else None
    if isinstance(url, str) and isinstance(vcs, dict) and vcs.get("vcs") == "git" and vcs.get("commit_id"):
        return f"git+{url}@{vcs['commit_id']}"
    return f"kernel-matrix=={__version__}"
