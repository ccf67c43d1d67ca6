"""ctypes prototypes over the system ``libbpf.so.1`` — the only module touching native symbols.

Every symbol the package calls is declared in :data:`_PROTOTYPES`; import fails with one clear
line if the installed libbpf lacks any of them (Debian 12 ships 1.1.2, which is the floor:
``bpf_map_get_info_by_fd`` is 1.2+, so ``bpf_obj_get_info_by_fd`` is used).

libbpf ≥ 1.0 returns ``-errno`` from int-returning calls and ``NULL`` + ``errno`` from
pointer-returning ones; :func:`check` and :func:`check_ptr` turn both into the package's errors.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import signal
import threading
from ctypes import POINTER, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_void_p

from ..errors import BpfBatchError, from_errno
from . import abi

_u32p = POINTER(c_uint32)

# name -> (restype, argtypes)
_PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    # Batch commands.
    "bpf_map_lookup_batch": (c_int, [c_int, c_void_p, c_void_p, c_void_p, c_void_p, _u32p, c_void_p]),
    "bpf_map_lookup_and_delete_batch": (c_int, [c_int, c_void_p, c_void_p, c_void_p, c_void_p, _u32p, c_void_p]),
    "bpf_map_update_batch": (c_int, [c_int, c_void_p, c_void_p, _u32p, c_void_p]),
    "bpf_map_delete_batch": (c_int, [c_int, c_void_p, _u32p, c_void_p]),
    # Per-element commands.
    "bpf_map_get_next_key": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_lookup_elem_flags": (c_int, [c_int, c_void_p, c_void_p, ctypes.c_uint64]),
    "bpf_map_update_elem": (c_int, [c_int, c_void_p, c_void_p, ctypes.c_uint64]),
    "bpf_map_delete_elem": (c_int, [c_int, c_void_p]),
    "bpf_map_lookup_and_delete_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_freeze": (c_int, [c_int]),
    # Objects.
    "bpf_map_create": (c_int, [c_int, c_char_p, c_uint32, c_uint32, c_uint32, c_void_p]),
    "bpf_map_get_next_id": (c_int, [c_uint32, _u32p]),
    "bpf_prog_get_next_id": (c_int, [c_uint32, _u32p]),
    "bpf_map_get_fd_by_id_opts": (c_int, [c_uint32, c_void_p]),
    "bpf_prog_get_fd_by_id": (c_int, [c_uint32]),
    "bpf_obj_get_opts": (c_int, [c_char_p, c_void_p]),
    "bpf_obj_pin": (c_int, [c_int, c_char_p]),
    "bpf_obj_get_info_by_fd": (c_int, [c_int, c_void_p, _u32p]),
    "libbpf_num_possible_cpus": (c_int, []),
    "libbpf_set_print": (c_void_p, [c_void_p]),
    # BTF: reading a map's types, and building types for maps we create.
    "btf__load_from_kernel_by_id": (c_void_p, [c_uint32]),
    "btf__get_raw_data": (c_void_p, [c_void_p, _u32p]),
    "btf__free": (None, [c_void_p]),
    "btf__new_empty": (c_void_p, []),
    "btf__add_int": (c_int, [c_void_p, c_char_p, c_size_t, c_int]),
    "btf__add_struct": (c_int, [c_void_p, c_char_p, c_uint32]),
    "btf__add_union": (c_int, [c_void_p, c_char_p, c_uint32]),
    "btf__add_field": (c_int, [c_void_p, c_char_p, c_int, c_uint32, c_uint32]),
    "btf__add_array": (c_int, [c_void_p, c_int, c_int, c_uint32]),
    "btf__add_enum": (c_int, [c_void_p, c_char_p, c_uint32]),
    "btf__add_enum_value": (c_int, [c_void_p, c_char_p, c_int64]),
    "btf__add_typedef": (c_int, [c_void_p, c_char_p, c_int]),
    "btf__add_ptr": (c_int, [c_void_p, c_int]),
    "btf__add_const": (c_int, [c_void_p, c_int]),
    "btf__add_volatile": (c_int, [c_void_p, c_int]),
    "btf__add_float": (c_int, [c_void_p, c_char_p, c_size_t]),
    "btf__add_enum64": (c_int, [c_void_p, c_char_p, c_uint32, ctypes.c_bool]),
    "btf__add_enum64_value": (c_int, [c_void_p, c_char_p, ctypes.c_uint64]),
    "btf__load_into_kernel": (c_int, [c_void_p]),
    "btf__fd": (c_int, [c_void_p]),
    "btf__parse": (c_void_p, [c_char_p, c_void_p]),
    "btf__type_cnt": (c_uint32, [c_void_p]),
    "btf_dump__new": (c_void_p, [c_void_p, c_void_p, c_void_p, c_void_p]),
    "btf_dump__dump_type": (c_int, [c_void_p, c_uint32]),
    "btf_dump__free": (None, [c_void_p]),
    # --- CO-RE objects (loader.py) and program feature probes (map/probes.py) ---
    "bpf_object__open_file": (c_void_p, [c_char_p, c_void_p]),
    "bpf_object__load": (c_int, [c_void_p]),
    "bpf_object__close": (None, [c_void_p]),
    "bpf_object__btf": (c_void_p, [c_void_p]),
    "bpf_object__find_map_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__next_program": (c_void_p, [c_void_p, c_void_p]),
    "bpf_program__name": (c_char_p, [c_void_p]),
    "bpf_program__section_name": (c_char_p, [c_void_p]),
    "bpf_program__set_autoload": (c_int, [c_void_p, ctypes.c_bool]),
    "bpf_program__set_type": (c_int, [c_void_p, c_int]),
    "bpf_program__autoload": (ctypes.c_bool, [c_void_p]),
    "bpf_program__fd": (c_int, [c_void_p]),
    "bpf_program__attach": (c_void_p, [c_void_p]),
    "bpf_link__destroy": (c_int, [c_void_p]),
    "bpf_map__fd": (c_int, [c_void_p]),
    "bpf_map__initial_value": (c_void_p, [c_void_p, POINTER(c_size_t)]),
    "bpf_map__reuse_fd": (c_int, [c_void_p, c_int]),
    "bpf_map__set_value_size": (c_int, [c_void_p, c_uint32]),
    "bpf_map__set_max_entries": (c_int, [c_void_p, c_uint32]),
    "bpf_map__inner_map": (c_void_p, [c_void_p]),
    "bpf_map__set_inner_map_fd": (c_int, [c_void_p, c_int]),
    "bpf_map__type": (c_int, [c_void_p]),
    "bpf_map__key_size": (c_uint32, [c_void_p]),
    "bpf_map__value_size": (c_uint32, [c_void_p]),
    "bpf_map__map_flags": (c_uint32, [c_void_p]),
    "libbpf_find_vmlinux_btf_id": (c_int, [c_char_p, c_int]),
    "bpf_prog_load": (c_int, [c_int, c_char_p, c_char_p, c_void_p, c_size_t, c_void_p]),
    "bpf_raw_tracepoint_open": (c_int, [c_char_p, c_int]),
    "bpf_prog_test_run_opts": (c_int, [c_int, c_void_p]),
}


def _load() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
    except OSError as exc:
        raise BpfBatchError(f"cannot load libbpf.so.1 ({exc}); install Debian's libbpf1") from None
    missing = [name for name in _PROTOTYPES if not hasattr(lib, name)]
    if missing:
        raise BpfBatchError(
            "libbpf.so.1 lacks " + ", ".join(missing) + "; bpfbatch needs libbpf 1.1 or newer")
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = _load()


def check(ret: int, op: str, obj: str | None = None) -> int:
    """Return ``ret`` when it is not negative, else raise the translated ``-ret`` errno."""
    if ret < 0:
        raise from_errno(op, -ret, obj=obj)
    return ret


def check_ptr(ptr: int | None, op: str, obj: str | None = None) -> int:
    """Return a non-NULL pointer, else raise the translated ``errno`` libbpf left behind."""
    if not ptr:
        raise from_errno(op, ctypes.get_errno() or errno.EINVAL, obj=obj)
    return ptr


_possible_cpus: int | None = None


def num_possible_cpus() -> int:
    """CPUs in ``/sys/devices/system/cpu/possible`` (per-CPU value stride), cached."""
    global _possible_cpus
    if _possible_cpus is None:
        _possible_cpus = check(lib.libbpf_num_possible_cpus(), "count possible CPUs")
    return _possible_cpus


def obj_info(fd: int, info: ctypes.Structure, obj: str | None = None) -> None:
    """Fill ``info`` (e.g. :class:`abi.BpfMapInfo`) for the object behind ``fd``."""
    size = c_uint32(ctypes.sizeof(info))
    check(lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)),
          "get object info", obj)


def map_fd_by_id(map_id: int, *, read_only: bool) -> int:
    """Open map ``map_id``; read-only opens work on maps frozen or created read-only."""
    opts = abi.opts(abi.BpfGetFdByIdOpts, open_flags=abi.BPF_F_RDONLY if read_only else 0)
    return check(lib.bpf_map_get_fd_by_id_opts(map_id, ctypes.byref(opts)),
                 "open map by id", f"map id {map_id}")


def prog_fd_by_id(prog_id: int) -> int:
    """Open program ``prog_id``."""
    return check(lib.bpf_prog_get_fd_by_id(prog_id), "open program by id", f"program id {prog_id}")


def obj_fd_by_path(path: str, *, read_only: bool) -> int:
    """Open a pinned object at ``path`` on bpffs."""
    opts = abi.opts(abi.BpfObjGetOpts, file_flags=abi.BPF_F_RDONLY if read_only else 0)
    return check(lib.bpf_obj_get_opts(path.encode(), ctypes.byref(opts)),
                 "open pinned object", path)


def map_ids():
    """Yield the id of every map on the system, in increasing order."""
    return _ids(lib.bpf_map_get_next_id, "list maps")


def prog_ids():
    """Yield the id of every program on the system, in increasing order."""
    return _ids(lib.bpf_prog_get_next_id, "list programs")


def _ids(next_id, op: str):
    current = c_uint32(0)
    while True:
        ret = next_id(current.value, ctypes.byref(current))
        if ret == -errno.ENOENT:  # past the last id
            return
        check(ret, op)
        yield current.value


# libbpf's log: silent by default, on stderr with -v. The callback receives a va_list, which
# only the C library can format; vasprintf sizes the buffer, because libbpf hands over the whole
# verifier log (often far beyond 4 KiB) as one message and its END marker must survive.
#
# Python code in a ctypes callback cannot raise into the caller: ctypes prints the exception
# and drops it. So the callback is installed only while a sink is set (libbpf then never calls
# into Python), it keeps whatever the sink raises for :func:`signals_deferred` to re-raise,
# and callers defer SIGINT/SIGTERM around native calls that may log, so a Ctrl-C is raised
# after the call instead of vanishing inside the callback.
_PRINT_FN = ctypes.CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
# The C library as the interpreter already has it loaded (dlopen(NULL)); find_library("c")
# would run ldconfig on every start (~10 ms).
_libc = ctypes.CDLL(None)
_libc.vasprintf.argtypes = [POINTER(c_void_p), c_char_p, c_void_p]
_libc.vasprintf.restype = c_int
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_log_sink = None
_callback_state = threading.local()


@_PRINT_FN
def _print(level: int, fmt: bytes, args: int) -> int:
    try:
        text = c_void_p()
        if _libc.vasprintf(ctypes.byref(text), fmt, args) < 0:
            return 0
        try:
            message = ctypes.string_at(text).decode(errors="replace")
        finally:
            _libc.free(text)
        sink = _log_sink
        if sink is not None:
            sink(message)
    except BaseException as exc:  # noqa: BLE001 - ctypes would drop it: keep it for later
        if getattr(_callback_state, "failure", None) is None:
            _callback_state.failure = exc
    return 0


_PRINT_PTR = ctypes.cast(_print, c_void_p)


def log_sink():
    """The current sink, so a caller can tee libbpf's log for a while and restore it."""
    return _log_sink


