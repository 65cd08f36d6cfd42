"""What the host asks of a build container, as one typed file.

The host writes a BuildRequest (JSON) into a folder mounted read-only in the
container; the container's entry point (`python -m kernel_matrix.cli.worker
FILE`) reads it and runs the same native build as `kernel-matrix build`. So the
container boundary is this value, not the public command line, and everything
the build may touch is named here by the host: the kernel, the output folder,
the cache scopes it reads and the folder its new cache entries go to."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from kernel_matrix.errors import ConfigError, ToolchainError


class BuildRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kernel_dir: str  # the kernel, mounted read-only
    out_dir: str  # the container's private output folder
    variant: str  # the cell: the variant the build must turn out to be
    backend: str
    capabilities: tuple[str, ...] = ()  # CUDA capabilities (the matrix's or --cuda-capabilities')
    jobs: int | None = None  # parallel compiles
    # The object-cache scopes the build looks compiles up in (read-only mounts, its own
    # first) and where its new entries go; no scope: no cache.
    cache_reads: tuple[str, ...] = ()
    cache_writes: str | None = None
    # A published variant of the cell the host verified (releasing/reuse.py), mounted
    # read-only: taken instead of compiling where it was built from the same inputs.
    candidate: str | None = None
    candidate_from: str | None = None  # where it was published (repo@branch), for the line

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1) + "\n")

    @staticmethod
    def read(path: Path) -> BuildRequest:
        try:
            return BuildRequest.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the build request ({exc.strerror})") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"])) or "(top level)"
            raise ConfigError(f"{path}: not a build request: {where}: {first['msg']}") from None

    def check(self, made: str, toolchain: str) -> None:
        """Refuse, before anything is written, a builder that would make another variant
        (a wrong image: another torch or CUDA)."""
        if made != self.variant:
            raise ToolchainError(f"this builder ({toolchain}) makes {made}, not the cell {self.variant}")
