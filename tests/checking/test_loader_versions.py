"""kernel-matrix beside every `kernels` loader release it supports (issue 36): 0.17, 0.18
and 0.19, whose modules moved (0.19: all under kernels._internals), whose loads check the
digest (0.18) and which read a new variant-name form (0.19). For each, a virtual
environment that reuses .venv's packages (torch among them: nothing is reinstalled, a .pth
names .venv's site-packages, after the environment's own) gets the loader release and the
wheel of this checkout from one `pip install`, which resolves only if kernel-matrix's
requirement admits that release; then `kernel-matrix matrix` runs without a traceback, and
`kernel-matrix test` loads the CPU variant of kernel/ (img2gray) built this session with
that loader (LOCAL_KERNELS, get_local_kernel) and runs a case of its suite against it.

The loader wheels are downloaded once (PyPI) into a cache of their own, pruned of the
releases this list no longer names."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ONE_KERNEL_TEST, REPO, needs_corpus
from filelock import FileLock
from packaging.version import Version
from test_readme import readme_commands

from kernel_matrix.planning.upstream import loaders_under_test
from kernel_matrix.planning.variants import host_arch

# The newest patch of each minor pyproject.toml's requirement admits (data/loaders.yaml,
# which `matrix --check-upstream` compares with the registry's releases).
LOADERS = loaders_under_test()
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernel-matrix-tests" / "kernels-loaders"
SECONDS = 300


def pip(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *argv],
        capture_output=True,
        text=True,
        timeout=SECONDS,
        check=False,
    )


def loader_wheels(version: str) -> Path:
    """CACHE/<version>, holding a wheel of that release of the loader and of each of its dependencies
    for this Python (0.17 needs sigstore 4, which a .venv set up with a newer loader lacks); a folder
    of a release no longer in LOADERS is removed."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE.parent / "kernels-loaders.lock")):  # pytest-xdist's workers share it
        for stale in CACHE.iterdir():
            if stale.name not in LOADERS:
                shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        folder = CACHE / version
        wanted = ("download", "--only-binary=:all:", "-d", str(folder), f"kernels=={version}")
        cached = pip(*wanted, "--no-index", "--find-links", str(folder))
        if cached.returncode != 0:  # not cached for this Python yet: from PyPI, once
            fetched = pip(*wanted, "--index-url", "https://pypi.org/simple")
            assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    return folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """kernel-matrix's wheel, built from a copy of this checkout (as test_packaging builds it)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "kernel_matrix", source / "kernel_matrix", ignore=shutil.ignore_patterns("__pycache__"))
    built = pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"), str(source))
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = (work / "dist").glob("kernel_matrix-*.whl")
    return found


def new_form(legacy: str) -> str:
    """A host CPU variant's name in kernels 0.19's new form (for CPython 3.11 and later)."""
    match = re.fullmatch(r"torch(\d)(\d+)-cxx11-cpu-(\w+)-linux", legacy)
    assert match, legacy
    return f"torch-{match[1]}.{match[2]}-cxx11-cpu-cpython-3.11-abi3-{match[3]}-linux"


class LoaderEnvironment:
    """A virtual environment holding this release of the loader and kernel-matrix's wheel, from one
    `pip install` (kernel-matrix's other dependencies are .venv's, named by a .pth: nothing else is
    installed), and a way to run commands in it."""

    def __init__(self, version: str, wheel: Path, tmp_path: Path):
        self.venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], check=True, timeout=SECONDS)
        (site,) = (self.venv / "lib").glob("python3*/site-packages")
        (site / "zz-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        python = self.venv / "bin" / "python"
        # pip install of kernel-matrix's wheel beside this release resolves.
        wheels, loader = loader_wheels(version), f"kernels=={version}"
        install = pip("--python", str(python), "install", "--no-index", "--find-links", str(wheels), str(wheel), loader)
        said = install.stdout + install.stderr
        assert install.returncode == 0 and "incompatible" not in said and "ResolutionImpossible" not in said, said
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "KERNEL_MATRIX_"))}
        self.env = env | {
            "PATH": f"{self.venv / 'bin'}{os.pathsep}{env['PATH']}",
            "VIRTUAL_ENV": str(self.venv),
            "HF_HUB_OFFLINE": "1",
        }
        which = self.run(
            str(python),
            "-c",
            "import importlib.metadata as m, kernel_matrix; print(m.version('kernels'), kernel_matrix.__file__)",
            cwd=tmp_path,
        )
        loader_version, package = which.stdout.split()
        assert loader_version == version and Path(package).is_relative_to(self.venv), which.stdout + which.stderr
        self.kernel_matrix = str(self.venv / "bin" / "kernel-matrix")

    def run(self, *argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=SECONDS, check=False)

    def shell(self, command: str, cwd: Path = REPO) -> None:
        """A documented command line, its `.venv/bin/kernel-matrix` this environment's."""
        line = command.replace(".venv/bin/kernel-matrix", self.kernel_matrix)
        result = self.run("bash", "-c", line, cwd=cwd)
        assert result.returncode == 0, f"{line}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"


