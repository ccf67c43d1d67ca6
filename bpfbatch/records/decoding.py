"""Display decoders applied to a map's codecs: ``--decode FIELD=KIND`` and the automatic choice.

:func:`decoded_codecs` turns a map's key and value codecs into codecs whose chosen fields are
:class:`Decoded` nodes: their values are the decoder's display values (``"10.0.0.1"``, ``443``)
in every typed output (``json``, ``jsonl``, ``csv``, ``table``) and their ``encode`` takes the
same display values back, so ``load`` reads what ``dump`` wrote with the same decoding. The
``bpftool-json`` output keeps bpftool's bytes (``exact`` mode never decodes); numpy views keep
the raw field (a decoder changes what is shown, not the record).

Field paths are the ``--where`` paths: value fields bare or under ``value.`` (nested structs
by dots), key fields under ``key.``; ``key``/``value`` alone name a whole key or value.
Without ``automatic=False``, fields whose BTF type says how they read
(:func:`~bpfbatch.records.decoders.automatic_kind`: ``__be16``/``__be32`` typedefs, ``struct
in6_addr``) are decoded too; an explicit ``--decode`` for a field wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ..errors import InputError
from .._numpy import np
from .codec import BtfCodec, Codec, PerCpuCodec
from .decoders import Decoder, get, parse_decode_option
from .encode import encoder
from .fill import blank, can_fill, fill
from .jsontext import Leaf, json_texts
from .layout import LeafKind, Node, leaf_kind
from .template import emit
from .values import dtype as layout_dtype
from .values import values as layout_values

__all__ = ["Decoded", "decoded_codecs"]


@dataclasses.dataclass(frozen=True)
class Decoded(Node):
    """A field shown through a :class:`Decoder`; ``inner`` is the field's own node.
    ``automatic``: chosen by the field's type, not by a ``--decode`` option (the columnar
    formats keep such a field as stored). Each job over the layout tree takes it as the
    decoder says (below); numpy views keep the raw field."""

    inner: Node
    size: int
    decoder: Decoder
    automatic: bool = False

    @property
    def numeric(self) -> bool:
        return self.decoder.numeric


@leaf_kind.register
def _(node: Decoded):
    return LeafKind.DISPLAY


@layout_values.register
def _(node: Decoded, rows):
    return node.decoder.format(rows[:, node.offset:node.offset + node.size])


@encoder.register
def _(node: Decoded):
    start, end, parse = node.offset, node.offset + node.size, node.decoder.parse

    def write(buf, value, path):
        buf[start:end] = parse(value, end - start, path)
    return write


@emit.register
def _(node: Decoded, out, exact):
    if exact:  # bpftool's own text, byte for byte
        return emit(node.inner, out, exact)
    out.leaf(_DisplayLeaf(node.offset, node.size, node.decoder))
    return True


@layout_dtype.register
def _(node: Decoded):
    return layout_dtype(node.inner)


@can_fill.register
def _(node: Decoded):
    return True


@fill.register
def _(node: Decoded, rows, values, bad):
    """The column parsed at once where the kind can (see :meth:`Decoder.parse_column`), else
    each value on its own; one that does not parse is flagged, so that
    :func:`~bpfbatch.records.encode.encoder` raises its error with the record's path."""
    start, end = node.offset, node.offset + node.size
    column = node.decoder.parse_column(values, node.size)
    if column is not None:
        rows[:, start:end] = column
        return
    parse, size = node.decoder.parse, node.size
    for i, value in enumerate(values):
        try:
            rows[i, start:end] = np.frombuffer(parse(value, size), dtype=np.uint8)
        except InputError:
            bad[i] = True


@blank.register
def _(node: Decoded):
    return node.decoder.format_one(bytes(node.size))


class _DisplayLeaf(Leaf):
    """The JSON text of a decoded field: its display values as JSON."""

    def __init__(self, offset: int, size: int, decoder: Decoder):
        super().__init__(offset)
        self.size = size
        self.decoder = decoder

    def column(self, rows):
        return json_texts(self.decoder.format(rows[:, self.offset:self.offset + self.size]))


