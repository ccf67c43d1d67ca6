"""Batch writes: :func:`update` and :func:`delete` write through ``BPF_MAP_UPDATE_BATCH`` /
``BPF_MAP_DELETE_BATCH`` in chunks and report exactly how many entries were applied.

Where the kernel has no batch op for the map type they fall back, decided once per map type
and remembered (:func:`bpfbatch.map.probes.batch_op_missing`), to one syscall per element.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno as E

from .. import interrupts
from .._sys import abi
from .._sys.libbpf import lib
from ..errors import ENOTSUPP, InputError, KernelError, NotSupportedError, PartialError
from . import probes
from .cursor import DEFAULT_BATCH, check_batch_size
from .handle import Map, require


def _as_bytes(data, size: int, count: int, what: str, map: Map) -> memoryview:
    view = memoryview(data)
    # memoryview refuses to cast an empty multi-dimensional view (e.g. a (0, k) array).
    view = view.cast("B") if view.nbytes else memoryview(b"")
    if len(view) != size * count:
        raise InputError(f"{what} buffer holds {len(view)} bytes, expected {count} × {size}",
                         obj=map.info.label)
    return view


def update(map: Map, keys, values, count: int, *, elem_flags: int = 0,
           batch_size: int = DEFAULT_BATCH, tally: interrupts.Tally | None = None) -> int:
    """Write ``count`` elements (packed ``keys`` and ``values`` buffers) and return how many
    were applied — all of them, or raise :class:`PartialError` with ``applied`` set and the
    failing element's index in the message.

    ``tally`` counts what was applied as it goes, each chunk in the same critical section as
    its syscall (:func:`bpfbatch.interrupts.deferred`), so that whatever stops the write
    (a signal between chunks) the count is exact.

    The kernel's batch update takes only ``BPF_F_LOCK``: ``BPF_NOEXIST`` / ``BPF_EXIST`` are
    refused here with a clear error instead of the kernel's bare EINVAL.
    """
    check_batch_size(batch_size)
    if elem_flags & (abi.BPF_NOEXIST | abi.BPF_EXIST):
        raise NotSupportedError("update batch", E.EINVAL, obj=map.info.label,
                                detail="BPF_NOEXIST/BPF_EXIST are not supported by batch update")
    info = map.info
    key_view = _writable(_as_bytes(keys, info.key_size, count, "key", map))
    value_view = _writable(_as_bytes(values, info.value_stride, count, "value", map))
    opts = abi.opts(abi.BpfMapBatchOpts, elem_flags=elem_flags)
    done = 0
    fallback = probes.batch_op_missing(info.type, "update batch")
    while done < count:
        n = min(batch_size, count - done)
        k = key_view[done * info.key_size:(done + n) * info.key_size]
        v = value_view[done * info.value_stride:(done + n) * info.value_stride]
        with interrupts.deferred():
            if fallback:
                done += _update_per_key(map, k, v, n, elem_flags, done, tally)
                _count(tally, n)
                continue
            chunk = ctypes.c_uint32(n)
            ret = lib.bpf_map_update_batch(map.fd, _addr(k), _addr(v), ctypes.byref(chunk),
                                           ctypes.byref(opts))
            if ret == -ENOTSUPP or (ret == -E.EINVAL and not probes.batch_api()):
                probes.remember_batch_op_missing(info.type, "update batch")
                fallback = True
                continue
            if ret == -E.EPERM and not done:
                raise map.write_error("update batch", E.EPERM)
            if ret < 0:
                partial = chunk.value if chunk.value < n else 0
                _count(tally, partial)
                applied = done + partial
                raise PartialError("update batch", -ret, applied=applied, obj=info.label,
                                   detail=f"element {applied} failed after {applied} applied")
            done += n
            _count(tally, n)
    return done


def _count(tally: interrupts.Tally | None, n: int) -> None:
    if tally is not None:
        tally.add(n)


def _update_per_key(map: Map, keys: memoryview, values: memoryview, n: int, flags: int,
                    base: int, tally: interrupts.Tally | None) -> int:
    ks, vs = map.info.key_size, map.info.value_stride
    for i in range(n):
        try:
            map.update(bytes(keys[i * ks:(i + 1) * ks]), bytes(values[i * vs:(i + 1) * vs]), flags)
        except KernelError as exc:
            _count(tally, i)
            raise PartialError("update", exc.errno, applied=base + i, obj=map.info.label,
                               detail=f"element {base + i} failed after {base + i} applied") from None
    return n


@dataclasses.dataclass(frozen=True)
class DeleteResult:
    deleted: int
    missing: int


def delete(map: Map, keys, count: int, *, batch_size: int = DEFAULT_BATCH,
           tally: interrupts.Tally | None = None) -> DeleteResult:
    """Delete ``count`` keys. A key that is not in the map is skipped and counted as missing
    (the kernel's batch delete stops at it with ENOENT; the rest are still deleted).
    ``tally`` counts the deletions as they happen (see :func:`update`)."""
    check_batch_size(batch_size)
    require(map.info, "delete")
    info = map.info
    key_view = _writable(_as_bytes(keys, info.key_size, count, "key", map))
    deleted = missing = done = 0
    fallback = probes.batch_op_missing(info.type, "delete batch")
    while done < count:
        n = min(batch_size, count - done)
        k = key_view[done * info.key_size:(done + n) * info.key_size]
        with interrupts.deferred():
            try:
                done, now, missing, fallback = _delete_chunk(map, k, n, done, deleted, missing,
                                                             fallback)
            except PartialError as exc:
                _count(tally, exc.applied - deleted)
                raise
            _count(tally, now - deleted)
            deleted = now
    return DeleteResult(deleted, missing)


def _delete_chunk(map: Map, k: memoryview, n: int, done: int, deleted: int, missing: int,
                  fallback: bool) -> tuple[int, int, int, bool]:
    """One step of :func:`delete`: ``(done, deleted, missing, fallback)`` after it."""
    info = map.info
    if fallback:
        for i in range(n):
            if map.delete(bytes(k[i * info.key_size:(i + 1) * info.key_size])):
                deleted += 1
            else:
                missing += 1
        return done + n, deleted, missing, fallback
    chunk = ctypes.c_uint32(n)
    ret = lib.bpf_map_delete_batch(map.fd, _addr(k), ctypes.byref(chunk), None)
    if ret == 0:
        return done + n, deleted + n, missing, fallback
    if ret == -E.ENOENT and chunk.value < n:
        return done + chunk.value + 1, deleted + chunk.value, missing + 1, fallback
    if info.type not in abi.ELEMENTS_ALWAYS_EXIST and (
            ret == -ENOTSUPP or (ret == -E.EINVAL and not probes.batch_api())):
        probes.remember_batch_op_missing(info.type, "delete batch")
        return done, deleted, missing, True
    if ret == -ENOTSUPP:
        raise NotSupportedError("delete batch", ENOTSUPP, obj=info.label,
                                detail=f"{info.type_name} elements cannot be deleted")
    applied = deleted + (chunk.value if chunk.value < n else 0)
    raise PartialError("delete batch", -ret, applied=applied, obj=info.label,
                       detail=f"stopped after {applied} deleted")


def _writable(view: memoryview) -> memoryview:
    """ctypes needs a writable buffer to take an address; copy read-only input once."""
    return view if not view.readonly else memoryview(bytearray(view))


def _addr(view: memoryview) -> int | None:
    if not len(view):
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(view))
