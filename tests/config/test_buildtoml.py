"""kernel/build.toml: the real file parses; every problem of a bad one is one
line with file:line:col, all of them, exit code 2, no traceback, nothing built."""

import contextlib
import json
import shutil

import pytest
from conftest import KERNEL_DIR, kernel_matrix
from edition6 import edition_6_copy

from kernel_matrix.config.buildtoml import load_build_toml
from kernel_matrix.errors import ConfigError


def test_the_kernel_build_toml_parses():
    config = load_build_toml(KERNEL_DIR)
    assert config.general.name == "img2gray" and config.general.version == 1 and config.general.edition == 5
    assert config.general.hub.repo_id and set(config.general.backends) == {"cpu", "cuda"}
    assert {k.backend for k in config.kernel.values()} == {"cpu", "cuda"}
    # A variant compiles its backend's sections only, as kernel-builder does.
    for backend in ("cpu", "cuda"):
        assert set(config.kernels_for(backend)) == {n for n, k in config.kernel.items() if k.backend == backend}
    # The CUDA variant serves CPU tensors: its section lists the CPU sources too.
    assert "csrc/img2gray_cpu.cpp" in config.kernel["img2gray_cuda"].src


def _edit(kernel_copy, old: str, new: str) -> None:
    path = kernel_copy / "build.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _line_of(kernel_copy, needle: str) -> int:
    return next(i for i, line in enumerate((kernel_copy / "build.toml").read_text().splitlines(), 1) if needle in line)


def _assert_refused_at(kernel, line_marker: str, message: str) -> None:
    """Its build.toml is refused in one line that starts at the line holding line_marker and says message."""
    with pytest.raises(ConfigError) as raised:
        load_build_toml(kernel)
    text = str(raised.value)
    assert "\n" not in text and message in text, text
    assert text.startswith(f"{kernel / 'build.toml'}:{_line_of(kernel, line_marker)}:"), text


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
    (
        "bad name",
        'name = "img2gray"',
        'name = "Img2Gray!"',
        'name = "Img2Gray!"',
        "'general.name' = 'Img2Gray!': a kernel name starts with a lowercase letter, holds only lowercase letters, "
        "digits and dashes, and ends with a letter or digit (kernel-builder's rule); did you mean 'img2gray'?",
    ),
    (
        "no backend",
        'backends = ["cpu", "cuda"]',
        "backends = []",
        "backends = []",
        "'general.backends' = []: names no backend: give one or more of cann, cpu, cuda, metal",
    ),
    (
        "a source that is no git URL",
        'license = "Apache-2.0"',
        'license = "Apache-2.0"\nsource = "github.com/org/img2gray"',
        "source =",
        "'general.source' = 'github.com/org/img2gray': not a git URL: expected e.g. https://github.com/org/repo",
    ),
    (
        "an upstream of another scheme",
        'license = "Apache-2.0"',
        'license = "Apache-2.0"\nupstream = "ftp://example.com/img2gray"',
        "upstream =",
        "'general.upstream' = 'ftp://example.com/img2gray': unsupported scheme 'ftp' in a git URL",
    ),
    (
        "an upstream the loader's URL parser refuses",  # ssh:// with scp's colon: a port that is no number
        'license = "Apache-2.0"',
        'license = "Apache-2.0"\nupstream = "ssh://git@github.com:org/img2gray.git"',
        "upstream =",
        "'general.upstream' = 'ssh://git@github.com:org/img2gray.git': the kernels loader cannot read it: "
        "invalid git URL",
    ),
    (
        "a source with no host",
        'license = "Apache-2.0"',
        'license = "Apache-2.0"\nsource = "https://"',
        "source =",
        "'general.source' = 'https://': the kernels loader cannot read it: invalid git URL",
    ),
    (
        "an upstream with a line of its own",  # one line still: the value is shown escaped, and once
        'license = "Apache-2.0"',
        'license = "Apache-2.0"\nupstream = "ssh://git@h:org/r\\nerror: [bold]forged[/]"',
        "upstream =",
        "'general.upstream' = 'ssh://git@h:org/r\\nerror: [bold]forged[/]': the kernels loader cannot read it: "
        "invalid git URL",
    ),
    (
        "a kernel dependency of a negative version",  # kernels-data: a usize
        "[torch]",
        '[general.cuda]\nkernel-depends = [{ repo-id = "org/other", version = -1 }]\n\n[torch]',
        "kernel-depends",
        "greater than or equal to 0",
    ),
    ("malformed TOML", "[torch]", "[torch", "[torch", "invalid TOML"),
    (
        "a key set twice",  # tomllib says "Cannot overwrite a value" at the document's end
        'license = "Apache-2.0"',
        'license = "Apache-2.0"\nlicense = "MIT"',
        'license = "MIT"',
        "invalid TOML: 'general.license' is set twice (first at line 7): TOML allows a key or table once",
    ),
    (
        "a key that is also a table",
        'name = "img2gray"',
        'name = "img2gray"\nhub = "kernel-matrix/img2gray"',
        "[general.hub]",
        "invalid TOML: 'general.hub' is set twice (first at line 5)",
    ),
    (
        "a Hub branch that is a path",
        'repo-id = "kernel-matrix/img2gray"',
        'repo-id = "kernel-matrix/img2gray"\nbranch = "../main"',
        'branch = "../main"',
        "'general.hub.branch' = '../main'",
    ),
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
        line = _line_of(kernel_copy, "[kernel.img2gray_cuda]") + 3  # its `src = [` line
    assert text.startswith(f"{kernel_copy / 'build.toml'}:{line}:"), text


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('[a]\nx = """\nx = 1\n"""\n[b]\nx = [\n  "[a]",\n]\n', None),  # a multi-line string, array
        ("[[t]]\na = 1\n[[t]]\na = 2\n[t2]\n", None),  # each entry of an array of tables is a table
        ("[a.b]\nc = 1\n[a]\nd = 1\n", None),  # a table made by a header's path is declared once
        ("[a]\nb.c = 1\n[a.b]\nd = 1\n", (3, 1, "a.b", 2)),  # ... one made by a dotted key may not be
        ("[[t]]\na = 1\na = {x = 1} # [\n", (3, 1, "t.a", 2)),
        ("x = 1\n  'x' = 2\n", (2, 3, "x", 1)),
    ],
)
def test_redefined_key_finds_what_tomllib_refuses_and_nothing_else(text, found):
    import tomllib

    with pytest.raises(tomllib.TOMLDecodeError) if found else contextlib.nullcontext():
        tomllib.loads(text)
    from kernel_matrix.config.sourcelines import redefined_key

    assert redefined_key(text) == found


