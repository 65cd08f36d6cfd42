"""A source that several [kernel.*] sections list is compiled once, as kernel-builder's one
CMake target compiles it (flash-mla lists csrc/api/api_impl.cu in its sm90 and its sm100
section): each section adds its flags, capabilities and include dirs to that one compile."""

from pathlib import Path

import pytest
from conftest import kernel_matrix

SHARED = """\
// Compiled once, with both sections' flags: alone, either section's compile stops here.
#if !defined(FROM_FIRST) || !defined(FROM_SECOND)
#error "compiled without one of the two sections' flags"
#endif
int kernel_matrix_shared_source() { return 1; }
"""

TWO_SECTIONS = """
[kernel.first]
backend = "{backend}"
depends = []
src = ["csrc/shared.{suffix}"]
include = ["csrc/first"]
{flags} = ["-DFROM_FIRST"]
{capabilities_first}

[kernel.second]
backend = "{backend}"
depends = []
src = ["csrc/shared.{suffix}"]
include = ["csrc/second"]
{flags} = ["-DFROM_SECOND"]
{capabilities_second}
"""


def with_two_sections(kernel: Path, backend: str) -> Path:
    """kernel (a copy of img2gray) with two more sections that both list csrc/shared.*."""
    cuda = backend == "cuda"
    suffix = "cu" if cuda else "cpp"
    (kernel / "csrc" / f"shared.{suffix}").write_text(SHARED)
    for folder in ("first", "second"):
        (kernel / "csrc" / folder).mkdir()
    toml = kernel / "build.toml"
    toml.write_text(
        toml.read_text()
        + TWO_SECTIONS.format(
            backend=backend,
            suffix=suffix,
            flags="cuda-flags" if cuda else "cxx-flags",
            capabilities_first='cuda-capabilities = ["9.0a"]' if cuda else "",
            capabilities_second='cuda-capabilities = ["10.0f"]' if cuda else "",
        )
    )
    return kernel


def cu130_toolchain():
    """A CUDA 13.0 toolchain as a value (planning probes nothing)."""
    from kernel_matrix.planning.toolchain import Nvcc, Toolchain, TorchInstall

    torch = TorchInstall("python3", Path("/opt/km/torch"), "2.11.0+cu130", "13.0", Path("/usr/include/py"))
    nvcc = Nvcc(Path("/opt/cuda/bin/nvcc"), "13.0", Path("/opt/cuda"))
    return Toolchain(torch=torch, nvcc=nvcc, cxx="g++", arch="x86_64")


def test_a_source_in_two_cuda_sections_is_one_compile_with_both_sections_flags(kernel_copy):
    """Planned without a process: one step for the shared file, the sections' flags in
    build.toml's order, their capabilities and include dirs together."""
    from kernel_matrix.building import native_build
    from kernel_matrix.config.buildtoml import load_build_toml

    kernel = with_two_sections(kernel_copy, "cuda")
    plan = native_build.plan(kernel, load_build_toml(kernel), cu130_toolchain(), backend="cuda")

    sources = native_build.section_sources(plan, dependencies={})
    shared = sources["csrc/shared.cu"]
    assert shared.section == "first"
    assert shared.cuda_flags == ["-DFROM_FIRST", "-DFROM_SECOND"]
    assert shared.capabilities == ["9.0a", "10.0f"]
    assert shared.section_includes == [kernel / "csrc" / "first", kernel / "csrc" / "second"]
    # img2gray's own files, listed by one section each, are untouched by the merge.
    assert sources["csrc/img2gray_cuda.cu"].cuda_flags == []


def test_a_source_in_two_cpu_sections_builds_links_once_and_loads(kernel_copy, object_cache, tmp_path):
    """Built for real: compiled once per section, the file stops at its #error (without it,
    its function is defined twice and the link fails, as flash-mla's did)."""
    kernel = with_two_sections(kernel_copy, "cpu")
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path),
        "--cache-dir", str(object_cache),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (library,) = tmp_path.glob("*/*.so")
    test = kernel_matrix(
        "test", str(library.parent), "--kernel-dir", str(kernel), "--pytest-arg=-k",
        "--pytest-arg=test_gray_pixels_keep_their_value",
    )  # fmt: skip
    assert test.returncode == 0, test.stdout[-2000:] + test.stderr[-2000:]


