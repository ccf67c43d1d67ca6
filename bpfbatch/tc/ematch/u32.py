"""u32 (``em_u32.c``): ``u32(ALIGN VALUE MASK at [nexthdr+]OFFSET)``, a ``struct
tc_u32_key``; tc's words and checks in tc's order."""

from __future__ import annotations

import struct

from . import ULONG_MAX, Arg, EmError, bstrtoul, is_word, strtoul

KIND, KIND_NUM = "u32", 3
USAGE = """\
Usage: u32(ALIGN VALUE MASK at [ nexthdr+ ] OFFSET)
where: ALIGN  := { u8 | u16 | u32 }

Example: u32(u16 0x1122 0xffff at nexthdr+4)
"""
_ALIGNS = {b"u8": 1, b"u16": 2, b"u32": 4}
_MASK_VAL = struct.Struct("!II")  # tc_u32_key: mask, val (network order), then off, offmask
_OFF = struct.Struct("=ii")
_NEXTHDR = b"nexthdr+"


def parse(args: list[Arg]) -> bytes:
    """``u32_parse_eopt``: the arguments after the kind → the key. As in tc, ``nexthdr+N`` (one
    word) sets the offset mask and ``nexthdr+ N`` (two) does not."""
    align = _ALIGNS.get(args[0].data)
    if align is None:
        raise EmError("u32: invalid alignment", args[0])
    rest = iter(args[1:])
    key = _number(next(rest, None), "key")
    mask = _number(next(rest, None), "mask")
    arg = next(rest, None)
    if arg is None or not is_word(arg, "at"):
        raise EmError('u32: missing "at"', arg)
    arg = next(rest, None)
    if arg is None:
        raise EmError("u32: missing offset")
    offmask = 0
    data = arg.data
    if len(data) > len(_NEXTHDR) and data.startswith(_NEXTHDR):
        offmask = -1
        offset = strtoul(data[len(_NEXTHDR):].decode("latin-1"), 0) or 0  # unchecked: none is 0
    elif data == _NEXTHDR:
        arg = next(rest, None)
        if arg is None:
            raise EmError("u32: missing offset")
        offset = bstrtoul(arg)
    else:
        offset = bstrtoul(arg)
    if offset == ULONG_MAX:
        raise EmError("u32: invalid offset", arg)
    trailer = next(rest, None)
    if trailer is not None:
        raise EmError("u32: unexpected trailer", trailer)
    if align == 1:
        if key > 0xFF:
            raise EmError("Illegal key (>0xFF)", arg)
        if mask > 0xFF:
            raise EmError("Illegal mask (>0xFF)", arg)
        shift = 24 - (offset & 3) * 8
        key, mask, offset = key << shift, mask << shift, offset & ~3
    elif align == 2:
        if key > 0xFFFF:
            raise EmError("Illegal key (>0xFFFF)", arg)
        if mask > 0xFFFF:
            raise EmError("Illegal mask (>0xFFFF)", arg)
        if offset & 3 == 0:
            key, mask = key << 16, mask << 16
        offset &= ~3
    if offset % 4:
        raise EmError("u32: invalid offset alignment, must be aligned to 4.", arg)
    key, mask = key & 0xFFFFFFFF, mask & 0xFFFFFFFF  # htonl() takes 32 bits
    return _MASK_VAL.pack(mask, key & mask) + _OFF.pack(_int(offset), offmask)


def _number(arg: Arg | None, what: str) -> int:
    """The key or the mask: a number, as ``bstrtoul`` reads it."""
    if arg is None:
        raise EmError(f"u32: missing {what}")
    value = bstrtoul(arg)
    if value == ULONG_MAX:
        raise EmError(f"u32: invalid {what}, must be numeric", arg)
    return value


def _int(value: int) -> int:
    """An unsigned long stored into a C int."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value
