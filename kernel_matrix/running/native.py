"""One kernel's variant built natively, for this host or, in a build container, for the cell
the host asked for: the plan, the build, the load check and the reuse of a published variant,
composed here, between the command line (`kernel-matrix build`, the container worker) and the
stages they use (building/, checking/, releasing/). Its notes and progress go to the console
it is given; what it made is returned (Built) for the command line to show; a failure is raised,
its exit code with it."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_matrix.hostfiles import make_build_dir
from kernel_matrix.inert import styled
from kernel_matrix.layout import BuildDir

if TYPE_CHECKING:
    from rich.console import Console

    from kernel_matrix.building.compile import Step
    from kernel_matrix.building.native_build import BuildPlan
    from kernel_matrix.building.objcache import ObjectCache
    from kernel_matrix.containers.build_request import BuildRequest
    from kernel_matrix.planning.selection import Kernel
    from kernel_matrix.releasing.reuse import Reuse
    from kernel_matrix.releasing.signatures import Signer


@dataclass(frozen=True)
class Built:
    """What a native build made: each variant's folder (a compiled kernel's one; a Python-only
    kernel's, one per backend) and, for a compiled one, its op namespace and what it cost
    (reused: taken from the Hub, nothing compiled)."""

    variants: tuple[tuple[str, Path], ...]  # (variant name, its folder)
    module: str | None = None
    seconds: float = 0.0
    compiled: int = 0
    cached: int = 0
    reused: bool = False


def published_of(chosen: Kernel, signer: Signer, trust_root: Path | None) -> Reuse:
    """Where `build --reuse-published` looks: the kernel's Hub repo, on its release branch."""
    from kernel_matrix.checking.testing import hub_repo_id
    from kernel_matrix.releasing.release import release_branch
    from kernel_matrix.releasing.reuse import Reuse

    return Reuse(hub_repo_id(chosen.config), release_branch(chosen.config), signer, trust_root)


def _reused(
    plan: BuildPlan, where: BuildDir, reuse: Reuse | None, candidate: tuple[Path, str] | None, console: Console
) -> Built | None:
    """plan's variant, where it was taken from the Hub (its line said either way): looked up
    there (reuse, a native build), or the candidate the host fetched and verified (in a
    container: (its folder, where it was published))."""
    from kernel_matrix.building.inputs import build_inputs
    from kernel_matrix.building.native_build import BuildResult, recorded_toolchain, write_build_stats
    from kernel_matrix.building.published import take

    inputs = build_inputs(plan, recorded_toolchain(plan))
    if candidate is not None:  # in a container: fetched and verified by the host
        reused = take(candidate[0], candidate[1], plan.variant.name, inputs, where.path)
    else:
        from kernel_matrix.releasing.reuse import reuse_published

        assert reuse is not None
        reused = reuse_published(reuse, plan.variant.name, inputs, where.path)
    console.print(reused.line, markup=False, highlight=False, soft_wrap=True)
    if reused.variant_dir is None:
        return None
    write_build_stats(
        where.log(plan.variant.name, "build.json"), 0.0, BuildResult(reused.variant_dir, 0, 0), reused=True
    )
    return Built(((plan.variant.name, reused.variant_dir),), module=plan.module, reused=True)


def _load_check(stage: Path, name: str, python: str, backend: str, where: BuildDir) -> str | None:
    """kernel-builder's get-kernel-check: the variant is loaded before it replaces the built
    one (BuildError if it does not load); why it could not be loaded here, or None."""
    from kernel_matrix.checking.load import load_check

    return load_check(stage, name, python=python, backend=backend, log=where.log(name, "load.log"))