@pytest.mark.parametrize(
    "url",
    [
        # kernels-data config/git_url.rs test_valid_urls
        "https://github.com/org/repo",
        "http://github.com/org/repo.git",
        "git://github.com/org/repo.git",
        "ssh://git@github.com/org/repo.git",
        "git+ssh://git@github.com/org/repo.git",
        "git+https://github.com/org/repo.git",
        "git@github.com:drbh/yamoe.git",
        "user@gitlab.com:group/project.git",
    ],
)
def test_upstream_takes_the_git_urls_kernel_builder_takes(kernel_copy, url):
    _edit(kernel_copy, 'license = "Apache-2.0"', f'license = "Apache-2.0"\nupstream = "{url}"')
    assert load_build_toml(kernel_copy).general.upstream == url


@pytest.mark.processes
def test_every_problem_of_a_build_toml_gets_its_own_line(kernel_copy, tmp_path):
    # Three problems of three kinds: a key, a value, a file; all reported in one run.
    _edit(kernel_copy, 'license = "Apache-2.0"', 'license = "Apache-2.0"\nlicence = "MIT"')
    _edit(kernel_copy, "version = 1", 'version = "one"')
    _edit(kernel_copy, '"csrc/img2gray_cpu.cpp",', '"csrc/nope.cpp",')
    path = kernel_copy / "build.toml"
    licence, version, src = (
        _line_of(kernel_copy, m) for m in ("licence =", 'version = "one"', "[kernel.img2gray_cuda]")
    )
    with pytest.raises(ConfigError) as raised:
        load_build_toml(kernel_copy)
    assert sorted(str(raised.value).splitlines()) == sorted(
        [
            f"{path}:{licence}:1: unknown key 'general.licence'; did you mean 'license'?",
            f"{path}:{version}:1: 'general.version' = 'one': Input should be a valid integer",
            f"{path}:{src + 3}:1: source file 'csrc/nope.cpp' does not exist in {kernel_copy}",
        ]
    )
    build_dir = tmp_path / "build"
    result = kernel_matrix("build", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 3 and not build_dir.exists(), result.stderr


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        ("stable-abi = 5", "'torch.stable-abi' = 5: "),  # each member of the union refuses it: one line
        # refused inside by the table member: one line, at the key inside (not also "a valid string")
        ('stable-abi = { cpu = "2.10", gpu = "2.10" }', "'torch.stable-abi.gpu' = 'gpu': Input should be 'cann'"),
        ("minver = 2.10  # not a string", "'torch.minver' = 2.10: Input should be a valid string"),  # as written
    ],
)
def test_a_refused_value_is_one_line_showing_it_as_written(kernel_copy, lines, said):
    _edit(kernel_copy, "[torch]\n", f"[torch]\n{lines}\n")
    with pytest.raises(ConfigError) as raised:
        load_build_toml(kernel_copy)
    (line,) = str(raised.value).splitlines()
    assert said in line, line


@pytest.mark.processes
def test_the_cli_reports_bad_build_toml_with_exit_code_2_and_builds_nothing(kernel_copy, tmp_path):
    _edit(kernel_copy, "version = 1", "version = 1\nflavour = 2")
    build_dir = tmp_path / "build"
    result = kernel_matrix("build", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"build.toml:{_line_of(kernel_copy, 'flavour')}:1: unknown key 'general.flavour'" in result.stderr
    assert not build_dir.exists()


@pytest.mark.processes
def test_a_missing_build_toml_is_one_clear_line(tmp_path):
    result = kernel_matrix("build", "--kernel-dir", str(tmp_path), "--build-dir", str(tmp_path / "b"))
    assert result.returncode == 2 and "cannot read build.toml" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.processes
def test_capabilities_the_cuda_version_cannot_compile_are_refused(kernel_copy, tmp_path):
    _edit(kernel_copy, 'cuda-capabilities = ["7.5",', 'cuda-capabilities = ["6.0", "6.1"] #')
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "b"), "--backend", "cuda"
    )
    # On a machine without nvcc or a CUDA torch the toolchain check comes first (exit 4).
    assert result.returncode in (2, 4), result.stderr
    if result.returncode == 2:
        assert "none of cuda-capabilities ['6.0', '6.1'] can be built with CUDA" in result.stderr


