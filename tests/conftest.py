import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiers import full_only

REPO = Path(__file__).resolve().parent.parent
# Tests live in a folder per stage (tests/project/test_package_layout.py), and some import
# helpers from a module of another folder by its name (the workflow evaluator of
# end_to_end/test_workflows.py, the Python-only kernels of checking/test_suite_environment.py):
# every folder of tests is on sys.path, as pytest puts a module's own folder there, so such an
# import works whichever module is run alone. Module names are unique across folders.
sys.path[1:1] = [str(d) for d in sorted(REPO.joinpath("tests").iterdir()) if any(d.glob("test_*.py"))]
KERNEL_DIR = REPO / "kernel"
# A [tvm-ffi] kernel's own files (its suite is the kernel's, run by `kernel-matrix test`).
TVM_FFI_KERNEL = Path(__file__).resolve().parent / "tvm_ffi_kernel"
collect_ignore = ["tvm_ffi_kernel"]
# Real kernels (test data, only read, never copied into the project): ../shared/corpus beside
# the checkout, or wherever KERNEL_MATRIX_CORPUS names its kernels-community folder.
COMMUNITY = Path(os.environ.get("KERNEL_MATRIX_CORPUS", REPO.parent / "shared" / "corpus" / "kernels-community"))
CORPUS = COMMUNITY.parent
needs_corpus = pytest.mark.skipif(not COMMUNITY.is_dir(), reason=f"no kernel corpus at {COMMUNITY}")


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true", help="rewrite tests/golden/* from the current output")


# Markers a test gets from the fixtures it uses, directly or through other fixtures
# (local_cuda_cell needs engine), so that `scripts/test --fast` (-m "not build and not
# engine and not corpus and not processes") leaves out whatever compiles, needs the
# container engine or starts Python, without anyone having to remember a marker. Tests that
# build or start Python without these fixtures carry the marker themselves: kernel_matrix()
# below fails an unmarked test whose build succeeds, and Popen one that starts Python (a
# Python started through a shell or script is not seen: tests that do carry the marker too).
FIXTURE_MARKERS = {
    "engine": "engine",
    "built": "build",
    "object_cache": "build",
    "corpus_builds": "corpus",
    "cutlass_3_8": "processes",  # pip fetches the pin
}


# The longest modules of a full run first (their seconds at e4b64c2: 512, 322, 298, 291, 272,
# 260, 238, 171, 152). scripts/test hands each pytest-xdist worker whole modules in this order
# (--dist loadfile --no-loadscope-reorder): by default xdist starts the modules with the most
# tests first, and these, with one to a few tests each, started last and ran alone at the end.
# The rest keep their order.
LONGEST_FIRST = [
    "test_adoption.py",
    "test_first_run.py",
    "test_kernel_suite.py",
    "test_reproducible.py",
    "test_container_build.py",
    "test_corpus.py",
    "test_readme.py",
    "test_real_kernels.py",
    "test_reuse.py",
]


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in item.fixturenames and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        # tests/tiers.py: CI's gate leaves it to `scripts/test --full`; never a test of the fast
        # loop (a module's cheap tests stay in the gate with it).
        if full_only(item.nodeid) and _full_loop_only(item):
            item.add_marker("full")
    # CI's gate (its -m leaves `full` out) runs the modules with container tests last: by then
    # tests/prepare_images.py, started beside the tests, has made their builder image, which
    # the first of them would otherwise make while the other worker's waited on its lock. The
    # full run starts with its longest modules, which make images of their own anyway.
    gate = "not full" in (config.option.markexpr or "")
    containers = {item.path for item in items if "engine" in item.fixturenames and not item.get_closest_marker("full")}

    def order(item: pytest.Item) -> tuple[bool, int]:
        longest = LONGEST_FIRST.index(item.path.name) if item.path.name in LONGEST_FIRST else len(LONGEST_FIRST)
        return (gate and item.path in containers, longest)

    items.sort(key=order)


_running: list[pytest.Item] = []


def _full_loop_only(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) for m in ("build", "engine", "corpus", "corpus_full", "processes"))


# The test being set up, run or torn down (its fixtures' processes count as its own).
_current: list[pytest.Item] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current.append(item)
    yield
    _current.pop()


def _starts_python(argv0: object) -> bool:
    """Whether a process started as argv0 is a Python interpreter or a script it runs
    (kernel-matrix's entry point, a venv's pip): a second or more of imports each."""
    name = os.path.basename(os.fsdecode(argv0)) if isinstance(argv0, (str, bytes, os.PathLike)) else ""
    if re.fullmatch(r"python[0-9.]*", name):
        return True
    path = shutil.which(os.fsdecode(argv0)) if name else None
    try:
        with open(path or "", "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


_popen_init = subprocess.Popen.__init__


def _checked_popen_init(self, args, *rest, **kwargs):
    """Popen, refusing a Python process to a test of the fast loop (scripts/test --fast): each
    costs a second or more of start-up, which hundreds of tests made minutes. Such a test is
    marked `processes` (or build, engine, corpus), as kernel_matrix() asks of a build."""
    test = _current[-1] if _current else None
    argv0 = args if isinstance(args, (str, bytes, os.PathLike)) else next(iter(args), "")
    if test is not None and not kwargs.get("shell") and not _full_loop_only(test) and _starts_python(argv0):
        if record := os.environ.get("KERNEL_MATRIX_RECORD_PROCESSES"):
            with open(record, "a") as f:
                f.write(f"{test.nodeid}\t{os.fsdecode(argv0)}\n")
        else:
            pytest.fail(
                f"{test.nodeid} starts a Python process ({os.fsdecode(argv0)}): mark it @pytest.mark.processes "
                "(scripts/test --fast leaves those out)"
            )
    _popen_init(self, args, *rest, **kwargs)


subprocess.Popen.__init__ = _checked_popen_init


@pytest.fixture(autouse=True)
def _running_test(request):
    """The test now running, for kernel_matrix()'s check of its markers."""
    _running.append(request.node)
    yield
    _running.pop()


def kernel_matrix(*args: str, cwd: Path = REPO, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run the real CLI in a fresh process, as CI and users do."""
    result = subprocess.run(
        [sys.executable, "-m", "kernel_matrix", *args], cwd=cwd, capture_output=True, text=True, check=False, **kwargs
    )
    if check and result.returncode != 0:
        pytest.fail(f"kernel-matrix {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    # A build that succeeds compiled something (seconds to minutes): such a test belongs to
    # the full loop only. Failing builds (option and build.toml errors) stay in the fast one.
    test = _running[-1] if _running else None
    builds = args[:1] == ("build",) and "--help" not in args and result.returncode == 0
    if builds and test is not None and not _full_loop_only(test):
        pytest.fail(f"{test.nodeid} builds a variant: mark it @pytest.mark.build (scripts/test --fast skips those)")
    return result


def img2gray_as(root: Path, name: str, *edit: str) -> Path:
    """A copy of img2gray under root named `name` (its build.toml and package), its build.toml
    also given `edit` (old, new) where one is asked for; its folder."""
    folder = root / name
    shutil.copytree(KERNEL_DIR, folder, ignore=shutil.ignore_patterns("benchmarks", "tests", "__pycache__"))
    toml = folder / "build.toml"
    text = toml.read_text().replace('name = "img2gray"', f'name = "{name}"')
    if edit:
        assert edit[0] in text
        text = text.replace(*edit)
    # A Hub repo of its own: a matrix refuses two kernels publishing to one.
    toml.write_text(text.replace('repo-id = "kernel-matrix/img2gray"', f'repo-id = "kernel-matrix/{name}"'))
    (folder / "torch-ext" / "img2gray").rename(folder / "torch-ext" / name.replace("-", "_"))
    return folder


def tvm_ffi_kernel(root: Path) -> Path:
    """gray-tvm-ffi under root: tests/tvm_ffi_kernel's binding, package and suite around
    img2gray's torch-free csrc/ (copied from kernel/); its folder."""
    folder = root / "gray-tvm-ffi"
    shutil.copytree(TVM_FFI_KERNEL, folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(KERNEL_DIR / "csrc", folder / "csrc")
    return folder


def noarch_kernel(root: Path, name: str, backends: str, *, general: str = "", noarch: str = "") -> Path:
    """A Python-only kernel under root (edition 5): its build.toml, with `general` lines added
    to [general] and `noarch` lines to [torch-noarch], and an empty package; its folder."""
    kernel = root / name
    package = kernel / "torch-ext" / name.replace("-", "_")
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    (kernel / "build.toml").write_text(
        f'[general]\nname = "{name}"\nversion = 1\nedition = 5\nlicense = "Apache-2.0"\nbackends = {backends}\n'
        f"{general}\n[torch-noarch]\n{noarch}"
    )
    return kernel


def img2gray_copies(root: Path, count: int) -> list[str]:
    """count copies of img2gray under root, named gray0, gray1, ...: a repository of many kernels."""
    return [img2gray_as(root, f"gray{i}").name for i in range(count)]


def snapshot(directory: Path) -> dict[Path, bytes]:
    """Every file under directory and its bytes: to show a build left a folder exactly as it was."""
    return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def variant_backend(variant_dir: Path) -> str:
    return json.loads((variant_dir / "metadata.json").read_text())["backend"]["type"]


@pytest.fixture(scope="session")
def object_cache(tmp_path_factory) -> Path:
    """One compiled-object cache (--cache-dir) for the session's builds of the same sources:
    a build another test already compiled copies its objects instead of compiling again. The
    cache never changes a result (tests/building/test_reproducible.py); tests that assert a cold build
    use --no-cache or their build folder's own cache instead. The pytest-xdist workers share
    it (their temporary folders are siblings): the cache takes concurrent builds' writes."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp("object-cache")
    shared = tmp_path_factory.getbasetemp().parent / "object-cache"
    shared.mkdir(exist_ok=True)
    return shared


# `kernel-matrix test` options that run one test of img2gray's own suite: enough to show a
# variant loads through the real loader and its op works. The whole suite runs once per
# built variant, in tests/checking/test_kernel_suite.py; tests that only need a variant to work use this.
ONE_KERNEL_TEST = ("--pytest-arg=-k", "--pytest-arg=test_gray_pixels_keep_their_value")

# The capability `built` compiles for (the README's quick build): the tests that use it
# check the layout, metadata, ABI and loading of a variant, which one capability shows as
# well as the seven of CUDA 13.0's defaults; compiling all of them is the cold-build tests' job.
BUILT_CAPABILITIES = "9.0"


@pytest.fixture(scope="session")
def built(tmp_path_factory, object_cache) -> dict[str, Path]:
    """This host's variants, built once per session by the real CLI: the default
    one (cuda, given a CUDA torch and nvcc; capability 9.0 only) and the cpu one. {backend: variant dir}.
    The pytest-xdist workers share them, as they share object_cache: the first to need them
    builds them (13 to 30 s on 2 cores) while the other waits on the lock, then reads them."""
    from filelock import FileLock

    shared = os.environ.get("PYTEST_XDIST_WORKER")
    root = tmp_path_factory.getbasetemp().parent / "variants" if shared else tmp_path_factory.mktemp("variants")
    root.mkdir(exist_ok=True)
    build_dir, done = root / "build", root / "built"

    def variants():  # beside them: logs/
        return [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]

    with FileLock(root / "lock"):
        if not done.exists():
            options = ("--build-dir", str(build_dir), "--cache-dir", str(object_cache))
            kernel_matrix("build", *options, "--cuda-capabilities", BUILT_CAPABILITIES, check=True)
            if all(variant_backend(d) != "cpu" for d in variants()):
                kernel_matrix("build", *options, "--backend", "cpu", check=True)
            done.touch()
    return {variant_backend(d): d for d in variants()}


def container_build_cli(cell, build_dir, kernel_dir=KERNEL_DIR, *extra: str) -> subprocess.CompletedProcess:
    """`kernel-matrix build --variant CELL` in the offline builder image."""
    return kernel_matrix(
        "build",
        "--variant",
        cell.name,
        "--image",
        "offline",
        "--kernel-dir",
        str(kernel_dir),
        "--build-dir",
        str(build_dir),
        *extra,
    )


@pytest.fixture(scope="session")
def engine():
    """A client of the container engine at DOCKER_HOST; the tests that need one
    skip without it, except where KERNEL_MATRIX_REQUIRE_ENGINE is set (.ci/run)."""
    from kernel_matrix.containers.engine import connect
    from kernel_matrix.errors import EngineError

    try:
        return connect()
    except EngineError as exc:
        if os.environ.get("KERNEL_MATRIX_REQUIRE_ENGINE"):
            raise  # CI starts an engine: its absence is a failure there
        pytest.skip(str(exc))


@pytest.fixture
def kernel_copy(tmp_path) -> Path:
    """A scratch copy of the kernel, for tests that break it."""
    copy = tmp_path / "kernel"
    shutil.copytree(KERNEL_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def newest_local_pypi_cuda_cell():
    """The newest torch's cell this host's CUDA toolchain builds whose torch is PyPI's (cu130 here,
    torch 2.14: its builder image downloads what this machine's registries serve, and PyTorch's
    own index, where 2.15's CUDA 13.0 build is, is not among them); else why there is none."""
    from kernel_matrix.planning.matrix import Machine, load_matrix, select
    from kernel_matrix.planning.toolchain import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        return "no nvcc: the local profile has no CUDA cell"
    cells = select(
        load_matrix(KERNEL_DIR.parent / "build_matrix.yaml"),
        profile="local",
        machine=Machine(arch="x86_64", nvcc=nvcc.version),
    )
    from_pypi = [c for c in cells if c.torch_index == "pypi"]
    if not from_pypi:
        return f"no cell of this host's CUDA {nvcc.version} takes its torch from PyPI"
    return max(from_pypi, key=lambda c: tuple(int(x) for x in c.variant.torch.split(".")))


@pytest.fixture(scope="session")
def local_cuda_cell(engine):
    """newest_local_pypi_cuda_cell(), whose offline builder image tests/prepare_images.py makes
    beside the tests (scripts/test)."""
    cell = newest_local_pypi_cuda_cell()
    if isinstance(cell, str):
        pytest.skip(cell)
    return cell


def cli_matrix(profile: str = "full", only: str | None = None, file: Path | None = None, machine=None) -> dict:
    """What `kernel-matrix matrix --json` prints for the repository's matrix: each kernel's cells."""
    from kernel_matrix.planning.selection import Selection

    resolved = Selection(file or REPO / "build_matrix.yaml", profile=profile, only=only).resolve(machine=machine)
    return resolved.github_matrix(resolved.cells)


def cli_jobs(profile: str = "full", only: str | None = None, file: Path | None = None) -> dict:
    """The build workflow's job matrix of the repository's matrix (the plan job's `jobs` output):
    a job a cell, or batches of a kernel's cells over GitHub's job limit."""
    from kernel_matrix.planning.github_jobs import github_jobs
    from kernel_matrix.planning.selection import Selection

    resolved = Selection(file or REPO / "build_matrix.yaml", profile=profile, only=only).resolve()
    return github_jobs(resolved.github_jobs(resolved.cells))


def matrix_text(folder: Path | None = None) -> str:
    """The repository's build_matrix.yaml (`kernel: kernel`), for a copy written into folder, with
    the kernel copied to folder/kernel: a matrix names kernel folders inside its own folder only.
    Without folder, only the text (for matrices refused before their kernel is read)."""
    if folder is not None and not (folder / "kernel").exists():
        shutil.copytree(KERNEL_DIR, folder / "kernel", ignore=shutil.ignore_patterns("build", "__pycache__"))
    return (REPO / "build_matrix.yaml").read_text()


def needed_libraries(library: Path) -> list[str]:
    """The DT_NEEDED entries of a shared library (readelf -d)."""
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
