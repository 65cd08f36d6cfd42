"""Run the kernel's own test suite against a built variant, as users get it:
loaded by the real `kernels` loader in a fresh Python process, never by
importing the kernel's source tree. The suite runs in a scrubbed environment
(scrubbed_env: no secret, a HOME of its own under the build folder) and, on a
machine without a GPU, its cases that only ask torch for CUDA are reported not
run (needs_gpu) rather than failed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kernel_matrix.building.variant_dir import render_template
from kernel_matrix.checking import needs_gpu, untouched
from kernel_matrix.checking.confine import writes_confined_to
from kernel_matrix.checking.scrubbed_env import scrubbed_environment
from kernel_matrix.errors import BuildError, ConfigError, TestFailure, ToolchainError
from kernel_matrix.layout import CACHE, HUB_BUILD, METADATA, BuildDir, is_built
from kernel_matrix.planning.capabilities import runs_on
from kernel_matrix.planning.variants import legacy_name

if TYPE_CHECKING:
    from kernel_matrix.config.buildtoml import BuildConfig

# The kernel's conftest.py reads the variant to load from here...
VARIANT_ENV = "KERNEL_MATRIX_VARIANT_DIR"
# ...or the installed package (a wheel's) to import.
INSTALLED_ENV = "KERNEL_MATRIX_INSTALLED_PACKAGE"
# What the tests' Python must have: pytest runs the suite, which imports torch, and the
# `kernels` loader loads the variant (LOCAL_KERNELS) as users' get_kernel does.
SUITE_NEEDS = ("pytest", "torch", "kernels")
# A wheel's package is imported as pip installed it: no loader.
INSTALLED_NEEDS = ("pytest", "torch")
# The plugin's module name on the suite's PYTHONPATH (a copy of needs_gpu.py).
NEEDS_GPU_PLUGIN = "kernel_matrix_needs_gpu"


def resolve_variant_dir(target: str, build_dir: Path) -> Path:
    """A variant directory, given its path or its name under build_dir (kernels 0.19's new
    form of a name too: the legacy-named build that serves it)."""
    path = Path(target)
    candidate = path if path.is_dir() else BuildDir(build_dir).variant(legacy_name(target))
    if not is_built(candidate):
        raise ConfigError(
            f"{target}: not a built variant (no {candidate / METADATA}); "
            f"run `kernel-matrix build` first or pass a variant directory"
        )
    try:
        json.loads((candidate / METADATA).read_text())
    except ValueError as exc:
        raise ConfigError(f"{candidate / METADATA}: invalid JSON: {exc}") from None
    return candidate.resolve()


def resolve_host_variant(name: str, build_dir: Path, others: Mapping[str, str], command: str = "test") -> Path:
    """This host's variant (no VARIANT given: the one `build` makes here), `name`, under
    build_dir. Where it is not built but others are (`build --backend cpu` on a host with a
    CUDA torch), the one line names them and how to test one: by its name, or by the
    --backend that names it here (others: {backend: the variant it makes here})."""
    here = BuildDir(build_dir)
    try:
        built = sorted(d.name for d in build_dir.iterdir() if is_built(d)) if not here.is_built(name) else []
    except OSError:
        built = []  # not a folder: resolve_variant_dir says what is missing
    if not built:
        return resolve_variant_dir(name, build_dir)
    shown = ", ".join(built[:5]) + (f" and {len(built) - 5} more" if len(built) > 5 else "")
    backends = [f"`--backend {backend}`" for backend, other in others.items() if other in built]
    how = f"`kernel-matrix {command} {built[0]}`" if len(built) == 1 else f"`kernel-matrix {command} VARIANT`"
    verb = "test" if command == "test" else "check"
    missing = here.variant(name) / METADATA
    raise ConfigError(
        f"{name}: this host's variant is not built (no {missing}); {build_dir} holds {shown}: "
        f"{verb} {'it' if len(built) == 1 else 'one'} with {' or '.join([how, *backends])}, or build {name} first"
    )


def run_installed_tests(
    package: str,
    tests_dir: Path,
    *,
    python: str | None = None,
    pytest_args: Sequence[str] = (),
    say: Callable[[str], None] = lambda note: None,
) -> Outcome:
    """Run tests_dir against `package` as installed in python's environment (a wheel).
    Skipped, as a variant is, where the GPU there runs none of the archs the wheel's
    metadata.json declares; a note (say) where there is no GPU at all."""
    check_tools(python, INSTALLED_NEEDS)
    gpu = gpu_check(_installed_metadata(package, python), python)
    if gpu.refusal:
        return Outcome(gpu.refusal, skipped=True)
    if gpu.note:
        say(gpu.note)
    with tempfile.TemporaryDirectory(prefix="kernel-matrix-home-", ignore_cleanup_errors=True) as home:
        selection = {INSTALLED_ENV: package}
        _run_pytest(selection, package, tests_dir, python=python, pytest_args=pytest_args, home=Path(home), say=say)
    return Outcome("installed")


# Runs in the tests' interpreter: the names of the modules given that it cannot import (exit 1).
_MISSING_MODULES = """
import importlib.util, sys
missing = [name for name in sys.argv[1:] if importlib.util.find_spec(name) is None]
print(", ".join(missing))
sys.exit(1 if missing else 0)
"""


def check_tools(python: str | None, needs: Sequence[str]) -> None:
    """ToolchainError where the tests' Python lacks one of the modules `needs` names: a
    missing tool (exit 4), not a failed suite."""
    python = _absolute(python)
    try:
        probe = subprocess.run(
            [python or sys.executable, "-c", _MISSING_MODULES, *needs],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:
        raise ConfigError(f"--python {python}: cannot run it: {exc.strerror}") from None
    except subprocess.TimeoutExpired:
        return  # the suite itself will say what is wrong with that interpreter
    missing = probe.stdout.strip()
    if probe.returncode == 1 and missing:
        which = f"--python {python}" if python else f"the Python running kernel-matrix ({sys.executable})"
        raise ToolchainError(
            f"{which} has no {missing}: `kernel-matrix test` runs the kernel's suite with "
            f"{', '.join(needs[:-1])} and {needs[-1]} in that Python (pip install {missing.replace(',', '')})"
        )


# Runs in the tests' interpreter: the installed package's metadata.json (our wheels ship
# it beside the library), found without importing the package; null where there is none.
_INSTALLED_METADATA = """
import importlib.util, pathlib, sys
spec = importlib.util.find_spec(sys.argv[1])
folders = list(spec.submodule_search_locations or []) if spec else []
found = [pathlib.Path(f, "metadata.json") for f in folders if pathlib.Path(f, "metadata.json").is_file()]
print(found[0].read_text() if found else "null")
"""


def _installed_metadata(package: str, python: str | None) -> object:
    found = _probe(python, _INSTALLED_METADATA, package, timeout=120)
    return None if found is _FAILED else found


# What _probe returns where the interpreter did not answer: the suite itself will say
# what is wrong with it (or with the package).
_FAILED = object()


def _probe(python: str | None, code: str, *args: str, timeout: int, confined: bool = False) -> object:
    """The JSON that `code` prints in the tests' interpreter, or _FAILED. confined: writing
    nowhere but where every program writes, as the suite is confined (what it sees)."""
    try:
        with writes_confined_to([]) if confined else contextlib.nullcontext(None) as confinement:
            probe = subprocess.run(
                [python or sys.executable, "-c", code, *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                preexec_fn=confinement.preexec_fn if confinement else None,
            )
        return json.loads(probe.stdout) if probe.returncode == 0 else _FAILED
    except (OSError, subprocess.SubprocessError, ValueError):  # TimeoutExpired is a SubprocessError
        return _FAILED


@dataclass(frozen=True)
class Outcome:
    """What `kernel-matrix test` says of a variant it did not fail: what ran, or why nothing could."""

    text: str
    skipped: bool = False


def run_kernel_tests(
    variant_dir: Path,
    kernel_dir: Path,
    *,
    python: str | None = None,
    pytest_args: Sequence[str] = (),
    local_kernels: Mapping[str, Path] | None = None,
    say: Callable[[str], None] = lambda note: None,
    require_gpu: bool = False,
    config: BuildConfig | None = None,
) -> Outcome:
    """Run the kernel's own tests/ against a built variant, unmodified, as
    kernel-builder's CI runs them: `LOCAL_KERNELS=<repo-id>=<variant>` makes
    their `kernels.get_kernel("<repo-id>", version=N)` load this build (and
    local_kernels, {repo-id: variant}, the matrix's other kernels built for it),
    and `import <name>` (submodules too) is the variant package itself. Where
    the kernel marks CI tests (`kernels_ci`), only those run. None collected is
    a pass, as upstream's CI takes it. A CUDA variant with no code for the GPU the tests
    would run on (the loader refuses it there) is skipped, saying so; one with no GPU to
    run on gets a note (say). Without a GPU, cases that only ask torch for CUDA are not
    run (needs_gpu.py says how they are told from failures); where no case ran for that
    reason, the variant is loaded by the real loader instead. The suite's environment is
    scrubbed (scrubbed_env), with a HOME of its own under the variant's build folder,
    made for this run and removed after it. Returns what ran; raises TestFailure if it
    failed, ToolchainError where the tests' Python lacks pytest, torch or kernels, or
    (require_gpu: a GPU test job) where a CUDA variant's suite would see no GPU. config: the
    kernel's build.toml, where the caller has read it already."""
    from kernel_matrix.config.buildtoml import load_build_toml

    config = config or load_build_toml(kernel_dir)
    tests = kernel_dir / "tests"
    if not tests.is_dir():
        # kernel-builder's layout (and its CI) name the folder tests/; say so where another is there.
        other = f"; {kernel_dir / 'test'} is there, not read" if (kernel_dir / "test").is_dir() else ""
        # Skipped, not passed: nothing ran (exit 0 all the same, as kernel-builder's CI has nothing to fail).
        return Outcome(f"{config.general.name} has no tests/: nothing to run{other}", skipped=True)
    check_tools(python, SUITE_NEEDS)
    repo_id = hub_repo_id(config)
    marked = any("kernels_ci" in p.read_text(errors="replace") for p in tests.rglob("*.py"))
    metadata = json.loads((variant_dir / METADATA).read_text())
    module = metadata.get("id") if isinstance(metadata, dict) else None
    # The id is written into the generated alias module (package_alias.py.in): only
    # a Python module name, as every build writes, may reach its source text.
    if not isinstance(module, str) or not module.isidentifier():
        raise ConfigError(
            f"{variant_dir / METADATA}: id {json.dumps(module)[:80]} is not a Python module name: "
            "not a variant kernel-matrix built"
        )
    gpu = gpu_check(metadata, python)
    if gpu.refusal:
        return Outcome(gpu.refusal, skipped=True)
    if gpu.absent and require_gpu:  # the GPU job: its CUDA cases run, or it fails; never a quiet pass
        raise ToolchainError(
            f"{variant_dir.name}: the suite would see no GPU that its torch can use (--require-gpu: "
            "a GPU test job runs the CUDA cases or fails)"
        )
    if gpu.absent and "cpu" not in config.general.backends:
        backends = json.dumps(config.general.backends)
        return _load_only(variant_dir, metadata, python, f"general.backends {backends} has no cpu")
    if gpu.note:
        say(gpu.note)
    kernels = {**(local_kernels or {}), repo_id: variant_dir}
    env = {
        VARIANT_ENV: str(variant_dir),
        "LOCAL_KERNELS": local_kernels_value(kernels),
        # The kernel's own code, whose CUDA requests stay its failures on a CPU (needs_gpu.py).
        needs_gpu.KERNEL_CODE_ENV: os.pathsep.join(str(path) for path in kernels.values()),
        # Never the Hub's build instead of this one (a test naming another repo id fails, not downloads).
        "HF_HUB_OFFLINE": "1",
        # The kernel's tests folder is read, never written (it may be someone else's checkout).
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    args = [
        *(["-m", "kernels_ci", "-o", "markers=kernels_ci: CI tests"] if marked else []),
        *("-p", NEEDS_GPU_PLUGIN),
        *pytest_args,
    ]
    what = f"{'the kernels_ci tests' if marked else 'all tests'} of {config.general.name}"
    # A copy of tests/ in a folder of its own: the kernel's sources (a `relu/` source
    # folder beside tests/) can never shadow the variant under test.
    with (
        tempfile.TemporaryDirectory(prefix="kernel-matrix-tests-") as scratch,
        _suite_home(variant_dir, Path(scratch)) as home,
    ):
        copy = Path(scratch) / "tests"
        shutil.copytree(tests, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=True)
        # kernel-builder's layout beside it, <kernel>/build/<variant>: suites whose conftest looks
        # for the built variant there (maxsim's) find this one. A link inside the scratch folder only.
        (Path(scratch) / HUB_BUILD).mkdir()
        (Path(scratch) / HUB_BUILD / variant_dir.name).symlink_to(variant_dir.resolve(), target_is_directory=True)
        # `import <name>` for tests that import the package by name: an alias beside the
        # copy, on PYTHONPATH (so subprocesses the tests start have it too); the variant
        # folder gets nothing added, so its digest still holds for the loader.
        alias = Path(scratch) / "import" / config.general.python_name
        alias.mkdir(parents=True)
        (alias / "__init__.py").write_text(
            render_template(
                "package_alias.py.in",
                module=module,
                name=config.general.python_name,
                variant=repr(str(variant_dir)),
            )
        )
        shutil.copyfile(needs_gpu.__file__, alias.parent / f"{NEEDS_GPU_PLUGIN}.py")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(alias.parent), os.environ.get("PYTHONPATH")]))
        # Run from the copy's parent, as from a kernel's root: `python -m pytest` puts the
        # working folder on sys.path, where activation's tests/kernels/ would shadow `kernels`.
        # pytest's own count of what ran (before the caller's arguments: a --junit-xml of
        # theirs wins, and the count is then not known).
        report = Path(scratch) / "report.xml"
        args = [f"--junit-xml={report}", *args]
        before = untouched.snapshot(variant_dir)
        suite = f"the test suite of {config.general.name}"
        try:
            code = _run_pytest(
                env,
                variant_dir.name,
                copy,
                python=python,
                pytest_args=args,
                allow_empty=True,
                cwd=Path(scratch),
                home=home,
                # Its own variant too: what it writes there is named below (untouched.py).
                writable=[variant_dir],
                say=say,
            )
        except TestFailure:
            # A file the suite wrote into the variant is the failure to name: the loader's digest
            # check fails every load after it, which is likely what failed.
            _fail_if_written(variant_dir, before, suite)
            raise
        _fail_if_written(variant_dir, before, suite)
        counts = _counts(report)
    if code == NO_TESTS_COLLECTED:
        marker = " marked kernels_ci" if marked else ""
        return Outcome(
            f"0 tests of {config.general.name}{marker} collected (pytest exit 5: a pass, as in upstream's CI)"
        )
    if counts is None:
        return Outcome(what)
    if counts.ran == counts.skipped and counts.need_gpu:
        which = f"{'all ' if len(counts.need_gpu) == counts.ran else ''}{len(counts.need_gpu)}"
        cases = f"{which} {'kernels_ci ' if marked else ''}tests of {config.general.name}"
        return _load_only(variant_dir, metadata, python, f"{cases} ask torch for CUDA: {counts.need_gpu[0]}")
    if counts.ran == counts.skipped:  # pytest exits 0, and nothing was tested (no GPU for a CUDA-only suite, say)
        return Outcome(f"{what}: all {counts.ran} skipped, none ran", skipped=True)
    need_gpu = len(counts.need_gpu)
    need = f" ({need_gpu} need{'s' if need_gpu == 1 else ''} a GPU: not run on CPU)" if need_gpu else ""
    return Outcome(f"{what}: {counts.ran - counts.skipped} ran, {counts.skipped} skipped{need}")


