"""metadata.json's loader fields as kernel-builder (kernels-common 0.19, metadata.rs and
config/mod.rs) writes them: `build-layout` ("files": the layout built here) and
`kernels-minver`, the oldest loader that loads the variant, which kernels enforces: 0.14.0,
or 0.17.0 for a variant with kernel-depends (the kernel's or its backend's: per variant).
The variants are Python-only kernels built by the real build (nothing compiled), read back
by the installed loader."""

import json

from kernel_matrix.building.native_build import build_noarch
from kernel_matrix.loader import Metadata

TOML = """[general]
name = "{name}"
version = 1
edition = 5
license = "MIT"
backends = ["cpu", "cuda"]
{general}
[torch-noarch]
"""


def built(tmp_path, name: str, general: str = "") -> dict[str, dict]:
    kernel = tmp_path / name
    (kernel / "torch-ext" / name).mkdir(parents=True)
    (kernel / "torch-ext" / name / "__init__.py").write_text("x = 1\n")
    (kernel / "build.toml").write_text(TOML.format(name=name, general=general))
    variants = build_noarch(kernel, tmp_path / "build" / name)
    return {variant.name: json.loads((variant / "metadata.json").read_text()) for variant in variants}


def minver(tmp_path, variant: str, name: str) -> str:
    return str(Metadata.read_from_file(tmp_path / "build" / name / variant / "metadata.json").kernels_minver)


def test_a_variant_without_kernel_depends_needs_the_baseline_loader(tmp_path):
    written = built(tmp_path, "plain")
    for variant, metadata in written.items():
        assert metadata["build-layout"] == "files" and metadata["kernels-minver"] == "0.14.0"
        assert minver(tmp_path, variant, "plain") == "0.14.0"  # what the loader compares with its version
    # kernel-builder's key order: both right after version.
    assert list(written["torch-cpu"])[2:5] == ["version", "build-layout", "kernels-minver"]


def test_kernel_depends_raise_it_to_the_first_loader_that_fetches_them_per_backend(tmp_path):
    general = '\n[general.cuda]\nkernel-depends = [{ repo-id = "kernels-community/relu", version = 1 }]\n'
    written = built(tmp_path, "depending", general)
    assert written["torch-cuda"]["kernels-minver"] == "0.17.0"
    assert written["torch-cpu"]["kernels-minver"] == "0.14.0"  # its backend has none
    assert minver(tmp_path, "torch-cuda", "depending") == "0.17.0"
    everywhere = '\nkernel-depends = [{ repo-id = "kernels-community/relu", version = 1 }]\n'
    assert {m["kernels-minver"] for m in built(tmp_path, "both", everywhere).values()} == {"0.17.0"}
