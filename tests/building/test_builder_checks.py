"""kernel-builder's checks of a build, made by `kernel-matrix build` too: the load after
the build (get-kernel-check), the package layout (kernel-layout-check) and the op
namespace of torch.library registrations (torch-ops-check)."""

import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import kernel_matrix, noarch_kernel, snapshot

from kernel_matrix.building.source_checks import check_layout, check_op_registrations
from kernel_matrix.errors import ConfigError


@pytest.mark.build
def test_a_variant_that_does_not_load_fails_the_build_and_keeps_the_built_one(built, kernel_copy, tmp_path):
    # No [kernel.*] section for cpu: the binding alone is compiled, and its reference to
    # img2gray_cpu is undefined. Build and ABI check cannot see it; the loader can.
    toml = kernel_copy / "build.toml"
    text = toml.read_text()
    toml.write_text(text[: text.index("[kernel.img2gray_cpu]")])
    previous = built["cpu"]
    build_dir = tmp_path / "build"
    shutil.copytree(previous, build_dir / previous.name)
    before = snapshot(build_dir / previous.name)
    result = kernel_matrix("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir))
    assert result.returncode == 5, result.stdout + result.stderr
    assert 'note: no [kernel.*] section has backend = "cpu"' in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {previous.name}: built, but kernels.get_local_kernel does not load it"), last
    assert "undefined symbol" in last and "img2gray_cpu" in last
    assert "/tmp" not in last.split("ImportError: ")[1].split(" (full output")[0]  # not the loader's temporary link
    assert "Traceback" not in result.stderr
    assert snapshot(build_dir / previous.name) == before


@pytest.mark.processes
def test_a_python_only_variant_whose_package_raises_on_import_is_not_written(tmp_path):
    kernel = noarch_kernel(tmp_path, "boom", '["cpu"]')
    (kernel / "torch-ext" / "boom" / "__init__.py").write_text("raise RuntimeError('the kernel is broken')\n")
    result = kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "out"))
    assert result.returncode == 5, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: torch-cpu: built, but kernels.get_local_kernel does not load it (kernel-builder's "
        "get-kernel-check fails such a build): RuntimeError: the kernel is broken (full output: "
        f"{tmp_path / 'out' / 'logs' / 'torch-cpu.load.log'})"
    )
    assert not (tmp_path / "out" / "torch-cpu").exists()


@pytest.mark.processes
def test_the_kernels_code_gets_no_token_and_its_control_characters_are_escaped(tmp_path):
    kernel = noarch_kernel(tmp_path, "leak", '["cpu"]')
    (kernel / "torch-ext" / "leak" / "__init__.py").write_text(
        "import os\nfrom huggingface_hub import get_token\n"
        'raise RuntimeError(f\'\\x1b[2Jtoken={os.environ.get("HF_TOKEN")} file={get_token()} '
        'other={os.environ.get("AWS_SECRET_ACCESS_KEY")}\')\n'
    )
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    (hf_home / "token").write_text("hf_from_the_token_file")
    env = {**os.environ, "HF_TOKEN": "hf_from_the_environment", "HF_HOME": str(hf_home), "AWS_SECRET_ACCESS_KEY": "s3"}
    result = kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "out"), env=env)
    assert result.returncode == 5, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "RuntimeError: \\x1b[2Jtoken=None file=None other=None (full output: " in last, last
    assert "\x1b" not in result.stderr and "hf_from" not in result.stdout + result.stderr
    log = tmp_path / "out" / "logs" / "torch-cpu.load.log"
    assert last.endswith(f"(full output: {log})") and "RuntimeError" in log.read_text()


@pytest.mark.build  # it builds (nothing compiled): the fast loop's rule
def test_what_the_kernels_import_starts_ends_with_the_check(tmp_path):
    kernel = noarch_kernel(tmp_path, "spawn", '["cpu"]')
    # A sleep told from every other by its duration: the import can write no pid file for the
    # test to read (it writes nowhere but its scratch folder and the variant: confine.py).
    duration = f"600.{os.getpid()}{time.monotonic_ns() % 10**6}"
    (kernel / "torch-ext" / "spawn" / "__init__.py").write_text(
        f"import subprocess\nchild = subprocess.Popen(['sleep', {duration!r}])\n"
    )
    started = time.monotonic()
    kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "out"), check=True)
    assert time.monotonic() - started < 120  # not the sleep's 600 s: its output pipe is not waited for
    deadline = time.monotonic() + 10
    while _sleeping(duration) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _sleeping(duration)


