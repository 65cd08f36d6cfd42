"""`depends` beyond torch, supplied: every name kernel-builder knows has a pin
(data/dependencies.yaml); a pin is fetched once (PyPI's wheel through pip, or
the upstream archive), checked against its tree digest, laid out as
kernel-builder installs CUTLASS, and refused in one line when it cannot be had."""

import http.server
import io
import json
import os
import re
import shutil
import socket
import tarfile
import threading
import typing
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import COMMUNITY, kernel_matrix

from kernel_matrix.building import dependencies
from kernel_matrix.config.buildtoml import Dependency
from kernel_matrix.errors import ExitCode, ToolchainError


def test_every_name_kernel_builder_knows_has_a_pin():
    pins = dependencies.pins()
    assert set(pins) == set(typing.get_args(Dependency)) - {"torch"}
    for name, pin in pins.items():
        if pin.supplied is not None:  # another backend's (sycl_tla, metal-cpp): named, never fetched
            assert pin.backend not in ("cpu", "cuda")
            continue
        major, minor = name.removeprefix("cutlass_").split("_")
        assert pin.version.startswith(f"{major}.{minor}.") and pin.repository == "NVIDIA/cutlass"
        assert re.fullmatch(r"[0-9a-f]{40}", pin.commit or "") and re.fullmatch(r"[0-9a-f]{64}", pin.digest or "")
        assert pin.archive == f"https://github.com/NVIDIA/cutlass/archive/{pin.commit}.tar.gz"
        assert pin.headers == ("include", "tools/util/include")
        if pin.wheel is not None:  # PyPI's nvidia-cutlass <version>.0 carries exactly the tag's headers
            assert pin.wheel.requirement == f"nvidia-cutlass=={pin.version}.0"
    assert {name for name, pin in pins.items() if pin.wheel} == {"cutlass_3_5", "cutlass_3_6", "cutlass_3_8"}


@pytest.fixture(scope="module")
def cutlass_3_8(tmp_path_factory) -> Path:
    """The cutlass_3_8 pin, fetched for real: nvidia-cutlass 3.8.0.0 through pip (the host's pip configuration)."""
    return dependencies.fetch(dependencies.pins()["cutlass_3_8"], tmp_path_factory.mktemp("cache"))


@pytest.mark.processes
def test_a_pypi_pin_is_fetched_checked_and_laid_out_as_kernel_builder_does(cutlass_3_8, capsys):
    pin = dependencies.pins()["cutlass_3_8"]
    assert cutlass_3_8.name == f"cutlass_3_8-{pin.digest[:16]}"
    include = cutlass_3_8 / "include"
    # include/{cutlass,cute} with tools/util/include merged in, as CUTLASS's CMake install lays them out
    for header in ("cutlass/gemm/device/gemm.h", "cute/tensor.hpp", "cutlass/util/device_memory.h"):
        assert (include / header).is_file(), header
    assert dependencies.tree_digest(include) == pin.digest
    assert not (include / "cutlass" / "cutlass.h").stat().st_mode & 0o222, "a pin is read-only"
    capsys.readouterr()
    assert dependencies.fetch(pin, cutlass_3_8.parent) == cutlass_3_8  # once: the second time is the cache
    assert "fetching" not in capsys.readouterr().err


