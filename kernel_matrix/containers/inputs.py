"""What a container-built variant is made from, as one hash: a cell whose hash is
the one recorded beside its variant (layout's inputs record) is up to date and is
not rebuilt."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kernel_matrix import PACKAGE_DIR
from kernel_matrix.building.dependencies import resolve as resolve_dependency
from kernel_matrix.building.inputs import KERNEL_SKIP, file_digests
from kernel_matrix.planning.matrix import Cell


def input_hash(cell: Cell, image_id: str, kernel_dir: Path, dependencies: set[str], source_date_epoch: str) -> str:
    """Everything a cell's variant is made from: the cell, the builder image, the
    kernel's sources, the headers of its `dependencies` (its build.toml's, beyond
    torch: a pin's digest, fetched here first, or an override's files) and
    kernel-matrix itself (not its tests or benchmarks), and the SOURCE_DATE_EPOCH it is built with."""
    parts = [
        cell.to_json(),
        source_date_epoch,
        image_id,
        file_digests(kernel_dir, skip=KERNEL_SKIP),
        file_digests(PACKAGE_DIR),
        *(
            [name, resolve_dependency(name, str(kernel_dir / "build.toml")).fingerprint()]
            for name in sorted(dependencies)
        ),
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
