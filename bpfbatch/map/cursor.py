"""The batch cursor: every read and drain of a map goes through here (writes: :mod:`.writes`).

Reading (``BPF_MAP_LOOKUP_BATCH``) and draining (``BPF_MAP_LOOKUP_AND_DELETE_BATCH``) follow
the kernel's contract (``kernel/bpf/syscall.c`` ``generic_map_lookup_batch``,
``kernel/bpf/hashtab.c`` ``__htab_map_lookup_and_delete_batch``):

- the first call passes ``in_batch = NULL`` (a zeroed token would skip key 0 of an array);
  the token is an opaque ``max(key_size, 4)``-byte buffer (a u32 bucket index for the hash
  family, a key for the generic ops) that serves as both ``in_batch`` and ``out_batch``, since
  the kernel reads the one before writing the other;
- ``count`` entries are consumed on *every* return that reports them — ``0`` (a short batch is
  not the end), ``ENOENT`` (the end, possibly with the last entries), ``EBUSY``/lock errors
  (entries copied before the contended bucket); a ``0`` return with no entries is an error,
  never a loop;
- ``ENOSPC`` (a bucket larger than the batch) doubles the batch, up to ``max_entries``, and
  retries from the same token; lock contention is retried; both have budgets that end in an
  error naming the map, never in a silently short result;
- where the kernel has no batch op for the map type (``ENOTSUPP``, 524; ``EINVAL`` before
  5.6) or gives up on a generic map with holes (``EINTR``, kernels ≤ 6.13), the cursor falls
  back, once per map type and op and remembered, to a per-key walk that fetches the next key
  before deleting the current one.

A dump is never an atomic snapshot: each hash bucket is copied atomically, but entries added
behind the cursor are missed and values may change after they were read. One pass over a hash
map never returns a key twice. A drain is atomic per bucket: whatever it deletes is in the
batch it returns.

"""

from __future__ import annotations

import ctypes
import dataclasses
import errno as E
import queue
import threading
from collections.abc import Iterable, Iterator

from .._sys import abi
from .._sys.libbpf import lib
from ..errors import (
    ENOTSUPP,
    InputError,
    KernelError,
    NotSupportedError,
    RetryBudgetError,
    from_errno,
)
from . import probes
from .handle import DEFAULT_BATCH, MapHandle, require

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    import numpy as np

#: Upper bound of one batch's buffers: a per-CPU map with large values on a many-CPU host
#: would otherwise need gigabytes for a default-sized batch. ENOSPC growth may still exceed it
#: when one bucket needs more.
MAX_BATCH_BYTES = 64 << 20
#: Lock-contention retries (EBUSY; rqspinlock's EDEADLK/ETIMEDOUT on 6.15+) per cursor step.
LOCK_RETRIES = 64
# Transient bucket-lock failures: the kernel reports what it copied before the bucket.
_LOCK_ERRNOS = frozenset({E.EBUSY, E.EDEADLK, E.ETIMEDOUT})

@dataclasses.dataclass(frozen=True)
class Batch:
    """``count`` elements handed out by one batch call: zero-copy views into the cursor's
    reused buffers, valid until the cursor's next step (copy what you keep).

    ``keys`` holds ``count × key_size`` bytes, ``values`` ``count × value_stride`` bytes
    (see :attr:`bpfbatch.map.handle.MapInfo.value_stride`; per-CPU values hold every possible CPU).
    """

    count: int
    keys: memoryview
    values: memoryview
    #: ``(index, errno)`` of the entries whose value lookup failed, when the cursor was asked
    #: for them (``lookup_errors``): the key is at ``index``, the value bytes are zero. What
    #: bpftool prints as ``{"error": ...}`` (an empty devmap slot, a sockmap's socket).
    failed: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class CursorToken:
    """Where a pass stopped, to resume it later with ``BatchCursor(map, resume=token)``.

    Bound to one map (by id) and one command: the raw token means nothing elsewhere.
    """

    map_id: int
    delete: bool
    raw: bytes | None  # None: nothing consumed yet (the next call passes in_batch = NULL)


def check_batch_size(batch_size: int) -> int:
    """``batch_size`` if usable, else an :class:`InputError` naming ``batch_size``.

    Zero would never make progress and a negative number wraps to 2**32 - 1 in the kernel's
    ``u32 count``, which makes it read past the caller's buffers.
    """
    if batch_size <= 0:
        raise InputError(f"must be a positive number, got {batch_size}", obj="batch_size")
    return batch_size