EDITION_CASES = [
    ("edition 3", "edition = 5", "edition = 3", "edition = 3", "general.edition = 3 is not supported"),
    (
        "edition 7",
        "edition = 5",
        "edition = 7",
        "edition = 7",
        "general.edition = 7 is not supported: kernel-builder reads `edition = 6` and `edition = 5`, and edition 4 as "
        "a file without `edition`; no kernel-builder release reads a newer one",
    ),
    (
        "edition 4 with an edition 5 key",
        "edition = 5\n",
        "kernel-depends = [{ repo-id = 'a/b', version = 1 }]\n",
        "kernel-depends",
        "'general.kernel-depends' needs edition 5",
    ),
    (
        "no backends",
        'edition = 5\nlicense = "Apache-2.0"\nbackends = ["cpu", "cuda"]',
        'license = "Apache-2.0"',
        "[general]",
        "no general.backends: every build.toml kernel-builder reads names its backends",
    ),
    (
        "kernel-builder 0.x",
        'edition = 5\nlicense = "Apache-2.0"\nbackends = ["cpu", "cuda"]',
        'license = "Apache-2.0"\nuniversal = false',
        "[general]",
        "a kernel-builder 0.x build.toml (`universal`): neither kernel-builder nor its `update-build` reads",
    ),
    (
        "a typo",
        "cuda-capabilities = [",
        "cuda-capabilites = [",
        "cuda-capabilites",
        "unknown key 'kernel.img2gray_cuda.cuda-capabilites'; did you mean 'cuda-capabilities'?",
    ),
    (
        "another backend's key",
        "cuda-capabilities = [",
        "rocm-archs = [",
        "rocm-archs",
        "unknown key 'kernel.img2gray_cuda.rocm-archs'",
    ),
    (
        "depends is required",
        'depends = []\nsrc = [\n  "csrc/img2gray_cuda.cu"',
        'src = [\n  "csrc/img2gray_cuda.cu"',
        "[kernel.img2gray_cuda]",
        "missing required key 'kernel.img2gray_cuda.depends'",
    ),
    (
        "unknown dependency",
        "depends = []",
        'depends = ["cutlass_9_9"]',
        "cutlass_9_9",
        "kernel.img2gray_cuda.depends.0",
    ),
    (
        "tvm-ffi without src",
        '[torch]\nsrc = [\n  "torch-ext/torch_binding.cpp",\n  "torch-ext/torch_binding.h",\n]\n',
        "[tvm-ffi]\n",
        "[tvm-ffi]",
        "missing required key 'tvm-ffi.src'",
    ),
    (
        "two frameworks",
        "[torch]\n",
        "[torch-noarch]\n[torch]\n",
        "[torch-noarch]",
        "exactly one of [torch], [torch-noarch]",
    ),
]


@pytest.mark.parametrize("case", EDITION_CASES, ids=[c[0] for c in EDITION_CASES])
def test_editions_frameworks_and_keys_as_kernel_builder_reads_them(kernel_copy, case):
    _, old, new, line_marker, message = case
    _edit(kernel_copy, old, new)
    _assert_refused_at(kernel_copy, line_marker, message)


@pytest.mark.parametrize(
    ("general", "tables", "message"),
    [
        # Edition 3 (kernels-data config/v3.rs), which kernel-builder's builds refuse (config/parse.rs):
        ("", "", "edition 3 (no `edition`, no general.version and no [torch] or [torch-noarch] section): kernel"),
        (
            "",
            "[torch]\nsrc = []\n",
            "edition 3 (no `edition`, no general.version): kernel-builder no longer builds this format; migrate",
        ),
        ("version = 1\n", "", "edition 3 (no `edition`, no [torch] or [torch-noarch] section)"),
        # Keys edition 3 does not have: an edition 4 file that forgot its version.
        (
            "",
            "[torch-noarch]\n",
            "missing required key 'general.version': a file without `edition` that has "
            "[torch-noarch] is edition 4, which needs it",
        ),
        (
            "",
            '[torch]\nsrc = []\nstable-abi = "2.10"\n',
            "missing required key 'general.version': a file without `edition` that has torch.stable-abi is edition 4",
        ),
        ('source = "https://github.com/a/b"\n', "[torch]\nsrc = []\n", "that has general.source is edition 4"),
        # kernel-builder 0.x, with `universal` in [general] or in [torch]:
        ("", "[torch]\nuniversal = true\n", "a kernel-builder 0.x build.toml (`universal`): neither kernel-builder"),
    ],
)
def test_files_without_edition_that_are_no_edition_4_are_refused_as_kernel_builder_refuses_them(
    tmp_path, general, tables, message
):
    """Without `edition`, kernel-builder reads edition 4 (upgraded in memory), else edition 3,
    which its builds refuse: `update-build` migrates it (config/parse.rs). One line, at [general]."""
    backends = "" if "universal" in tables else 'backends = ["cpu"]\n'
    (tmp_path / "build.toml").write_text(
        f'[general]\nname = "fp8-v3"\nlicense = "Apache-2.0"\n{backends}{general}\n{tables}'
    )
    with pytest.raises(ConfigError) as raised:
        load_build_toml(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / 'build.toml'}:1:1: ") and "\n" not in str(raised.value)
    assert message in str(raised.value)


