"""canid (``em_canid.c``): ``canid(IDSPEC ...)``, IDSPEC ``sff|eff ID[:MASK]`` (hexadecimal, as
``sscanf("%x:%x")`` reads it), one ``struct can_filter`` each, at most 400; tc's words (its
error lines list the arguments from the one it stopped at: tc steps its ``args`` pointer)."""

from __future__ import annotations

import re
import struct

from . import Arg, EmError

KIND, KIND_NUM = "canid", 7
USAGE = """\
Usage: canid(IDLIST)
where: IDLIST := IDSPEC [ IDLIST ]
       IDSPEC := { ’sff’ CANID | ’eff’ CANID }
       CANID := ID[:MASK]
       ID, MASK := hexadecimal number (i.e. 0x123)
Example: canid(sff 0x123 sff 0x124 sff 0x125:0xf)
"""
_EFF_FLAG, _SFF_MASK, _EFF_MASK = 0x80000000, 0x7FF, 0x1FFFFFFF
_MAX_RULES = 400
_FILTER = struct.Struct("=II")
#: ``%x``: blanks, a sign, an optional 0x, hex digits.
_HEX = re.compile(rb"[ \t\n\v\f\r]*([+-]?)(?:0[xX](?=[0-9a-fA-F]))?([0-9a-fA-F]+)")


def parse(args: list[Arg]) -> bytes:
    """``canid_parse_eopt``: the rules → their filters."""
    rules = []
    at = 0
    while at < len(args):
        key = args[at].data
        if key not in (b"sff", b"eff"):
            raise EmError("canid: invalid key", args[at], first=at)
        if at + 1 == len(args):
            raise EmError("canid: missing argument", first=None)
        at += 1
        parsed = _rule(args[at].cstr(), key == b"eff")
        if parsed is None:
            raise EmError("canid: Improperly formed CAN ID & mask\n", args[at], first=at)
        if len(rules) == _MAX_RULES:
            raise EmError("canid: Too many arguments on input\n", args[at], first=at)
        rules.append(parsed)
        at += 1
    return b"".join(rules)


def _rule(text: bytes, eff: bool) -> bytes | None:
    """``canid_parse_rule``: ``ID:MASK`` or ``ID`` (the mask then all of the frame format's id
    bits) → the filter; None where sscanf reads no id."""
    found = _HEX.match(text)
    if found is None:
        return None
    can_id = _scanned(found)
    mask_found = _HEX.match(text, found.end() + 1) if text[found.end():found.end() + 1] == b":" \
        else None
    can_mask = _scanned(mask_found) if mask_found else (_EFF_MASK if eff else _SFF_MASK)
    return _FILTER.pack(can_id | (_EFF_FLAG if eff else 0), can_mask | _EFF_FLAG)


def _scanned(found: re.Match) -> int:
    """What ``%x`` stores into an unsigned int: strtoul's value (wrapped if negative,
    all ones past 64 bits), cut to 32 bits."""
    value = int(found.group(2), 16)
    value = (1 << 64) - 1 if value >= 1 << 64 else value
    if found.group(1) == b"-":
        value = -value
    return value & 0xFFFFFFFF
