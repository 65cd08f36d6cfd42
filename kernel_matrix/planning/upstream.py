"""`kernel-matrix matrix --check-upstream`: what changed upstream that the matrix or
kernel-matrix does not cover (for a scheduled workflow, so that nothing goes unnoticed):
torch releases and CUDA builds on the package indexes the matrix lacks, `kernels` loader
releases kernel-matrix does not allow or test, and a build.toml edition newer than those
kernel-matrix reads (upstream_kernels.py). One line each."""

from __future__ import annotations

import hashlib
import re
import urllib.error
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import urldefrag

from packaging.requirements import Requirement
from packaging.version import Version
from rich.console import Console

from kernel_matrix import data
from kernel_matrix.errors import NetworkError, OutdatedError
from kernel_matrix.planning import upstream_kernels
from kernel_matrix.planning.matrix import Matrix
from kernel_matrix.planning.upstream_kernels import LoaderFinding
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


def fetch_file(url: str, limit: int) -> bytes:
    """The file at url (at most `limit` bytes), checked against the sha256 its index link
    gives (`#sha256=...`)."""
    location, fragment = urldefrag(url)
    try:
        with urllib.request.urlopen(urllib.request.Request(location), timeout=TIMEOUT_S) as response:
            body: bytes = response.read(limit + 1)
    except urllib.error.HTTPError as exc:
        raise NetworkError(f"{location}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise NetworkError(f"{location}: cannot reach the package index ({getattr(exc, 'reason', exc)})") from None
    if len(body) > limit:
        raise NetworkError(f"{location}: larger than {limit} bytes; refusing to read it")
    expected = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
    if expected and hashlib.sha256(body).hexdigest() != expected.lower():
        raise NetworkError(f"{location}: its sha256 is not the one the index gives")
    return body


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


def loaders_under_test() -> tuple[str, ...]:
    """The loader releases kernel-matrix's tests run (data/loaders.yaml)."""
    return tuple(str(v) for v in data.load("loaders")["tested"])


def read_editions() -> tuple[int, ...]:
    """The build.toml editions kernel-matrix reads: the reader's own list (config/buildtoml.py)."""
    from kernel_matrix.config.buildtoml import EDITIONS

    return tuple(EDITIONS)


def kernels_findings(
    pypi: str, requirement: Requirement, tested: Collection[str], editions: Collection[int]
) -> tuple[list[LoaderFinding], str]:
    """What the `kernels` project's releases on the index `pypi` bring that kernel-matrix
    lacks (upstream_kernels.py), and a line saying what was compared."""
    page_url = f"{pypi.rstrip('/')}/{upstream_kernels.PROJECT}/"
    releases = upstream_kernels.releases(fetch_index_page(page_url) or "", page_url)
    findings = upstream_kernels.loader_findings(releases, requirement, tested)
    with_sdist = [r for r in releases if r.sdist]
    if not with_sdist:
        return findings, f"kernels: {len(releases)} releases, none with an sdist to read build.toml editions from"
    newest = with_sdist[-1]
    assert newest.sdist is not None
    try:
        edition = upstream_kernels.newest_edition(fetch_file(newest.sdist, upstream_kernels.MAX_SDIST_BYTES))
    except ValueError as exc:
        raise NetworkError(f"{newest.sdist}: {exc}") from None
    if finding := upstream_kernels.edition_finding(newest, edition, editions):
        findings.append(finding)
    return findings, f"kernels {newest.version} (build.toml edition {edition if edition is not None else '?'})"


def check_upstream(
    matrix: Matrix,
    console: Console,
    *,
    requirement: Requirement | None = None,
    tested: Collection[str] | None = None,
    editions: Collection[int] | None = None,
) -> None:
    """Every finding one line (OutdatedError), else one line saying what is covered. The
    loader's side compares with kernel-matrix's own requirement on `kernels`, the loader
    versions its tests run and the build.toml editions it reads, unless given."""
    findings: list[Finding | LoaderFinding] = [*find_missing(matrix)]
    loader, compared = kernels_findings(
        matrix.spec.upstream.pypi,
        requirement or upstream_kernels.own_requirement(),
        tested if tested is not None else loaders_under_test(),
        editions if editions is not None else read_editions(),
    )
    findings += loader
    if not findings:
        console.print(
            f"{matrix.path}: covers every torch release and CUDA build on the indexes; kernel-matrix covers {compared}",
            soft_wrap=True,
        )
        return
    raise OutdatedError("\n".join(f"{matrix.path}: {finding}" for finding in findings))
