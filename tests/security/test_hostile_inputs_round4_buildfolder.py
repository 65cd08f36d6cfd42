"""Issue 41, findings 1 and 4: the host owns its build folder, and what it prints is inert.

A repository's files are an attacker's, and git stores symbolic links: a pull request can
commit build/logs/<cell>.probe.txt -> ~/.ssh/authorized_keys, and a build (a `-wrapper` in
build.toml's flags) that writes /out/logs/<cell>.probe.txt had the host copy that text over
the link's target; a FIFO at build/logs/<cell>.container.log hung the host after its
container ended. A compiler's output reached the terminal with its escape sequences, and
summary.md's table with its `|` and `<`."""

import io
import os
import socket
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest
from conftest import KERNEL_DIR, container_build_cli, kernel_matrix
from markdown_it import MarkdownIt
from test_container_attacks import hostile_kernel

# What a hostile compiler prints: a terminal title (OSC ... BEL), then red text (CSI) and a C1
# CSI; a right-to-left override (g++ warns of it, escaped, before the #error: not in a source);
# and a Markdown table breaker with an HTML tag.
COMPILER_ESCAPES = "\x1b]0;owned\x07\x1b[31mred\x9b2J"
COMPILER_ESCAPES_SHOWN = r"\x1b]0;owned\x07\x1b[31mred\x9b2J"
ESCAPES, ESCAPES_SHOWN = COMPILER_ESCAPES + "\u202e", COMPILER_ESCAPES_SHOWN + r"\u202e"
TABLE_BREAKER = "a | b <img src=x onerror=alert(1)> [c](https://example.com) `d` *e*"


def ends_within(seconds: float, action) -> object:
    """action() in a thread; its result, or the test fails if it is still running after `seconds`."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still blocked after {seconds} s")
    return outcome[0]


# -- the build folder: checked before a container build runs ----------------------------------


def test_a_committed_link_under_build_is_refused_before_the_build_writes_through_it(
    local_cuda_cell, kernel_copy, tmp_path
):
    cell = local_cuda_cell
    outside = tmp_path / "authorized_keys"
    outside.write_text("ssh-ed25519 AAAA owner\n")
    # The build writes /out/logs/<cell>.probe.txt, a log of the cell's own name (those come back).
    kernel = hostile_kernel(
        kernel_copy,
        f"mkdir -p /out/logs\necho 'ssh-ed25519 AAAA attacker' > /out/logs/{cell.name}.probe.txt\nexit 1\n",
    )
    build_dir = kernel / "build"  # the repository's own build folder, as its commit holds it
    link = build_dir / "logs" / f"{cell.name}.probe.txt"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    result = container_build_cli(cell, build_dir, kernel, "--cuda-capabilities", "9.0")
    assert outside.read_text() == "ssh-ed25519 AAAA owner\n"
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"error: {link}: a symbolic link in the build folder: refused (the host writes there only plain files "
        "and folders, never through a link, FIFO or device: remove it)"
    ]
    assert link.is_symlink()  # refused, not removed: what the repository holds is its owner's to look at


def test_a_fifo_at_a_cells_log_ends_the_run_within_the_cell_timeout(local_cuda_cell, kernel_copy, tmp_path):
    """Round three's FIFO, still hanging at 89a0c53: the host's own open() of the log blocked
    after the container ended, which --cell-timeout (the container's limit) does not bound."""
    cell = local_cuda_cell
    kernel = hostile_kernel(kernel_copy, "exit 1\n")  # the compile fails at once: no build to wait for
    build_dir = tmp_path / "build"
    fifo = build_dir / "logs" / f"{cell.name}.container.log"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    started = time.monotonic()
    try:
        result = kernel_matrix(
            "build", "--variant", cell.name, "--image", "offline", "--kernel-dir", str(kernel),
            "--build-dir", str(build_dir), "--cell-timeout", "30", timeout=120,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("kernel-matrix build still blocked on the FIFO 120 s later (--cell-timeout 30)")
    assert time.monotonic() - started < 30
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"error: {fifo}: a FIFO in the build folder: refused (the host writes there only plain files "
        "and folders, never through a link, FIFO or device: remove it)"
    ]


@pytest.mark.parametrize("kind", ["link to a file", "link to a folder", "fifo", "socket", "root link"])
def test_the_build_folder_check_refuses_what_is_not_a_plain_file_or_folder(tmp_path, kind):
    from kernel_matrix.errors import ConfigError, ExitCode
    from kernel_matrix.hostfiles import UnsafeBuildDirError, check_build_dir

    root = tmp_path / "build"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "a.build.log").write_text("fine\n")
    (root / ".cache" / "objects" / "trusted").mkdir(parents=True)
    check_build_dir(root)  # plain files and folders: nothing to say
    check_build_dir(tmp_path / "absent")  # made by this run
    outside = tmp_path / "outside"
    outside.mkdir()
    bad = {
        "link to a file": root / "logs" / "x.probe.txt",
        "link to a folder": root / ".cache" / "objects" / "trusted" / "img2gray",
        "fifo": root / "logs" / "x.container.log",
        "socket": root / ".inputs" / "x.sha256",
        "root link": tmp_path / "linked-build",
    }[kind]
    bad.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(bad))
    elif kind == "root link":
        bad.symlink_to(root, target_is_directory=True)
    else:
        bad.symlink_to(outside / "x", target_is_directory=kind == "link to a folder")
    with pytest.raises(UnsafeBuildDirError) as raised:
        check_build_dir(root if kind != "root link" else bad)
    assert isinstance(raised.value, ConfigError) and raised.value.exit_code == ExitCode.CONFIG
    assert str(raised.value).startswith(f"{bad}: a ")
    assert len(str(raised.value).splitlines()) == 1