def _fail_if_written(variant_dir: Path, before: untouched.Snapshot, during: str) -> None:
    """TestFailure, in one line naming the file, where `during` wrote into the variant folder."""
    wrote = untouched.written(variant_dir, before, during)
    if wrote:
        raise TestFailure(wrote)


@contextlib.contextmanager
def _suite_home(variant_dir: Path, fallback: Path) -> Iterator[Path]:
    """The suite's HOME: a new empty folder under the variant's build folder's .cache (which
    `clean` removes), so that what the suite's tools cache there (torch, triton) stays on the
    build's disk; removed after the run. In the scratch folder where that folder cannot be
    written (a variant somewhere read-only)."""
    try:
        parent = variant_dir.parent / CACHE / "suite-home"
        parent.mkdir(parents=True, exist_ok=True)
        home = Path(tempfile.mkdtemp(prefix=f"{variant_dir.name}-", dir=parent))
    except OSError:
        home = fallback / "home"
        home.mkdir()
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


class Counts(NamedTuple):
    """What pytest's JUnit XML report says ran."""

    ran: int
    skipped: int
    need_gpu: list[str]  # why, for each case skipped because it needs a GPU (needs_gpu.py)


def _counts(report: Path) -> Counts | None:
    """The counts of pytest's JUnit XML report, or None where it is not there."""
    from xml.etree import ElementTree

    try:
        root = ElementTree.parse(report).getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        reasons = [s.get("message", "") for suite in suites for s in suite.iter("skipped")]
        return Counts(
            sum(int(s.get("tests", 0)) for s in suites),
            sum(int(s.get("skipped", 0)) for s in suites),
            [r.removeprefix(needs_gpu.REASON) for r in reasons if r.startswith(needs_gpu.REASON)],
        )
    except (OSError, ElementTree.ParseError, ValueError):
        return None


