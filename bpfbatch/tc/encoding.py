"""Netlink attributes as data, and the one encoder that turns them into bytes.

A message body is a fixed header (``tcmsg``, ``tcamsg``) followed by a tree of attributes. The
tree is plain data — :class:`Attr` nodes whose payload is either bytes or a tuple of child
nodes — so the rule builders in :mod:`.rules` only *declare* what goes where, and byte layout
(4-byte TLV headers, lengths, NLA_ALIGNTO padding) lives here and nowhere else.

Padding: a TLV's length field counts header + payload but not the trailing pad, and the pad is
zeros — exactly what iproute2's ``addattr_l``/``addattr_nest`` produce, which the tests check
byte for byte.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Union

#: Set on a nest whose children are attributes (iproute2 sets it only on action options).
NLA_F_NESTED = 0x8000

_TLV = struct.Struct("=HH")
_U32 = struct.Struct("=I")
_BE16 = struct.Struct("!H")
_PAD = (b"", b"\0\0\0", b"\0\0", b"\0")


class Attr(NamedTuple):
    """One netlink attribute: ``type`` and either raw ``payload`` bytes or child attributes.

    The encoder takes any ``(type, payload)`` pair; hot builders use bare tuples, which are
    cheaper to create than this named form.
    """

    type: int
    payload: Union[bytes, tuple[Union["Attr", bytes], ...]]


def encode(attrs: tuple[Attr | bytes, ...] | list[Attr | bytes]) -> bytes:
    """Serialize a sequence of attributes (recursively), each padded to 4 bytes.

    An item that is ``bytes`` is taken as already-encoded attributes (a constant such as an
    action's KIND, encoded once at import), so hot paths skip rebuilding it.
    """
    out = b""
    for attr in attrs:
        if attr.__class__ is bytes:
            out += attr
            continue
        type_, payload = attr
        if payload.__class__ is not bytes:
            payload = encode(payload)
        size = 4 + len(payload)
        out += _TLV.pack(size, type_) + payload + _PAD[size & 3]
    return out


def u32(type_: int, value: int) -> Attr:
    """A host-order 32-bit attribute."""
    return Attr(type_, _U32.pack(value))


def be16(type_: int, value: int) -> Attr:
    """A network-order 16-bit attribute (e.g. an ethertype)."""
    return Attr(type_, _BE16.pack(value))


def strz(type_: int, text: str) -> Attr:
    """A NUL-terminated string attribute, as ``addattr_l(..., strlen + 1)`` writes it."""
    return Attr(type_, text.encode() + b"\0")


def nest(type_: int, *children: Attr, flag: bool = False) -> Attr:
    """A nest of ``children``; ``flag`` sets NLA_F_NESTED as iproute2 does for action options."""
    return Attr(type_ | NLA_F_NESTED if flag else type_, tuple(children))
