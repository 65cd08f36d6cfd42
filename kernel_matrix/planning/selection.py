"""What a command works on, resolved once: the matrix file's kernels and cells,
narrowed by --profile, --only, --variant and --kernel (or one kernel folder given
by --kernel-dir instead of the matrix's).

A cell is one kernel's variant. The matrix's torch x CUDA x arch grid is the same
for every kernel; each kernel takes the cells its build.toml allows (its backends,
torch and CUDA ranges), as kernel-builder filters its build sets
(nix-builder/lib/build.nix):
- a backend built against torch's stable ABI gets one cell per CUDA version and
  arch, built with the newest torch of the selection, named torch-stable-abi<XY>-...;
- a Python-only kernel ([torch-noarch]) gets one cell per backend, torch-<backend>,
  tested with the newest torch of the selection;
- a [tvm-ffi] kernel (no torch in its library) gets one cell per CUDA version and arch
  and a CPU one per arch, tvm-ffi01-..., built and tested in the newest torch's builder.

Without a matrix file (the default build_matrix.yaml missing) in a kernel's folder
(a build.toml there, or --kernel-dir), the matrix is the one kernel-matrix ships,
data/default_matrix.yaml, read as if it lay in that folder: its `kernel: .` is the
folder. `--file` or a build_matrix.yaml in the folder overrides it."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernel_matrix.config.buildtoml import (
    EDITION_4_NOTE,
    BuildConfig,
    edition_4_note,
    load_build_toml,
    located,
    no_section_note,
    skipped_note,
)
from kernel_matrix.config.didyoumean import did_you_mean
from kernel_matrix.config.github_event import GithubEvent
from kernel_matrix.errors import ConfigError
from kernel_matrix.layout import DEFAULT_BUILD_DIR, BuildDir
from kernel_matrix.planning.capabilities import UnbuildableSection, section_capabilities, variant_archs
from kernel_matrix.planning.github_jobs import Job, plan_jobs
from kernel_matrix.planning.matrix import (
    Cell,
    Machine,
    Matrix,
    cell_matches,
    check_sources,
    github_matrix,
    load_matrix,
    select,
)
from kernel_matrix.planning.variants import TVM_FFI_VERSION, legacy_name


@dataclass(frozen=True, eq=False)
class Kernel:
    """A kernel folder in kernel-builder's layout, with its build.toml read."""

    dir: Path
    config: BuildConfig

    @property
    def name(self) -> str:
        return self.config.general.name

    @staticmethod
    def load(folder: Path) -> Kernel:
        return Kernel(folder, load_build_toml(folder))


def matrix_kernels(matrix: Matrix) -> list[Kernel]:
    """The kernels a matrix file names, each folder relative to the file and inside its folder,
    each with a Hub repo of its own."""
    kernels: list[Kernel] = []
    for where, entry in matrix.spec.kernel_entries():
        folder = _kernel_folder(matrix, where, entry)
        problem = f"{folder} holds no build.toml (a kernel in kernel-builder's layout)"
        try:
            found = (folder / "build.toml").is_file()
        except OSError as exc:  # is_file() passes on e.g. ENAMETOOLONG (a 5000-character name)
            found, problem = False, f"cannot be read ({exc.strerror or exc})"
        if not found:
            line, col = matrix.located.position(where)
            raise ConfigError(f"{matrix.path}:{line}:{col}: {'.'.join(map(str, where))} = {entry!r}: {problem}")
        kernel = Kernel.load(folder)
        if any(k.name == kernel.name for k in kernels):
            line, col = matrix.located.position(where)
            raise ConfigError(f"{matrix.path}:{line}:{col}: a second kernel named {kernel.name!r} ({folder})")
        _check_own_hub_repo(matrix, kernel, kernels)
        kernels.append(kernel)
    by_name = {k.name: k for k in kernels}
    for index, selector in enumerate(matrix.spec.exclude):  # an exclude of one kernel: one of these, and its cells
        if selector.kernel is None:
            continue
        line, col = matrix.located.position(("exclude", index, "kernel"))
        excluded = by_name.get(selector.kernel)
        if excluded is None:
            raise ConfigError(
                f"{matrix.path}:{line}:{col}: exclude.{index}.kernel = {selector.kernel!r}: not a kernel of this "
                f"matrix (its build.toml names: {', '.join(by_name)})" + did_you_mean(selector.kernel, list(by_name))
            )
        if not any(cell_matches(cell, selector) and kernel_cells(excluded, [cell]) for cell in matrix.cells):
            raise ConfigError(f"{matrix.path}:{line}:{col}: exclude.{index} matches no cell of {excluded.name}")
    return kernels