def test_the_edition_3_advice_names_every_key_update_build_refuses_first(tmp_path):
    """update-build's edition-3 reader (kernels-data config/v3.rs) takes kernel-builder's names, a
    license and its Backend values only: the advice names each it would refuse (a Triton kernel's
    `backends = ["triton"]`, from a real repository), not a command that fails too."""
    (tmp_path / "build.toml").write_text('[general]\nname = "flash_sinkhorn"\nbackends = ["triton"]\n')
    with pytest.raises(ConfigError) as raised:
        load_build_toml(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path / 'build.toml'}:1:1: edition 3 (no `edition`, no general.version and no [torch] or "
        "[torch-noarch] section): kernel-builder no longer builds this format; `kernel-builder update-build` "
        "migrates it to edition 6 once general.name matches ^[a-z][-a-z0-9]*[a-z0-9]$ ('flash_sinkhorn' does not) "
        "and general.license is set and general.backends names only cann, cpu, cuda, metal, neuron, rocm, tpu, "
        "xpu ('triton' is none)"
    )


def test_edition_4_is_read_and_upgraded_in_memory(kernel_copy):
    _edit(kernel_copy, "edition = 5\n", "")
    _edit(kernel_copy, "[torch]\n", '[torch]\nstable-abi = "2.10"\n')
    config = load_build_toml(kernel_copy)
    assert config.general.edition is None
    assert config.torch.stable_abi_for("cuda") == config.torch.stable_abi_for("cpu") == "2.10"


def test_sections_of_other_backends_are_read_and_skipped(kernel_copy):
    _edit(
        kernel_copy,
        "[kernel.img2gray_cpu]",
        '[kernel.gray_rocm]\nbackend = "rocm"\ndepends = []\n'
        'src = ["csrc/img2gray_cuda.cu"]\nrocm-archs = ["gfx942"]\nhip-flags = ["-O3"]\n\n[kernel.img2gray_cpu]',
    )
    config = load_build_toml(kernel_copy)
    assert config.skipped_sections() == ["gray_rocm"] and config.kernel["gray_rocm"].rocm_archs == ["gfx942"]
    assert "gray_rocm" not in config.kernels_for("cuda")


@pytest.mark.processes
def test_matrix_notes_skipped_sections_and_an_edition_4_file_at_their_lines(kernel_copy):
    """What the builds will say (a section left out, a file upgraded in memory, as kernel-builder
    warns), `matrix` says first, each at its line;."""
    _edit(kernel_copy, "edition = 5\n", "")
    _edit(
        kernel_copy,
        "[kernel.img2gray_cpu]",
        '[kernel.gray_xpu]\nbackend = "xpu"\ndepends = []\nsrc = ["csrc/img2gray_cuda.cu"]\n\n[kernel.img2gray_cpu]',
    )
    lines = (kernel_copy / "build.toml").read_text().splitlines()
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel_copy))
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if ": note: " in line]
    section, general = lines.index("[kernel.gray_xpu]") + 1, lines.index("[general]") + 1
    path = kernel_copy / "build.toml"
    assert notes == [
        f"{path}:{section}:1: note: [kernel.gray_xpu] (xpu) skipped: kernel-matrix builds cpu and cuda",
        f"{path}:{general}:1: note: no `edition` in [general]: read as edition 4 and upgraded in "
        "memory, as kernel-builder does; `kernel-builder update-build` writes edition 6",
    ]


@pytest.mark.processes
def test_matrix_notes_a_backend_no_section_is_for_once_at_general_backends(kernel_copy):
    """Without [kernel.img2gray_cpu] the CPU variant compiles the binding alone (kernel-builder
    makes no CPU variant of such a kernel): `matrix` says so before any job, once for the
    backend however many CPU cells there are, and nothing for cuda, which has its section."""
    text = (kernel_copy / "build.toml").read_text()
    (kernel_copy / "build.toml").write_text(text[: text.index("[kernel.img2gray_cpu]")])
    lines = text.splitlines()
    result = kernel_matrix("matrix", "--kernel-dir", str(kernel_copy))
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if ": note: " in line]
    backends = next(i for i, line in enumerate(lines) if line.startswith("backends")) + 1
    assert notes == [
        f'{kernel_copy / "build.toml"}:{backends}:1: note: no [kernel.*] section has backend = "cpu": the cpu '
        'variant compiles only [torch] src (the binding); add a section with backend = "cpu", or leave "cpu" out '
        "of general.backends (kernel-builder builds no cpu variant of this kernel)"
    ]


@pytest.mark.processes
def test_matrix_names_the_edition_4_files_of_a_repository_in_one_line(tmp_path):
    for name in ("gray-a", "gray-b", "gray-c"):
        shutil.copytree(KERNEL_DIR, tmp_path / name, ignore=shutil.ignore_patterns("build", "__pycache__"))
        _edit(tmp_path / name, 'name = "img2gray"', f'name = "{name}"')
        _edit(tmp_path / name, "kernel-matrix/img2gray", f"kernel-matrix/{name}")  # a Hub repo each
        if name != "gray-c":
            _edit(tmp_path / name, "edition = 5\n", "")
    matrix = (KERNEL_DIR.parent / "build_matrix.yaml").read_text()
    (tmp_path / "build_matrix.yaml").write_text(matrix.replace("kernel: kernel", "kernels: [gray-a, gray-b, gray-c]"))
    result = kernel_matrix("matrix", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "note: " in line]
    assert notes == [
        "note: 2 build.toml files have no `edition` in [general]: read as edition 4 and upgraded in "
        "memory, as kernel-builder does; `kernel-builder update-build` writes edition 6 (gray-a, gray-b)"
    ]


