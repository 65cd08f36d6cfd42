"""Exit codes keep their meaning where results are combined (issue 37): cells of a container
build, a worker's code inside its container, a cell of another CPU arch, wheels, a
test-variant batch, all by the one rule of errors.shared_exit_code, documented in
docs/exit-codes.md. (Kernels: tests/checking/test_suite_environment.py, two failing suites exit 6.)"""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import docker
import pytest
from conftest import KERNEL_DIR, REPO, kernel_matrix

from kernel_matrix.containers.container_output import OUTCOME, reported_failure
from kernel_matrix.errors import AbiError, BuildError, ExitCode, failure_code, shared_exit_code
from kernel_matrix.planning.matrix import load_matrix, select
from kernel_matrix.planning.variants import host_arch
from kernel_matrix.running import test_variant

MATRIX = REPO / "build_matrix.yaml"


def test_the_docs_table_names_every_exit_code():
    table = (REPO / "docs" / "exit-codes.md").read_text().split("## Several failures")[0]
    rows = re.findall(r"^\| (\d+) \| (\w+) \|", table, re.MULTILINE)
    assert [(int(code), name) for code, name in rows] == [(c.value, n) for n, c in ExitCode.__members__.items()]
    assert "(docs/exit-codes.md)" in (REPO / "README.md").read_text()  # the README links it


@pytest.mark.parametrize(
    ("codes", "mixed", "folded"),
    [
        ([ExitCode.TEST, ExitCode.TEST], ExitCode.BUILD, ExitCode.TEST),
        ([ExitCode.ABI, ExitCode.BUILD], ExitCode.BUILD, ExitCode.BUILD),
        ([ExitCode.NOTHING_TO_DO, ExitCode.TOOLCHAIN], ExitCode.TEST, ExitCode.TEST),
    ],
)
def test_several_failures_fold_to_the_code_they_share_else_the_commands(codes, mixed, folded):
    assert shared_exit_code(codes, mixed) is folded


@pytest.mark.parametrize("value", [0, 14, 137, -1, True, "7", 7.0, None, [7]])
def test_only_an_int_naming_a_failure_is_a_failure_code(value):
    assert failure_code(value) is None
    assert failure_code(7) is ExitCode.ABI


# --- a worker's code, inside its build container, reaches the host ------------------------------


