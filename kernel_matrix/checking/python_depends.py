"""The pip packages a built variant's python-depends name, by the `kernels` loader's own
table (kernels' python_depends.json, wherever the installed release keeps it: loader.py;
kernels-data's list of the dependencies kernel-builder knows): the loader refuses a variant
whose packages are not installed, so the test workflow's environment installs them first,
as kernel-builder's test shell has them.

    python -m kernel_matrix.checking.python_depends VARIANT_DIR BACKEND   # one requirement a line

Only names in that table map to a package, so a pull request's metadata.json cannot
make the test job install a package of its choosing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kernel_matrix.errors import ConfigError
from kernel_matrix.layout import METADATA


def dependency_table() -> dict[str, Any]:
    """The installed loader's table: {"general": {name: info}, "backends": {backend: {name: info}}}."""
    from kernel_matrix.loader import python_depends_table

    return python_depends_table()


def requirements(variant_dir: Path, backend: str, table: dict[str, Any] | None = None) -> list[str]:
    """The pip packages of the variant's python-depends (the general table, then the
    backend's, as the loader looks them up), in order, each once. backend: the cell's (the
    matrix says it; the variant's metadata.json must agree, not choose)."""
    path = variant_dir / METADATA
    try:
        metadata = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read as JSON ({exc})") from None
    depends = metadata.get("python-depends") if isinstance(metadata, dict) else None
    framework = framework_requirements(variant_dir.name)
    if not depends:
        return framework
    if not isinstance(depends, list) or not all(isinstance(name, str) for name in depends):
        raise ConfigError(f"{path}: python-depends is not a list of names: {json.dumps(depends)[:80]}")
    recorded = metadata.get("backend")
    backend_type = recorded.get("type") if isinstance(recorded, dict) else None
    if backend_type != backend:
        raise ConfigError(f"{path}: backend {json.dumps(backend_type)[:40]}, but the cell is {backend}")
    table = dependency_table() if table is None else table
    own = table.get("backends", {}).get(backend_type, {})
    packages: list[str] = list(framework)
    for name in depends:
        info = table.get("general", {}).get(name) or own.get(name)
        if info is None:
            raise ConfigError(
                f"{path}: python-depends {json.dumps(name)[:80]} is not a dependency the kernels loader knows "
                f"for backend {json.dumps(backend_type)}"
            )
        packages += [p["pkg"] for p in info.get("python", []) if p.get("pkg") not in packages]
    return packages


def framework_requirements(variant: str) -> list[str]:
    """What the variant's framework needs beyond torch: a tvm-ffi<MAJ><MIN> variant, the
    apache-tvm-ffi of that minor (the loader picks such a variant only where it is installed)."""
    from kernel_matrix.loader import is_tvm_ffi, parse_variant

    try:
        framework = getattr(parse_variant(variant), "framework", None)
    except ValueError:
        return []
    if framework is None or not is_tvm_ffi(framework):
        return []
    major, minor = framework.version.major, framework.version.minor
    return [f"apache-tvm-ffi>={major}.{minor},<{major}.{minor + 1}"]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m kernel_matrix.checking.python_depends VARIANT_DIR BACKEND", file=sys.stderr)
        return 2
    try:
        for package in requirements(Path(argv[0]), argv[1]):
            print(package)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