def decoded_codecs(key: Codec, value: Codec, decode: Iterable[str] = ()) -> tuple[Codec, Codec]:
    """``(key, value)`` codecs decoded as the ``--decode`` options say: ``FIELD=KIND`` (paths
    as in the module doc) for chosen fields, the automatic choice for the rest unless one of
    them is ``none``. An unknown path, or a kind that does not fit the field's size, is an
    :class:`InputError` naming ``--decode`` and the field."""
    sides: dict[str, dict[str, Decoder]] = {"key": {}, "value": {}}
    automatic = True
    spelled: dict[tuple[str, str], str] = {}  # as the user wrote it, for errors
    for text in decode:
        if text.strip() == "none":
            automatic = False
            continue
        path, decoder = parse_decode_option(text)
        side, _, rest = path.partition(".")
        if side not in sides:
            side, rest = "value", path
        sides[side][rest] = decoder
        spelled[side, rest] = path
    try:
        return (_decode_side(key, "key", sides["key"], automatic),
                _decode_side(value, "value", sides["value"], automatic))
    except _FieldError as exc:
        raise InputError(exc.message, obj="--decode " + spelled.get((exc.side, exc.path), _joined(exc.side, exc.path))) from None


class _FieldError(Exception):
    def __init__(self, side: str, path: str, message: str):
        super().__init__(message)
        self.side, self.path, self.message = side, path, message


def _decode_side(codec: Codec, side: str, chosen: dict[str, Decoder], automatic: bool) -> Codec:
    if isinstance(codec, PerCpuCodec):
        base = _decode_side(codec.base, side, chosen, automatic)
        return codec if base is codec.base else PerCpuCodec(base, codec.ncpus)
    if not isinstance(codec, BtfCodec):
        if chosen:
                raise _FieldError(side, next(iter(chosen)),
                              f"the map has no BTF {side} type: fields cannot be decoded")
        return codec
    left = dict(chosen)
    node = _decode_node(codec.node, side, "", left, automatic)
    if left:
        path = next(iter(left))
        fields = ", ".join(_field_paths(codec.node, side)) or side
        raise _FieldError(side, path, f"no field {path!r} in the {side} (fields: {fields})")
    if node is codec.node:
        return codec
    return codec.with_node(node)


def _decode_node(node: Node, side: str, path: str, left: dict[str, Decoder],
                 automatic: bool) -> Node:
    """``node`` with the fields in ``left`` (consumed as found) and the automatic ones
    decoded; the same object when nothing under it changes."""
    decoder = left.pop(path, None)
    chosen = decoder is not None
    if not chosen and automatic and node.auto:
        decoder = get(node.auto)
    if decoder is not None:
        size = _size_of(node)
        if size is None:
            raise _FieldError(side, path, f"a {type(node).__name__.lower()} field cannot be "
                                          f"decoded")
        try:
            decoder.check_size(size, path)
        except InputError as exc:
            raise _FieldError(side, path, exc.message) from None
        return Decoded(node.offset, node, size, decoder, automatic=not chosen)
    if leaf_kind(node) is not LeafKind.STRUCT:
        return node
    members = []
    for name, member in node.members:
        inner = f"{path}.{name}" if path and name else name or path
        members.append((name, _decode_node(member, side, inner, left, automatic)))
    if all(new is old for (_, new), (_, old) in zip(members, node.members)):
        return node
    return dataclasses.replace(node, members=tuple(members))


def _size_of(node: Node) -> int | None:
    dtype = layout_dtype(node)
    return None if dtype is None else dtype.itemsize


def _field_paths(node: Node, side: str, path: str = "") -> list[str]:
    if leaf_kind(node) is not LeafKind.STRUCT:
        return [_joined(side, path)] if path else []
    return [p for name, member in node.members
            for p in _field_paths(member, side, f"{path}.{name}" if path and name else name)]


def _joined(side: str, path: str) -> str:
    return f"{side}.{path}" if path else side
