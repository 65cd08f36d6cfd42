"""build_matrix.yaml -> the list of cells (variants) to build, with everything a
CI job needs. One pure function from the file (and the machine, for the `local`
profile: a Machine value, probed by the caller with toolchain.this_machine) to
cells; all pruning happens here, never in workflow YAML."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from packaging.version import Version
from pydantic import BaseModel, ValidationError

from kernel_matrix import data
from kernel_matrix.config.buildtoml import BUILDABLE_BACKENDS
from kernel_matrix.config.configfile import read_config
from kernel_matrix.config.didyoumean import did_you_mean
from kernel_matrix.config.github_event import UNTRUSTED_ENV, GithubEvent, is_github_hosted
from kernel_matrix.config.matrix_schema import (
    Arch,
    ArchRunners,
    CapabilityRow,
    CellSelector,
    CellSpec,
    MatrixFile,
    TorchRelease,
    Upstream,
)
from kernel_matrix.config.yamlsource import Located, YamlProblems, load_located
from kernel_matrix.errors import ConfigError
from kernel_matrix.planning.capabilities import compilable_range, default_capabilities, gpu_target, runs_on
from kernel_matrix.planning.variants import Variant, cuda_tag

# GitHub Actions refuses a job matrix with more cells than this.
GITHUB_MATRIX_LIMIT = 256
PROFILES = ("full", "pr", "local")
FILTER_KEYS = ("torch", "cuda", "arch", "backend")


@dataclass(frozen=True)
class Machine:
    """What the `local` profile may build: this host's arch and CUDA toolkit."""

    arch: str
    nvcc: str | None  # "13.0", or None without nvcc


@dataclass(frozen=True)
class Cell:
    variant: Variant
    image: str
    torch_index: str  # "pypi", or the URL of a wheel index
    build_runner: tuple[str, ...]
    test_runner: tuple[str, ...]
    capabilities: tuple[str, ...]  # the CUDA version's targets (the build's --cuda-capabilities)
    kernel: str | None = None  # the kernel's name ([general] name); None in the bare torch x CUDA grid
    # What the kernel's variant is compiled for (metadata.json's backend.archs), for a kernel's
    # compiled CUDA cell; () otherwise.
    archs: tuple[str, ...] = ()
    gpu_test_capability: str | None = None  # archs.<arch>.gpu-test-capability
    # Why the kernel's build of this cell will refuse it ("<build.toml>: warning: ..."), as planned.
    refusal: str | None = None

    @property
    def cpu_testable(self) -> bool:
        """Runners exist for the backends kernel-matrix builds; a noarch variant of another
        backend (xpu, metal) is built, not tested."""
        return self.variant.backend in BUILDABLE_BACKENDS

    @property
    def gpu_testable(self) -> bool:
        """A CUDA cell, unless its build will refuse it, or the GPU runners' declared
        capability runs none of its archs: the loader would refuse the variant there
        (kernels' check_arch)."""
        if self.variant.backend != "cuda" or self.refusal:  # no variant to test: its build fails
            return False
        if not self.test_runner:  # the arch has no GPU runner (gpu-test-runner: [])
            return False
        if self.gpu_test_capability is None or not self.archs:
            return True
        return runs_on(list(self.archs), gpu_target(self.gpu_test_capability))

    @property
    def name(self) -> str:
        return self.variant.name

    def to_json(self) -> dict[str, Any]:
        v = self.variant
        return {
            "kernel": self.kernel,
            "variant": v.name,
            "torch": v.torch,
            "cuda": v.cuda,
            "backend": v.backend,
            "arch": v.arch,
            "image": self.image,
            "torch_index": self.torch_index,
            "torch_spec": f"torch=={v.torch}.*",
            "capabilities": list(self.capabilities),
            "archs": list(self.archs),
            "build_runner": list(self.build_runner),
            "test_runner": list(self.test_runner),
            "noarch": v.noarch,
            "stable_abi": v.stable_abi,
            "cpu_test": self.cpu_testable,
            "gpu_test": self.gpu_testable,
        }