def _kernel_folder(matrix: Matrix, where: tuple[str | int, ...], entry: str) -> Path:
    """The folder of a `kernel:`/`kernels:` entry, which must lie inside the matrix file's folder
    once `..` and links are resolved: a pull request's matrix names folders of its own
    repository, never `../other-checkout`, `/home/runner/...` or a link out of the tree."""
    base = matrix.path.parent
    folder = base / entry
    try:
        resolved, root = folder.resolve(), base.resolve()
    except (OSError, RuntimeError):  # a link loop (Python 3.10): no folder, as the check below says
        return folder
    if resolved == root or resolved.is_relative_to(root):
        return folder
    line, col = matrix.located.position(where)
    raise ConfigError(
        f"{matrix.path}:{line}:{col}: {'.'.join(map(str, where))} = {entry!r}: leads to {resolved}, outside "
        f"{root}, the matrix file's folder ('..', an absolute path or a link): name a kernel folder inside it"
    )


def _check_own_hub_repo(matrix: Matrix, kernel: Kernel, earlier: list[Kernel]) -> None:
    """One Hub repo per kernel: a kernel naming another's [general.hub] repo-id would publish
    over that kernel's release (its variants deleted, get_kernel loading the other kernel), and
    a different version or [general.hub] branch would still take that repo's card on main and
    its other versions. Compared as the Hub compares repo names, ignoring case."""
    repo_id = kernel.config.general.hub.repo_id
    if not repo_id:
        return
    other = next((k for k in earlier if (k.config.general.hub.repo_id or "").casefold() == repo_id.casefold()), None)
    if other is None:
        return
    raise ConfigError(
        f"{located(kernel.dir, 'general', 'hub', 'repo-id')}: [general.hub] repo-id = {repo_id!r} is also the "
        f"repo of kernel {other.name!r} ({located(other.dir, 'general', 'hub', 'repo-id')}): each kernel of "
        f"{matrix.path} publishes to a Hub repo of its own (one would replace the other's release)"
    )


def cells_of_kernel(matrix: Matrix, kernel: Kernel, grid: list[Cell]) -> list[Cell]:
    """The cells of grid this kernel builds, less the matrix's excludes of that kernel."""
    excluded = matrix.excluded_for(kernel.name)
    return kernel_cells(kernel, [cell for cell in grid if cell.name not in excluded])


def kernel_cells(kernel: Kernel, grid: list[Cell]) -> list[Cell]:
    """The cells of `grid` (in its order) that this kernel builds."""
    config = kernel.config
    if config.noarch:
        return _noarch_cells(kernel, grid)
    cells: dict[str, Cell] = {}
    for cell in grid:
        v = cell.variant
        if config.refuses(v.backend, v.torch, v.cuda) is not None:
            continue
        stable = config.torch.stable_abi_for(v.backend) if config.torch else None
        archs, refusal = _archs(kernel, cell)
        mine = dataclasses.replace(cell, kernel=kernel.name, archs=archs, refusal=refusal)
        if config.tvm_ffi is not None:
            variant = dataclasses.replace(v, tvm_ffi=TVM_FFI_VERSION)
        elif stable is not None and Version(v.torch) >= Version(str(stable)):
            variant = dataclasses.replace(v, stable_abi=str(stable))
        elif stable is None:
            cells[v.name] = mine
            continue
        else:
            continue  # a torch older than the stable ABI the backend is built against
        # One variant per CUDA version and arch: the grid is in torch order, so the
        # newest torch's cell replaces (and moves behind) the older ones.
        cells.pop(variant.name, None)
        cells[variant.name] = dataclasses.replace(mine, variant=variant)
    return list(cells.values())


def _no_cell(kernel: Kernel, reason: str) -> str:
    return f"{reason}, so {kernel.name} has no cell to build"


def _archs(kernel: Kernel, cell: Cell) -> tuple[tuple[str, ...], str | None]:
    """What the kernel's variant of this cell is compiled for, as its build computes it
    (() for a CPU cell), or why that build will refuse it: a section none of whose
    cuda-capabilities the cell's CUDA builds (kernel-builder's build fails there too)."""
    cuda = cell.variant.cuda
    if cuda is None:
        return (), None
    narrowed = list(cell.capabilities)
    try:
        sections = section_capabilities(kernel.config, cuda, narrowed, build_toml=kernel.dir / "build.toml")
    except UnbuildableSection as refusal:
        return (), f"{refusal.where}: warning: {refusal.problem}"
    return tuple(variant_archs(sections)), None


