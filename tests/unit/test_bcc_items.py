"""The bcc drop-ins' two ways of turning a batch's bytes into items, fuzzed against ctypes
itself: what indexing a ctypes array gives (bcc's batch calls), and the ctypes object of
every item with every byte kept (bcc's ``items()``)."""

import ctypes
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch import bcc as batched


class Flow(ctypes.Structure):
    _fields_ = [("saddr", ctypes.c_uint32), ("dport", ctypes.c_uint16), ("proto", ctypes.c_uint8)]


class Count(ctypes.c_uint):  # a subclass: ctypes hands out the object, not the number
    pass


TYPES = [ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short, ctypes.c_ushort, ctypes.c_int,
         ctypes.c_uint, ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong,
         ctypes.c_float, ctypes.c_double, ctypes.c_char, ctypes.c_bool, Flow, Count,
         ctypes.c_uint64 * 3, ctypes.c_char * 5]


@st.composite
def batches(draw):
    ctype = draw(st.sampled_from(TYPES))
    count = draw(st.integers(0, 40))
    if ctype is ctypes.c_bool:  # a _Bool byte other than 0 or 1 has no defined value
        data = bytes(draw(st.lists(st.integers(0, 1), min_size=count, max_size=count)))
    else:
        data = draw(st.binary(min_size=count * ctypes.sizeof(ctype),
                              max_size=count * ctypes.sizeof(ctype)))
    return ctype, data, count


def _exact(x):
    """An item as its exact type with its bytes (ctypes objects) or value (floats by bits)."""
    if isinstance(x, ctypes._SimpleCData | ctypes.Structure | ctypes.Array):
        return type(x), bytes(x)
    return type(x), struct.pack("d", x) if isinstance(x, float) else x


@settings(max_examples=300, deadline=None)
@given(batches())
def test_array_items_are_what_indexing_a_ctypes_array_gives(batch):
    ctype, data, count = batch
    array = (ctype * count).from_buffer_copy(data)
    expected = [_exact(array[i]) for i in range(count)]
    assert [_exact(x) for x in batched._array_items(ctype, memoryview(data), count)] == expected


@settings(max_examples=300, deadline=None)
@given(batches())
def test_objects_are_the_ctypes_objects_with_every_byte(batch):
    ctype, data, count = batch
    size = ctypes.sizeof(ctype)
    expected = [(ctype, data[i * size:(i + 1) * size]) for i in range(count)]
    assert [(type(x), bytes(x)) for x in batched._objects(ctype, memoryview(data), count)] == \
        expected