@pytest.mark.parametrize("version", LOADERS)
def test_kernel_matrix_installs_plans_and_tests_a_variant_with_the_loader(version, wheel, built, tmp_path):
    cpu = built["cpu"]
    loader = LoaderEnvironment(version, wheel, tmp_path)
    run, kernel_matrix = loader.run, loader.kernel_matrix
    planned = run(kernel_matrix, "matrix")
    assert planned.returncode == 0 and "Traceback" not in planned.stdout + planned.stderr, planned.stderr[-3000:]

    # 0.19 reads a variant named in its new form: the legacy-named build that serves it.
    name = cpu.name
    if Version(version) >= Version("0.19"):
        name = new_form(cpu.name)
        selected = run(kernel_matrix, "matrix", "--json", "--variant", name)
        assert selected.returncode == 0, selected.stderr
        assert [cell["variant"] for cell in json.loads(selected.stdout)["include"]] == [cpu.name]

    # The variant, loaded by this release (LOCAL_KERNELS; 0.18 and 0.19 check its digest), and a
    # case of img2gray's suite against it.
    tested = run(kernel_matrix, "test", name, "--build-dir", str(cpu.parent), *ONE_KERNEL_TEST)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert f"passed {cpu.name}: all tests of img2gray: 1 ran" in tested.stderr, tested.stderr


@needs_corpus
@pytest.mark.build
@pytest.mark.parametrize("version", LOADERS)
def test_the_readmes_commands_pass_with_the_loader(version, wheel, tmp_path):
    """Issue 36's acceptance with each loader: README's main command (`build && test`, this host's
    CPU variant of img2gray, in a build folder of its own) and the commands for your kernel
    (docs/guide/building.md: relu's build, test and check-abi, its build folder moved here), each
    run by the kernel-matrix installed beside that loader: the variant it builds (metadata.json as
    that loader reads it), loaded and tested by it."""
    if not (REPO.parent / "shared" / "corpus" / "kernels-community" / "relu").is_dir():
        pytest.skip("no ../shared/corpus beside the project: the documented relu commands name it there")
    loader = LoaderEnvironment(version, wheel, tmp_path)
    (main,) = [c for c in readme_commands() if c.startswith("scripts/setup-dev && ")]
    main = main.removeprefix("scripts/setup-dev && ")
    assert main == ".venv/bin/kernel-matrix build && .venv/bin/kernel-matrix test", main
    own = f"--build-dir {tmp_path / 'img2gray'} --backend cpu"
    loader.shell(main.replace("build &&", f"build {own} &&") + f" {own}")
    (variant,) = [p for p in (tmp_path / "img2gray").iterdir() if (p / "metadata.json").is_file()]
    assert variant.name.startswith("torch") and variant.name.endswith(f"-cpu-{host_arch()}-linux"), variant
    relu = readme_commands("Use it for your kernel")
    assert len(relu) == 3 and all("--build-dir build/relu" in c for c in relu), relu
    for command in relu:
        loader.shell(command.replace("--build-dir build/relu", f"--build-dir {tmp_path / 'relu'}"))
