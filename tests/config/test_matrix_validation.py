"""Every malformed build_matrix.yaml: one line per problem naming file:LINE:COL,
exit code 2, no traceback, nothing built."""

import shutil

import pytest
from conftest import REPO, kernel_matrix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_matrix.errors import ConfigError
from kernel_matrix.planning.matrix import load_matrix

RUNNERS = "archs:\n  x86_64: {build-runner: [ubuntu-24.04], gpu-test-runner: [gpu]}\n"
GOOD = 'torch:\n  "2.14": all\n' + RUNNERS

# (name, file text, expected line, expected message fragment)
BAD_FILES = [
    ("empty file", "", 1, "the file is empty"),
    ("only a comment", "# nothing\n", 1, "the file is empty"),
    ("a list", "- torch\n", 1, "must be a mapping"),
    ("a scalar", "hello\n", 1, "must be a mapping"),
    ("malformed yaml", 'torch: {"2.14": all\n' + RUNNERS, 2, "invalid YAML"),
    ("tab indentation", 'torch:\n\t"2.14": all\n' + RUNNERS, 2, "invalid YAML"),
    ("unknown top-level key", GOOD + "archz: {}\n", 5, "unknown key 'archz'; did you mean archs?"),
    (
        "unknown nested key",
        'torch:\n  "2.14": all\narchs:\n  x86_64: {build-runner: [a], gpu-runner: [b]}\n',
        4,
        "unknown key 'gpu-runner'; did you mean gpu-test-runner?",
    ),
    ("duplicate top-level key", GOOD + 'torch:\n  "2.13": all\n', 5, "duplicate key 'torch' (first defined on line 1)"),
    ("duplicate torch key", 'torch:\n  "2.14": all\n  "2.14": ["13.0"]\n' + RUNNERS, 3, "duplicate key '2.14'"),
    (
        "torch without that CUDA build",
        'torch:\n  "2.14": ["13.0", "12.8"]\n' + RUNNERS,
        2,
        "torch 2.14 has no CUDA 12.8 build (it ships 12.6, 13.0, 13.2); did you mean 12.6?",
    ),
    ("unknown torch release", 'torch:\n  "2.41": all\n' + RUNNERS, 2, "torch 2.41 is not in the release table"),
    ("duplicate cell in a list", 'torch:\n  "2.14": ["13.0", "13.0"]\n' + RUNNERS, 2, "duplicate cell: torch 2.14"),
    ("wrong type for cpu", GOOD + "cpu: maybe\n", 5, "cpu = 'maybe'"),
    ("wrong type for torch", "torch: [2.14]\n" + RUNNERS, 1, "torch = "),
    ("cuda list is a number", 'torch:\n  "2.14": 13\n' + RUNNERS, 2, 'expected "all" or a list of CUDA versions'),
    ("version not major.minor", 'torch:\n  "2.14": ["13"]\n' + RUNNERS, 2, "CUDA version '13' is not major.minor"),
    ("bad torch key", 'torch:\n  "two": all\n' + RUNNERS, 2, "should match pattern"),
    ("missing torch", RUNNERS, 1, "missing required key 'torch'"),
    ("missing archs", 'torch:\n  "2.14": all\n', 1, "missing required key 'archs'"),
    (
        "unknown arch",
        'torch:\n  "2.14": all\narchs:\n  riscv64: {build-runner: [a], gpu-test-runner: [b]}\n',
        4,
        "archs.riscv64",
    ),
    (
        "empty runner labels",
        'torch:\n  "2.14": all\narchs:\n  x86_64: {build-runner: [], gpu-test-runner: [b]}\n',
        4,
        "archs.x86_64.build-runner = []: no runner label",
    ),
    (
        "one runner label, not a list",
        'torch:\n  "2.14": all\narchs:\n  x86_64:\n    build-runner: ubuntu-24.04\n    gpu-test-runner: [b]\n',
        5,
        "archs.x86_64.build-runner = 'ubuntu-24.04': expected a list of runner labels, such as [ubuntu-24.04]",
    ),
    (
        "an empty runner label",
        'torch:\n  "2.14": all\narchs:\n  x86_64:\n    build-runner: [a]\n'
        '    gpu-test-runner:\n      - gpu\n      - ""\n',
        8,
        "archs.x86_64.gpu-test-runner.1 = '': String should have at least 1 character",
    ),
    (
        "a GitHub-hosted GPU test runner",
        'torch:\n  "2.14": all\narchs:\n  aarch64:\n    build-runner: [ubuntu-24.04-arm]\n'
        "    gpu-test-runner: [ubuntu-24.04-arm]\n",
        6,
        "archs.aarch64.gpu-test-runner.0 = 'ubuntu-24.04-arm': a GitHub-hosted runner label, and GitHub's hosted "
        "runners have no GPU",
    ),
    (
        "a GitHub-hosted label among a GPU runner's",
        'torch:\n  "2.14": all\narchs:\n  x86_64:\n    build-runner: [a]\n    gpu-test-runner:\n'
        "      - self-hosted\n      - ubuntu-latest\n",
        8,
        "archs.x86_64.gpu-test-runner.1 = 'ubuntu-latest': a GitHub-hosted runner label",
    ),
    ("unknown image kind", GOOD + "image: docker\n", 5, "image = 'docker'"),
    (
        "include of an impossible cell",
        GOOD + 'include:\n  - {torch: "2.14", cuda: "12.8", arch: x86_64}\n',
        6,
        "impossible cell: torch 2.14 has no CUDA 12.8 build",
    ),
    (
        "include of an arch without runners",
        GOOD + 'include:\n  - {torch: "2.14", cuda: "13.0", arch: aarch64}\n',
        6,
        "impossible cell: arch aarch64 has no runners",
    ),
    (
        "include of a cell already there",
        GOOD + 'include:\n  - {torch: "2.14", cuda: "13.0", arch: x86_64}\n',
        6,
        "duplicate cell: torch214-cxx11-cu130-x86_64-linux is already in the matrix",
    ),
    ("exclude matching nothing", GOOD + 'exclude:\n  - {torch: "2.11"}\n', 6, "this exclude matches no cell"),
    ("exclude everything", GOOD + "exclude:\n  - {arch: x86_64}\n", 1, "the matrix has no cells"),
    (
        "capability the CUDA version cannot compile",
        GOOD + 'cuda-capabilities:\n  - min-cuda: "12.0"\n    capabilities: ["7.0", "9.0"]\n',
        7,
        "CUDA 13.0 cannot compile capability 7.0",
    ),
    (
        "a capability table with no row for a CUDA version the matrix builds",
        GOOD + 'cuda-capabilities:\n  - min-cuda: "13.0"\n    capabilities: ["9.0"]\n',
        5,
        "no row covers CUDA 12.6, which the matrix builds (the lowest min-cuda is 13.0)",
    ),
    (
        "torch-index pypi for a non-PyPI build",
        GOOD + "torch-index: pypi\n",
        5,
        "torch-index is pypi, but PyPI's torch 2.14 is CUDA 13.0",
    ),
    (
        "alias bomb",
        'a: &a ["x","x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n" + GOOD,
        None,
        "alias bomb",
    ),
    ("recursive alias", GOOD + "loop: &a [*a]\n", 5, "an alias refers to a value that contains it"),
    ("deep nesting", GOOD + "deep: " + "[" * 5000 + "]" * 5000 + "\n", 5, "nested too deeply"),
    ("python object tag", GOOD + "kernel: !!python/object/apply:os.system [ls]\n", 5, "unsupported tag"),
    ("merge key", GOOD + "upstream:\n  <<: {pypi: x}\n", 6, "merge keys (<<) are not supported"),
    ("non-string key", GOOD + "? [a, b]\n: 1\n", 5, "keys must be plain values"),
]


