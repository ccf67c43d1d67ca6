"""One error hierarchy for the whole package, and the one errno translation table.

Every failure that reaches a user is a :class:`BpfBatchError` whose ``str()`` is a single line
naming the object it concerns (``map 42 'flows'``, ``rules.tc:17``, ``field 'ts'``), what went
wrong, and, for kernel failures, the errno name. The CLI prints that line and exits non-zero;
library callers can branch on the subclass or on ``.errno``.

Both families of the package (BPF maps and the tc netlink sender) raise these; this module is
the only thing they share.
"""

from __future__ import annotations

import errno as _errno
import os

#: Kernel-internal "operation not supported" (include/linux/errno.h). The BPF syscall returns
#: it for a batch command the map type does not wire up; it is *not* EOPNOTSUPP (95), and
#: ``os.strerror`` knows no text for it.
ENOTSUPP = 524

# What an errno means for this package's operations. Only the meaning that helps a user act is
# kept; anything not listed falls back to the C library's text.
_MEANINGS: dict[int, str] = {
    _errno.EPERM: "operation not permitted (needs root or CAP_BPF/CAP_NET_ADMIN, or the map is read-only)",
    _errno.EACCES: "permission denied (the fd lacks the access this operation needs)",
    _errno.ENOENT: "no such element or object",
    _errno.E2BIG: "map is full, or the index is past max_entries",
    _errno.EINVAL: "invalid argument (flags or sizes the kernel rejects)",
    _errno.ENOSPC: "batch buffer too small for one hash bucket",
    _errno.EBUSY: "bucket lock contended",
    _errno.EEXIST: "already exists",
    _errno.ENOMEM: "kernel out of memory",
    _errno.EFAULT: "bad user buffer",
    _errno.EINTR: "interrupted",
    _errno.EBADF: "not a valid BPF object descriptor",
    _errno.EOPNOTSUPP: "operation not supported",
    _errno.ENODEV: "no such device",
    _errno.EMSGSIZE: "message too long for the socket buffer",
    _errno.ENOBUFS: "socket receive buffer overflowed: replies were dropped",
    ENOTSUPP: "not supported by the kernel for this object",
}

#: Why a write got EPERM on a frozen map (``BPF_MAP_FREEZE``): not a missing capability.
FROZEN = "the map is frozen (BPF_MAP_FREEZE): user space may no longer write it"
#: Why opening a pinned file got EACCES when its mode does not let this user in.
FILE_MODE = "permission denied by the pinned file's mode"


# libbpf's own error codes (libbpf.h, ``enum libbpf_errno``), returned negated like errnos.
_LIBBPF_ERRORS: dict[int, tuple[str, str]] = {
    4000: ("LIBBPF_ERRNO__LIBELF", "libelf failed"),
    4001: ("LIBBPF_ERRNO__FORMAT", "not a valid BPF object file"),
    4002: ("LIBBPF_ERRNO__KVERSION", "kernel version section missing or malformed"),
    4003: ("LIBBPF_ERRNO__ENDIAN", "object built for the other endianness"),
    4004: ("LIBBPF_ERRNO__INTERNAL", "libbpf internal error"),
    4005: ("LIBBPF_ERRNO__RELOC", "relocation failed"),
    4006: ("LIBBPF_ERRNO__LOAD", "program load failed"),
    4007: ("LIBBPF_ERRNO__VERIFY", "the verifier rejected the program"),
    4008: ("LIBBPF_ERRNO__PROG2BIG", "program too big"),
    4009: ("LIBBPF_ERRNO__KVER", "wrong kernel version"),
    4010: ("LIBBPF_ERRNO__PROGTYPE", "program type not supported by this kernel"),
    4011: ("LIBBPF_ERRNO__WRNGPID", "wrong pid in netlink reply"),
    4012: ("LIBBPF_ERRNO__INVSEQ", "invalid netlink sequence"),
    4013: ("LIBBPF_ERRNO__NLPARSE", "netlink message parse failed"),
}


def errno_name(code: int) -> str:
    """``ENOENT`` for 2, ``ENOTSUPP`` for 524, libbpf's names for its 4000+ codes, ``E<n>``
    for anything unknown."""
    if code == ENOTSUPP:
        return "ENOTSUPP"
    if code in _LIBBPF_ERRORS:
        return _LIBBPF_ERRORS[code][0]
    return _errno.errorcode.get(code, f"E{code}")


