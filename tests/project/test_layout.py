"""layout.py, the build folder's and the Hub repository's shape: the paths it gives."""

from pathlib import Path

import pytest

from kernel_matrix.layout import BuildDir, hub_path


def test_a_plans_path_is_a_folder_under_the_build_folder():
    root = BuildDir(Path("/b"))
    assert root.planned("torch214-cxx11-cpu-x86_64-linux") == Path("/b/torch214-cxx11-cpu-x86_64-linux")
    assert root.planned("relu/torch-cpu") == Path("/b/relu/torch-cpu")
    assert root.planned(BuildDir(Path("/b"), "relu").relative("v")) == BuildDir(Path("/b"), "relu").variant("v")


@pytest.mark.parametrize("path", ["", "/etc", "../x", "a/../../x", "a//b", "./a", "a/.", "a/"])
def test_a_plans_path_that_leaves_the_build_folder_or_is_not_plain_is_refused(path):
    with pytest.raises(ValueError, match="not a variant folder's path"):
        BuildDir(Path("/b")).planned(path)


def test_test_variants_environments_are_in_the_build_folders_cache():
    assert BuildDir(Path("/b")).test_environment("relu-v") == Path("/b/.cache/test-variant/relu-v")


def test_a_variant_on_the_hub_is_under_build():
    assert hub_path("torch-cpu") == "build/torch-cpu/"  # a prefix of its files
    assert hub_path("torch-cpu", "metadata.json") == "build/torch-cpu/metadata.json"
