"""The native build of this host's variants: layout, metadata, ABI, atomicity."""

import json
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import KERNEL_DIR, REPO, kernel_matrix, needed_libraries, snapshot

from kernel_matrix.loader import Digest, DigestAlgorithm, Metadata, parse_variant

pytestmark = pytest.mark.build


@pytest.fixture(params=["cuda", "cpu"])
def variant(request, built):
    if request.param not in built:
        pytest.skip(f"no {request.param} variant can be built on this machine")
    return built[request.param]


def test_variant_directory_has_exactly_the_loader_layout(variant):
    metadata = json.loads((variant / "metadata.json").read_text())
    module = metadata["id"]
    assert re.fullmatch(rf"_img2gray_{metadata['backend']['type']}_[0-9a-f]{{7}}", module)
    files = sorted(p.relative_to(variant).as_posix() for p in variant.rglob("*") if p.is_file())
    # No img2gray/ compat folder: kernel-builder stopped making it (huggingface/kernels#736);
    # `kernel-matrix test` makes `import img2gray` work from outside the variant (test_real_kernels.py).
    assert files == sorted(["__init__.py", "_ops.py", f"{module}.abi3.so", "metadata.json"])
    assert f"torch.ops.{module}" in (variant / "_ops.py").read_text()
    # The kernel's Python package ships verbatim.
    assert (variant / "__init__.py").read_bytes() == (KERNEL_DIR / "torch-ext/img2gray/__init__.py").read_bytes()
    assert parse_variant(variant.name).variant_str == variant.name


def test_metadata_parses_with_the_loader_and_its_digest_holds(variant):
    metadata = Metadata.read_from_file(variant / "metadata.json")
    assert str(metadata.name) == "img2gray" and metadata.version == 1 and metadata.license == "Apache-2.0"
    assert metadata.python_depends == []
    metadata.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, variant))  # raises on any mismatch
    raw = json.loads((variant / "metadata.json").read_text())
    if raw["backend"]["type"] == "cuda":
        assert "9.0" in metadata.backend.archs and "7.0" not in metadata.backend.archs  # CUDA 13 dropped 7.0
    else:
        assert metadata.backend.archs is None


def test_provenance_records_the_git_commit(variant):
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    provenance = Metadata.read_from_file(variant / "metadata.json").provenance
    assert str(provenance.kernel.commit) == head.stdout.strip()  # an Oid from kernels 0.18 on
    assert provenance.kernel_builder.version.startswith("kernel-matrix ")


def test_a_tampered_file_fails_the_digest(variant, tmp_path):
    import shutil

    copy = tmp_path / variant.name
    shutil.copytree(variant, copy)
    (copy / "_ops.py").write_text((copy / "_ops.py").read_text() + "\n# tampered\n")
    metadata = Metadata.read_from_file(copy / "metadata.json")
    with pytest.raises(Exception, match="_ops.py"):
        metadata.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, copy))


def test_abi3_compliant_for_python_3_9(variant):
    from kernel_matrix.checking.abi import check_library, variant_libraries

    for library in variant_libraries(variant):
        report = check_library(library)
        assert report.abi3_violations == []
        # manylinux_2_28 depends on the host's glibc: a native build on glibc >= 2.32
        # may reference newer symbols (the container builds fix that). Whatever is
        # reported must name a glibc/libstdc++ symbol version.
        assert all(re.search(r"needs (GLIBC|GLIBCXX|CXXABI|GCC) ", v) for v in report.manylinux_violations)


def test_check_abi_command_fails_on_violations_only(variant):
    result = kernel_matrix("check-abi", str(variant), "--manylinux", "none")
    assert result.returncode == 0, result.stderr
    strict = kernel_matrix("check-abi", str(variant))
    assert strict.returncode in (0, 7)
    assert (strict.returncode == 7) == ("GLIBC" in strict.stderr)


