"""The files `kernel-matrix init` writes into a kernel's repository, as text: build_matrix.yaml,
the caller of kernel-matrix's reusable build workflow and the daily upstream check's.

All come from fixed templates (templates/*.in) whose only variable parts are YAML scalars
and blocks written by yaml.safe_dump; each text is parsed back and checked before it is
returned."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kernel_matrix.adopting import runners
from kernel_matrix.adopting.pin import REUSABLE, Pin
from kernel_matrix.adopting.search import MATRIX, default_spec, torch_minors
from kernel_matrix.config.buildtoml import BuildConfig
from kernel_matrix.config.flake import TORCH_VERSIONS, flake_line

WORKFLOW = Path(".github/workflows/kernel-matrix.yml")
UPSTREAM = "reusable-upstream.yml"
UPSTREAM_WORKFLOW = Path(".github/workflows/kernel-matrix-upstream.yml")


@dataclass(frozen=True)
class Release:
    """The latest release of kernel-matrix (data/release.yaml): the commit init pins by default."""

    repository: str
    commit: str
    version: str

    @staticmethod
    def packaged() -> Release:
        from kernel_matrix.data import load

        data = load("release")
        return Release(str(data["repository"]), str(data["commit"]), str(data["version"]))


def flow(data: Any) -> str:
    """data as one line of flow-style YAML, for a note (`{kernel: relu, arch: aarch64}`)."""
    return yaml.safe_dump(data, default_flow_style=True, sort_keys=False, width=1000).strip()


def flake_note(kernel_dir: Path, name: str, written: dict[str, str] | None = None) -> str | None:
    """A line where the kernel's flake.nix passes torchVersions, which may narrow its builds
    (fewer torch versions, systems or CUDA versions than build.toml allows, e.g. x86_64 only
    for a kernel built with -mavx512f). kernel-matrix reads build.toml, not Nix: the
    matrix's `exclude`, narrowed to the kernel, says the same. written: the exclude init
    wrote for the kernel's x86 flags, if any."""
    found = flake_line(kernel_dir, TORCH_VERSIONS)
    if found is None:
        return None
    flake, line = found
    start = (
        f"note: {flake}:{line}: torchVersions may narrow kernel-builder's builds of this kernel; kernel-matrix "
        f"reads build.toml only: "
    )
    if written is not None:
        return f"{start}{MATRIX}'s `exclude` holds what its x86 flags need ({flow(written)}); say any other there"
    example = flow({"kernel": name, "arch": "aarch64", "cuda": "cpu"})
    return f"{start}say the same in {MATRIX}'s `exclude` (e.g. `- {example}`: those cells of {name} only)"


def _block(data: dict[str, Any], indent: int = 0, *, flow: bool = False) -> str:
    """data as block YAML, each line indented; flow: collections of scalars in flow
    style ([ubuntu-24.04]), which would also make a mapping of scalars one line."""
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None if flow else False, width=1000)
    return "\n".join(" " * indent + line for line in text.rstrip("\n").splitlines())


def _scalar(value: str) -> str:
    """One YAML scalar (plain where it can be, quoted where it must)."""
    text = yaml.safe_dump(value, width=1000)
    return text.removesuffix("\n...\n").rstrip("\n")


def _fill(name: str, values: dict[str, str]) -> str:
    """templates/<name> with each $key replaced once (an empty value removes its line); a
    template always has every key."""
    text = resources.files("kernel_matrix").joinpath(f"templates/{name}").read_text(encoding="utf-8")
    for key, value in values.items():
        if text.count(f"${key}\n") != 1:  # a placeholder is a line's end
            raise AssertionError(f"{name}: ${key} is not in the template once")
        text = text.replace(f"${key}\n", value + "\n" if value else "")  # an empty value: no line
    return text


def matrix_text(
    kernels: list[tuple[str, BuildConfig]],
    gpu: dict[str, list[str]] | None = None,
    exclude: list[dict[str, str]] | None = None,
) -> str:
    """build_matrix.yaml: the kernels, their torch minors of the default grid, its archs
    with GitHub-hosted build runners and gpu's GPU test runners (none: []), and exclude."""
    names = [name for name, _ in kernels]
    wanted: dict[str, Any] = {"kernel": "."} if names == ["."] else {"kernels": names}
    wanted["torch"] = torch_minors(kernels)
    wanted["archs"] = runners.archs(default_spec()["archs"], gpu or {})
    wanted["exclude"] = exclude or []
    text = _fill(
        "build_matrix.yaml.in",
        {
            "kernels": _block({k: v for k, v in wanted.items() if k.startswith("kernel")}),
            "torch": _block(wanted["torch"], 2),
            "archs": _block(wanted["archs"], 2, flow=True),
            "exclude": _block({"exclude": wanted["exclude"]}, flow=True),
        },
    )
    written = yaml.safe_load(text)
    assert {k: written[k] for k in wanted} == wanted, "build_matrix.yaml does not read back as written"
    return text


def workflow_text(pin: Pin, branch: str = "main") -> str:
    """The caller of reusable-build.yml at the pin: pushes to `branch` and v* tags, pull
    requests and manual runs; every job installs kernel-matrix from the pinned commit."""
    text = _fill(
        "caller-workflow.yml.in",
        {
            "uses": _scalar(pin.uses(REUSABLE)) + pin.comment,
            "branch": _scalar(branch),
            "install": _scalar(pin.install),
        },
    )
    written = yaml.safe_load(text)
    job = written["jobs"]["kernel-matrix"]
    assert job["uses"] == pin.uses(REUSABLE) and job["with"]["kernel-matrix"] == pin.install, "reads back otherwise"
    assert written[True]["push"]["branches"] == [branch], "the workflow reads back otherwise"  # YAML 1.1: on is true
    return text


def upstream_text(pin: Pin, kernels: str) -> str:
    """The caller of reusable-upstream.yml, at the same pin: daily, at a minute that
    `kernels` (the repository's kernel names) choose, not every caller's at once."""
    minute = int(hashlib.sha256(kernels.encode()).hexdigest(), 16) % 60
    text = _fill(
        "caller-upstream.yml.in",
        {
            "uses": _scalar(pin.uses(UPSTREAM)) + pin.comment,
            "cron": _scalar(f"{minute} 5 * * *"),
            "install": _scalar(pin.install),
        },
    )
    job = yaml.safe_load(text)["jobs"]["check-upstream"]
    assert job["uses"] == pin.uses(UPSTREAM) and job["with"]["kernel-matrix"] == pin.install, "reads back otherwise"
    return text