@pytest.mark.parametrize("value", ['"sm_90"', '"9"', '" 9.0"', '"9.0b"'])
def test_capabilities_are_checked_where_they_are_written(kernel_copy, value):
    _edit(kernel_copy, 'cuda-capabilities = ["7.5",', f"cuda-capabilities = [{value}, ")
    with pytest.raises(ConfigError, match=r"kernel.img2gray_cuda.cuda-capabilities.0"):
        load_build_toml(kernel_copy)


@pytest.mark.parametrize("value", ["9.0,", "sm_90", "9", "9.0 ", "9.0\n"])
@pytest.mark.processes
def test_bad_cuda_capabilities_options_are_one_line(value, tmp_path):
    result = kernel_matrix("build", "--cuda-capabilities", value, "--build-dir", str(tmp_path / "b"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--cuda-capabilities" in result.stderr and not (tmp_path / "b").exists()


@pytest.mark.processes
def test_a_torch_outside_the_kernels_range_is_refused_and_its_cells_dropped(kernel_copy, tmp_path):
    from kernel_matrix.planning.matrix import load_matrix
    from kernel_matrix.planning.selection import Kernel, kernel_cells

    _edit(kernel_copy, "[torch]\n", '[torch]\nminver = "2.13"\nmaxver = "2.13"\n')
    cells = kernel_cells(Kernel.load(kernel_copy), load_matrix(KERNEL_DIR.parent / "build_matrix.yaml").cells)
    assert cells and {c.variant.torch for c in cells} == {"2.13"}
    result = kernel_matrix("build", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "b"))
    assert result.returncode == 4 and result.stderr.count("\n") == 1, result.stderr
    import torch

    host = ".".join(torch.__version__.split(".")[:2])  # this machine's, whichever is newest
    assert f"torch.maxver is 2.13, not {host}" in result.stderr or "torch.minver is 2.13" in result.stderr


@pytest.mark.processes
def test_a_cpu_only_kernel_has_no_cuda_cells(kernel_copy, tmp_path):
    _edit(kernel_copy, 'backends = ["cpu", "cuda"]', 'backends = ["cpu"]')
    (tmp_path / "build_matrix.yaml").write_text((KERNEL_DIR.parent / "build_matrix.yaml").read_text())
    result = kernel_matrix("matrix", "--json", "-f", str(tmp_path / "build_matrix.yaml"))
    assert result.returncode == 0, result.stderr
    import json

    assert {cell["backend"] for cell in json.loads(result.stdout)["include"]} == {"cpu"}


def test_a_variant_ships_the_packages_python_files_and_what_pyext_adds(tmp_path):
    """As kernel-builder installs a noarch kernel's torch-ext/<name>/ (the source set's files,
    pyext's extensions: torch/noarch/setup.py, source-set.nix): a helper script or marker file
    left there is not published."""
    from kernel_matrix.building.native_build import build_noarch

    kernel = tmp_path / "shipped"
    package = kernel / "torch-ext" / "shipped"
    (package / "sub").mkdir(parents=True)
    (kernel / "build.toml").write_text(
        '[general]\nname = "shipped"\nversion = 1\nedition = 5\nlicense = "MIT"\nbackends = ["cpu"]\n\n'
        '[torch-noarch]\npyext = ["py", "pyi", "json"]\n'
    )
    files = ["__init__.py", "sub/__init__.py", "sub/table.json", "stubs.pyi", "run.sh", "py.typed", "lib.so"]
    for name in files:
        (package / name).write_text("x = 1\n" if name.endswith(".py") else "{}\n")
    (variant,) = build_noarch(kernel, tmp_path / "build", backends=["cpu"])
    shipped = sorted(str(p.relative_to(variant)) for p in variant.rglob("*") if p.is_file())
    assert shipped == ["__init__.py", "_ops.py", "metadata.json", "stubs.pyi", "sub/__init__.py", "sub/table.json"]
    assert load_build_toml(kernel).package_suffixes == {".py", ".pyi", ".json"}
    # No pyext: kernel-builder's default, py and pyi. A [torch] kernel installs *.py and pyext's
    # data extensions only (build-variants.cmake): its stubs stay out.
    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace('pyext = ["py", "pyi", "json"]\n', ""))
    assert load_build_toml(kernel).package_suffixes == {".py", ".pyi"}
    toml.write_text(toml.read_text().replace("[torch-noarch]", '[torch]\npyext = ["py", "pyi", "json"]'))
    assert load_build_toml(kernel).package_suffixes == {".py", ".json"}


def build_python_only(tmp_path, name: str, backends: list[str], general: str) -> list:
    """A [torch-noarch] kernel `name` whose [general] table ends with `general` (tables may
    follow), built for backends: its variant folders, in that order."""
    from kernel_matrix.building.native_build import build_noarch

    kernel = tmp_path / name
    (kernel / "torch-ext" / name).mkdir(parents=True)
    (kernel / "torch-ext" / name / "__init__.py").write_text("x = 1\n")
    (kernel / "build.toml").write_text(
        f'[general]\nname = "{name}"\nversion = 1\nedition = 5\nlicense = "MIT"\nbackends = {json.dumps(backends)}\n'
        f"{general}\n[torch-noarch]\n"
    )
    return build_noarch(kernel, tmp_path / "build", backends=backends)


