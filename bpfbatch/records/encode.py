"""One value encoded into a record, by the layout tree (:mod:`~bpfbatch.records.layout`).

:func:`encoder` compiles a node, once per codec, into the function that writes the node's
value into a record buffer at the node's offset (field names, offsets and enumerator tables
resolved up front, since it runs per field of every record encoded on its own), taking what
the typed output prints (the value rule, see :mod:`~bpfbatch.records.codec`) and a bit more
(``"0x1f"`` for an integer, ``"true"`` for a bool); a value that does not fit its field is an
:class:`~bpfbatch.errors.InputError` naming the field's path, never a silent wrap. The batch
path (:mod:`~bpfbatch.records.fill`) hands every record it does not take as it is back to
here, so both fail with the same error.

It dispatches on the node's type (:class:`~bpfbatch.records.layout.job`); a node kind
defined elsewhere registers its own with ``encoder.register``.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable

from ..errors import InputError
from . import layout

__all__ = ["Encoder", "check_range", "encoder", "overflows_double", "parse_int"]


def parse_int(value, path: str) -> int:
    """An integer, or a string spelling one (``"0x1f"``); a JSON ``true`` is not a number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, (bool, float, str)) and hasattr(type(value), "__index__"):
        return operator.index(value)  # a numpy integer
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
    :func:`encoder`'s float names it rather than storing infinity."""
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


#: Writes one value into a record buffer: ``(buf, value, path)``; an :class:`InputError`
#: naming ``path`` when the value does not fit.
Encoder = Callable[[bytearray, object, str], None]


@layout.job
def encoder(node: layout.Node) -> Encoder:
    """The function that writes ``node``'s value into a record (see :data:`Encoder`)."""
    raise TypeError(f"no encoding for a {type(node).__name__} node")


def _integer(offset: int, size: int, to_bits: Callable[[object, str], int]) -> Encoder:
    def write(buf, value, path):
        buf[offset:offset + size] = to_bits(value, path).to_bytes(size, "little")
    return write


@encoder.register
def _(node: layout.Int):
    nbits, signed = node.size * 8, node.signed
    if node.np_type:
        return _integer(node.offset, node.size,
                        lambda value, path: check_range(parse_int(value, path), nbits, path,
                                                        signed))
    # 128 bits: printed as "0x.." raw bits
    return _integer(node.offset, node.size,
                    lambda value, path: _raw_or_number(value, nbits, signed, path))


@encoder.register
def _(node: layout.Bits):
    offset, end, shift, nbits, signed = (node.offset, node.offset + node.nbytes, node.shift,
                                         node.nbits, node.signed)
    mask = ((1 << nbits) - 1) << shift

    def write(buf, value, path):
        bits = _raw_or_number(value, nbits, signed, path)
        raw = int.from_bytes(buf[offset:end], "little")
        buf[offset:end] = ((raw & ~mask) | (bits << shift)).to_bytes(end - offset, "little")
    return write


def _bool_bits(value, path: str) -> int:
    if isinstance(value, str) and value in ("true", "false"):
        value = value == "true"
    if value not in (0, 1):  # True/False compare equal to 1/0
        raise InputError(f"expected true or false, got {value!r}", obj=path)
    return int(value)


@encoder.register
def _(node: layout.Bool):
    return _integer(node.offset, node.size, _bool_bits)


@encoder.register
def _(node: layout.Char):
    """The one character it prints as (U+0000 to U+00FF: the byte), or a number."""
    offset = node.offset

    def write(buf, value, path):
        if isinstance(value, str) and len(value) == 1 and ord(value) < 256:
            buf[offset] = ord(value)
        else:
            buf[offset] = _raw_or_number(value, 8, True, path)
    return write


@encoder.register
def _(node: layout.Float):
    """A number, or ``"NaN"``/``"Infinity"``/``"-Infinity"`` as the JSON output prints
    them. One out of the field's range is an error: it would be stored as infinity."""
    offset, size, code = node.offset, node.size, node.code

    def write(buf, value, path):
        if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
            value = float(value)
        elif code and isinstance(value, str) and overflows_double(value):  # 1e400
            raise InputError(f"{value} is beyond the range of a {size}-byte float", obj=path)
        if not code or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"expected a number for a {size}-byte float, got {value!r}",
                             obj=path)
        try:
            struct.pack_into(code, buf, offset, float(value))
        except OverflowError:  # a finite value beyond the format, or an int beyond a double
            shown = repr(value) if isinstance(value, float) else \
                f"an integer of {value.bit_length()} bits"
            raise InputError(f"{shown} is beyond the range of a {size}-byte float",
                             obj=path) from None
    return write


@encoder.register
def _(node: layout.Enum):
    by_name, nbits, signed = node.by_name, node.size * 8, node.signed
    known = ", ".join(by_name)

    def to_bits(value, path):
        if isinstance(value, str):
            if value in by_name:
                value = by_name[value]
            else:
                try:
                    value = int(value, 0)
                except ValueError:
                    raise InputError(f"no enumerator {value!r} (known: {known})",
                                     obj=path) from None
        return check_range(parse_int(value, path), nbits, path, signed)
    return _integer(node.offset, node.size, to_bits)


