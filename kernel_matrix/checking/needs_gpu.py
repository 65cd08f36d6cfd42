"""A pytest plugin for a kernel's own suite on a machine without a GPU: `kernel-matrix test`
copies this file beside the suite and loads it with `-p` (so it imports nothing of
kernel-matrix, which the tests' Python may not have).

Why the suite runs at all there: kernels-community's CI runs a kernel's `kernels_ci` tests
on GPU runners only (its build workflow's test job), and its suites choose a device as they
run (relu's takes CUDA where torch has it, else the CPU; activation's names `cuda:0`): no
marker says which cases need a GPU. So they run, and a case whose only failure is that it
asked torch for CUDA where there is none (the exception torch raises then) is reported
skipped, "needs a GPU: <that exception>", not failed. It is the kernel's failure, and stays
one, where the request came through the kernel's own code (a frame of the variant under
test, or of a kernel it loads, on the way: a CPU variant that puts a tensor on CUDA is
broken on a CPU); every other failure stays one too, and with a GPU nothing changes."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Generator
from typing import Any

import pytest

# The start of the skip reason: `kernel-matrix test` counts these in pytest's JUnit report.
REASON = "needs a GPU: "
# The folders of the kernel's code (the variant under test, the kernels it loads), os.pathsep-separated.
KERNEL_CODE_ENV = "KERNEL_MATRIX_KERNEL_CODE"
# What torch raises where a tensor or a call asks for CUDA and no GPU can serve it: a CUDA torch
# without a driver, with the GPUs hidden (CUDA_VISIBLE_DEVICES=) or none there; a CPU build of torch.
NO_GPU = (
    "Found no NVIDIA driver on your system",
    "No CUDA GPUs are available",
    "no CUDA-capable device is detected",
    "Torch not compiled with CUDA enabled",
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed or call.excinfo is None or hasattr(report, "wasxfail"):
        return
    why = needs_gpu(call.excinfo.value)
    if why is not None:
        report.outcome = "skipped"
        line = item.location[1]
        report.longrepr = (str(item.path), 0 if line is None else line + 1, REASON + why)


def needs_gpu(exc: BaseException) -> str | None:
    """The exception's first line where it says only that no GPU is here, else None."""
    torch = sys.modules.get("torch")
    if torch is None or torch.cuda.is_available() or _through_kernel(exc):
        return None
    seen: BaseException | None = exc
    while seen is not None:  # torch re-raises some lazily, as the cause or context of another
        text = str(seen)
        if any(message in text for message in NO_GPU):
            first = (text.strip().splitlines() or [""])[0].split(". ")[0]
            return f"{type(seen).__name__}: {first}"[:200]
        seen = seen.__cause__ or seen.__context__
    return None


def _through_kernel(exc: BaseException) -> bool:
    """Whether a frame of the kernel's own code is on the exception's way."""
    folders = [os.path.realpath(p) + os.sep for p in os.environ.get(KERNEL_CODE_ENV, "").split(os.pathsep) if p]
    files = (os.path.realpath(frame.f_code.co_filename) for frame, _ in traceback.walk_tb(exc.__traceback__))
    return any(file.startswith(tuple(folders)) for file in files) if folders else False
