"""The checks kernel-builder makes of a kernel's sources before it builds them, with
its rules (nix-builder/pkgs): kernel-layout-check (the package folder) and
torch-ops-check (torch.library registrations carry the kernel's op namespace).

Both read the kernel's files only: links that leave the kernel's folder are not
followed, and no file is imported."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_matrix.errors import ConfigError

if TYPE_CHECKING:
    from kernel_matrix.config.buildtoml import BuildConfig

# kernel-builder's torch-ops-check-hook.py: decorators that register an op by the name
# in their first argument.
TORCH_LIBRARY_DECORATORS = frozenset(
    {"custom_op", "triton_op", "register_kernel", "register_fake", "register_vmap", "register_torch_dispatch"}
)
_NODE_KINDS = {ast.FunctionDef: "function", ast.AsyncFunctionDef: "async function", ast.ClassDef: "class"}
# A Python file larger than this is not parsed (no kernel's own module is near it).
MAX_PYTHON_BYTES = 4 * 1024 * 1024


def check_kernel_sources(kernel_dir: Path, config: BuildConfig) -> None:
    """Both checks, before anything of a build is written."""
    check_layout(kernel_dir, config.general.python_name, config.ext_dir)
    check_op_registrations(kernel_dir, config.ext_dir)


def check_layout(kernel_dir: Path, python_name: str, ext_dir: str = "torch-ext") -> None:
    """kernel-layout-check: <ext_dir>/<python_name>/ (torch-ext/, or tvm-ffi-ext/) has an
    __init__.py and no <python_name> package inside it (the loader's old location), as
    the check sees the source set: its Python files only."""
    package = kernel_dir / ext_dir / python_name
    if not (package / "__init__.py").is_file():
        raise ConfigError(
            f"{package}: the kernel's Python package has no __init__.py (kernel-builder's layout check "
            "refuses it, and the loader finds no module)"
        )
    nested = package / python_name
    if _python_files_in(nested):
        raise ConfigError(
            f"{nested}: a package folder holds no {python_name} of its own (kernel-builder's "
            "layout check refuses it: the loader's old location)"
        )


def _python_files_in(nested: Path) -> bool:
    """Whether kernel-builder's source set keeps anything at nested: its .py and .pyi files
    (nix-builder source-set.nix); an empty folder or one of caches only is not there."""
    if nested.is_symlink() or not nested.is_dir():
        return False
    return any(path.suffix in (".py", ".pyi") for path in nested.rglob("*") if not path.is_symlink())


def check_op_registrations(kernel_dir: Path, ext_dir: str = "torch-ext") -> None:
    """torch-ops-check: every top-level function or class of <ext_dir>/ (torch-ext/, or a
    tvm-ffi kernel's tvm-ffi-ext/, which kernel-builder checks too) and tests/ that a
    torch.library decorator registers names its op with add_op_namespace_prefix, so
    that two builds of one kernel never register the same op in one process."""
    found: list[str] = []
    for path in _python_files(kernel_dir, (ext_dir, "tests")):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError, RecursionError):
            continue  # not parsed by this Python: the load after the build tries the package itself
        found += [f"{path}:{line}: {what}" for line, what in _unprefixed(tree)]
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ConfigError(
            f"{found[0]} is registered with torch.library without add_op_namespace_prefix{more}: two builds "
            "of this kernel would register the same op (kernel-builder's torch-ops-check refuses it)"
        )


def _unprefixed(tree: ast.Module) -> list[tuple[int, str]]:
    hits = []
    for node in ast.iter_child_nodes(tree):
        kind = _NODE_KINDS.get(type(node))
        if kind is None:
            continue
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for decorator in node.decorator_list:
            if _registers(decorator) and not _prefixed(decorator):
                hits.append((node.lineno, f"{kind} {node.name}"))
    return hits


def _call_name(node: ast.expr) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _registers(decorator: ast.expr) -> bool:
    named = _call_name(decorator) in TORCH_LIBRARY_DECORATORS
    return named and isinstance(decorator, ast.Call) and bool(decorator.args)


def _prefixed(decorator: ast.expr) -> bool:
    assert isinstance(decorator, ast.Call)
    return _call_name(decorator.args[0]) == "add_op_namespace_prefix"


def _python_files(kernel_dir: Path, folders: tuple[str, ...]) -> list[Path]:
    """The .py files under kernel_dir/<folder>, in order; links are followed only where
    they stay inside kernel_dir (never into the host's files)."""
    root = kernel_dir.resolve()
    files = []
    for folder in folders:
        top = kernel_dir / folder
        if not top.is_dir() or not _inside(top, root):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and _inside(Path(dirpath, d), root))
            for name in sorted(filenames):
                path = Path(dirpath, name)
                if name.endswith(".py") and _inside(path, root) and _small(path):
                    files.append(path)
    return files


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        return False


def _small(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size <= MAX_PYTHON_BYTES
    except OSError:
        return False
