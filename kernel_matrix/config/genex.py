"""CMake generator expressions in a kernel's compiler flags, evaluated as kernel-builder's
CMake target evaluates them.

kernel-builder hands a section's `cxx-flags` (or `cuda-flags`) to CMake as one list inside
`$<$<COMPILE_LANGUAGE:CXX>:a;b;...>` (kernel-builder/src/pyproject/templates/kernel.cmake),
so a kernel may write `$<$<CXX_COMPILER_ID:MSVC>:/arch:AVX2>` and CMake drops it on Linux.
kernel-matrix calls the compilers itself, so it does what CMake does there: evaluate the
list as that one string (an expression may span flags; a bare `>` closes the wrapper), for
a Release build with g++ (or clang++) and nvcc on Linux, then split the result as a CMake
list and drop empty entries. `IF`, `AND` and `OR` evaluate no more arguments than decide
them, as CMake 3.28+ does. An expression it does not know ($<TARGET_PROPERTY:...>) and a
CMake variable (`${X}`, which CMake substitutes first) are refused: passed on as written,
the compiler would take them for file names."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

# CMake's false constants, compared upper-case ($<BOOL:...>, cmValue::IsOff); NOTFOUND and
# a -NOTFOUND suffix are false only as written, upper-case.
_FALSE = {"", "0", "FALSE", "OFF", "N", "NO", "IGNORE"}
_VARIABLE = re.compile(r"\$\{[^}]*\}")


class GenexError(ValueError):
    """A generator expression kernel-matrix does not evaluate, or one that is malformed."""


@dataclass(frozen=True)
class Context:
    """What a flag list is evaluated for: the language of the files it is given to (CXX,
    CUDA), the C++ compiler's CMake id, and the compilers' versions."""

    language: str
    cxx_id: str = "GNU"
    cxx_version: str = "0"
    cuda_version: str = "0"

    def compiler_id(self, language: str) -> str:
        """CMake's id of the compiler of language: "" for one the project does not enable
        (kernel-builder's cpu and cuda projects enable CXX and CUDA, not C)."""
        return {"CXX": self.cxx_id, "CUDA": "NVIDIA"}.get(language, "")


# The builds a flag list can meet, for checking it where build.toml is read (the versions:
# the oldest and newest toolchains kernel-matrix builds with).
_BUILDS = [
    Context(language, cxx_id, cxx_version, cuda_version)
    for language in ("CXX", "CUDA")
    for cxx_id in ("GNU", "Clang")
    for cxx_version, cuda_version in (("8.5.0", "12.6"), ("14.2.0", "13.2"))
]


def expand(flags: list[str], context: Context) -> list[str]:
    """The compiler arguments a flag list means in context, as CMake makes them of
    `$<$<COMPILE_LANGUAGE:L>:flag;flag;...>` for a file of language L."""
    if not any(not flag or any(mark in flag for mark in ("$<", ">", ";", "[", "\\")) for flag in flags):
        return list(flags)  # nothing CMake would change
    return _cmake_list(_evaluate("$<1:" + ";".join(flags) + ">", context))


def check(flags: list[str]) -> None:
    """GenexError naming what of a flag list kernel-matrix cannot evaluate in a build it
    makes (a branch no such build takes, an MSVC-only one, is not looked into)."""
    joined = ";".join(flags)
    if variable := _VARIABLE.search(joined):
        raise GenexError(
            f"{variable.group()} is a CMake variable: kernel-builder's CMake substitutes it, kernel-matrix "
            "does not (write its value)"
        )
    if "$<" in joined:
        for context in _BUILDS:
            expand(flags, context)


def _cmake_list(text: str) -> list[str]:
    """text split at the `;` of a CMake list: not inside [...], and `\\;` a separator too
    (what reaches COMPILE_OPTIONS through kernel-builder's quoting); empty entries dropped."""
    return [item for item in _split(text, ";", "[", "]", escaped=True) if item]


def _split(text: str, separator: str, opener: str, closer: str, escaped: bool = False) -> list[str]:
    """text split at each separator outside opener...closer (nested); escaped: a backslash
    before a separator is dropped, the separator kept as one."""
    parts: list[str] = []
    current: list[str] = []
    depth, i = 0, 0
    while i < len(text):
        if escaped and text.startswith("\\" + separator, i):
            i += 1
            char = separator
        elif text.startswith(opener, i):
            depth += 1
            current.append(opener)
            i += len(opener)
            continue
        else:
            char = text[i]
            if char == closer and depth:
                depth -= 1
        if char == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    parts.append("".join(current))
    return parts


def _evaluate(text: str, context: Context) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$<", i):
            end = _closing(text, i)
            out.append(_expression(text[i + 2 : end], context))
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
    return _split(text, separator, "$<", ">")


def _expression(content: str, context: Context) -> str:
    """The value of one `$<content>`: a condition (`$<1:value>`, `$<0:value>`), a value
    (`$<CONFIG>`) or an operation on its comma-separated arguments (`$<AND:1,0>`)."""
    parts = _split_top(content, ":")
    head = _evaluate(parts[0], context)
    if len(parts) == 1:
        if head in _VALUES:
            return _VALUES[head](context)
        raise GenexError(f"$<{content}> is a generator expression kernel-matrix does not evaluate")
    rest = ":".join(parts[1:])
    if head in ("0", "1"):  # $<condition:value>: a value's colons and commas are its own
        return _evaluate(rest, context) if head == "1" else ""
    if "$<" in parts[0]:  # a computed condition that is neither 0 nor 1
        raise GenexError(f"the condition of $<{parts[0]}:...> evaluates to {head!r}, not 0 or 1")
    raw = _split_top(rest, ",")
    if head in _LAZY:
        return _LAZY[head](raw, context)
    operation = _OPERATIONS.get(head)
    if operation is None:
        raise GenexError(f"$<{head}:...> is a generator expression kernel-matrix does not evaluate")
    arity, apply = operation
    if arity is not None and len(raw) != arity:
        raise GenexError(f"$<{head}:...> takes {arity} argument{'s' if arity > 1 else ''}, not {len(raw)}")
    return apply([_evaluate(a, context) for a in raw], context)


def _truth(value: str, expression: str) -> bool:
    if value not in ("0", "1"):
        raise GenexError(f"$<{expression}:...> takes 0 or 1, not {value!r}")
    return value == "1"


def _bit(value: bool) -> str:
    return "1" if value else "0"


def _cmake_bool(value: str) -> bool:
    return not (value.upper() in _FALSE or value == "NOTFOUND" or value.endswith("-NOTFOUND"))


def _version(text: str) -> Version:
    try:
        return Version(text.strip() or "0")
    except InvalidVersion:
        raise GenexError(f"{text!r} is not a version") from None


def _lazy_if(raw: list[str], context: Context) -> str:
    if len(raw) != 3:
        raise GenexError(f"$<IF:...> takes 3 arguments, not {len(raw)}")
    return _evaluate(raw[1] if _truth(_evaluate(raw[0], context), "IF") else raw[2], context)


def _lazy_logic(name: str, stop: bool) -> Callable[[list[str], Context], str]:
    """AND (stops at the first 0) and OR (at the first 1)."""

    def apply(raw: list[str], context: Context) -> str:
        for argument in raw:
            if _truth(_evaluate(argument, context), name) == stop:
                return _bit(stop)
        return _bit(not stop)

    return apply


_LAZY: dict[str, Callable[[list[str], Context], str]] = {
    "IF": _lazy_if,
    "AND": _lazy_logic("AND", stop=False),
    "OR": _lazy_logic("OR", stop=True),
}
_VALUES: dict[str, Callable[[Context], str]] = {
    "CONFIG": lambda c: "Release",
    "PLATFORM_ID": lambda c: "Linux",
    "COMPILE_LANGUAGE": lambda c: c.language,
    "CXX_COMPILER_ID": lambda c: c.compiler_id("CXX"),
    "C_COMPILER_ID": lambda c: c.compiler_id("C"),
    "CUDA_COMPILER_ID": lambda c: c.compiler_id("CUDA"),
    "CXX_COMPILER_VERSION": lambda c: c.cxx_version,
    "C_COMPILER_VERSION": lambda c: "",
    "CUDA_COMPILER_VERSION": lambda c: c.cuda_version,
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
    "BOOL": (1, lambda a, c: _bit(_cmake_bool(a[0]))),
    "STREQUAL": (2, lambda a, c: _bit(a[0] == a[1])),
    "EQUAL": (2, lambda a, c: _bit(_version(a[0]) == _version(a[1]))),
    "IN_LIST": (2, lambda a, c: _bit(a[0] in a[1].split(";"))),
    "VERSION_LESS": (2, lambda a, c: _bit(_version(a[0]) < _version(a[1]))),
    "VERSION_GREATER": (2, lambda a, c: _bit(_version(a[0]) > _version(a[1]))),
    "VERSION_EQUAL": (2, lambda a, c: _bit(_version(a[0]) == _version(a[1]))),
    "VERSION_LESS_EQUAL": (2, lambda a, c: _bit(_version(a[0]) <= _version(a[1]))),
    "VERSION_GREATER_EQUAL": (2, lambda a, c: _bit(_version(a[0]) >= _version(a[1]))),
    "LOWER_CASE": (1, lambda a, c: a[0].lower()),
    "UPPER_CASE": (1, lambda a, c: a[0].upper()),
    # A flag of the build, not of an installed package's users (install(EXPORT)).
    "BUILD_INTERFACE": (None, lambda a, c: ",".join(a)),
    "INSTALL_INTERFACE": (None, lambda a, c: ""),
}
