"""A real container registry on loopback, the tests' stand-in for ghcr.io.

Debian's docker-registry (the CNCF distribution registry, what GitHub's and most registries
speak) with a configuration of our own: 127.0.0.1 on a free port, storage in a folder of the
caller's, no authentication (the engine's own `docker login` is not what is tested). Docker
engines talk plain HTTP to 127.0.0.0/8 registries without being told to, so the engine pushes
and pulls as it would to ghcr.io. scripts/docker-engine installs the package."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType


class LoopbackRegistry:
    """`with LoopbackRegistry(folder) as registry:` registry.host is HOST:PORT; the server
    process (started here, ended here by its PID) keeps its blobs in folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.process: subprocess.Popen[bytes] | None = None
        self.host = ""

    def __enter__(self) -> LoopbackRegistry:
        program = shutil.which("docker-registry")
        if program is None:
            raise RuntimeError("docker-registry is not installed: scripts/docker-engine start installs it")
        with socket.socket() as probe:  # a free port; the registry binds it a moment later
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.host = f"127.0.0.1:{port}"
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "config.yml"
        settings = {
            "version": 0.1,
            "log": {"level": "error"},
            "storage": {"filesystem": {"rootdirectory": str(self.folder / "data")}, "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }
        config.write_text(json.dumps(settings))  # JSON is YAML
        log = (self.folder / "registry.log").open("wb")
        self.process = subprocess.Popen([program, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1):
                    return self
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        self.__exit__(None, None, None)
        said = (self.folder / "registry.log").read_text()
        raise RuntimeError(f"docker-registry did not answer on {self.host}: {said}")

    def tags(self, repository: str) -> list[str]:
        """The tags the registry holds in repository (its path, without the host)."""
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/{repository}/tags/list", timeout=5) as answer:
                return sorted(json.loads(answer.read()).get("tags") or [])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
