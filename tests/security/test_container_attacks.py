"""Attacks from issue 12 on a real engine: a kernel whose build.toml runs a
script in the build container (`-wrapper`, a compiler flag kernel-builder
accepts) to plant links to host files in the container's output, or to reach
beyond its container. The wrapper fails the compile at once, so each attack
costs seconds, not a build."""

import os

import pytest
from conftest import container_build_cli

from kernel_matrix.containers.engine import PIDS_LIMIT, UNPRIVILEGED
from kernel_matrix.planning.resources import MEMORY_PER_COMPILE

pytestmark = pytest.mark.build


def hostile_kernel(kernel_copy, script: str):
    """The kernel, with every compile run through /src/w.sh (mode 755: the build's user reads it)."""
    wrapper = kernel_copy / "w.sh"
    wrapper.write_text("#!/bin/sh\n" + script)
    wrapper.chmod(0o755)
    toml = kernel_copy / "build.toml"
    # Every section's C++ flags (the CUDA section compiles the CPU sources too).
    text = toml.read_text()
    assert text.count('cxx-flags = ["-ffp-contract=off"]') == 2
    toml.write_text(text.replace('cxx-flags = ["-ffp-contract=off"]', 'cxx-flags = ["-wrapper", "/src/w.sh"]'))
    return kernel_copy


def build(cell, kernel, build_dir, *extra):
    # --cuda-capabilities: the .cu compiling beside the failing C++ file, one architecture: seconds.
    return container_build_cli(cell, build_dir, kernel, "--cuda-capabilities", "9.0", *extra)


def test_links_to_host_files_never_leave_the_container(local_cuda_cell, kernel_copy, tmp_path):
    cell = local_cuda_cell
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST SECRET 8d1f")
    kernel = hostile_kernel(
        kernel_copy,
        f"mkdir -p /out/logs /out/{cell.name}\n"
        f"ln -sf {secret} /out/logs/stolen.log\n"
        f"ln -sf {secret} /out/{cell.name}/stolen.py\n"
        "exit 1\n",
    )
    build_dir = tmp_path / "build"
    result = build(cell, kernel, build_dir)
    assert result.returncode == 5, result.stdout + result.stderr
    # The cell's row says why (summary.md: the screen's table may fold the long line).
    assert "a symbolic link: refused" in (build_dir / "summary.md").read_text()
    assert result.stderr.strip().splitlines()[-1] == f"error: 1 of 1 cells failed: {cell.name}"
    for path in build_dir.rglob("*"):
        assert not path.is_symlink(), path
        assert not path.is_file() or "HOST SECRET" not in path.read_text(errors="replace"), path
    assert not (build_dir / cell.name).exists()


def test_the_build_runs_unprivileged_read_only_and_limited(local_cuda_cell, kernel_copy, tmp_path):
    cell = local_cuda_cell
    kernel = hostile_kernel(
        kernel_copy,
        "mkdir -p /out/logs\n"
        # A log of the cell's own name comes back (only those do: see the next test).
        f"exec >> /out/logs/{cell.name}.probe.txt 2>&1\n"
        'echo "uid=$(id -u)"\n'
        "touch /cache/0/poison 2>/dev/null && echo cache=written || echo cache=refused\n"
        "touch /usr/poison 2>/dev/null && echo root=written || echo root=refused\n"
        "touch /tmp/scratch && echo tmp=written || echo tmp=refused\n"
        'echo "pids=$(cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null | head -1)"\n'
        'echo "memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null)"\n'
        "exit 1\n",
    )
    build_dir = tmp_path / "build"
    result = build(cell, kernel, build_dir)
    assert result.returncode == 5, result.stdout + result.stderr
    probe = dict(
        line.split("=", 1)
        for line in (build_dir / "logs" / f"{cell.name}.probe.txt").read_text().splitlines()
        if "=" in line
    )
    expected_uid = UNPRIVILEGED[0] if os.getuid() == 0 else os.getuid()
    assert probe["uid"] == str(expected_uid)
    assert probe["cache"] == "refused" and probe["root"] == "refused" and probe["tmp"] == "written"
    assert probe["pids"] == str(PIDS_LIMIT)
    # A limit (the available memory when one cell builds), not cgroup v1's "unlimited" (a huge number).
    assert 2 * MEMORY_PER_COMPILE <= int(probe["memory"]) <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert not (build_dir / ".cache" / "objects" / "poison").exists()


def test_a_cell_cannot_write_another_cells_logs(local_cuda_cell, kernel_copy, tmp_path):
    build_dir = tmp_path / "build"
    other = build_dir / "logs" / "torch211-cxx11-cu130-x86_64-linux.build.json"
    other.parent.mkdir(parents=True)
    other.write_text('{"seconds": 1}')
    kernel = hostile_kernel(
        kernel_copy,
        "mkdir -p /out/logs\n"
        "echo forged > /out/logs/torch211-cxx11-cu130-x86_64-linux.build.json\n"
        "echo forged > /out/logs/summary.md\n"
        "exit 1\n",
    )
    assert build(local_cuda_cell, kernel, build_dir).returncode == 5
    assert other.read_text() == '{"seconds": 1}' and not (build_dir / "logs" / "summary.md").exists()


def test_a_build_that_hangs_is_stopped_at_its_time_limit(local_cuda_cell, kernel_copy, tmp_path, engine):
    """Issue 23: a FIFO at a cell's own log path hung the cell forever (no cell had a time limit).
    Here the wrapper blocks on a FIFO nobody writes; --cell-timeout ends the container."""
    cell = local_cuda_cell
    kernel = hostile_kernel(kernel_copy, "mkfifo /tmp/block; cat /tmp/block\n")
    build_dir = tmp_path / "build"
    result = build(cell, kernel, build_dir, "--cell-timeout", "5")
    assert result.returncode == 5, result.stdout + result.stderr
    assert f"{cell.name}: stopped after 5 s (--cell-timeout)" in (build_dir / "summary.md").read_text()
    ours = [
        c
        for c in engine.containers.list(all=True, filters={"label": "kernel-matrix"}, ignore_removed=True)
        if any(m.get("Source", "").startswith(str(tmp_path)) for m in c.attrs.get("Mounts", []))
    ]
    assert not ours  # the killed container is removed too
    assert not (build_dir / cell.name).exists()
