"""Whole-map writes: clear, drain into a sink that must not lose data (put back what it did
not deliver: :mod:`bpfbatch.delivery`), and load with
``--if-absent`` / ``--if-present`` semantics the kernel's batch update does not offer.

Everything goes through :mod:`bpfbatch.map.cursor`; this module only decides *which* batch
commands a whole-map operation needs for a map type and what happens when the consumer fails.

Clear, per map type:

- hash family: ``BPF_MAP_LOOKUP_AND_DELETE_BATCH`` with the values discarded — one syscall
  per batch that removes whole buckets under their lock. Measured on 1M entries it takes about
  two thirds of the time of a lookup pass feeding ``BPF_MAP_DELETE_BATCH`` (the kernel deletes
  key by key there, each key copied in and hashed again).
- LPM trie (no lookup-and-delete op): a lookup pass hands out the keys batch by batch and each
  batch is removed with ``BPF_MAP_DELETE_BATCH``; a key another writer deleted meanwhile is
  skipped.
- In both cases entries inserted *behind* the cursor while it runs survive: a clear is not
  atomic, no batch operation is.
- ``array`` / ``percpu_array``: elements cannot be deleted (``ENOTSUPP``), so "clear" writes
  zeroed values over every index with ``BPF_MAP_UPDATE_BATCH`` — what bcc's ``Array.clear()``
  does one syscall per index.
- queue / stack: every element popped.
- any other type: a per-key walk that asks for the *next* key before deleting the current one
  (deleting first makes the kernel restart its walk from the first bucket: bcc's quadratic
  ``clear()``). Empty slots of the fd arrays are not counted as removed (see
  :meth:`bpfbatch.map.handle.MapHandle.delete`); an xskmap's slots cannot be looked up: every slot is
  emptied and counted.

What a map type cannot do at all is refused first, naming the type and why
(:func:`bpfbatch.map.handle.require`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import errno as E
import functools
import os
from collections.abc import Callable, Iterator

from .. import interrupts
from .._numpy import np
from .._sys import abi, libbpf
from .._sys.abi import MapType
from ..delivery import Delivery, PutBack, PutBackFn
from ..errors import InputError, KernelError, PartialError, errno_meaning
from ..interrupts import Tally
from . import cursor, writes
from .cursor import Batch, BatchCursor
from .handle import MapHandle, require

#: Map types with a batch delete but no lookup-and-delete.
_BATCH_DELETE_TYPES = frozenset({MapType.LPM_TRIE})


# -- clear ---------------------------------------------------------------------------------


def clear(map: MapHandle, *, batch_size: int = cursor.DEFAULT_BATCH, tally: Tally | None = None
          ) -> int:
    """Empty ``map`` and return how many elements were removed (zeroed, for arrays).
    ``tally`` counts them as they go, each batch in the critical section of its syscall, for
    a caller that must say exactly what was removed when a signal stops it.

    See the module docstring for what "empty" means per map type and for the race with
    concurrent writers.
    """
    require(map.info, "clear")
    tally = tally if tally is not None else Tally()
    kind = map.info.type
    if kind in abi.ELEMENTS_ALWAYS_EXIST:
        _zero_array(map, batch_size, tally)
    elif kind in abi.HASH_TYPES or kind in abi.POP_TYPES:  # a drain whose batches are dropped
        batches = iter(BatchCursor(map, delete=True, batch_size=batch_size))
        while True:
            with interrupts.deferred():
                batch = next(batches, None)
                if batch is None:
                    break
                tally.add(batch.count)
    elif kind in _BATCH_DELETE_TYPES:
        for batch in BatchCursor(map, batch_size=batch_size):
            writes.delete(map, batch.keys, batch.count, batch_size=batch_size, tally=tally)
    else:
        _clear_per_key(map, tally)
    return tally.applied


def _zero_array(map: MapHandle, batch_size: int, tally: Tally) -> None:
    info = map.info
    step = max(1, min(batch_size, info.max_entries))
    zeroes = bytes(step * info.value_stride)
    for start in range(0, info.max_entries, step):
        n = min(step, info.max_entries - start)
        keys = np.arange(start, start + n, dtype=np.uint32)
        writes.update(map, keys, zeroes[: n * info.value_stride], n, batch_size=step,
                      tally=tally)


def _clear_per_key(map: MapHandle, tally: Tally) -> None:
    """Delete key by key, asking for the next key before deleting the current one.

    Not the cursor's per-key walk: that looks every value up, and several of the types that
    end here refuse a lookup from a syscall (perf event, cgroup and xsk arrays: ENOTSUPP;
    sockmap/sockhash with 4-byte values: ENOSPC), while a clear needs only the keys. Bounded
    like the cursor's walk: after ``max_entries`` steps it stops, so a writer that keeps
    inserting cannot keep it going forever.
    """
    key = map.next_key(None)
    for _ in range(max(map.info.max_entries, 1)):
        if key is None:
            break
        following = map.next_key(key)
        with interrupts.deferred():
            tally.add(map.delete(key))
        key = following


# -- drain ---------------------------------------------------------------------------------


def restorer(map: MapHandle) -> PutBackFn:
    """What puts drained batches back into ``map`` (:func:`put_back`), for a
    :class:`~bpfbatch.delivery.Delivery`.

    Map types whose drained elements could not be put back (map-in-map types and program
    arrays: a drained id cannot be written back, and the object may be gone once its last
    reference was drained) are refused here, with the type matrix's reason.
    """
    require(map.info, "drain")
    return functools.partial(put_back, map)


def drain(map: MapHandle, sink: Callable[[Batch], None], *, batch_size: int = cursor.DEFAULT_BATCH,
          elem_flags: int = 0) -> int:
    """Move every element of ``map`` into ``sink`` with ``BPF_MAP_LOOKUP_AND_DELETE_BATCH``;
    returns how many were delivered.

    ``sink`` receives one batch at a time (views valid during the call) and has delivered it
    when it returns; if it raises, the batch is put back (:func:`put_back`) before the error
    propagates — as a :class:`~bpfbatch.delivery.DeliveryError` for an ``OSError`` (a closed
    pipe, a full disk), otherwise unchanged. A sink that delivers part of a batch raises
    :class:`~bpfbatch.delivery.Undelivered` to have only the rest put back. Each delete and
    its delivery run with SIGINT/SIGTERM/SIGHUP/SIGPIPE deferred (:mod:`bpfbatch.interrupts`).

    This is the door for a consumer that is not a file (the exporter's drain mode: a sink
    that adds each batch to its counters); one that wants decoded pairs uses
    :meth:`bpfbatch.Map.drain`, a command printing records :func:`bpfbatch.formats.pipeline.
    delivery`.

    A queue or stack is drained in pop order; a batch that could not be delivered is pushed
    back, which keeps a stack's order but puts a queue's batch behind the elements still queued.
    """
    delivery = Delivery(sink, restorer(map), label=map.info.label)
    return delivery.drain(BatchCursor(map, delete=True, batch_size=batch_size,
                                      elem_flags=elem_flags))


def put_back(map: MapHandle, batch: Batch) -> PutBack:
    """Write the drained records of ``batch`` back into ``map``, each with
    ``BPF_MAP_UPDATE_ELEM`` and ``BPF_NOEXIST``: a key a writer re-created since the drain
    keeps the writer's newer value (counted as superseded), and a record the kernel refuses
    (the map filled up meanwhile) is counted as lost with the errno. One syscall per record:
    the batch update cannot say ``BPF_NOEXIST``. On an LRU map that filled up meanwhile a
    put-back evicts, as any insert does.
    """
    info = map.info
    if info.type in abi.POP_TYPES:
        return _push_back(map, batch)
    ks, vs = info.key_size, info.value_stride
    count = batch.count
    key_buf, value_buf = bytearray(batch.keys), bytearray(batch.values)
    key_at = ctypes.addressof(ctypes.c_char.from_buffer(key_buf))
    value_at = ctypes.addressof(ctypes.c_char.from_buffer(value_buf))
    update, fd = libbpf.lib.bpf_map_update_elem, map.fd
    restored = superseded = lost = 0
    refused = None
    for i in range(count):
        ret = update(fd, key_at + i * ks, value_at + i * vs, abi.BPF_NOEXIST)
        if ret == 0:
            restored += 1
        elif ret == -E.EEXIST:
            superseded += 1
        else:
            lost += 1
            refused = -ret
    return PutBack(restored, superseded, lost, refused)


def _push_back(map: MapHandle, batch: Batch) -> PutBack:
    """A queue's or stack's drained batch pushed back (no keys, so nothing can be superseded);
    a stack's last-popped element first, so that it gets its order back."""
    values = batch.values
    if map.info.type == MapType.STACK:
        stride = map.info.value_stride
        values = b"".join(bytes(values[i * stride:(i + 1) * stride])
                          for i in reversed(range(batch.count)))
    try:
        restored = writes.update(map, batch.keys, values, batch.count)
    except PartialError as exc:
        return PutBack(exc.applied, 0, batch.count - exc.applied, exc.errno)
    return PutBack(restored, 0, 0, None)


