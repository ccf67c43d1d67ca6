"""Display decoders applied to a map's codecs: ``--decode FIELD=KIND`` and the automatic choice.

:func:`decoded_codecs` turns a map's key and value codecs into codecs whose chosen fields are
:class:`Decoded` nodes: their values are the decoder's display values (``"10.0.0.1"``, ``443``)
in every typed output (``json``, ``jsonl``, ``csv``, ``table``) and their ``encode`` takes the
same display values back, so ``load`` reads what ``dump`` wrote with the same decoding. The
``bpftool-json`` output keeps bpftool's bytes (``exact`` mode never decodes); numpy views keep
the raw field (a decoder changes what is shown, not the record); the Arrow columns hold the
display values and name the decoder (:mod:`~bpfbatch.formats.columnar`).

Field paths are the ``--where`` paths: value fields bare or under ``value.`` (nested structs
by dots), key fields under ``key.``; ``key``/``value`` alone name a whole key or value.
Without ``automatic=False``, fields whose BTF type says how they read
(:func:`~bpfbatch.records.decoders.automatic_kind`: ``__be16``/``__be32`` typedefs, ``struct
in6_addr``) are decoded too; an explicit ``--decode`` for a field wins.

:func:`view` is the one place a map's view is chosen: every surface that prints or reads
records (each output format, ``load``, ``delete``, the per-element commands, ``exec
--where``, the Python API's ``decode=``, ``export``) gets its codecs from it, so what one
prints another reads back. Readers take a decoded field in either form: its display value,
or, where that is not one, the value the field stores as the undecoded view prints it (an
``ipv4`` field takes ``"10.0.0.1"`` and ``167772161``); for the numeric kinds (``be16``:
``443``) a number is the display value.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from ..errors import InputError
from .._numpy import np
from .codec import BtfCodec, Codec, PerCpuCodec
from .decoders import Decoder, get, parse_decode_option
from .encode import encoder
from .fill import blank, can_fill, fill
from .jsontext import IntLeaf, Leaf, RecordText, json_column, json_texts
from .layout import LeafKind, Node, leaf_kind
from .template import emit
from .values import dtype as layout_dtype
from .values import values as layout_values

__all__ = ["Decoded", "decoded_codecs", "undecoded", "view"]


@dataclasses.dataclass(frozen=True)
class Decoded(Node):
    """A field shown through a :class:`Decoder`; ``inner`` is the field's own node. Each
    job over the layout tree takes it as the decoder says (below); numpy views keep the raw
    field."""

    inner: Node
    size: int
    decoder: Decoder

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
    """The display value, else (see the module doc) the stored form the inner field takes;
    when neither reads, the decoder's error, which names the display form."""
    start, end, parse = node.offset, node.offset + node.size, node.decoder.parse
    stored = _stored_form(node)

    def write(buf, value, path):
        try:
            buf[start:end] = parse(value, end - start, path)
        except InputError:
            if stored is None or not stored(buf, value, path):
                raise
    return write


def _stored_form(node: Decoded):
    """``write(buf, value, path) -> bool``: ``value`` written as the undecoded field takes
    it, ``False`` when it does not read that way either; ``None`` for the numeric kinds,
    whose numbers are display values."""
    if node.decoder.numeric:
        return None
    inner = encoder(node.inner)
    integer = leaf_kind(node.inner) is LeafKind.INTEGER

    def write(buf, value, path):
        if isinstance(value, str) and integer:  # a CSV cell, or the number as JSON text
            try:
                value = int(value, 10)
            except ValueError:
                return False
        if isinstance(value, str) or value is None or isinstance(value, bool):
            return False  # text is the display form: its error is the one to give
        try:
            inner(buf, value, path)
        except InputError:
            return False
        return True
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
            bad[i] = True  # perhaps the stored form: the encoder tries it


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

    def texts(self, rows, suffix):
        field = rows[:, self.offset:self.offset + self.size]
        if self.decoder.kind == "ipv4":  # "a.b.c.d": a record text of the four bytes
            return _dotted_quad().aligned([field], suffix)
        return json_column(self.decoder.format(field), suffix)


@functools.cache
def _dotted_quad() -> RecordText:
    """An IPv4 address's JSON text from its 4 bytes (what ``json_texts`` gives the ipv4
    decoder's display value)."""
    out = RecordText().text(b'"')
    for i in range(4):
        out.text(b"." if i else b"").leaf(IntLeaf(i, "u1"))
    return out.text(b'"')


def view(info, decode: str | Iterable[str] | None = None, *, btf=None,
         default_zero: bool = False) -> tuple[Codec, Codec]:
    """A map's ``(key, value)`` codecs as every surface shows and reads them: its BTF's
    (:func:`~bpfbatch.records.codec.map_codecs`) decoded as ``decode`` says — ``None`` or
    ``()``: the automatic decoders; ``"none"``: the stored values; ``FIELD=KIND`` options
    (a string or several) as ``--decode`` takes them. ``default_zero``: records may leave
    struct fields out (``load --default-zero``)."""
    from .codec import map_codecs

    return decoded_codecs(*map_codecs(info, btf, default_zero=default_zero),
                          decode_options(decode))


def decode_options(decode: str | Iterable[str] | None) -> tuple[str, ...]:
    """``decode=`` as the tuple of ``--decode`` options it means (see :func:`view`)."""
    if decode is None:
        return ()
    if isinstance(decode, str):
        return (decode,)
    options = tuple(decode)
    if not all(isinstance(option, str) for option in options):
        raise InputError("expected 'none', FIELD=KIND or a list of them", obj="decode")
    return options


def undecoded(node: Node) -> Node:
    """``node`` with every decoded field as the field itself (what ``decode="none"``
    reads)."""
    if isinstance(node, Decoded):
        return node.inner
    if leaf_kind(node) is not LeafKind.STRUCT:
        return node
    members = tuple((name, undecoded(member)) for name, member in node.members)
    if all(new is old for (_, new), (_, old) in zip(members, node.members)):
        return node
    return dataclasses.replace(node, members=members)


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
    if decoder is None and automatic and node.auto:
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
        return Decoded(node.offset, node, size, decoder)
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