# Runs in the tests' interpreter: the capability of the GPU its torch would use, or null
# (a CPU build of torch, no GPU, or GPUs hidden with CUDA_VISIBLE_DEVICES=).
_GPU_PROBE = """
import json, torch
gpu = torch.version.cuda is not None and torch.cuda.is_available()
print(json.dumps(list(torch.cuda.get_device_capability()) if gpu else None))
"""


class GpuCheck(NamedTuple):
    refusal: str | None = None  # why the loader refuses the variant on this GPU
    note: str | None = None  # a line to say before the suite
    absent: bool = False  # a CUDA variant, and no GPU this torch can use (or GPUs hidden)


def gpu_check(metadata: object, python: str | None) -> GpuCheck:
    """For a CUDA variant, against the GPU the tests run on: why the `kernels` loader would
    refuse it there (kernels' check_arch: none of its archs runs there), or that no GPU
    is there at all, with a note unless GPUs were hidden on purpose (CUDA_VISIBLE_DEVICES=).
    A GPU runner whose GPU the variant was not built for (a Blackwell-only kernel on an
    H200) has nothing to test: the suite would fail at its first get_kernel."""
    backend = metadata.get("backend") if isinstance(metadata, dict) else None
    if not isinstance(backend, dict) or backend.get("type") != "cuda":
        return GpuCheck()
    # Confined as the suite will be: the GPU it sees. (A confinement that kept the CUDA driver
    # from starting once let a GPU job pass with every CUDA case skipped: confine.py's /proc.)
    capability = _probe(python, _GPU_PROBE, timeout=300, confined=True)
    if capability is None:
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES") == ""
        note = "no GPU that this torch can use: the suite's CUDA cases will skip or fail here (run it on a GPU)"
        return GpuCheck(note=None if hidden else note, absent=True)
    archs = backend.get("archs")
    if not (isinstance(capability, list) and len(capability) == 2 and all(isinstance(c, int) for c in capability)):
        return GpuCheck()
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        return GpuCheck()
    major, minor = capability
    if runs_on(archs, (major, minor)):
        return GpuCheck()
    return GpuCheck(
        refusal=f"this GPU (capability {major}.{minor}) runs none of the variant's archs ({', '.join(archs)}): "
        "kernels.get_kernel refuses it on this GPU (check_arch); test it on a GPU it was built for"
    )