# -- load ----------------------------------------------------------------------------------


class Existing(enum.Enum):
    """What a load does with a key according to whether the map already holds it."""

    ANY = "any"          # write every record (BPF_ANY)
    ABSENT = "absent"    # only keys not in the map (BPF_NOEXIST semantics)
    PRESENT = "present"  # only keys already in the map (BPF_EXIST semantics)


@dataclasses.dataclass(frozen=True)
class LoadResult:
    applied: int
    skipped: int


def load(map: MapHandle, keys, values, count: int, *, only: Existing = Existing.ANY,
         per_key: bool = False, batch_size: int = cursor.DEFAULT_BATCH,
         elem_flags: int = 0, tally: Tally | None = None, jobs: int | None = 1) -> LoadResult:
    """Write ``count`` packed records; raise :class:`LoadError` (``applied`` set, failing
    key and its record index named) if the kernel stops part-way.

    ``BPF_NOEXIST`` / ``BPF_EXIST`` are refused by ``BPF_MAP_UPDATE_BATCH`` (EINVAL), so
    ``only=ABSENT`` / ``PRESENT`` are done one of two ways:

    - default: one lookup pass over the map snapshots its keys, the records are filtered
      against it (for ``ABSENT`` the first of duplicate input keys wins, as with
      ``BPF_NOEXIST``), and the rest is batch-written. Cost: one full pass over the map
      (proportional to its bucket count, whatever the input size) plus the batch update.
      Race: a key another writer creates (``ABSENT``) or deletes (``PRESENT``) between the
      snapshot and the write is overwritten (re-created).
    - ``per_key=True``: one ``BPF_MAP_UPDATE_ELEM`` with ``BPF_NOEXIST``/``BPF_EXIST`` per
      record — exact under concurrent writers, one syscall per record.

    Map-in-map and program array values are inner map and program *ids*, as a dump prints
    them; each is opened for the write (an update takes fds) and closed afterwards. An id
    with no such object raises :class:`RecordError` before anything is written.

    ``tally`` counts the records applied as they go, and ``jobs`` writers share the batch
    update (see :func:`bpfbatch.map.writes.update`: with more than one, the records applied
    before a failure are not a prefix of the input).
    """
    require(map.info, "load")
    tally = tally if tally is not None else Tally()
    if map.info.type in _ID_VALUE_TYPES:
        with _fds_of_ids(values, count, map.info.type) as fds:
            return _load(map, keys, fds, count, only, per_key, batch_size, elem_flags, tally,
                         jobs)
    return _load(map, keys, values, count, only, per_key, batch_size, elem_flags, tally, jobs)


