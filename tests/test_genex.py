"""CMake generator expressions in a kernel's flags, evaluated as kernel-builder's CMake target
evaluates them (a third-party kernel's `$<$<CXX_COMPILER_ID:MSVC>:/arch:AVX2>` reached g++ as a
file name before)."""

import pytest
from conftest import img2gray_as, kernel_matrix

from kernel_matrix.config.genex import Context, GenexError, check, expand
from kernel_matrix.errors import ExitCode

CXX, CUDA, CLANG = Context("CXX"), Context("CUDA"), Context("CXX", cxx_id="Clang")


@pytest.mark.parametrize(
    ("flags", "context", "expected"),
    [
        (["-O2", "-DX=1"], CXX, ["-O2", "-DX=1"]),  # no expression: as written
        (["$<$<CXX_COMPILER_ID:MSVC>:/arch:AVX2>", "-O2"], CXX, ["-O2"]),  # false: dropped
        (["$<$<CXX_COMPILER_ID:GNU,Clang>:-mavx2;-mfma>"], CXX, ["-mavx2", "-mfma"]),  # a CMake list: two flags
        (["$<$<CXX_COMPILER_ID:GNU>:-fno-plt>"], CLANG, []),
        (["$<$<COMPILE_LANGUAGE:CUDA>:--use_fast_math>"], CUDA, ["--use_fast_math"]),
        (["$<$<COMPILE_LANGUAGE:CUDA>:--use_fast_math>"], CXX, []),
        (["$<$<COMPILE_LANG_AND_ID:CUDA,NVIDIA>:-lineinfo>"], CUDA, ["-lineinfo"]),
        (["$<IF:$<CONFIG:Debug>,-O0,-O3>"], CXX, ["-O3"]),  # kernel-builder builds Release
        (["$<$<AND:$<PLATFORM_ID:Linux>,$<NOT:$<BOOL:OFF>>>:-DLIST=1$<COMMA>2>"], CXX, ["-DLIST=1,2"]),
        (["$<$<OR:0,$<STREQUAL:$<CONFIG>,Release>>:-DNDEBUG_TOO>"], CXX, ["-DNDEBUG_TOO"]),
        (["a;;b"], CXX, ["a", "b"]),  # CMake's list: empty elements vanish
    ],
)
def test_flags_mean_what_cmake_makes_of_them(flags, context, expected):
    assert expand(flags, context) == expected


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("$<TARGET_PROPERTY:x,COMPILE_DEFINITIONS>", "$<TARGET_PROPERTY:...> is a generator expression"),
        # Checked on every branch: whether a branch is taken depends on the build, the file does not.
        ("$<$<CXX_COMPILER_ID:MSVC>:$<TARGET_FILE:x>>", "$<TARGET_FILE:...>"),
        ("$<$<CONFIG:Release>:-O3", "is not closed"),
        ("$<NOT:2>", "takes 0 or 1, not '2'"),
        ("$<IF:1,a>", "takes 3 arguments, not 2"),
    ],
)
def test_an_expression_kernel_matrix_cannot_evaluate_is_named(flag, message):
    with pytest.raises(GenexError, match=message.replace("$", r"\$").replace("(", r"\(").replace("[", r"\[")):
        check(flag)


def test_an_unevaluable_flag_is_refused_where_build_toml_says_it(tmp_path):
    """img2gray's two sections both get the flag: a line each, at each section's cxx-flags."""
    kernel = img2gray_as(tmp_path, "gray", 'cxx-flags = ["-ffp-contract=off"]\n', 'cxx-flags = ["$<TARGET_FILE:x>"]\n')
    toml = kernel / "build.toml"
    lines = [n for n, t in enumerate(toml.read_text().splitlines(), 1) if "TARGET_FILE" in t]
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel))
    assert result.returncode == ExitCode.CONFIG
    errors = result.stderr.splitlines()
    assert [e.split(":")[2] for e in errors] == [str(n) for n in lines] and len(lines) == 2, result.stderr
    for error in errors:
        assert error.startswith(f"error: {toml}:"), error
        assert "$<TARGET_FILE:...> is a generator expression kernel-matrix does not evaluate" in error
    assert "Traceback" not in result.stderr


@pytest.mark.build
def test_a_kernel_with_compiler_conditional_flags_builds_as_with_kernel_builder(tmp_path):
    """An MSVC-only flag is dropped, a GNU-only one kept, and the binding's flags evaluated
    too: the sources #error unless exactly that happened."""
    kernel = img2gray_as(
        tmp_path,
        "gray",
        'cxx-flags = ["-ffp-contract=off"]\n\n[kernel.img2gray_cpu]',
        'cxx-flags = ["-ffp-contract=off"]\n\n[kernel.img2gray_cpu]',
    )
    toml = kernel / "build.toml"
    text = toml.read_text()
    cpu_flags = 'cxx-flags = ["-ffp-contract=off"]\n'
    last = text.rindex(cpu_flags)  # the [kernel.img2gray_cpu] section's (the CUDA one's comes first)
    text = (
        text[:last]
        + 'cxx-flags = ["-ffp-contract=off", "$<$<CXX_COMPILER_ID:MSVC>:/arch:AVX2>", '
        + '"$<$<CXX_COMPILER_ID:GNU,Clang>:-DGNU_ONLY;-DALSO>"]\n'
        + text[last + len(cpu_flags) :]
    )
    text = text.replace("[torch]\n", '[torch]\ncxx-flags = ["$<$<COMPILE_LANGUAGE:CXX>:-DBINDING_CXX>"]\n', 1)
    toml.write_text(text)
    source = kernel / "csrc" / "img2gray_cpu.cpp"
    source.write_text("#if !defined(GNU_ONLY) || !defined(ALSO)\n#error flags\n#endif\n" + source.read_text())
    binding = kernel / "torch-ext" / "torch_binding.cpp"
    binding.write_text("#ifndef BINDING_CXX\n#error binding flags\n#endif\n" + binding.read_text())
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "build"), "--backend", "cpu", "--no-cache"
    )
    assert result.returncode == 0, result.stdout + result.stderr
