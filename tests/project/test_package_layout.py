"""The package's shape, as kernel_matrix/__init__.py and docs/contributing/architecture.md
describe it: groups that read top-down, each importing only the groups above it (lazy
imports inside functions included), modules beside the groups that import none of them, and
a thin CLI."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kernel_matrix

PACKAGE = Path(kernel_matrix.__file__).parent
# Packages beside the groups, which serve them all: the version tables and defaults (data/).
SHARED = {"data"}
# CLI modules parse options and call the stages: none grows past this (issue 37's "~300").
CLI_MODULE_LINES = 300


def groups() -> list[str]:
    """The groups in the order the package's docstring lists them (``name``: at a line's start)."""
    return re.findall(r"^- ``(\w+)``:", kernel_matrix.__doc__ or "", re.MULTILINE)


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, the kernel_matrix module) of every import in path, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "kernel_matrix"]


def test_the_docstring_names_every_group_once_in_order():
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(groups()) == sorted(folders - SHARED) and len(set(groups())) == len(groups())


def test_each_group_imports_only_the_groups_above_it_and_the_shared_modules_none():
    order = groups()
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        inside = path.relative_to(PACKAGE).parts
        # A shared module (errors, layout, ...) is above every group; __init__ and __main__ name the CLI.
        rank = order.index(inside[0]) if len(inside) > 1 and inside[0] not in SHARED else -1
        if path.parent == PACKAGE and path.name in ("__init__.py", "__main__.py"):
            continue
        for line, name in imported(path):
            group = name.split(".")[1] if name.count(".") else ""
            if group in order and order.index(group) > rank:
                upward.append(f"{path.relative_to(PACKAGE)}:{line}: {name}")
    assert not upward, "imports of a group below:\n" + "\n".join(upward)


def test_the_rule_finds_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from kernel_matrix.cli.console import console\n")
    assert imported(module) == [(2, "kernel_matrix.cli.console")]


# What plans and executes a build, in the groups that own them: only running/ composes them (issue 37's
# "one runner"), so that a build, a cell, a Python-only variant and verify's rebuild are planned,
# built and checked one way. The group that owns a name may use it inside (pool runs build_cell).
STAGE_ENTRIES = {
    "kernel_matrix.building.native_build": {"plan_build", "build_variant", "build_noarch"},
    "kernel_matrix.containers.cell": {"build_cell"},
    "kernel_matrix.containers.pool": {"build_cells"},
}


def composers(source: str, group: str) -> list[str]:
    """Where source, a module of group, imports a STAGE_ENTRIES name from another group:
    `line: module.name`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module in STAGE_ENTRIES
            and node.level == 0
            and node.module.split(".")[1] != group
        ):
            names = sorted(a.name for a in node.names if a.name in STAGE_ENTRIES[node.module])
            found += [f"{node.lineno}: {node.module}.{name}" for name in names]
    return found


def test_only_the_runner_composes_plans_and_builds():
    outside = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (group := path.relative_to(PACKAGE).parts[0]) != "running"
        for line in composers(path.read_text(), group)
    ]
    assert not outside, "plans and builds composed outside running/:\n" + "\n".join(outside)


def test_the_runner_rule_finds_a_composer():
    source = "def f():\n    from kernel_matrix.building.native_build import plan_build, write_build_stats\n"
    assert composers(source, "releasing") == ["2: kernel_matrix.building.native_build.plan_build"]
    assert composers(source, "building") == []  # its own group


def test_no_cli_module_grows_past_its_limit():
    long = {
        p.name: n for p in (PACKAGE / "cli").glob("*.py") if (n := len(p.read_text().splitlines())) > CLI_MODULE_LINES
    }
    assert not long, f"CLI modules over {CLI_MODULE_LINES} lines (move their logic to its stage): {long}"


# Test folders beside the package's groups: whole paths (workflows, README, real kernels), the
# project itself (tiers, lints, layout, its own release) and attacks replayed.
TEST_FOLDERS_BESIDE = {"end_to_end", "project", "security"}


def test_tests_are_laid_out_by_the_stage_they_test():
    """A folder of tests per group of the package that has tests, plus TEST_FOLDERS_BESIDE; no
    test module at the top of tests/ (which holds the shared fixtures and stand-ins)."""
    tests = Path(__file__).resolve().parent.parent
    assert sorted(p.name for p in tests.glob("test_*.py")) == []
    folders = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert folders - TEST_FOLDERS_BESIDE <= set(groups()), folders - TEST_FOLDERS_BESIDE - set(groups())
    # Unique names: conftest puts every folder on sys.path, where a module is found by its name.
    names = [p.name for p in tests.glob("*/*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
