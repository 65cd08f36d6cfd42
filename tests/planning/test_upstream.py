"""`matrix --check-upstream` against a package index served on loopback: torch releases
and CUDA builds, `kernels` loader releases, and the build.toml edition of the newest
kernels sdist's kernels-common."""

import functools
import hashlib
import http.server
import io
import socket
import tarfile
import threading

import pytest
from conftest import kernel_matrix
from packaging.requirements import Requirement
from packaging.version import Version

from kernel_matrix.errors import ExitCode, NetworkError
from kernel_matrix.planning import upstream_kernels
from kernel_matrix.planning.matrix import load_matrix
from kernel_matrix.planning.upstream import Finding, find_missing, kernels_findings, loaders_under_test, read_editions

RUNNERS = "archs:\n  x86_64: {build-runner: [a], gpu-test-runner: [b]}\n"


def _page(*wheels: str) -> str:
    links = "".join(f'<a href="../../files/{w}#sha256=00">{w}</a>\n' for w in wheels)
    return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n"


def _sdist(version: str, mod_rs: str | None) -> bytes:
    """A kernels sdist holding kernels-common's config/mod.rs (None: no kernels-common)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        files = {f"kernels-{version}/PKG-INFO": f"Name: kernels\nVersion: {version}\n"}
        if mod_rs is not None:
            files[f"kernels-{version}/{upstream_kernels.EDITIONS_MODULE}"] = mod_rs
        for name, text in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(text.encode())
            archive.addfile(member, io.BytesIO(text.encode()))
    return buffer.getvalue()


def _mod_rs(edition: int) -> str:
    """kernels-common's config/mod.rs as kernels 0.19.1 has it, for `edition`."""
    modules = "".join(f"pub mod v{n};\n" for n in range(1, edition + 1))
    return f"mod compat;\n{modules}\nuse crate::version::Version;\n\npub const CURRENT_EDITION: usize = {edition};\n"


def _serve(root):
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _kernels_project(root, releases: dict[str, bytes | None], extra: str = "") -> None:
    """pypi/kernels/: a wheel of each release, and its sdist where one is given."""
    links = []
    for version, sdist in releases.items():
        wheel = f"kernels-{version}-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
        links.append(f'<a href="../../files/{wheel}#sha256={"0" * 64}">{wheel}</a>')
        if sdist is not None:
            name = f"kernels-{version}.tar.gz"
            (root / "files").mkdir(exist_ok=True)
            (root / "files" / name).write_bytes(sdist)
            digest = hashlib.sha256(sdist).hexdigest()
            links.append(f'<a href="../../files/{name}#sha256={digest}" data-requires-python="&gt;=3.10">{name}</a>')
    (root / "pypi" / "kernels").mkdir(parents=True, exist_ok=True)
    html = "<!DOCTYPE html><html><body>\n" + "\n".join(links) + extra + "\n</body></html>\n"
    (root / "pypi" / "kernels" / "index.html").write_text(html)


def _covered_releases() -> dict[str, bytes | None]:
    """What kernel-matrix covers now: the loader releases its tests run that its own
    requirement allows, the newest with an sdist defining the newest edition it reads."""
    requirement = upstream_kernels.own_requirement()
    versions = sorted((v for v in loaders_under_test() if requirement.specifier.contains(v)), key=Version)
    newest = _sdist(versions[-1], _mod_rs(max(read_editions())))
    return {v: newest if v == versions[-1] else None for v in versions}


@pytest.fixture
def index(tmp_path):
    """A PyPI-like and a PyTorch-like simple index on 127.0.0.1."""
    root = tmp_path / "index"
    pages = {
        "pypi/torch": _page(
            "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torch-2.5.0-cp311-cp311-manylinux1_x86_64.whl",
        ),
        "whl/cu126/torch": _page(
            "torch-2.13.0%2Bcu126-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch-2.14.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl",
        ),
        "whl/cu128/torch": _page("torch-2.14.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl"),
        "whl/cu130/torch": _page(
            "torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch-2.14.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
        ),
    }
    for page, html in pages.items():
        (root / page).mkdir(parents=True)
        (root / page / "index.html").write_text(html)
    _kernels_project(root, _covered_releases())
    server = _serve(root)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def kernels_index(tmp_path):
    """An index of only the kernels project, filled by the test (root, base URL)."""
    root = tmp_path / "kernels-index"
    root.mkdir()
    server = _serve(root)
    yield root, f"http://127.0.0.1:{server.server_address[1]}/pypi"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _matrix_file(tmp_path, base, torch_block):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(f"torch:\n{torch_block}{RUNNERS}upstream:\n  pypi: {base}/pypi\n  pytorch: {base}/whl\n")
    return path


