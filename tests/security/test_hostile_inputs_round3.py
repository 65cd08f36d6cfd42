"""Attacks from issue 23 items 4, 6 and 7 that need no container engine: values
injected into generated files, oversized or deeply nested inputs, path errors,
a hostile Hub repository for `verify`, and `clean` pointed where it must not
reach. Each is refused with one line and a distinct exit code, or neutralised,
and nothing is written outside the build directory."""

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, kernel_matrix, matrix_text
from hubserver import INITIAL_FILES, HubServer
from huggingface_hub import HfApi
from huggingface_hub.repocard import REGEX_YAML_BLOCK

from kernel_matrix.config.buildtoml import load_build_toml
from kernel_matrix.planning.matrix import load_matrix, select
from kernel_matrix.releasing.kernel_card import kernel_card
from kernel_matrix.releasing.wheels import wheel_spec, write_project

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

# A license that, interpolated into TOML text, closes its string and inline table
# and adds a setuptools command class: code the wheel build would run.
TOML_INJECTION = 'MIT"}\n[tool.setuptools.cmdclass]\nbuild_py = "pwn.Build"\n[x]\ny = {z = "'
# The same against the card's YAML front matter: a key of its own, and an end of it.
YAML_INJECTION = "mit\nlicense_link: https://evil.example\n---\n# pwned"


def set_toml(kernel, old, new):
    path = kernel / "build.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def hostile_license(kernel, license):
    set_toml(kernel, 'license = "Apache-2.0"', f"license = {json.dumps(license)}")
    config = load_build_toml(kernel)
    assert config.general.license == license  # build.toml takes it: it is data
    return config


@pytest.mark.parametrize("license", [TOML_INJECTION, YAML_INJECTION])
def test_a_license_is_data_in_the_wheels_pyproject(kernel_copy, tmp_path, license):
    config = hostile_license(kernel_copy, license)
    variant = tmp_path / "variant"
    variant.mkdir()
    (variant / "metadata.json").write_text("{}")
    cell = min(select(load_matrix(REPO / "build_matrix.yaml"), only="backend=cpu"), key=lambda c: c.name)
    spec = wheel_spec(
        cell, name=config.general.name, package=config.general.python_name, kernel_version=1, license=license
    )
    project = tmp_path / "project"
    write_project(variant, project, spec, cell.name)
    parsed = tomllib.loads((project / "pyproject.toml").read_text())
    assert parsed["project"]["license"] == {"text": license}
    assert set(parsed) == {"build-system", "project", "tool"}
    assert set(parsed["tool"]["setuptools"]) == {"packages", "include-package-data", "package-data"}


@pytest.mark.parametrize("license", [TOML_INJECTION, YAML_INJECTION])
def test_a_license_is_data_in_the_hub_cards_front_matter(kernel_copy, license):
    config = hostile_license(kernel_copy, license)
    repo_id = 'org/x", version=0); import os; os.system("id"); ("'
    card = kernel_card(config, repo_id, {})
    # As the Hub reads it: the first ---...--- block, as YAML.
    match = REGEX_YAML_BLOCK.search(card)
    assert match is not None
    assert yaml.safe_load(match.group(2)) == {"library_name": "kernels", "license": license.lower(), "tags": ["kernel"]}
    # The repo id is one Python string literal in the usage snippet.
    (snippet,) = [line for line in card.splitlines() if line.startswith(f"{config.general.python_name} = ")]
    assert snippet == f"{config.general.python_name} = get_kernel({json.dumps(repo_id)}, version=1)"


# --- sizes and depths, before parsing (item 6) ---------------------------------------------------------------------


def one_error(result, code):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[:2000]
    assert "Traceback" not in result.stderr
    return lines[0]


def timed(*args, **kwargs):
    start = time.monotonic()
    result = kernel_matrix(*args, **kwargs)
    return result, time.monotonic() - start


