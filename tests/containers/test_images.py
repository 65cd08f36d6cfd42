"""Builder images are made once per host, however many builds ask for one at the same time."""

import threading
import time

import docker


class Engine:
    """The part of a docker client `_made_once` reads: which images are there."""

    def __init__(self):
        self.tags: set[str] = set()
        self.images = self

    def get(self, tag):
        if tag not in self.tags:
            raise docker.errors.ImageNotFound(tag)
        return tag


def test_two_builds_asking_for_a_missing_image_make_it_once(tmp_path, monkeypatch):
    from kernel_matrix.containers.images import _made_once

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    engine, made, tag = Engine(), [], "kernel-matrix/builder:test"

    def build():
        with _made_once(engine, tag) as present:
            if not present:
                time.sleep(0.5)  # the minutes of a real image, while the other build asks
                made.append(threading.current_thread().name)
                engine.tags.add(tag)

    builds = [threading.Thread(target=build, name=f"build-{i}") for i in range(3)]
    for thread in builds:
        thread.start()
    for thread in builds:
        thread.join()
    assert len(made) == 1 and tag in engine.tags
    assert list((tmp_path / "kernel-matrix" / "locks").iterdir())  # the lock lives in the user's cache


def test_a_present_image_takes_no_lock(tmp_path, monkeypatch):
    from kernel_matrix.containers.images import _made_once

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    engine = Engine()
    engine.tags.add("kernel-matrix/builder:there")
    with _made_once(engine, "kernel-matrix/builder:there") as present:
        assert present
    assert not (tmp_path / "kernel-matrix").exists()