@dataclass
class Matrix:
    path: Path
    spec: MatrixFile
    cells: list[Cell]
    located: Located

    def excluded_for(self, kernel: str) -> set[str]:
        """The grid's cells that an exclude with `kernel: <kernel>` leaves out of that kernel's."""
        selectors = [selector for selector in self.spec.exclude if selector.kernel == kernel]
        return {cell.name for cell in self.cells if any(cell_matches(cell, s) for s in selectors)}

    @cached_property
    def warnings(self) -> list[str]:
        """Cells whose names the installed `kernels` loader would not accept. Computed
        when read (only `kernel-matrix matrix` shows them): it imports `kernels`, whose
        package imports huggingface_hub's client, most of a matrix-reading command's
        start-up time."""
        return [*_loader_warnings(self.path, self.located, self.cells), *self._untested_on_gpus()]

    def _untested_on_gpus(self) -> list[str]:
        """A line per arch whose gpu-test-runner is [] and that has CUDA cells: they are
        released without a GPU test, which must not go unnoticed."""
        lines = []
        for arch, runners in self.spec.archs.items():
            cuda = [c for c in self.cells if c.variant.arch == arch and c.variant.backend == "cuda"]
            if not runners.gpu_test_runner and cuda:
                line, col = self.located.position(("archs", arch, "gpu-test-runner"))
                lines.append(
                    f"{self.path}:{line}:{col}: warning: archs.{arch}.gpu-test-runner is []: every kernel's "
                    f"variants of its {len(cuda)} CUDA grid cells are built and tested on CPUs only (a kernel "
                    "without cpu in its backends: loaded only), and released without a GPU test"
                )
        return lines


class _Problems:
    """Collects `file:line:col: message` lines, to raise them together."""

    def __init__(self, path: Path, located: Located) -> None:
        self.path, self.located = path, located
        self.lines: list[str] = []

    def add(self, where: tuple[str | int, ...], message: str) -> None:
        line, col = self.located.position(where)
        self.lines.append(f"{self.path}:{line}:{col}: {message}")

    def raise_if_any(self) -> None:
        if self.lines:
            raise ConfigError("\n".join(self.lines))


def load_matrix(path: Path) -> Matrix:
    """Read and validate build_matrix.yaml and expand it to all its cells."""
    # Its size is checked before any of it is parsed (configfile), its nodes and
    # depth while it is composed (yamlsource).
    text = read_config(path, "the matrix file")
    try:
        located = load_located(text)
    except YamlProblems as exc:
        raise ConfigError("\n".join(f"{path}:{p.line}:{p.col}: {p.message}" for p in exc.problems)) from None
    problems = _Problems(path, located)
    try:
        spec = MatrixFile.model_validate(located.data)
    except ValidationError as exc:
        # One line per place: a union fails once per member, the first says enough.
        by_place: dict[tuple[str | int, ...], list[str]] = {}
        for error in exc.errors():
            where = _data_path(located.data, error["loc"])
            by_place.setdefault(where, []).append(_describe(error, where, located))
        for where, messages in by_place.items():
            problems.add(where, messages[0])
        problems.raise_if_any()
    return _expand(path, spec, located, problems)


def _data_path(data: Any, loc: Iterable[str | int]) -> tuple[str | int, ...]:
    """pydantic's error location reduced to the parts that exist in the data
    (it also names union members, such as "literal['all']")."""
    path: list[str | int] = []
    node = data
    for part in loc:
        present = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if present:
            node = node[part]
            path.append(part)
    return tuple(path)


# Which section a key belongs to, for "did you mean" on unknown keys.
_SECTIONS: dict[tuple[str | int, ...], type[BaseModel]] = {
    (): MatrixFile,
    ("upstream",): Upstream,
    ("archs", "*"): ArchRunners,
    ("torch-releases", "*"): TorchRelease,
    ("exclude", "*"): CellSelector,
    ("include", "*"): CellSpec,
    ("cuda-capabilities", "*"): CapabilityRow,
}


def _describe(error: Mapping[str, Any], where: tuple[str | int, ...], located: Located) -> str:
    if error["type"] == "extra_forbidden":
        key = where[-1]
        shape = where[:1] + ("*",) * (len(where) - 2) if len(where) > 1 else ()
        section = _SECTIONS.get(shape)
        known = [f.alias or name for name, f in section.model_fields.items()] if section else []
        return f"unknown key '{key}'" + did_you_mean(key, known)
    dotted = ".".join(str(p) for p in where) or "the file"
    if error["type"] == "missing":
        return f"{dotted}: missing required key '{error['loc'][-1]}'"
    shown = located.raw.get(where, error.get("input"))
    return f"{dotted} = {shown!r}: {error['msg'].removeprefix('Value error, ')}"


