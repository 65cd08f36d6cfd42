"""The command line: help everywhere, distinct exit codes, one-line errors."""

import os
import shutil

import pytest
from conftest import KERNEL_DIR, REPO, img2gray_as, kernel_matrix

from kernel_matrix.errors import ExitCode

COMMANDS = ["matrix", "build", "wheels", "test", "check-abi", "publish", "clean", "shell"]


@pytest.mark.processes
def test_top_level_help_lists_every_command():
    result = kernel_matrix("--help")
    assert result.returncode == 0
    for command in COMMANDS:
        assert command in result.stdout


def _every_command() -> list[str]:
    import typer

    from kernel_matrix.cli import app

    return sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", _every_command())
@pytest.mark.processes
def test_every_command_has_help(command):
    result = kernel_matrix(command, "--help")
    assert result.returncode == 0, result.stderr
    # test-variant's help is its module's description, which holds its usage line.
    assert "Usage:" in result.stdout or f"kernel-matrix {command} [" in result.stdout


def test_the_list_above_names_the_main_commands():
    assert set(COMMANDS) <= set(_every_command())


def test_exit_codes_are_distinct():
    # __members__, not iteration: iterating an IntEnum skips aliases (a second name for a value).
    codes = [code.value for code in ExitCode.__members__.values()]
    assert len(set(codes)) == len(ExitCode.__members__)


@pytest.mark.processes
def test_a_missing_torch_is_a_toolchain_error(tmp_path):
    import sys
    import venv

    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    result = kernel_matrix("build", "--python", str(bare / "bin" / "python"), "--build-dir", str(tmp_path / "b"))
    assert result.returncode == ExitCode.TOOLCHAIN, result.stderr
    assert "torch is not installed for" in result.stderr and result.stderr.count("\n") == 1
    assert sys.executable  # the suite's own interpreter is untouched


def test_test_with_a_python_that_does_not_exist_is_one_line(built, tmp_path):
    variant = next(iter(built.values()))
    result = kernel_matrix("test", str(variant), "--python", "./no-such-venv/bin/python")
    assert result.returncode == ExitCode.CONFIG
    assert result.stderr.strip().splitlines() == [
        f"error: --python {REPO / 'no-such-venv/bin/python'}: cannot run it: No such file or directory"
    ]


@pytest.mark.parametrize(
    "command", [["build", "--variant", "torch214-cxx11-cpu-x86_64-linux"], ["wheels"], ["shell", "x"]]
)
@pytest.mark.processes
def test_a_misspelt_image_kind_is_refused_naming_the_choices(command):
    # It used to build with the offline image: anything but "official" was taken as offline.
    result = kernel_matrix(*command, "--image", "oficial")
    assert result.returncode == ExitCode.CONFIG
    (line,) = result.stderr.strip().splitlines()
    assert "'oficial' is not one of 'official', 'offline'" in line


