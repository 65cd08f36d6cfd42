"""running/native.py: a native build returns what it made (Built: each variant's folder, a
compiled one's op namespace and cost) for the command line to show, and says it nowhere else."""

import io
import json

import pytest
from conftest import KERNEL_DIR, noarch_kernel


def _build_native(kernel_dir, build_dir, backend=None, cache=None):
    from rich.console import Console

    from kernel_matrix.layout import BuildDir
    from kernel_matrix.planning.selection import Kernel
    from kernel_matrix.running.native import build_native

    said = io.StringIO()
    kernel, where = Kernel.load(kernel_dir), BuildDir(build_dir)
    built = build_native(kernel, where, None, backend, None, None, cache, load=False, console=Console(file=said))
    return built, said.getvalue()


def test_a_python_only_kernel_returns_each_backends_variant(tmp_path):
    kernel = noarch_kernel(tmp_path, "gray-noarch", '["cuda", "cpu"]')
    built, said = _build_native(kernel, tmp_path / "build")
    assert [name for name, _ in built.variants] == ["torch-cuda", "torch-cpu"]
    for name, folder in built.variants:
        assert folder == (tmp_path / "build" / name).resolve() and (folder / "metadata.json").is_file()
    assert built.module is None and not built.reused and built.compiled == built.cached == 0
    assert "torch-" not in said  # the command line shows what was made, from Built


def test_a_python_only_file_without_edition_is_said_to_be_read_as_edition_4(tmp_path):
    """As a compiled kernel's build says it (round 20: a Python-only build said nothing)."""
    from kernel_matrix.config.buildtoml import EDITION_4_NOTE

    kernel = noarch_kernel(tmp_path, "gray-old", '["cpu"]')
    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace("edition = 5\n", ""))
    _, said = _build_native(kernel, tmp_path / "build")
    (line,) = [line for line in said.splitlines() if "note:" in line]
    assert line.startswith(f"{toml}:") and line.endswith(f": note: {EDITION_4_NOTE}"), said


@pytest.mark.build
def test_a_compiled_variant_returns_its_folder_namespace_and_objects(tmp_path, object_cache):
    from kernel_matrix.building.objcache import ObjectCache
    from kernel_matrix.building.recipe import recipe_digest
    from kernel_matrix.layout import BuildDir

    cache = ObjectCache.for_kernel(object_cache, "img2gray", trusted=True, recipe=recipe_digest(KERNEL_DIR))
    built, _ = _build_native(KERNEL_DIR, tmp_path / "build", "cpu", cache)
    ((name, folder),) = built.variants
    assert folder == (tmp_path / "build" / name).resolve()
    assert json.loads((folder / "metadata.json").read_text())["backend"]["type"] == "cpu"
    assert (folder / "_ops.py").read_text().count(built.module) >= 1
    stats = json.loads(BuildDir(tmp_path / "build").log(name, "build.json").read_text())
    assert (stats["compiled"], stats["cached"]) == (built.compiled, built.cached)
    assert built.compiled + built.cached == 2 and built.seconds > 0 and not built.reused  # img2gray's two sources
