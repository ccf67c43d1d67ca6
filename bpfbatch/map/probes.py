"""Feature probes: each does the real operation once and caches the answer.

Tests skip on a probe's result, never on a guess about the kernel version; the cursor asks
:func:`batch_api` before treating an ``EINVAL`` from a batch command as "pre-5.6 kernel".
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import functools
import os

from .._sys import abi, libbpf
from .._sys.abi import MapType
from .._sys.libbpf import check, lib
from ..errors import BpfBatchError

_batch_api: bool | None = None
# (map type, command) pairs the kernel answered with "no batch op": decided once, remembered.
_batch_op_missing: set[tuple[int, str]] = set()


def batch_op_missing(map_type: int, command: str) -> bool:
    """Whether ``command`` (e.g. ``"lookup batch"``) was found missing for ``map_type``: the
    cursor and the writes then walk key by key without asking the kernel again."""
    return (map_type, command) in _batch_op_missing


def remember_batch_op_missing(map_type: int, command: str) -> None:
    """Record the kernel's "no batch op for this map type" answer (see
    :func:`batch_op_missing`)."""
    _batch_op_missing.add((map_type, command))


def batch_api() -> bool:
    """Whether the kernel knows the batch commands at all (5.6+).

    Like cilium/ebpf's ``haveBatchAPI``: ``BPF_MAP_UPDATE_BATCH`` of two entries into a
    two-entry hash map. Only the command's own answer is remembered: success (it exists) or
    ``EINVAL`` (a kernel without it). When the probe cannot run or fails otherwise (no map
    for it: ``EPERM``, ``ENOMEM``), the answer is "yes" for this call only, so that the
    caller reports its ``EINVAL`` instead of silently walking key by key, and the next call
    probes again.
    """
    global _batch_api
    if _batch_api is not None:
        return _batch_api
    from .handle import MapHandle

    try:
        with MapHandle.create(MapType.HASH, 4, 4, 2, name="bpfbatch_probe") as probe:
            keys = (ctypes.c_uint32 * 2)(1, 2)
            values = (ctypes.c_uint32 * 2)(3, 4)
            count = ctypes.c_uint32(2)
            ret = lib.bpf_map_update_batch(probe.fd, keys, values, ctypes.byref(count), None)
    except BpfBatchError:
        return True
    if ret == 0 or ret == -errno.EINVAL:
        _batch_api = ret == 0
    return ret != -errno.EINVAL


# -- program types and attach points --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Support:
    """A probe's answer: true when the operation worked, else ``reason`` says why (one line,
    with the kernel's errno), so a tool that finds nothing usable can tell the user."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


_YES = Support(True)


def _attempt(steps) -> Support:
    """Run ``steps(fds)``, which appends every fd it opens to ``fds``; close them all."""
    fds: list[int] = []
    try:
        with libbpf.signals_deferred():  # libbpf may log (to -v) while finding BTF ids
            steps(fds)
    except BpfBatchError as exc:
        return Support(False, str(exc))
    finally:
        for fd in reversed(fds):
            os.close(fd)
    return _YES


def _load(fds: list[int], prog_type: int, what: str, **fields) -> int:
    code = ctypes.create_string_buffer(abi.RETURN_ZERO, len(abi.RETURN_ZERO))
    load_opts = abi.opts(abi.BpfProgLoadOpts, **fields)
    fd = check(lib.bpf_prog_load(prog_type, b"bpfbatch_probe", b"GPL", code,
                                 len(abi.RETURN_ZERO) // 8, ctypes.byref(load_opts)),
               f"load {what} program")
    fds.append(fd)
    return fd


def _vmlinux_btf_id(name: str, attach_type: int, what: str) -> int:
    return check(lib.libbpf_find_vmlinux_btf_id(name.encode(), attach_type),
                 f"find {what} in the kernel's BTF")


@functools.cache
def tp_btf(tracepoint: str) -> Support:
    """Whether a ``tp_btf/<tracepoint>`` program loads and attaches (BTF-typed arguments,
    5.5+; needs the ``btf_trace_<tracepoint>`` typedef in vmlinux BTF)."""
    def steps(fds):
        btf_id = _vmlinux_btf_id(tracepoint, abi.BPF_TRACE_RAW_TP, f"tracepoint {tracepoint}")
        fd = _load(fds, abi.BPF_PROG_TYPE_TRACING, f"tp_btf/{tracepoint}",
                   expected_attach_type=abi.BPF_TRACE_RAW_TP, attach_btf_id=btf_id)
        fds.append(check(lib.bpf_raw_tracepoint_open(None, fd), f"attach tp_btf/{tracepoint}"))
    return _attempt(steps)


@functools.cache
def raw_tp(tracepoint: str) -> Support:
    """Whether a ``raw_tp/<tracepoint>`` program loads and attaches (4.17+)."""
    def steps(fds):
        fd = _load(fds, abi.BPF_PROG_TYPE_RAW_TRACEPOINT, f"raw_tp/{tracepoint}")
        fds.append(check(lib.bpf_raw_tracepoint_open(tracepoint.encode(), fd),
                         f"attach raw_tp/{tracepoint}"))
    return _attempt(steps)


@functools.cache
def syscall_program() -> Support:
    """Whether a (sleepable) ``BPF_PROG_TYPE_SYSCALL`` program loads and runs (5.14+)."""
    def steps(fds):
        fd = _load(fds, abi.BPF_PROG_TYPE_SYSCALL, "syscall", prog_flags=abi.BPF_F_SLEEPABLE)
        run_opts = abi.opts(abi.BpfTestRunOpts)
        check(lib.bpf_prog_test_run_opts(fd, ctypes.byref(run_opts)), "run syscall program")
    return _attempt(steps)
