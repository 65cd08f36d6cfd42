"""A kernel's own CARD.md template, rendered as kernel-builder's fill-card renders it
(kernel-builder/src/card.rs): with the same values, read from the kernel's files without
running them. The template is the kernel author's code, and publish runs where HF_TOKEN is:
it is rendered in a child process (render_card.py) with no environment, a sandboxed jinja2
and limits on CPU time and memory. Nothing outside the kernel's folder reaches the card
(links are not followed out of it), and what cannot be rendered is one line naming CARD.md."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kernel_matrix.config.buildtoml import BuildConfig, loader_git_url
from kernel_matrix.errors import ConfigError
from kernel_matrix.releasing.release import benchmark_files
from kernel_matrix.releasing.render_card import MEMORY_BYTES

CARD_TEMPLATE = "CARD.md"
RENDERER = Path(__file__).with_name("render_card.py")
CPU_SECONDS = 20  # the renderer's limit: a card takes milliseconds
WALL_SECONDS = 60  # the child's own CPU limit ends it first


def has_card_template(kernel_dir: Path) -> bool:
    path = kernel_dir / CARD_TEMPLATE
    return path.is_file() or path.is_symlink()  # a link is refused by render, not passed over


def render_card_template(config: BuildConfig, repo_id: str, kernel_dir: Path) -> str:
    path = kernel_dir / CARD_TEMPLATE
    if path.is_symlink():  # the card is published: a link would carry a host file there
        raise ConfigError(f"{path}: a link: the card template must be a file of the kernel")
    try:
        template = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the card template: {_one_line(str(exc))}") from None
    values = card_values(config, repo_id, kernel_dir)
    request = json.dumps({"template": template, "values": values, "cpu_seconds": CPU_SECONDS})
    stopped = f"{path}: the card template cannot be rendered: it ran past its limits ({CPU_SECONDS} s of CPU time"
    try:
        child = subprocess.run(
            [sys.executable, "-I", str(RENDERER)],
            input=request.encode("utf-8"),
            capture_output=True,
            env={},  # HF_TOKEN and every other variable stay here
            timeout=WALL_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{stopped}, {WALL_SECONDS} s in all)") from None
    try:
        answer = json.loads(child.stdout) if child.returncode == 0 else None
    except ValueError:
        answer = None
    if child.returncode < 0 or (isinstance(answer, dict) and answer.get("stopped")):  # CPU's signal, memory's error
        raise ConfigError(f"{stopped} and {MEMORY_BYTES // 1024**3} GiB of memory)")
    if not isinstance(answer, dict) or not isinstance(answer.get("card", answer.get("error")), str):
        last = (child.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"{path}: the card template's renderer failed (exit {child.returncode}): {_one_line(last)}")
    if "error" in answer:
        line = f":{answer['line']}" if isinstance(answer.get("line"), int) else ""
        raise ConfigError(f"{path}{line}: the card template {_one_line(answer['error'])}")
    card: str = answer["card"]
    return card


def card_values(config: BuildConfig, repo_id: str, kernel_dir: Path) -> dict[str, Any]:
    """What fill-card gives the template: functions and layers from the package's `__all__`,
    has_benchmark, upstream and source as URLs (an scp-like address as ssh://)."""
    general = config.general
    module = general.python_name
    names = _all_names(kernel_dir, module)
    return {
        "repo_id": repo_id,
        "version": general.version,
        "functions": [n for n in names if n != "layers"] or None,
        "layers": _layer_classes(kernel_dir, module) if "layers" in names else None,
        # the card offers `kernels benchmark` exactly when the release uploads benchmark.py
        "has_benchmark": any(f.path_in_repo == "benchmarks/benchmark.py" for f in benchmark_files(kernel_dir)),
        "upstream": loader_git_url(general.upstream) if general.upstream else None,
        "source": loader_git_url(general.source) if general.source else None,
        "license": general.license.lower(),
    }


def _inside(kernel_dir: Path, path: Path) -> bool:
    """A plain file of the kernel's folder, reached through no link out of it."""
    try:
        return path.is_file() and not path.is_symlink() and path.resolve().is_relative_to(kernel_dir.resolve())
    except OSError:
        return False


def _module_tree(kernel_dir: Path, path: Path) -> ast.Module | None:
    """The module's syntax tree; None for a file outside the kernel (its names would go into the
    published card) or one that does not parse."""
    if not _inside(kernel_dir, path):
        return None
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError, RecursionError, MemoryError):
        return None


def _all_names(kernel_dir: Path, module: str) -> list[str]:
    """The string entries of `__all__ = [...]` in the package's __init__.py (torch-ext, or
    tvm-ffi-ext), as card.rs's extract_all: the first such assignment with any."""
    for ext in ("torch-ext", "tvm-ffi-ext"):
        init = kernel_dir / ext / module / "__init__.py"
        if init.exists():
            tree = _module_tree(kernel_dir, init)
            for node in tree.body if tree else []:
                if (
                    isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                    and isinstance(node.value, ast.List)
                ):
                    elements = node.value.elts
                    names = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                    if names:
                        return names
            return []
    return []


def _layer_classes(kernel_dir: Path, module: str) -> list[str] | None:
    """The classes of the package's `layers` (a package or a module), as card.rs's extract_layers."""
    package = kernel_dir / "torch-ext" / module
    for path in (package / "layers" / "__init__.py", package / "layers.py"):
        if path.exists():
            tree = _module_tree(kernel_dir, path)
            classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)] if tree else []
            return classes or None
    return None


def _one_line(text: str) -> str:
    """The template's (or its error's) own text, kept to the one line an error gets."""
    return text.replace("\r", "\\r").replace("\n", "\\n")