def outcome_file(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "logs" / f"cell.{OUTCOME}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def test_the_workers_code_is_the_cells_where_its_exit_status_says_the_same(tmp_path):
    assert reported_failure(outcome_file(tmp_path, '{"exit_code": 7}\n'), 7) is ExitCode.ABI


@pytest.mark.parametrize(
    ("content", "status"),
    [
        ('{"exit_code": 0}', 7),  # never a success: the worker's exit status says it failed
        ('{"exit_code": 7}', 5),  # a code the worker did not exit with (the build wrote the file)
        ('{"exit_code": 7}', 137),  # killed
        ('{"exit_code": 99}', 99),  # no ExitCode
        ('{"exit_code": true}', 1),
        ('{"exit_code": "7"}', 7),
        ("[7]", 7),
        ("not json", 7),
        (b"\xff\xfe", 7),
        ("[" * 4000, 7),  # nested past the parser's depth
        ('{"exit_code": 7, "pad": "' + "x" * 5000 + '"}', 7),  # too big to be an outcome
        (None, 7),  # no outcome: the worker died before it wrote one
    ],
)
def test_an_outcome_the_host_cannot_believe_leaves_the_cell_a_build_failure(tmp_path, content, status):
    path = outcome_file(tmp_path, content) if content is not None else tmp_path / OUTCOME
    assert reported_failure(path, status) is ExitCode.BUILD


def test_an_outcome_that_is_a_link_or_fifo_is_not_read(tmp_path):
    target = outcome_file(tmp_path / "elsewhere", '{"exit_code": 7}')
    link = tmp_path / f"link.{OUTCOME}"
    link.symlink_to(target)
    fifo = tmp_path / f"fifo.{OUTCOME}"
    os.mkfifo(fifo)  # opened to read, it would block until a writer came: read without blocking, refused
    assert reported_failure(link, 7) is ExitCode.BUILD and reported_failure(fifo, 7) is ExitCode.BUILD


@pytest.mark.processes
def test_the_worker_writes_its_code_beside_its_logs(tmp_path):
    """The container's entry point, on this host: a request for a kernel folder that is not there is
    bad input (2), written as the outcome the host reads."""
    (tmp_path / "out").mkdir()  # the container's output folder, which the host makes
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps(
            {"kernel_dir": str(tmp_path / "none"), "out_dir": str(tmp_path / "out"), "variant": "v", "backend": "cpu"}
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "kernel_matrix.cli.worker", str(request)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == ExitCode.CONFIG, result.stderr
    written = tmp_path / "out" / "logs" / f"v.{OUTCOME}"
    assert json.loads(written.read_text()) == {"exit_code": 2}
    assert reported_failure(written, result.returncode) is ExitCode.CONFIG


def test_a_workers_code_in_a_container_is_the_hosts(local_cuda_cell, engine, tmp_path, monkeypatch):
    """`build` of a cell whose builder makes another variant (the torch 2.14 image for a torch 2.13
    cell): the worker refuses it as a toolchain failure (4), and so does the host, not 5."""
    from typer.testing import CliRunner

    from kernel_matrix.cli import app
    from kernel_matrix.containers import images

    image = images.builder_for(engine, local_cuda_cell, "offline", images.PipSetup.from_host(), log=lambda m: None)
    wrong = dataclasses.replace(local_cuda_cell.variant, torch="2.13").name
    assert select(load_matrix(MATRIX), variants=[wrong])  # a cell of the matrix, built in the wrong image
    monkeypatch.setattr(images, "builder_for", lambda *a, **kw: image)
    build_dir = tmp_path / "b"
    result = CliRunner().invoke(app, ["build", "--variant", wrong, "--build-dir", str(build_dir), "--image", "offline"])
    assert result.exception is not None and result.exception.exit_code == ExitCode.TOOLCHAIN, result.output
    assert f"makes {local_cuda_cell.name}, not the cell {wrong}" in (build_dir / "summary.md").read_text()


# --- a cell of another CPU arch -------------------------------------------------------------------


def fake_engine(monkeypatch):
    """No engine needed: the builder images are said to be there (pool asks their id)."""
    from kernel_matrix.containers import images
    from kernel_matrix.running import cells as cell_runner

    engine = SimpleNamespace(images=SimpleNamespace(get=lambda tag: SimpleNamespace(id="sha256:0")))
    monkeypatch.setattr(images, "builder_for", lambda *a, **kw: "builder")
    monkeypatch.setattr(cell_runner, "connect", lambda: engine)


@pytest.mark.processes
def test_cells_of_another_arch_are_bad_input_not_a_missing_engine(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from kernel_matrix.cli import app

    other = "aarch64" if host_arch() == "x86_64" else "x86_64"
    fake_engine(monkeypatch)
    build_dir = tmp_path / "b"
    argv = ["build", "--only", f"torch=2.14,arch={other}", "--build-dir", str(build_dir), "--image", "offline"]
    result = CliRunner().invoke(app, argv)
    assert result.exception is not None and result.exception.exit_code == ExitCode.CONFIG, result.output
    summary = (build_dir / "summary.md").read_text()
    assert f"cell cannot be built on this {host_arch()} host: build it on an {other} runner" in summary


# --- wheels ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("errors", "code"),
    [
        (["abi", "abi"], ExitCode.ABI),  # abi3audit refused every wheel
        (["docker", "docker"], ExitCode.ENGINE),
        (["abi", "build"], ExitCode.BUILD),  # mixed: the command's own
    ],
)
@pytest.mark.processes
def test_wheels_exit_with_the_code_their_failures_share(monkeypatch, tmp_path, errors, code):
    from typer.testing import CliRunner

    from kernel_matrix.cli import app
    from kernel_matrix.releasing import wheels

    cells = select(load_matrix(MATRIX), only="torch=2.14,arch=x86_64")[:2]
    raised = {
        "abi": AbiError("abi3audit rejects it"),
        "build": BuildError("no"),
        "docker": docker.errors.APIError("gone"),
    }

    def fake_wheel(cell, *args):
        raise raised[errors[[c.name for c in cells].index(cell.name)]]

    monkeypatch.setattr(wheels, "connect", lambda: SimpleNamespace())
    monkeypatch.setattr(wheels, "builder_for", lambda *a, **kw: "builder")
    monkeypatch.setattr(wheels, "build_wheel", fake_wheel)
    variants = [arg for cell in cells for arg in ("--variant", cell.name)]
    argv = ["wheels", *variants, "--kernel-dir", str(KERNEL_DIR), "--build-dir", str(tmp_path / "b")]
    result = CliRunner().invoke(app, argv)
    assert result.exception is not None and result.exception.exit_code == code, result.output


# --- a test-variant batch -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("built", "code"),
    [
        ([], ExitCode.NOTHING_TO_DO),  # neither is built: 3 each
        (["a", "b"], ExitCode.TOOLCHAIN),  # both built, no Python to make their environments: 4 each
        (["a"], ExitCode.TEST),  # 4 and 3: test-variant's own
    ],
)
def test_a_test_variant_batch_exits_with_the_code_its_failures_share(tmp_path, built, code, monkeypatch, capsys):
    for name in built:
        (tmp_path / "build" / name).mkdir(parents=True)
        (tmp_path / "build" / name / "metadata.json").write_text("{}")
    monkeypatch.setenv("PYTHON", "false")
    request = test_variant.parse(["--build-dir", str(tmp_path / "build"), "a,b"])
    assert test_variant.run(request, "kernel-matrix==9.9.9") == code
    assert capsys.readouterr().err.rstrip().endswith("error: 2 of 2 variants failed: a b")


@pytest.mark.processes
def test_kernel_matrix_test_variant_folds_a_batch_in_its_own_process(tmp_path):
    """Through the command the workflows run, where no python3 on PATH can make an environment: a
    built (4: no Python for its environment) and b not built (3) differ, so the batch exits with
    test-variant's own code, 6, combined by kernel-matrix's own process."""
    (tmp_path / "build" / "a").mkdir(parents=True)
    (tmp_path / "build" / "a" / "metadata.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "TEST_VARIANT_VENV")}
    env |= {"KERNEL_MATRIX_INSTALL": "kernel-matrix==9.9.9"}
    bare = tmp_path / "no-python3"  # a PATH on which python3 runs nothing
    bare.mkdir()
    (bare / "python3").write_text("#!/bin/sh\nexit 1\n")
    (bare / "python3").chmod(0o755)
    env["PATH"] = f"{bare}:/usr/bin:/bin"
    result = kernel_matrix("test-variant", "a,b", cwd=tmp_path, env=env)
    assert result.returncode == ExitCode.TEST, result.stderr
    assert "error: kernel-matrix needs Python >= 3.10 (python3 is exit 1)" in result.stderr, result.stderr
    assert "build/b is not a built variant" in result.stderr and not (tmp_path / "build" / ".cache").exists()