def _loads(kernel: Kernel, load: bool, expected: BuildRequest | None, console: Console) -> bool:
    """Whether a native build loads its variant: not in a cell's container (the workflow's
    test jobs load it: checking/load.py), nor with --no-load-check, nor where the kernel's
    flake.nix turns kernel-builder's check off (a line says so)."""
    from kernel_matrix.config.flake import NO_GET_KERNEL_CHECK, flake_line

    if not load or expected is not None:
        return False
    if found := flake_line(kernel.dir, NO_GET_KERNEL_CHECK):
        flake, line = found
        console.print(
            f"{flake}:{line}: note: doGetKernelCheck = false: the variant is not loaded after the build",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return False
    return True


def _say_not_loaded(names: list[str], why: str, console: Console) -> None:
    console.print(
        f"note: {', '.join(names)}: not loaded after the build: {why}", markup=False, highlight=False, soft_wrap=True
    )


def build_native(
    kernel: Kernel,
    where: BuildDir,
    python: str | None,
    backend: str | None,
    jobs: int | None,
    capabilities: list[str] | None,
    cache: ObjectCache | None,
    expected: BuildRequest | None = None,
    *,
    load: bool = True,
    reuse: Reuse | None = None,
    candidate: tuple[Path, str] | None = None,
    console: Console,
) -> Built:
    """One kernel's variant for this host (or, in a build container, for the cell
    `expected` asks for: refused before anything is written if it would be another)."""
    from kernel_matrix.building.compile import Progress
    from kernel_matrix.building.native_build import build_noarch, build_variant, plan_build, write_build_stats
    from kernel_matrix.building.source_checks import check_kernel_sources
    from kernel_matrix.config.buildtoml import edition_4_note, no_section_note, skipped_note

    check_kernel_sources(kernel.dir, kernel.config)
    if kernel.config.noarch:  # Python only: every backend's variant (or --backend's), nothing compiled
        make_build_dir(where.path)
        if expected is None and (note := edition_4_note(kernel.dir, kernel.config)):  # as a compiled build says it
            console.print(note, markup=False, highlight=False, soft_wrap=True)

        not_loaded: dict[str, list[str]] = {}  # why -> variants: one line for the backends this torch does not load

        def load_noarch(stage: Path, noarch_backend: str) -> None:
            name = f"torch-{noarch_backend}"
            if why := _load_check(stage, name, python or sys.executable, noarch_backend, where):
                not_loaded.setdefault(why, []).append(name)

        made_list = build_noarch(
            kernel.dir,
            where.path,
            backends=[backend] if backend else None,
            config=kernel.config,
            check=load_noarch if _loads(kernel, load, expected, console) else None,
        )
        for why, names in not_loaded.items():
            _say_not_loaded(names, why, console)
        return Built(tuple((made.name, made) for made in made_list))
    plan = plan_build(kernel.dir, python=python, backend=backend, cuda_capabilities=capabilities, config=kernel.config)
    if expected is not None:
        nvcc = f", nvcc {plan.nvcc.version}" if plan.nvcc else ""
        expected.check(plan.variant.name, f"{plan.framework}{nvcc}")
    make_build_dir(where.path)  # once the inputs are known to be good: a refused build writes nothing
    notes = [skipped_note(kernel.dir, kernel.config), no_section_note(kernel.dir, kernel.config, plan.backend)]
    if expected is None:  # not in a cell's container: `matrix` said it for the cells
        notes.append(edition_4_note(kernel.dir, kernel.config))
    for note in notes:
        if note:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
    for name in plan.own_list_sections:
        console.print(
            f"note: [kernel.{name}]: none of its cuda-capabilities is among --cuda-capabilities "
            f"{','.join(capabilities or [])}: built for its own list ({' '.join(plan.section_capabilities[name])}), "
            "as kernel-builder builds such a section",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if (reuse is not None or candidate is not None) and (reused := _reused(plan, where, reuse, candidate, console)):
        return reused
    loads = _loads(kernel, load, expected, console)
    console.print(
        styled(
            (plan.variant.name, "bold"),
            f": {plan.framework}"
            + (f", nvcc {plan.nvcc.version}, capabilities {' '.join(plan.capabilities)}" if plan.nvcc else ""),
        )
    )
    started = time.monotonic()
    progress = Progress()
    with console.status(f"building {plan.variant.name}") as status:

        def report(step: Step, cached: bool) -> None:
            # As each step ends: how many of all are done and where the time goes (the
            # slowest compile so far), one line per step, no redrawing (CI logs keep every
            # redraw); a terminal's status line keeps both in view while compiles run.
            slowest, count = progress.slowest, f"[{progress.done}/{progress.total}]"
            took = ""
            if not cached and step.compilers:
                newest = slowest is not None and slowest[1] == step.label
                took = f" ({progress.last:.0f}s{', the slowest so far' if newest else ''})"
            console.print(styled("  ", ("cached" if cached else "done", "green"), f" {step.label}{took} {count}"))
            slowest_text = f", slowest {slowest[1]} ({slowest[0]:.0f}s)" if slowest else ""
            status.update(styled(f"building {plan.variant.name}: {count} done{slowest_text}"))

        def load_staged(stage: Path) -> None:
            status.update(styled(f"loading {plan.variant.name} with kernels.get_local_kernel"))
            if why := _load_check(stage, plan.variant.name, plan.torch.python, plan.backend, where):
                _say_not_loaded([plan.variant.name], why, console)

        check = load_staged if loads else None
        result = build_variant(plan, where.path, on_step=report, jobs=jobs, cache=cache, progress=progress, check=check)
    seconds = time.monotonic() - started
    for line in cache.refusals() if cache is not None else []:  # why the cache was not used
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    write_build_stats(where.log(plan.variant.name, "build.json"), seconds, result)
    return Built(
        ((plan.variant.name, result.variant_dir),),
        module=plan.module,
        seconds=seconds,
        compiled=result.compiled,
        cached=result.cached,
    )
