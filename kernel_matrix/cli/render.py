"""What the command line prints: rich tables of cells, build results, wheels, ABI
reports and release plans, and the container builds' Markdown table (build/summary.md,
the GitHub job summary). Pure functions from results to renderables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kernel_matrix.inert import markdown_cell, styled

if TYPE_CHECKING:
    from kernel_matrix.checking.abi import AbiReport
    from kernel_matrix.containers.pool import CellResult
    from kernel_matrix.planning.matrix import Cell
    from kernel_matrix.releasing.publish import Plan
    from kernel_matrix.releasing.wheels import WheelResult
    from kernel_matrix.running.native import Built


def _table(title: str, columns: Iterable[str]) -> Table:
    table = Table(title=title, show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _status(ok: bool, text: str) -> Text:
    return Text(text, style="green" if ok else "red")


_OK = Text("ok", style="green")


def built_grid(built: Built) -> RenderableType:
    """A native build's result: a compiled variant's name, op namespace, folder, objects and
    seconds; a Python-only kernel's variants, one line each. Paths are shown literally."""
    if built.module is None:
        return Group(*(styled((name, "bold"), f": {folder}") for name, folder in built.variants))
    ((name, folder),) = built.variants
    grid = Table.grid(padding=(0, 2))
    for key, value in (
        ("variant", name),
        ("op namespace", built.module),
        ("directory", str(folder)),
        ("objects", f"{built.compiled} compiled, {built.cached} from the cache"),
        ("seconds", f"{built.seconds:.1f}"),
    ):
        grid.add_row(Text(key, style="bold"), styled(value))
    return grid


def cells_table(title: str, cells: Sequence[Cell]) -> Table:
    table = _table(
        title, ("kernel", "variant", "torch", "CUDA", "arch", "image", "torch index", "build runner", "test runner")
    )
    for cell in cells:
        v = cell.variant
        table.add_row(
            cell.kernel,
            v.name,
            v.torch,
            v.cuda or "-",
            v.arch,
            cell.image,
            cell.torch_index,
            ",".join(cell.build_runner),
            # A CUDA cell its GPU runners cannot run (Cell.gpu_testable) has no GPU job.
            ",".join(cell.test_runner) if cell.variant.backend != "cuda" or cell.gpu_testable else "-",
        )
    return table


SUMMARY_COLUMNS = ("kernel", "variant", "status", "seconds", ".so size", "objects cached", "image", "result")


def summary_rows(results: Sequence[CellResult]) -> list[tuple[str, ...]]:
    return [
        (
            r.cell.kernel or "-",
            r.cell.name,
            r.status,
            f"{r.seconds:.1f}",
            f"{r.so_bytes / 1e6:.2f} MB" if r.so_bytes else "-",
            r.objects,
            r.image or "-",
            r.message,
        )
        for r in results
    ]


def summary_markdown(results: Sequence[CellResult]) -> str:
    """The results as a Markdown table (for build/summary.md and the GitHub job summary); each
    cell shows its text literally (a failure line holds a compiler's or a container's words)."""
    rows = ["| " + " | ".join(map(markdown_cell, row)) + " |" for row in summary_rows(results)]
    header = "| " + " | ".join(SUMMARY_COLUMNS) + " |"
    return "\n".join([header, "|" + "---|" * len(SUMMARY_COLUMNS), *rows])


def build_results_table(results: Sequence[CellResult]) -> Table:
    table = _table(f"container builds ({len(results)} cells)", SUMMARY_COLUMNS)
    for r, row in zip(results, summary_rows(results), strict=True):
        table.add_row(*row[:2], _status(r.ok, r.status), *row[3:])
    return table


def wheels_table(results: Sequence[WheelResult]) -> Table:
    table = _table(f"wheels ({len(results)} cells)", ("kernel", "variant", "status", "wheel"))
    for r in results:
        table.add_row(r.cell.kernel, r.cell.name, _status(r.ok, "built" if r.ok else "FAILED"), r.message)
    return table


def abi_table(name: str, reports: Sequence[AbiReport], python_abi: str, manylinux: str) -> Table:
    table = _table(f"ABI of {name}", ("library", f"abi3 (Python {python_abi})", manylinux))
    for report in reports:
        table.add_row(
            report.library.name,
            "\n".join(report.abi3_violations) or _OK,
            "\n".join(report.manylinux_violations) or (_OK if report.manylinux else "-"),
        )
    return table


def plan_table(plan: Plan, *, dry_run: bool) -> Table:
    table = Table(
        title=f"{plan.repo_id}@{plan.branch}" + (" (dry run: nothing written)" if dry_run else ""), show_edge=False
    )
    for column in ("change", "files", "bytes"):
        table.add_column(column)
    for change, entries in (("added", plan.added), ("changed", plan.changed), ("unchanged", plan.unchanged)):
        table.add_row(change, str(len(entries)), str(sum(f.size for f in entries)))
    table.add_row("deleted", str(len(plan.deleted)), "-")
    return table


def plan_lines(plan: Plan) -> list[str]:
    """Each added, changed and deleted file of a release plan."""
    lines = [
        f"  {change:8} {f.path_in_repo} ({f.size} bytes)"
        for change, entries in (("added", plan.added), ("changed", plan.changed))
        for f in entries
    ]
    return lines + [f"  deleted  {path}" for path in plan.deleted]