def _load_only(variant_dir: Path, metadata: dict[str, Any], python: str | None, reason: str) -> Outcome:
    """A variant whose suite needs a GPU, where none is (reason: how that is known): a CUDA
    variant of a kernel that declares no cpu backend (its suite has nothing it could run: one
    that falls back to CPU tensors calls ops registered for CUDA only, and fails), or a suite
    whose every case asked torch for CUDA. The variant is loaded by the real loader instead,
    with this torch: its library links and registers. The GPU test job runs the suite."""
    from kernel_matrix.checking.load import load_check

    backend = metadata.get("backend")
    kind = backend.get("type") if isinstance(backend, dict) else None
    kind = kind if isinstance(kind, str) and kind.isidentifier() else "cuda"
    # A Python-only kernel's variant for another device (torch-rocm, -xpu, -metal) is loaded as
    # that backend's, as kernel-builder's check loads it with that backend's own torch; a torch
    # that loads no such kernels (a CUDA or CPU build's) says so, which is no failure of the variant.
    other_device = kind not in ("cpu", "cuda")
    try:
        why = load_check(variant_dir, variant_dir.name, python=python or sys.executable, backend=kind)
    except BuildError as exc:
        raise TestFailure(str(exc).replace("built, but ", "", 1)) from None
    if why and not metadata.get("kernel-depends") and not other_device:
        # Nothing was checked (the interpreter did not start, no kernels or CUDA torch there):
        # not a pass. Only a kernel whose kernel-depends come from the Hub cannot be loaded here.
        raise TestFailure(f"{variant_dir.name}: cannot be loaded here: {why}")
    loaded = f"not loaded ({why})" if why else "loaded by kernels.get_local_kernel"
    return Outcome(f"{loaded}; suite not run on CPU: needs a GPU ({reason})", skipped=True)