def set_log_sink(sink) -> None:
    """Send libbpf's messages to ``sink(str)``, or drop them with ``None`` (the default, in
    which case libbpf does not call back into Python at all)."""
    global _log_sink
    _log_sink = sink
    lib.libbpf_set_print(_PRINT_PTR if sink is not None else None)


@contextlib.contextmanager
def signals_deferred():
    """Around native calls that may log through the callback: a SIGINT, SIGTERM or SIGHUP
    arriving during the block is only noted, then re-raised with its own handler when the block
    ends (``KeyboardInterrupt``, or the CLI's ``Interrupted``, here, not inside the callback,
    where ctypes would drop it); an
    exception the sink raised during the block is raised when it ends.

    Python runs signal handlers in the main thread only, so elsewhere the handlers stay as
    they are. (Blocking the signals instead does not work: another thread, e.g. OpenBLAS's,
    takes the signal and the main thread still runs the handler inside the callback.)
    """
    noted: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {signum: signal.signal(signum, lambda signum, _: noted.append(signum))
                    for signum in _DEFERRED_SIGNALS}
    try:
        yield
    finally:
        failure, _callback_state.failure = getattr(_callback_state, "failure", None), None
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)  # the restored handler raises KeyboardInterrupt here
    if failure is not None:
        raise failure


