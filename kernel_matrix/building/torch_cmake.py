"""The compile definitions a target linking `torch` gets from torch's CMake package, as
kernel-builder's targets get them (utils.cmake: `target_link_libraries(... PRIVATE torch)`):
read from the build's own torch, share/cmake/Caffe2/Caffe2Targets.cmake. A CUDA build of
torch 2.14 gives USE_DISTRIBUTED, USE_C10D_GLOO, USE_RPC, USE_TENSORPIPE (torch_cpu) and
USE_NVSHMEM, USE_C10D_NCCL (torch_cuda); headers such as ProcessGroupNCCL.hpp are empty
without them."""

from __future__ import annotations

import re
from pathlib import Path

_TARGET = re.compile(r"^set_target_properties\((\S+) PROPERTIES\n(.*?)^\)", re.M | re.S)
_PROPERTY = re.compile(r'^\s*(\w+) "(.*)"$', re.M)
# A definition that is another target's (torch_cpu_library forwards torch_cpu's).
_FORWARDED = re.compile(r"\\?\$<TARGET_PROPERTY:([\w:]+),INTERFACE_COMPILE_DEFINITIONS>")


def interface_defines(torch_dir: Path, *, cuda: bool) -> list[str]:
    """The INTERFACE_COMPILE_DEFINITIONS reached from the `torch` target through its link
    interface, in CMake's order. cuda=False leaves out torch's CUDA targets, as a CPU
    variant is built against a CPU build of torch. [] where torch ships no CMake package."""
    try:
        text = (torch_dir / "share" / "cmake" / "Caffe2" / "Caffe2Targets.cmake").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    targets = {name: dict(_PROPERTY.findall(body)) for name, body in _TARGET.findall(text)}
    found: dict[str, None] = {}  # insertion-ordered: the command line (and cache key) is stable
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name not in targets or (not cuda and "cuda" in name):
            return
        seen.add(name)
        for entry in filter(None, targets[name].get("INTERFACE_COMPILE_DEFINITIONS", "").split(";")):
            if forwarded := _FORWARDED.fullmatch(entry):
                visit(forwarded.group(1))
            elif "$<" not in entry:  # other generator expressions: none that CMake would give here
                found[entry] = None
        for entry in targets[name].get("INTERFACE_LINK_LIBRARIES", "").split(";"):
            visit(entry)

    visit("torch")
    return list(found)