def _expand(path: Path, spec: MatrixFile, located: Located, problems: _Problems) -> Matrix:
    releases = {
        **{k: TorchRelease.model_validate(v) for k, v in data.load("torch_releases").items()},
        **spec.torch_releases,
    }
    toolkits = data.load("cuda_toolkits")
    capability_table = (
        [row.model_dump() | {"min_cuda": row.min_cuda} for row in spec.cuda_capabilities]
        if spec.cuda_capabilities is not None
        else data.load("cuda_capabilities")
    )

    # torch x CUDA pairs, each checked against what that torch release ships.
    pairs: list[tuple[str, str | None]] = []
    for torch, wanted in spec.torch.items():
        release = releases.get(torch)
        if release is None:
            problems.add(
                ("torch", torch),
                f"torch {torch} is not in the release table "
                f"(known: {', '.join(sorted(releases, key=Version))}); add it under torch-releases"
                + did_you_mean(torch, releases),
            )
            continue
        cudas = wanted if isinstance(wanted, list) else release.cuda  # a list, or "all" it ships
        for index, cuda in enumerate(cudas):
            if cuda not in release.cuda:
                problems.add(
                    ("torch", torch, index),
                    f"torch {torch} has no CUDA {cuda} build (it ships "
                    f"{', '.join(release.cuda)})" + did_you_mean(cuda, release.cuda),
                )
            elif (torch, cuda) in pairs:
                problems.add(("torch", torch, index), f"duplicate cell: torch {torch} with CUDA {cuda} is listed twice")
            else:
                pairs.append((torch, cuda))
        if spec.cpu:
            pairs.append((torch, None))

    def cuda_problem(cuda: str) -> str | None:
        if cuda not in toolkits:
            return f"CUDA {cuda} is not a known toolkit (known: {', '.join(toolkits)})" + did_you_mean(cuda, toolkits)
        return None

    cells: dict[str, Cell] = {}

    def add_cell(torch: str, cuda: str | None, arch: Arch, where: tuple[str | int, ...]) -> None:
        variant = Variant(torch=torch, backend="cuda" if cuda else "cpu", cuda=cuda, arch=arch)
        if variant.name in cells:
            problems.add(where, f"duplicate cell: {variant.name} is already in the matrix")
            return
        runners = spec.archs[arch]
        capabilities = tuple(default_capabilities(cuda, capability_table)) if cuda else ()
        cells[variant.name] = Cell(
            variant=variant,
            image=_image(spec, cuda, arch, toolkits),
            torch_index=_torch_index(spec, releases[torch], cuda),
            build_runner=tuple(runners.build_runner),
            test_runner=tuple(runners.gpu_test_runner if cuda else runners.build_runner),
            capabilities=capabilities,
            gpu_test_capability=runners.gpu_test_capability if cuda else None,
        )

    for torch, cuda in pairs:
        if cuda and (problem := cuda_problem(cuda)):
            problems.add(("torch", torch), problem)
            continue
        for arch in spec.archs:
            add_cell(torch, cuda, arch, ("torch", torch))

    for index, selector in enumerate(spec.exclude):
        matched = [name for name, cell in cells.items() if cell_matches(cell, selector)]
        if not matched:
            problems.add(("exclude", index), "this exclude matches no cell")
        if selector.kernel is not None:
            continue  # one kernel's: the selection leaves them out of its cells (Matrix.excluded_for)
        for name in matched:
            del cells[name]

    for index, include in enumerate(spec.include):
        where = ("include", index)
        cuda = None if include.cuda == "cpu" else include.cuda
        release = releases.get(include.torch)
        if release is None:
            problems.add(
                where,
                f"impossible cell: torch {include.torch} is not in the release table"
                + did_you_mean(include.torch, releases),
            )
        elif cuda is not None and cuda not in release.cuda:
            problems.add(
                where,
                f"impossible cell: torch {include.torch} has no CUDA {cuda} build (it ships "
                f"{', '.join(release.cuda)})" + did_you_mean(cuda, release.cuda),
            )
        elif include.arch not in spec.archs:
            problems.add(where, f"impossible cell: arch {include.arch} has no runners under archs")
        elif cuda and (problem := cuda_problem(cuda)):
            problems.add(where, problem)
        else:
            add_cell(include.torch, cuda, include.arch, where)

    cuda_versions = {c.variant.cuda for c in cells.values() if c.variant.cuda is not None}
    _check_capabilities(spec, cuda_versions, problems)
    _check_torch_index(spec, releases, cells.values(), problems)
    problems.raise_if_any()
    if not cells:
        raise ConfigError(f"{path}:1:1: the matrix has no cells (everything is excluded?)")
    ordered = sorted(cells.values(), key=_cell_order)
    return Matrix(path=path, spec=spec, cells=ordered, located=located)


def _cell_order(cell: Cell) -> tuple[Version, bool, Version, str]:
    v = cell.variant
    return (Version(v.torch), v.backend != "cpu", Version(v.cuda or "0"), v.arch)


