"""The typed JSONL fast path: lines parsed by msgspec against types built from the map's
layout, and written column by column into the packed records.

The general reader (:mod:`bpfbatch.formats.read`) parses JSON into dicts with the standard
library and then encodes them; on a million records the parse alone is most of a load. Here
each record's shape is a msgspec ``Struct`` compiled from the key and value layouts (field
names, nested structs, fixed-length tuples of scalars; ``int`` for integers, ``int`` or one of
its enumerators' names for enums, ``int | str`` for decoded fields, ``str`` for char arrays),
so the text is parsed and its shape checked in C, with no dict per record. A piece of the
file that is one record a line and nothing else (:func:`record_lines`: what ``dump -o
jsonl`` writes) is parsed in one call, other pieces line by line. The values then go, one
column per leaf field (each struct's objects turned into tuples, one C call each, then
transposed), through :func:`~bpfbatch.records.typedfill.write_column`, which checks ranges,
enumerator names and decoded text as the general path does.

It only ever *accepts or declines* a block of lines, never reports: whatever msgspec refuses
(bad JSON, a float, a missing or unknown member, ``NaN``, a name no enumerator has) and
whatever the column writers refuse sends the whole block to the general reader, which
accepts it or raises its usual ``file:line`` error. So the fast path may decline more than
it should but must accept nothing the general path reads differently: msgspec, like
``json``, reads integers of any size exactly, keeps the last of duplicate members and skips
the same blanks around a value; layouts whose values it could read differently (floats,
where ``json`` keeps ``1e400`` as text; bools; unions; bitfields; ``--default-zero``) get no
fast path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple, Union

import msgspec
from msgspec.structs import astuple

from ..records import layout
from .._numpy import np
from ..records.codec import BtfCodec, Codec
from ..records.decoding import Decoded
from ..records.fill import can_fill
from ..records.typedfill import write_column

__all__ = ["RecordLines", "TypedLines", "record_lines", "typed_lines"]


class _Unsupported(Exception):
    """A layout the fast path does not take."""


class _Field:
    """How one node's values are taken from msgspec's objects and written into the rows: a
    leaf's column at once (:func:`~bpfbatch.records.typedfill.write_column`), a struct's
    members as the columns of its objects' tuples."""

    def __init__(self, node: layout.Node, members: list[_Field] | None = None):
        self.node, self.members = node, members

    def write(self, rows: np.ndarray, values: Sequence) -> bool:
        """``False`` when a value is not taken as it is (the block is declined)."""
        if self.members is None:
            return write_column(self.node, rows, values)
        columns = zip(*map(astuple, values))  # a C call per object, not one per field
        return all(field.write(rows, column) for field, column in zip(self.members, columns))


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


@_compile.register
def _(node: layout.Enum, name):
    """The number, or one of the enum's own names (msgspec refuses any other string)."""
    names = tuple(node.by_name)
    return (Union[int, Literal[names]] if names else int), _Field(node)


@_compile.register
def _(node: Decoded, name):  # display text or a number, as the decoder reads it
    return Union[int, str], _Field(node)


@_compile.register
def _(node: layout.CharArray, name):
    return str, _Field(node)


@_compile.register
def _(node: layout.Array, name):
    """A tuple of the array's length of scalars (or of tuples of them), which the layout's
    fill takes as it is; arrays of structs are left to the general reader (``fill`` expects
    dicts, msgspec gives Structs)."""
    if not node.elems:
        raise _Unsupported
    elem_type, elem_field = _compile(node.elems[0], name)
    if elem_field.members is not None or any(
            _compile(e, name)[0] != elem_type for e in node.elems[1:]):
        raise _Unsupported
    return tuple[(elem_type,) * len(node.elems)], _Field(node)


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
        fields.append(child_field)
    struct = msgspec.defstruct(name, specs, forbid_unknown_fields=True, gc=False)
    return struct, _Field(node, fields)


class RecordLines(NamedTuple):
    """A piece of JSONL text holding ``count`` lines, each one JSON object and nothing else
    (see :func:`record_lines`)."""

    data: bytes
    count: int


def record_lines(piece: bytes) -> RecordLines | None:
    """``piece`` as :class:`RecordLines` when every line of it is one JSON object with
    nothing around it (what ``dump -o jsonl`` writes), checked without parsing, else
    ``None``: blank lines, ``\\r\\n`` line ends, spaces around a record.

    It is enough that the piece starts with ``{``, ends with ``}`` (and a line break), and
    each line break inside it sits between a ``}`` and a ``{``: in JSON a ``}`` followed by
    a ``{`` (with only white space between) is never inside one value, and a line break is
    never inside a string, so each line then holds whole values; a parse that finds as many
    values as there are lines has found one on each."""
    ended = piece.endswith(b"}\n")
    if not (piece.startswith(b"{") and (ended or piece.endswith(b"}"))):
        return None
    data = np.frombuffer(piece, dtype=np.uint8)
    inner = np.flatnonzero(data == 0x0A)  # line breaks between two lines
    if ended:
        inner = inner[:-1]
    if not ((data[inner - 1] == 0x7D).all() and (data[inner + 1] == 0x7B).all()):
        return None
    return RecordLines(piece, len(inner) + 1)


class TypedLines:
    """JSONL lines of ``{"key": K, "value": V}`` → packed keys and values, or ``None``."""

    def __init__(self, key_codec: BtfCodec, value_codec: BtfCodec):
        key_type, key = _compile(key_codec.node, "Key")
        value_type, value = _compile(value_codec.node, "Value")
        entry = msgspec.defstruct("Entry", [("key", key_type), ("value", value_type)],
                                  forbid_unknown_fields=True, gc=False)
        self._decoder = msgspec.json.Decoder(entry)
        self._sides = (key, key_codec.size), (value, value_codec.size)

    def parse(self, block: list[str] | RecordLines) -> list | None:
        """Each line's record (one JSON value a line, as ``json.loads`` of each line reads
        it), or ``None`` when any line is not one of the expected shape. A
        :class:`RecordLines` is parsed in one call."""
        try:
            if isinstance(block, RecordLines):
                entries = self._decoder.decode_lines(block.data)
                return entries if len(entries) == block.count else None
            return list(map(self._decoder.decode, block))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None

    def pack(self, entries: list) -> tuple[bytes, bytes] | None:
        """The packed keys and values of parsed records, one column per leaf field, or
        ``None`` when a value is not taken as it is (see
        :func:`~bpfbatch.records.typedfill.write_column`)."""
        packed = []
        for (field, size), column in zip(self._sides, zip(*map(astuple, entries))):
            rows = np.zeros((len(entries), size), dtype=np.uint8)
            if not field.write(rows, column):
                return None
            packed.append(rows.tobytes())
        return packed[0], packed[1]

    def encode(self, block: list[str] | RecordLines) -> tuple[bytes, bytes] | None:
        """:meth:`parse` then :meth:`pack`: the block's packed records, or ``None`` (the
        general reader then takes the block)."""
        entries = self.parse(block)
        return None if not entries else self.pack(entries)


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
