"""The Hub as a verified binary cache: before a variant is compiled, the kernel's Hub repo
is asked for the variant of that name on its release branch; where its metadata.json
records the same build inputs (building/inputs.py) and it verifies (signed by the author's
workflow, every file as signed: signatures.py), it is placed in the build folder instead
of compiling. Anything else is built, with one line saying why.

What is believed: nothing the Hub says until the signature and digest are checked here,
against the signer the caller names; the inputs hash only decides whether to try."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

from kernel_matrix.building.published import Reused, other_inputs, take
from kernel_matrix.containers.container_output import UnsafeOutputError, check_tree
from kernel_matrix.errors import KernelMatrixError
from kernel_matrix.layout import METADATA, SIGNATURE, hub_path
from kernel_matrix.releasing import signatures
from kernel_matrix.releasing.publish import REPO_TYPE
from kernel_matrix.releasing.signatures import Signer


@dataclass(frozen=True)
class Reuse:
    """Where published variants are looked up, and who must have signed them."""

    repo_id: str
    revision: str
    signer: Signer
    trust_root: Path | None = None

    @property
    def where(self) -> str:
        return f"{self.repo_id}@{self.revision}"


def reuse_published(reuse: Reuse, variant: str, inputs: str, out_dir: Path) -> Reused:
    """out_dir/<variant> from the Hub where the published one verifies and was built from
    `inputs` (a native build, which knows them before it compiles); else Reused(None, why
    it is built)."""
    with tempfile.TemporaryDirectory(prefix="kernel-matrix-reuse-") as scratch:
        found = fetch_verified(reuse, variant, Path(scratch), inputs=inputs)
        if isinstance(found, Why):
            return Reused(None, f"{variant}: built: {found}")
        return take(found, reuse.where, variant, inputs, out_dir)


class Why(str):
    """Why a published variant is not a candidate."""


def fetch_verified(reuse: Reuse, variant: str, dest: Path, *, inputs: str | None = None) -> Path | Why:
    """The published variant, downloaded under dest and verified (signed by reuse.signer,
    every file as signed): a candidate whose inputs the build compares (take); else Why not.
    On the host: a container build compares inside, where the network is off. inputs: the
    build's, where the caller knows them before building (a native build): a variant whose
    metadata.json records others is not downloaded at all (only that small file is read)."""
    from kernel_matrix.releasing.verify import download_release

    try:
        metadata = hf_hub_download(
            reuse.repo_id, hub_path(variant, METADATA), repo_type=REPO_TYPE, revision=reuse.revision, local_dir=dest
        )
        recorded = json.loads(Path(metadata).read_text())["provenance"]["inputs"]
    except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError):
        return Why(f"{reuse.where} has no published {variant}")
    except (ValueError, KeyError, TypeError):
        return Why(f"{reuse.where}: its {variant} records no build inputs")
    except (HfHubHTTPError, OSError) as exc:
        return Why(f"{reuse.where}: cannot read its {variant}: {' '.join(str(exc).split())[:160]}")
    if not isinstance(recorded, str):
        return Why(f"{reuse.where}: its {variant} records no build inputs")
    if inputs is not None and recorded != inputs:  # before the variant's (large) files are downloaded
        return Why(other_inputs(reuse.where, recorded, inputs))
    try:
        (found,) = download_release(reuse.repo_id, reuse.revision, dest / "release", [variant])
        check_tree(found)  # plain files and folders only, nothing pointing out
    except (KernelMatrixError, UnsafeOutputError, ValueError) as exc:
        return Why(f"{reuse.where}: {' '.join(str(exc).split())[:200]}")
    if not (found / SIGNATURE).is_file():  # before Sigstore's trust root is fetched for nothing
        return Why(f"{reuse.where}: its {variant} is unsigned")
    try:
        checked = signatures.check_variant(found, reuse.signer, signatures.verifier(reuse.trust_root))
    except KernelMatrixError as exc:
        return Why(f"{reuse.where}: {exc}")
    if checked.finding is not signatures.Finding.SIGNED:
        return Why(f"{reuse.where}: {checked.line.removeprefix(variant + ': ')}")
    return found


def cell_lookup(reuse: Reuse) -> Callable[[str, Path], tuple[Path, str] | str]:
    """containers.pool's lookup of a cell's published variant: fetched and verified here,
    on the host (the container has no network), and compared inside by the build."""

    def lookup(variant: str, dest: Path) -> tuple[Path, str] | str:
        found = fetch_verified(reuse, variant, dest)
        return str(found) if isinstance(found, Why) else (found, reuse.where)

    return lookup
