"""kernel/build.toml: the real file parses; every bad input is one line with
file:line:col, exit code 2, no traceback, nothing built."""

import pytest
from conftest import KERNEL_DIR, kernel_matrix

from kernel_matrix.buildtoml import load_build_toml
from kernel_matrix.errors import ConfigError


def test_the_kernel_build_toml_parses():
    config = load_build_toml(KERNEL_DIR)
    assert config.general.name == "img2gray" and config.general.version == 1 and config.general.edition == 5
    assert config.general.hub.repo_id and set(config.general.backends) == {"cpu", "cuda"}
    assert {k.backend for k in config.kernel.values()} == {"cpu", "cuda"}
    assert set(config.kernels_for("cuda")) == set(config.kernel)  # CPU kernels ride along
    assert set(config.kernels_for("cpu")) == {n for n, k in config.kernel.items() if k.backend == "cpu"}


def _edit(kernel_copy, old: str, new: str) -> None:
    path = kernel_copy / "build.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _line_of(kernel_copy, needle: str) -> int:
    return next(i for i, line in enumerate((kernel_copy / "build.toml").read_text().splitlines(), 1) if needle in line)


CASES = [
    (
        "unknown key",
        'license = "Apache-2.0"',
        'license = "Apache-2.0"\nlicence = "MIT"',
        "licence =",
        "unknown key 'general.licence'",
    ),
    ("wrong type", "version = 1", 'version = "one"', 'version = "one"', "'general.version' = 'one'"),
    ("bad backend", 'backend = "cuda"', 'backend = "cuda12"', 'backend = "cuda12"', "kernel.img2gray_cuda.backend"),
    (
        "missing source",
        '"csrc/img2gray_cpu.cpp",',
        '"csrc/nope.cpp",',
        '"csrc/nope.cpp",',
        "source file 'csrc/nope.cpp' does not exist",
    ),
    ("bad name", 'name = "img2gray"', 'name = "Img2Gray!"', 'name = "Img2Gray!"', "'general.name'"),
    ("malformed TOML", "[torch]", "[torch", "[torch", "invalid TOML"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_build_toml_is_one_clear_line(kernel_copy, tmp_path, case):
    _, old, new, line_marker, message = case
    _edit(kernel_copy, old, new)
    with pytest.raises(ConfigError) as raised:
        load_build_toml(kernel_copy)
    text = str(raised.value)
    assert "\n" not in text and message in text
    line = _line_of(kernel_copy, line_marker)
    if case[0] == "missing source":
        line = _line_of(kernel_copy, "[kernel.img2gray_cpu]") + 3  # its `src = [` line
    assert text.startswith(f"{kernel_copy / 'build.toml'}:{line}:"), text


def test_the_cli_reports_bad_build_toml_with_exit_code_2_and_builds_nothing(kernel_copy, tmp_path):
    _edit(kernel_copy, "version = 1", "version = 1\nflavour = 2")
    build_dir = tmp_path / "build"
    result = kernel_matrix("build", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"build.toml:{_line_of(kernel_copy, 'flavour')}:1: unknown key 'general.flavour'" in result.stderr
    assert not build_dir.exists()


def test_a_missing_build_toml_is_one_clear_line(tmp_path):
    result = kernel_matrix("build", "--kernel-dir", str(tmp_path), "--build-dir", str(tmp_path / "b"))
    assert result.returncode == 2 and "cannot read build.toml" in result.stderr
    assert result.stderr.count("\n") == 1


def test_capabilities_the_cuda_version_cannot_compile_are_refused(kernel_copy, tmp_path):
    _edit(kernel_copy, 'cuda-capabilities = ["7.5",', 'cuda-capabilities = ["6.0", "6.1"] #')
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "b"), "--backend", "cuda"
    )
    # On a machine without nvcc or a CUDA torch the toolchain check comes first (exit 4).
    assert result.returncode in (2, 4), result.stderr
    if result.returncode == 2:
        assert "none of cuda-capabilities ['6.0', '6.1'] can be built with CUDA" in result.stderr
