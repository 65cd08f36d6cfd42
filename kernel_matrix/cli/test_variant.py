"""`kernel-matrix test-variant`: the build workflow's test jobs' command, shipped in the
package so that a kernel's own repository runs it as kernel-matrix's does
(kernel_matrix/running/test_variant.py says what it does)."""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import typer

from kernel_matrix import PACKAGE_DIR, __version__
from kernel_matrix.running import test_variant as job

# Its own parser (running/test_variant.parse): the workflows' one form, each option once, before
# the variant; --help prints the module's description.
SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def test_variant(ctx: typer.Context) -> None:
    """Test a built variant against exactly its cell's torch, in an environment of its own:
    [--cpu-only] [--kernel NAME] [--build-dir DIR] VARIANT[,VARIANT...]."""
    if ctx.args[:1] in (["--help"], ["-h"]):  # as every other command's --help: whatever follows
        print(job.__doc__)
        raise typer.Exit(0)
    request = job.parse(ctx.args)
    if request is None:
        print(job.USAGE, file=sys.stderr)
        raise typer.Exit(2)
    # The cell's environment gets this very kernel-matrix, unless the caller names another (`.`).
    install = os.environ.get("KERNEL_MATRIX_INSTALL") or running_install()
    raise typer.Exit(job.run(request, install))


def running_install() -> str:
    """What pip installs as the kernel-matrix running this: where it was installed from
    (PEP 610's direct_url.json: a checkout or a wheel file that is still there, a git
    commit), else this version from the package index (a release)."""
    distribution = _running_distribution()
    try:
        text = distribution.read_text("direct_url.json") if distribution else None
        origin = json.loads(text) if text else {}
    except ValueError:
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


def _running_distribution() -> metadata.Distribution | None:
    """The installed distribution this very package came from, found from PACKAGE_DIR, never
    by name on sys.path: `python -m` puts the current folder (a kernel's repository, a pull
    request's files) first there, and a `kernel_matrix-*.dist-info` in it would name what the
    cell's environment installs. Beside the package: a wheel, git or folder install; elsewhere
    on sys.path, only an editable install whose direct_url.json is this package's own tree (a
    source tree's .egg-info, a build's by-product, records no install)."""
    source = PACKAGE_DIR.parent
    installed = sorted(source.glob("kernel_matrix-*.dist-info"))  # the name as installers write it
    if installed:
        return metadata.Distribution.at(installed[0])
    for distribution in metadata.distributions(name="kernel-matrix"):
        if _editable_tree(distribution) == source:
            return distribution
    return None


def _editable_tree(distribution: metadata.Distribution) -> Path | None:
    """The folder an editable install (PEP 610's dir_info.editable) points at."""
    try:
        origin = json.loads(distribution.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    url = origin.get("url") if isinstance(origin, dict) else None
    info = origin.get("dir_info") if isinstance(origin, dict) else None
    if not (isinstance(info, dict) and info.get("editable") is True and isinstance(url, str)):
        return None
    return Path(unquote(urlparse(url).path)).resolve() if url.startswith("file://") else None
