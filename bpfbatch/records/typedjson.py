"""The typed JSONL fast path: lines parsed by msgspec against types built from the map's
layout, and written column by column into the packed records.

The general reader (:mod:`bpfbatch.records.read`) parses JSON into dicts with the standard
library and then encodes them; on a million records the parse alone is most of a load. Here
each record's shape is a msgspec ``Struct`` compiled from the key and value layouts (field
names, nested structs, lists of scalars; ``int`` for integers, ``int | str`` for enums and
decoded fields, ``str`` for char arrays), so the text is parsed and its shape checked in C, with no
dict per record. The values then go, one column per field, through the layout's own
vectorised ``fill``, which checks ranges, enumerator names and decoded text exactly as the
general path does.

It only ever *accepts or declines* a block of lines, never reports: whatever msgspec refuses
(bad JSON, a float, a missing or unknown member, ``NaN``) and whatever ``fill`` flags sends
the whole block to the general reader, which accepts it or raises its usual ``file:line``
error. So the fast path may decline more than it should but must accept nothing the general
path reads differently: msgspec, like ``json``, reads integers of any size exactly, keeps the
last of duplicate members and skips the same blanks around a value; layouts whose values it
could read differently (floats, where ``json`` keeps ``1e400`` as text; bools; unions;
bitfields; ``--default-zero``) get no fast path.
"""

from __future__ import annotations

import operator
from typing import Union

import msgspec
import numpy as np

from . import layout
from .codec import BtfCodec, Codec
from .decoding import Decoded
from .fill import can_fill, fill

__all__ = ["TypedLines", "typed_lines"]


class _Unsupported(Exception):
    """A layout the fast path does not take."""


class _Field:
    """How one node's values are read from msgspec's objects and written into the rows."""

    def __init__(self, node: layout.Node, fields: list[tuple[str, "_Field"]] | None = None):
        self.node, self.fields = node, fields

    def fill(self, rows: np.ndarray, values: list, bad: np.ndarray) -> None:
        if self.fields is None:  # a leaf (or a list of leaves): the layout writes it
            fill(self.node, rows, values, bad)
            return
        for attr, field in self.fields:
            field.fill(rows, list(map(operator.attrgetter(attr), values)), bad)


@layout.job
def _compile(node: layout.Node, name: str) -> tuple[object, _Field]:
    """``(msgspec type, _Field)`` of ``node``; ``name`` names the Struct types (debugging).
    Kinds not registered below have no typed form."""
    raise _Unsupported


@_compile.register
def _(node: layout.Int, name):
    if not node.np_type:  # 128 bits: "0x.." raw bits or a number
        raise _Unsupported
    return int, _Field(node)


@_compile.register(layout.Enum)
@_compile.register(Decoded)
def _(node, name):  # a name or display text, or the number
    return Union[int, str], _Field(node)


@_compile.register
def _(node: layout.CharArray, name):
    return str, _Field(node)


@_compile.register
def _(node: layout.Array, name):
    """A list of scalars (or of lists of them), which the layout's ``fill`` takes as it is;
    arrays of structs are left to the general reader (``fill`` expects dicts, msgspec gives
    Structs)."""
    if not node.elems:
        raise _Unsupported
    elem_type, elem_field = _compile(node.elems[0], name)
    if elem_field.fields is not None or any(
            _compile(e, name)[0] != elem_type for e in node.elems[1:]):
        raise _Unsupported
    return list[elem_type], _Field(node)


@_compile.register
def _(node: layout.Struct, name):
    if node.union or node.default_zero:
        raise _Unsupported
    if any(not member for member, _ in node.members):
        raise _Unsupported  # anonymous members: their fields belong to this record
    specs, fields = [], []
    for i, (member, child) in enumerate(node.members):
        child_type, child_field = _compile(child, f"{name}_{member}")
        attr = f"f{i}"  # JSON names need not be Python names
        specs.append((attr, child_type, msgspec.field(name=member)))
        fields.append((attr, child_field))
    struct = msgspec.defstruct(name, specs, forbid_unknown_fields=True, gc=False)
    return struct, _Field(node, fields)


class TypedLines:
    """JSONL lines of ``{"key": K, "value": V}`` → packed keys and values, or ``None``."""

    def __init__(self, key_codec: BtfCodec, value_codec: BtfCodec):
        key_type, self._key = _compile(key_codec.node, "Key")
        value_type, self._value = _compile(value_codec.node, "Value")
        entry = msgspec.defstruct("Entry", [("key", key_type), ("value", value_type)],
                                  forbid_unknown_fields=True, gc=False)
        self._decode = msgspec.json.Decoder(entry).decode
        self._sizes = key_codec.size, value_codec.size

    def parse(self, lines: list[str]) -> list | None:
        """Each line's record (one JSON value a line, as ``json.loads`` of each line reads
        it), or ``None`` when any line is not one of the expected shape."""
        try:
            return list(map(self._decode, lines))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None

    def pack(self, entries: list) -> tuple[bytes, bytes] | None:
        """The packed keys and values of parsed records, or ``None`` when the layout's
        ``fill`` does not take one of them as it is."""
        count = len(entries)
        bad = np.zeros(count, dtype=bool)
        packed = []
        for side, size, attr in ((self._key, self._sizes[0], "key"),
                                 (self._value, self._sizes[1], "value")):
            rows = np.zeros((count, size), dtype=np.uint8)
            side.fill(rows, list(map(operator.attrgetter(attr), entries)), bad)
            if bad.any():
                return None
            packed.append(rows.tobytes())
        return packed[0], packed[1]

    def encode(self, lines: list[str]) -> tuple[bytes, bytes] | None:
        """:meth:`parse` then :meth:`pack`: the block's packed records, or ``None`` (the
        general reader then takes the block)."""
        entries = self.parse(lines)
        return None if entries is None else self.pack(entries)


def typed_lines(key_codec: Codec, value_codec: Codec) -> TypedLines | None:
    """The fast path for a map's codecs, or ``None`` when its layout has none (raw or
    per-CPU sides, keyless maps, and the layouts the module doc names)."""
    if not (type(key_codec) is type(value_codec) is BtfCodec) or key_codec.size == 0:
        return None
    if not (can_fill(key_codec.node) and can_fill(value_codec.node)):
        return None
    try:
        return TypedLines(key_codec, value_codec)
    except _Unsupported:
        return None