@pytest.mark.processes
def test_reports_new_torch_minors_and_uncovered_cuda_builds(tmp_path, index):
    path = _matrix_file(tmp_path, index, '  "2.13": ["12.6", "13.0"]\n  "2.14": ["13.0"]\n')
    findings = find_missing(load_matrix(path))
    assert findings == [Finding("2.14", "12.6"), Finding("2.14", "12.8"), Finding("2.15", None)]
    result = kernel_matrix("matrix", "--file", str(path), "--check-upstream")
    assert result.returncode == ExitCode.OUTDATED
    assert result.stderr.splitlines() == [
        f"error: {path}: torch 2.14 has a CUDA 12.6 build that the matrix does not build",
        f"error: {path}: torch 2.14 has a CUDA 12.8 build that the matrix does not build",
        f"error: {path}: torch 2.15 is released but not in the matrix",
    ]


def _covering_matrix(tmp_path, index):
    """A matrix of every torch minor and CUDA build the loopback indexes have."""
    releases = (
        'torch-releases:\n  "2.15": {pypi: "13.0", cuda: ["13.0"]}\n'
        '  "2.14": {pypi: "13.0", cuda: ["12.6", "12.8", "13.0"]}\n'
    )
    path = _matrix_file(tmp_path, index, '  "2.13": ["12.6", "13.0"]\n  "2.14": all\n  "2.15": all\n')
    path.write_text(path.read_text() + releases)
    return path


@pytest.mark.processes
def test_a_covering_matrix_passes(tmp_path, index):
    path = _covering_matrix(tmp_path, index)
    assert find_missing(load_matrix(path)) == []
    result = kernel_matrix("matrix", "--file", str(path), "--check-upstream")
    assert result.returncode == 0, result.stderr
    assert "covers every torch release" in result.stderr
    newest = max(_covered_releases(), key=Version)
    assert f"kernel-matrix covers kernels {newest} (build.toml edition {max(read_editions())})" in result.stderr


@pytest.mark.processes
def test_an_unreachable_index_is_its_own_exit_code(tmp_path):
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = _matrix_file(tmp_path, f"http://127.0.0.1:{port}", '  "2.14": ["13.0"]\n')
    result = kernel_matrix("matrix", "--file", str(path), "--check-upstream")
    assert result.returncode == ExitCode.NETWORK
    assert result.stderr.count("\n") == 1 and "cannot reach the package index" in result.stderr


REQUIREMENT = Requirement("kernels>=0.17,<0.20")
TESTED = ("0.17.2", "0.18.3", "0.19.1")


def test_loader_releases_the_requirement_leaves_out_or_the_tests_do_not_run(kernels_index):
    root, pypi = kernels_index
    releases = {v: None for v in ("0.16.2", "0.17.2", "0.18.3", "0.19.1", "0.19.2", "0.20.0", "0.21.0rc1")}
    releases["0.20.0"] = _sdist("0.20.0", _mod_rs(6))
    # A yanked release is one pip no longer picks: no news.
    _kernels_project(
        root, releases, extra='\n<a href="../../files/k.whl" data-yanked="">kernels-0.22.0-py3-none-any.whl</a>'
    )
    findings, compared = kernels_findings(pypi, REQUIREMENT, TESTED, editions=(4, 5, 6))
    assert [str(f) for f in findings] == [
        "kernels 0.20.0 is released, and kernel-matrix's requirement kernels<0.20,>=0.17 leaves it out: "
        "test it, then widen the requirement",
        "kernels 0.19.2 is released, and the loader tests run 0.17.2, 0.18.3, 0.19.1",
    ]
    assert compared == "kernels 0.20.0 (build.toml edition 6)"
    # Covered: no finding (0.16.2 is older than the requirement allows: history, not news).
    _kernels_project(root, {"0.16.2": None, "0.17.2": None, "0.19.1": _sdist("0.19.1", _mod_rs(6))})
    assert kernels_findings(pypi, REQUIREMENT, ("0.17.2", "0.19.1"), editions=(4, 5, 6))[0] == []


def test_a_newer_build_toml_edition_in_the_newest_sdist_is_one_line(kernels_index):
    root, pypi = kernels_index
    _kernels_project(root, {"0.19.1": _sdist("0.19.1", _mod_rs(6)), "0.19.2": _sdist("0.19.2", _mod_rs(7))})
    findings, _ = kernels_findings(pypi, REQUIREMENT, (), editions=(4, 5, 6))
    assert [str(f) for f in findings] == [
        "kernels 0.19.2's kernels-common defines build.toml edition 7, and kernel-matrix reads editions 4, 5, 6"
    ]
    # The editions kernel-matrix's reader accepts: its newest is no news.
    _kernels_project(root, {"0.19.1": _sdist("0.19.1", _mod_rs(max(read_editions())))})
    assert kernels_findings(pypi, REQUIREMENT, (), editions=read_editions())[0] == []


