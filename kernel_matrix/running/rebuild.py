"""verify's rebuild: a variant built again as its metadata.json records it (its backend and
CUDA capabilities, its SOURCE_DATE_EPOCH, no object cache): natively where this host builds
that variant with the toolchain it records, else in its cell's builder image, the same build
`kernel-matrix build --variant` runs. releasing/verify.py compares the result with the variant;
this module composes the plan and the build for it, as native.py does for `build`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from docker.errors import DockerException

from kernel_matrix.building.native_build import BuildPlan, build_noarch, build_variant, plan_build, toolchain_record
from kernel_matrix.config.buildtoml import BuildConfig
from kernel_matrix.containers.cell import build_cell
from kernel_matrix.containers.engine import connect
from kernel_matrix.containers.images import PipSetup, builder_for
from kernel_matrix.errors import ConfigError, EngineError, ToolchainError
from kernel_matrix.planning.selection import Selection
from kernel_matrix.releasing.verify import Metadata, first_line, recorded


@dataclass(frozen=True)
class Rebuilder:
    """How variants are rebuilt: natively, from kernel_dir against python's torch, or
    in the builder image of their cell of matrix_file (always, with in_container). config:
    the kernel's build.toml as the command read it, once: every rebuild is planned from it."""

    kernel_dir: Path
    config: BuildConfig
    python: str | None = None
    matrix_file: Path | None = None  # None: native rebuilds only
    image_kind: str | None = None  # offline or official; None: the matrix's
    in_container: bool = False
    jobs: int | None = None  # parallel compiles of each rebuild (None: from cores and memory)
    log: Callable[[str], None] = lambda message: None

    def rebuild(self, name: str, metadata: Metadata, out: Path) -> Path:
        """Build `name` into out/<name> as it was built: its backend and CUDA
        capabilities, its SOURCE_DATE_EPOCH; no object cache (the rebuild is
        independent of it). Natively where this host builds that variant with the
        toolchain it records; in its builder image where it does not (or with
        in_container). ToolchainError when it cannot be rebuilt here."""
        if self.config.noarch:  # Python only: no toolchain, nothing to build in a container
            return self._native_noarch(name, metadata, out)
        if self.in_container:
            return self._in_container(name, metadata, out)
        try:
            plan = self._plan(name, metadata)
        except ToolchainError as refusal:  # another torch or CUDA: only its builder image builds it
            if self.matrix_file is None:
                raise
            self.log(f"{refusal}: rebuilding it in its builder image")
            try:
                return self._in_container(name, metadata, out)
            except ToolchainError as exc:
                raise ToolchainError(f"{refusal}; {exc}") from None
        differences = _toolchain_differences(metadata, plan)
        if differences and self.matrix_file is not None:  # its builder image has the toolchain it records
            self.log(f"{name} was built with {differences}: rebuilding it in its builder image")
            try:
                return self._in_container(name, metadata, out)
            except ToolchainError as exc:
                self.log(f"{exc}: rebuilding it natively")  # the best there is here, said so
        return self._native(plan, out, differences)

    def _plan(self, name: str, metadata: Metadata) -> BuildPlan:
        """This host's plan for `name`, as it was built (its SOURCE_DATE_EPOCH where it
        records one); ToolchainError if this host builds another variant."""
        backend = metadata["backend"]["type"]
        archs = metadata["backend"].get("archs")
        capabilities = archs if backend == "cuda" else None
        plan = plan_build(
            self.kernel_dir, python=self.python, backend=backend, cuda_capabilities=capabilities, config=self.config
        )
        if plan.variant.name != name:
            raise ToolchainError(f"{name}: this host builds {plan.variant.name} ({plan.framework})")
        if epoch := recorded(metadata, "source-date-epoch"):
            plan = dataclasses.replace(plan, source_date_epoch=epoch)
        return plan

    def _native(self, plan: BuildPlan, out: Path, differences: str) -> Path:
        if differences:
            self.log(f"note: {plan.variant.name} was built with {differences}: a difference may come from that")
        return build_variant(plan, out, jobs=self.jobs).variant_dir

    def _native_noarch(self, name: str, metadata: Metadata, out: Path) -> Path:
        backend = metadata["backend"]["type"]
        made = build_noarch(self.kernel_dir, out, backends=[backend], config=self.config)
        if name not in {m.name for m in made}:
            raise ToolchainError(f"{name}: {self.kernel_dir} builds {made[0].name} for the {backend} backend")
        return out / name

    def _in_container(self, name: str, metadata: Metadata, out: Path) -> Path:
        """The cell's build in its builder image, the same that `build --variant` runs."""
        if self.matrix_file is None:
            raise ToolchainError("no container rebuild: no matrix file names the cells")
        try:
            resolved = Selection(file=self.matrix_file, variants=(name,), kernel_dir=self.kernel_dir).resolve()
            client = connect()
        except (ConfigError, EngineError) as exc:
            raise ToolchainError(f"no container rebuild: {first_line(exc)}") from None
        (cell,) = [c for c in resolved.cells if c.name == name]
        archs = metadata["backend"].get("archs")
        if cell.variant.cuda and archs:  # the capabilities it was built for, as natively
            cell = dataclasses.replace(cell, capabilities=tuple(archs))
        image = builder_for(client, cell, self.image_kind or resolved.matrix.spec.image, PipSetup.from_host(), self.log)
        built_in = recorded(metadata, "builder-image")
        if built_in and built_in != client.images.get(image).id:
            self.log(f"note: {name} was built in {built_in}; {image} is {client.images.get(image).id}")
        out.mkdir(parents=True, exist_ok=True)
        try:
            made, _ = build_cell(
                client,
                cell,
                image,
                kernel_dir=self.kernel_dir,
                build_dir=out,
                jobs=self.jobs,
                source_date_epoch=recorded(metadata, "source-date-epoch"),
            )
        except (EngineError, DockerException) as exc:  # a compile error (BuildError) is not this
            raise ToolchainError(f"the container rebuild failed: {first_line(exc)}") from None
        return made


# The toolchain fields that decide the bytes (provenance.toolchain); the builder
# image and SOURCE_DATE_EPOCH are applied, not compared.
_TOOLCHAIN_FIELDS = ("torch", "tvm-ffi", "python", "cxx", "nvcc")


def _toolchain_differences(metadata: Metadata, plan: BuildPlan) -> str:
    """How the recorded toolchain differs from this host's for plan ("" if it is the
    same, or if the variant records none: an older kernel-matrix built it)."""
    toolchain = metadata.get("provenance", {}).get("toolchain")
    if not isinstance(toolchain, dict):
        return ""
    here = toolchain_record(plan)
    return ", ".join(
        f"{key} {toolchain.get(key)} (here {here.get(key)})"
        for key in _TOOLCHAIN_FIELDS
        if toolchain.get(key) != here.get(key)
    )
