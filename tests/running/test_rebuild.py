"""running/rebuild.py: verify's rebuild of a variant, with the parallelism `verify -j` gives."""

from pathlib import Path
from types import SimpleNamespace

from conftest import KERNEL_DIR


def test_verify_jobs_reach_each_native_rebuild(monkeypatch, tmp_path):
    from kernel_matrix.building import native_build
    from kernel_matrix.config.buildtoml import load_build_toml
    from kernel_matrix.planning.toolchain import Toolchain, TorchInstall
    from kernel_matrix.running import rebuild

    given = []

    def build_variant(plan, out, **options):  # what the rebuild asks of the build, nothing compiled
        given.append(options)
        return SimpleNamespace(variant_dir=out / plan.variant.name)

    monkeypatch.setattr(rebuild, "build_variant", build_variant)
    config = load_build_toml(KERNEL_DIR)
    torch = TorchInstall("python3", Path("/opt/km/torch"), "2.11.0+cpu", None, Path("/usr/include/py"))
    plan = native_build.plan(KERNEL_DIR, config, Toolchain(torch=torch, nvcc=None, cxx="g++", arch="x86_64"))
    for jobs in (None, 3):
        made = rebuild.Rebuilder(KERNEL_DIR, config, jobs=jobs)._native(plan, tmp_path, differences="")
        assert made == tmp_path / plan.variant.name
    assert given == [{"jobs": None}, {"jobs": 3}]