@pytest.mark.processes
def test_the_cli_starts_without_the_host_only_packages():
    """Build containers run `python -m kernel_matrix build` in the builder's venv, which has neither
    kernel-abi-check nor huggingface_hub nor docker: importing the CLI must not need them."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for name in ('kernel_abi_check', 'huggingface_hub', 'docker', 'kernels'):\n"
        "    sys.modules[name] = None  # importing it raises ImportError\n"
        "from kernel_matrix import cli\n"
        "sys.argv = ['kernel-matrix', 'build', '--help']\n"
        "cli.main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--kernel-dir" in result.stdout


@pytest.mark.processes
def test_check_abi_passes_a_python_only_variant_and_refuses_a_compiled_one_without_a_library(tmp_path):
    """kernel-builder checks the ABI of compiled variants only: a noarch variant (torch-<backend>)
    has no library and nothing to check; a compiled variant without one is broken."""
    for name in ("torch-tpu", "torch214-cxx11-cpu-x86_64-linux"):
        (tmp_path / name / "relu_tpu").mkdir(parents=True)
        (tmp_path / name / "relu_tpu" / "__init__.py").write_text("")
        (tmp_path / name / "metadata.json").write_text('{"name": "relu-tpu", "version": 1}')
    result = kernel_matrix("check-abi", "torch-tpu", "--build-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "passed torch-tpu: Python only, no library to check"
    result = kernel_matrix("check-abi", "torch214-cxx11-cpu-x86_64-linux", "--build-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr == f"error: {tmp_path / 'torch214-cxx11-cpu-x86_64-linux'}: no .so to check\n"


@pytest.mark.build
def test_check_abi_without_a_variant_checks_this_hosts_as_test_does(built, tmp_path):
    host = built.get("cuda") or built["cpu"]  # what `build` makes here by default
    result = kernel_matrix("check-abi", "--build-dir", str(host.parent))
    assert result.returncode == 0, result.stderr
    assert host.name in result.stdout + result.stderr
    if "cuda" in built:  # only the CPU variant built: the line says how to check it
        shutil.copytree(built["cpu"], tmp_path / built["cpu"].name)
        result = kernel_matrix("check-abi", "--build-dir", str(tmp_path))
        assert result.returncode == 2
        assert f"check it with `kernel-matrix check-abi {built['cpu'].name}`" in result.stderr
        assert "--backend" not in result.stderr  # check-abi has no such option


@pytest.mark.processes
def test_wheels_of_a_python_only_kernel_say_there_are_none_to_make(tmp_path):
    from conftest import noarch_kernel

    kernel = noarch_kernel(tmp_path, "silu", '["cpu"]')
    result = kernel_matrix("wheels", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "build"))
    assert result.returncode == 2
    assert result.stderr == (
        "error: silu: Python only ([torch-noarch]): a legacy wheel is per torch and CUDA build, made of compiled "
        "variants only; the torch-<backend> folder is what `kernels` loads\n"
    )


@pytest.mark.processes
def test_test_names_the_kernel_without_tests_and_a_test_folder_it_does_not_read(tmp_path):
    from conftest import img2gray_as

    kernel = img2gray_as(tmp_path, "gray")  # copied without its tests/
    (kernel / "test").mkdir()
    variant = tmp_path / "build" / "torch214-cxx11-cpu-x86_64-linux"
    variant.mkdir(parents=True)
    (variant / "metadata.json").write_text('{"id": "_gray_cpu_0", "backend": {"type": "cpu"}}')
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (
        f"skipped {variant.name}: gray has no tests/: nothing to run; {kernel / 'test'} is there, not read"
    )


@pytest.mark.processes
def test_test_names_the_built_variants_where_this_hosts_is_not_built(tmp_path):
    """`test` with no VARIANT tests the variant `build` makes here; where only another is built
    (`build --backend cpu` on a CUDA host), the line names it and how to test it, not only
    "run kernel-matrix build first"."""
    from conftest import noarch_kernel

    kernel = noarch_kernel(tmp_path, "silu", '["cpu", "cuda"]')
    build = tmp_path / "build"
    (build / "torch-cpu").mkdir(parents=True)
    (build / "torch-cpu" / "metadata.json").write_text('{"id": "silu_0"}')
    options = ("--kernel-dir", str(kernel), "--build-dir", str(build))
    result = kernel_matrix("test", *options, "--backend", "cuda")
    assert result.returncode == ExitCode.CONFIG
    assert result.stderr.strip().splitlines() == [
        f"error: torch-cuda: this host's variant is not built (no {build / 'torch-cuda' / 'metadata.json'}); "
        f"{build} holds torch-cpu: test it with `kernel-matrix test torch-cpu` or `--backend cpu`, "
        "or build torch-cuda first"
    ]
    # Several built: all named; nothing built at all: as before, build first.
    (build / "torch-xpu").mkdir()
    (build / "torch-xpu" / "metadata.json").write_text('{"id": "silu_0"}')
    result = kernel_matrix("test", *options, "--backend", "cuda")
    assert result.returncode == ExitCode.CONFIG
    assert f"{build} holds torch-cpu, torch-xpu: test one with `kernel-matrix test VARIANT` or `--backend cpu`" in (
        result.stderr
    )
    result = kernel_matrix(
        "test", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "none"), "--backend", "cpu"
    )
    assert result.returncode == ExitCode.CONFIG
    assert "run `kernel-matrix build` first" in result.stderr and result.stderr.count("\n") == 1


def _cuda_is_this_hosts_variant() -> bool:
    import shutil

    import torch

    return torch.version.cuda is not None and bool(shutil.which("nvcc") or os.environ.get("CUDA_HOME"))


@pytest.mark.skipif(
    not _cuda_is_this_hosts_variant(), reason="this host's variant is the CPU one (no CUDA torch or nvcc)"
)
@pytest.mark.processes
def test_test_on_a_cuda_host_with_only_the_cpu_variant_built_says_so(tmp_path):
    """The tester's case: `build --backend cpu` on a host whose torch has CUDA, then `test`."""
    from kernel_matrix.building.native_build import plan_build

    cpu = plan_build(KERNEL_DIR, backend="cpu").variant.name
    cuda = plan_build(KERNEL_DIR).variant.name
    build = tmp_path / "build"
    (build / cpu).mkdir(parents=True)
    (build / cpu / "metadata.json").write_text('{"id": "_img2gray_cpu_0"}')
    result = kernel_matrix("test", "--build-dir", str(build))
    assert result.returncode == ExitCode.CONFIG
    assert result.stderr.strip().splitlines() == [
        f"error: {cuda}: this host's variant is not built (no {build / cuda / 'metadata.json'}); {build} holds {cpu}: "
        f"test it with `kernel-matrix test {cpu}` or `--backend cpu`, or build {cuda} first"
    ]


