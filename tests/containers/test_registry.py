"""Builder images shared through a registry (kernel_matrix/containers/registry.py), against a
real registry on loopback (tests/registry.py) and the real engine: pushed by one job, pulled by
digest by the next, and used only where the image's recipe label is the recipe the build
computed itself."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from types import SimpleNamespace

import docker
import pytest
from conftest import REPO, kernel_matrix
from registry import LoopbackRegistry

from kernel_matrix.containers import images, registry
from kernel_matrix.errors import ConfigError, EngineError

REPOSITORY = "owner/kernel/kernel-matrix-builder"


@pytest.fixture
def loopback(tmp_path):
    with LoopbackRegistry(tmp_path / "registry") as server:
        yield server


@pytest.fixture
def tiny(engine):
    """Makes small images tagged kernel-matrix/builder:<recipe> (a file each, nothing to run);
    every one it made is deleted afterwards, with whatever a test pulled under their names."""
    made: list[str] = []

    def make(recipe: str | None = None, *, label: str | None = None) -> str:
        recipe = recipe or f"test-{uuid.uuid4().hex[:12]}"
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            content = recipe.encode()
            info = tarfile.TarInfo("recipe")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        changes = [f'LABEL {images.RECIPE_LABEL}="{label}"'] if label is not None else []
        engine.api.import_image_from_data(
            data.getvalue(), repository="kernel-matrix/builder", tag=recipe, changes=changes
        )
        made.append(f"kernel-matrix/builder:{recipe}")
        return made[-1]

    yield make
    for tag in made:
        for image in engine.images.list(name=tag.split(":")[0]):
            if tag in image.tags:
                engine.images.remove(image.id, force=True)


def _gone(engine, tag: str) -> None:
    engine.images.remove(tag, force=True)
    assert not images.present(engine, tag)


@pytest.mark.engine
def test_a_builder_one_job_pushed_is_pulled_by_digest_by_the_next(engine, loopback, tiny):
    tag = tiny(label=None)  # made before builders were labelled: the push labels it
    recipe = registry.recipe_of(tag)
    repository = f"{loopback.host}/{REPOSITORY}"
    shared = registry.push(engine, tag, repository, log=lambda line: None)
    assert shared.reference.startswith(f"{repository}@sha256:")
    assert loopback.tags(REPOSITORY) == [recipe]
    pushed = engine.images.get(tag)
    assert pushed.labels[images.RECIPE_LABEL] == recipe
    assert not engine.images.list(name=repository)  # the registry's name is not left behind

    _gone(engine, tag)  # the next job: a runner without the image
    lines: list[str] = []
    registry.pull_listed(engine, [shared], log=lines.append)
    assert engine.images.get(tag).id == pushed.id
    assert lines == [f"pulling {tag} from {shared.reference}"]
    registry.pull_listed(engine, [shared], log=lines.append)  # already here: nothing pulled
    assert len(lines) == 1


@pytest.mark.engine
def test_an_image_listed_as_another_recipe_is_not_used(engine, loopback, tiny):
    tag = tiny(label=None)
    shared = registry.push(engine, tag, f"{loopback.host}/{REPOSITORY}", log=lambda line: None)
    other = tiny()  # only for its name: the recipe the build computed
    _gone(engine, other)
    with pytest.raises(EngineError, match=f"listed as {other}, but its kernel-matrix.recipe label is"):
        registry.pull_listed(engine, [registry.Shared(other, shared.reference)], log=lambda line: None)
    assert not images.present(engine, other)


@pytest.mark.engine
def test_a_digest_the_registry_does_not_hold_is_one_line(engine, loopback, tiny):
    missing = registry.Shared(tiny(), f"{loopback.host}/{REPOSITORY}@sha256:{'0' * 64}")
    _gone(engine, missing.tag)
    with pytest.raises(EngineError, match=r"^pulling .*@sha256:0{64} failed: ") as caught:
        registry.pull_listed(engine, [missing], log=lambda line: None)
    assert "\n" not in str(caught.value)


@pytest.mark.engine
def test_an_earlier_runs_image_is_taken_by_recipe_only_where_its_label_is_that_recipe(engine, loopback, tiny):
    repository = f"{loopback.host}/{REPOSITORY}"
    lines: list[str] = []
    absent = tiny()
    _gone(engine, absent)
    assert not registry.pull_by_recipe(engine, absent, repository, log=lines.append)
    assert lines[-1].startswith(f"{absent}: not taken from {repository}: pulling ")

    tag = tiny(label=None)
    registry.push(engine, tag, repository, log=lambda line: None)
    _gone(engine, tag)
    assert registry.pull_by_recipe(engine, tag, repository, log=lines.append)
    assert images.present(engine, tag) and lines[-1].startswith(f"{tag}: taken from {repository}:")

    # A tag moved by another writer of the registry: an image whose label names another recipe.
    moved = tiny()
    impostor = tiny(label="something-else")
    engine.images.get(impostor).tag(repository, registry.recipe_of(moved))
    for line in engine.api.push(repository, tag=registry.recipe_of(moved), stream=True, decode=True):
        assert "error" not in line, line
    engine.images.remove(f"{repository}:{registry.recipe_of(moved)}")
    _gone(engine, moved)
    assert not registry.pull_by_recipe(engine, moved, repository, log=lines.append)
    assert lines[-1] == f"{moved}: not taken from {repository}: its kernel-matrix.recipe label is 'something-else'"
    assert not images.present(engine, moved)


@pytest.mark.processes
def test_a_builders_tag_is_known_before_anything_is_made(monkeypatch, tmp_path):
    """What lets one machine's builder serve another's: the tag names the recipe, and nothing
    is made (not even the offline base) where the tag is fetched."""
    from kernel_matrix.planning.matrix import Cell

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def missing(tag):
        raise docker.errors.ImageNotFound(tag)

    client = SimpleNamespace(images=SimpleNamespace(get=missing))
    monkeypatch.setattr(images, "offline_base", lambda *a, **kw: pytest.fail("the base was made"))
    monkeypatch.setattr(images, "_make_builder", lambda *a, **kw: pytest.fail("the builder was made"))
    cell = next(c for c in _cells() if c.variant.cuda is None)
    assert isinstance(cell, Cell)
    fetched: list[str] = []

    def fetch(tag: str) -> bool:
        fetched.append(tag)
        return True

    pip = images.PipSetup.from_host()
    tag = images.builder_for(client, cell, "offline", pip, log=lambda line: None, fetch=fetch)
    assert fetched == [tag] and tag.startswith("kernel-matrix/builder:")
    assert images.builder_for(client, cell, "offline", pip, log=lambda line: None, fetch=fetch) == tag


def _cells():
    from kernel_matrix.cli.options import resolve, selection_of

    return resolve(selection_of(REPO / "build_matrix.yaml", "full")).cells


@pytest.mark.processes
def test_a_list_that_is_not_builder_images_is_one_line(tmp_path):
    bad = tmp_path / "images.json"
    for text, why in [
        ("{", "Expecting"),
        ('{"tag": "x"}', "not a list"),
        ('[{"tag": "kernel-matrix/builder:r", "reference": "ghcr.io/o/r@latest"}]', "REPOSITORY@sha256"),
        ('[{"tag": "other/image:r", "reference": "ghcr.io/o/r@sha256:' + "a" * 64 + '"}]', "not a kernel-matrix"),
    ]:
        bad.write_text(text)
        with pytest.raises(ConfigError, match=why) as caught:
            registry.read_listed(bad)
        assert str(caught.value).startswith(f"{bad}: ")
    good = [{"tag": "kernel-matrix/builder:r", "reference": "ghcr.io/o/r/b@sha256:" + "a" * 64}]
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "one.json").write_text(json.dumps(good))
    assert registry.read_listed(tmp_path / "lists") == [registry.Shared(**good[0])]

    result = kernel_matrix("build", "--profile", "full", "--builder-images", str(bad))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and str(bad) in result.stderr and "Traceback" not in result.stderr
    result = kernel_matrix("builder-images", "--push", "ghcr.io/Owner/Repo:latest", "--out", str(tmp_path / "o.json"))
    assert result.returncode == 2 and "not a registry repository" in result.stderr, result.stderr
    assert not (tmp_path / "o.json").exists()