def cell_matches(cell: Cell, selector: CellSelector) -> bool:
    v = cell.variant
    return (
        (selector.torch is None or selector.torch == v.torch)
        and (selector.cuda is None or selector.cuda == (v.cuda or "cpu"))
        and (selector.arch is None or selector.arch == v.arch)
    )


def _image(spec: MatrixFile, cuda: str | None, arch: str, toolkits: dict[str, Any]) -> str:
    key = cuda or "cpu"
    if key in spec.images:
        return spec.images[key]
    if spec.image == "offline":
        return "offline"  # made on the build host (debootstrap); its tag is a hash known only there
    if cuda is None:
        return f"quay.io/pypa/manylinux_2_28_{arch}"
    # Rocky Linux 8 has glibc 2.28: what it builds passes the manylinux_2_28 check.
    return f"nvidia/cuda:{toolkits[cuda]['toolkit']}-devel-rockylinux8"


def _torch_index(spec: MatrixFile, release: TorchRelease, cuda: str | None) -> str:
    pytorch = f"{spec.upstream.pytorch.rstrip('/')}/{cuda_tag(cuda) if cuda else 'cpu'}"
    if spec.torch_index == "pytorch":
        return pytorch
    on_pypi = cuda is not None and release.pypi == cuda
    return "pypi" if on_pypi else pytorch


def _check_torch_index(
    spec: MatrixFile, releases: dict[str, TorchRelease], cells: Iterable[Cell], problems: _Problems
) -> None:
    if spec.torch_index != "pypi":
        return
    for cell in cells:
        v = cell.variant
        release = releases[v.torch]
        if v.cuda is None or release.pypi != v.cuda:
            problems.add(
                ("torch-index",),
                f"torch-index is pypi, but PyPI's torch {v.torch} is "
                f"{'CUDA ' + release.pypi if release.pypi else 'a CPU build'}, so {v.name} needs "
                "PyTorch's index (use auto)",
            )
            return


def _check_capabilities(spec: MatrixFile, cudas: set[str], problems: _Problems) -> None:
    """A matrix's own capability table: a row for every CUDA version it builds, each
    capability one that version's nvcc compiles."""
    if spec.cuda_capabilities is None:
        return
    for cuda in sorted(cudas, key=Version):
        for row_index, row in enumerate(spec.cuda_capabilities):
            if Version(cuda) < Version(row.min_cuda):
                continue
            compilable = compilable_range(cuda)
            assert compilable is not None  # an unknown CUDA version was refused above
            low, high = compilable
            for index, capability in enumerate(row.capabilities):
                if not low <= Version(capability) <= high:
                    problems.add(
                        ("cuda-capabilities", row_index, "capabilities", index),
                        f"CUDA {cuda} cannot compile capability {capability} (its nvcc supports {low} to {high})",
                    )
            break
        else:  # no row for this CUDA version: its cells would be built for no capability at all
            lowest = min((row.min_cuda for row in spec.cuda_capabilities), key=Version, default=None)
            problems.add(
                ("cuda-capabilities",),
                f"no row covers CUDA {cuda}, which the matrix builds (the lowest min-cuda is {lowest}): "
                f'add a row with min-cuda "{cuda}" or lower',
            )


def _loader_warnings(path: Path, located: Located, cells: list[Cell]) -> list[str]:
    """Cells whose names the installed `kernels` loader would not accept."""
    # Imported here, not at the top: `kernels` costs every command that reads the matrix
    # (build, wheels, shell, publish, clean) its start-up time, and only `matrix` warns.
    from kernel_matrix.loader import parse_variant

    warnings = []
    for cell in cells:
        try:
            ok = parse_variant(cell.name).variant_str == cell.name
        except ValueError:
            ok = False
        if not ok:
            line, col = located.position(("torch", cell.variant.torch))
            warnings.append(f"{path}:{line}:{col}: warning: the installed kernels loader would not load {cell.name}")
    return warnings


def select(
    matrix: Matrix,
    *,
    profile: str = "full",
    only: str | None = None,
    variants: Iterable[str] = (),
    machine: Machine | None = None,
) -> list[Cell]:
    """The cells of a profile, narrowed by --only and --variant; refuses an empty selection
    (GitHub's job limit is Resolved.github_matrix's). machine: what the `local` profile
    selects for (toolchain.this_machine())."""
    cells = matrix.cells
    if profile == "pr":
        cells = _pr_profile(cells)
    elif profile == "local":
        if machine is None:
            raise ValueError("the local profile selects for a machine: pass toolchain.this_machine()")
        cells = [
            c
            for c in cells
            if c.variant.arch == machine.arch
            and (c.variant.cuda == machine.nvcc if machine.nvcc else c.variant.backend == "cpu")
        ]
    elif profile != "full":
        raise ConfigError(
            f"unknown profile '{profile}' (profiles: {', '.join(PROFILES)})" + did_you_mean(profile, PROFILES)
        )
    if only:
        cells = _apply_only(cells, matrix.cells, only)
    names = list(variants)
    if names:
        known = {c.name for c in matrix.cells}
        for name in names:
            if name not in known:
                raise ConfigError(f"--variant {name}: not in {matrix.path}" + did_you_mean(name, known))
        cells = [c for c in cells if c.name in names]
    if not cells:
        raise ConfigError(
            f"the selection is empty (profile {profile}"
            + (f", --only {only}" if only else "")
            + (f", --variant {' '.join(names)}" if names else "")
            + ")"
        )
    return cells


