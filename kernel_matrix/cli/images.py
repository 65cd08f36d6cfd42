"""`kernel-matrix builder-images`: the selected cells' builder images, made once and pushed
to a registry, listed by digest for `build --builder-images` (containers/registry.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernel_matrix.cli.console import console, stdout
from kernel_matrix.cli.options import (
    ImageOption,
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    OnlyOption,
    ProfileOption,
    VariantOption,
    image_kind_of,
    resolve,
    selection_of,
)


def builder_images(
    push: Annotated[
        str,
        typer.Option(
            "--push",
            help="The registry repository the images go to, under their recipes' names "
            "(e.g. ghcr.io/owner/repo/kernel-matrix-builder; log in with `docker login` first).",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(help="Where the list of pushed images, by digest, is written (JSON), for build --builder-images."),
    ],
    reuse: Annotated[
        bool,
        typer.Option(
            "--reuse",
            help="Take an image of the same recipe that an earlier run pushed to --push's repository instead of "
            "making it (its recipe label checked). Not for release builds: a tag can be moved by any writer.",
        ),
    ] = False,
    profile: ProfileOption = None,
    only: OnlyOption = None,
    variant: VariantOption = None,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    image: ImageOption = None,
) -> None:
    """Make (or, with --reuse, pull) each selected cell's builder image once and push it.

    The list it writes names each image by digest: a build given it pulls exactly those
    images, checks each one's recipe label against the recipe it computes, and makes none."""
    from kernel_matrix.containers import registry
    from kernel_matrix.containers.engine import connect
    from kernel_matrix.containers.images import PipSetup, builder_for

    repository = registry.check_repository(push)
    resolved = resolve(selection_of(file, profile, only, variant, kernel, kernel_dir))
    client = connect()
    kind = image_kind_of(image, profile, resolved.matrix)  # as build picks it
    pip = PipSetup.from_host()

    def fetch(tag: str) -> bool:
        return registry.pull_by_recipe(client, tag, repository, log=console.print)

    tags: list[str] = []
    for cell in resolved.cells:
        if resolved.kernel(cell).config.noarch:
            continue  # Python only: made on the host, no builder
        tag = builder_for(client, cell, kind, pip, log=console.print, fetch=fetch if reuse else None)
        if tag not in tags:
            tags.append(tag)
    shared = [registry.push(client, tag, repository, log=console.print) for tag in tags]
    registry.write_listed(out, shared)
    for item in shared:
        stdout.print(f"{item.tag} {item.reference}", markup=False, highlight=False, soft_wrap=True)