@pytest.mark.parametrize("case", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_matrix_files(tmp_path, case):
    _, text, line, message = case
    path = tmp_path / "build_matrix.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_matrix(path)
    lines = str(raised.value).splitlines()
    matching = [ln for ln in lines if message in ln]
    assert matching, f"no line says {message!r}: {lines}"
    assert all(ln.startswith(f"{path}:") for ln in lines)
    if line is not None:
        assert matching[0].startswith(f"{path}:{line}:"), matching[0]


def test_every_problem_gets_its_own_line(tmp_path):
    path = tmp_path / "build_matrix.yaml"
    path.write_text('torch:\n  "2.14": ["12.8"]\n  "2.13": ["13.1"]\n' + RUNNERS)
    with pytest.raises(ConfigError) as raised:
        load_matrix(path)
    lines = str(raised.value).splitlines()
    assert len(lines) == 2 and ":2:" in lines[0] and ":3:" in lines[1]


@pytest.mark.processes
def test_the_cli_exits_2_with_one_line_per_problem_and_no_traceback(tmp_path):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(GOOD + "cpu: maybe\nimage: docker\n")
    result = kernel_matrix("matrix", "--file", str(path))
    assert result.returncode == 2
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and all(ln.startswith(f"error: {path}:") for ln in lines)


@pytest.mark.processes
def test_a_missing_file_is_one_line(tmp_path):
    result = kernel_matrix("matrix", "--file", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "cannot read the matrix file" in result.stderr


def test_unquoted_versions_keep_their_text(tmp_path):
    # YAML would read 2.10 as 2.1; the matrix keeps what was written.
    path = tmp_path / "build_matrix.yaml"
    path.write_text("torch:\n  2.10: [12.8, 13.0]\n" + RUNNERS)
    assert {c.variant.torch for c in load_matrix(path).cells} == {"2.10"}


@pytest.mark.processes
def test_cells_the_loader_would_not_load_are_warnings_not_errors(tmp_path):
    path = tmp_path / "build_matrix.yaml"
    path.write_text('torch:\n  "10.1": all\n' + RUNNERS + 'torch-releases:\n  "10.1": {pypi: "13.0", cuda: ["13.0"]}\n')
    matrix = load_matrix(path)
    assert [c.name for c in matrix.cells] == ["torch101-cxx11-cpu-x86_64-linux", "torch101-cxx11-cu130-x86_64-linux"]
    assert len(matrix.warnings) == 2
    assert matrix.warnings[0].startswith(f"{path}:2:3: warning: the installed kernels loader would not load")
    shutil.copytree(REPO / "kernel", tmp_path / "kernel", ignore=shutil.ignore_patterns("build", "__pycache__"))
    with path.open("a") as f:
        f.write("kernel: kernel\n")  # a folder inside the matrix file's (one outside it is refused)
    result = kernel_matrix("matrix", "--file", str(path), "--json")
    assert result.returncode == 0 and "warning:" in result.stderr, result.stderr


# Random and mutated files never produce anything but a ConfigError.
DEFAULT_TEXT = (REPO / "build_matrix.yaml").read_text()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list(" \n\t:-[]{}\"'&*!#|>,.0123456789abcxyz_")), max_size=200))
def test_random_text_never_crashes(tmp_path, text):
    _load_or_config_error(tmp_path, text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_default_file_never_crashes(tmp_path, data):
    text = DEFAULT_TEXT
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        span = data.draw(st.integers(0, 12))
        insert = data.draw(
            st.sampled_from(
                [
                    "",
                    " ",
                    "\n",
                    ":",
                    "-",
                    "[",
                    "]",
                    "{",
                    '"',
                    "2.1",
                    "13.0",
                    "all",
                    "x86_64",
                    "&a",
                    "*a",
                    "!!str",
                    "\t",
                    "  ",
                    "torch:",
                    "cuda",
                ]
            )
        )
        text = text[:at] + insert + text[at + span :]
    _load_or_config_error(tmp_path, text)


def _load_or_config_error(tmp_path, text):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(text)
    try:
        load_matrix(path)
    except ConfigError as exc:
        assert all(line.startswith(f"{path}:") for line in str(exc).splitlines()), str(exc)


def test_one_did_you_mean_for_both_files():
    from kernel_matrix.config.didyoumean import did_you_mean

    assert did_you_mean("archz", ["archs", "torch"]) == "; did you mean archs?"
    assert did_you_mean("licence", ["license"], quote="'") == "; did you mean 'license'?"
    # One cutoff (difflib's 0.6): two short names sharing two letters are not offered.
    assert did_you_mean("cpu", ["cuda"]) == ""
