"""Where a kernel's own code may write while kernel-matrix runs it on the host (its test
suite, the load check's import): only the folders it is given, by Linux's Landlock.

It runs as this user, so file modes stop nothing, and the build folder beside it holds
what later builds reuse: the object cache (an entry a suite forges there is a later
build's object), other kernels' variants (which `publish` uploads) and the dependency
cache. Landlock lets an unprivileged process give up rights for itself and every program
it starts, for good: the child, between fork and exec, gives up writing, truncating,
making, removing and linking files outside the allowed folders. Reading is not restricted (the suite imports torch,
the loader reads the variant), nor is anything but the file system.

What Landlock does not stop: changing a file's mode, owner, times or extended attributes,
and talking to a Unix socket that exists (a container engine's socket, where this user may
use it, is as good as root: a machine whose engine socket the tests' user can reach runs
untrusted kernels' tests in containers, as the workflows' test jobs do on GPU hosts).

Where the kernel has no Landlock ABI 3 (Linux before 6.2; other systems; a container
whose seccomp filter refuses the calls) the code runs unconfined and `Confinement.missing`
says why (the suite's note; the load check, which also runs inside build containers, says
nothing): objects and dependency trees are still checked against their hashes when used,
but an entry's claim of which inputs made its object is not (building/objcache.py)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The calls' numbers are the same on every Linux architecture (they came after the tables merged).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
# Landlock's file-system rights that write (linux/landlock.h), with the first ABI that has
# each; reading, listing and executing are not among them, so they stay allowed everywhere.
_WRITE_RIGHTS = (
    (1, 1 << 1),  # WRITE_FILE
    (1, 1 << 4),  # REMOVE_DIR
    (1, 1 << 5),  # REMOVE_FILE
    (1, 1 << 6),  # MAKE_CHAR
    (1, 1 << 7),  # MAKE_DIR
    (1, 1 << 8),  # MAKE_REG
    (1, 1 << 9),  # MAKE_SOCK
    (1, 1 << 10),  # MAKE_FIFO
    (1, 1 << 11),  # MAKE_BLOCK
    (1, 1 << 12),  # MAKE_SYM
    (2, 1 << 13),  # REFER: moving a file between folders
    (3, 1 << 14),  # TRUNCATE
)
# ABI 1 refuses every rename between folders once anything is confined (no REFER right to
# grant): too many tools (pip, torch's caches) do that inside their own folders. ABI 2
# cannot stop truncate(2) of a file outside them (TRUNCATE came with ABI 3, Linux 6.2).
_MIN_ABI = 3
# Where any program writes, whatever it runs: /dev/null, a terminal, /dev/shm (torch's
# shared memory), the GPU's device files; and /proc, where the CUDA driver writes as it starts:
# without it, torch.cuda.is_available() is False in a confined child ("Error 304: OS call
# failed", seen on an H100 host: /proc alone of /proc, /sys, /run, /var, /dev/shm, /tmp and HOME
# brings it back). What /proc gives is no way out: a magic link (/proc/self/root/..., /proc/self/
# fd/N) resolves to the file itself, which the ruleset still judges where it is, and Landlock keeps
# a confined process from the memory of any process outside its domain (/proc/PID/mem).
ALWAYS_WRITABLE = (Path("/dev"), Path("/proc"))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class Confinement:
    """A ruleset made in this process, applied to a child by `preexec_fn` (subprocess's);
    `missing` (ruleset None) says why there is none."""

    ruleset: int | None
    missing: str | None = None
    # The C library, loaded in this process: the child calls into it and loads nothing
    # (no dlopen between fork and exec, where another thread may have held its lock).
    libc: ctypes.CDLL | None = field(default=None, compare=False, repr=False)

    def _apply(self) -> None:
        """In the child, between fork and exec: give up writing outside the allowed folders,
        for it and everything it starts (no_new_privs first, as Landlock requires of an
        unprivileged process). The ruleset's descriptor is not inherited past exec. A
        failure here fails the child's start (subprocess raises SubprocessError)."""
        if self.ruleset is None or self.libc is None:
            return
        if self.libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
        if self.libc.syscall(_RESTRICT_SELF, self.ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot confine the child's writes (Landlock)")

    @property
    def preexec_fn(self) -> Callable[[], None] | None:
        """subprocess.run/Popen's preexec_fn that applies it (None: nothing to apply)."""
        return self._apply if self.ruleset is not None else None


@contextlib.contextmanager
def writes_confined_to(allowed: Sequence[Path]) -> Iterator[Confinement]:
    """A Confinement whose child may write only beneath `allowed` (and ALWAYS_WRITABLE);
    an allowed path that does not exist is left out."""
    libc, abi, missing = _landlock()
    if libc is None:
        yield Confinement(None, missing)
        return
    handled = 0
    for first, right in _WRITE_RIGHTS:
        if abi >= first:
            handled |= right
    attr = _RulesetAttr(handled)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        yield Confinement(None, f"Landlock refused a ruleset ({os.strerror(ctypes.get_errno())})")
        return
    try:
        for path in [*allowed, *ALWAYS_WRITABLE]:
            try:
                folder = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = _PathBeneathAttr(handled, folder)
                if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, f"Landlock refused a rule for {path}: {os.strerror(code)}")
            finally:
                os.close(folder)
        yield Confinement(ruleset, libc=libc)
    finally:
        os.close(ruleset)


def _landlock() -> tuple[ctypes.CDLL | None, int, str | None]:
    """(libc, Landlock's ABI version, None) where this kernel confines writes, else
    (None, 0, why not)."""
    if not sys.platform.startswith("linux"):
        return None, 0, f"{sys.platform} has no Landlock"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as exc:
        return None, 0, f"no C library to call Landlock with ({exc})"
    abi = libc.syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    if abi < 0:
        code = ctypes.get_errno()
        why = "this Linux kernel has none" if code in (errno.ENOSYS, errno.EOPNOTSUPP) else os.strerror(code)
        return None, 0, f"Landlock is not available: {why}"
    if abi < _MIN_ABI:
        return None, 0, f"Landlock ABI {abi} cannot control truncation (ABI 3, Linux 6.2, can)"
    return libc, abi, None
