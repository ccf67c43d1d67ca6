"""The layout tree as data: every node kind served by every job module, nodes immutable, and
the questions consumers ask of the tree (leaf_kind, scalar_type, integer_field, extent)
checked against ctypes, which lays a struct out as the C compiler does."""

from __future__ import annotations

import ctypes
import dataclasses
import inspect

import numpy as np
import pytest

from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.records import cpusum, decoding, encode, fill, layout, template, values
from bpfbatch.records.codec import BtfCodec, PerCpuCodec
from bpfbatch.records.layout import (
    LeafKind,
    extent,
    integer_field,
    leaf_columns,
    leaf_kind,
    scalar_type,
)

NODE_KINDS = [cls for _, cls in inspect.getmembers(layout, inspect.isclass)
              if issubclass(cls, layout.Node) and cls is not layout.Node]


def implemented(job, cls) -> bool:
    """Whether ``job`` (a singledispatch function) has its own answer for ``cls``, not the
    default that refuses a node kind it does not know."""
    return job.dispatch(cls) is not job.dispatch(layout.Node)


@pytest.mark.parametrize("cls", NODE_KINDS, ids=lambda c: c.__name__)
def test_every_node_kind_has_the_jobs_every_output_needs(cls):
    for job in (values.values, encode.encoder, template.emit, leaf_kind):
        assert implemented(job, cls), (job.__name__, cls.__name__)


def test_node_kinds_made_elsewhere_register_their_jobs():
    for job in (values.values, encode.encoder, template.emit, leaf_kind, values.dtype,
                fill.fill, fill.can_fill, fill.blank):
        assert implemented(job, decoding.Decoded), job.__name__
    for job in (values.values, template.emit, leaf_kind):
        assert implemented(job, cpusum.Summed), job.__name__
    assert not implemented(fill.fill, cpusum.Summed)  # a sum is shown, never loaded


def test_nodes_are_frozen_data():
    node = layout.Int(4, 2, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.offset = 0
    moved = dataclasses.replace(node, offset=0)
    assert (moved.offset, node.offset) == (0, 4)
    assert moved == layout.Int(0, 2, True) and moved.np_type == "<i2"


class _Point(ctypes.LittleEndianStructure):
    _fields_ = [("x", ctypes.c_int16), ("y", ctypes.c_uint16)]


class _Record(ctypes.LittleEndianStructure):
    _fields_ = [("id", ctypes.c_uint64), ("delta", ctypes.c_int32), ("name", ctypes.c_char * 6),
                ("color", ctypes.c_int32), ("flag", ctypes.c_bool), ("letter", ctypes.c_char),
                ("ratio", ctypes.c_double), ("share", ctypes.c_float), ("at", _Point),
                ("hist", ctypes.c_uint16 * 3), ("tiny", ctypes.c_int8), ("ptr", ctypes.c_void_p),
                ("bits", ctypes.c_uint32, 5)]


def _record(b):
    u16, s32 = b.integer("__u16", 2), b.integer("int", 4, signed=True)
    point = b.struct("point", [("x", b.integer("short", 2, signed=True)), ("y", u16)])
    return b.struct("record", [
        ("id", b.integer("__u64", 8)), ("delta", s32),
        ("name", b.array(b.integer("char", 1, signed=True), 6)),
        ("color", b.enum("color", {"RED": 0, "MINUS": -1})),
        ("flag", b.integer("_Bool", 1, boolean=True)), ("letter", b.integer("c", 1, char=True)),
        ("ratio", b.float("double", 8)), ("share", b.float("float", 4)), ("at", point),
        ("hist", b.array(u16, 3)), ("tiny", b.integer("s8", 1, signed=True)),
        ("ptr", b.ptr(u16)), ("bits", b.integer("__u32", 4), 5),
    ])


@pytest.fixture(scope="module")
def record():
    with BtfBuilder() as b:
        type_id = _record(b)
        return BtfCodec(Btf.from_bytes(b.raw()), type_id)


KINDS = {"id": LeafKind.INTEGER, "delta": LeafKind.INTEGER, "name": LeafKind.TEXT,
         "color": LeafKind.ENUM, "flag": LeafKind.BOOL, "letter": LeafKind.CHAR,
         "ratio": LeafKind.FLOAT, "share": LeafKind.FLOAT, "at": LeafKind.STRUCT,
         "hist": LeafKind.ARRAY, "tiny": LeafKind.INTEGER, "ptr": LeafKind.INTEGER,
         "bits": LeafKind.INTEGER}
SIGNED = {"delta", "color", "tiny", "at.x"}


def test_the_tree_places_fields_where_the_c_compiler_does(record):
    assert record.size == ctypes.sizeof(_Record)
    fields = record.node.fields()
    assert {name: leaf_kind(node) for name, node in fields.items()} == KINDS
    for name, node in fields.items():
        where = getattr(_Record, name)
        if name == "bits":  # a bitfield: the bytes that hold its 5 bits
            assert extent(node) == (where.offset, where.offset + 1)
            assert integer_field(node) is None and scalar_type(node) is None
            continue
        assert extent(node) == (where.offset, where.offset + where.size), name


def test_integer_field_and_scalar_type_agree_with_ctypes_and_numpy(record):
    flat = dict(leaf_columns(record.node, "value"))
    for path, node in flat.items():
        name = path.removeprefix("value.")
        field = integer_field(node)
        if leaf_kind(node) in (LeafKind.INTEGER, LeafKind.ENUM, LeafKind.BOOL, LeafKind.CHAR) \
                and name != "bits":
            top = getattr(_Record, name.split(".")[0])
            inner = getattr(_Point, name.split(".")[1]).offset if "." in name else 0
            assert field == (top.offset + inner, field.size, name in SIGNED), name
        else:
            assert field is None, name
        np_type = scalar_type(node)
        if np_type is not None:  # what numpy reads there is what the values job reads
            data = bytes(range(1, record.size + 1))
            rows = np.frombuffer(data, np.uint8).reshape(1, -1)
            got = values.values(node, rows)[0]
            expected = np.frombuffer(data, np_type, count=1, offset=node.offset)[0]
            assert got == (bool(expected) if leaf_kind(node) is LeafKind.BOOL
                           else expected.item()), name


def test_overlays_answer_the_questions_too(record):
    _, decoded = decoding.decoded_codecs(record, record, ["value.delta=be32"])
    node = decoded.node.fields()["delta"]
    assert leaf_kind(node) is LeafKind.DISPLAY and extent(node) == (8, 12)
    with pytest.raises(InputError, match="cannot be summed"):  # a float has no sum
        cpusum.summed(PerCpuCodec(record, 2))
