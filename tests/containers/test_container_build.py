"""Matrix cells built in containers on a real engine, from the offline base
(debootstrap) and a builder image made once and reused."""

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import BUILT_CAPABILITIES, KERNEL_DIR, ONE_KERNEL_TEST, container_build_cli, kernel_matrix

from kernel_matrix.checking import abi
from kernel_matrix.cli.render import summary_markdown
from kernel_matrix.containers import images, pool
from kernel_matrix.containers.cell import RUN_LABEL
from kernel_matrix.errors import AbiError, BuildError, ExitCode
from kernel_matrix.planning.matrix import load_matrix, select
from kernel_matrix.running import cells as cell_runner

pytestmark = pytest.mark.build


def test_a_cell_builds_in_a_container_and_loads_on_the_host(local_cuda_cell, object_cache, tmp_path):
    name = local_cuda_cell.name
    # One capability, as `built`'s: CUDA 13.0's seven defaults took 65 s of CI's gate here, and
    # compiling them all is the release-target test's job (tests/building/test_native_build.py).
    options = ("--cache-dir", str(object_cache), "--cuda-capabilities", BUILT_CAPABILITIES)
    result = container_build_cli(local_cuda_cell, tmp_path, KERNEL_DIR, *options)
    assert result.returncode == 0, result.stdout + result.stderr
    variant = tmp_path / name
    metadata = json.loads((variant / "metadata.json").read_text())
    assert metadata["backend"]["type"] == "cuda" and metadata["provenance"]["kernel"]["commit"]
    # What a rebuild needs: the builder image it was made in.
    assert metadata["provenance"]["toolchain"]["builder-image"].startswith("sha256:")
    assert (tmp_path / "summary.md").read_text().count(f"| {name} | built |") == 1
    # Outputs belong to the invoking user, not the container's root.
    assert all(p.stat().st_uid == os.getuid() for p in variant.rglob("*"))
    import torch

    if torch.__version__.startswith(local_cuda_cell.variant.torch + "."):
        tested = kernel_matrix("test", str(variant), *ONE_KERNEL_TEST)
        assert tested.returncode == 0, tested.stdout[-3000:]
    abi = kernel_matrix("check-abi", str(variant), "--manylinux", "none")
    assert abi.returncode == 0, abi.stderr


def test_the_newest_torchs_pypi_cuda_cell_builds_in_its_container_and_passes_the_abi_check(engine, tmp_path):
    """Following upstream (issue 36): the newest torch of the matrix (2.15; its PyPI wheel is CUDA 13.2)
    builds in its builder image, whatever CUDA this host has (the image brings PyPI's nvcc), and its
    library passes kernel-abi-check. The host's torch is older, so the variant is not loaded here."""
    cells = select(load_matrix(KERNEL_DIR.parent / "build_matrix.yaml"), profile="full")
    newest = max(tuple(int(x) for x in c.variant.torch.split(".")) for c in cells if c.variant.torch)
    (cell,) = [
        c
        for c in cells
        if c.torch_index == "pypi"
        and c.variant.cuda
        and c.variant.arch == os.uname().machine
        and tuple(int(x) for x in c.variant.torch.split(".")) == newest
    ]
    result = container_build_cli(cell, tmp_path, KERNEL_DIR, "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    metadata = json.loads((tmp_path / cell.name / "metadata.json").read_text())
    assert metadata["backend"] == {**metadata["backend"], "type": "cuda"}
    abi = kernel_matrix("check-abi", cell.name, "--build-dir", str(tmp_path), "--kernel-dir", str(KERNEL_DIR))
    assert abi.returncode == 0, abi.stdout + abi.stderr
    assert re.search(r"\.abi3\.so\s*│ ok\s*│ ok", abi.stdout + abi.stderr), abi.stdout + abi.stderr  # abi3, manylinux


def test_rebuilding_reuses_the_images_and_skips_what_is_built(
    local_cuda_cell, kernel_copy, object_cache, tmp_path, monkeypatch
):
    def build():
        result = container_build_cli(local_cuda_cell, tmp_path, kernel_copy, "--cache-dir", str(object_cache))
        assert result.returncode == 0, result.stderr
        assert "creating kernel-matrix/" not in result.stderr  # images made by the test above, found by hash
        return (tmp_path / "summary.md").read_text()

    assert f"| {local_cuda_cell.name} | built |" in build()
    so = next((tmp_path / local_cuda_cell.name).glob("*.so"))
    before = so.stat().st_mtime_ns
    assert f"| {local_cuda_cell.name} | up to date |" in build()  # nothing changed: nothing compiled
    assert so.stat().st_mtime_ns == before
    (kernel_copy / "csrc" / "img2gray_cuda.cu").write_text(
        (kernel_copy / "csrc" / "img2gray_cuda.cu").read_text() + "\n"
    )
    assert f"| {local_cuda_cell.name} | built |" in build()  # a source changed: built again
    # The caller's SOURCE_DATE_EPOCH reaches the container (it sees none of the caller's
    # environment) and is an input: the cell is built again, and its variant records it.
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "315532800")
    assert f"| {local_cuda_cell.name} | built |" in build()
    metadata = json.loads((tmp_path / local_cuda_cell.name / "metadata.json").read_text())
    assert metadata["provenance"]["toolchain"]["source-date-epoch"] == "315532800"


