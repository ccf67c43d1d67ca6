"""Batched drop-ins for the loops bcc tools run over their tables.

bcc's ``table.items()`` costs two syscalls per key and ``table.clear()`` deletes key by key
while walking, which makes the kernel restart its walk from the first bucket after every
delete (quadratic: minutes for a million entries). These functions take any bcc table (they
only use its ``map_fd``, ``Key`` and ``Leaf``) and do the same work with the kernel's batch
commands::

    from bpfbatch import bcc as batched

    for k, v in batched.items_and_clear(b["counts"]):   # was: items() then clear()
        ...

:func:`items` and :func:`items_and_clear` return what bcc's ``items()`` returns:
``(table.Key, table.Leaf)`` ctypes objects, and for per-CPU tables the per-CPU array
``table[key]`` gives (``table.sLeaf × CPUs``, or the reducer's result when the table was
opened with one). :func:`items_lookup_batch` and :func:`items_lookup_and_delete_batch` return
what bcc's batch calls of those names return: what indexing a ctypes array of ``Key`` and of
``Leaf`` gives, a plain number for a scalar (``int`` where ``items()`` gives ``c_uint``), which
is cheaper to build. The bcc module itself is not imported here.

The event loops' drop-ins (``open_perf_buffer``, ``perf_buffer_poll``, ``open_ring_buffer``,
``ring_buffer_poll``, ``ring_buffer_consume``, ``close_buffer``) are
:mod:`bpfbatch.events.bccpoll`'s, reachable here too (imported on first use).
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from functools import reduce
from itertools import repeat
from operator import attrgetter

from . import delivery, interrupts
from ._sys import abi
from .api import Map
from .delivery import PutBack
from .errors import BpfBatchError, InputError
from .map import cursor, whole
from .map.cursor import Batch, BatchCursor


def items(table, *, batch_size: int = cursor.DEFAULT_BATCH) -> list[tuple]:
    """``table.items()`` with ``BPF_MAP_LOOKUP_BATCH``: a snapshot per bucket, not of the
    whole table (neither is bcc's)."""
    return _collect(table, _objects_of(table), batch_size=batch_size)


def items_and_clear(table, *, batch_size: int = cursor.DEFAULT_BATCH) -> list[tuple]:
    """Read and delete every entry with ``BPF_MAP_LOOKUP_AND_DELETE_BATCH``: an update a BPF
    program makes between the read and the delete cannot be lost, unlike ``items()`` followed
    by ``clear()``. Tables whose elements cannot be deleted (arrays) are read, then zeroed.

    Nothing is lost if it does not return: entries are handed over only by the return, so
    on any exception (a KeyboardInterrupt included) everything drained so far is put back
    (:func:`bpfbatch.map.whole.put_back`: a key a BPF program re-created meanwhile keeps its
    new value), and each batch is deleted and kept with the signals deferred.
    """
    return _drain(table, _objects_of(table), batch_size=batch_size)


def items_lookup_batch(table, *, batch_size: int = cursor.DEFAULT_BATCH) -> list[tuple]:
    """bcc's ``table.items_lookup_batch()``: the same ``(key, leaf)`` pairs of the same types
    (see :func:`_array_items`). bcc's is a generator that reads the table at its first
    ``next()``; this reads it before returning, and returns a list (iterated the same way),
    so that what :func:`items_lookup_and_delete_batch` hands over stays whole in the
    caller's hands. A snapshot per bucket, as :func:`items`."""
    return _collect(table, _array_items_of(table), batch_size=batch_size)


def items_lookup_and_delete_batch(table, *,
                                  batch_size: int = cursor.DEFAULT_BATCH) -> list[tuple]:
    """bcc's ``table.items_lookup_and_delete_batch()``: the pairs of
    :func:`items_lookup_batch`, drained with the guarantee of :func:`items_and_clear`
    (nothing lost if it raises; arrays, which bcc's call refuses, are read, then zeroed, as
    bcc's ``del table[key]`` zeroes an array's element)."""
    return _drain(table, _array_items_of(table), batch_size=batch_size)


def clear(table, *, batch_size: int = cursor.DEFAULT_BATCH) -> int:
    """``table.clear()`` in linear time; returns how many entries were removed (arrays: how
    many were zeroed, as bcc's ``Array.clear()`` zeroes)."""
    with _open(table) as map:
        return whole.clear(map, batch_size=batch_size)


def _open(table) -> Map:
    """The table's map without taking ownership of bcc's fd."""
    return Map(table.map_fd, owned=False)


#: Makes the ``(key, leaf)`` pairs of a batch's ``keys`` and ``values`` bytes, ``count`` of
#: each: an iterable that reads the bytes as it goes, so it is consumed before the cursor's
#: next step reuses its buffers, and that keeps copies only.
_Builder = Callable[[memoryview | bytes, memoryview | bytes, int], Iterable[tuple]]


def _collect(table, build: _Builder, *, batch_size: int) -> list[tuple]:
    with _open(table) as map:
        _check_types(table, map)
        return _read(map, build, batch_size=batch_size)


def _read(map: Map, build: _Builder, *, batch_size: int) -> list[tuple]:
    """What ``build`` makes of every batch of one pass over ``map``, in order."""
    return _entries(build, ((batch.keys, batch.values, batch.count) for batch in
                            BatchCursor(map, batch_size=batch_size)))


def _drain(table, build: _Builder, *, batch_size: int) -> list[tuple]:
    """Every entry of ``table``, deleted (arrays: zeroed) — or, if this raises, none."""
    with _open(table) as map:
        _check_types(table, map)
        if map.info.type in abi.ELEMENTS_ALWAYS_EXIST:
            entries = _read(map, build, batch_size=batch_size)
            whole.clear(map, batch_size=batch_size)
            return entries
        taken = _Taken(map)
        delivery.hold(taken)  # until returned: also put back by a default SIGTERM, exit
        try:
            whole.drain(map, taken.add, batch_size=batch_size)
            return _entries(build, taken.batches)
        except BaseException:
            with interrupts.deferred():
                taken.put_back()
            raise
        finally:
            delivery.release(taken)


class _Taken:
    """What a drop-in drained and holds until it returns: copies of each batch, added in
    the batch's critical section (the sink of :func:`bpfbatch.map.whole.drain`)."""

    def __init__(self, map: Map):
        self.map = map
        self.batches: list[tuple[bytes, bytes, int]] = []

    def add(self, batch: Batch) -> None:
        self.batches.append((bytes(batch.keys), bytes(batch.values), batch.count))

    def put_back(self) -> None:
        """Every batch back into the map (once); records the kernel refused are an error."""
        batches, self.batches = self.batches, []
        back = sum((whole.put_back(self.map, Batch(count, memoryview(keys), memoryview(values)))
                    for keys, values, count in batches), PutBack(0))
        if back.lost:
            raise BpfBatchError(f"drain stopped: {back}", obj=self.map.info.label,
                                errno=back.errno)


def _check_types(table, map: Map) -> None:
    ks, vs = ctypes.sizeof(table.Key), ctypes.sizeof(table.Leaf)
    if (ks, vs) != (map.info.key_size, map.info.value_stride):
        raise InputError(f"table types are {ks}/{vs} bytes, the map's key/value are "
                         f"{map.info.key_size}/{map.info.value_stride}", obj=map.info.label)


def _entries(build: _Builder, batches) -> list[tuple]:
    """The pairs ``build`` makes of each ``(keys, values, count)`` batch, in order."""
    out: list[tuple] = []
    with _collector_paused():
        for keys, values, count in batches:
            out += build(keys, values, count)
    return out


def _objects_of(table) -> _Builder:
    """``(Key, Leaf)`` objects as bcc's ``items()`` builds them: also a scalar key or leaf is
    its ctypes object (``c_uint``), not the ``int`` a ctypes array hands out; a per-CPU leaf
    as ``table[key]`` gives it. Built by ``map()`` over the batch, so no Python bytecode runs
    per entry (unless a per-CPU leaf needs converting)."""
    key_type, leaf_type, convert = table.Key, table.Leaf, _leaf_converter(table)

    def build(keys, values, count: int):
        leaves = _objects(leaf_type, values, count)
        return zip(_objects(key_type, keys, count), map(convert, leaves) if convert else leaves)
    return build


def _array_items_of(table) -> _Builder:
    """``(key, leaf)`` pairs as bcc's batch calls hand them out (see :func:`_array_items`);
    a per-CPU leaf is the raw ``Leaf`` array, reducer or not, as there."""
    key_type, leaf_type = table.Key, table.Leaf

    def build(keys, values, count: int):
        return zip(_array_items(key_type, keys, count), _array_items(leaf_type, values, count))
    return build


#: The native ctypes scalars whose value a ``memoryview`` cast to their type code reads as
#: ctypes reads it (``c_bool`` and ``c_char`` are left to ctypes itself).
_NUMBER_CODES = {t: t._type_ for t in (
    ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short, ctypes.c_ushort, ctypes.c_int, ctypes.c_uint,
    ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong, ctypes.c_float,
    ctypes.c_double)}
#: Those that can be built from their number with every byte kept (not ``c_float``: through a
#: Python float a signalling NaN comes back quieted).
_CONSTRUCTIBLE = {t: code for t, code in _NUMBER_CODES.items() if t is not ctypes.c_float}
_VALUE = attrgetter("value")


def _objects(ctype, buffer, count: int):
    """``count`` objects of ``ctype`` copied out of ``buffer``, in order.

    A native scalar is built from its number (``c_uint(n)`` over the buffer cast to its type
    code), about a fifth cheaper than ``from_buffer_copy`` (which parses an argument tuple and
    takes a buffer per object); anything else by ``from_buffer_copy`` of a ``bytes`` copy, whose
    buffer it takes about twice as fast as a memoryview's."""
    code = _CONSTRUCTIBLE.get(ctype)
    if code is not None:
        return map(ctype, memoryview(buffer).cast(code))
    size, data = ctypes.sizeof(ctype), bytes(buffer)
    return map(ctype.from_buffer_copy, repeat(data), range(0, count * size, size))


def _array_items(ctype, buffer, count: int):
    """What ``array[i]`` gives for each of the ``count`` items of a ``ctype`` array over
    ``buffer``, as bcc's batch calls hand them out: a fundamental scalar type's number (an
    ``int``, a ``float``, a ``bool``, a one-byte ``bytes`` for ``c_char``), anything else (a
    struct, a per-CPU array, a subclass of a scalar) an object of ``ctype``. Numbers are read
    by a ``memoryview`` cast, which makes no ctypes object at all; the objects are copies
    (bcc's share one array's memory: the same type and bytes)."""
    code = _NUMBER_CODES.get(ctype)
    if code is not None:
        return memoryview(buffer).cast(code)
    objects = _objects(ctype, buffer, count)
    if ctype.__base__ is ctypes._SimpleCData:  # ctypes hands out such an item's value
        return map(_VALUE, objects)
    return objects


@contextmanager
def _collector_paused():
    """The cyclic garbage collector off for the block (back on after, if it was on), and what
    the block built handed to the oldest generation.

    The entries are acyclic, and creating a few hundred thousand container objects would
    otherwise set off a young-generation collection every 700, each also scanning what was
    built so far: about half the time of a read-out. Switched back on, the collector would
    still scan them all once as young objects, and again as middle-aged ones, to find nothing
    to free (bcc's batch calls hand out ``int`` tuples, which the first scan stops tracking);
    ``freeze()`` + ``unfreeze()`` moves every young object to the oldest generation without a
    scan. Skipped when the process keeps objects frozen itself: ``unfreeze()`` would release
    them too."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if was_on:
            gc.enable()


def _leaf_converter(table):
    """What bcc's ``table[key]`` makes of a raw leaf (``None``: the leaf as read): per-CPU
    tables whose leaf is not a multiple of 8 bytes are read as ``u64 × CPUs`` and copied into
    ``sLeaf × CPUs``; a reducer folds the CPUs into one value."""
    single = getattr(table, "sLeaf", None)
    if single is None:
        return None
    per_cpu = single * table.total_cpu
    widened = getattr(table, "alignment", 0) != 0
    reducer = getattr(table, "reducer", None)

    def convert(leaf):
        if widened:
            leaf = per_cpu(*leaf)
        return reduce(reducer, leaf) if reducer else leaf
    return convert


#: The event loops' drop-ins, :mod:`bpfbatch.events.bccpoll`'s (numpy comes with them).
_EVENT_DROP_INS = frozenset({"open_perf_buffer", "perf_buffer_poll", "open_ring_buffer",
                             "ring_buffer_poll", "ring_buffer_consume", "close_buffer"})


def __getattr__(name: str):
    if name in _EVENT_DROP_INS:
        from .events import bccpoll

        return getattr(bccpoll, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
