"""Builder images shared through a container registry, so that a job gets its cell's
builder in the time of a pull instead of the minutes of making it (dnf, pip, torch).

A builder's local tag already names its recipe (kernel-matrix/builder:<torch>-<kind>-<hash
of everything that goes into it>: images.py). Shared, the image keeps that name as its tag in
a repository of the caller's (GitHub: ghcr.io/<owner>/<repo>/kernel-matrix-builder), and
carries it in a label, RECIPE_LABEL, set when it was made. Two ways in:

- by digest (`pull_listed`): the image one job of this run made and pushed, named by the
  digest that job reported (`builder-images --out`). A digest names content: no other
  writer of the registry can change what is pulled. This is what a release build uses.
- by recipe tag (`pull_by_recipe`): an image any earlier run pushed under the recipe's tag.
  A tag can be moved by anyone who may write the registry, so this is for runs that publish
  nothing (pushes, manual runs without publish), as the object cache is (docs/trust.md).

Either way the image's RECIPE_LABEL must name the recipe the build computed itself. A listed
image that does not stops the build in one line (a run's own list names the wrong image);
an image found by tag that does not is not taken, one line says why, and it is made instead."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.models.images import Image

from kernel_matrix.containers.images import RECIPE_LABEL, present
from kernel_matrix.errors import ConfigError, EngineError

# A repository without tag or digest: [host[:port]/]path, lower case as registries require.
_REPOSITORY = re.compile(r"^[a-z0-9.-]+(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_LOCAL_REPOSITORY = "kernel-matrix/builder"


@dataclass(frozen=True)
class Shared:
    """A builder as shared: its local tag (the recipe) and where it lies, by digest."""

    tag: str
    reference: str  # <repository>@sha256:<64 hex>

    def to_json(self) -> dict[str, str]:
        return {"tag": self.tag, "reference": self.reference}


def check_repository(repository: str) -> str:
    """repository as given, or ConfigError saying what a registry repository looks like."""
    if not _REPOSITORY.match(repository):
        raise ConfigError(
            f"{repository!r}: not a registry repository: give HOST/PATH in lower case, without a tag or digest "
            "(e.g. ghcr.io/owner/repo/kernel-matrix-builder)"
        )
    return repository


def recipe_of(tag: str) -> str:
    """The recipe part of a builder's local tag (kernel-matrix/builder:<recipe>)."""
    repository, _, recipe = tag.rpartition(":")
    if repository != _LOCAL_REPOSITORY or not recipe:
        raise EngineError(f"{tag}: not a kernel-matrix builder image")
    return recipe


def push(client: docker.DockerClient, tag: str, repository: str, log: Callable[[str], None] = print) -> Shared:
    """Pushes the local builder `tag` to repository under its recipe; where it lies, by digest.
    An image made before builders were labelled gets the label first (a commit that runs nothing)."""
    recipe = recipe_of(tag)
    image = _labelled(client, tag, recipe)
    image.tag(repository, recipe)
    log(f"pushing {tag} to {repository}:{recipe}")
    digest = None
    try:
        for line in client.api.push(repository, tag=recipe, stream=True, decode=True):
            if "error" in line:
                raise EngineError(f"pushing {tag} to {repository} failed: {str(line['error']).strip()[:300]}")
            digest = line.get("aux", {}).get("Digest", digest)
    except docker.errors.DockerException as exc:
        raise EngineError(f"pushing {tag} to {repository} failed: {str(exc).splitlines()[0][:300]}") from None
    finally:
        client.images.remove(f"{repository}:{recipe}", noprune=True)  # the tag only: the image stays as `tag`
    if digest is None or not _DIGEST.match(str(digest)):
        raise EngineError(f"pushing {tag} to {repository}: the registry reported no digest")
    return Shared(tag, f"{repository}@{digest}")


def _labelled(client: docker.DockerClient, tag: str, recipe: str) -> Image:
    image = client.images.get(tag)
    if image.labels.get(RECIPE_LABEL) == recipe:
        return image
    created = client.api.create_container(tag, command=["/bin/true"], network_disabled=True)
    try:
        repository, version = tag.rsplit(":", 1)
        label = f'LABEL {RECIPE_LABEL}="{recipe}"'
        client.api.commit(created["Id"], repository=repository, tag=version, changes=[label])
    finally:
        client.api.remove_container(created["Id"], force=True)
    return client.images.get(tag)


