"""Make the folder benchmarks/h200_sweep.sh carries to the H200 (which reaches no network),
for the kernels of kernels-community named, so that a session starts its device calls in minutes:

    .venv/bin/python benchmarks/h200_carry.py .device/fa2/carry flash-attn2 \\
        --kernels-community /work/.mirror/huggingface+kernels-community/repo [--cutlass-git DIR]

CARRY/whl          the wheels the device's python3 lacks (kernels 0.17.2, kernel-matrix's needs)
CARRY/kc.tgz       the named kernels' folders at KC_COMMIT, unchanged, and the --kernel-dir folders;
                   CARRY/kc-commit
CARRY/cutlass-deps.tgz  the pins they depend on, fetched by kernel-matrix's own resolver: from PyPI
                   where the pin has a wheel, else from the pinned commit's archive, which this
                   host cannot download from GitHub: --cutlass-git names a git folder of
                   NVIDIA/cutlass (the `fetch` tool's mirror), whose `git archive` of the commit is
                   served on loopback (the digest check is the same)
CARRY/km/          kernel-matrix at --km-commit (default HEAD; git archive), CARRY/km-commit its hash:
                   a pinned commit keeps the object cache's keys while HEAD moves
The carry travels in one call's 64 MiB with its object parts (CARRY/objects/): keep it slim.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import http.server
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from kernel_matrix.building import dependencies

KC_COMMIT = "40d4194f48b6775c4be4776ed08035fabb0e758f"  # the commit every sweep table reads
WANTED = ["kernels==0.17.2", "pydantic>=2.6", "tomli-w>=1.0", "docker>=7", "kernel-abi-check>=0.14"]
# What the device's image already holds (.library/device/KINDS.md, read 2026-11-17): not carried.
# typing_extensions stays: pydantic needs a newer one than the image may have.
ON_DEVICE = {
    *("anyio", "certifi", "charset_normalizer", "click", "filelock", "fsspec", "h11", "hf_xet", "httpcore"),
    *("httpcore2", "httpx", "httpx2", "huggingface_hub", "idna", "markdown_it_py", "mdurl", "packaging"),
    *("pygments", "pyyaml", "requests", "rich", "tqdm", "urllib3"),
}
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_28_x86_64"]
PLATFORMS += ["manylinux_2_31_x86_64", "manylinux_2_34_x86_64"]


def git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=True).stdout


def untar(data: bytes, into: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(into, filter="data")


def wheels(whl: Path, extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        argv = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "3.12"]
        argv += ["--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", scratch, *WANTED, *extra]
        subprocess.run(argv, check=True, stderr=subprocess.DEVNULL)
        whl.mkdir(parents=True, exist_ok=True)
        for wheel in Path(scratch).glob("*.whl"):
            if wheel.name.split("-")[0].lower() not in ON_DEVICE:
                wheel.rename(whl / wheel.name)


def depends(kernel: Path) -> set[str]:
    config = tomllib.loads((kernel / "build.toml").read_text())
    return {name for section in config.get("kernel", {}).values() for name in section.get("depends", [])}


def serve(cutlass_git: Path, headers: dict[str, tuple[str, ...]]) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Loopback HTTP of `git archive --prefix=cutlass-<commit>/ <commit> <header folders>` at
    /<commit>.tar.gz: the header folders alone (the mirror lacks the repository's large images)."""

    class Archive(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            commit = self.path.strip("/").removesuffix(".tar.gz")
            prefix = f"--prefix=cutlass-{commit}/"
            body = git(cutlass_git, "archive", "--format=tar.gz", prefix, commit, *headers[commit])
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Archive)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def pins_into(cache: Path, names: set[str], cutlass_git: Path | None) -> None:
    known = dependencies.pins()
    headers = {pin.commit: pin.headers for pin in known.values() if pin.commit}
    server, url = serve(cutlass_git, headers) if cutlass_git else (None, "")
    try:
        for name in sorted(names):
            pin = known.get(name)
            if pin is None or pin.supplied is not None or pin.name == "torch":
                continue
            if pin.wheel is None and server is not None:
                pin = dataclasses.replace(pin, archive=f"{url}/{pin.commit}.tar.gz")
            print(dependencies.fetch(pin, cache))
    finally:
        if server is not None:
            server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("carry", type=Path)
    parser.add_argument("kernels", nargs="*", help="kernels-community kernels, by folder name")
    parser.add_argument("--kernels-community", type=Path, required=True, help="its git folder")
    parser.add_argument("--kc-commit", default=KC_COMMIT)
    parser.add_argument("--km-commit", default="HEAD", help="the kernel-matrix commit carried as CARRY/km")
    parser.add_argument("--cutlass-git", type=Path, help="a git folder of NVIDIA/cutlass, for archive pins")
    parser.add_argument("--extra-wheel", action="append", default=[], help="another requirement to carry")
    parser.add_argument(
        "--kernel-dir",
        action="append",
        type=Path,
        default=[],
        help="another kernel's folder (another repository's, a test fixture), carried under its folder's name",
    )
    args = parser.parse_args()
    # Each is carried under its folder's name: one name twice would overwrite the other.
    folder_names = [*args.kernels, *(d.resolve().name for d in args.kernel_dir)]
    if not folder_names or len(set(folder_names)) != len(folder_names):
        parser.error(f"name kernels (or --kernel-dir folders) of distinct folder names, not {folder_names}")
    carry: Path = args.carry
    carry.mkdir(parents=True, exist_ok=True)
    wheels(carry / "whl", args.extra_wheel)
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "kc"
        tree.mkdir()
        if args.kernels:
            untar(git(args.kernels_community, "archive", args.kc_commit, *args.kernels), tree)
        folders = [tree / kernel for kernel in args.kernels] + [d.resolve() for d in args.kernel_dir]
        with tarfile.open(carry / "kc.tgz", "w:gz") as out:
            for folder in folders:
                out.add(folder, arcname=folder.name, filter=lambda info: None if "__pycache__" in info.name else info)
        cache = Path(scratch) / "deps"
        names = functools.reduce(set.union, (depends(folder) for folder in folders), set())
        pins_into(cache, names, args.cutlass_git)
        with tarfile.open(carry / "cutlass-deps.tgz", "w:gz") as out:
            for folder in sorted(cache.iterdir()) if cache.is_dir() else []:
                if not folder.name.startswith("."):
                    out.add(folder, arcname=folder.name)
    (carry / "kc-commit").write_text(args.kc_commit + "\n")
    km_commit = git(Path(".git"), "rev-parse", "--verify", f"{args.km_commit}^{{commit}}").decode().strip()
    km = carry / "km"
    shutil.rmtree(km, ignore_errors=True)  # an older carry's km/: no file of another commit left in it
    km.mkdir()
    untar(git(Path(".git"), "archive", km_commit, "kernel_matrix", "pyproject.toml"), km)
    (carry / "km-commit").write_text(km_commit + "\n")
    size = sum(p.stat().st_size for p in carry.rglob("*") if p.is_file())
    print(f"{carry}: {size / 2**20:.1f} MiB (a call carries 64 MiB together with the checkout)")


if __name__ == "__main__":
    main()
