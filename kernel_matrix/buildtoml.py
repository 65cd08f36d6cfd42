"""kernel/build.toml (kernel-builder's format, edition 5): parsed and validated.

Unknown keys are errors, as in kernel-builder, so a typo never silently builds
something else."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from .errors import ConfigError
from .section import Section
from .sourcelines import toml_key_position, where

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

Backend = Literal["cpu", "cuda", "metal", "rocm", "xpu"]


class Hub(Section):
    repo_id: str | None = None
    branch: str | None = None


class CudaRange(Section):
    minver: str | None = None
    maxver: str | None = None


class General(Section):
    name: str = Field(pattern=r"^[a-z][-a-z0-9]*[a-z0-9]$")
    version: int = Field(ge=0)
    edition: int = 5
    license: str
    backends: list[Backend] = Field(min_length=1)
    universal: bool = False
    hub: Hub = Hub()
    cuda: CudaRange | None = None

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")


class Torch(Section):
    src: list[str] = Field(min_length=1)
    include: list[str] = []
    pyext: list[str] = []
    minver: str | None = None
    maxver: str | None = None
    cxx_flags: list[str] = []


class Kernel(Section):
    backend: Backend
    depends: list[str] = []
    src: list[str] = Field(min_length=1)
    include: list[str] = []
    cxx_flags: list[str] = []
    cuda_capabilities: list[str] | None = None
    cuda_flags: list[str] = []
    cuda_minver: str | None = None


class BuildConfig(Section):
    general: General
    torch: Torch
    kernel: dict[str, Kernel] = {}

    def kernels_for(self, backend: str) -> dict[str, Kernel]:
        """The [kernel.*] sections compiled into a variant of this backend.

        CPU kernels are plain host code, so every variant carries them: a CUDA
        variant then also serves CPU tensors, as users of a CUDA torch expect.
        """
        return {name: k for name, k in self.kernel.items() if k.backend in (backend, "cpu")}


def load_build_toml(kernel_dir: Path) -> BuildConfig:
    """Parse kernel_dir/build.toml; any problem is one ConfigError line with file:line:col."""
    path = kernel_dir / "build.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read build.toml ({exc.strerror or exc})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python < 3.14 keeps the position only in the message text.
        position = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        line, col = (int(position.group(1)), int(position.group(2))) if position else (1, 1)
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise ConfigError(f"{where(path, line, col)}: invalid TOML: {message}") from None
    try:
        config = BuildConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_first_problem(path, text, exc)) from None
    _check_sources(path, text, kernel_dir, config)
    return config


def _first_problem(path: Path, text: str, exc: ValidationError) -> str:
    error = exc.errors()[0]
    loc = tuple(error["loc"])
    line, col = toml_key_position(text, loc)
    dotted = ".".join(str(part) for part in loc)
    if error["type"] == "extra_forbidden":
        what = f"unknown key '{dotted}'"
    elif error["type"] == "missing":
        what = f"missing required key '{dotted}'"
    else:
        what = f"'{dotted}' = {error.get('input')!r}: {error['msg']}"
    return f"{where(path, line, col)}: {what}"


# A [kernel.<name>] section's name: it names a folder of object files, so no
# path separators or dots (the kernels of kernels-community use a-z, 0-9, _ and -).
SECTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _check_sources(path: Path, text: str, kernel_dir: Path, config: BuildConfig) -> None:
    """Section names are plain names; every path resolves inside the kernel
    directory (what the kernel's commit covers); source files exist."""
    for name in config.kernel:
        if not SECTION_NAME.match(name):
            line = next(
                (i for i, ln in enumerate(text.splitlines(), 1) if ln.lstrip().startswith("[") and name in ln), 1
            )
            raise ConfigError(
                f"{where(path, line, 1)}: [kernel.{json.dumps(name)}]: a section name may only hold letters, "
                "digits, '_' and '-'"
            )
    root = kernel_dir.resolve()
    lists: list[tuple[tuple[str, ...], list[str], bool]] = [
        (("torch", "src"), config.torch.src, True),
        (("torch", "include"), config.torch.include, False),
    ]
    for name, k in config.kernel.items():
        lists += [(("kernel", name, "src"), k.src, True), (("kernel", name, "include"), k.include, False)]
    for loc, entries, are_files in lists:
        for entry in entries:
            line, col = toml_key_position(text, loc)
            resolved = (root / entry).resolve()
            if Path(entry).is_absolute() or not resolved.is_relative_to(root):
                raise ConfigError(
                    f"{where(path, line, col)}: {'.'.join(loc)} entry '{entry}' is outside the kernel directory "
                    f"{root} (links followed): only the kernel's own files are built"
                )
            if are_files and not resolved.is_file():
                raise ConfigError(f"{where(path, line, col)}: source file '{entry}' does not exist in {kernel_dir}")