def _noarch_cells(kernel: Kernel, grid: list[Cell]) -> list[Cell]:
    """torch-<backend> for each declared backend (once, however often it is named, as
    kernel-builder's backend set), tested with the newest torch of the grid: its CUDA
    build for torch-cuda (PyPI's where the grid has it), its CPU build for the others;
    x86_64 where the grid has it. torch-cuda only with a CUDA within [general.cuda]'s
    range, as kernel-builder builds noarch variants from the build sets that range
    leaves (nix-builder lib/build.nix). No template, no cell."""
    config = kernel.config
    cells = []
    for backend in dict.fromkeys(config.general.backends):
        wanted = "cuda" if backend == "cuda" else "cpu"
        usable = [c for c in grid if c.variant.backend == wanted]
        if wanted == "cuda":
            usable = [c for c in usable if config.refuses("cuda", c.variant.torch, c.variant.cuda) is None]
        if not usable:
            continue
        newest = max(Version(c.variant.torch) for c in usable)
        candidates = [c for c in usable if Version(c.variant.torch) == newest]
        candidates.sort(key=lambda c: (c.variant.arch == "x86_64", c.torch_index == "pypi"))
        template = candidates[-1]
        variant = dataclasses.replace(template.variant, backend=backend, noarch=True)
        # What its metadata.json declares: [torch-noarch] cuda-capabilities, for torch-cuda.
        noarch = config.torch_noarch
        archs = tuple(noarch.cuda_capabilities or ()) if noarch and backend == "cuda" else ()
        cells.append(dataclasses.replace(template, variant=variant, kernel=kernel.name, capabilities=(), archs=archs))
    return cells


# The matrix file when --file is not given; without it, a kernel's folder gets the default matrix.
MATRIX_FILE = Path("build_matrix.yaml")


def default_matrix(path: Path) -> Matrix:
    """kernel-matrix's default matrix (data/default_matrix.yaml), named and placed as
    `path`: its `kernel: .` is path's folder, and messages name path."""
    with resources.as_file(resources.files("kernel_matrix.data").joinpath("default_matrix.yaml")) as packaged:
        matrix = load_matrix(packaged)
    return dataclasses.replace(matrix, path=path)


@dataclass(frozen=True)
class Selection:
    """The options every matrix-reading command shares."""

    file: Path = MATRIX_FILE
    profile: str = "full"
    only: str | None = None
    variants: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()  # --kernel NAME: these kernels of the matrix
    kernel_dir: Path | None = None  # --kernel-dir: this kernel instead of the matrix's

    def resolve(self, machine: Machine | None = None) -> Resolved:
        """The selected kernels and their cells; refuses an empty selection."""
        self._check_kernel_options()
        matrix = self.matrix()
        # Before anything reads an index or image the matrix names: every command, every job.
        check_sources(matrix, GithubEvent.from_environment())
        named = matrix_kernels(matrix) if self.kernel_dir is None else [Kernel.load(self.kernel_dir)]
        kernels = _pick(named, self.kernels, matrix.path)
        grid = select(matrix, profile=self.profile, only=self.only, machine=machine)
        cells = [cell for kernel in kernels for cell in cells_of_kernel(matrix, kernel, grid)]
        if self.variants:
            known = {cell.name for kernel in kernels for cell in cells_of_kernel(matrix, kernel, matrix.cells)}
            wanted = [legacy_name(name) for name in self.variants]  # kernels 0.19's new form of a name too
            for name in self.variants:
                if legacy_name(name) not in known:
                    raise ConfigError(
                        f"--variant {name}: no kernel of {self.matrix_name(matrix)} has it" + did_you_mean(name, known)
                    )
            cells = [cell for cell in cells if cell.name in wanted]
        if not cells:
            # A compiled kernel for backends kernel-matrix cannot build (ROCm, Metal, XPU) says so by name.
            for kernel in kernels:
                if reason := kernel.config.unbuilt():
                    raise ConfigError(f"{kernel.dir / 'build.toml'}: {_no_cell(kernel, reason)}")
            names = ", ".join(k.name for k in kernels)
            raise ConfigError(
                f"the selection has no cell of {names} (profile {self.profile}"
                + (f", --only {self.only}" if self.only else "")
                + (f", --variant {' '.join(self.variants)}" if self.variants else "")
                + "; a kernel takes the cells of its build.toml's backends and torch/CUDA ranges)"
            )
        # Several kernels get a build folder each; one kernel (or --kernel-dir) keeps build/<variant>.
        return Resolved(matrix, tuple(kernels), tuple(cells), several=len(named) > 1)

    def kernel_folders(self) -> list[tuple[Kernel, str | None]]:
        """For native builds and tests: each selected kernel and its subfolder of the
        build folder (None: the build folder itself). --kernel-dir needs no matrix file."""
        self._check_kernel_options()
        if self.kernel_dir is not None:
            return [(Kernel.load(self.kernel_dir), None)]
        matrix = self.matrix()
        named = matrix_kernels(matrix)
        return [(k, k.name if len(named) > 1 else None) for k in _pick(named, self.kernels, matrix.path)]

    @property
    def uses_default(self) -> bool:
        """No --file and no build_matrix.yaml here: the default matrix is read
        (lexists: a dangling link is a file whose error load_matrix reports)."""
        return self.file == MATRIX_FILE and not os.path.lexists(self.file)

    def matrix_name(self, matrix: Matrix) -> str:
        """How messages name the matrix read: its file, or the default one."""
        return "kernel-matrix's default matrix" if self.uses_default else str(matrix.path)

    def matrix(self) -> Matrix:
        """The matrix file, or in a kernel's folder without one the default matrix;
        with neither, one line that says how to get one."""
        if not self.uses_default:
            return load_matrix(self.file)
        if self.kernel_dir is None and not (self.file.parent / "build.toml").is_file():
            raise ConfigError(
                f"{self.file}: cannot read the matrix file (No such file or directory); run kernel-matrix in a "
                "kernel's folder (its build.toml), give --file, or write one with `kernel-matrix init`"
            )
        return default_matrix(self.file)

    def _check_kernel_options(self) -> None:
        if self.kernel_dir is not None and self.kernels:
            raise ConfigError("give --kernel (a kernel of the matrix) or --kernel-dir (a folder), not both")