def test_a_compile_error_fails_that_cell_with_its_log(local_cuda_cell, kernel_copy, object_cache, tmp_path):
    cu = kernel_copy / "csrc" / "img2gray_cuda.cu"
    cu.write_text(cu.read_text() + "\nthis does not compile;\n")
    result = container_build_cli(local_cuda_cell, tmp_path, kernel_copy, "--cache-dir", str(object_cache))
    assert result.returncode == ExitCode.BUILD
    assert "FAILED" in result.stdout and f"1 of 1 cells failed: {local_cuda_cell.name}" in result.stderr
    logs = tmp_path / "logs"
    assert "img2gray_cuda.cu(" in (logs / f"{local_cuda_cell.name}.container.log").read_text()
    assert "this does not compile" in (logs / f"{local_cuda_cell.name}.log").read_text()  # the compiler's own log
    assert not (tmp_path / local_cuda_cell.name).exists()


def test_one_failing_cell_never_stops_the_others(monkeypatch, tmp_path):
    cells = select(load_matrix(KERNEL_DIR.parent / "build_matrix.yaml"), only="torch=2.14,arch=x86_64")
    built = []

    def fake_build(client, cell, image, **kwargs):
        if cell.variant.cuda == "12.6":
            raise BuildError(f"{cell.name}: compile failed")
        built.append(cell.name)
        return tmp_path / cell.name, {"compiled": 1, "cached": 2}

    monkeypatch.setattr(pool, "build_cell", fake_build)
    monkeypatch.setattr(images, "offline_base", lambda client, log: "base")
    monkeypatch.setattr(images, "builder_image", lambda client, base, **kw: "builder")
    from types import SimpleNamespace

    client = SimpleNamespace(images=SimpleNamespace(get=lambda tag: SimpleNamespace(id="sha256:0")))
    results = pool.build_cells(
        client, cells, kernel_dir=KERNEL_DIR, build_dir=tmp_path, image_kind="offline", jobs=None, log=lambda m: None
    )
    assert [r.ok for r in results] == [c.variant.cuda != "12.6" for c in cells]
    assert sorted(built) == sorted(c.name for c in cells if c.variant.cuda != "12.6")
    assert {r.objects for r in results if r.ok} == {"2 of 3"}
    summary = summary_markdown(results).splitlines()
    assert summary[0].startswith("| kernel | variant | status | seconds | .so size | objects cached |")
    assert any("| FAILED |" in line and "compile failed" in line for line in summary)


