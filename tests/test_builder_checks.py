"""kernel-builder's checks of a build, made by `kernel-matrix build` too: the load after
the build (get-kernel-check), the package layout (kernel-layout-check) and the op
namespace of torch.library registrations (torch-ops-check)."""

import shutil
import textwrap

import pytest
from conftest import kernel_matrix, noarch_kernel

from kernel_matrix.building.source_checks import check_op_registrations
from kernel_matrix.errors import ConfigError


def _snapshot(directory):
    return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


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
    before = _snapshot(build_dir / previous.name)
    result = kernel_matrix("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir))
    assert result.returncode == 5, result.stdout + result.stderr
    assert 'note: no [kernel.*] section has backend = "cpu"' in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {previous.name}: built, but kernels.get_local_kernel does not load it"), last
    assert "undefined symbol" in last and "img2gray_cpu" in last
    assert "/tmp" not in last.split("ImportError: ")[1]  # the loader's temporary link is not shown
    assert "Traceback" not in result.stderr
    assert _snapshot(build_dir / previous.name) == before


def test_a_python_only_variant_whose_package_raises_on_import_is_not_written(tmp_path):
    kernel = noarch_kernel(tmp_path, "boom", '["cpu"]')
    (kernel / "torch-ext" / "boom" / "__init__.py").write_text("raise RuntimeError('the kernel is broken')\n")
    result = kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "out"))
    assert result.returncode == 5, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: torch-cpu: built, but kernels.get_local_kernel does not load it (kernel-builder's "
        "get-kernel-check fails such a build): RuntimeError: the kernel is broken"
    )
    assert not (tmp_path / "out" / "torch-cpu").exists()


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
def test_the_package_layout_is_checked_before_anything_is_written(kernel_copy, tmp_path, breakage):
    package = kernel_copy / "torch-ext" / "img2gray"
    if breakage == "no __init__.py":
        (package / "__init__.py").unlink()
        expected = f"error: {package}: the kernel's Python package has no __init__.py"
    else:
        (package / "img2gray").mkdir()
        expected = f"error: {package / 'img2gray'}: a package folder holds no img2gray of its own"
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "b")
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(expected)
    assert not (tmp_path / "b").exists()


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