def test_metadata_records_source_and_kernel_depends_as_kernel_builder_writes_them(tmp_path):
    """kernels-data's Metadata: `upstream` and `source` where given, `kernel-depends` always
    (the kernel's, then its backend's), in its key order; the loader reads the file."""
    from kernel_matrix.loader import Metadata

    cpu, cuda = build_python_only(
        tmp_path,
        "described",
        ["cpu", "cuda"],
        'upstream = "https://github.com/example/upstream"\nsource = "https://github.com/example/described"\n'
        'kernel-depends = [{ repo-id = "kernels-community/relu", version = 1 }]\n\n'
        '[general.cuda]\nkernel-depends = [{ repo-id = "kernels-community/activation", revision = "abc123" }]\n',
    )
    raw = json.loads((cuda / "metadata.json").read_text())
    keys = ["name", "id", "version", "build-layout", "kernels-minver", "license", "upstream", "source"]
    keys += ["python-depends", "kernel-depends", "backend"]
    assert list(raw)[: len(keys)] == keys
    assert raw["source"] == "https://github.com/example/described"
    assert raw["kernel-depends"] == [
        {"repo-id": "kernels-community/relu", "version": 1},
        {"repo-id": "kernels-community/activation", "revision": "abc123"},
    ]
    assert json.loads((cpu / "metadata.json").read_text())["kernel-depends"] == [
        {"repo-id": "kernels-community/relu", "version": 1}
    ]
    for variant in (cpu, cuda):
        assert str(Metadata.read_from_file(variant / "metadata.json").name) == "described"


def test_python_depends_are_the_kernels_then_those_of_the_tables_kernel_builder_reads(tmp_path):
    """kernels-data's backend_python_depends adds [general.cuda]'s, [general.tpu]'s and
    [general.xpu]'s lists; a [general.neuron] list is not written (the loader would check
    names kernel-builder never records)."""
    cuda, neuron = build_python_only(
        tmp_path,
        "deps",
        ["cuda", "neuron"],
        'python-depends = ["einops"]\n\n[general.cuda]\npython-depends = ["nvidia-cutlass-dsl"]\n\n'
        '[general.neuron]\npython-depends = ["nki"]\n',
    )
    assert json.loads((cuda / "metadata.json").read_text())["python-depends"] == ["einops", "nvidia-cutlass-dsl"]
    assert json.loads((neuron / "metadata.json").read_text())["python-depends"] == ["einops"]


def test_python_depends_kernel_builder_does_not_know_are_refused_at_their_line(kernel_copy):
    """kernel-builder resolves every python-depends name (kernels-data python_dependencies.json)
    and the loader refuses a variant naming another: refused here, each at its line, before a
    variant nobody can load is built and published. A backend's list takes its own names only."""
    _edit(
        kernel_copy,
        'backends = ["cpu", "cuda"]\n',
        'backends = ["cpu", "cuda"]\npython-depends = ["einops", "numpy", "einop"]\n\n'
        '[general.cuda]\npython-depends = ["nvidia-cutlass-dsl", "einops"]\n',
    )
    with pytest.raises(ConfigError) as raised:
        load_build_toml(kernel_copy)
    lines = str(raised.value).splitlines()
    general, cuda = _line_of(kernel_copy, 'python-depends = ["einops"'), _line_of(kernel_copy, "nvidia-cutlass-dsl")
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"{kernel_copy / 'build.toml'}:{general}:")
    known = "kernel-builder knows einops, helion, tvm-ffi"
    assert f'general.python-depends: unknown dependency "numpy": {known}' in lines[0]
    assert 'unknown dependency "einop"' in lines[1] and "did you mean einops?" in lines[1]
    assert lines[2].startswith(f"{kernel_copy / 'build.toml'}:{cuda}:")
    assert 'cuda.python-depends: unknown dependency "einops": kernel-builder knows nvidia-cutlass-dsl' in lines[2]


def test_the_python_depends_names_are_the_loaders():
    """kernel_matrix/data/python_depends.yaml is kernel-builder's list; the installed `kernels`
    loader checks variants against its own copy: a loader release that changes it shows here."""
    from kernel_matrix import data
    from kernel_matrix.loader import python_depends_table

    theirs = python_depends_table()
    ours = data.load("python_depends")
    assert ours["general"] == sorted(theirs["general"])
    assert {b: sorted(names) for b, names in theirs["backends"].items()} == ours["backends"]


@pytest.mark.parametrize(
    ("name", "license", "advice"),
    [
        ("fp8-v3", 'license = "Apache-2.0"\n', "migrate it with `kernel-builder update-build` (it writes edition 6)"),
        (
            "qwen3_kernels",
            "",
            "`kernel-builder update-build` migrates it to edition 6 once general.name matches "
            "^[a-z][-a-z0-9]*[a-z0-9]$ ('qwen3_kernels' does not) and general.license is set",
        ),
        ("ok-name", "", "`kernel-builder update-build` migrates it to edition 6 once general.license is set"),
        (
            "fused-rms-norm",  # ChipFlow's: a Metal section key no edition has (round 19)
            'license = "MIT"\n',
            "`kernel-builder update-build` migrates it to edition 6 once kernel.k.metal-std-version is removed "
            "(no edition has that key)",
        ),
    ],
)
def test_edition_3_advice_names_what_update_build_refuses_first(tmp_path, name, license, advice):
    """update-build's edition-3 reader (kernels-data config/v3.rs) refuses a name outside name.rs' pattern, a
    file without license and a [kernel.*] key it does not have: the advice names them, not a command that
    would fail (huggingface examples did)."""
    extra = '\n[kernel.k]\nbackend = "metal"\nsrc = []\nmetal-std-version = "3.1"\n' if name == "fused-rms-norm" else ""
    (tmp_path / "build.toml").write_text(
        f'[general]\nname = "{name}"\n{license}backends = ["cpu"]\n\n[torch]\nsrc = []\n{extra}'
    )
    with pytest.raises(ConfigError) as raised:
        load_build_toml(tmp_path)
    assert str(raised.value).endswith(advice) and "\n" not in str(raised.value), str(raised.value)