def _github_archive(root: Path, top: str, extra: dict[str, bytes] | None = None) -> bytes:
    """A .tar.gz laid out as GitHub's archive of a commit: one top folder, the whole
    tree (only include/ and tools/util/include/ are headers kernel-builder installs)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        files = {f"include/{p.relative_to(root).as_posix()}": p.read_bytes() for p in root.rglob("*") if p.is_file()}
        # Put the util headers back where the tag has them.
        files = {
            (k.replace("include/cutlass/util/", "tools/util/include/cutlass/util/", 1)): v for k, v in files.items()
        }
        files |= {"README.md": b"# CUTLASS\n", "examples/00/main.cu": b"int main() {}\n", **(extra or {})}
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def serve():
    """serve(bytes) -> a URL on a loopback HTTP server (random port) that answers with them."""
    servers = []

    def start(body: bytes) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/NVIDIA/cutlass/archive/x.tar.gz"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_archive_pin_is_fetched_from_the_upstream_archive_and_checked(cutlass_3_8, serve, tmp_path):
    """The archive path, against a loopback server: GitHub's archive layout of the
    tag's tree (made from the PyPI headers, which are the tag's: same pinned digest)."""
    pin = dependencies.pins()["cutlass_3_8"]
    url = serve(_github_archive(cutlass_3_8 / "include", f"cutlass-{pin.commit}"))
    fetched = dependencies.fetch(replace(pin, wheel=None, archive=url), tmp_path)
    assert dependencies.tree_digest(fetched / "include") == pin.digest
    assert not (fetched / "include" / "README.md").exists() and not (fetched / "include" / "examples").exists()


def test_headers_that_do_not_match_the_digest_are_refused_in_one_line(cutlass_3_8, serve, tmp_path):
    pin = dependencies.pins()["cutlass_3_8"]
    extra = {"include/cutlass/cutlass.h": b"// not CUTLASS 3.8.0's\n"}
    url = serve(_github_archive(cutlass_3_8 / "include", f"cutlass-{pin.commit}", extra))
    with pytest.raises(ToolchainError) as refused:
        dependencies.fetch(replace(pin, wheel=None, archive=url), tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "cutlass_3_8" in message and url in message and pin.digest in message
    assert list(tmp_path.iterdir()) == [], "nothing is kept"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_archive_is_one_line_naming_the_pin_the_url_and_the_override(tmp_path):
    pin = dependencies.pins()["cutlass_4_0"]
    url = f"http://127.0.0.1:{_closed_port()}/NVIDIA/cutlass/archive/{pin.commit}.tar.gz"
    with pytest.raises(ToolchainError) as failed:
        dependencies.fetch(replace(pin, archive=url), tmp_path)
    message = str(failed.value)
    assert "\n" not in message and "cutlass_4_0 (CUTLASS 4.0.0)" in message and url in message
    assert "$KERNEL_MATRIX_DEPS_DIR/cutlass_4_0/include" in message


def test_the_override_wins_and_containers_get_only_the_declared_folders(cutlass_3_8, tmp_path, monkeypatch, capsys):
    override = tmp_path / "deps" / "cutlass_4_0" / "include" / "cutlass"
    override.mkdir(parents=True)
    (override / "cutlass.h").write_text("// the user's\n")
    (tmp_path / "deps" / "unrelated").mkdir()
    pinned = tmp_path / "cache" / cutlass_3_8.name / "include"
    shutil.copytree(cutlass_3_8, pinned.parent)  # as if fetched before: nothing is fetched again
    monkeypatch.setenv("KERNEL_MATRIX_DEPS_DIR", str(tmp_path / "deps"))
    monkeypatch.setenv("KERNEL_MATRIX_DEPS_CACHE", str(tmp_path / "cache"))
    found = dependencies.resolve("cutlass_4_0", "build.toml")
    assert found.pin is None and found.include == (tmp_path / "deps" / "cutlass_4_0" / "include").resolve()
    assert found.record().startswith("$KERNEL_MATRIX_DEPS_DIR/cutlass_4_0 (not pinned), headers sha256:")
    assert dependencies.container_mounts([], "build.toml") == ([], {})
    mounts, env = dependencies.container_mounts(["torch", "cutlass_3_8", "cutlass_4_0"], "build.toml")
    assert mounts == [
        (pinned.parent, f"/deps/pinned/{pinned.parent.name}"),
        (found.folder, "/deps/override/cutlass_4_0"),
    ]
    assert env == {"KERNEL_MATRIX_DEPS_CACHE": "/deps/pinned", "KERNEL_MATRIX_DEPS_DIR": "/deps/override"}
    assert "fetching" not in capsys.readouterr().err


def test_an_override_with_the_pins_headers_is_recorded_as_the_pin(tmp_path, monkeypatch):
    """Headers laid out by hand that are exactly a pin's (the same tree digest) record the pin in
    metadata.json, as a build that fetched it does; any other headers stay "(not pinned)"."""
    include = tmp_path / "deps" / "cutlass_4_0" / "include" / "cutlass"
    include.mkdir(parents=True)
    (include / "cutlass.h").write_text("// the same as the pin's\n")
    monkeypatch.setenv("KERNEL_MATRIX_DEPS_DIR", str(tmp_path / "deps"))
    pin = dependencies.pins()["cutlass_4_0"]
    digest = dependencies.tree_digest(include.parent)
    monkeypatch.setattr(dependencies, "pins", lambda: {"cutlass_4_0": replace(pin, digest=digest)})
    found = dependencies.resolve("cutlass_4_0", "build.toml")
    assert found.pin is None
    assert found.record() == f"{pin.what}, {pin.repository}@{pin.commit}, headers sha256:{digest}"
    (include / "cutlass.h").write_text("// edited\n")
    assert (
        dependencies.resolve("cutlass_4_0", "build.toml")
        .record()
        .startswith("$KERNEL_MATRIX_DEPS_DIR/cutlass_4_0 (not pinned), headers sha256:")
    )


@pytest.mark.build
def test_every_compile_sees_every_sections_dependencies_the_binding_too(kernel_copy, tmp_path, monkeypatch):
    """kernel-builder puts every section's depends on every compile's include path: a binding
    that includes a CUTLASS header its sections depend on compiles (round 18's repro)."""
    header = tmp_path / "deps" / "cutlass_4_0" / "include" / "cutlass" / "cutlass.h"
    header.parent.mkdir(parents=True)
    header.write_text("#define KERNEL_MATRIX_TEST_CUTLASS 1\n")
    toml = kernel_copy / "build.toml"
    text = toml.read_text()
    cpu = text.index("[kernel.img2gray_cpu]")
    toml.write_text(text[:cpu] + text[cpu:].replace("depends = []", 'depends = ["cutlass_4_0"]', 1))
    binding = kernel_copy / "torch-ext" / "torch_binding.cpp"
    binding.write_text(
        "#include <cutlass/cutlass.h>\n#if !KERNEL_MATRIX_TEST_CUTLASS\n#error no CUTLASS\n#endif\n"
        + binding.read_text()
    )
    env = {**os.environ, "KERNEL_MATRIX_DEPS_DIR": str(tmp_path / "deps")}
    build_dir = tmp_path / "build"
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir), env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]
    provenance = json.loads((variant / "metadata.json").read_text())
    assert "cutlass_4_0" in json.dumps(provenance)


