"""The build folder's shape: the only code that knows where things go under --build-dir.

<root>/<variant>/                   a matrix of one kernel (or a --kernel-dir build)
<root>/<kernel>/<variant>/          a matrix of several kernels: a folder per kernel
<folder>/logs/<variant>.<kind>      build, container and wheel logs of a variant
<folder>/.inputs/<variant>.sha256   what a container-built variant was made from
<root>/.cache/objects/<trust>/<kernel>/<recipe>/  the compiled-object cache: a scope per kernel, trust and recipe
<root>/.cache/test-variant/[<kernel>-]<variant>/  test-variant's environment of a variant's cell
<root>/summary.md                   the last container build's table
<out>/.cache-new/                   a build container's new object-cache entries, merged by the host

A kernel repository on the Hub (what publish uploads, verify and reuse download) holds each
variant at <HUB_BUILD>/<variant>/ (hub_path), where the loader looks for it.

Outside any build folder, the user's cache folder (user_cache()) holds what builds share on
one host: pinned dependencies (deps/) and the locks of builder images being made (locks/).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# The default --build-dir, relative to where a command runs: the folder the workflows' jobs build
# in, so also the root of their artifacts' paths (planning/github_jobs.py).
DEFAULT_BUILD_DIR = Path("build")
# Written last into a variant folder: its presence means the variant is whole.
METADATA = "metadata.json"
# metadata.json's Sigstore bundle beside it (publish --sign), as kernels-community's
# `cosign sign-blob --bundle` writes it and the loader (>= 0.18) reads it; outside the digest.
SIGNATURE = METADATA + ".sigstore"
# The build folder's own subfolders (clean removes them; they are never a variant).
LOGS, CACHE = "logs", ".cache"
# A build container's own cache writes, beside the variant it makes (its scopes are read-only to it).
CACHE_WRITES = CACHE + "-new"
# The folder of a kernel repository that holds its variants, on the Hub (kernel-builder's upload)
# and in a kernel's own checkout (kernel-builder's output): the loader's `build/<variant>`.
HUB_BUILD = "build"
# A cache scope's recipe: a sha256 in hex (one path component, never "..").
_RECIPE = re.compile(r"[0-9a-f]{64}")


def hub_path(variant: str, name: str = "") -> str:
    """The path in a Hub kernel repository of a variant's folder ("build/<variant>/", with its
    trailing slash: a prefix of its files) or of a file in it (name: relative to the folder)."""
    return f"{HUB_BUILD}/{variant}/{name}"


def user_cache() -> Path:
    """kernel-matrix's folder in the user's cache ($XDG_CACHE_HOME, else ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernel-matrix"


def is_built(variant_dir: Path) -> bool:
    """A variant folder is complete once its metadata.json is there: it is written last
    and the folder is renamed into place whole."""
    return (variant_dir / METADATA).is_file()


@dataclass(frozen=True)
class BuildDir:
    root: Path  # --build-dir
    kernel: str | None = None  # the kernel's subfolder, in a matrix of several kernels

    @property
    def path(self) -> Path:
        """Where this kernel's variants, logs and input records go."""
        return self.root / self.kernel if self.kernel else self.root

    def variant(self, name: str) -> Path:
        return self.path / name

    def is_built(self, name: str) -> bool:
        return is_built(self.variant(name))

    def relative(self, name: str) -> str:
        """The variant's folder relative to the root: what a CI artifact holds."""
        return self.variant(name).relative_to(self.root).as_posix()

    def planned(self, relative: str) -> Path:
        """The folder a plan names by relative() (`matrix --json`'s path): under the root, or
        ValueError (an absolute path, `..`, an empty part)."""
        parts = relative.split("/")
        if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"not a variant folder's path under the build folder: {relative!r}")
        return self.root.joinpath(*parts)

    def test_environment(self, name: str) -> Path:
        """`test-variant`'s environment for a variant ([KERNEL-]VARIANT), reused by the next run;
        under the cache folder, so `clean` removes it."""
        return self.root / CACHE / "test-variant" / name

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    def log(self, name: str, kind: str) -> Path:
        return self.logs / f"{name}.{kind}"

    def inputs_record(self, name: str) -> Path:
        # Beside the variants, not inside: it is not part of what is published.
        return self.path / ".inputs" / f"{name}.sha256"

    @property
    def cache(self) -> Path:
        """The default object cache's root (--cache-dir): the scopes of every kernel are under it."""
        return self.root / CACHE / "objects"

    @property
    def cache_writes(self) -> Path:
        """Where a build container writes new object-cache entries: the host merges them
        into the scope it chose once the variant has passed its checks."""
        return self.root / CACHE_WRITES

    @property
    def summary(self) -> Path:
        return self.root / "summary.md"


def cache_scope(cache_root: Path, kernel: str, *, trusted: bool, recipe: str) -> Path:
    """One kernel's objects at one trust level, made by one build recipe. The host alone
    picks a build's scopes (objcache.ObjectCache.for_kernel): a kernel never reads what
    another kernel's build wrote, a trusted build never reads what an untrusted one wrote,
    and a build never reads what a build of another recipe wrote (building/recipe.py: the
    host's digest of build.toml and what its flags name; a reverted build.toml never reads
    what the build of the malicious one wrote).
    kernel: build.toml's name (its schema allows only [-a-z0-9], so one path component);
    recipe: recipe.recipe_digest's hex digest."""
    if not _RECIPE.fullmatch(recipe):
        raise ValueError(f"not a recipe digest: {recipe!r}")
    return cache_root / ("trusted" if trusted else "untrusted") / kernel / recipe
