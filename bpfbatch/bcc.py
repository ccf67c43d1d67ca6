"""Batched drop-ins for the loops bcc tools run over their tables.

bcc's ``table.items()`` costs two syscalls per key and ``table.clear()`` deletes key by key
while walking, which makes the kernel restart its walk from the first bucket after every
delete (quadratic: minutes for a million entries). These functions take any bcc table (they
only use its ``map_fd``, ``Key`` and ``Leaf``) and do the same work with the kernel's batch
commands::

    from bpfbatch import bcc as batched

    for k, v in batched.items_and_clear(b["counts"]):   # was: items() then clear()
        ...

They return what bcc returns: ``(table.Key, table.Leaf)`` ctypes objects, and for per-CPU
tables the per-CPU array ``table[key]`` gives (``table.sLeaf × CPUs``, or the reducer's result
when the table was opened with one). The bcc module itself is not imported here.
"""

from __future__ import annotations

import array
import ctypes
import gc
from contextlib import contextmanager
from functools import reduce
from itertools import repeat

from . import interrupts
from ._sys import abi
from .errors import InputError
from .map import cursor, whole
from .map.cursor import Batch, BatchCursor
from .map.handle import Map


def items(table, *, batch_size: int = cursor.DEFAULT_BATCH) -> list[tuple]:
    """``table.items()`` with ``BPF_MAP_LOOKUP_BATCH``: a snapshot per bucket, not of the
    whole table (neither is bcc's)."""
    return _collect(table, delete=False, batch_size=batch_size)


def items_and_clear(table, *, batch_size: int = cursor.DEFAULT_BATCH) -> list[tuple]:
    """Read and delete every entry with ``BPF_MAP_LOOKUP_AND_DELETE_BATCH``: an update a BPF
    program makes between the read and the delete cannot be lost, unlike ``items()`` followed
    by ``clear()``. Tables whose elements cannot be deleted (arrays) are read, then zeroed.

    Nothing is lost if it does not return: entries are handed over only by the return, so
    on any exception (a KeyboardInterrupt included) everything drained so far is put back
    (:func:`bpfbatch.map.whole.put_back`: a key a BPF program re-created meanwhile keeps its
    new value), and each batch is deleted and kept with the signals deferred.
    """
    with _open(table) as map:
        if map.info.type in abi.ELEMENTS_ALWAYS_EXIST:
            entries = _collect(table, delete=False, batch_size=batch_size)
            whole.clear(map, batch_size=batch_size)
            return entries
        _check_types(table, map)
        taken: list[tuple[bytes, bytes, int]] = []
        try:
            whole.drain(map, lambda b: taken.append((bytes(b.keys), bytes(b.values), b.count)),
                        batch_size=batch_size)
            return _entries(table, taken)
        except BaseException:
            with interrupts.deferred():
                for keys, values, count in taken:
                    whole.put_back(map, Batch(count, memoryview(keys), memoryview(values)))
            raise


def clear(table, *, batch_size: int = cursor.DEFAULT_BATCH) -> int:
    """``table.clear()`` in linear time; returns how many entries were removed (arrays: how
    many were zeroed, as bcc's ``Array.clear()`` zeroes)."""
    with _open(table) as map:
        return whole.clear(map, batch_size=batch_size)


def _open(table) -> Map:
    """The table's map without taking ownership of bcc's fd."""
    return Map(table.map_fd, owned=False)


def _collect(table, *, delete: bool, batch_size: int) -> list[tuple]:
    with _open(table) as map:
        _check_types(table, map)
        return _entries(table, ((batch.keys, batch.values, batch.count) for batch in
                                BatchCursor(map, delete=delete, batch_size=batch_size)))


def _check_types(table, map: Map) -> None:
    ks, vs = ctypes.sizeof(table.Key), ctypes.sizeof(table.Leaf)
    if (ks, vs) != (map.info.key_size, map.info.value_stride):
        raise InputError(f"table types are {ks}/{vs} bytes, the map's key/value are "
                         f"{map.info.key_size}/{map.info.value_stride}", obj=map.info.label)


def _entries(table, batches) -> list[tuple]:
    """bcc's ``(Key, Leaf)`` objects of ``(keys, values, count)`` batches."""
    key_type, leaf_type = table.Key, table.Leaf
    convert = _leaf_converter(table)
    out: list[tuple] = []
    with _collector_paused():
        for keys, values, count in batches:
            out += _decoded(keys, values, count, key_type, leaf_type, convert)
    return out


def _decoded(keys, values, count: int, key_type, leaf_type, convert) -> list[tuple]:
    """``(Key, Leaf)`` objects of the ``count`` entries of a batch's ``keys`` and ``values``,
    each a copy (a cursor's buffers are reused by its next step), as bcc's ``items()`` builds
    them: also a scalar key or leaf is its ctypes object (``c_uint``), not the ``int`` a ctypes
    array hands out. Built by ``map()`` over the batch, so no Python bytecode runs per entry
    (unless a per-CPU leaf needs ``convert``)."""
    built_keys = _objects(key_type, keys, count)
    leaves = _objects(leaf_type, values, count)
    return list(zip(built_keys, map(convert, leaves) if convert else leaves))


#: The native ctypes scalars an ``array.array`` reads with the same bytes, by type code
#: (``c_bool`` and ``c_char`` are not among them: their constructors do not keep every byte;
#: nor ``c_float``: through a Python float a signalling NaN comes back quieted).
_SCALAR_CODES = {t: t._type_ for t in (
    ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short, ctypes.c_ushort, ctypes.c_int, ctypes.c_uint,
    ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong, ctypes.c_double)}


def _objects(ctype, buffer, count: int):
    """``count`` objects of ``ctype`` copied out of ``buffer``, in order.

    A native scalar is built from its number (``c_uint(n)`` over an ``array.array`` of the
    bytes), about a fifth cheaper than ``from_buffer_copy`` (which parses an argument tuple and
    takes a buffer per object); anything else by ``from_buffer_copy`` of a ``bytes`` copy, whose
    buffer it takes about twice as fast as a memoryview's."""
    size, data = ctypes.sizeof(ctype), bytes(buffer)
    code = _SCALAR_CODES.get(ctype)
    if code is not None:
        return map(ctype, array.array(code, data))
    return map(ctype.from_buffer_copy, repeat(data), range(0, count * size, size))


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