def test_a_narrowed_build_keeps_a_section_it_would_empty_at_the_sections_own_capabilities(kernel_copy):
    """--cuda-capabilities 9.0 (or a matrix row) narrows the targets; a section whose own list
    has nothing of them (here sm_100 only) is built for its own list, as kernel-builder always
    builds such a section, instead of refusing the kernel (flash-attn3's sm80 section, natten's
    Blackwell one). One no CUDA version can build is still refused."""
    from kernel_matrix.building import native_build
    from kernel_matrix.config.buildtoml import load_build_toml
    from kernel_matrix.errors import ConfigError

    kernel = with_two_sections(kernel_copy, "cuda")
    toolchain = cu130_toolchain()
    plan = native_build.plan(kernel, load_build_toml(kernel), toolchain, backend="cuda", cuda_capabilities=["9.0"])
    assert plan.section_capabilities["first"] == ["9.0a"]
    assert plan.section_capabilities["second"] == ["10.0f"]
    assert plan.section_capabilities["img2gray_cuda"] == ["9.0"]  # the narrowing holds where it can

    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace('cuda-capabilities = ["10.0f"]', 'cuda-capabilities = ["6.0"]'))
    with pytest.raises(ConfigError, match=r"\[kernel.second\]: none of cuda-capabilities \['6.0'\]"):
        native_build.plan(kernel, load_build_toml(kernel), toolchain, backend="cuda", cuda_capabilities=["9.0"])


def test_a_narrowing_nvcc_cannot_compile_is_refused_before_any_compile(kernel_copy):
    """--cuda-capabilities 7.0 with CUDA 13 (its nvcc starts at 7.5): one line, not nvcc's
    'Unsupported gpu architecture' at the first file."""
    from kernel_matrix.building import native_build
    from kernel_matrix.config.buildtoml import load_build_toml
    from kernel_matrix.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        native_build.plan(
            kernel_copy, load_build_toml(kernel_copy), cu130_toolchain(), backend="cuda", cuda_capabilities=["7.0"]
        )
    assert str(raised.value) == (
        "cuda capability 7.0: CUDA 13.0's nvcc compiles 7.5 to 12.1 (--cuda-capabilities, or a matrix row)"
    )


def test_a_section_a_narrowing_leaves_nothing_is_named_as_built_for_its_own_list(kernel_copy):
    from kernel_matrix.building import native_build
    from kernel_matrix.config.buildtoml import load_build_toml

    kernel = with_two_sections(kernel_copy, "cuda")  # first: 9.0a, second: 10.0f
    plan = native_build.plan(
        kernel, load_build_toml(kernel), cu130_toolchain(), backend="cuda", cuda_capabilities=["9.0"]
    )
    assert plan.own_list_sections == ["second"]
    assert plan.section_capabilities["second"] == ["10.0f"] and plan.section_capabilities["first"] == ["9.0a"]
    unnarrowed = native_build.plan(kernel, load_build_toml(kernel), cu130_toolchain(), backend="cuda")
    assert unnarrowed.own_list_sections == []


@pytest.mark.build
def test_a_c_source_is_left_uncompiled_as_kernel_builders_cxx_project_leaves_it(kernel_copy, tmp_path):
    """kernel-builder's cpu and cuda projects enable CXX and CUDA, not C: CMake compiles no .c
    source there. This one is no valid C++ (g++ would refuse it), so the build passes only if
    it is left out, as under kernel-builder."""
    (kernel_copy / "csrc" / "helper.c").write_text("#include <stdlib.h>\nint *grab(void) { return malloc(4); }\n")
    toml = kernel_copy / "build.toml"
    text = toml.read_text()
    cpu = text.index("[kernel.img2gray_cpu]")
    toml.write_text(text[:cpu] + text[cpu:].replace("src = [\n", 'src = [\n  "csrc/helper.c",\n', 1))
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "b"), "--backend", "cpu", "--no-cache"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "helper.c" not in (result.stdout + result.stderr)