@encoder.register
def _array(node: layout.Array):
    elems = [encoder(elem) for elem in node.elems]
    count = len(elems)

    def write(buf, value, path):
        if not isinstance(value, (list, tuple)) or len(value) != count:
            raise InputError(f"expected a list of {count} elements, got {value!r}", obj=path)
        for i, (elem, item) in enumerate(zip(elems, value)):
            elem(buf, item, f"{path}[{i}]")
    return write


@encoder.register
def _(node: layout.CharArray):
    """A string loads as its bytes and a NUL when there is room, nothing after it: in a
    union, the bytes past the NUL belong to the other members. Or the list of elements."""
    offset, count, elems = node.offset, len(node.elems), _array(node)

    def write(buf, value, path):
        if not isinstance(value, str):
            return elems(buf, value, path)
        try:
            raw = value.encode("ascii")
        except UnicodeEncodeError:
            raise InputError(f"not ASCII: {value!r}", obj=path) from None
        if len(raw) > count:
            raise InputError(f"string longer than {count} bytes: {value!r}", obj=path)
        if len(raw) < count:
            raw += b"\0"
        buf[offset:offset + len(raw)] = raw
    return write


@encoder.register
def _(node: layout.Struct):
    """Every field by name (see :meth:`~bpfbatch.records.layout.Struct.fields`); a missing
    one is an error unless the struct was built with ``default_zero``: not a silent 0."""
    fields = node.fields()
    writers = {name: encoder(field) for name, field in fields.items()}
    names = ", ".join(fields)
    order = list(fields)
    required = [] if node.default_zero else node.required()
    unions = [frozenset(u.fields()) for u in _unions(node)]

    def write(buf, value, path):
        if not isinstance(value, dict):
            raise InputError(f"expected an object with fields {names}, got {value!r}", obj=path)
        for name, item in value.items():
            field = writers.get(name)
            if field is None:
                raise InputError(f"no field {name!r} (fields: {names})", obj=path)
            field(buf, item, f"{path}.{name}")
        for members in unions:
            given = [name for name in value if name in members]
            if len(given) > 1:
                _check_agree(buf, value, given, writers, path)
        for group in required:
            if not group & value.keys():
                missing = " or ".join(sorted(group, key=order.index))
                raise InputError(f"missing field {missing} (a field left out is an error; "
                                 f"load --default-zero makes it 0)", obj=path)
    return write


def _unions(node: layout.Struct) -> list[layout.Struct]:
    """The unions whose members are fields of ``node``'s records: itself, if a union, and
    its anonymous union members (at any depth of anonymous members)."""
    found = [node] if node.union else []
    for name, member in node.members:
        if not name and isinstance(member, layout.Struct):
            found.extend(_unions(member))
    return found


def _check_agree(buf: bytearray, value: dict, given: list[str], writers: dict,
                 path: str) -> None:
    """A union holds one value: the members a record gives must all say the bytes the
    last one wrote (a dump gives every member, and they agree), not silently be
    overwritten (``{"x": 1, "y": 2}``). A NaN says nothing of its bits, so a union given
    one is not compared (its float rewrites the bits a NaN's payload had)."""
    if any(_has_nan(value[name]) for name in given):
        return
    for name in given[:-1]:
        again = bytearray(buf)
        writers[name](again, value[name], f"{path}.{name}")
        if again != buf:
            raise InputError(f"union members {name!r} and {given[-1]!r} disagree: a union "
                             f"holds one value (give one member)", obj=path)


def _has_nan(value) -> bool:
    if value == "NaN" or isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, dict):
        return any(map(_has_nan, value.values()))
    if isinstance(value, list):
        return any(map(_has_nan, value))
    return False


@encoder.register
def _(node: layout.Var):
    name, inner = node.name, encoder(node.node)

    def write(buf, value, path):
        if not isinstance(value, dict) or set(value) != {name}:
            raise InputError(f"expected {{{name!r}: ...}}, got {value!r}", obj=path)
        inner(buf, value[name], f"{path}.{name}")
    return write


@encoder.register
def _(node: layout.Datasec):
    name, variables = node.name, [encoder(var) for var in node.vars]

    def write(buf, value, path):
        items = value.get(name) if isinstance(value, dict) else None
        if not isinstance(items, list) or len(items) != len(variables):
            raise InputError(f"expected {{{name!r}: [{len(variables)} variables]}}", obj=path)
        for var, item in zip(variables, items):
            var(buf, item, f"{path}.{name}")
    return write


@encoder.register
def _(node: layout.Unsupported):
    what = node.text.decode()

    def write(buf, value, path):
        if value is not None:
            raise InputError(f"cannot encode {what}", obj=path)
    return write
