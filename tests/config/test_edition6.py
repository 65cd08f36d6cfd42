"""build.toml edition 6 (kernels 0.19.1's kernels-common, config/v6.rs) on real kernels: every
public kernel of ../shared/corpus rewritten as edition 6 (tests/edition6.py, as kernel-builder's
`update-build` rewrites it; the copy lives in tmp_path, the corpus is only read) plans the same
cells, variants and notes as its original, and each one's edition 6 CPU variant builds (relu's and
einops' own suites pass). Edition 6's own rules are tested in tests/config/test_buildtoml.py."""

import re
from pathlib import Path

import pytest
from conftest import COMMUNITY, CORPUS, KERNEL_DIR, kernel_matrix, needs_corpus, tvm_ffi_kernel
from edition6 import edition_6_copy

from kernel_matrix.config.buildtoml import load_build_toml
from kernel_matrix.planning.selection import Selection
from kernel_matrix.planning.variants import host_arch

# Every kernel of the corpus (its README lists them: all public), and kernel-matrix's own two.
CORPUS_KERNELS = sorted(toml.parent for toml in CORPUS.glob("*/*/build.toml"))


def _plan(kernel_dir: Path) -> tuple[dict, list[str]]:
    """What `kernel-matrix matrix --json` prints for the kernel on the default matrix's full
    profile, and the notes it prints before, less their file:line:col (the layouts differ) and
    the edition 4 note (an original without `edition` has it)."""
    resolved = Selection(kernel_dir=kernel_dir, profile="full").resolve()
    notes = [
        re.sub(r"^\S*build\.toml:\d+:\d+: ", "", note)
        for note in [*resolved.notes, *resolved.refusals, *resolved.idle]
        if "no `edition` in [general]" not in note
    ]
    return resolved.github_matrix(resolved.cells), notes


def _same_kernel(original: Path, converted: Path) -> None:
    before, after = load_build_toml(original), load_build_toml(converted)
    assert after.general.edition == 6 and before.general.edition in (None, 5)
    # The same model but its edition, and the same model_dump: the op namespace's hash.
    assert (
        after.model_copy(update={"general": after.general.model_copy(update={"edition": before.general.edition})})
        == before
    )
    assert after.model_dump(mode="json") == before.model_dump(mode="json")
    planned_before, planned_after = _plan(original), _plan(converted)
    assert planned_after == planned_before
    assert planned_before[0]["include"], "a kernel with cells"


@needs_corpus
@pytest.mark.parametrize("kernel", CORPUS_KERNELS, ids=[k.name for k in CORPUS_KERNELS])
def test_every_corpus_kernel_in_edition_6_plans_the_same_cells(kernel, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no build_matrix.yaml here: the default matrix, as in a kernel's folder
    _same_kernel(kernel, edition_6_copy(kernel, tmp_path / kernel.name))


def test_our_kernels_in_edition_6_are_their_edition_5_twins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _same_kernel(KERNEL_DIR, edition_6_copy(KERNEL_DIR, tmp_path / "img2gray6"))
    tvm = tvm_ffi_kernel(tmp_path / "tvm")  # [tvm-ffi]: edition 6's own model of it, src given
    _same_kernel(tvm, edition_6_copy(tvm, tmp_path / "tvm6"))


@needs_corpus
@pytest.mark.processes
def test_a_misspelled_key_in_an_edition_6_section_is_one_line_at_its_place(tmp_path):
    kernel = edition_6_copy(COMMUNITY / "relu", tmp_path / "relu")
    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace("rocm-archs = [", "rocm-arch = ["))
    line = next(i for i, text in enumerate(toml.read_text().splitlines(), 1) if text.startswith("rocm-arch ="))
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (
        f"error: {toml}:{line}:1: unknown key 'kernel.activation_rocm.rocm-arch'; did you mean 'rocm-archs'?\n"
    )


# The corpus kernels with a cpu backend, and what their own suite says on CPU where it passes there
# (the others' suites need a GPU, or another kernel built beside them: built and loaded only).
CPU_KERNELS = {
    "kernels-community/relu": "2 passed",
    "kernels-community/einops": "59 passed",
    "kernels-community/activation": None,
    "kernels-community/rotary": None,
    "kernels-community/quantization-gptq": None,
    "kernels-community/megablocks": None,
    "huggingface-kernels/symbol-conflicts": None,
    "huggingface-kernels/symbol-conflicts2": None,
}


@needs_corpus
def test_the_cpu_kernels_are_every_corpus_kernel_with_a_cpu_backend():
    with_cpu = {f"{k.parent.name}/{k.name}" for k in CORPUS_KERNELS if "cpu" in load_build_toml(k).general.backends}
    assert with_cpu == set(CPU_KERNELS)


@needs_corpus
@pytest.mark.build
@pytest.mark.parametrize("kernel", list(CPU_KERNELS))
def test_corpus_kernels_in_edition_6_build_their_cpu_variant(kernel, tmp_path):
    """Each corpus kernel with a cpu backend, rewritten as edition 6: its CPU variant builds (and
    the build's load check, kernels.get_local_kernel, loads it); relu's and einops' own suites pass."""
    name = kernel.split("/")[1]
    converted = edition_6_copy(CORPUS / kernel, tmp_path / name, with_tests=True)
    build_dir = tmp_path / "build"
    options = ["--kernel-dir", str(converted), "--build-dir", str(build_dir), "--backend", "cpu"]
    built = kernel_matrix("build", *options)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    (variant,) = [p for p in build_dir.iterdir() if (p / "metadata.json").is_file()]
    # A compiled kernel's variant for this host's CPU, or a Python-only kernel's torch-cpu.
    assert variant.name == "torch-cpu" or variant.name.endswith(f"-cpu-{host_arch()}-linux"), variant.name
    if name == "relu":  # The skipped sections are named as in edition 5: by the backend their language builds for.
        skipped = "[kernel.activation_xpu] (xpu), [kernel.activation_rocm] (rocm), [kernel.activation_metal] (metal)"
        assert skipped in built.stderr
    if CPU_KERNELS[kernel] is not None:
        tested = kernel_matrix("test", *options)
        assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
        assert re.search(rf"\b{CPU_KERNELS[kernel]}\b", tested.stdout), tested.stdout[-2000:]