# -- the host's writes: never through a link, never blocking --------------------------------


def test_copying_a_containers_file_replaces_a_link_at_the_target_and_leaves_its_target(tmp_path):
    """copy_regular opened its target with open(target, "wb"): through a committed link."""
    from kernel_matrix.containers.container_output import copy_regular

    outside = tmp_path / "authorized_keys"
    outside.write_text("owner\n")
    source = tmp_path / "out" / "x.probe.txt"
    source.parent.mkdir()
    source.write_text("attacker\n")
    target = tmp_path / "build" / "logs" / "x.probe.txt"
    target.parent.mkdir(parents=True)
    target.symlink_to(outside)
    copy_regular(source, target)
    assert outside.read_text() == "owner\n"
    assert not target.is_symlink() and target.read_text() == "attacker\n"


def test_a_folder_the_host_writes_into_is_never_a_link(tmp_path):
    from kernel_matrix.hostfiles import UnsafeBuildDirError, append_log, write_file

    outside = tmp_path / "ssh"
    outside.mkdir()
    logs = tmp_path / "build" / "logs"
    logs.parent.mkdir()
    logs.symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafeBuildDirError, match=f"^{logs}: a symbolic link"):
        write_file(logs / "authorized_keys", "attacker\n")
    with pytest.raises(UnsafeBuildDirError, match=f"^{logs}: a symbolic link"):
        append_log(logs / "authorized_keys", "attacker\n")
    assert list(outside.iterdir()) == []


def test_a_fifo_at_a_log_is_replaced_or_refused_at_once(tmp_path):
    """A whole file is renamed over the FIFO (never opened); an append refuses it (O_NONBLOCK)."""
    from kernel_matrix.hostfiles import UnsafeBuildDirError, append_log, write_file

    logs = tmp_path / "logs"
    logs.mkdir()
    whole, appended = logs / "a.container.log", logs / "b.container.log"
    os.mkfifo(whole)
    os.mkfifo(appended)
    assert ends_within(5, lambda: write_file(whole, "log\n")) is None
    assert whole.read_text() == "log\n"
    refused = ends_within(5, lambda: append_log(appended, "traceback\n"))
    assert isinstance(refused, UnsafeBuildDirError) and str(refused).startswith(f"{appended}: a FIFO")
    # Also with a reader at the other end (open() would succeed): not a plain file, refused.
    reader = os.open(appended, os.O_RDONLY | os.O_NONBLOCK)
    try:
        refused = ends_within(5, lambda: append_log(appended, "traceback\n"))
        assert isinstance(refused, UnsafeBuildDirError) and str(refused).startswith(f"{appended}: a FIFO")
    finally:
        os.close(reader)
    link = logs / "c.container.log"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeBuildDirError, match="a symbolic link"):
        append_log(link, "traceback\n")
    assert not (tmp_path / "elsewhere").exists()
    append_log(logs / "d.container.log", "one\n")
    append_log(logs / "d.container.log", "two\n")
    assert (logs / "d.container.log").read_text() == "one\ntwo\n"


# -- output is inert --------------------------------------------------------------------------


