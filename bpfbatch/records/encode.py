"""One value encoded into a record, by the layout tree (:mod:`~bpfbatch.records.layout`).

:func:`encode` writes a node's value into a record buffer at the node's offset, taking what
the typed output prints (the value rule, see :mod:`~bpfbatch.records.codec`) and a bit more
(``"0x1f"`` for an integer, ``"true"`` for a bool); a value that does not fit its field is an
:class:`~bpfbatch.errors.InputError` naming the field's path, never a silent wrap. The batch
path (:mod:`~bpfbatch.records.fill`) hands every record it does not take as it is back to
here, so both fail with the same error.

It dispatches on the node's type; a node kind defined elsewhere registers its own encoding
with ``encode.register``.
"""

from __future__ import annotations

import math
import struct
from functools import singledispatch

from ..errors import InputError
from . import layout

__all__ = ["check_range", "encode", "overflows_double", "parse_int"]


def parse_int(value, path: str) -> int:
    """An integer, or a string spelling one (``"0x1f"``); a JSON ``true`` is not a number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            pass
    shown = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    raise InputError(f"expected an integer, got {shown}", obj=path)


def check_range(value: int, nbits: int, path: str, signed: bool) -> int:
    """The ``nbits`` two's-complement bits of ``value``, which must fit the field as its
    signedness says: -1 is refused for an unsigned field and 40000 for an s16 (the value
    rule: nothing wraps silently)."""
    lo, hi = layout.field_range(nbits, signed)
    if not lo <= value < hi:
        raise InputError(f"{value} does not fit {'s' if signed else 'u'}{nbits} "
                         f"({lo}..{hi - 1})", obj=path)
    return value & ((1 << nbits) - 1)


def overflows_double(text: str) -> bool:
    """Whether ``text`` is a finite number literal beyond a double's range, such as
    ``1e400``, which ``float()`` reads as infinity: input readers keep it as text, so that
    :func:`encode` names it rather than storing infinity."""
    try:
        return math.isinf(float(text)) and "inf" not in text.lower()
    except ValueError:
        return False


def _raw_or_number(value, nbits: int, signed: bool, path: str) -> int:
    """The bits of a field the output prints as ``"0x.."`` raw bits (bitfields, 128-bit and
    odd-width integers): such a string is taken as the raw bits; a number must fit the
    field's signedness."""
    if isinstance(value, str) and value[:2].lower() == "0x":
        return check_range(parse_int(value, path), nbits, path, signed=False)
    return check_range(parse_int(value, path), nbits, path, signed)


@singledispatch
def encode(node: layout.Node, buf: bytearray, value, path: str) -> None:
    """Write ``value`` into ``buf`` (the whole record) where ``node`` lies; an
    :class:`InputError` naming ``path`` when the value does not fit."""
    raise TypeError(f"no encoding for a {type(node).__name__} node")


@encode.register
def _(node: layout.Int, buf, value, path):
    if node.np_type:
        bits = check_range(parse_int(value, path), node.size * 8, path, node.signed)
    else:  # 128 bits: printed as "0x.." raw bits
        bits = _raw_or_number(value, node.size * 8, node.signed, path)
    buf[node.offset:node.offset + node.size] = bits.to_bytes(node.size, "little")


@encode.register
def _(node: layout.Bits, buf, value, path):
    bits = _raw_or_number(value, node.nbits, node.signed, path)
    end = node.offset + node.nbytes
    raw = int.from_bytes(buf[node.offset:end], "little")
    mask = ((1 << node.nbits) - 1) << node.shift
    raw = (raw & ~mask) | (bits << node.shift)
    buf[node.offset:end] = raw.to_bytes(node.nbytes, "little")


@encode.register
def _(node: layout.Bool, buf, value, path):
    if isinstance(value, str) and value in ("true", "false"):
        value = value == "true"
    if value not in (0, 1):  # True/False compare equal to 1/0
        raise InputError(f"expected true or false, got {value!r}", obj=path)
    buf[node.offset:node.offset + node.size] = int(value).to_bytes(node.size, "little")


@encode.register
def _(node: layout.Char, buf, value, path):
    """The one character it prints as (U+0000 to U+00FF: the byte), or a number."""
    if isinstance(value, str) and len(value) == 1 and ord(value) < 256:
        buf[node.offset] = ord(value)
        return
    buf[node.offset] = _raw_or_number(value, 8, True, path)