def pull_listed(client: docker.DockerClient, shared: Iterable[Shared], log: Callable[[str], None] = print) -> None:
    """Each listed builder, pulled by its digest and tagged as its recipe, unless that tag is
    already here; EngineError where one cannot be pulled or is not the recipe it is listed as."""
    for item in shared:
        if present(client, item.tag):
            continue
        log(f"pulling {item.tag} from {item.reference}")
        taken, found = _pull_as(client, item.reference, item.tag)
        if not taken:
            raise EngineError(
                f"{item.reference}: listed as {item.tag}, but its {RECIPE_LABEL} label is {found!r}: not used"
            )


def pull_by_recipe(client: docker.DockerClient, tag: str, repository: str, log: Callable[[str], None] = print) -> bool:
    """Whether the builder `tag` is here after trying repository's image of the same recipe
    (an earlier run's); one line where it is missing or not that recipe, and False."""
    if present(client, tag):
        return True
    reference = f"{repository}:{recipe_of(tag)}"
    try:
        taken, found = _pull_as(client, reference, tag)
    except EngineError as exc:
        log(f"{tag}: not taken from {repository}: {exc}")
        return False
    if not taken:
        log(f"{tag}: not taken from {repository}: its {RECIPE_LABEL} label is {found!r}")
        return False
    log(f"{tag}: taken from {reference} ({client.images.get(tag).id})")
    return True


def _pull_as(client: docker.DockerClient, reference: str, tag: str) -> tuple[bool, str | None]:
    """Pulls reference and tags it as the builder `tag` if its label is tag's recipe (else keeps
    nothing); whether it did, and the label found. The registry's name is forgotten either way."""
    image = _pull(client, reference)
    found = image.labels.get(RECIPE_LABEL)
    taken = found == recipe_of(tag)
    if taken:
        image.tag(*tag.rsplit(":", 1))
    _forget(client, reference)
    return taken, found


def _pull(client: docker.DockerClient, reference: str) -> Image:
    try:
        for line in client.api.pull(reference, stream=True, decode=True):
            if "error" in line:
                raise EngineError(f"pulling {reference} failed: {str(line['error']).strip()[:300]}")
        return client.images.get(reference)
    except docker.errors.DockerException as exc:
        raise EngineError(f"pulling {reference} failed: {str(exc).splitlines()[0][:300]}") from None


def _forget(client: docker.DockerClient, reference: str) -> None:
    """The registry's name for an image, removed; the image stays under its recipe tag where it has one
    (and goes with its last name where it has none: a refused image is not kept)."""
    with contextlib.suppress(docker.errors.DockerException):  # tidying: an image still in use stays
        client.images.remove(reference, noprune=False)


def write_listed(path: Path, shared: Iterable[Shared]) -> None:
    """The list `build --builder-images` reads, as JSON (written whole, then moved into place)."""
    from kernel_matrix.hostfiles import write_file

    write_file(path, json.dumps([item.to_json() for item in shared], indent=2) + "\n")


def read_listed(path: Path) -> list[Shared]:
    """The builders listed in path, a file `builder-images --out` wrote or a folder of them
    (each job's, downloaded side by side); ConfigError naming the file for anything else."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    listed: list[Shared] = []
    for file in files:
        try:
            items = json.loads(file.read_text())
            if not isinstance(items, list):
                raise ValueError("not a list")
            for item in items:
                shared = Shared(str(item["tag"]), str(item["reference"]))
                recipe_of(shared.tag)
                repository, _, digest = shared.reference.partition("@")
                check_repository(repository)
                if not _DIGEST.match(digest):
                    raise ValueError(f"{shared.reference!r} is not REPOSITORY@sha256:<64 hex>")
                listed.append(shared)
        except (OSError, ValueError, KeyError, TypeError, EngineError, ConfigError) as exc:
            what = "not a list of builder images from `kernel-matrix builder-images`"
            raise ConfigError(f"{file}: {what}: {exc}") from None
    return listed