@pytest.mark.processes
def test_an_escape_sequence_in_a_compilers_output_is_printed_escaped(kernel_copy, tmp_path):
    """A real compile (g++ prints an #error's text as it is), the failure line the CLI prints."""
    source = kernel_copy / "csrc" / "img2gray_cpu.cpp"
    source.write_text(f'#error "{COMPILER_ESCAPES}"\n' + source.read_text())
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(tmp_path / "b"), "--no-cache"
    )
    assert result.returncode == 5, result.stdout + result.stderr
    printed = result.stdout + result.stderr
    assert not {"\x1b", "\x07", "\x9b"} & set(printed), printed
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert COMPILER_ESCAPES_SHOWN in line
    # The log keeps the compiler's bytes: it is a file, read with a pager that shows them as they are.
    (log,) = (tmp_path / "b" / "logs").glob("*.log")
    assert COMPILER_ESCAPES in log.read_text()


def failed_container_build(monkeypatch, tmp_path):
    """`kernel-matrix build --variant CELL` in a GitHub Actions step, its cell failing with a
    hostile line (what a container's last output line can say; the engine and the build faked:
    the host's handling of the line is what is tested). (result, build folder, job summary, line)."""
    from typer.testing import CliRunner

    from kernel_matrix.cli import app
    from kernel_matrix.containers import images, pool
    from kernel_matrix.errors import BuildError
    from kernel_matrix.planning.matrix import load_matrix, select
    from kernel_matrix.running import cells as cell_runner

    (cell,) = select(load_matrix(KERNEL_DIR.parent / "build_matrix.yaml"), only="torch=2.14,arch=x86_64,cuda=13.0")
    failure = f"{cell.name}: the build in builder failed (exit 1): {ESCAPES} {TABLE_BREAKER}"

    def fake_build(client, cell, image, **kwargs):
        raise BuildError(failure)

    monkeypatch.setattr(pool, "build_cell", fake_build)
    monkeypatch.setattr(images, "builder_for", lambda *a, **kw: "builder")
    engine = SimpleNamespace(images=SimpleNamespace(get=lambda tag: SimpleNamespace(id="sha256:0")))
    monkeypatch.setattr(cell_runner, "connect", lambda: engine)
    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    build_dir = tmp_path / "b"
    result = CliRunner().invoke(app, ["build", "--variant", cell.name, "--build-dir", str(build_dir)])
    assert result.exception is not None and result.exception.exit_code == 5, result.output
    return result, build_dir, step_summary, failure


@pytest.mark.processes
def test_a_containers_failure_line_is_printed_escaped(monkeypatch, tmp_path):
    result, *_ = failed_container_build(monkeypatch, tmp_path)
    assert not {"\x1b", "\x07", "\x9b", "\u202e"} & set(result.output), result.output
    assert "\\x1b]0;owned" in result.output


@pytest.mark.processes
def test_a_markdown_table_breaker_in_a_failure_line_is_escaped_in_the_summaries(monkeypatch, tmp_path):
    """build/summary.md and the GitHub job summary, read by a real Markdown parser (tables on)."""
    from kernel_matrix.cli.render import SUMMARY_COLUMNS

    _, build_dir, step_summary, failure = failed_container_build(monkeypatch, tmp_path)
    summary = (build_dir / "summary.md").read_text()
    assert step_summary.read_text() == summary
    html = MarkdownIt("commonmark").enable("table").render(summary)
    rows = html.split("<tr>")[1:]
    assert len(rows) == 2  # the header and the one cell
    assert all(row.count("<td>") + row.count("<th>") == len(SUMMARY_COLUMNS) for row in rows), html
    result_cell = rows[1].split("<td>")[-1].split("</td>")[0]
    shown = failure.replace(ESCAPES, ESCAPES_SHOWN)
    assert result_cell == shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert "<img" not in html and "<a " not in html and "<code>" not in html and "<em>" not in html
    # Names keep their intraword underscores as they are (they cannot make emphasis).
    assert "x86_64" in summary


def test_the_consoles_print_control_characters_escaped_whoever_wrote_them():
    """Every line kernel-matrix prints (both consoles, a plain string, a styled line, a table
    cell): control characters escaped; the line's own structure (newlines) kept."""
    from rich.table import Table

    from kernel_matrix.cli.console import InertConsole, styled

    sink = io.StringIO()
    screen = InertConsole(file=sink, width=200, markup=False, highlight=False)
    table = Table()
    table.add_column("result")
    table.add_row(f"cell: {ESCAPES}")
    screen.print(f"one {ESCAPES}\ntwo\r\x1b[2K")
    screen.print(styled(("error:", "red"), f" {ESCAPES}"))
    screen.print(table)
    printed = sink.getvalue()
    assert not {"\x1b", "\x07", "\x9b", "\u202e", "\r"} & set(printed), printed
    assert printed.count(ESCAPES_SHOWN) == 3
    assert f"one {ESCAPES_SHOWN}\ntwo\\r\\x1b[2K\n" in printed
