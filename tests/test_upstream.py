"""`matrix --check-upstream` against a package index served on loopback."""

import functools
import http.server
import socket
import threading

import pytest
from conftest import kernel_matrix

from kernel_matrix.errors import ExitCode
from kernel_matrix.planning.matrix import load_matrix
from kernel_matrix.planning.upstream import Finding, find_missing

RUNNERS = "archs:\n  x86_64: {build-runner: [a], gpu-test-runner: [b]}\n"


def _page(*wheels: str) -> str:
    links = "".join(f'<a href="../../files/{w}#sha256=00">{w}</a>\n' for w in wheels)
    return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n"


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
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _matrix_file(tmp_path, base, torch_block):
    path = tmp_path / "build_matrix.yaml"
    path.write_text(f"torch:\n{torch_block}{RUNNERS}upstream:\n  pypi: {base}/pypi\n  pytorch: {base}/whl\n")
    return path


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


def test_a_covering_matrix_passes(tmp_path, index):
    releases = (
        'torch-releases:\n  "2.15": {pypi: "13.0", cuda: ["13.0"]}\n'
        '  "2.14": {pypi: "13.0", cuda: ["12.6", "12.8", "13.0"]}\n'
    )
    path = _matrix_file(tmp_path, index, '  "2.13": ["12.6", "13.0"]\n  "2.14": all\n  "2.15": all\n')
    path.write_text(path.read_text() + releases)
    assert find_missing(load_matrix(path)) == []
    result = kernel_matrix("matrix", "--file", str(path), "--check-upstream")
    assert result.returncode == 0, result.stderr
    assert "covers every torch release" in result.stderr


def test_an_unreachable_index_is_its_own_exit_code(tmp_path):
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = _matrix_file(tmp_path, f"http://127.0.0.1:{port}", '  "2.14": ["13.0"]\n')
    result = kernel_matrix("matrix", "--file", str(path), "--check-upstream")
    assert result.returncode == ExitCode.NETWORK
    assert result.stderr.count("\n") == 1 and "cannot reach the package index" in result.stderr