def test_the_abi_gate_fails_a_library_that_needs_a_newer_glibc(tmp_path):
    """pthread_create moved into libc in glibc 2.34: a .so linked here needs GLIBC_2.34."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    if tuple(int(x) for x in glibc.split(".")[:2]) < (2, 34):
        pytest.skip(f"glibc {glibc}: pthread_create is not a GLIBC_2.34 symbol here")
    (tmp_path / "new.c").write_text(
        "#include <pthread.h>\nstatic void *f(void *a) { return a; }\n"
        "int start(pthread_t *t) { return pthread_create(t, 0, f, 0); }\n"
    )
    variant = tmp_path / "variant"
    variant.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "new.c"), "-o", str(variant / "_x.abi3.so")], check=True)
    with pytest.raises(AbiError, match=r"variant: _x.abi3.so fails the ABI check \(manylinux_2_28.*GLIBC"):
        abi.gate(variant, "variant")


def test_the_compat_header_keeps_libdl_calls_at_glibc_2_28(tmp_path):
    """NVTX (in cub's Device* algorithms: megablocks) calls dlopen, dlclose and dlerror; built on
    glibc >= 2.34 they bound to GLIBC_2.34 and failed manylinux_2_28 (found on the H200)."""
    from kernel_matrix.building.native_build import COMPAT_SYMBOLS

    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    if tuple(int(x) for x in glibc.split(".")[:2]) < (2, 34):
        pytest.skip(f"glibc {glibc}: libdl's symbols have no GLIBC_2.34 version here")
    (tmp_path / "dl.c").write_text(
        "#include <dlfcn.h>\n"
        "void *use(const char *p) { void *h = dlopen(p, 0); if (!h) return dlerror(); dlclose(h);"
        " return dlsym(h, p); }\n"
    )
    variant = tmp_path / "variant"
    variant.mkdir()
    compile_ = ["gcc", "-shared", "-fPIC", "-include", str(COMPAT_SYMBOLS), str(tmp_path / "dl.c")]
    subprocess.run([*compile_, "-o", str(variant / "_x.abi3.so")], check=True)
    abi.gate(variant, "variant")  # passes: every libdl call at its 2.2.5/2.17 version
    symbols = subprocess.run(["objdump", "-T", str(variant / "_x.abi3.so")], capture_output=True, text=True).stdout
    assert "GLIBC_2.34" not in symbols and "dlopen" in symbols


def _glibc_at_least(major_minor: tuple[int, int]) -> bool:
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    return tuple(int(x) for x in glibc.split(".")[:2]) >= major_minor


def _dynamic_symbols(tmp_path, source: str, *, compat: bool) -> str:
    """objdump -T of a C++ library built from source by g++, with or without the compat header."""
    from kernel_matrix.building.native_build import COMPAT_SYMBOLS

    name = "with" if compat else "without"
    (tmp_path / f"{name}.cpp").write_text(source)
    variant = tmp_path / name
    variant.mkdir()
    include = ["-include", str(COMPAT_SYMBOLS)] if compat else []
    command = ["g++", "-O2", "-shared", "-fPIC", *include, str(tmp_path / f"{name}.cpp"), "-o"]
    subprocess.run([*command, str(variant / "_x.abi3.so")], check=True)
    if compat:
        abi.gate(variant, "variant")
    return subprocess.run(["objdump", "-T", str(variant / "_x.abi3.so")], capture_output=True, text=True).stdout


def test_a_library_needing_a_newer_libstdcxx_is_told_to_use_the_official_builder(tmp_path):
    """huggingface/kernels' cpp20-symbols example (std::to_chars of a double: GLIBCXX_3.4.29) fails
    manylinux_2_28 wherever the system's libstdc++ is newer; no header can keep C++ library code out."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    (tmp_path / "cxx.cpp").write_text(
        "#include <charconv>\n"
        'extern "C" int use(char *b, char *e, double x) { return std::to_chars(b, e, x).ptr - b; }\n'
    )
    variant = tmp_path / "variant"
    variant.mkdir()
    command = ["g++", "-std=c++17", "-shared", "-fPIC", str(tmp_path / "cxx.cpp"), "-o", str(variant / "_x.abi3.so")]
    if subprocess.run(command, capture_output=True).returncode != 0:
        pytest.skip("this g++ has no std::to_chars for double (GCC < 11)")
    with pytest.raises(AbiError, match=r"GLIBCXX.*; build it with --image official: this system's libstdc\+\+"):
        abi.gate(variant, "variant")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.skipif(not _glibc_at_least((2, 29)), reason="exp, log, pow have no GLIBC_2.29 version here")
