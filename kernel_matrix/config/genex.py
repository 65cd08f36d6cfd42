"""CMake generator expressions in a kernel's compiler flags, evaluated as kernel-builder's
CMake target evaluates them.

kernel-builder hands `cxx-flags` and `cuda-flags` to CMake unchanged, wrapped in
`$<$<COMPILE_LANGUAGE:CXX>:...>` (kernel-builder/src/pyproject/templates/kernel.cmake), so
a kernel may write `$<$<CXX_COMPILER_ID:MSVC>:/arch:AVX2>` and CMake drops it on Linux.
kernel-matrix calls the compilers itself: it evaluates the expressions a flag can mean
for a Release build with g++ (or clang++) and nvcc on Linux, drops what comes out empty
and splits what comes out as a CMake list (`a;b`), as CMake's COMPILE_OPTIONS does. Any
other expression ($<TARGET_PROPERTY:...>) is refused where build.toml is read: passed
on as written, the compiler would take it for a file name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# CMake's false constants (if() and $<BOOL:...>), compared upper-case; also anything ending -NOTFOUND.
_FALSE = {"", "0", "FALSE", "OFF", "N", "NO", "IGNORE", "NOTFOUND"}


class GenexError(ValueError):
    """A generator expression kernel-matrix does not evaluate, or one that is malformed."""


@dataclass(frozen=True)
class Context:
    """What a flag is evaluated for: the language of the file it compiles (CXX, CUDA)
    and the compilers' CMake ids."""

    language: str
    cxx_id: str = "GNU"

    def compiler_id(self, language: str) -> str:
        return {"CXX": self.cxx_id, "C": self.cxx_id, "CUDA": "NVIDIA"}.get(language, "")


# Context for checking a flag's expressions without a build: every name a build can meet.
_ANY = Context("CXX")


def expand(flags: list[str], context: Context) -> list[str]:
    """The compiler arguments flags mean in context: each flag's expressions evaluated,
    then split as a CMake list; empty results dropped. A flag with no `$<` and no `;`
    is passed on as written."""
    expanded: list[str] = []
    for flag in flags:
        if "$<" not in flag and ";" not in flag:
            expanded.append(flag)
            continue
        expanded += [part for part in _evaluate(flag, context).split(";") if part]
    return expanded


def check(flag: str) -> None:
    """GenexError naming the first expression of flag kernel-matrix cannot evaluate (on
    any branch, taken or not: the file is the same for every build)."""
    if "$<" in flag:
        _evaluate(flag, _ANY, every_branch=True)


def _evaluate(text: str, context: Context, every_branch: bool = False) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$<", i):
            end = _closing(text, i)
            out.append(_expression(text[i + 2 : end], context, every_branch))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _closing(text: str, start: int) -> int:
    """The index of the `>` that closes the expression opened at start."""
    depth, i = 0, start
    while i < len(text):
        if text.startswith("$<", i):
            depth, i = depth + 1, i + 2
            continue
        if text[i] == ">":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise GenexError(f"{text[start:]!r} is not closed (a generator expression ends with >)")


def _split_top(text: str, separator: str) -> list[str]:
    """text split at each separator outside nested expressions."""
    parts, depth, current, i = [], 0, [], 0
    while i < len(text):
        if text.startswith("$<", i):
            depth += 1
            current.append("$<")
            i += 2
            continue
        char = text[i]
        if char == ">" and depth:
            depth -= 1
        if char == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    parts.append("".join(current))
    return parts


def _expression(content: str, context: Context, every_branch: bool) -> str:
    """The value of one `$<content>`: a condition (`$<1:value>`, `$<0:value>`), a value
    (`$<CONFIG>`) or an operation on its comma-separated arguments (`$<AND:1,0>`)."""
    parts = _split_top(content, ":")
    head = _evaluate(parts[0], context, every_branch)
    if len(parts) == 1:
        if head in _VALUES:
            return _VALUES[head](context)
        raise GenexError(f"$<{content}> is a generator expression kernel-matrix does not evaluate")
    rest = ":".join(parts[1:])
    if head in ("0", "1"):  # $<condition:value>: a value's colons and commas are its own
        value = _evaluate(rest, context, every_branch) if head == "1" or every_branch else ""
        return value if head == "1" else ""
    operation = _OPERATIONS.get(head)
    if operation is None:
        raise GenexError(f"$<{head}:...> is a generator expression kernel-matrix does not evaluate")
    arity, apply = operation
    arguments = [_evaluate(a, context, every_branch) for a in _split_top(rest, ",")]
    if arity is not None and len(arguments) != arity:
        raise GenexError(f"$<{head}:...> takes {arity} argument{'s' if arity > 1 else ''}, not {len(arguments)}")
    return apply(arguments, context)


def _truth(value: str, expression: str) -> bool:
    if value not in ("0", "1"):
        raise GenexError(f"$<{expression}:...> takes 0 or 1, not {value!r}")
    return value == "1"


def _bit(value: bool) -> str:
    return "1" if value else "0"


def _cmake_bool(value: str) -> bool:
    upper = value.upper()
    return not (upper in _FALSE or upper.endswith("-NOTFOUND"))


_VALUES: dict[str, Callable[[Context], str]] = {
    "CONFIG": lambda c: "Release",
    "PLATFORM_ID": lambda c: "Linux",
    "COMPILE_LANGUAGE": lambda c: c.language,
    "CXX_COMPILER_ID": lambda c: c.compiler_id("CXX"),
    "C_COMPILER_ID": lambda c: c.compiler_id("C"),
    "CUDA_COMPILER_ID": lambda c: c.compiler_id("CUDA"),
    "SEMICOLON": lambda c: ";",
    "COMMA": lambda c: ",",
    "ANGLE-R": lambda c: ">",
}
# name -> (how many arguments, or None for one or more; what it evaluates to)
_OPERATIONS: dict[str, tuple[int | None, Callable[[list[str], Context], str]]] = {
    "CONFIG": (None, lambda a, c: _bit("release" in (x.lower() for x in a))),
    "PLATFORM_ID": (None, lambda a, c: _bit("Linux" in a)),
    "COMPILE_LANGUAGE": (None, lambda a, c: _bit(c.language in a)),
    "COMPILE_LANG_AND_ID": (None, lambda a, c: _bit(a[0] == c.language and c.compiler_id(a[0]) in a[1:])),
    "CXX_COMPILER_ID": (None, lambda a, c: _bit(c.compiler_id("CXX") in a)),
    "C_COMPILER_ID": (None, lambda a, c: _bit(c.compiler_id("C") in a)),
    "CUDA_COMPILER_ID": (None, lambda a, c: _bit(c.compiler_id("CUDA") in a)),
    "NOT": (1, lambda a, c: _bit(not _truth(a[0], "NOT"))),
    "AND": (None, lambda a, c: _bit(all(_truth(x, "AND") for x in a))),
    "OR": (None, lambda a, c: _bit(any(_truth(x, "OR") for x in a))),
    "BOOL": (1, lambda a, c: _bit(_cmake_bool(a[0]))),
    "IF": (3, lambda a, c: a[1] if _truth(a[0], "IF") else a[2]),
    "STREQUAL": (2, lambda a, c: _bit(a[0] == a[1])),
    "LOWER_CASE": (1, lambda a, c: a[0].lower()),
    "UPPER_CASE": (1, lambda a, c: a[0].upper()),
}