def _load(map: MapHandle, keys, values, count: int, only: Existing, per_key: bool, batch_size: int,
          elem_flags: int, tally: Tally, jobs: int | None) -> LoadResult:
    info = map.info
    if only is Existing.ABSENT and info.type in abi.ELEMENTS_ALWAYS_EXIST:
        raise InputError("array elements always exist: nothing could be loaded 'if absent'",
                         obj=info.label)
    if only is Existing.ANY:
        return LoadResult(_update(map, keys, values, count, batch_size, elem_flags, tally,
                                  jobs), 0)
    key_rows = _rows(keys, info.key_size, count)
    value_rows = _rows(values, info.value_stride, count)
    if per_key:
        return _load_per_key(map, key_rows, value_rows, only, elem_flags, tally)
    keep = _filter(map, key_rows, only, batch_size)
    chosen = int(keep.sum())
    if not chosen:
        return LoadResult(0, count)
    applied = _update(map, key_rows[keep], value_rows[keep], chosen, batch_size, elem_flags,
                      tally, jobs, indices=np.flatnonzero(keep))
    return LoadResult(applied, count - chosen)


class RecordError(InputError):
    """Input record ``index`` (an index into the caller's records) names something that does
    not exist; ``obj`` says ``record <index>`` until a caller that knows the source replaces
    it with ``file:line``."""

    def __init__(self, message: str, *, index: int, errno: int | None = None):
        super().__init__(message, obj=f"record {index}", errno=errno)
        self.index = index


def _writable_map_fd(map_id: int) -> int:
    return libbpf.map_fd_by_id(map_id, read_only=False)


_ID_VALUE_TYPES = {MapType.ARRAY_OF_MAPS: ("inner map", _writable_map_fd),
                   MapType.HASH_OF_MAPS: ("inner map", _writable_map_fd),
                   MapType.PROG_ARRAY: ("program", libbpf.prog_fd_by_id)}


@contextlib.contextmanager
def _fds_of_ids(values, count: int, kind: MapType) -> Iterator[np.ndarray]:
    """Values turned from object ids (what lookups and dumps give) into fds (what updates
    take), each distinct id opened once; the fds are closed on exit. Writing the ids as they
    are would fail with EBADF, or worse, insert whatever object an id happens to be an open
    fd of."""
    what, open_id = _ID_VALUE_TYPES[kind]
    ids = _rows(values, 4, count).view(np.uint32).reshape(count)
    distinct, first, position = np.unique(ids, return_index=True, return_inverse=True)
    fds: list[int] = []
    try:
        for object_id, index in zip(distinct.tolist(), first.tolist()):
            try:
                fds.append(open_id(object_id))
            except KernelError as exc:
                problem = "does not exist" if exc.errno == E.ENOENT else \
                    f"cannot be opened: {errno_meaning(exc.errno)}"
                raise RecordError(f"value: {what} id {object_id} {problem}", index=index,
                                  errno=exc.errno) from None
        yield np.array(fds, dtype=np.uint32)[position.reshape(count)]
    finally:
        for fd in fds:
            os.close(fd)