@pytest.mark.processes
def test_help_prints_bracketed_text_as_written():
    """Help text names build.toml tables ([general.hub]); rich markup would take them for styles
    and drop them. Every bracketed word of a command's help and options shows in its --help."""
    import re

    import typer.main

    from kernel_matrix.cli import app

    group = typer.main.get_command(app)
    checked = 0
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        wanted = {m for text in texts for m in re.findall(r"\[[a-z][a-z0-9_.-]*\]", text.replace("\\[", "["))}
        if not wanted:
            continue
        shown = " ".join(kernel_matrix(name, "--help").stdout.replace("│", " ").split())
        for bracketed in wanted:
            assert bracketed in shown, (name, bracketed)
            checked += 1
    assert checked  # publish names [general.hub]


@pytest.mark.processes
def test_an_unknown_variant_of_the_default_matrix_names_that_matrix(tmp_path):
    """A kernel folder without build_matrix.yaml reads the default matrix: the line says so,
    not a build_matrix.yaml that is not there."""
    kernel = img2gray_as(tmp_path, "gray")
    result = kernel_matrix("matrix", "--variant", "torch211-cxx11-cu999-x86_64-linux", cwd=kernel)
    assert result.returncode == 2 and result.stderr.startswith(
        "error: --variant torch211-cxx11-cu999-x86_64-linux: no kernel of kernel-matrix's default matrix has it"
    ), result.stderr


@pytest.mark.processes  # Python started by bash
def test_a_closed_stdout_is_written_to_by_no_one(tmp_path):
    """`kernel-matrix matrix >&-`: Python starts with sys.stdout None. The command runs and
    exits as its work did (it stopped at import with a traceback before)."""
    import shlex
    import subprocess
    import sys

    matrix = [sys.executable, "-m", "kernel_matrix", "matrix", "--kernel-dir", str(REPO / "kernel")]
    result = subprocess.run(["bash", "-c", f"exec >&-; {shlex.join(matrix)}"], stderr=subprocess.PIPE, text=True)
    assert result.returncode == 0 and result.stderr == "", result.stderr


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        ('{"url": "file://CHECKOUT", "dir_info": {"editable": true}}', "CHECKOUT"),  # a checkout, as setup-dev
        ('{"url": "file:///nowhere/kernel_matrix-1.whl", "archive_info": {}}', None),  # a wheel since removed
        (
            '{"url": "https://github.com/me/km", "vcs_info": {"vcs": "git", "commit_id": "abc"}}',
            "git+https://github.com/me/km@abc",
        ),
        (None, None),  # from the package index: this release
    ],
)
def test_test_variant_installs_the_running_kernel_matrix_where_it_came_from(origin, expected, monkeypatch, tmp_path):
    """A development version is on no index: a cell's environment gets kernel-matrix from where the
    running one was installed (PEP 610), else this version from the index."""
    import importlib

    from kernel_matrix import __version__

    test_variant = importlib.import_module("kernel_matrix.cli.test_variant")  # the module, not the command

    text = origin.replace("CHECKOUT", str(tmp_path)) if origin else None
    distribution = type("D", (), {"read_text": lambda self, f: text})()
    monkeypatch.setattr(test_variant, "_running_distribution", lambda: distribution)
    wanted = expected.replace("CHECKOUT", str(tmp_path)) if expected else f"kernel-matrix=={__version__}"
    assert test_variant.running_install() == wanted
