"""The kernels `kernel-matrix init` sets up: the one in the repository's folder (its
build.toml), or the folders below it that hold one; and those it leaves out, with why.
The search stays inside the repository: it follows no linked folder and reads no
build.toml through a link out of it (a repository's files may be someone else's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernel_matrix.config.buildtoml import BuildConfig, load_build_toml
from kernel_matrix.errors import ConfigError

MATRIX = Path("build_matrix.yaml")
# How deep below DIR kernel folders are looked for (kernels-community/<kernel>/build.toml is 1).
SEARCH_DEPTH = 3
# Folders that hold no kernel of the repository: build output, environments, dependencies.
NOT_KERNELS = {"build", "dist", "node_modules", "venv", "__pycache__"}


def find_kernels(directory: Path) -> tuple[list[tuple[str, BuildConfig]], list[tuple[str, str]]]:
    """(folder relative to directory, its build.toml) for the kernel in directory, or
    else for each folder below it (SEARCH_DEPTH levels) that holds a build.toml; and the
    folders left out with why: a build.toml kernel-matrix refuses (its first line), a
    kernel it builds no variant of (its backends, or a torch range outside the default
    grid), a second kernel of one name, a kernel deeper than the search looks, and (for
    a kernel in directory itself) the kernels below it. A kernel in directory itself is
    refused for the same reasons."""
    within, deeper = _build_toml_folders(directory)
    too_deep = [
        (folder, f"deeper than the {SEARCH_DEPTH} folders init searches; add it to {MATRIX}'s kernels: to build it")
        for folder in deeper
    ]
    if (directory / "build.toml").is_file():
        below = [*within, *deeper]
        if outside := _linked_out(directory, "build.toml"):
            raise ConfigError(f"{directory / 'build.toml'}: {outside} (nothing written)")
        config = load_build_toml(directory)
        if reason := config.unbuilt() or _outside_the_grid(config):
            elsewhere = ""
            if below:
                elsewhere = f"; init in a folder without a build.toml sets up the kernels below ({', '.join(below)})"
            raise ConfigError(
                f"{directory / 'build.toml'}: {reason}: init has nothing to set up (nothing written){elsewhere}"
            )
        root = f"init set up the kernel in this folder's build.toml; add it to {MATRIX}'s kernels: to build it too"
        return [(".", config)], [(folder, root) for folder in below]
    found: list[tuple[str, BuildConfig]] = []
    left_out: list[tuple[str, str]] = list(too_deep)
    for folder in within:
        if outside := _linked_out(directory, f"{folder}/build.toml"):
            left_out.append((folder, outside))
            continue
        try:
            config = load_build_toml(directory / folder)
        except ConfigError as exc:
            lines = str(exc).splitlines()
            more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
            left_out.append((folder, lines[0] + more))
            continue
        namesake = next((f for f, c in found if c.general.name == config.general.name), None)
        if reason := config.unbuilt() or _outside_the_grid(config):
            left_out.append((folder, reason))
        elif namesake is not None:  # one matrix cannot hold two kernels of one name
            left_out.append((folder, f"a second kernel named {config.general.name!r} (the first: {namesake})"))
        else:
            found.append((folder, config))
    if not found:
        reasons = "".join(f"\n{folder}: {reason}" for folder, reason in sorted(left_out))
        raise ConfigError(
            f"{directory}: holds no build.toml kernel-matrix builds, nor does any folder below it: init sets up a "
            f"kernel's repository (kernel-builder's layout){reasons}"
        )
    return sorted(found), sorted(left_out)


def _build_toml_folders(directory: Path) -> tuple[list[str], list[str]]:
    """The folders below directory (relative, sorted) that hold a build.toml, SEARCH_DEPTH
    levels down and never below one (a kernel's own subfolders hold no other kernel); and
    those deeper, where the search does not go, so that init names them rather than skip
    them without a word. A linked folder is not followed: it may lead anywhere (a link to
    / would walk the machine's files and name its build.toml files)."""
    within: list[str] = []
    deeper: list[str] = []
    for root, folders, files in os.walk(directory):  # followlinks=False: a linked folder is listed, not walked
        here = Path(root)
        relative = here.relative_to(directory)
        if relative.parts and "build.toml" in files:
            within.append(relative.as_posix())
            folders.clear()
            continue
        # Sorted, so the matrix lists kernels in the same order on every machine.
        folders[:] = sorted(f for f in folders if _searched(here / f))
        if len(relative.parts) >= SEARCH_DEPTH:
            for folder in folders:
                deeper += _kernels_below(here / folder, directory)[:1]
            folders.clear()
    return within, deeper


def _kernels_below(folder: Path, directory: Path) -> list[str]:
    """Every folder below folder (relative to directory, sorted) that holds a build.toml,
    through no linked folder."""
    found = []
    for root, folders, files in os.walk(folder):
        here = Path(root)
        if "build.toml" in files:
            found.append(here.relative_to(directory).as_posix())
        folders[:] = [f for f in folders if _searched(here / f)]
    return sorted(found)


def _linked_out(directory: Path, path: str) -> str | None:
    """Why init does not read directory/path: a link to outside the repository; None if it may."""
    target = (directory / path).resolve()
    if target.is_relative_to(directory.resolve()):
        return None
    return "a link out of the repository; init never reads through one"


def _searched(folder: Path) -> bool:
    """Whether init looks for kernels in this folder: not one of another purpose, nor a link."""
    return not folder.name.startswith(".") and folder.name not in NOT_KERNELS and not folder.is_symlink()


def default_spec() -> dict[str, Any]:
    """The default matrix (data/default_matrix.yaml) as data."""
    from kernel_matrix.data import load

    spec: dict[str, Any] = load("default_matrix")
    return spec


def _allowed(minor: str, config: BuildConfig) -> bool:
    """Whether the kernel's [torch] minver/maxver allow this torch minor."""
    low, high = (config.torch.minver, config.torch.maxver) if config.torch else (None, None)
    return not (low and Version(minor) < Version(low)) and not (high and Version(minor) > Version(high))


def _outside_the_grid(config: BuildConfig) -> str | None:
    """Why the default grid has no torch for this kernel ([torch] minver/maxver), or None."""
    grid: dict[str, Any] = default_spec()["torch"]
    if config.torch is None or any(_allowed(minor, config) for minor in grid):
        return None
    return (
        f"[torch] minver/maxver ({config.torch.minver or '-'}..{config.torch.maxver or '-'}) allow none of the "
        f"default torch minors ({', '.join(grid)})"
    )


def torch_minors(kernels: list[tuple[str, BuildConfig]]) -> dict[str, Any]:
    """The default grid's torch minors that at least one kernel's [torch] minver/maxver
    allows (each kernel then takes its own range of them, as kernel-builder does)."""
    grid: dict[str, Any] = default_spec()["torch"]
    # Never empty: find_kernels left out the kernels whose range allows none of them.
    return {minor: cudas for minor, cudas in grid.items() if any(_allowed(minor, c) for _, c in kernels)}