def _sleeping(duration: str) -> bool:
    """Whether a `sleep duration` is alive (not a zombie)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes() == f"sleep\0{duration}\0".encode():
                return _alive(int(proc.name))
        except OSError:
            continue
    return False


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.build  # it builds (nothing compiled): the fast loop's rule
@pytest.mark.parametrize("how", ["--no-load-check", "flake.nix"])
def test_the_load_check_is_off_with_the_option_or_the_kernels_flake(tmp_path, how):
    # mamba-ssm's flake says doGetKernelCheck = false: its package imports what its python-depends lack.
    kernel = noarch_kernel(tmp_path, "unchecked", '["cpu"]')
    (kernel / "torch-ext" / "unchecked" / "__init__.py").write_text("import transformers_that_is_not_here\n")
    options = []
    if how == "flake.nix":
        (kernel / "flake.nix").write_text("{\n  outputs = x: y {\n    doGetKernelCheck = false;\n  };\n}\n")
    else:
        options = ["--no-load-check"]
    result = kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "out"), *options)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "torch-cpu" / "metadata.json").is_file()
    said = f"{kernel / 'flake.nix'}:3: note: doGetKernelCheck = false: the variant is not loaded after the build"
    assert (said in result.stderr) is (how == "flake.nix")


@pytest.mark.processes
def test_a_relative_python_and_a_linked_flake_do_not_skip_the_check(tmp_path):
    # The child starts in its own empty HOME: a relative --python is made absolute first. A flake.nix
    # linked from outside the kernel (here one that would turn the check off) is not read.
    kernel = noarch_kernel(tmp_path, "rel", '["cpu"]')
    (kernel / "torch-ext" / "rel" / "__init__.py").write_text("raise RuntimeError('checked')\n")
    outside = tmp_path / "elsewhere.nix"
    outside.write_text("{\n  doGetKernelCheck = false;\n}\n")
    (kernel / "flake.nix").symlink_to(outside)
    (tmp_path / "venv dir").mkdir()
    (tmp_path / "venv dir" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (tmp_path / "venv dir" / "python").chmod(0o755)
    result = kernel_matrix(
        "build", "--kernel-dir", "rel", "--build-dir", "out", "--python", "venv dir/python", cwd=tmp_path
    )
    assert result.returncode == 5, result.stdout + result.stderr
    assert "RuntimeError: checked" in result.stderr and "doGetKernelCheck" not in result.stderr


@pytest.mark.build  # it builds (nothing compiled): the fast loop's rule
def test_a_python_without_torch_or_kernels_builds_and_says_it_did_not_load(tmp_path):
    # kernel-matrix installed without torch (pipx): a Python-only kernel still builds.
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # -S: no site-packages, so no torch
    bare.chmod(0o755)
    kernel = noarch_kernel(tmp_path, "plain", '["cpu"]')
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "out"), "--python", str(bare)
    )
    assert result.returncode == 0, result.stderr
    assert "note: torch-cpu: not loaded after the build: torch is not installed in " in result.stderr
    assert (tmp_path / "out" / "torch-cpu" / "metadata.json").is_file()


@pytest.mark.build  # it builds (nothing compiled): the fast loop's rule
def test_python_only_variants_of_backends_this_torch_does_not_load_get_one_note(tmp_path):
    kernel = noarch_kernel(tmp_path, "fine", '["cpu", "rocm", "xpu"]')
    result = kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "out"), check=True)
    notes = [line for line in result.stderr.splitlines() if "not loaded after the build" in line]
    assert len(notes) == 1 and notes[0].startswith("note: torch-rocm, torch-xpu: not loaded after the build: torch ")
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")) == [
        "torch-cpu",
        "torch-rocm",
        "torch-xpu",
    ]


@pytest.mark.parametrize("breakage", ["no __init__.py", "nested package"])
@pytest.mark.processes
def test_the_package_layout_is_checked_before_anything_is_written(kernel_copy, tmp_path, breakage):
    package = kernel_copy / "torch-ext" / "img2gray"
    if breakage == "no __init__.py":
        (package / "__init__.py").unlink()
        expected = f"error: {package}: the kernel's Python package has no __init__.py"
    else:
        (package / "img2gray").mkdir()
        (package / "img2gray" / "__init__.py").write_text("")
        expected = f"error: {package / 'img2gray'}: a package folder holds no img2gray of its own"
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "b")
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(expected)
    assert not (tmp_path / "b").exists()


def test_a_nested_folder_without_python_files_is_not_refused(kernel_copy):
    # kernel-builder's layout check sees the source set: Python files only (an old build's cache is not there).
    stale = kernel_copy / "torch-ext" / "img2gray" / "img2gray" / "__pycache__"
    stale.mkdir(parents=True)
    (stale / "old.cpython-311.pyc").write_bytes(b"")
    check_layout(kernel_copy, "img2gray")


@pytest.mark.processes
def test_an_op_registered_without_the_kernels_namespace_is_refused_at_its_line(kernel_copy, tmp_path):
    op = kernel_copy / "torch-ext" / "img2gray" / "op.py"
    op.write_text(
        textwrap.dedent(
            """\
            import torch

            @torch.library.custom_op("myns::gray", mutates_args=())
            def gray(x: torch.Tensor) -> torch.Tensor:
                return x
            """
        )
    )
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "b")
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {op}:4: function gray is registered with torch.library without add_op_namespace_prefix: two "
        "builds of this kernel would register the same op (kernel-builder's torch-ops-check refuses it)"
    )
    assert not (tmp_path / "b").exists()


def _ops_check(tmp_path, source: str, where: str = "torch-ext/k/op.py") -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    check_op_registrations(tmp_path)


@pytest.mark.parametrize(
    "source",
    [
        # kernel-builder's own pattern (silu-and-mul): the name goes through add_op_namespace_prefix
        """\
        from torch.library import custom_op, register_fake
        from ._ops import add_op_namespace_prefix
        @custom_op(add_op_namespace_prefix("silu_and_mul"), mutates_args=())
        def silu_and_mul(x): ...
        @register_fake(ops.add_op_namespace_prefix("silu_and_mul"))
        def _(x): ...
        """,
        # not a registration: no argument, or not a torch.library decorator
        """\
        @functools.lru_cache()
        def f(): ...
        @custom_op
        def g(): ...
        """,
        # only top-level definitions are checked, as kernel-builder's hook checks them
        """\
        def outer():
            @custom_op("ns::inner", mutates_args=())
            def inner(): ...
        """,
        # a file this Python cannot parse is left to the load after the build
        "def broken(:\n",
    ],
)
def test_registrations_kernel_builder_accepts_pass(tmp_path, source):
    _ops_check(tmp_path, source)


@pytest.mark.parametrize(
    ("source", "where", "found"),
    [
        (
            '@torch.library.triton_op("ns::f", mutates_args=())\nasync def f(): ...\n',
            "tests/test_x.py",
            "2: async function f",
        ),
        ('@register_fake("ns::f")\nclass F: ...\n', "torch-ext/k/sub/deep.py", "2: class F"),
    ],
)
def test_unprefixed_registrations_in_the_package_and_tests_are_refused(tmp_path, source, where, found):
    with pytest.raises(ConfigError, match=rf"^{tmp_path / where}:{found} is registered with torch.library"):
        _ops_check(tmp_path, source, where)


def test_the_ops_check_reads_no_file_outside_the_kernel(tmp_path):
    outside = tmp_path / "host.py"
    outside.write_text('@custom_op("ns::f", mutates_args=())\ndef f(): ...\n')
    kernel = tmp_path / "kernel"
    (kernel / "torch-ext" / "k").mkdir(parents=True)
    (kernel / "torch-ext" / "k" / "linked.py").symlink_to(outside)
    (kernel / "tests").symlink_to(tmp_path, target_is_directory=True)
    check_op_registrations(kernel)  # neither the linked file nor the linked folder is read
