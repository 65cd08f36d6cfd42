"""`kernel-matrix matrix --check-upstream`: which torch releases and CUDA builds
on the package indexes the matrix does not cover (for a scheduled workflow, so a
new torch release never goes unnoticed)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from packaging.version import Version
from rich.console import Console

from kernel_matrix import data
from kernel_matrix.errors import NetworkError, OutdatedError
from kernel_matrix.planning.matrix import Matrix
from kernel_matrix.planning.variants import cuda_tag

_WHEEL = re.compile(r"torch-(\d+)\.(\d+)\.\d+(?:(?:\+|%2B)(cu\d+|cpu))?-[^\"'<>\s]*\.whl")
TIMEOUT_S = 30


@dataclass(frozen=True)
class Finding:
    torch: str
    cuda: str | None  # None: the whole torch minor is missing

    def __str__(self) -> str:
        if self.cuda is None:
            return f"torch {self.torch} is released but not in the matrix"
        return f"torch {self.torch} has a CUDA {self.cuda} build that the matrix does not build"


def fetch_index_page(url: str) -> str | None:
    """The simple-index page at url (PEP 503 HTML); None where the index has none (404)."""
    request = urllib.request.Request(url, headers={"Accept": "text/html"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body: bytes = response.read()  # urlopen is typed Any
            return body.decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise NetworkError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise NetworkError(f"{url}: cannot reach the package index ({getattr(exc, 'reason', exc)})") from None


def torch_minors(page: str) -> set[str]:
    return {f"{m.group(1)}.{m.group(2)}" for m in _WHEEL.finditer(page)}


def _cuda_candidates(known: list[str]) -> list[str]:
    """Known CUDA versions, the next two minors of the newest, and the next major's .0."""
    newest = max((Version(v) for v in known), default=Version("13.0"))
    extra = [f"{newest.major}.{newest.minor + 1}", f"{newest.major}.{newest.minor + 2}", f"{newest.major + 1}.0"]
    return sorted(set(known) | set(extra), key=Version)


def find_missing(matrix: Matrix) -> list[Finding]:
    spec = matrix.spec
    built = {(c.variant.torch, c.variant.cuda) for c in matrix.cells}
    matrix_minors = {c.variant.torch for c in matrix.cells}
    oldest = min(matrix_minors, key=Version)
    findings: list[Finding] = []

    pypi_page = fetch_index_page(f"{spec.upstream.pypi.rstrip('/')}/torch/") or ""
    for minor in sorted(torch_minors(pypi_page) - matrix_minors, key=Version):
        if Version(minor) > Version(oldest):
            findings.append(Finding(minor, None))

    cudas = _cuda_candidates([*data.load("cuda_toolkits"), *(c for _, c in built if c)])
    for cuda in cudas:
        page = fetch_index_page(f"{spec.upstream.pytorch.rstrip('/')}/{cuda_tag(cuda)}/torch/")
        if page is None:
            continue
        for minor in sorted(torch_minors(page) & matrix_minors, key=Version):
            if (minor, cuda) not in built:
                findings.append(Finding(minor, cuda))
    return sorted(findings, key=lambda f: (Version(f.torch), Version(f.cuda or "0")))


def check_upstream(matrix: Matrix, console: Console) -> None:
    findings = find_missing(matrix)
    if not findings:
        console.print(f"{matrix.path}: covers every torch release and CUDA build on the indexes")
        return
    raise OutdatedError("\n".join(f"{matrix.path}: {finding}" for finding in findings))