def test_rebuilding_unchanged_sources_gives_the_same_namespace(built, object_cache, tmp_path):
    variant = built.get("cpu")
    cache = ("--cache-dir", str(object_cache))  # the namespace is the sources', whatever compiled the objects
    kernel_matrix("build", "--backend", "cpu", "--build-dir", str(tmp_path), *cache, check=True)
    again = json.loads((tmp_path / variant.name / "metadata.json").read_text())
    assert again["id"] == json.loads((variant / "metadata.json").read_text())["id"]


def test_changed_sources_give_a_new_namespace(built, kernel_copy, tmp_path):
    variant = built["cpu"]
    cpp = kernel_copy / "csrc" / "img2gray_cpu.cpp"
    cpp.write_text(cpp.read_text() + "\n// a change\n")
    kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path), check=True
    )
    rebuilt = json.loads((tmp_path / variant.name / "metadata.json").read_text())
    assert rebuilt["id"] != json.loads((variant / "metadata.json").read_text())["id"]


def test_a_failed_build_keeps_the_previous_variant_and_leaves_nothing_partial(built, kernel_copy, tmp_path):
    import shutil

    previous = built["cpu"]
    build_dir = tmp_path / "build"
    shutil.copytree(previous, build_dir / previous.name)
    before = snapshot(build_dir / previous.name)
    cpp = kernel_copy / "csrc" / "img2gray_cpu.cpp"
    cpp.write_text(cpp.read_text() + "\nthis is not C++;\n")
    result = kernel_matrix("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir))
    assert result.returncode == 5, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: compile csrc/img2gray_cpu.cpp failed")
    assert "Traceback" not in result.stderr
    assert snapshot(build_dir / previous.name) == before
    # Beside the variant: the failure's log and the objects that did compile (cached for next time).
    assert sorted(p.name for p in build_dir.iterdir()) == sorted([".cache", "logs", previous.name])
    assert "this is not C++" in (build_dir / "logs" / f"{previous.name}.log").read_text()


def test_an_interrupted_build_leaves_nothing_partial(tmp_path):
    build_dir = tmp_path / "build"
    # A shell's background job ignores SIGINT, and Python keeps that: the
    # build under test gets the default, as in a terminal.
    process = _start_cpu_build(build_dir, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 60
    while not (build_dir.exists() and any(build_dir.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(".staging-" in p.name for p in build_dir.iterdir()), "the build never started staging"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    # No variant and no staging left; only the cache and the record of what its compiles are
    # looked up by (written as the build starts: a stopped build's misses are diagnosed too).
    assert [p.name for p in build_dir.iterdir() if p.name not in (".cache", "logs")] == []
    logs = list((build_dir / "logs").iterdir()) if (build_dir / "logs").exists() else []
    assert [p.name.endswith(".cache-keys.json") for p in logs] in ([], [True])


def test_sigterm_stops_the_running_compilers_at_once(tmp_path):
    """CI cancelling a job, or `docker stop`, signals kernel-matrix alone, not its compilers. It used to
    wait for every queued compile to finish (minutes for a kernel of 60 .cu files); now it ends the
    running ones, starts no other, and leaves nothing partial."""
    import os
    import shutil

    pids = tmp_path / "compiler-pids"
    slow = tmp_path / "slow-g++"
    # Compiles take a minute (their PIDs recorded); anything else (version probes, the link) is the real g++.
    slow.write_text(
        f'#!/bin/sh\ncase " $* " in *" -c "*) echo $$ >> {pids}; exec sleep 60;; esac\n'
        f'exec {shutil.which("g++")} "$@"\n'
    )
    slow.chmod(0o755)
    build_dir = tmp_path / "build"
    process = _start_cpu_build(build_dir, "--no-cache", env={**os.environ, "CXX": str(slow)})
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids.exists(), "no compile started"
    time.sleep(0.5)  # the other compiles start too
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=50)
    assert process.returncode == 130, stderr
    assert time.monotonic() - started < 15, "it waited for the compiles"
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):  # every compiler it started has ended
            os.kill(pid, 0)
    assert [p.name for p in build_dir.iterdir() if p.name != ".cache"] == []


def _start_cpu_build(build_dir, *options, **popen) -> subprocess.Popen:
    """`kernel-matrix build --backend cpu` of img2gray, started and left running (to be interrupted)."""
    argv = [sys.executable, "-m", "kernel_matrix", "build", "--backend", "cpu", *options, "--build-dir", str(build_dir)]
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_compiler_that_links_libstdcxx_statically_is_refused(tmp_path):
    """Seen on the H200 host: its CXX linked libstdc++ statically, and the variant crashed in the first
    TORCH_CHECK message that formats a shape. Such a build is refused in one line and writes no variant."""
    import os
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    wrapper = tmp_path / "g++"
    wrapper.write_text('#!/bin/sh\nexec g++ "$@" -static-libstdc++\n')
    wrapper.chmod(0o755)
    build_dir = tmp_path / "build"
    result = kernel_matrix(
        "build",
        "--backend",
        "cpu",
        "--no-cache",
        "--build-dir",
        str(build_dir),
        env={**os.environ, "CXX": str(wrapper)},
    )
    assert result.returncode == 4, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "linked libstdc++ statically" in errors[0] and "CXX" in errors[0]
    assert not [p for p in build_dir.glob("torch*") if (p / "metadata.json").exists()]


def _worker(request: dict, tmp_path, name: str) -> subprocess.CompletedProcess:
    """The build container's entry point, run here on a request file as the host writes it."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(request))
    argv = [sys.executable, "-m", "kernel_matrix.cli.worker", str(path)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)


def test_a_build_request_makes_exactly_that_cell_or_nothing(tmp_path):
    """A build container's request: the cell's backend and capabilities are used, and a builder that
    would make another variant (a wrong image) is refused before anything is written."""
    from kernel_matrix.building.native_build import plan_build

    host = plan_build(KERNEL_DIR, backend="cpu").variant.name
    request = {"kernel_dir": str(KERNEL_DIR), "variant": host, "backend": "cpu", "capabilities": []}
    result = _worker({**request, "out_dir": str(tmp_path / "ok")}, tmp_path, "ok")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ok" / host / "metadata.json").is_file()
    other = host.replace("torch", "torch9", 1)
    result = _worker({**request, "variant": other, "out_dir": str(tmp_path / "wrong")}, tmp_path, "wrong")
    assert result.returncode == 4 and result.stderr.count("\n") == 1, result.stderr
    assert f"makes {host}, not the cell {other}" in result.stderr
    assert not (tmp_path / "wrong").exists()
    result = _worker({**request, "out_dir": str(tmp_path / "bad"), "cache_dir": "/"}, tmp_path, "bad")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "bad.json: not a build request: cache_dir: Extra inputs are not permitted" in result.stderr
    # The public CLI has no hidden door into the container's build any more.
    result = kernel_matrix("build", "--cell", "{}", "--build-dir", str(tmp_path / "cli"))
    assert result.returncode == 2 and "No such option: --cell" in result.stderr


@pytest.mark.build
def test_sources_compile_as_kernel_builders_release_target_does(kernel_copy, tmp_path):
    """kernel-builder's CMake target (utils.cmake): csrc/ on every source's include path, the
    C++ standard of the torch (17 below 2.12, 20 from it), the definitions torch's CMake
    package gives a target linking `torch`, a Release build (NDEBUG) and Python's stable API
    of USE_SABI 3. The kernel's own
    source checks each at compile time: the build fails where one is missing."""
    from kernel_matrix.building.compile import cxx_standard
    from kernel_matrix.building.torch_cmake import interface_defines
    from kernel_matrix.planning.toolchain import probe_torch

    torch = probe_torch(None)
    standard = {"17": "201703L", "20": "202002L"}[cxx_standard(torch.version)]
    checks = [
        "#ifndef NDEBUG\n#error not a Release build\n#endif",
        f"#if __cplusplus != {standard}\n#error not the C++ standard of this torch\n#endif",
        "#ifdef __STRICT_ANSI__\n#error not the GNU dialect CMake passes (-std=gnu++NN)\n#endif",
        "#if Py_LIMITED_API != 3\n#error not the stable API of USE_SABI 3 (CMake)\n#endif",
        "#include <torch/library.h>",  # warns under -Wshadow, unless a system header (below)
        *(f"#ifndef {d}\n#error {d} not defined\n#endif" for d in interface_defines(torch.torch_dir, cuda=False)),
    ]
    # A source in a folder of its own includes csrc/img2gray_cpu.h by its name alone.
    (kernel_copy / "csrc" / "cpu").mkdir()
    source = kernel_copy / "csrc" / "img2gray_cpu.cpp"
    # A static of a class of default visibility: the library's own, not STB_GNU_UNIQUE (-fno-gnu-unique).
    unique = (
        'struct __attribute__((visibility("default"))) KmRegistry {\n'
        "  static KmRegistry& get() { static KmRegistry r; return r; }\n};\n"
        "KmRegistry& km_registry() { return KmRegistry::get(); }\n"
    )
    (kernel_copy / "csrc" / "cpu" / "img2gray_cpu.cpp").write_text(
        "\n".join(checks) + "\n" + source.read_text() + "\n" + unique
    )
    source.unlink()
    toml = kernel_copy / "build.toml"
    text = toml.read_text().replace('"csrc/img2gray_cpu.cpp"', '"csrc/cpu/img2gray_cpu.cpp"')
    # torch's headers are system headers (-isystem): their warnings never stop a -Werror build.
    head, cpu = text.split("[kernel.img2gray_cpu]\n")
    cpu = cpu.replace('cxx-flags = ["-ffp-contract=off"]', 'cxx-flags = ["-ffp-contract=off", "-Wshadow", "-Werror"]')
    toml.write_text(f"{head}[kernel.img2gray_cpu]\n{cpu}")
    build = ("build", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "build"), "--backend", "cpu")
    result = kernel_matrix(*build, "--no-cache")
    assert result.returncode == 0, result.stderr[-3000:]
    (library,) = (tmp_path / "build").glob("*/*.so")
    symbols = subprocess.run(["readelf", "--syms", "-W", str(library)], capture_output=True, text=True, check=True)
    assert "KmRegistry" in symbols.stdout and " UNIQUE " not in symbols.stdout


@pytest.mark.parametrize(("torch", "std"), [("2.10.0", "17"), ("2.11.0+cu130", "17"), ("2.12.0", "20")])
def test_the_cxx_standard_follows_the_torch_as_kernel_builders(torch, std):
    from kernel_matrix.building.compile import cxx_standard

    assert cxx_standard(torch) == std


@pytest.mark.build
@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_torchs_libraries_are_needed_as_torchs_cmake_package_links_them(built, backend):
    """torch, torch_cpu (and torch_cuda for CUDA) stay DT_NEEDED under the linker's --as-needed
    (Debian's default): a kernel calling cuBLASLt itself finds cublasLt* through libtorch_cuda's
    own dependencies, as in kernel-builder's CMake link (Caffe2Targets.cmake: -Wl,--no-as-needed)."""
    if backend not in built:
        pytest.skip(f"no {backend} variant can be built on this machine")
    (library,) = built[backend].glob("*.so")
    needed = needed_libraries(library)
    wanted = {"libtorch.so", "libtorch_cpu.so", *(["libtorch_cuda.so"] if backend == "cuda" else [])}
    assert wanted <= set(needed), needed
    if backend == "cpu":
        assert "libtorch_cuda.so" not in needed, needed
