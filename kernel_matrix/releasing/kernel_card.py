"""The kernel card: README.md on the Hub repo's main branch. A kernel's own CARD.md
template is rendered as kernel-builder's fill-card renders it (card_template.py); a
kernel without one gets kernel-matrix's card, with its variant table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kernel_matrix.config.buildtoml import BuildConfig
from kernel_matrix.releasing.card_template import has_card_template, render_card_template
from kernel_matrix.releasing.release import release_branch


def kernel_card(
    config: BuildConfig, repo_id: str, variants: dict[str, dict[str, Any]], kernel_dir: Path | None = None
) -> str:
    """variants: variant name -> its metadata.json. kernel_dir: where a CARD.md template may be."""
    if kernel_dir is not None and has_card_template(kernel_dir):
        return render_card_template(config, repo_id, kernel_dir)
    general = config.general
    rows = []
    for name in sorted(variants):
        meta = variants[name]
        backend = meta["backend"]
        archs = " ".join(backend.get("archs") or []) or "-"
        kernel_git = meta.get("provenance", {}).get("kernel") or {}
        source = kernel_git.get("commit", "unknown")[:12] + (" (dirty)" if kernel_git.get("dirty") else "")
        rows.append(f"| `{name}` | {backend['type']} | {archs} | `{meta['id']}` | {source} |")
    builders = sorted(
        {m.get("provenance", {}).get("kernel-builder", {}).get("version", "?") for m in variants.values()}
    )
    # The front matter is written by a YAML writer: general.license is the kernel
    # author's (or a pull request's) text, and interpolated it could end the string
    # and add keys of its own, or end the front matter.
    # library_name: the Hub lists the repo under the `kernels` library, as kernel-builder's card template does.
    front_matter = yaml.safe_dump(
        {"library_name": "kernels", "license": general.license.lower(), "tags": ["kernel"]},
        sort_keys=False,
        allow_unicode=True,
    )
    branch = release_branch(config)
    # A version's branch is loaded by its number; a branch of another name ([general.hub] branch) by name.
    where = f"version={general.version}" if branch == f"v{general.version}" else f"revision={json.dumps(branch)}"
    return "\n".join(
        [
            "---",
            front_matter.rstrip("\n"),
            "---",
            "",
            f"# {general.name}",
            "",
            f"A PyTorch kernel for the Hugging Face `kernels` loader, version {general.version} "
            f"(branch `{branch}`). Load the build that matches your torch and CUDA:",
            "",
            "```python",
            "from kernels import get_kernel",
            "",
            # A Python string literal, whatever the repo id holds.
            f"{general.python_name} = get_kernel({json.dumps(repo_id)}, {where})",
            "```",
            "",
            "## Build variants",
            "",
            "| variant | backend | CUDA capabilities | op namespace | source commit |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"Built by {', '.join(builders)}. Every variant's `metadata.json` lists a sha256 digest of its files.",
            "",
        ]
    )
