"""Variant names and CUDA capabilities: every name we produce parses with the
real loader's parse_variant (kernel_matrix.loader) and means what we meant."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from kernel_matrix import loader
from kernel_matrix.loader import arch_parts, parse_variant
from kernel_matrix.planning.capabilities import default_capabilities, gencode_flags, select_capabilities
from kernel_matrix.planning.variants import CPU_ARCHS, Variant, legacy_name, torch_minor

torch_versions = st.builds(lambda minor: f"2.{minor}", st.integers(min_value=0, max_value=40))
cuda_versions = st.builds(lambda major, minor: f"{major}.{minor}", st.integers(11, 14), st.integers(0, 9))
variants = st.one_of(
    st.builds(
        lambda t, c, a: Variant(torch=t, backend="cuda", cuda=c, arch=a),
        torch_versions,
        cuda_versions,
        st.sampled_from(CPU_ARCHS),
    ),
    st.builds(
        lambda t, a: Variant(torch=t, backend="cpu", cuda=None, arch=a), torch_versions, st.sampled_from(CPU_ARCHS)
    ),
)


@given(variants)
def test_every_variant_name_parses_with_the_loader_and_round_trips(variant):
    parsed = parse_variant(variant.name)
    assert parsed.variant_str == variant.name
    framework = parsed.framework
    assert framework.cxx11_abi
    assert (framework.version.major, framework.version.minor) == tuple(int(p) for p in variant.torch.split("."))
    backend, platform, os = arch_parts(parsed)
    assert platform == variant.arch and os == "linux"
    assert backend.variant_str == variant.compute


def test_known_names():
    assert Variant("2.11", "cuda", "13.0", "x86_64").name == "torch211-cxx11-cu130-x86_64-linux"
    assert Variant("2.14", "cpu", None, "aarch64").name == "torch214-cxx11-cpu-aarch64-linux"
    assert torch_minor("2.14.1+cu130") == "2.14"


def test_a_name_of_kernels_0_19s_new_form_is_the_legacy_named_build_that_serves_it():
    """kernel-builder names its builds in the legacy form, and so does kernel-matrix; a name
    of the new form (read by the installed loader, from 0.19 on) is the build serving it."""
    for name in ("torch214-cxx11-cu130-x86_64-linux", "torch-cpu", "not-a-variant"):
        assert legacy_name(name) == name
    new = "torch-2.15-cxx11-cuda-13.2-cpython-3.11-abi3-x86_64-linux"
    free_threaded = "torch-2.15-cxx11-cpu-cpython-3.15-abi3t-x86_64-linux"
    if Version(loader.version()) >= Version("0.19"):
        assert legacy_name(new) == "torch215-cxx11-cu132-x86_64-linux"  # abi3 from CPython 3.9 serves 3.11
        assert legacy_name("tvm-ffi-0.1-cpu-cpython-3.9-abi3-aarch64-linux") == "tvm-ffi01-cpu-aarch64-linux"
        stable = "torch-stable-abi-2.10-cuda-13.0-cpython-3.9-abi3-x86_64-linux"
        assert legacy_name(stable) == "torch-stable-abi210-cu130-x86_64-linux"
    else:  # an older loader reads no variant of that form: nothing serves it
        assert legacy_name(new) == new
    assert legacy_name(free_threaded) == free_threaded  # abi3t: no build of ours serves it


def test_inconsistent_variants_are_refused():
    with pytest.raises(ValueError):
        Variant("2.14", "cuda", None, "x86_64")
    with pytest.raises(ValueError):
        Variant("2.14", "cpu", "13.0", "x86_64")
    with pytest.raises(ValueError):
        Variant("2.14", "cpu", None, "riscv64")


def test_capabilities_are_intersected_with_the_cuda_defaults():
    assert "7.0" not in default_capabilities("13.0") and "12.1" in default_capabilities("13.2")
    assert "7.0" in default_capabilities("12.8") and "10.1" in default_capabilities("12.9")
    assert default_capabilities("12.6")[-1] == "9.0"
    assert select_capabilities(["7.0", "9.0", "8.0"], "13.0") == ["8.0", "9.0"]
    assert select_capabilities(["7.0"], "13.0") == []
    assert select_capabilities(None, "12.6") == default_capabilities("12.6")
    assert select_capabilities(["12.0", "10.0", "9.0"], "13.0") == ["9.0", "10.0", "12.0"]  # numeric order


def test_capabilities_follow_kernel_builders_loose_intersection():
    # A requested capability serves every default target of its major above it...
    assert select_capabilities(["8.0"], "13.0", ["8.6", "9.0"]) == ["8.0"]
    assert select_capabilities(["8.0", "8.9"], "13.0") == ["8.0", "8.9"]  # 8.6 and 8.7 take 8.0
    # ...architecture-specific ones replace their target...
    assert select_capabilities(["8.0", "9.0a"], "12.8") == ["8.0", "9.0a"]
    assert select_capabilities(["10.0f"], "13.0") == ["10.0f"]
    # ...and nothing below what the CUDA version's nvcc compiles (13.x: 7.5 and up).
    assert select_capabilities(["7.0", "8.0"], "13.0") == ["8.0"]
    assert select_capabilities(["7.0", "8.0"], "12.8") == ["7.0", "8.0"]


def test_architecture_specific_targets_are_compared_by_their_base():
    # --cuda-capabilities takes 9.0a and 10.0f as the targets (config.capability's
    # format); a section's list used to be compared with Version("10.0f"), which
    # raised InvalidVersion, and with Version("9.0a"), a pre-release below 9.0.
    assert select_capabilities(["8.0", "10.0"], "13.0", ["10.0f"]) == ["10.0"]
    assert select_capabilities(["8.0", "9.0"], "12.8", ["9.0a"]) == ["9.0"]
    assert select_capabilities(["9.0a"], "12.8", ["9.0a"]) == ["9.0a"]
    assert select_capabilities(None, "13.0", ["10.0f"]) == ["10.0f"]


# Each place accepts what its own input holds, by one definition (config.capability).
CAPABILITY_TEXTS = ["9.0", "10.0", "9.0a", "10.0f", "9.0+PTX", "9.0a+PTX", "9", "sm_90", "9.0b", "9.0\n", " 9.0"]


@pytest.mark.parametrize("text", CAPABILITY_TEXTS)
def test_one_capability_format_for_every_input(text):
    from pydantic import TypeAdapter, ValidationError

    from kernel_matrix.config.buildtoml import Capability
    from kernel_matrix.config.matrix_schema import Capability as TableCapability
    from kernel_matrix.planning.capabilities import CAPABILITY

    def accepts(kind: object) -> bool:
        try:
            TypeAdapter(kind).validate_python(text)
        except ValidationError:
            return False
        return True

    plain = text in ("9.0", "10.0")
    specific = plain or text in ("9.0a", "10.0f")
    assert accepts(TableCapability) == plain  # build_matrix.yaml's tables: targets
    assert bool(CAPABILITY.match(text)) == specific  # --cuda-capabilities, metadata.json (less +PTX)
    assert accepts(Capability) == (specific or text in ("9.0+PTX", "9.0a+PTX"))  # build.toml


def test_gencode_embeds_ptx_for_the_highest_capability_only():
    flags = gencode_flags(["8.0", "9.0", "10.0"])
    assert flags == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_100,code=sm_100",
        "-gencode=arch=compute_100,code=compute_100",
    ]


def test_a_section_with_its_own_capabilities_gets_ptx_only_where_it_asks():
    # kernel-builder intersects a section's list with the defaults stripped of "+PTX":
    # PTX of the highest is for the default list ("...;12.1+PTX") only.
    assert gencode_flags(["8.9", "9.0"], ptx_for_highest=False) == [
        "-gencode=arch=compute_89,code=sm_89",
        "-gencode=arch=compute_90,code=sm_90",
    ]
    assert "-gencode=arch=compute_80,code=compute_80" in gencode_flags(["8.0+PTX", "9.0"], ptx_for_highest=False)