class _Buffers:
    """Key and value buffers for ``size`` elements; replaced, never resized, when the batch
    grows, so views handed out earlier stay valid."""

    def __init__(self, size: int, key_size: int, value_stride: int):
        self.size = size
        self.keys = bytearray(size * key_size)
        self.values = bytearray(max(size * value_stride, 1))
        self.keys_ptr = ctypes.addressof(ctypes.c_char.from_buffer(self.keys)) if self.keys else None
        self.values_ptr = ctypes.addressof(ctypes.c_char.from_buffer(self.values))


class BatchCursor:
    """Iterate a map's elements in batches: ``for batch in BatchCursor(m): ...``.

    ``delete=True`` drains the map (LOOKUP_AND_DELETE). ``batch_size`` is the number of
    elements asked for per call (capped at ``max_entries``); it grows on ENOSPC at most
    ``max_growth`` doublings. A ``batch_size`` of 0 asks for nothing, as a batch call with
    ``count = 0`` does: the pass is empty and the map untouched (no call is made).
    ``elem_flags`` may be ``BPF_F_LOCK``. ``force_fallback`` uses the per-key walk even where
    batch ops exist (to compare the two paths). ``lookup_errors``: a key of the per-key walk
    whose value cannot be read is handed out with its errno in :attr:`Batch.failed` instead
    of being skipped (or failing the pass), as bpftool lists it; empty slots of program
    arrays and maps of maps stay skipped, as bpftool skips them.
    """

    def __init__(self, map: MapHandle, *, delete: bool = False, batch_size: int = DEFAULT_BATCH,
                 max_growth: int = 24, elem_flags: int = 0, resume: CursorToken | None = None,
                 force_fallback: bool = False, lookup_errors: bool = False):
        if batch_size < 0:
            check_batch_size(batch_size)
        # a pass that deletes is a clear; one that lists failed lookups needs only the keys
        require(map.info, "clear" if delete else "slots" if lookup_errors else "dump")
        self._pop = map.info.type in abi.POP_TYPES  # a drain of a queue or stack
        if map.info.key_size == 0 and not self._pop:
            raise NotSupportedError("walk map", ENOTSUPP, obj=map.info.label,
                                    detail=f"{map.info.type_name} maps have no keys to walk")
        self.map = map
        self.lookup_errors = lookup_errors
        self.info = map.info
        self.delete = delete
        self.elem_flags = elem_flags
        self.max_growth = max_growth
        self.op = "lookup_and_delete batch" if delete else "lookup batch"
        self._fn = lib.bpf_map_lookup_and_delete_batch if delete else lib.bpf_map_lookup_batch
        self._opts = abi.opts(abi.BpfMapBatchOpts, elem_flags=elem_flags)
        self._stride = self.info.value_stride
        self._token = ctypes.create_string_buffer(max(self.info.key_size, 4))
        self._started = False
        self._done = batch_size == 0
        self._fallback = force_fallback or probes.batch_op_missing(self.info.type, self.op)
        self._next_key: bytes | None = None  # per-key walk position
        self._walked = 0  # per-key steps in this pass (bounded, see _step_per_key)
        if resume is not None:
            self._resume(resume)
        fitting = MAX_BATCH_BYTES // (self.info.key_size + self._stride)
        self._buf = _Buffers(max(1, min(batch_size, self.info.max_entries or batch_size, fitting)),
                             self.info.key_size, self._stride)

    @property
    def token_size(self) -> int:
        return len(self._token)

    @property
    def done(self) -> bool:
        return self._done

    def token(self) -> CursorToken:
        """Where this pass stands now (see :class:`CursorToken`)."""
        return CursorToken(self.info.id, self.delete,
                           bytes(self._token.raw) if self._started else None)

    def _resume(self, token: CursorToken) -> None:
        if token.map_id != self.info.id or token.delete != self.delete:
            raise InputError(f"cursor token belongs to map {token.map_id} "
                             f"({'drain' if token.delete else 'lookup'}), not to this pass",
                             obj=self.info.label)
        if token.raw is not None:
            ctypes.memmove(self._token, token.raw, len(self._token))
            self._started = True
            if self._fallback:  # the per-key walk's token is the last key it handed out
                self._next_key = self.map.next_key(token.raw[: self.info.key_size])
                self._done = self._next_key is None

    def __iter__(self) -> Iterator[Batch]:
        while not self._done:
            if self._pop:
                batch = self._step_pop()
            else:
                batch = self._step_per_key() if self._fallback else self._step_batch()
            if batch is not None and batch.count:
                yield batch

    def _step_pop(self) -> Batch | None:
        """Pop up to a batch of a queue's or stack's elements, in pop order (no keys)."""
        buf, vs = self._buf, self._stride
        n = 0
        while n < buf.size:
            value = self.map.pop()
            if value is None:
                self._done = True
                break
            buf.values[n * vs:(n + 1) * vs] = value
            n += 1
        return self._batch(n) if n else None

    # -- the batch path ------------------------------------------------------------------

    def _step_batch(self) -> Batch | None:
        """One kernel call (plus retries); returns the entries it reported, or None."""
        growth = lock_retries = 0
        while True:
            buf = self._buf
            count = ctypes.c_uint32(buf.size)
            in_batch = self._token if self._started else None
            ret = self._fn(self.map.fd, in_batch, self._token, buf.keys_ptr, buf.values_ptr,
                           ctypes.byref(count), ctypes.byref(self._opts))
            err = -ret
            if ret == 0 or err in (E.ENOENT, E.EINTR) or err in _LOCK_ERRNOS:
                n = count.value
                if n > buf.size:
                    raise KernelError(self.op, err or E.EINVAL, obj=self.info.label,
                                      detail=f"kernel reported {n} entries for a {buf.size}-entry batch")
                if n:
                    self._started = True
                if err == E.ENOENT:
                    self._done = True
                elif ret == 0 and n == 0:
                    raise KernelError(self.op, E.EINVAL, obj=self.info.label,
                                      detail="kernel returned no entries and no end of map")
                elif err == E.EINTR:
                    if self.info.type in abi.HASH_TYPES:
                        raise from_errno(self.op, err, obj=self.info.label)
                    # A generic map slot without a value (kernels <= 6.13): what was copied
                    # before it is valid; the rest of the pass goes key by key.
                    self._switch_to_fallback()
                elif err in _LOCK_ERRNOS and not n:
                    # Entries a drain already took are handed out before any budget check.
                    lock_retries += 1
                    if lock_retries > LOCK_RETRIES:
                        raise RetryBudgetError(self.op, err, obj=self.info.label,
                                               detail=f"bucket lock still contended after {LOCK_RETRIES} retries")
                    continue
                return self._batch(n) if n else None
            if err == E.ENOSPC:
                growth += 1
                limit = max(self.info.max_entries, 1)
                if growth > self.max_growth or buf.size >= limit:
                    raise RetryBudgetError(
                        self.op, err, obj=self.info.label,
                        detail=f"a hash bucket does not fit a batch of {buf.size} entries")
                self._buf = _Buffers(min(buf.size * 2, limit), self.info.key_size, self._stride)
                continue
            if self._should_fall_back(err):
                self._switch_to_fallback()
                return None
            raise from_errno(self.op, err, obj=self.info.label)

    def _batch(self, n: int) -> Batch:
        buf = self._buf
        return Batch(n, memoryview(buf.keys)[: n * self.info.key_size],
                     memoryview(buf.values)[: n * self._stride])

    def _should_fall_back(self, err: int) -> bool:
        if err == ENOTSUPP:
            if self.delete and self.info.type in abi.ELEMENTS_ALWAYS_EXIST:
                return False  # array elements cannot be deleted at all: report it
            probes.remember_batch_op_missing(self.info.type, self.op)
            return True
        if err == E.EINVAL and not self.elem_flags and not probes.batch_api():
            probes.remember_batch_op_missing(self.info.type, self.op)
            return True
        return False

    def _switch_to_fallback(self) -> None:
        """Continue the same pass key by key, after the last key the batch path returned.

        Only reached before anything was consumed (ENOTSUPP, old-kernel EINVAL) or on a
        generic map, whose token is a key; a hash token is a bucket index."""
        self._fallback = True
        if not self._started:
            self._started = True
            self._next_key = self.map.next_key(None)
        else:
            self._next_key = self.map.next_key(self._token.raw[: self.info.key_size])
        if self._next_key is None:
            self._done = True

    # -- the per-key fallback ------------------------------------------------------------

    def _step_per_key(self) -> Batch | None:
        """Fill one batch key by key: ``get_next_key`` is asked for the successor *before*
        the current key is deleted, so a drain stays linear (deleting first makes the kernel
        restart from bucket 0 on every call: bcc's quadratic ``clear()``).

        Unlike a batch pass, this walk can repeat keys: when another writer deletes the key
        it stands on, ``get_next_key`` restarts from the first key. Like cilium's
        ``MapIterator`` it is therefore bounded: a lookup pass that takes more than
        ``max_entries`` steps fails; a drain just ends there (whatever it took was handed out,
        and a writer that keeps inserting would otherwise keep it going forever).
        """
        if not self._started:
            self._started = True
            self._next_key = self.map.next_key(None)
        buf, ks, vs = self._buf, self.info.key_size, self._stride
        limit = max(self.info.max_entries, 1)
        n = 0
        failed: list[tuple[int, int]] = []
        while self._next_key is not None and n < buf.size:
            if self._walked >= limit:
                if self.delete:
                    self._next_key = None
                    break
                raise RetryBudgetError(
                    "walk map", E.EINTR, obj=self.info.label,
                    detail=f"per-key walk passed {limit} keys: concurrent deletes keep "
                           "restarting it")
            self._walked += 1
            key = self._next_key
            self._next_key = self.map.next_key(key)
            try:
                value = self.map.lookup(key, flags=self.elem_flags)
                error = E.ENOENT
            except KernelError as exc:
                if not self.lookup_errors or self.delete:
                    raise
                value, error = None, exc.errno
            if value is None:
                if self.lookup_errors and not self.delete and not (
                        error == E.ENOENT and self.info.type in _HOLES_UNLISTED):
                    failed.append((n, error))
                    buf.keys[n * ks:(n + 1) * ks] = key
                    buf.values[n * vs:(n + 1) * vs] = bytes(vs)
                    n += 1
                    last = key
                continue  # vanished between get_next_key and lookup, or an empty slot
            if self.delete and not self.map.delete(key):
                continue  # someone else deleted it first: it is theirs, not ours
            buf.keys[n * ks:(n + 1) * ks] = key
            buf.values[n * vs:(n + 1) * vs] = value
            n += 1
            last = key
        if n:
            ctypes.memmove(self._token, last, ks)
        if self._next_key is None:
            self._done = True
        return dataclasses.replace(self._batch(n), failed=tuple(failed)) if n else None