@pytest.mark.processes
def test_a_dependency_that_cannot_be_fetched_is_one_line_exit_4(tmp_path):
    """relu, with a CPU section that depends on cutlass_4_0 (an archive pin), on a
    host that reaches nothing (a proxy on a closed port): exit 4, one line."""
    kernel = tmp_path / "relu"
    source = COMMUNITY / "relu"
    if not source.is_dir():
        pytest.skip(f"no kernel corpus at {source}")
    shutil.copytree(source, kernel)
    toml = kernel / "build.toml"
    toml.write_text(
        toml.read_text().replace(
            '[kernel.relu_cpu]\nbackend = "cpu"\ndepends = ["torch"]',
            '[kernel.relu_cpu]\nbackend = "cpu"\ndepends = ["torch", "cutlass_4_0", "cutlass_4_5"]',
        )
    )
    proxy = f"http://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if k != "KERNEL_MATRIX_DEPS_DIR"}
    env |= {"KERNEL_MATRIX_DEPS_CACHE": str(tmp_path / "cache"), "https_proxy": proxy, "HTTPS_PROXY": proxy}
    result = kernel_matrix(
        "build", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / "b"), "--backend", "cpu", env=env
    )
    assert result.returncode == ExitCode.TOOLCHAIN, result.stderr
    # One line for each dependency that cannot be had: not only the first, found one run at a time.
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 2, result.stderr
    for line, (name, what) in zip(lines, [("cutlass_4_0", "4.0.0"), ("cutlass_4_5", "4.5.2")], strict=True):
        assert f"{name} (CUTLASS {what}): cannot fetch https://github.com/NVIDIA/cutlass/archive/" in line, line
        assert f"$KERNEL_MATRIX_DEPS_DIR/{name}/include" in line
    assert "Traceback" not in result.stderr


@pytest.mark.corpus_full
def test_punica_sgmv_builds_with_its_pinned_cutlass_and_no_environment_variable(tmp_path):
    """kernels-community/punica-sgmv (cutlass_3_8) for sm_90, natively, with
    neither KERNEL_MATRIX_DEPS_DIR nor KERNEL_MATRIX_DEPS_CACHE set (minutes)."""
    kernel = COMMUNITY / "punica-sgmv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEL_MATRIX_DEPS")}
    args = [
        "--kernel-dir",
        str(kernel),
        "--build-dir",
        str(tmp_path),
        "--backend",
        "cuda",
        "--cuda-capabilities",
        "9.0",
    ]
    result = kernel_matrix("build", *args, "--no-cache", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (variant,) = [p for p in tmp_path.iterdir() if (p / "metadata.json").is_file()]
    toolchain = json.loads((variant / "metadata.json").read_text())["provenance"]["toolchain"]
    pin = dependencies.pins()["cutlass_3_8"]
    assert toolchain["cutlass_3_8"] == f"CUTLASS 3.8.0, NVIDIA/cutlass@{pin.commit}, headers sha256:{pin.digest}"
