"""A long build says how far it is: run_steps reports each step as it ends (not
once all have), with the steps done of all and the slowest compile so far."""

import sys
import time

import pytest

from kernel_matrix.building.compile import Progress, Step, run_steps


def _step(tmp_path, name: str, seconds: float) -> Step:
    output = tmp_path / f"{name}.o"
    code = f"import time, pathlib; time.sleep({seconds}); pathlib.Path({str(output)!r}).write_bytes(b'')"
    return Step(f"compile {name}.cu", [sys.executable, "-c", code], output, compilers=(sys.executable,))


@pytest.mark.processes
def test_each_step_is_reported_as_it_ends_with_the_count_and_the_slowest(tmp_path):
    slow, fast = _step(tmp_path, "slow", 2.0), _step(tmp_path, "fast", 0.1)
    link = Step("link k.so", [sys.executable, "-c", "pass"], tmp_path / "k.so")
    progress = Progress()
    seen = []

    def on_done(step: Step, cached: bool) -> None:
        seen.append((step.label, progress.done, progress.total, progress.slowest, time.monotonic()))

    started = time.monotonic()
    run_steps([slow, fast], link, cwd=tmp_path, on_done=on_done, jobs=2, progress=progress)
    assert [(label, done, total) for label, done, total, _, _ in seen] == [
        ("compile fast.cu", 1, 3),
        ("compile slow.cu", 2, 3),
        ("link k.so", 3, 3),
    ]
    assert seen[0][4] - started < 1.5, "the fast compile is reported while the slow one still runs"
    assert seen[0][3][1] == "compile fast.cu" and seen[1][3][1] == "compile slow.cu" and seen[1][3][0] >= 2.0
    assert progress.slowest == seen[1][3], "the link is not a compile"
