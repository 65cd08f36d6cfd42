"""The `kernels` project's side of `kernel-matrix matrix --check-upstream`: its releases on the
package index against the loader versions kernel-matrix allows (its own requirement on
`kernels`) and tests, and the newest build.toml edition its kernels-common defines (in the
newest release's sdist) against the editions kernel-matrix reads.

Pure functions of what the index serves, except `newest_edition`'s reading of an sdist's
bytes; upstream.py fetches the pages and files."""

from __future__ import annotations

import io
import re
import sys
import tarfile
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import urljoin

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from kernel_matrix import PACKAGE_DIR

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

PROJECT = "kernels"
# kernels-common's module of build.toml editions (config/v<N>.rs beside it), in the sdist.
EDITIONS_MODULE = "kernels-common/src/config/mod.rs"
_CURRENT_EDITION = re.compile(r"\bCURRENT_EDITION\s*:\s*usize\s*=\s*(\d+)\s*;")
_EDITION_MODULE = re.compile(r"^\s*pub\s+mod\s+v(\d+)\s*;", re.MULTILINE)
_LINK = re.compile(r"<a\s([^>]*)>\s*([^<\s]+)\s*</a>", re.IGNORECASE)
_HREF = re.compile(r"""\bhref\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
# An sdist of kernels is about half a megabyte and mod.rs a few kilobytes: far larger is refused.
MAX_SDIST_BYTES = 64 << 20
MAX_MODULE_BYTES = 1 << 20


@dataclass(frozen=True)
class Release:
    version: Version
    sdist: str | None  # its sdist's URL (the page's link, made absolute), None where it has none


def releases(page: str, page_url: str) -> list[Release]:
    """The final releases of `kernels` on a PEP 503 page, oldest first (pre-releases, dev
    releases and yanked files are left out: only what `pip install kernels` may pick)."""
    versions: set[Version] = set()
    sdists: dict[Version, str] = {}
    for attributes, text in _LINK.findall(page):
        version = _version_of(text)
        href = _HREF.search(attributes)
        # A yanked file (PEP 592) is one pip no longer picks.
        if version is None or version.is_prerelease or version.is_devrelease or "data-yanked" in attributes:
            continue
        versions.add(version)
        if text.endswith(".tar.gz") and href:
            sdists[version] = urljoin(page_url, href.group(1).replace("&amp;", "&"))
    return [Release(v, sdists.get(v)) for v in sorted(versions)]


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith(".tar.gz"):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return version if name == PROJECT else None


def own_requirement(checkout: Path = PACKAGE_DIR.parent) -> Requirement:
    """kernel-matrix's requirement on the loader: its pyproject.toml's where it runs from its
    own checkout (an editable install's metadata is as old as that install), else what its
    installed distribution declares."""
    pyproject = checkout / "pyproject.toml"
    lines: list[str] = []
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == "kernel-matrix":
            lines = list(project.get("dependencies", []))
    for line in lines or metadata.requires("kernel-matrix") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name == PROJECT and not requirement.marker:
            return requirement
    raise LookupError("kernel-matrix declares no requirement on kernels")


@dataclass(frozen=True)
class LoaderFinding:
    text: str

    def __str__(self) -> str:
        return self.text


def loader_findings(
    released: Iterable[Release], requirement: Requirement, tested: Collection[str] = ()
) -> list[LoaderFinding]:
    """What kernel-matrix misses of the loader's releases: each release newer than every one
    its requirement allows (a new minor: `kernels>=0.17,<0.20` leaves 0.20.0 out), and, where
    the loader versions its tests run are given, the newest release of each allowed minor
    that they do not run. Releases older than the oldest allowed are history, not news."""
    versions = [r.version for r in released]
    allowed = [v for v in versions if requirement.specifier.contains(v, prereleases=False)]
    if not allowed:
        newest = f"the newest is {max(versions)}" if versions else "the index has none"
        return [LoaderFinding(f"no kernels release satisfies kernel-matrix's requirement {requirement} ({newest})")]
    findings = [
        LoaderFinding(
            f"kernels {version} is released, and kernel-matrix's requirement {requirement} leaves it out: "
            "test it, then widen the requirement"
        )
        for version in versions
        if version > max(allowed)
    ]
    if tested:
        runs = {Version(v) for v in tested}
        newest_of_minor: dict[tuple[int, int], Version] = {}
        for version in allowed:
            newest_of_minor[(version.major, version.minor)] = version  # allowed is ascending
        for version in newest_of_minor.values():
            if version not in runs:
                ran = ", ".join(str(v) for v in sorted(runs))
                findings.append(LoaderFinding(f"kernels {version} is released, and the loader tests run {ran}"))
    return findings


def newest_edition(sdist: bytes) -> int | None:
    """The newest build.toml edition kernels-common defines in a kernels sdist (a .tar.gz):
    its CURRENT_EDITION, else its highest config/v<N>.rs module; None where the sdist has no
    kernels-common (before it was split out) or the module names neither."""
    try:
        with tarfile.open(fileobj=io.BytesIO(sdist), mode="r:gz") as archive:
            for member in archive:
                # <name>-<version>/kernels-common/src/config/mod.rs: read, never extracted.
                if member.isfile() and member.name.split("/", 1)[-1] == EDITIONS_MODULE:
                    if member.size > MAX_MODULE_BYTES:
                        return None
                    handle = archive.extractfile(member)
                    text = handle.read().decode("utf-8", "replace") if handle else ""
                    break
            else:
                return None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ValueError(f"not a readable .tar.gz ({exc})") from None
    if match := _CURRENT_EDITION.search(text):
        return int(match.group(1))
    modules = [int(n) for n in _EDITION_MODULE.findall(text)]
    return max(modules) if modules else None


def edition_finding(release: Release, edition: int | None, read: Collection[int]) -> LoaderFinding | None:
    """A finding where kernels-common (of `release`) defines a newer edition than kernel-matrix reads."""
    if edition is None or edition <= max(read):
        return None
    shown = ", ".join(str(e) for e in sorted(read))
    return LoaderFinding(
        f"kernels {release.version}'s kernels-common defines build.toml edition {edition}, "
        f"and kernel-matrix reads editions {shown}"
    )