@pytest.mark.processes
def test_a_matrix_file_over_the_size_limit_is_not_parsed(tmp_path):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(matrix_text() + "".join(f"k{i}: 1\n" for i in range(300_000)))  # 3 MB
    result, seconds = timed("matrix", "--file", str(path))
    line = one_error(result, 2)
    assert line.startswith(f"error: {path}: the matrix file is ") and "more than the limit of 1048576" in line
    assert seconds < 20  # the interpreter's start; parsing it took minutes


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # 1 MB, under the size limit; composing stops at the limit, never reaching the
        # unclosed list at the end (composed whole first, it was "invalid YAML", in seconds)
        ("".join(f"k{i}: 1\n" for i in range(100_000)) + "tail: [\n", "more than 20000 values"),
        ("deep: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply (more than 64 levels)"),
    ],
    ids=["many-keys", "deep"],
)
@pytest.mark.processes
def test_a_matrix_file_is_refused_while_composed(tmp_path, body, expected):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(body)
    result, seconds = timed("matrix", "--file", str(path))
    line = one_error(result, 2)
    assert line.startswith(f"error: {path}:") and expected in line
    assert seconds < 20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("deep = " + "[" * 5000 + "]" * 5000 + "\n", ":1: arrays or tables nested over 32 levels deep"),
        ("deep = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", ":1: arrays or tables nested over 32 levels deep"),
        ("# " + "x" * (1024 * 1024) + "\n", "bytes, more than the limit of 1048576; refusing to read it"),
        ("\udcff", ": build.toml is not UTF-8 text"),
    ],
    ids=["arrays", "inline-tables", "size", "not-utf8"],
)
@pytest.mark.processes
def test_a_build_toml_is_refused_before_parsing(kernel_copy, tmp_path, text, expected):
    path = kernel_copy / "build.toml"
    path.write_bytes(text.encode("utf-8", "surrogateescape") + path.read_bytes())
    build = tmp_path / "build"
    line = one_error(
        kernel_matrix("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build)), 2
    )
    assert line.startswith(f"error: {path}") and expected in line
    assert not build.exists()


# --- path errors are one line (item 6) -----------------------------------------------------------------------------


@pytest.mark.processes
def test_a_kernel_name_longer_than_the_system_allows(tmp_path):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(matrix_text().replace("kernel: kernel", "kernel: " + "k" * 5000))
    for command in ("matrix", "build", "publish"):
        line = one_error(kernel_matrix(command, "--file", str(path), cwd=tmp_path), 2)
        assert line.startswith(f"error: {path}:") and line.endswith(": cannot be read (File name too long)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build_matrix.yaml"]


@pytest.mark.processes
def test_a_build_dir_that_takes_no_folders(kernel_copy):
    line = one_error(
        kernel_matrix("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", "/proc/self"), 2
    )
    assert line == "error: --build-dir /proc/self: cannot be written (No such file or directory)"


@pytest.mark.processes
def test_an_empty_build_dir_is_refused(kernel_copy, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for command in (("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy)), ("clean",), ("test",)):
        line = one_error(kernel_matrix(*command, "--build-dir", "", cwd=work), 2)
        assert line.endswith("Invalid value for --build-dir: an empty path; give a folder such as build")
    assert list(work.iterdir()) == []


# --- build.toml values (item 7) ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "false", "1.0"])
@pytest.mark.processes
def test_a_kernel_version_is_an_integer_not_a_boolean(kernel_copy, tmp_path, value):
    set_toml(kernel_copy, "version = 1", f"version = {value}")
    build = tmp_path / "build"
    line = one_error(
        kernel_matrix("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build)), 2
    )
    # As the file writes it (`true`), not as Python shows the parsed value (True).
    assert "build.toml:" in line and f"'general.version' = {value}:" in line
    assert not build.exists()


# --- clean (item 7) ------------------------------------------------------------------------------------------------


def git_project(tmp_path):
    """A git checkout holding the matrix, with a commit (so .git/logs exists)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "build_matrix.yaml").write_text(matrix_text(project))
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "build_matrix.yaml"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    assert (project / ".git" / "logs" / "HEAD").is_file()
    return project


def every_file(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("build_dir", [".git", ".git/logs", ".git/refs", "sub", "sub/build", ".venv2", ".venv2/lib"])
@pytest.mark.processes
def test_clean_refuses_a_build_dir_that_is_not_a_build_folder(tmp_path, build_dir):
    project = git_project(tmp_path)
    subprocess.run(["git", "init", "-q", str(project / "sub")], check=True)  # a nested repository
    (project / ".venv2" / "lib" / "logs").mkdir(parents=True)
    (project / ".venv2" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    before = every_file(project)
    for dry in ((), ("--dry-run",)):
        line = one_error(kernel_matrix("clean", "--build-dir", build_dir, *dry, cwd=project), 2)
        assert line.startswith(f"error: --build-dir {build_dir}: ") and line.endswith(
            ", not a build folder (nothing removed)"
        )
    assert every_file(project) == before


@pytest.mark.processes
def test_clean_leaves_nested_environments_and_repositories_alone(tmp_path):
    project = git_project(tmp_path)
    files = [
        "env/pyvenv.cfg",
        "env/lib/python3.11/site-packages/pkg.egg-info/PKG-INFO",
        "env/lib/python3.11/site-packages/pkg/__pycache__/m.cpython-311.pyc",
        "tools/env/pyvenv.cfg",
        "tools/env/lib/x/__pycache__/y.pyc",
        "vendor/sub/.git/HEAD",
        "vendor/sub/pkg/__pycache__/m.pyc",
        "vendor/sub/a.egg-info/PKG-INFO",
        "src/__pycache__/ours.pyc",
    ]
    for name in files:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x")
    result = kernel_matrix("clean", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["removed src/__pycache__"]
    assert all((project / name).exists() for name in files[:-1])
    assert not (project / "src" / "__pycache__").exists()


# --- verify against a hostile Hub release (item 6) -----------------------------------------------------------------

ORG = "hostile-org"
CUDA_VARIANT = "torch214-cxx11-cu130-x86_64-linux"
_releases = itertools.count()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubServer(trusted_orgs=[ORG]) as server:
        env = {
            **os.environ,
            "HF_ENDPOINT": server.url,
            "HF_TOKEN": "hf_" + "0" * 32,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_CACHE": str(tmp_path_factory.mktemp("hf-cache")),
        }
        env.pop("HF_HUB_DISABLE_TELEMETRY", None)
        yield server, env


def hostile_release(server, files):
    """A kernel repo whose branch v1 holds files: written into the server's state, as
    a hostile Hub serves what huggingface_hub would refuse to upload."""
    repo_id = f"{ORG}/release-{next(_releases)}"
    HfApi(endpoint=server.url, token="hf_" + "0" * 32).create_repo(repo_id, repo_type="kernel")
    with server._lock:
        server._repos[("kernel", repo_id)].commit("v1", {**INITIAL_FILES, **files}, "Release v1")
    return repo_id


def metadata(**backend):
    return {
        "name": "img2gray",
        "version": 1,
        "license": "Apache-2.0",
        "backend": {"type": "cuda", "archs": ["9.0"], **backend},
        "provenance": {"toolchain": {"source-date-epoch": "315532800"}},
    }


def verify(env, repo_id, cwd):
    """verify's one error line (its log says what it downloads)."""
    result = kernel_matrix(
        "verify", "--repo-id", repo_id, "--revision", "v1", "--kernel-dir", str(REPO / "kernel"), env=env, cwd=cwd
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    return line


@pytest.mark.processes
def test_verify_refuses_a_release_file_named_out_of_the_repo(hub, tmp_path):
    server, env = hub
    work = tmp_path / "deep" / "work"
    work.mkdir(parents=True)
    repo_id = hostile_release(
        server,
        {
            f"build/{CUDA_VARIANT}/metadata.json": json.dumps(metadata()).encode(),
            "build/../../x": b"escaped",
            "build/../../../../../../../../../../../../tmp/kernel-matrix-escaped": b"escaped",
        },
    )
    line = verify(env, repo_id, work)
    assert line.startswith(f'error: {repo_id}@v1: the release holds a file named "build/../../')
    assert line.endswith("refusing to download it (nothing verified)")
    assert list(work.iterdir()) == [] and not (tmp_path / "x").exists() and not (tmp_path / "deep" / "x").exists()
    assert not Path("/tmp/kernel-matrix-escaped").exists()


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"archs": "9.0"}, 'backend.archs = "9.0": expected a list of strings'),
        ({"archs": ["90,code=sm_90 -Xcompiler=-fplugin=/tmp/x.so"]}, 'backend.archs = "90,code=sm_90 -Xcompiler'),
        ({"archs": ["9.0\n"]}, 'backend.archs.0 = "9.0\\n": expected no control characters'),
        ({"type": "../../cuda"}, 'backend.type = "../../cuda": expected one of'),
        ({"provenance": "x"}, 'provenance = "x": expected a mapping'),
        ({"source-date-epoch": "1\u0000"}, 'provenance.toolchain.source-date-epoch = "1\\u0000"'),
        ({"source-date-epoch": "1; rm -rf /"}, 'provenance.toolchain.source-date-epoch = "1; rm -rf /"'),
        ({"deep": 100}, "at most 16 levels of nesting"),
    ],
    ids=["archs-string", "archs-flags", "archs-newline", "backend", "provenance", "epoch-nul", "epoch-text", "deep"],
)
@pytest.mark.processes
def test_verify_refuses_hostile_metadata_from_the_hub(hub, tmp_path, changes, key):
    server, env = hub
    data = metadata()
    for name, value in changes.items():
        if name == "source-date-epoch":
            data["provenance"]["toolchain"][name] = value
        elif name == "provenance":
            data["provenance"] = value
        elif name == "deep":
            data["extra"] = json.loads("[" * value + "]" * value)
        else:
            data["backend"][name] = value
    repo_id = hostile_release(server, {f"build/{CUDA_VARIANT}/metadata.json": json.dumps(data).encode()})
    line = verify(env, repo_id, tmp_path)
    assert line.startswith(f"error: {repo_id}@v1: build/{CUDA_VARIANT}/metadata.json: ") and key in line
    assert line.endswith("not a variant kernel-matrix built")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.processes
def test_a_variant_id_is_never_source_text_of_the_generated_alias(kernel_copy, tmp_path):
    """`kernel-matrix test` writes an alias module naming the variant's id: an id
    that closes its string literal (or its comment line) would add code to it."""
    marker = tmp_path / "injected"
    variant = tmp_path / "torch214-cxx11-cpu-x86_64-linux"
    variant.mkdir()
    (variant / "__init__.py").write_text("")
    injected = f'x"\nopen({str(marker)!r}, "w").close()\n_ = "'
    (variant / "metadata.json").write_text(json.dumps({**metadata(), "id": injected, "backend": {"type": "cpu"}}))
    line = one_error(kernel_matrix("test", str(variant), "--kernel-dir", str(kernel_copy)), 2)
    assert line.startswith(f"error: {variant / 'metadata.json'}: id ") and "is not a Python module name" in line
    assert not marker.exists()
