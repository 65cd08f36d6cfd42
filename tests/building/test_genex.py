"""CMake generator expressions in a kernel's flags, evaluated as kernel-builder's CMake target
evaluates them (a third-party kernel's `$<$<CXX_COMPILER_ID:MSVC>:/arch:AVX2>` reached g++ as a
file name before)."""

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import img2gray_as, kernel_matrix

from kernel_matrix.building.provenance import compiler_version
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
        ("$<$<CONFIG:Release>:-O3", "is not closed"),
        ("$<NOT:2>", "takes 0 or 1, not '2'"),
        ("$<IF:1,a>", "takes 3 arguments, not 2"),
        ("$<$<CONFIG>:-O3>", "the condition of $<$<CONFIG>:...> evaluates to 'Release', not 0 or 1"),
        ("-DSYS=${CMAKE_SYSTEM_NAME}", "${CMAKE_SYSTEM_NAME} is a CMake variable"),
    ],
)
def test_an_expression_kernel_matrix_cannot_evaluate_is_named(flag, message):
    with pytest.raises(GenexError) as raised:
        check([flag])
    assert message in str(raised.value)


def test_a_branch_no_build_takes_is_not_looked_into():
    """An MSVC-only flag may hold what only MSVC builds need (CMake 3.28+ evaluates no more)."""
    msvc_only = "$<$<CXX_COMPILER_ID:MSVC>:$<$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,19.29>:/Zc:preprocessor>>"
    check([msvc_only, "-O2"])
    assert expand([msvc_only, "-O2"], CXX) == ["-O2"]
    cuda = Context("CUDA", cuda_version="13.0.88")
    assert expand(
        ["$<$<VERSION_GREATER_EQUAL:$<CUDA_COMPILER_VERSION>,12.8>:-static-global-template-stub=false>"], cuda
    ) == ["-static-global-template-stub=false"]