def _filter(map: MapHandle, key_rows: np.ndarray, only: Existing, batch_size: int) -> np.ndarray:
    """Which records pass ``only`` against one snapshot of the map's keys (a boolean mask);
    for ``ABSENT`` only the first of duplicate input keys passes. Vectorised: a Python set
    of a million keys costs seconds and a hundred megabytes."""
    present, _ = cursor.read_all(map, batch_size=batch_size)
    records = _scalars(key_rows)
    keep = _isin(records, _scalars(present))
    if only is Existing.PRESENT:
        return keep
    first = np.zeros(len(records), dtype=bool)
    first[np.unique(records, return_index=True)[1]] = True
    return first & ~keep


def _scalars(rows: np.ndarray) -> np.ndarray:
    """One comparable scalar per ``(n, width)`` byte row: an unsigned integer for the widths
    that have one (sorting them is about twice as fast), else a ``width``-byte void."""
    width = rows.shape[1]
    dtype = np.dtype(f"u{width}") if width in (1, 2, 4, 8) else np.dtype((np.void, width))
    return np.ascontiguousarray(rows).view(dtype).reshape(len(rows))


def _isin(needles: np.ndarray, haystack: np.ndarray) -> np.ndarray:
    """``np.isin`` by sort + binary search: for sparse integer keys ``np.isin`` falls back
    to a stable sort of both arrays together, several times slower at a million keys."""
    hay = np.sort(haystack)
    pos = np.searchsorted(hay, needles)
    found = pos < len(hay)
    found[found] = hay[pos[found]] == needles[found]
    return found


class LoadError(PartialError):
    """A load stopped part-way: ``applied`` records went in, then input record ``index``
    (an index into the caller's records, whatever was filtered out) failed. With several
    writers the applied records are not the first ``applied`` (``prefix`` is false), and the
    message says so."""

    def __init__(self, exc: PartialError, *, index: int, key: bytes, total: int):
        applied = f"{exc.applied} of {total} entries applied" if exc.prefix else \
            f"{exc.applied} of {total} entries applied by writers side by side (not the first " \
            f"{exc.applied}; --jobs 1 writes in order)"
        super().__init__(exc.op, exc.errno, applied=exc.applied, obj=exc.obj,
                         detail=f"{applied}, then key {key.hex()} failed", failed=index,
                         prefix=exc.prefix)
        self.index = index
        self.key = key


def _update(map: MapHandle, keys, values, count: int, batch_size: int, elem_flags: int,
            tally: Tally, jobs: int | None, indices: np.ndarray | None = None) -> int:
    """Batch update; on a part-way failure raise :class:`LoadError` naming the failing key
    and its index among the caller's records (``indices`` maps the written rows back)."""
    try:
        return writes.update(map, keys, values, count, batch_size=batch_size,
                             elem_flags=elem_flags, tally=tally, jobs=jobs)
    except PartialError as exc:
        key = _rows(keys, map.info.key_size, count)[exc.failed].tobytes()
        index = exc.failed if indices is None else int(indices[exc.failed])
        raise LoadError(exc, index=index, key=key, total=count) from None


def _load_per_key(map: MapHandle, keys: np.ndarray, values: np.ndarray, only: Existing,
                  elem_flags: int, tally: Tally) -> LoadResult:
    flag = abi.BPF_NOEXIST if only is Existing.ABSENT else abi.BPF_EXIST
    skip_errno = E.EEXIST if only is Existing.ABSENT else E.ENOENT
    applied = skipped = 0
    for index, (key, value) in enumerate(zip(keys, values)):
        try:
            with interrupts.deferred():
                map.update(key.tobytes(), value.tobytes(), flag | elem_flags)
                tally.add(1)
        except KernelError as exc:
            if exc.errno != skip_errno:
                failed = PartialError("update", exc.errno, applied=applied, obj=map.info.label)
                raise LoadError(failed, index=index, key=key.tobytes(), total=len(keys)) from None
            skipped += 1
            continue
        applied += 1
    return LoadResult(applied, skipped)


def _rows(data, width: int, count: int) -> np.ndarray:
    """``count`` rows of ``width`` bytes over ``data`` (no copy)."""
    if not count:
        return np.empty((0, width), dtype=np.uint8)
    return np.frombuffer(data, dtype=np.uint8, count=count * width).reshape(count, width)