@encode.register
def _(node: layout.Float, buf, value, path):
    """A number, or ``"NaN"``/``"Infinity"``/``"-Infinity"`` as the JSON output prints
    them. One out of the field's range is an error: it would be stored as infinity."""
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        value = float(value)
    elif node.code and isinstance(value, str) and overflows_double(value):  # 1e400
        raise InputError(f"{value} is beyond the range of a {node.size}-byte float", obj=path)
    if not node.code or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number for a {node.size}-byte float, got {value!r}",
                         obj=path)
    try:
        struct.pack_into(node.code, buf, node.offset, float(value))
    except OverflowError:  # a finite value beyond the format, or an int beyond a double
        shown = repr(value) if isinstance(value, float) else \
            f"an integer of {value.bit_length()} bits"
        raise InputError(f"{shown} is beyond the range of a {node.size}-byte float",
                         obj=path) from None


@encode.register
def _(node: layout.Enum, buf, value, path):
    if isinstance(value, str):
        if value in node.by_name:
            value = node.by_name[value]
        else:
            try:
                value = int(value, 0)
            except ValueError:
                raise InputError(f"no enumerator {value!r} (known: "
                                 f"{', '.join(node.by_name)})", obj=path) from None
    bits = check_range(parse_int(value, path), node.size * 8, path, node.signed)
    buf[node.offset:node.offset + node.size] = bits.to_bytes(node.size, "little")


@encode.register
def _array(node: layout.Array, buf, value, path):
    if not isinstance(value, (list, tuple)) or len(value) != len(node.elems):
        raise InputError(f"expected a list of {len(node.elems)} elements, got {value!r}",
                         obj=path)
    for i, (elem, item) in enumerate(zip(node.elems, value)):
        encode(elem, buf, item, f"{path}[{i}]")


@encode.register
def _(node: layout.CharArray, buf, value, path):
    """A string loads as its bytes and a NUL when there is room, nothing after it: in a
    union, the bytes past the NUL belong to the other members. Or the list of elements."""
    if not isinstance(value, str):
        return _array(node, buf, value, path)
    try:
        raw = value.encode("ascii")
    except UnicodeEncodeError:
        raise InputError(f"not ASCII: {value!r}", obj=path) from None
    if len(raw) > len(node.elems):
        raise InputError(f"string longer than {len(node.elems)} bytes: {value!r}", obj=path)
    if len(raw) < len(node.elems):
        raw += b"\0"
    buf[node.offset:node.offset + len(raw)] = raw


@encode.register
def _(node: layout.Struct, buf, value, path):
    """Every field by name (see :meth:`Struct.fields`); a missing one is an error unless
    the struct was built with ``default_zero``: not a silent 0."""
    fields = node.fields()
    if not isinstance(value, dict):
        raise InputError(f"expected an object with fields {', '.join(fields)}, got "
                         f"{value!r}", obj=path)
    for name, item in value.items():
        if name not in fields:
            raise InputError(f"no field {name!r} (fields: {', '.join(fields)})", obj=path)
        encode(fields[name], buf, item, f"{path}.{name}")
    if not node.default_zero:
        for group in node.required():
            if not group & value.keys():
                missing = " or ".join(sorted(group, key=list(fields).index))
                raise InputError(f"missing field {missing} (a field left out is an error; "
                                 f"--default-zero makes it 0)", obj=path)


@encode.register
def _(node: layout.Var, buf, value, path):
    if not isinstance(value, dict) or set(value) != {node.name}:
        raise InputError(f"expected {{{node.name!r}: ...}}, got {value!r}", obj=path)
    encode(node.node, buf, value[node.name], f"{path}.{node.name}")


@encode.register
def _(node: layout.Datasec, buf, value, path):
    items = value.get(node.name) if isinstance(value, dict) else None
    if not isinstance(items, list) or len(items) != len(node.vars):
        raise InputError(f"expected {{{node.name!r}: [{len(node.vars)} variables]}}", obj=path)
    for var, item in zip(node.vars, items):
        encode(var, buf, item, f"{path}.{node.name}")


@encode.register
def _(node: layout.Unsupported, buf, value, path):
    if value is not None:
        raise InputError(f"cannot encode {node.text.decode()}", obj=path)