def hub_repo_id(config: BuildConfig) -> str:
    """The repo id users' `kernels.get_kernel` names the kernel by."""
    return config.general.hub.repo_id or f"kernels-community/{config.general.name}"


def built_alongside(variant: str, build_folders: Mapping[str, Path]) -> dict[str, Path]:
    """LOCAL_KERNELS entries for the matrix's other kernels ({repo id: its build
    folder}): the variant of the same name where it is built, else the build folder
    where it holds variants (the loader picks the one for this torch, as from a
    kernel-builder build/), else none: a test loading it fails, offline, naming it."""
    found = {}
    for repo_id, folder in build_folders.items():
        if is_built(folder / variant):
            found[repo_id] = (folder / variant).resolve()
        elif folder.is_dir() and any(is_built(d) for d in folder.iterdir()):
            found[repo_id] = folder.resolve()
    return found


def local_kernels_value(variants: Mapping[str, Path]) -> str:
    """LOCAL_KERNELS for the `kernels` loader: repo-id=path entries, ':'-separated."""
    for path in variants.values():
        if ":" in str(path):
            raise ConfigError(
                f"{path}: LOCAL_KERNELS cannot name a path with ':' (the loader splits entries on it); "
                "use a build folder whose path has none"
            )
    return ":".join(f"{repo_id}={path}" for repo_id, path in variants.items())