# Edition 6 (kernels 0.19.1's kernels-common, config/v6.rs): kernel/ as `update-build` writes it.
@pytest.fixture
def kernel6(tmp_path):
    return edition_6_copy(KERNEL_DIR, tmp_path / "kernel6")


_RUST_CPU = '\n[kernel.fast]\nlanguage = "rust-cpu"\ncargo-manifest = "rs/Cargo.toml"\nsrc = ["rs/lib.rs"]\n'
EDITION_6_CASES = [
    (
        "a typo in a language's section",
        "cuda-capabilities = [",
        "cuda-capabilites = [",
        "cuda-capabilites",
        "unknown key 'kernel.img2gray_cuda.cuda-capabilites'; did you mean 'cuda-capabilities'?",
    ),
    (
        "another language's key",
        'language = "cpp-cpu"\n',
        'language = "cpp-cpu"\ncuda-flags = []\n',
        "cuda-flags",
        "unknown key 'kernel.img2gray_cpu.cuda-flags'",
    ),
    (
        "a backend where edition 6 wants a language",
        'language = "cpp-cuda"',
        'backend = "cuda"',
        "[kernel.img2gray_cuda]",
        "missing required key 'kernel.img2gray_cuda.language'; edition 6 tags a section by its language: "
        '`language = "cpp-cuda"`, not `backend`',
    ),
    (
        "both tags",
        'language = "cpp-cuda"',
        'language = "cpp-cuda"\nbackend = "cuda"',
        'backend = "cuda"',
        "unknown key 'kernel.img2gray_cuda.backend'; edition 6 tags a section by its language: "
        '`language = "cpp-cuda"`, not `backend`',
    ),
    (
        "a backend's name as language",
        'language = "cpp-cuda"',
        'language = "cuda"',
        'language = "cuda"',
        "'kernel.img2gray_cuda.language' = 'cuda': expected one of cpp-cpu, cpp-cuda, cpp-metal, cpp-rocm, cpp-xpu, "
        "rust-cpu, rust-cuda-oxide, rust-cutile; did you mean 'cpp-cuda'?",
    ),
    (
        "build-layout is files or zip",
        'build-layout = "files"',
        'build-layout = "tar"',
        "build-layout",
        "'general.build-layout' = 'tar': Input should be 'files' or 'zip'",
    ),
    (
        "the zip layout is not built",
        'build-layout = "files"',
        'build-layout = "zip"',
        "build-layout",
        "'general.build-layout' = 'zip': kernel-matrix builds the files layout only",
    ),
    (
        "a Rust section needs [tvm-ffi]",
        'repo-id = "kernel-matrix/img2gray"\n',
        'repo-id = "kernel-matrix/img2gray"\n' + _RUST_CPU,
        'language = "rust-cpu"',
        '[kernel.fast] language = "rust-cpu": Rust kernels require a `[tvm-ffi]` framework',
    ),
    (
        "a Rust section has only its own keys",
        'repo-id = "kernel-matrix/img2gray"\n',
        'repo-id = "kernel-matrix/img2gray"\n' + _RUST_CPU + "depends = []\n",
        "depends = []",  # the first: the Rust section comes before the C++ ones
        "unknown key 'kernel.fast.depends'",
    ),
    (
        "cuTile needs CUDA 13.2",
        'repo-id = "kernel-matrix/img2gray"\n',
        'repo-id = "kernel-matrix/img2gray"\n'
        + _RUST_CPU.replace("rust-cpu", "rust-cutile")
        + 'tileiras-minver = "13.1"\n',
        "tileiras-minver",
        "'kernel.fast.tileiras-minver' = '13.1': must be at least 13.2, the first CUDA version with cuTile",
    ),
    (
        "cuda-oxide names its crate",
        'repo-id = "kernel-matrix/img2gray"\n',
        'repo-id = "kernel-matrix/img2gray"\n'
        + _RUST_CPU.replace("rust-cpu", "rust-cuda-oxide").replace('cargo-manifest = "rs/Cargo.toml"\n', ""),
        "[kernel.fast]",
        "missing required key 'kernel.fast.cargo-manifest'",
    ),
]


@pytest.mark.parametrize("case", EDITION_6_CASES, ids=[c[0] for c in EDITION_6_CASES])
def test_edition_6_is_read_as_kernels_common_reads_it(kernel6, case):
    _, old, new, line_marker, message = case
    _edit(kernel6, old, new)
    (kernel6 / "rs").mkdir()
    (kernel6 / "rs" / "lib.rs").write_text("")
    _assert_refused_at(kernel6, line_marker, message)


def test_an_edition_6_file_is_its_edition_5_twin(kernel6):
    """Its C++ sections are edition 5's, key for key: the same model (but its edition), the same
    model_dump (the op namespace's hash), and build-layout files where it is not written."""
    original, converted = load_build_toml(KERNEL_DIR), load_build_toml(kernel6)
    assert converted.general.edition == 6 and converted.general.build_layout == "files"
    assert converted.model_dump(mode="json") == original.model_dump(mode="json")
    assert converted.model_copy(update={"general": converted.general.model_copy(update={"edition": 5})}) == original
    _edit(kernel6, 'build-layout = "files"\n', "")
    assert load_build_toml(kernel6).general.build_layout == "files"


