"""A published variant taken instead of compiling (the Hub as a verified binary cache): the
build compares the build inputs it computes (inputs.py) with those the candidate records,
and copies it into place where they are the same. The candidate was fetched and verified
beforehand (releasing/reuse.py), on the host where the build runs in a container, whose
network is off; this module needs nothing but the files."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from kernel_matrix.building.variant_dir import staged
from kernel_matrix.layout import METADATA


@dataclass(frozen=True)
class Reused:
    """A lookup's result: the variant placed in the build folder (None: build it) and the line."""

    variant_dir: Path | None
    line: str


def take(candidate: Path, where: str, variant: str, inputs: str, out_dir: Path) -> Reused:
    """out_dir/<variant>, a copy of the verified candidate, where its metadata.json records
    `inputs`; else Reused(None, why it is built)."""
    try:
        recorded = json.loads((candidate / METADATA).read_text())["provenance"]["inputs"]
    except (OSError, ValueError, KeyError, TypeError):
        recorded = None
    if recorded != inputs:
        return Reused(None, f"{variant}: built: {other_inputs(where, recorded, inputs)}")
    final = out_dir.resolve() / variant
    with staged(final) as stage:
        shutil.copytree(candidate, stage, dirs_exist_ok=True)
    return Reused(final, f"{variant}: reused from {where} (signed, built from the same inputs): nothing compiled")


def other_inputs(where: str, recorded: object, inputs: str) -> str:
    """Why a published variant recording `recorded` is not taken by a build of `inputs`."""
    shown = recorded[:12] if isinstance(recorded, str) else "none"
    return f"{where} holds it built from other inputs ({shown}, this build's {inputs[:12]})"