def _pr_profile(cells: list[Cell]) -> list[Cell]:
    """The newest torch: its newest CUDA of each major, and its CPU variant, on every arch."""
    newest = max((c.variant.torch for c in cells), key=Version)
    of_newest = [c for c in cells if c.variant.torch == newest]
    newest_per_major: dict[int, Version] = {}
    for cell in of_newest:
        if cell.variant.cuda:
            cuda = Version(cell.variant.cuda)
            newest_per_major[cuda.major] = max(newest_per_major.get(cuda.major, cuda), cuda)
    keep = {str(v) for v in newest_per_major.values()}
    return [c for c in of_newest if c.variant.cuda is None or str(Version(c.variant.cuda)) in keep]


def _apply_only(cells: list[Cell], all_cells: list[Cell], only: str) -> list[Cell]:
    for term in only.split(","):
        key, sep, value = term.strip().partition("=")
        if not sep or key not in FILTER_KEYS:
            raise ConfigError(
                f"--only {term!r}: expected KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}"
                + did_you_mean(key, FILTER_KEYS)
            )
        values = {_field(c, key) for c in all_cells}
        if value not in values:
            raise ConfigError(
                f"--only {key}={value}: no cell has {key} {value} "
                f"(known: {', '.join(sorted(values))})" + did_you_mean(value, values)
            )
        cells = [c for c in cells if _field(c, key) == value]
    return cells


def _field(cell: Cell, key: str) -> str:
    v = cell.variant
    return {"torch": v.torch, "cuda": v.cuda or "cpu", "arch": v.arch, "backend": v.backend}[key]


def check_runners(matrix: Matrix, cells: list[Cell], event: GithubEvent) -> None:
    """A pull request's (or a fork's) matrix may only name GitHub-hosted build
    runners: its build and CPU-test jobs run its code there."""
    if not event.hosted_runners_only:
        return
    problems = _Problems(matrix.path, matrix.located)
    used = {cell.variant.arch for cell in cells}
    for arch in sorted(a for a in matrix.spec.archs if a in used):
        labels = matrix.spec.archs[arch].build_runner
        if not is_github_hosted(labels):
            problems.add(
                ("archs", arch, "build-runner"),
                f"archs.{arch}.build-runner = {labels}: a {event.name} event may only build on one "
                "GitHub-hosted runner label (ubuntu-*, windows-*, macos-*), never a self-hosted one",
            )
    problems.raise_if_any()


def check_sources(matrix: Matrix, event: GithubEvent) -> None:
    """A pull request's (or an untrusted local run's) matrix may not choose where code
    comes from: the package indexes torch is installed from (`upstream`) and the base
    images (`images`) must be kernel-matrix's defaults; a trusted run may change them."""
    if event.trusted:
        return
    problems = _Problems(matrix.path, matrix.located)
    defaults = Upstream()
    who = f"a {event.name} event" if event.name else f"an untrusted run ({UNTRUSTED_ENV})"
    for name in ("pypi", "pytorch"):
        value = getattr(matrix.spec.upstream, name)
        if value != getattr(defaults, name):
            problems.add(
                ("upstream", name),
                f"upstream.{name} = {value!r}: {who} may only install from the default index "
                f"{getattr(defaults, name)!r}",
            )
    for key, image in matrix.spec.images.items():
        problems.add(("images", key), f"images.{key} = {image!r}: {who} may only build on the default base images")
    problems.raise_if_any()


def github_matrix(cells: list[Cell]) -> dict[str, Any]:
    return {"include": [cell.to_json() for cell in cells]}


def gpu_test_cells(cells: list[Cell], event: GithubEvent) -> list[Cell]:
    """The cells the self-hosted GPU runners test: CUDA ones whose variant runs on their
    GPU (Cell.gpu_testable), and none for a fork's code."""
    return [] if event.from_fork else [cell for cell in cells if cell.gpu_testable]