set_log_sink(None)  # libbpf's own default prints warnings to stderr


_DUMP_FN = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_void_p)


def btf_c_types(path: str) -> bytes:
    """Every type of the BTF in ``path`` (a raw BTF file such as ``/sys/kernel/btf/vmlinux``,
    or an ELF object's ``.BTF``) as C declarations, in libbpf's ``btf_dump`` order: what
    ``bpftool btf dump file PATH format c`` prints between its include guard and pragmas.
    Each fragment comes as a printf format and a va_list, formatted by the C library as the
    log's are."""
    parts: list[bytes] = []
    failed: list[int] = []

    @_DUMP_FN
    def emit(_ctx, fmt: bytes, args: int) -> None:
        text = c_void_p()
        size = _libc.vasprintf(ctypes.byref(text), fmt, args)
        if size < 0:
            failed.append(ctypes.get_errno() or errno.ENOMEM)
            return
        parts.append(ctypes.string_at(text, size))
        _libc.free(text)

    btf = check_ptr(lib.btf__parse(path.encode(), None), "parse BTF", path)
    try:
        dump = check_ptr(lib.btf_dump__new(btf, ctypes.cast(emit, c_void_p), None, None),
                         "dump BTF as C", path)
        try:
            for type_id in range(1, lib.btf__type_cnt(btf)):
                check(lib.btf_dump__dump_type(dump, type_id), "dump BTF as C", path)
        finally:
            lib.btf_dump__free(dump)
    finally:
        lib.btf__free(btf)
    if failed:
        raise from_errno("dump BTF as C: format a declaration", failed[0], obj=path)
    return b"".join(parts)


# perf_event_open(2): the C library has no wrapper, so it is called through syscall(2). x86-64
# only: the perf ring's positions are read and written as plain 8-byte loads and stores, which
# are acquire and release there (TSO); a weakly ordered machine needs fences Python cannot emit.
_NR_PERF_EVENT_OPEN = {"x86_64": 298}
_sys_libc = ctypes.CDLL(None, use_errno=True)
_sys_libc.syscall.restype = ctypes.c_long


def perf_event_open(attr: abi.PerfEventAttr, cpu: int, obj: str | None = None) -> int:
    """A perf event of ``attr`` on ``cpu`` for every process (``pid = -1``), close-on-exec;
    returns its fd."""
    import platform

    nr = _NR_PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        raise BpfBatchError(f"perf buffers are read on x86-64 only (this is "
                            f"{platform.machine()}: its ring needs memory fences)", obj=obj)
    fd = _sys_libc.syscall(ctypes.c_long(nr), ctypes.byref(attr), c_int(-1), c_int(cpu),
                           c_int(-1), ctypes.c_ulong(abi.PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        raise from_errno(f"open the BPF output perf event of CPU {cpu}",
                         ctypes.get_errno() or errno.EINVAL, obj=obj)
    return fd
