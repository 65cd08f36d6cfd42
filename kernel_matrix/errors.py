"""Error classes, each with its own exit code, so that users and CI can tell
"you wrote a bad file" from "the compiler failed" without reading logs."""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # an unexpected error (a bug in kernel-matrix)
    CONFIG = 2  # bad input: build.toml, build_matrix.yaml, arguments
    NOTHING_TO_DO = 3  # the selection is empty
    TOOLCHAIN = 4  # torch, nvcc or a compiler is missing or unusable
    BUILD = 5  # a compiler or linker failed
    TEST = 6  # a variant's test suite failed
    ABI = 7  # a library breaks the abi3 or manylinux rules
    OUTDATED = 8  # upstream has torch releases, CUDA builds, a loader release or a build.toml edition we lack
    NETWORK = 9  # a package index or server cannot be reached
    PUBLISH = 10  # the Hub refused a publish (auth, permissions, missing repo)
    ENGINE = 11  # no container engine answers
    NOT_REPRODUCED = 12  # a rebuild from the sources differs from the variant it verifies
    UNTRUSTED = 13  # a variant is unsigned, signed by someone else, or differs from what was signed


def shared_exit_code(codes: Iterable[ExitCode], mixed: ExitCode) -> ExitCode:
    """The exit code of a run of several failures, the one rule every command that combines
    results uses (docs/exit-codes.md): the code they all share, the most specific (every
    kernel's suite failed: TEST), else `mixed`, the command's own kind of failure."""
    distinct = set(codes)
    return distinct.pop() if len(distinct) == 1 else mixed


def failure_code(value: object) -> ExitCode | None:
    """value as the code of a failure, where it is one (an int naming an ExitCode other than
    OK); else None. For codes from outside this process: a worker's outcome file, a child's
    exit status, which may be anything (a bool, 137 for a kill)."""
    if type(value) is not int:  # a bool is an int too (JSON's true is 1)
        return None
    try:
        code = ExitCode(value)
    except ValueError:
        return None
    return None if code is ExitCode.OK else code


class KernelMatrixError(Exception):
    """An error the user can act on; the CLI prints it as one line."""

    exit_code = ExitCode.FAILURE


class ConfigError(KernelMatrixError):
    exit_code = ExitCode.CONFIG


class NothingToDoError(KernelMatrixError):
    exit_code = ExitCode.NOTHING_TO_DO


class ToolchainError(KernelMatrixError):
    exit_code = ExitCode.TOOLCHAIN


class BuildError(KernelMatrixError):
    exit_code = ExitCode.BUILD

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class TestFailure(KernelMatrixError):
    exit_code = ExitCode.TEST


class AbiError(KernelMatrixError):
    exit_code = ExitCode.ABI


class OutdatedError(KernelMatrixError):
    exit_code = ExitCode.OUTDATED


class NetworkError(KernelMatrixError):
    exit_code = ExitCode.NETWORK


class PublishError(KernelMatrixError):
    exit_code = ExitCode.PUBLISH


class EngineError(KernelMatrixError):
    exit_code = ExitCode.ENGINE


class NotReproducedError(KernelMatrixError):
    exit_code = ExitCode.NOT_REPRODUCED


class UntrustedError(KernelMatrixError):
    exit_code = ExitCode.UNTRUSTED
