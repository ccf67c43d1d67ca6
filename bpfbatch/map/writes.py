"""Batch writes: :func:`update` and :func:`delete` write through ``BPF_MAP_UPDATE_BATCH`` /
``BPF_MAP_DELETE_BATCH`` in chunks and report exactly how many entries were applied.

Where the kernel has no batch op for the map type they fall back, decided once per map type
and remembered (:func:`bpfbatch.map.probes.batch_op_missing`), to one syscall per element.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno as E
import os
import threading

from .. import interrupts
from .._numpy import np
from .._sys import abi
from .._sys.libbpf import lib
from ..errors import ENOTSUPP, InputError, KernelError, NotSupportedError, PartialError
from . import probes
from .cursor import DEFAULT_BATCH, check_batch_size
from .handle import MapHandle, require


def _as_bytes(data, size: int, count: int, what: str, map: MapHandle) -> memoryview:
    view = memoryview(data)
    # memoryview refuses to cast an empty multi-dimensional view (e.g. a (0, k) array).
    view = view.cast("B") if view.nbytes else memoryview(b"")
    if len(view) != size * count:
        raise InputError(f"{what} buffer holds {len(view)} bytes, expected {count} × {size}",
                         obj=map.info.label)
    return view


#: Map types whose batch updates run side by side in the kernel when several threads write
#: disjoint keys (a lock per hash bucket; none for arrays), and whose end state does not
#: depend on the order in which different keys were written. Not LRU maps: what a full one
#: evicts depends on that order.
PARALLEL_TYPES = frozenset({abi.MapType.HASH, abi.MapType.PERCPU_HASH, abi.MapType.ARRAY,
                            abi.MapType.PERCPU_ARRAY})
#: Records below which :func:`default_jobs` keeps one writer (a thread and the split cost
#: more than they save there), and the most writers it chooses.
PARALLEL_MIN, MAX_JOBS = 65536, 4


def default_jobs(count: int) -> int:
    """How many writers a write of ``count`` records uses when the caller leaves it open: one
    per CPU this process may run on (at most :data:`MAX_JOBS`) for a large write, else one."""
    if count < PARALLEL_MIN:
        return 1
    return max(1, min(MAX_JOBS, len(os.sched_getaffinity(0))))


def update(map: MapHandle, keys, values, count: int, *, elem_flags: int = 0,
           batch_size: int = DEFAULT_BATCH, tally: interrupts.Tally | None = None,
           jobs: int | None = 1) -> int:
    """Write ``count`` elements (packed ``keys`` and ``values`` buffers) and return how many
    were applied — all of them, or raise :class:`PartialError` with ``applied`` set and the
    failing element's index (``failed``) in the message.

    ``tally`` counts what was applied as it goes, each chunk in the same critical section as
    its syscall (:func:`bpfbatch.interrupts.deferred`), so that whatever stops the write
    (a signal between chunks) the count is exact.

    ``jobs`` writers (``None``: :func:`default_jobs`; never more than there are chunks left to
    share) share the write on the map types of :data:`PARALLEL_TYPES`; other types are
    written by one. The first chunk is written first, alone; the rest is split by a hash of
    each key, so that all the records of one key are written by one writer in input order
    and the last of them wins, as with one writer.
    A failure stops every writer at its next chunk; ``applied`` then counts what they all
    wrote, which is not a prefix of the input (``PartialError.prefix`` is false).

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
    tally = tally if tally is not None else interrupts.Tally()
    before = tally.applied
    chunks_after_the_first = -(-count // batch_size) - 1
    jobs = min(default_jobs(count) if jobs is None else jobs, chunks_after_the_first)
    spread = jobs > 1 and info.type in PARALLEL_TYPES
    try:
        done = _write(map, _slices(key_view, value_view, info, 0, batch_size if spread else count,
                                   batch_size), elem_flags, tally)
        if done < count and not probes.batch_op_missing(info.type, "update batch"):
            return done + _spread(map, key_view, value_view, done, count, jobs, elem_flags,
                                  batch_size, tally)
        return done + _write(map, _slices(key_view, value_view, info, done, count, batch_size),
                             elem_flags, tally)
    except _Refused as refused:
        applied = tally.applied - before
        raise PartialError(refused.op, refused.errno, applied=applied, obj=info.label,
                           failed=refused.index, prefix=refused.prefix,
                           detail=f"element {refused.index} failed after {applied} applied"
                           ) from None


class _Refused(Exception):
    """The kernel refused input element ``index``; :func:`update` says how many went in."""

    def __init__(self, op: str, errno: int, index: int, prefix: bool = True):
        super().__init__(op, errno, index)
        self.op, self.errno, self.index, self.prefix = op, errno, index, prefix


def _slices(key_view: memoryview, value_view: memoryview, info, start: int, end: int,
            batch_size: int):
    """The chunks of elements ``start``..``end`` for :func:`_write`: views of the input."""
    ks, vs = info.key_size, info.value_stride
    for at in range(start, end, batch_size):
        n = min(batch_size, end - at)
        yield key_view[at * ks:(at + n) * ks], value_view[at * vs:(at + n) * vs], \
            range(at, at + n)


def _write(map: MapHandle, chunks, elem_flags: int, tally: interrupts.Tally,
           stop: threading.Event | None = None) -> int:
    """Write ``chunks`` (``(keys, values, positions)``: packed elements and their indices in
    the input), one ``BPF_MAP_UPDATE_BATCH`` each, and return how many were applied; stop
    before the next chunk once ``stop`` is set. Raises :class:`_Refused` naming the element
    the kernel refused, or the map's write error for a map it may not write."""
    info = map.info
    opts = abi.opts(abi.BpfMapBatchOpts, elem_flags=elem_flags)
    fallback = probes.batch_op_missing(info.type, "update batch")
    done = 0
    for k, v, positions in chunks:
        if stop is not None and stop.is_set():
            break
        n = len(positions)
        with interrupts.deferred():
            if not fallback:
                chunk = ctypes.c_uint32(n)
                ret = lib.bpf_map_update_batch(map.fd, _addr(k), _addr(v), ctypes.byref(chunk),
                                               ctypes.byref(opts))
                if ret == -ENOTSUPP or (ret == -E.EINVAL and not probes.batch_api()):
                    probes.remember_batch_op_missing(info.type, "update batch")
                    fallback = True
                elif ret == -E.EPERM and not done and stop is None:
                    raise map.write_error("update batch", E.EPERM)
                elif ret < 0:
                    partial = chunk.value if chunk.value < n else 0
                    tally.add(partial)
                    raise _Refused("update batch", -ret, positions[partial], stop is None)
            if fallback:
                _update_per_key(map, k, v, elem_flags, positions, tally)
            else:
                tally.add(n)
            done += n
    return done


def _update_per_key(map: MapHandle, keys: memoryview, values: memoryview, flags: int, positions,
                    tally: interrupts.Tally) -> None:
    ks, vs = map.info.key_size, map.info.value_stride
    for i, position in enumerate(positions):
        try:
            map.update(bytes(keys[i * ks:(i + 1) * ks]), bytes(values[i * vs:(i + 1) * vs]), flags)
        except KernelError as exc:
            raise _Refused("update", exc.errno, position) from None
        tally.add(1)


def _spread(map: MapHandle, key_view: memoryview, value_view: memoryview, start: int, count: int,
            jobs: int, elem_flags: int, batch_size: int, tally: interrupts.Tally) -> int:
    """Elements ``start``..``count`` written by ``jobs`` writers at once (see :func:`update`):
    this thread and ``jobs - 1`` others, which start with the deferred signals blocked, so
    every signal lands in this thread, between its chunks or while it waits for the others;
    it then stops them at their next chunk and waits for them before the signal takes
    effect, so the tally is exact. Returns how many were applied, or raises the first
    failure (the kernel's, as :class:`_Refused` with ``prefix`` false)."""
    info = map.info
    keys = np.frombuffer(key_view, np.dtype((np.void, info.key_size)), count)
    values = np.frombuffer(value_view, np.dtype((np.void, info.value_stride)), count)
    parts = [part + start for part in _partitions(key_view, info.key_size, start, count, jobs)]
    stop = threading.Event()
    applied = [0] * jobs
    failures: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            applied[i] = _write(map, _gathered(keys, values, parts[i], batch_size), elem_flags,
                                tally, stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that raises it
            failures.append(exc)
            stop.set()

    others = [threading.Thread(target=writer, args=(i,), name=f"bpfbatch-writer-{i}")
              for i in range(1, jobs)]
    try:
        with interrupts.deferred():
            for thread in others:
                thread.start()
        writer(0)
    except BaseException:
        stop.set()
        raise
    finally:
        with interrupts.deferred():
            for thread in others:
                while thread.is_alive():
                    thread.join(0.01)
                    if interrupts.pending():
                        stop.set()
    if failures:
        raise failures[0]
    return sum(applied)


def _partitions(key_view: memoryview, key_size: int, start: int, count: int, jobs: int
                ) -> list[np.ndarray]:
    """The indices ``0 .. count - start - 1`` of the keys from ``start`` on, in ``jobs``
    groups by a hash of each key's bytes: all the records of one key fall in one group, and
    each group keeps input order. The hash only has to spread keys evenly, not to be strong:
    a multiplicative mix of the key's 32-bit words (its bytes, for a size not a multiple of 4)."""
    raw = np.frombuffer(key_view, np.uint8, (count - start) * key_size, start * key_size)
    words = raw.reshape(-1, key_size)
    if key_size % 4 == 0:
        words = words.view("<u4")
    mixed = np.zeros(len(words), np.uint32)
    for column in words.T:
        mixed = (mixed * np.uint32(0x01000193)) ^ column
    mixed *= np.uint32(0x9E3779B1)
    group = (mixed.astype(np.uint64) * np.uint64(jobs)) >> np.uint64(32)
    return [np.flatnonzero(group == j) for j in range(jobs)]


def _gathered(keys: np.ndarray, values: np.ndarray, part: np.ndarray, batch_size: int):
    """The chunks of the elements ``part`` names for :func:`_write`, each gathered into one
    pair of buffers reused from chunk to chunk (small enough to stay in cache: no copy of
    the whole input)."""
    key_buf, value_buf = np.empty(batch_size, keys.dtype), np.empty(batch_size, values.dtype)
    for at in range(0, len(part), batch_size):
        positions = part[at:at + batch_size]
        n = len(positions)
        np.take(keys, positions, out=key_buf[:n])
        np.take(values, positions, out=value_buf[:n])
        yield memoryview(key_buf[:n]).cast("B"), memoryview(value_buf[:n]).cast("B"), positions


@dataclasses.dataclass(frozen=True)
class DeleteResult:
    deleted: int
    missing: int


def delete(map: MapHandle, keys, count: int, *, batch_size: int = DEFAULT_BATCH,
           tally: interrupts.Tally | None = None) -> DeleteResult:
    """Delete ``count`` keys. A key that is not in the map is skipped and counted as missing
    (the kernel's batch delete stops at it with ENOENT; the rest are still deleted).
    ``tally`` counts the deletions as they happen (see :func:`update`)."""
    check_batch_size(batch_size)
    require(map.info, "delete")
    info = map.info
    tally = tally if tally is not None else interrupts.Tally()
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
                tally.add(exc.applied - deleted)
                raise
            tally.add(now - deleted)
            deleted = now
    return DeleteResult(deleted, missing)


def _delete_chunk(map: MapHandle, k: memoryview, n: int, done: int, deleted: int, missing: int,
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
