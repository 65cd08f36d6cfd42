"""Containers on a real engine (scripts/docker-engine start): always removed,
network off by default, read-only source mounts, outputs owned by the caller."""

import io
import os
import subprocess
import tarfile

import pytest

from kernel_matrix.containers.engine import Limits, Mount, connect, container, run_options
from kernel_matrix.errors import EngineError, ToolchainError
from kernel_matrix.planning.variants import OCI_PLATFORMS, host_arch

IMAGE = "kernel-matrix-test/busybox:1"


@pytest.fixture(scope="session")
def busybox(engine, tmp_path_factory):
    """A two-megabyte image made here (nothing can be pulled): Debian's static busybox."""
    work = tmp_path_factory.mktemp("busybox")
    subprocess.run(["apt-get", "download", "busybox-static"], cwd=work, check=True, capture_output=True)
    (deb,) = work.glob("busybox-static_*.deb")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "root")], check=True)
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(work / "root" / "bin" / "busybox", arcname="bin/busybox")
        for tool in ("sh", "sleep", "cat", "touch", "id", "ls"):
            link = tarfile.TarInfo(f"bin/{tool}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for folder in ("tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    engine.api.import_image_from_data(data.getvalue(), repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1])
    yield IMAGE
    engine.images.remove(IMAGE, force=True)  # prune what the tests made


def ours(engine):
    """The ids of kernel-matrix's containers on the engine: this test's, and those of tests
    another pytest-xdist worker runs at the same time."""
    return {c.id for c in engine.containers.list(all=True, filters={"label": "kernel-matrix"}, ignore_removed=True)}


def test_a_container_runs_commands_and_is_always_removed(engine, busybox):
    with container(engine, busybox) as box:
        result = box.run(["sh", "-c", "echo hello; exit 3"])
        assert (result.exit_code, result.output) == (3, "hello\n")
        assert box.handle.id in ours(engine)
    assert box.handle.id not in ours(engine)
    with pytest.raises(RuntimeError, match="boom"), container(engine, busybox) as failing:
        raise RuntimeError("boom")
    assert failing.handle.id not in ours(engine)


HARDENING = ("CapDrop", "SecurityOpt", "ReadonlyRootfs", "Tmpfs", "PidsLimit", "Memory", "MemorySwap")


def test_a_shells_docker_run_is_hardened_as_a_build_container_is(engine, busybox):
    """`kernel-matrix shell` starts its container with `docker run` (run_options), builds through
    the SDK (container): the engine holds the same privileges and limits for both."""
    limits = Limits(memory=256 * 2**20)
    with container(engine, busybox, limits=limits) as box:
        built = engine.api.inspect_container(box.handle.id)["HostConfig"]
    name = f"kernel-matrix-test-shell-{os.getpid()}"
    created = subprocess.run(
        ["docker", "create", "--name", name, *run_options(limits), busybox, "sleep", "1"],
        capture_output=True,
        text=True,
    )
    assert created.returncode == 0, created.stderr
    try:
        shell = engine.api.inspect_container(name)["HostConfig"]
    finally:
        engine.api.remove_container(name, force=True)
    assert built["CapDrop"] == ["ALL"] and built["SecurityOpt"] == ["no-new-privileges"]
    assert built["ReadonlyRootfs"] and built["PidsLimit"] > 0 and built["Memory"] == limits.memory
    assert {key: shell[key] for key in HARDENING} == {key: built[key] for key in HARDENING}


def test_the_network_is_off_by_default(engine, busybox):
    with container(engine, busybox) as box:
        interfaces = box.run(["cat", "/proc/net/dev"]).output
    names = {line.split(":")[0].strip() for line in interfaces.splitlines()[2:]}
    assert names == {"lo"}


def test_source_mounts_are_read_only_and_outputs_belong_to_the_caller(engine, busybox, tmp_path):
    source, out = tmp_path / "src", tmp_path / "out"
    source.mkdir()
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    (source / "kernel.cu").write_text("// source\n")
    mounts = [Mount(source, "/src"), Mount(out, "/out", read_only=False)]
    with container(engine, busybox, mounts=mounts, user="1234:2345") as box:
        assert box.run(["cat", "/src/kernel.cu"]).output == "// source\n"
        assert box.run(["touch", "/src/new"]).exit_code != 0
        assert box.run(["touch", "/out/artifact"]).exit_code == 0
    assert not (source / "new").exists()
    stat = (out / "artifact").stat()
    assert (stat.st_uid, stat.st_gid) == (1234, 2345)


def test_an_image_that_is_not_there_is_never_pulled(engine):
    with pytest.raises(EngineError, match="is not present in the engine"), container(engine, "nvidia/cuda:x"):
        pass


def test_a_container_runs_on_the_platform_it_is_given_and_its_image_is_made_for(engine, busybox, tmp_path):
    """The cell's arch is a value the engine is given: an image made for another platform (an
    aarch64 builder where an x86_64 cell runs) is refused before any container is made of it."""
    here = OCI_PLATFORMS[host_arch()]
    with container(engine, busybox, platform=here) as box:
        assert box.run(["sh", "-c", "exit 0"]).exit_code == 0
    other = next(p for a, p in OCI_PLATFORMS.items() if a != host_arch())
    foreign = "kernel-matrix-test/foreign:1"
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY Dockerfile /\n")  # no RUN: nothing emulated
    engine.images.build(path=str(tmp_path), tag=foreign, platform=other, rm=True)
    try:
        before = ours(engine)
        refused = pytest.raises(ToolchainError, match=f"image {foreign} is made for {other}, not {here}")
        with refused, container(engine, foreign, platform=here):
            pass
        assert ours(engine) <= before  # refused before a container was made
    finally:
        engine.images.remove(foreign, force=True)


def test_no_engine_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineError) as raised:
        connect()
    message = str(raised.value)
    assert "\n" not in message and "unix:///nonexistent/docker.sock" in message
    assert "scripts/docker-engine start" in message


def test_dockerfile_builders_are_tagged_by_content_reused_and_fail_in_one_line(engine, busybox, tmp_path):
    """The official-image path (docker/builder.Dockerfile) through the same code,
    on a stand-in Dockerfile over the local busybox image (no registry here)."""
    from kernel_matrix.containers import images

    dockerfile = tmp_path / "builder.Dockerfile"
    dockerfile.write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nARG TORCH_SPEC\nARG TORCH_INDEX_URL\n"
        'RUN echo "$TORCH_SPEC from ${TORCH_INDEX_URL:-pypi}" > /spec\n'
    )

    def make(torch: str) -> str:
        return images.official_builder(
            engine, busybox, torch=torch, cuda=None, torch_index="pypi", dockerfile=dockerfile
        )

    made = []
    try:
        tag = make("2.13")
        made.append(tag)
        with container(engine, tag) as box:
            assert box.run(["cat", "/spec"]).output == "torch==2.13.* from pypi\n"
        image_id = engine.images.get(tag).id
        assert make("2.13") == tag
        assert engine.images.get(tag).id == image_id  # reused, not rebuilt
        other = make("2.14")
        made.append(other)
        assert other != tag

        dockerfile.write_text(dockerfile.read_text() + "RUN exit 3\n")
        failure = r"creating kernel-matrix/builder:torch213-official-\w+ failed: .*"
        with pytest.raises(EngineError, match=failure) as err:
            make("2.13")
        assert "\n" not in str(err.value)
    finally:
        for tag in made:
            engine.images.remove(tag, force=True)