def test_the_edition_is_kernels_commons_current_one_else_its_newest_module():
    assert upstream_kernels.newest_edition(_sdist("0.19.1", _mod_rs(6))) == 6
    assert upstream_kernels.newest_edition(_sdist("0.18.3", "pub mod v3;\npub mod v4;\n  pub mod v5;\n")) == 5
    assert upstream_kernels.newest_edition(_sdist("0.10.0", None)) is None  # no kernels-common yet
    with pytest.raises(ValueError, match="not a readable .tar.gz"):
        upstream_kernels.newest_edition(b"not an archive")


def test_an_sdist_whose_bytes_are_not_the_indexs_is_refused(kernels_index):
    root, pypi = kernels_index
    _kernels_project(root, {"0.19.1": _sdist("0.19.1", _mod_rs(6))})
    (root / "files" / "kernels-0.19.1.tar.gz").write_bytes(_sdist("0.19.1", _mod_rs(9)))
    with pytest.raises(NetworkError, match="its sha256 is not the one the index gives"):
        kernels_findings(pypi, REQUIREMENT, (), editions=(4, 5, 6))


@pytest.mark.processes
def test_the_cli_says_what_changed_for_the_loader_one_line_each(tmp_path, index):
    root = tmp_path / "index"
    covered = _covered_releases()
    newest = max(covered, key=Version)
    after = Version(newest)
    next_minor = f"{after.major}.{after.minor + 1}.0"
    _kernels_project(root, {**covered, next_minor: _sdist(next_minor, _mod_rs(max(read_editions()) + 1))})
    path = _covering_matrix(tmp_path, index)
    result = kernel_matrix("matrix", "--file", str(path), "--check-upstream")
    assert result.returncode == ExitCode.OUTDATED, result.stderr
    requirement = upstream_kernels.own_requirement()
    assert not requirement.specifier.contains(next_minor)  # the requirement stops at what is tested
    editions = ", ".join(map(str, sorted(read_editions())))
    assert result.stderr.splitlines() == [
        f"error: {path}: kernels {next_minor} is released, and kernel-matrix's requirement {requirement} "
        "leaves it out: test it, then widen the requirement",
        f"error: {path}: kernels {next_minor}'s kernels-common defines build.toml edition "
        f"{max(read_editions()) + 1}, and kernel-matrix reads editions {editions}",
    ]


def test_the_editions_compared_are_the_ones_the_build_toml_reader_accepts(tmp_path):
    """read_editions() is the reader's list: a file of each listed edition from 5 on is not
    refused for its edition, and one of the next edition is, at general.edition."""
    import shutil

    from conftest import KERNEL_DIR

    from kernel_matrix.config.buildtoml import load_build_toml
    from kernel_matrix.errors import ConfigError

    def refusal(edition: int) -> str:
        kernel = tmp_path / f"edition{edition}"
        shutil.copytree(KERNEL_DIR, kernel, ignore=shutil.ignore_patterns("__pycache__"))
        toml = kernel / "build.toml"
        toml.write_text(toml.read_text().replace("edition = 5\n", f"edition = {edition}\n"))
        try:
            load_build_toml(kernel)
        except ConfigError as exc:
            return "\n".join(line for line in str(exc).splitlines() if "general.edition" in line)
        return ""

    editions = read_editions()
    assert min(editions) == 4 and sorted(editions) == list(range(4, max(editions) + 1))
    assert all(refusal(edition) == "" for edition in editions if edition >= 5)
    assert f"general.edition = {max(editions) + 1} is not supported" in refusal(max(editions) + 1)


def test_the_requirement_is_the_checkouts_pyproject_else_the_installed_distributions(tmp_path):
    from importlib import metadata

    dependencies = ["rich>=13", "kernels>=0.17,<0.99", "kernels==0.1; os_name == 'nt'"]
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "kernel-matrix"\ndependencies = {dependencies!r}\n')
    assert str(upstream_kernels.own_requirement(tmp_path)) == "kernels<0.99,>=0.17"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "another"\ndependencies = ["kernels==0.1"]\n')
    installed = next(r for r in map(Requirement, metadata.requires("kernel-matrix")) if r.name == "kernels")
    assert upstream_kernels.own_requirement(tmp_path) == installed


def test_the_loader_releases_compared_are_the_ones_the_loader_tests_run():
    """One list: data/loaders.yaml, which tests/checking/test_loader_versions.py's environments install."""
    loader_tests = pytest.importorskip("test_loader_versions")
    assert loaders_under_test() == tuple(loader_tests.LOADERS)
