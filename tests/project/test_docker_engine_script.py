"""scripts/docker-engine, the private container engine .ci/run starts and releases: what it does
without an engine's images, against a stand-in `docker` (no engine is needed)."""

import os
import subprocess

from conftest import REPO

# `docker version` answers; `docker image ls` lists no image; anything else is not expected here.
FAKE_DOCKER = """#!/bin/sh
case "$1" in
version) echo 27.0.0 ;;
image) [ "$2" = ls ] && exit 0; exit 64 ;;
*) exit 64 ;;
esac
"""


def test_prune_with_no_image_succeeds_so_that_release_goes_on_to_stop_the_engine(tmp_path):
    """release is prune, then stop: prune's `grep -v '<none>'` found nothing to pass on where the
    engine held no image, and under pipefail that ended the script before stop (found when a
    session's engine, its images deleted, kept running after release)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env["KERNEL_MATRIX_ENGINE_DIR"] = str(tmp_path / "engine")
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "docker-engine"), "prune"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