def errno_code(name: str) -> int | None:
    """The inverse of :func:`errno_name`: ``2`` for ``ENOENT``, ``None`` for a name it never
    prints."""
    if name == "ENOTSUPP":
        return ENOTSUPP
    for code, (libbpf_name, _) in _LIBBPF_ERRORS.items():
        if libbpf_name == name:
            return code
    code = getattr(_errno, name, None)
    return code if isinstance(code, int) and errno_name(code) == name else None


def errno_meaning(code: int) -> str:
    """A short human meaning of ``code`` in this package's context."""
    if code in _LIBBPF_ERRORS:
        return _LIBBPF_ERRORS[code][1]
    return _MEANINGS.get(code) or os.strerror(code)


class BpfBatchError(Exception):
    """Base of every error the package raises on purpose.

    ``obj`` names the thing concerned (map, file:line, field, token); ``errno`` is set when the
    kernel said no. ``str()`` is always one line: ``<obj>: <message> (<ERRNO>)``.
    """

    def __init__(self, message: str, *, obj: str | None = None, errno: int | None = None):
        super().__init__(message)
        self.message = message
        self.obj = obj
        self.errno = errno

    def __str__(self) -> str:
        text = f"{self.obj}: {self.message}" if self.obj else self.message
        if self.errno is not None:
            text += f" ({errno_name(self.errno)})"
        return text.replace("\n", " ")


class KernelError(BpfBatchError):
    """A syscall failed. ``op`` is the operation as the user would name it; ``cause``, when
    the caller knows which of an errno's meanings applies (EPERM on a frozen map is not a
    missing capability), replaces the generic meaning."""

    def __init__(self, op: str, errno: int, *, obj: str | None = None, detail: str | None = None,
                 cause: str | None = None):
        meaning = cause or errno_meaning(errno)
        message = f"{op}: {detail}: {meaning}" if detail else f"{op}: {meaning}"
        super().__init__(message, obj=obj, errno=errno)
        self.op = op


class NotSupportedError(KernelError):
    """The kernel has no such operation for this object (ENOTSUPP, EOPNOTSUPP)."""


class RetryBudgetError(KernelError):
    """A retried condition (ENOSPC growth, EBUSY) did not clear within its budget."""


class PartialError(KernelError):
    """A bulk write stopped part-way: ``applied`` entries went in, then entry ``failed`` (an
    index into the caller's entries) was refused. ``prefix`` says whether the applied entries
    are the first ``applied`` of the input, as they are for one writer (``failed`` is then
    ``applied``); several writers at once stop where each one is."""

    def __init__(self, op: str, errno: int, *, applied: int, obj: str | None = None,
                 detail: str | None = None, failed: int | None = None, prefix: bool = True):
        super().__init__(op, errno, obj=obj, detail=detail)
        self.applied = applied
        self.failed = applied if failed is None else failed
        self.prefix = prefix


class OutputError(BpfBatchError):
    """The output (stdout, a file) took ``written`` bytes of a write, then refused the rest:
    a full disk, a closed pipe (EPIPE), an I/O error."""

    def __init__(self, reason: str, *, written: int, obj: str | None, errno: int | None):
        super().__init__(f"output failed: {reason}", obj=obj, errno=errno)
        self.written = written
        self.reason = reason


class InputError(BpfBatchError):
    """Bad user input: a file line, an option, a field name or an expression token."""


class NotFoundError(BpfBatchError):
    """A named object (map, device, field) does not exist, or a name is ambiguous."""


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived (raised by the CLI's handlers, outside any critical
    section: see :mod:`bpfbatch.interrupts`). Not an :class:`Exception`, like
    KeyboardInterrupt, so that no ``except Exception`` swallows it. ``message`` says what was
    done before it; the exit status is 128 + the signal number, as a shell reports it."""

    def __init__(self, signum: int, *, obj: str | None = None, message: str = ""):
        super().__init__(signum)
        self.signum = signum
        self.obj = obj
        self.message = message

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        import signal

        text = f"interrupted ({signal.Signals(self.signum).name})"
        if self.message:
            text += f" {self.message}"
        return f"{self.obj}: {text}" if self.obj else text


def from_errno(op: str, code: int, *, obj: str | None = None, detail: str | None = None,
               cause: str | None = None) -> KernelError:
    """Translate a failed syscall into the right subclass. The one translation table."""
    code = abs(code)
    if code in (ENOTSUPP, _errno.EOPNOTSUPP):
        return NotSupportedError(op, code, obj=obj, detail=detail, cause=cause)
    return KernelError(op, code, obj=obj, detail=detail, cause=cause)