def _absolute(python: str | None) -> str | None:
    """--python as a path from the current folder made absolute: the tests run in another folder."""
    return str(Path(python).absolute()) if python and os.sep in python else python


# pytest's exit code when it collected nothing.
NO_TESTS_COLLECTED = 5


def _run_pytest(
    selection: dict[str, str],
    name: str,
    tests_dir: Path,
    *,
    python: str | None,
    pytest_args: Sequence[str],
    allow_empty: bool = False,
    cwd: Path | None = None,
    home: Path,
    writable: Sequence[Path] = (),
    say: Callable[[str], None] = lambda note: None,
) -> int:
    """Run pytest on tests_dir for what `selection` names. It writes nowhere but its HOME
    (home, its temporary files there too), its working folder and `writable` (confine.py),
    where this machine's Linux can keep it to them; a note (say) where it cannot."""
    # No secret, a HOME of its own (home), none of kernel-matrix's settings; then what it tests.
    env = {**scrubbed_environment(home), **selection}
    env["TMPDIR"] = str(home / "tmp")  # pytest's tmp_path and tempfile's folders: writable
    (home / "tmp").mkdir(exist_ok=True)
    python = _absolute(python)
    argv = [
        python or sys.executable,
        "-m",
        "pytest",
        str(tests_dir.resolve()),
        "-p",
        "no:cacheprovider",
        f"--rootdir={(cwd or tests_dir).resolve()}",
        *pytest_args,
    ]
    # cwd is the tests folder (or a scratch copy's parent): nothing of the service or
    # the kernel's sources is importable.
    try:
        with writes_confined_to([home, cwd or tests_dir, *writable]) as confinement:
            if confinement.missing:
                say(f"the suite can write wherever this user can (the object cache too): {confinement.missing}")
            run = subprocess.run(argv, cwd=cwd or tests_dir, env=env, check=False, preexec_fn=confinement.preexec_fn)
        code = run.returncode
    except subprocess.SubprocessError as exc:  # the confinement failed in the child: nothing ran
        raise ToolchainError(f"the suite of {name} did not start: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"--python {python}: cannot run it: {exc.strerror}") from None
    if code != 0 and not (allow_empty and code == NO_TESTS_COLLECTED):
        raise TestFailure(f"the test suite of {name} failed (pytest exit {code})")
    return code