def _pick(kernels: list[Kernel], names: tuple[str, ...], path: Path) -> list[Kernel]:
    if not names:
        return kernels
    known = [k.name for k in kernels]
    for name in names:
        if name not in known:
            raise ConfigError(
                f"--kernel {name}: {path} names no such kernel (it has {', '.join(known)})" + did_you_mean(name, known)
            )
    return [k for k in kernels if k.name in names]


@dataclass(frozen=True)
class KernelCells:
    """One kernel's selected cells and its build folder: what a command works through."""

    kernel: Kernel
    cells: list[Cell]
    build_dir: BuildDir


@dataclass(frozen=True)
class Resolved:
    matrix: Matrix
    kernels: tuple[Kernel, ...]
    cells: tuple[Cell, ...]
    several: bool  # the matrix names several kernels: a build folder each

    def kernel(self, cell: Cell) -> Kernel:
        return next(k for k in self.kernels if k.name == cell.kernel)

    def cells_of(self, kernel: Kernel) -> list[Cell]:
        return [cell for cell in self.cells if cell.kernel == kernel.name]

    def build_dir(self, root: Path, kernel: Kernel) -> BuildDir:
        return BuildDir(root, kernel.name if self.several else None)

    def work(self, root: Path, *, built_only: bool = False) -> list[KernelCells]:
        """Each kernel with its selected cells (only those built under root, if asked)."""
        work = []
        for kernel in self.kernels:
            build_dir = self.build_dir(root, kernel)
            cells = [c for c in self.cells_of(kernel) if not built_only or build_dir.is_built(c.name)]
            if cells:
                work.append(KernelCells(kernel, cells, build_dir))
        return work

    @cached_property
    def matrix_cells(self) -> dict[str, list[Cell]]:
        """Each selected kernel's cells in the whole matrix, not only the selection, planned
        once: what `idle` and `refusals` hold the selection against."""
        return {kernel.name: cells_of_kernel(self.matrix, kernel, self.matrix.cells) for kernel in self.kernels}

    @property
    def idle(self) -> list[str]:
        """One line per kernel of the matrix without a cell in it: one kernel-matrix builds no
        variant of (Metal or ROCm only), or whose torch/CUDA ranges miss the matrix's grid, or
        this selection's (the pr profile's newest torch). The others' cells are planned, and
        these would vanish from CI without a word."""
        lines = []
        for kernel in self.kernels:
            if reason := kernel.config.unbuilt():
                lines.append(f"{kernel.dir / 'build.toml'}: warning: {_no_cell(kernel, reason)}")
            elif not self.matrix_cells[kernel.name]:
                reason = f"its backends and torch/CUDA ranges leave none of {self.matrix.path}'s cells"
                lines.append(f"{kernel.dir / 'build.toml'}: warning: {_no_cell(kernel, reason)}")
            elif not self.cells_of(kernel):  # e.g. the pr profile's newest torch is above its maxver
                reason = f"its backends and torch/CUDA ranges leave none of this selection's cells: {kernel.name}"
                lines.append(f"{kernel.dir / 'build.toml'}: warning: {reason} is not built or tested here")
        return lines

    @property
    def notes(self) -> list[str]:
        """What the selected kernels' builds will say about their build.toml files, said
        before any job runs: [kernel.*] sections of backends kernel-matrix does not build
        (a line a kernel), selected backends that no [kernel.*] section is for, and files
        without `edition`, upgraded in memory as kernel-builder upgrades them (a line of
        their own for one kernel, else one line naming them all)."""
        lines = [note for kernel in self.kernels if (note := skipped_note(kernel.dir, kernel.config))]
        for kernel in self.kernels:  # a selected backend that only the binding would be compiled for
            backends = sorted({cell.variant.backend for cell in self.cells_of(kernel)})
            lines += [note for backend in backends if (note := no_section_note(kernel.dir, kernel.config, backend))]
        edition_4 = [kernel for kernel in self.kernels if kernel.config.general.edition is None]
        if len(edition_4) == 1 and (note := edition_4_note(edition_4[0].dir, edition_4[0].config)):
            lines.append(note)
        elif len(edition_4) > 1:
            names = ", ".join(kernel.name for kernel in edition_4)
            lines.append(f"note: {len(edition_4)} build.toml files have {EDITION_4_NOTE} ({names})")
        return lines

    @property
    def refusals(self) -> list[str]:
        """One line per kernel section that a CUDA version of the selection cannot build:
        its cells are planned, as kernel-builder plans them, and their builds will fail
        (`kernel-matrix matrix` says so before any job runs)."""
        refused: dict[str, list[Cell]] = {}
        for cell in self.cells:
            if cell.refusal:
                refused.setdefault(cell.refusal, []).append(cell)
        lines = []
        for refusal, cells in refused.items():
            kernel = self.kernel(cells[0])
            # Bounds from the whole matrix, not this selection (the pr profile has one torch).
            every = [c for c in self.matrix_cells[kernel.name] if c.variant.cuda]
            refused_cuda = {Version(c.variant.cuda or "0") for c in every if c.refusal}
            built = {Version(c.variant.cuda or "0") for c in every if not c.refusal}
            # The general.cuda bound that leaves these out and keeps the CUDA versions that build it.
            if built and min(built) > max(refused_cuda):
                advice = f'general.cuda.minver = "{min(built)}" leaves them out'
            elif built and max(built) < min(refused_cuda):
                advice = f'general.cuda.maxver = "{max(built)}" leaves them out'
            elif built:
                advice = "the section's cuda-minver or its cuda-capabilities decide which CUDA versions build it"
            else:
                advice = "no CUDA version of the selection builds it"
            lines.append(
                f"{refusal}: {len(cells)} cell(s) of {kernel.name} will fail to build "
                f"({', '.join(c.name for c in cells[:3])}{', ...' if len(cells) > 3 else ''}); {advice}"
            )
        return lines

    def github_matrix(self, cells: list[Cell] | tuple[Cell, ...]) -> dict[str, Any]:
        """Every cell's entry (`matrix --json`); `path` is its variant's folder under build/,
        `logs` its kernel's log folder. Not limited: the workflow's job matrices are
        github_jobs', which batch cells over GitHub's job limit."""
        matrix = github_matrix(list(cells))
        for entry, cell in zip(matrix["include"], cells, strict=True):
            entry["path"], entry["logs"] = self.build_paths(cell)
        return matrix

    def github_jobs(self, cells: list[Cell] | tuple[Cell, ...]) -> list[Job]:
        """The build workflow's jobs for these cells: one each, or batches of a kernel's
        cells where there are more than a GitHub Actions matrix takes (github_jobs.plan_jobs)."""
        return plan_jobs(cells, lambda cell: self.kernel(cell).name, self.build_paths, str(self.matrix.path))

    def build_paths(self, cell: Cell) -> tuple[str, str]:
        """The cell's variant folder and its kernel's log folder, relative to build/."""
        build_dir = self.build_dir(DEFAULT_BUILD_DIR, self.kernel(cell))
        return build_dir.relative(cell.name), build_dir.logs.relative_to(build_dir.root).as_posix()