def test_the_compat_header_keeps_math_calls_at_glibc_2_28(tmp_path):
    """glibc 2.29 versioned exp, exp2, log, log2 and pow anew: a third-party kernel's launcher
    (fp64-emu: log2 of a row norm) built here failed manylinux_2_28 with `log2 needs GLIBC 2.29`."""
    source = (
        "#include <cmath>\n"
        'extern "C" double use(double x, double y) {'
        " return std::exp(x) + std::exp2(x) + std::log(x) + std::log2(y) + std::pow(x, y); }\n"
    )
    assert "GLIBC_2.29" in _dynamic_symbols(tmp_path, source, compat=False)
    symbols = _dynamic_symbols(tmp_path, source, compat=True)
    assert "GLIBC_2.29" not in symbols and "log2" in symbols


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.skipif(not _glibc_at_least((2, 34)), reason="libpthread's functions have no GLIBC_2.34 version here")
def test_the_compat_header_keeps_thread_calls_at_glibc_2_28(tmp_path):
    """glibc 2.34 moved libpthread and librt into libc under new versions: FlashRT's
    small-matrix-cholesky (std::call_once) built here failed `pthread_once needs GLIBC 2.34`."""
    source = (
        "#include <mutex>\n#include <thread>\n#include <semaphore.h>\n#include <time.h>\n"
        "static std::once_flag flag;\n"
        'extern "C" int use(sem_t *s, timer_t *t) { int v = 0; std::call_once(flag, [&] { v = 1; });'
        " std::thread([&] { v += 1; }).join(); sem_post(s); return v + timer_create(CLOCK_MONOTONIC, nullptr, t); }\n"
    )
    assert "GLIBC_2.34" in _dynamic_symbols(tmp_path, source, compat=False)
    symbols = _dynamic_symbols(tmp_path, source, compat=True)
    assert "GLIBC_2.34" not in symbols
    for name, version in (("pthread_once", "2.2.5"), ("sem_post", "2.2.5"), ("timer_create", "2.3.3")):
        if os.uname().machine == "x86_64":
            assert re.search(rf"\(GLIBC_{re.escape(version)}\)\s+{name}$", symbols, flags=re.M), name


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize(
    ("minor", "bound"),
    [
        (28, set()),
        (29, {"exp", "exp2", "log", "log2", "pow"}),
        (
            33,
            {"exp", "exp2", "log", "log2", "pow"}
            | {f"pthread_{f}" for f in ("attr_setaffinity_np", "getaffinity_np")}
            | {"pthread_getattr_np", "pthread_sigmask"},
        ),
        (38, None),
    ],
)
def test_the_compat_header_binds_only_what_the_building_glibc_moved(tmp_path, minor, bound):
    """On glibc 2.28 (the official images) the moved functions are not in libc yet, and ld refuses
    a versioned reference no library on its command line defines: each block applies from the glibc
    release that moved its functions (a features.h of that glibc, in front of the real one)."""
    from kernel_matrix.building.native_build import COMPAT_SYMBOLS

    fake = tmp_path / "include"
    fake.mkdir()
    (fake / "features.h").write_text(
        f"#define __GLIBC__ 2\n#define __GLIBC_MINOR__ {minor}\n"
        "#define __GLIBC_PREREQ(maj, min) ((__GLIBC__ << 16) + __GLIBC_MINOR__ >= ((maj) << 16) + (min))\n"
    )
    (tmp_path / "empty.c").write_text("")
    out = subprocess.run(
        ["gcc", "-E", "-P", "-I", str(fake), "-include", str(COMPAT_SYMBOLS), str(tmp_path / "empty.c")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    symvers = set(re.findall(r'\.symver " "(\w+)"|\.symver (\w+),', out))
    names = {a or b for a, b in symvers}
    if bound is None:  # 2.34 and later: everything, pthread_once included
        assert {"pow", "pthread_sigmask", "pthread_once", "dlsym"} <= names
    else:
        assert names == bound, names


@pytest.mark.skipif(os.uname().machine != "x86_64" or shutil.which("objdump") is None, reason="x86_64, objdump")
@pytest.mark.skipif(not _glibc_at_least((2, 34)), reason="the table is read against a libc of 2.34 or later")
def test_the_compat_headers_table_is_this_libcs_glibc_2_28_versions():
    """Every function this libc exports under GLIBC_2.32 or GLIBC_2.34 as its default, with an
    older version glibc 2.28 already had, is in the compat header's table at the newest such
    version (the one glibc 2.28 makes the default; aarch64: that or 2.17, its first)."""
    from kernel_matrix.building.native_build import COMPAT_SYMBOLS

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    # The libc this process runs on (the one the compiles here link against).
    libc = next(line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/libc.so" in line)
    dump = subprocess.run(["objdump", "-T", libc], capture_output=True, text=True, check=True).stdout
    default: dict[str, str] = {}
    older: dict[str, list[str]] = {}
    for hidden, number, name in re.findall(r" DF \.text\s+\S+\s+(\(?)GLIBC_([\d.]+)\)?\s+(\S+)$", dump, flags=re.M):
        if hidden:
            older.setdefault(name, []).append(number)
        else:
            default[name] = number
    expected = {}
    for name, number in default.items():
        before = [v for v in older.get(name, []) if version(v) <= (2, 28)]
        if number in ("2.32", "2.34") and before:
            x86_64 = max(before, key=version)
            expected[name] = (x86_64, x86_64 if version(x86_64) >= (2, 17) else "2.17")
    moved = COMPAT_SYMBOLS.read_text().split("#if __GLIBC_PREREQ(2, 32)", 1)[1]  # the 2.32 and 2.34 blocks
    table = {
        name: (x86_64, aarch64)
        for name, x86_64, aarch64 in re.findall(
            r'^KERNEL_MATRIX_GLIBC_2_28\((\w+), "([\d.]+)", "([\d.]+)"\)$', moved, flags=re.M
        )
    }
    # Left out on purpose: an executable's entry point, a _Float128 function aarch64 has not, and what glibc
    # 2.28 kept in libanl, libresolv and libutil, which torch does not load (the call would not resolve there).
    left = {"__libc_start_main", "__isnanf128"}
    kept_apart = ("forkpty", "gai_", "getaddrinfo_a", "login", "logout", "logwtmp", "ns_name_", "openpty")
    assert {name for name in set(expected) - set(table) if not name.startswith(kept_apart)} <= left
    assert not [name for name in table if name.startswith(kept_apart)]
    assert {name: expected[name] for name in table if name in expected} == {
        name: row for name, row in table.items() if name in expected
    }
    assert set(table) <= set(expected), set(table) - set(expected)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.skipif(not _glibc_at_least((2, 38)), reason="glibc < 2.38 has no C23 sscanf/strtol to avoid")
def test_the_compat_header_keeps_scanf_and_strtol_before_c23(tmp_path):
    """glibc 2.38 redirects sscanf and strtol to __isoc23_*@GLIBC_2.38 under _GNU_SOURCE (always
    on in g++): deep-gemm built on the H200 failed with `__isoc23_sscanf needs GLIBC 2.38`."""
    source = (
        "#include <cstdio>\n#include <cstdlib>\n"
        'extern "C" long use(const char *s) { int v = 0; std::sscanf(s, "%d", &v);'
        " return v + std::strtol(s, nullptr, 10); }\n"
    )
    assert "__isoc23_" in _dynamic_symbols(tmp_path, source, compat=False)
    symbols = _dynamic_symbols(tmp_path, source, compat=True)
    assert "__isoc23_" not in symbols and "sscanf" in symbols


def test_no_engine_is_one_line_with_its_exit_code(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    result = kernel_matrix(
        "build", "--variant", "torch214-cxx11-cu130-x86_64-linux", "--build-dir", str(tmp_path), env=env
    )
    assert result.returncode == ExitCode.ENGINE
    assert result.stderr.count("\n") == 1 and "scripts/docker-engine start" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_build_leaves_no_container_and_no_variant(local_cuda_cell, engine, tmp_path, signum):
    client = engine
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kernel_matrix",
            "build",
            "--variant",
            local_cuda_cell.name,
            "--image",
            "offline",
            "--build-dir",
            str(tmp_path),
        ],
        cwd=KERNEL_DIR.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell's background job ignores SIGINT, and Python keeps that: the
        # build under test gets the default, as in a terminal.
        preexec_fn=_default_sigint,
    )

    def its_containers(**kwargs):
        # This build's own (its run label begins with its PID): another test's build may
        # run beside it on the same engine (pytest-xdist), and is none of this one's; it may
        # also be removed between the listing and its inspection (ignore_removed).
        boxes = client.containers.list(filters={"label": "kernel-matrix"}, ignore_removed=True, **kwargs)
        return [box for box in boxes if box.labels.get(RUN_LABEL, "").startswith(f"{process.pid}-")]

    deadline = time.monotonic() + 300
    while not its_containers() and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    time.sleep(1)  # let the compile start inside
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode in (130, 128 + signum), stderr
    assert its_containers(all=True) == []
    assert not (tmp_path / local_cuda_cell.name).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name not in ("logs", ".cache")] == []  # no variant, no staging


def test_shell_enters_the_builder_hardened_like_a_build(local_cuda_cell, kernel_copy):
    """Issue 23 item 3: the kernel is read-only and the shell runs as the build's user,
    with a read-only root, a writable /tmp and the build's caps."""
    from kernel_matrix.containers.engine import PIDS_LIMIT, build_user

    script = (
        "id -u; touch /src/from-the-shell 2>/dev/null && echo src=written || echo src=refused; "
        "touch /usr/x 2>/dev/null && echo root=written || echo root=refused; touch /tmp/x && echo tmp=written; "
        "cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null | head -1; "
        "nvcc --version | tail -n 1 && python -m kernel_matrix --help >/dev/null"
    )
    result = kernel_matrix(
        "shell", local_cuda_cell.name, "--image", "offline", "--kernel-dir", str(kernel_copy), "--", "sh", "-c", script
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:5] == [str(build_user()[0]), "src=refused", "root=refused", "tmp=written", str(PIDS_LIMIT)]
    assert "Build cuda_13" in result.stdout
    assert not (kernel_copy / "from-the-shell").exists()
    failing = kernel_matrix("shell", local_cuda_cell.name, "--image", "offline", "--", "sh", "-c", "exit 7")
    assert failing.returncode == 7


def test_a_writable_shell_leaves_no_set_id_program_in_the_kernel(local_cuda_cell, kernel_copy):
    """--writable (a developer's own code): files made in /src are the caller's; the attack of
    issue 23 (cp /bin/sh /src/suid-sh; chmod 4755) leaves a plain program, not a setuid one."""
    script = "touch /src/from-the-shell && cp /bin/sh /src/suid-sh && chmod 4755 /src/suid-sh && ls -l /src/suid-sh"
    result = kernel_matrix(
        "shell",
        local_cuda_cell.name,
        "--image",
        "offline",
        "--kernel-dir",
        str(kernel_copy),
        "--writable",
        "--",
        "sh",
        "-c",
        script,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "-rwsr-xr-x" in result.stdout  # it was setuid inside the container ...
    made = kernel_copy / "from-the-shell"
    assert made.is_file() and made.stat().st_uid == os.getuid()
    mode = (kernel_copy / "suid-sh").stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID)  # ... and is not once the shell is gone
    assert "removed the set-id bits of" in result.stderr and "suid-sh" in result.stderr


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_dependencys_headers_reach_the_build_container(local_cuda_cell, kernel_copy, tmp_path, monkeypatch):
    """`depends = [..., "cutlass_3_6"]`: the pin is fetched on the host (PyPI's nvidia-cutlass 3.6.0.0) and
    only its folder is mounted, read-only; $KERNEL_MATRIX_DEPS_DIR/cutlass_3_6 overrides it. Either is an
    input of the cell (a changed override builds it again) and metadata.json records which one it was."""
    toml = kernel_copy / "build.toml"
    text = toml.read_text()
    toml.write_text(
        text.replace('backend = "cuda"\ndepends = []', 'backend = "cuda"\ndepends = ["torch", "cutlass_3_6"]')
    )
    source = kernel_copy / "csrc" / "img2gray_cpu.cpp"
    probe = '#include "cutlass/version.h"\nstatic_assert(CUTLASS_MAJOR == 3 && CUTLASS_MINOR == 6);\n'
    source.write_text(probe + source.read_text())
    monkeypatch.delenv("KERNEL_MATRIX_DEPS_DIR", raising=False)
    monkeypatch.setenv("KERNEL_MATRIX_DEPS_CACHE", str(tmp_path / "cache"))
    pinned = container_build_cli(local_cuda_cell, tmp_path / "with", kernel_copy, "--cuda-capabilities", "9.0")
    assert pinned.returncode == 0, pinned.stdout[-2000:] + pinned.stderr
    metadata = tmp_path / "with" / local_cuda_cell.name / "metadata.json"
    assert json.loads(metadata.read_text())["provenance"]["toolchain"]["cutlass_3_6"].startswith("CUTLASS 3.6.0, ")
    headers = tmp_path / "deps" / "cutlass_3_6" / "include" / "cutlass"
    headers.mkdir(parents=True)
    (headers / "version.h").write_text("#define CUTLASS_MAJOR 3\n#define CUTLASS_MINOR 6\n")
    monkeypatch.setenv("KERNEL_MATRIX_DEPS_DIR", str(tmp_path / "deps"))
    built = container_build_cli(local_cuda_cell, tmp_path / "with", kernel_copy, "--cuda-capabilities", "9.0")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr
    assert "(not pinned)" in json.loads(metadata.read_text())["provenance"]["toolchain"]["cutlass_3_6"]
    # The headers are an input: changing them builds the cell again.
    (headers / "version.h").write_text("#define CUTLASS_MAJOR 3\n#define CUTLASS_MINOR 6\n// changed\n")
    again = container_build_cli(local_cuda_cell, tmp_path / "with", kernel_copy, "--cuda-capabilities", "9.0")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr
    assert f"| {local_cuda_cell.name} | built |" in (tmp_path / "with" / "summary.md").read_text()


@pytest.mark.parametrize(
    ("errors", "code"),
    [
        (["abi", "abi"], 7),  # every cell failed the ABI check
        (["engine", "docker"], 11),  # the engine, as kernel-matrix or the docker SDK reports it
        (["abi", "compile"], 5),  # mixed: a build failure
        (["abi", None], 7),  # a cell that built does not change the failures' kind
    ],
)
def test_several_failing_cells_exit_with_the_code_they_share(monkeypatch, tmp_path, errors, code):
    """Issue 21: the README's exit codes survive aggregation over cells."""
    import docker
    from typer.testing import CliRunner

    from kernel_matrix.cli import app
    from kernel_matrix.errors import EngineError

    cells = select(load_matrix(KERNEL_DIR.parent / "build_matrix.yaml"), only="torch=2.14,arch=x86_64")[:2]
    raised = {
        "abi": AbiError("not manylinux"),
        "engine": EngineError("no engine"),
        "docker": docker.errors.APIError("gone"),
        "compile": BuildError("compile failed"),
    }

    def fake_build(client, cell, image, **kwargs):
        kind = errors[[c.name for c in cells].index(cell.name)]
        if kind is not None:
            raise raised[kind]
        (tmp_path / "out" / cell.name).mkdir(parents=True)
        return tmp_path / "out" / cell.name, {}

    monkeypatch.setattr(pool, "build_cell", fake_build)
    monkeypatch.setattr(images, "builder_for", lambda *a, **kw: "builder")
    engine = SimpleNamespace(images=SimpleNamespace(get=lambda tag: SimpleNamespace(id="sha256:0")))
    monkeypatch.setattr(cell_runner, "connect", lambda: engine)
    variants = [arg for cell in cells for arg in ("--variant", cell.name)]
    result = CliRunner().invoke(app, ["build", *variants, "--build-dir", str(tmp_path / "b"), "--image", "offline"])
    assert result.exception is not None and result.exception.exit_code == code, result.output


def test_a_kernels_sources_are_checked_once_on_the_host_before_any_cell_builds(monkeypatch, kernel_copy, tmp_path):
    """kernel-builder's torch-ops-check refuses the kernel: every cell fails with its line, and no
    image is made nor container started for them (it used to fail in each cell's container)."""
    from typer.testing import CliRunner

    from kernel_matrix.cli import app

    (kernel_copy / "torch-ext" / "img2gray" / "op.py").write_text(
        '@torch.library.custom_op("myns::gray", mutates_args=())\ndef gray(x): ...\n'
    )
    cells = select(load_matrix(KERNEL_DIR.parent / "build_matrix.yaml"), only="torch=2.14,arch=x86_64")[:2]
    started = []
    monkeypatch.setattr(pool, "build_cell", lambda client, cell, image, **kw: started.append(cell.name))
    monkeypatch.setattr(images, "builder_for", lambda *a, **kw: started.append("image") or "builder")
    monkeypatch.setattr(cell_runner, "connect", lambda: SimpleNamespace())
    variants = [arg for cell in cells for arg in ("--variant", cell.name)]
    result = CliRunner().invoke(
        app,
        [
            "build",
            *variants,
            "--kernel-dir",
            str(kernel_copy),
            "--build-dir",
            str(tmp_path / "b"),
            "--image",
            "offline",
        ],
    )
    assert result.exception is not None and result.exception.exit_code == 2, result.output
    assert started == []
    # Each cell's row gives the line (the terminal's table may wrap it: the summary file does not).
    summary = (tmp_path / "b" / "summary.md").read_text()
    assert summary.count("op.py:2: function gray is registered with torch.library") == len(cells), summary


def test_a_tvm_ffi_cell_builds_in_the_offline_builder_up_to_its_abi_gate(local_cuda_cell, object_cache, tmp_path):
    """The builder images hold apache-tvm-ffi: a [tvm-ffi] kernel's CUDA cell compiles and links
    there like a torch extension's. tvm-ffi's headers construct std::ostringstream (GLIBCXX
    3.4.26) and the static CUDA runtime binds glibc's newest symbols, which only the official
    builder (glibc 2.28, gcc-toolset) keeps manylinux_2_28-clean: the offline builder's gate
    refuses the library, says so, and keeps nothing."""
    from conftest import tvm_ffi_kernel

    kernel = tvm_ffi_kernel(tmp_path)
    v = local_cuda_cell.variant
    name = f"tvm-ffi01-{v.compute}-{v.arch}-linux"
    build_dir = tmp_path / "build"
    result = kernel_matrix(
        "build",
        *("--variant", name, "--image", "offline", "--kernel-dir", str(kernel), "--build-dir", str(build_dir)),
        *("--cuda-capabilities", "9.0", "--cache-dir", str(object_cache)),
        *("--only", f"torch={v.torch}"),  # the newest torch of the selection: the cell's builder
    )
    assert result.returncode == ExitCode.ABI, result.stdout + result.stderr
    summary = (build_dir / "summary.md").read_text()
    line = next(row for row in summary.splitlines() if f"| {name} |" in row)
    # Linked (the gate reads the library: tvm_ffi was there to compile and link against), then refused.
    assert "_gray_tvm_ffi_cuda_" in line and "fails the ABI check (manylinux_2_28" in line, line
    assert "GLIBCXX 3.4.26" in line and "GLIBC 2.34" in line, line  # tvm-ffi's headers; the static CUDA runtime
    assert "build it with --image official: this system's libstdc++ and glibc are newer" in line, line
    assert not (build_dir / name).exists()
