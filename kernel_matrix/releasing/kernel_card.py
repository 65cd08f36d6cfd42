"""The kernel card: README.md on the Hub repo's main branch. A kernel's own CARD.md
template is rendered as kernel-builder's fill-card renders it (card.rs); a kernel
without one gets kernel-matrix's card, with its variant table."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import yaml

from kernel_matrix.config.buildtoml import BuildConfig
from kernel_matrix.errors import ConfigError
from kernel_matrix.releasing.release import release_branch

CARD_TEMPLATE = "CARD.md"


def kernel_card(
    config: BuildConfig, repo_id: str, variants: dict[str, dict[str, Any]], kernel_dir: Path | None = None
) -> str:
    """variants: variant name -> its metadata.json. kernel_dir: where a CARD.md template may be."""
    if kernel_dir is not None and ((kernel_dir / CARD_TEMPLATE).is_file() or (kernel_dir / CARD_TEMPLATE).is_symlink()):
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


def render_card_template(config: BuildConfig, repo_id: str, kernel_dir: Path) -> str:
    """The kernel's CARD.md, rendered with the values kernel-builder's fill-card gives it:
    trim_blocks, as its minijinja environment; sandboxed, since the template is the author's
    (or a pull request's) code. One line naming the file (and line) where it cannot be."""
    from jinja2 import TemplateError, TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    path = kernel_dir / CARD_TEMPLATE
    if path.is_symlink():  # the card is published: a link would carry a host file there
        raise ConfigError(f"{path}: a link: the card template must be a file of the kernel")
    general = config.general
    module = general.python_name
    names = _all_names(kernel_dir, module)
    try:
        template = SandboxedEnvironment(trim_blocks=True).from_string(path.read_text(encoding="utf-8"))
        return template.render(
            repo_id=repo_id,
            version=general.version,
            functions=[n for n in names if n != "layers"] or None,
            layers=_layer_classes(kernel_dir, module) if "layers" in names else None,
            has_benchmark=(kernel_dir / "benchmarks" / "benchmark.py").is_file(),
            upstream=general.upstream,
            source=general.source,
            license=general.license.lower(),
        )
    except TemplateSyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: the card template does not parse: {exc.message}") from None
    except (TemplateError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: the card template cannot be rendered: {exc}") from None
    except Exception as exc:  # the template's own expressions: {{ 1 / 0 }}, {{ "x" * 10**12 }}
        raise ConfigError(f"{path}: the card template cannot be rendered: {type(exc).__name__}: {exc}") from None


def _module_tree(path: Path) -> ast.Module | None:
    """The module's syntax tree; None for a link (its names would go into the published card) or
    a file that does not parse."""
    if path.is_symlink():
        return None
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _all_names(kernel_dir: Path, module: str) -> list[str]:
    """The string entries of `__all__ = [...]` in the package's __init__.py (torch-ext, or
    tvm-ffi-ext), read without running it, as card.rs's extract_all."""
    for ext in ("torch-ext", "tvm-ffi-ext"):
        init = kernel_dir / ext / module / "__init__.py"
        if init.exists():
            tree = _module_tree(init)
            for node in tree.body if tree else []:
                if (
                    isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                    and isinstance(node.value, ast.List)
                ):
                    names = [
                        e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                    ]
                    if names:
                        return names
            return []
    return []


def _layer_classes(kernel_dir: Path, module: str) -> list[str] | None:
    """The classes of the package's `layers` (a package or a module), as card.rs's extract_layers."""
    package = kernel_dir / "torch-ext" / module
    for path in (package / "layers" / "__init__.py", package / "layers.py"):
        if path.exists():
            tree = _module_tree(path)
            classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)] if tree else []
            return classes or None
    return None