#: Types whose empty slots bpftool does not list (``print_entry_error``).
_HOLES_UNLISTED = frozenset({abi.MapType.PROG_ARRAY, abi.MapType.ARRAY_OF_MAPS,
                             abi.MapType.HASH_OF_MAPS})


def read_all(map: MapHandle, *, delete: bool = False, batch_size: int = DEFAULT_BATCH,
             **options) -> tuple["np.ndarray", "np.ndarray"]:
    """Every element as two ``uint8`` arrays of shape ``(n, key_size)`` and
    ``(n, value_stride)`` — one copy per batch, no Python object per element.

    The result arrays are reserved for ``max_entries`` elements up front; pages never written
    (a sparse map) are never committed, so this costs what the map holds, not its capacity.
    """
    import numpy as np  # here, not at module level: commands that make no arrays start faster

    info = map.info
    capacity = max(info.max_entries, 1)
    keys = np.empty((capacity, info.key_size), np.uint8)
    values = np.empty((capacity, info.value_stride), np.uint8)
    n = 0
    for batch in BatchCursor(map, delete=delete, batch_size=batch_size, **options):
        if n + batch.count > len(keys):  # more than max_entries: the map changed under us
            keys = np.concatenate([keys, np.empty_like(keys)])
            values = np.concatenate([values, np.empty_like(values)])
        keys[n:n + batch.count] = np.frombuffer(batch.keys, np.uint8).reshape(-1, info.key_size)
        values[n:n + batch.count] = np.frombuffer(batch.values, np.uint8).reshape(
            -1, info.value_stride)
        n += batch.count
    return keys[:n], values[:n]


# -- overlapping reads with the consumer's work ----------------------------------------------------

_END = object()


def read_ahead(batches: Iterable[Batch], depth: int = 2) -> Iterator[Batch]:
    """Yield ``batches`` while a thread already reads the next ones.

    The batch syscalls run in a background thread (ctypes releases the GIL during them), so
    the kernel copies the next batch while this thread formats the current one: a dump
    costs about max(kernel, formatting) instead of their sum. Each batch is copied out of
    the cursor's reused buffers (a memcpy, small next to the syscall); at most ``depth``
    wait in between. Errors of the reading side are raised here; leaving the loop early
    stops the reader before this generator returns (the map may be closed right after).

    Only for reads that change nothing: a drain would have deleted what is read ahead.
    """
    pending: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                pending.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def reader() -> None:
        try:
            for batch in batches:
                owned = Batch(batch.count, memoryview(bytes(batch.keys)),
                              memoryview(bytes(batch.values)), batch.failed)
                if not offer(owned):
                    return
            offer(_END)
        except BaseException as exc:  # handed to the consuming thread
            offer(exc)

    thread = threading.Thread(target=reader, name="bpfbatch-read-ahead", daemon=True)
    thread.start()
    try:
        while (item := pending.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
