"""skbmod (``m_skbmod.c``): ``skbmod { set [dmac MAC] [smac MAC] [etype TYPE] | swap mac | ecn }
[CONTROL] [index N]``; tc's usage, words, notes on stderr and attributes. Also the MAC reader
skbmod and ife share (``sscanf("%hhx:...")``)."""

from __future__ import annotations

import dataclasses
import functools
import re
import struct

from .. import specs as S
from ..action_list import action_failed, next_arg
from ..encoding import encode, strz
from ..grammar import CommandError, Words, invalid, matches, say, unsigned
from ..resolve import Resolver
from . import gact
from .tail import Tail

NAMES = ("skbmod",)

USAGE = """\
Usage:... skbmod { set <SETTABLE> | swap <SWAPPABLE> | ecn } [CONTROL] [index INDEX]
where SETTABLE is: [dmac DMAC] [smac SMAC] [etype ETYPE]
where SWAPPABLE is: "mac" to swap mac addresses
\tDMAC := 6 byte Destination MAC address
\tSMAC := optional 6 byte Source MAC address
\tETYPE := optional 16 bit ethertype
\tCONTROL := reclassify | pipe | drop | continue | ok |
\t           goto chain <CHAIN_INDEX>
\tINDEX := skbmod index value to use"""

# linux/tc_act/tc_skbmod.h
_PARMS, _DMAC, _SMAC, _ETYPE = 2, 3, 4, 5
_F_DMAC, _F_SMAC, _F_ETYPE, _F_SWAPMAC, _F_ECN = 0x1, 0x2, 0x4, 0x8, 0x10
#: struct tc_skbmod: tc_gen, then the 64-bit flags at offset 24.
_TC_SKBMOD = struct.Struct("=IIiii4xQ")
_KIND = encode((strz(S.ActAttr.KIND, "skbmod"),))
_U16 = struct.Struct("=H")
#: One ``%hhx`` of scanf: blanks, a sign, an optional ``0x``, hex digits (none needed after
#: ``0x``: glibc reads ``0x`` alone as 0).
_SCAN_HEX = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX])?([0-9a-fA-F]*)")
_ULONG = 1 << 64
#: dmac, smac: (field, flag, tc's words for a bad address, its note's word).
_MAC_WORDS = (("dmac", _F_DMAC, "Invalid dst mac address", "dst"),
              ("smac", _F_SMAC, "Invalid smac address", "src"))


def scan_mac(text: str) -> bytes | None:
    """``sscanf(text, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx")`` read all six: each part as ``strtoul``
    reads it (a sign, ``0x``, any number of digits; past ULONG_MAX it is ULONG_MAX), its low
    byte kept; whatever follows the sixth is ignored. None where fewer than six are read."""
    out = bytearray(6)
    pos = 0
    for i in range(6):
        if i:
            if text[pos:pos + 1] != ":":
                return None
            pos += 1
        found = _SCAN_HEX.match(text, pos)
        sign, prefix, digits = found.groups()
        if not digits and not prefix:
            return None
        value = min(int(digits or "0", 16), _ULONG - 1)
        out[i] = (-value if sign == "-" else value) & 0xFF
        pos = found.end()
    return bytes(out)


def next_number(w: Words, bits: int, bad: str) -> int:
    """``NEXT_ARG()``, then ``get_u16``/``get_u32(..., 0)`` (``bits``) of that word, or tc's
    ``invarg(bad, word)``, which exits."""
    text = next_arg(w)
    value = unsigned(text, 0, bits=bits)
    if value is None:
        raise invalid(text, bad)
    return value


@dataclasses.dataclass(slots=True)
class Skbmod(Tail):
    """skbmod: ``flags`` (SKBMOD_F_*: set dmac, smac, etype; swap the MACs; ecn) with the
    addresses (6 bytes each) and ethertype to set."""

    flags: int = 0
    dmac: bytes | None = None
    smac: bytes | None = None
    etype: int = 0
    kind = "skbmod"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms(_TC_SKBMOD, self.flags))]
        if self.dmac is not None:
            options.append((_DMAC, self.dmac))
        if self.etype:  # tc sends no ethertype 0, though the flag says one is set
            options.append((_ETYPE, _U16.pack(self.etype)))
        if self.smac is not None:
            options.append((_SMAC, self.smac))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Skbmod:
    """tc's ``parse_skbmod``, the cursor on ``skbmod``."""
    failed = functools.partial(action_failed, left=left, kind="skbmod")
    action = Skbmod()
    while (word := w.peek()) is not None:
        if matches(word, "skbmod") or matches(word, "swap"):
            next_arg(w)
            continue
        if matches(word, "mac"):
            action.flags |= _F_SWAPMAC
        elif matches(word, "set"):
            next_arg(w)
            continue
        elif matches(word, "etype"):
            action.etype = next_number(w, 16, "ethertype is invalid")
            say(f"skbmod etype 0x{action.etype:x}")
            action.flags |= _F_ETYPE
        elif matches(word, "dmac") or matches(word, "smac"):
            name, flag, bad, note = _MAC_WORDS[matches(word, "smac")]
            text = next_arg(w)
            mac = scan_mac(text)
            if mac is None:
                raise failed(f"{bad} {text}")
            setattr(action, name, mac)
            action.flags |= flag
            say(f"{note} MAC address <{text}>")
        elif matches(word, "ecn"):
            action.flags |= _F_ECN
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
    # every option sets a flag
    said = checked_tail(action, w, failed, bool(action.flags), "skbmod requires at least one option",
                        USAGE)
    gact.refused_again(said)
    return action


def checked_tail(action: Tail, w: Words, failed, given: bool, missing: str, usage: str) -> str:
    """The end of skbmod's and ife's parsers: ``[CONTROL] [index N]`` (N a C literal, a bad
    one ``KIND: Illegal "index"``), then, when neither an option (``given``) nor an index was
    read, tc's ``missing`` words and the ``usage``, and tc exits. What tc said about a
    malformed ``goto``/``jump`` (see :meth:`.Tail.read_tail`)."""
    said, indexed = action.read_tail(w, failed, f'{action.kind}: Illegal "index"', base=0)
    if not given and not indexed:
        raise CommandError(f"{said}{missing}\n{usage}", fatal=True)
    return said