FLAG_CASES = [
    ["$<$<CXX_COMPILER_ID:MSVC>:/arch:AVX2>", "-DKEEP"],
    ["$<$<CONFIG:release>:-DCFG>", "$<$<PLATFORM_ID:linux>:-DLOWER_PLATFORM>"],
    ["$<1:-DA,B>", "$<1:-DA:B>", "$<0:-DC,D:E>", "-DAFTER0"],
    ["$<$<BOOL:notfound>:-Dnotfound>", "$<$<BOOL:NOTFOUND>:-DNOTFOUND>", "$<$<BOOL:no>:-Dno>", "$<$<BOOL:Y>:-DY>"],
    ["-DGT=1>0"],
    ["-DA;-DB", "-DSA$<SEMICOLON>-DSB", "-DA[;]B", "", "-DAFTER_EMPTY"],
    ["$<IF:$<CONFIG:Debug>,-O0,-O3>", "-DLANG=$<COMPILE_LANGUAGE>", "-DLC=$<LOWER_CASE:$<CONFIG>>"],
    ["$<$<CONFIG:Release>:-DSPAN_A", "-DSPAN_B>"],
    ["$<$<STREQUAL:$<UPPER_CASE:$<CONFIG>>,RELEASE>:-DSTREQ>", "$<$<CONFIG:Release,Debug>:-DMULTI>"],
    ["-DANG=$<ANGLE-R>", "-DCOMMA=$<1:$<COMMA>>", "$<1:-DA>b>", "$<BUILD_INTERFACE:-DBI>"],
    ["$<$<NOT:$<CXX_COMPILER_ID:MSVC>>:-Wall;-Wextra>", "$<$<COMPILE_LANG_AND_ID:CXX,GNU>:-DLAI>"],
    ["$<$<COMPILE_LANGUAGE:CXX,CUDA>:-DLANGLIST>", "$<$<C_COMPILER_ID:GNU>:-DCID>", "-DDUP", "-DDUP"],
    ["$<$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,5.0>:-DNEWGCC>", "$<$<IN_LIST:b,a;b>:-DIN>"],
]


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("g++") is None, reason="needs cmake and g++")
def test_flags_mean_what_a_real_cmake_makes_of_them(tmp_path):
    """Each flag list given to a C++ source as kernel-builder's kernel.cmake gives it
    (COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CXX>:a;b;...>", through a function's arguments),
    configured by this host's CMake with g++: its compile line is what expand() says."""
    lines = [
        "cmake_minimum_required(VERSION 3.20)",
        "project(flags LANGUAGES CXX)",
        "set(CMAKE_EXPORT_COMPILE_COMMANDS ON)",
        "set(CMAKE_BUILD_TYPE Release)",
        "function(component)",
        '  cmake_parse_arguments(KERNEL "" "" "SOURCES;CXX_FLAGS" ${ARGN})',
        "  foreach(_SRC ${KERNEL_SOURCES})",
        '    set_property(SOURCE ${_SRC} APPEND PROPERTY COMPILE_OPTIONS "-DBEGIN_FLAGS")',
        "    set_property(SOURCE ${_SRC} APPEND PROPERTY COMPILE_OPTIONS",
        '                 "$<$<COMPILE_LANGUAGE:CXX>:${KERNEL_CXX_FLAGS}>")',
        '    set_property(SOURCE ${_SRC} APPEND PROPERTY COMPILE_OPTIONS "-DEND_FLAGS")',
        "  endforeach()",
        "endfunction()",
    ]
    for i, flags in enumerate(FLAG_CASES):
        (tmp_path / f"s{i}.cpp").write_text("int f() { return 0; }\n")
        lines.append(f'component(SOURCES s{i}.cpp CXX_FLAGS "{";".join(flags)}")')
    lines.append(f"add_library(flags OBJECT {' '.join(f's{i}.cpp' for i in range(len(FLAG_CASES)))})")
    (tmp_path / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    configured = subprocess.run(
        ["cmake", "-G", "Unix Makefiles", "-S", str(tmp_path), "-B", str(tmp_path / "b"), "-DCMAKE_CXX_COMPILER=g++"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert configured.returncode == 0, configured.stderr[-3000:]
    commands = {
        Path(c["file"]).name: shlex.split(c["command"])
        for c in json.loads((tmp_path / "b" / "compile_commands.json").read_text())
    }
    gxx = Context("CXX", cxx_version=compiler_version(shutil.which("g++") or "g++"))
    for i, flags in enumerate(FLAG_CASES):
        argv = commands[f"s{i}.cpp"]
        cmake = argv[argv.index("-DBEGIN_FLAGS") + 1 : argv.index("-DEND_FLAGS")]
        assert expand(flags, gxx) == cmake, flags


@pytest.mark.processes
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


@pytest.mark.processes
def test_an_expression_only_this_build_meets_is_one_line_at_build_time(tmp_path):
    """The load check evaluates the builds kernel-matrix makes in general; a branch taken for
    this host's exact g++ is evaluated when this host builds, and refused there in one line."""
    gxx = compiler_version(shutil.which("g++") or "g++")
    flag = f'"$<$<VERSION_EQUAL:$<CXX_COMPILER_VERSION>,{gxx}>:$<TARGET_FILE:x>>"'
    kernel = img2gray_as(tmp_path, "gray", 'cxx-flags = ["-ffp-contract=off"]\n', f"cxx-flags = [{flag}]\n")
    assert kernel_matrix("matrix", "--kernel-dir", str(kernel)).returncode == 0
    result = kernel_matrix("build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "b"), "--backend", "cpu")
    assert result.returncode == ExitCode.CONFIG, result.stdout + result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error")] == [
        f"error: {kernel / 'build.toml'}: [kernel.img2gray_cpu] cxx-flags: "
        "$<TARGET_FILE:...> is a generator expression kernel-matrix does not evaluate"
    ], result.stderr
