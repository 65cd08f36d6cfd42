"""`kernel-matrix publish` and `clean`: releasing built variants to the Hub, and
removing what a release must not carry."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernel_matrix.checking.abi import MANYLINUX
from kernel_matrix.cli import render
from kernel_matrix.cli.console import console, stdout, styled
from kernel_matrix.cli.options import (
    BuildDirOption,
    KernelDirOption,
    KernelOption,
    MatrixFileOption,
    resolve,
    selection_of,
)
from kernel_matrix.layout import DEFAULT_BUILD_DIR

if TYPE_CHECKING:
    from kernel_matrix.releasing.publish import Plan
    from kernel_matrix.releasing.release import Release


def publish(
    repo_id: Annotated[
        str | None,
        typer.Option(help="Hub repo (default: \\[general.hub] repo-id in build.toml; only with one kernel)."),
    ] = None,
    kernel: KernelOption = None,
    kernel_dir: KernelDirOption = None,
    build_dir: BuildDirOption = DEFAULT_BUILD_DIR,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    profile: Annotated[str, typer.Option(help="The matrix profile this release must contain.")] = "full",
    allow_partial: Annotated[
        bool,
        typer.Option(
            help="Publish although some variants of the profile are not built (what the branch has of them stays)."
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Print what would change, write nothing.")] = False,
    tag: Annotated[str | None, typer.Option(help="Also tag the release commit (e.g. the git tag).")] = None,
    manylinux: Annotated[str, typer.Option(help="manylinux policy of the ABI gate, or 'none'.")] = MANYLINUX,
    sign: Annotated[
        bool,
        typer.Option(
            "--sign/--no-sign",
            help="Sign each variant's metadata.json with Sigstore (keyless: this GitHub Actions job's OIDC identity).",
        ),
    ] = False,
) -> None:
    """Publish each kernel's built variants to branch v<version> of its Hub repo (or \\[general.hub] branch),
    in one commit per kernel.

    Every kernel's release is checked (complete, digests, ABI), and with --sign signed,
    before any is published."""
    from huggingface_hub import HfApi

    from kernel_matrix.releasing import publish as hub
    from kernel_matrix.releasing.kernel_card import kernel_card
    from kernel_matrix.releasing.release import prepare_releases, release_branch, signed_release
    from kernel_matrix.releasing.signatures import keyless_signing

    resolved = resolve(selection_of(file, profile, kernel=kernel, kernel_dir=kernel_dir))
    if tag is not None:
        hub.check_tag(tag)
    releases = prepare_releases(
        resolved, build_dir, repo_id, allow_partial=allow_partial, manylinux=None if manylinux == "none" else manylinux
    )
    if tag is not None:  # before anything is published: a tag no kernel's release can take
        for _, release in releases:
            hub.check_tag_beside_branch(tag, release_branch(release.config))
    # Every card before anything is published: a CARD.md that cannot be rendered stops them all.
    cards = [kernel_card(release.config, target, release.metadata, release.kernel_dir) for target, release in releases]
    if sign and not dry_run:  # last before publishing: every check passed, the OIDC token is fresh
        with keyless_signing() as signer:
            releases = [(target, signed_release(release, signer)) for target, release in releases]
    elif sign:
        console.print("note: --dry-run: nothing signed (a release would sign each variant's metadata.json)")
    api = HfApi()
    for (target, release), card in zip(releases, cards, strict=True):
        config = release.config
        branch = release_branch(config)
        for line in _release_notes(release):
            console.print(line, soft_wrap=True, highlight=False, markup=False)
        if dry_run:
            _print_plan(hub.dry_run(api, target, branch, release.files, release.kept), dry_run=True)
            continue
        built = list(release.metadata)
        release_tag = tag
        if tag == branch:
            # A Hub tag named like the release's branch makes the revision ambiguous (the Hub
            # refuses it); the branch already names this release, as `kernels` loads it.
            console.print(f"note: the release's branch {branch} already names it: no tag {tag} is made", soft_wrap=True)
            release_tag = None
        outcome = hub.publish(
            api,
            target,
            branch,
            release.files,
            card=card,
            message=f"Release {config.general.name} v{config.general.version}: {len(built)} variants",
            tag=release_tag,
            kept=release.kept,
            log=lambda m: console.print(styled((m, "yellow"))),
        )
        _print_plan(outcome.plan, dry_run=False)
        if outcome.commit:
            console.print(f"published {len(built)} variants to {target}@{branch}: commit {outcome.commit}")
        else:
            console.print(f"{target}@{branch} already holds this release: no commit")


def _release_notes(release: Release) -> list[str]:
    """What a release leaves alone, and what its loaders will be warned of, said before it goes."""
    from kernel_matrix.releasing.release import is_dirty

    lines = []
    if release.kept:
        lines.append(
            f"note: {len(release.kept)} variants of the matrix are not in this release (not built, or outside "
            "its profile): what the branch has of them stays"
        )
    if dirty := [name for name, meta in release.metadata.items() if is_dirty(meta)]:
        # kernel-builder's upload warns so; `kernels` warns at every load of these variants.
        lines.append(
            f"warning: {len(dirty)} variants were built from a git tree with uncommitted changes "
            f"({', '.join(dirty)}): their recorded commit does not identify their sources"
        )
    return lines


def _print_plan(plan: Plan, *, dry_run: bool) -> None:
    stdout.print(render.plan_table(plan, dry_run=dry_run))
    for line in render.plan_lines(plan):
        stdout.print(line, highlight=False)


def clean(
    build_dir: BuildDirOption = DEFAULT_BUILD_DIR,
    file: MatrixFileOption = Path("build_matrix.yaml"),
    kernel_dir: KernelDirOption = None,
    dry_run: Annotated[bool, typer.Option(help="List what would be removed, remove nothing.")] = False,
) -> None:
    """Remove development artifacts, and the variants (or kernels' build folders) the matrix no longer names."""
    from kernel_matrix.planning.selection import Selection
    from kernel_matrix.releasing.clean import find_artifacts, project_root, remove

    root = project_root(file, build_dir)  # first: nothing is read from a folder clean may not act on
    resolved = Selection(file, kernel_dir=kernel_dir).resolve()  # --kernel-dir: what `build --kernel-dir` built
    keep = {resolved.build_dir(build_dir, resolved.kernel(c)).relative(c.name) for c in resolved.cells}
    kernel_folders = {k.name for k in resolved.kernels} if resolved.several else set()
    paths = find_artifacts(root, build_dir, keep, kernel_folders)
    for path in paths:
        stdout.print(f"{'would remove' if dry_run else 'removed'} {path.relative_to(root)}", highlight=False)
    if not dry_run:
        remove(paths)
    console.print(f"{len(paths)} paths {'to remove' if dry_run else 'removed'}")