def test_every_cpp_language_is_read_and_those_not_built_are_skipped(kernel6):
    sections = "".join(
        f'\n[kernel.k_{language[4:]}]\nlanguage = "{language}"\ndepends = []\nsrc = ["csrc/img2gray_cpu.cpp"]\n{extra}'
        for language, extra in [
            ("cpp-metal", 'cxx-flags = ["-O2"]\n'),
            ("cpp-rocm", 'rocm-archs = ["gfx942"]\nhip-flags = ["-O2"]\n'),
            ("cpp-xpu", 'sycl-flags = ["-O2"]\n'),
        ]
    )
    (kernel6 / "build.toml").write_text((kernel6 / "build.toml").read_text() + sections)
    config = load_build_toml(kernel6)
    assert {name: section.backend for name, section in config.kernel.items()} == {
        "img2gray_cuda": "cuda",
        "img2gray_cpu": "cpu",
        "k_metal": "metal",
        "k_rocm": "rocm",
        "k_xpu": "xpu",
    }
    assert config.kernel["k_rocm"].rocm_archs == ["gfx942"] and config.skipped_sections() == [
        "k_metal",
        "k_rocm",
        "k_xpu",
    ]


def test_a_rust_section_is_refused_in_one_line_naming_it(kernel6):
    """kernel-builder builds Rust sections with its Nix toolchains; kernel-matrix's images have none.
    A file kernels-common takes ([tvm-ffi] without src, a Rust kernel only) is refused at the section."""
    text = (kernel6 / "build.toml").read_text()
    torch = text[text.index("[torch]") :]
    (kernel6 / "build.toml").write_text(
        text[: text.index("[torch]")]
        + "[tvm-ffi]\n"
        + _RUST_CPU.replace("rust-cpu", "rust-cuda-oxide")
        + 'cuda-capabilities = ["9.0"]\n'
    )
    (kernel6 / "rs").mkdir()
    (kernel6 / "rs" / "lib.rs").write_text("")
    with pytest.raises(ConfigError) as raised:
        load_build_toml(kernel6)
    assert str(raised.value) == (
        f"{kernel6 / 'build.toml'}:{_line_of(kernel6, 'rust-cuda-oxide')}:1: [kernel.fast] language = "
        '"rust-cuda-oxide": kernel-matrix does not build Rust kernels (kernel-builder builds them with the Rust '
        "toolchains of its Nix flake, which kernel-matrix's builder images do not have); build this kernel with "
        "kernel-builder, or leave this section out"
    )
    assert "[torch]" in torch  # (the C++ kernel's sections went with it)


def _mlx_kernel(folder, backends: str) -> None:
    (folder / "torch-ext").mkdir(parents=True)
    (folder / "build.toml").write_text(
        f'[general]\nname = "mlx-gray"\nversion = 1\nedition = 6\nlicense = "MIT"\nbackends = {backends}\n\n'
        '[mlx-noarch]\npyext = ["py", "metal"]\n'
    )


@pytest.mark.processes
def test_mlx_noarch_is_read_and_skipped_like_metal(tmp_path):
    _mlx_kernel(tmp_path, '["metal"]')
    config = load_build_toml(tmp_path)
    assert config.mlx_noarch is not None and config.mlx_noarch.pyext == ["py", "metal"]
    assert config.unbuilt() == "[mlx-noarch]: an MLX kernel for Metal; kernel-matrix builds torch and tvm-ffi kernels"
    result = kernel_matrix("matrix", "--kernel-dir", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2 and "[mlx-noarch]: an MLX kernel for Metal" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_mlx_noarch_is_for_metal_only(tmp_path):
    _mlx_kernel(tmp_path, '["metal", "cpu"]')
    with pytest.raises(ConfigError) as raised:
        load_build_toml(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path / 'build.toml'}:6:1: general.backends names 'cpu': [mlx-noarch] only supports the `metal` "
        "backend (kernels-common)"
    )


@pytest.mark.parametrize(
    ("old", "new", "marker", "message"),
    [
        (
            'license = "Apache-2.0"',
            'license = "Apache-2.0"\nbuild-layout = "files"',
            "build-layout",
            "'general.build-layout' needs edition 6 (`kernel-builder update-build` writes it)",
        ),
        (
            "[torch]\n",
            "[mlx-noarch]\n[torch]\n",
            "[mlx-noarch]",
            "'mlx-noarch' needs edition 6 (`kernel-builder update-build` writes it)",
        ),
        (
            'backend = "cpu"',
            'backend = "cpu"\nlanguage = "cpp-cpu"',
            "language",
            "unknown key 'kernel.img2gray_cpu.language'; `language` is edition 6's (`edition = 6` in [general]): "
            "editions 4 and 5 tag a section by `backend`",
        ),
    ],
)
def test_edition_6_keys_in_an_edition_5_file(kernel_copy, old, new, marker, message):
    _edit(kernel_copy, old, new)
    with pytest.raises(ConfigError) as raised:
        load_build_toml(kernel_copy)
    first = str(raised.value).splitlines()[0]
    assert first == f"{kernel_copy / 'build.toml'}:{_line_of(kernel_copy, marker)}:1: {message}", first
