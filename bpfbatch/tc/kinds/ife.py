"""ife (``m_ife.c``): ``ife decode|encode [allow|use mark|prio|tcindex [VALUE]] [dst MAC]
[src MAC] [type TYPE] [CONTROL] [index N]``, inter-FE metadata encapsulation; tc's usage,
words, notes on stderr and attributes."""

from __future__ import annotations

import dataclasses
import functools
import struct

from .. import specs as S
from ..action_list import action_failed, next_arg
from ..encoding import encode, strz
from ..grammar import CommandError, Words, invalid, matches, say
from ..resolve import Resolver
from . import gact
from .skbmod import checked_tail, next_number, scan_mac
from .tail import Tail

NAMES = ("ife",)

USAGE = """\
Usage:... ife {decode|encode} [{ALLOW|USE} ATTR] [dst DMAC] [src SMAC] [type TYPE] [CONTROL] \
[index INDEX]
\tALLOW := Encode direction. Allows encoding specified metadata
\t\t e.g "allow mark"
\tUSE := Encode direction. Enforce Static encoding of specified metadata
\t\t e.g "use mark 0x12"
\tATTR := mark (32-bit), prio (32-bit), tcindex (16-bit)
\tDMAC := 6 byte Destination MAC address to encode
\tSMAC := optional 6 byte Source MAC address to encode
\tTYPE := optional 16 bit ethertype to encode
\tCONTROL := reclassify|pipe|drop|continue|ok
\tINDEX := optional IFE table index value used
encode is used for sending IFE packets
decode is used for receiving IFE packets"""

# linux/tc_act/tc_ife.h, linux/ife.h
_PARMS, _DMAC, _SMAC, _TYPE, _METALST = 1, 3, 4, 5, 6
_ENCODE = 1
_ETH_P_IFE = 0xED3E
#: The metadata words in tc's order: (word, IFE_META_* type, value bits, tc's word for a bad value).
_META = (("mark", 1, 32, "ife mark val is invalid"), ("prio", 3, 32, "ife prio val is invalid"),
         ("tcindex", 5, 16, "ife tcindex val is invalid"))
#: struct tc_ife: tc_gen, 16-bit flags (padded to 24 bytes).
_TC_IFE = struct.Struct("=IIiiiH2x")
_KIND = encode((strz(S.ActAttr.KIND, "ife"),))
_FORMS = {32: struct.Struct("=I"), 16: struct.Struct("=H")}


@dataclasses.dataclass(slots=True)
class Ife(Tail):
    """ife: ``encode`` (else decode); when encoding, the MACs and ethertype of the outer
    header (None: the kernel's defaults) and the metadata sent (``meta``: per IFE_META_* type
    in tc's order, its value bytes, empty to take it from the packet)."""

    encode: bool = False
    dmac: bytes | None = None
    smac: bytes | None = None
    type: int | None = None
    meta: tuple[tuple[int, bytes], ...] = ()
    kind = "ife"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms(_TC_IFE, int(self.encode)))]
        if self.encode:
            if self.dmac is not None:
                options.append((_DMAC, self.dmac))
            if self.type is not None:
                options.append((_TYPE, _FORMS[16].pack(self.type)))
            if self.smac is not None:
                options.append((_SMAC, self.smac))
            options.append((_METALST, self.meta))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Ife:
    """tc's ``parse_ife``, the cursor on ``ife``."""
    failed = functools.partial(action_failed, left=left, kind="ife")
    action = Ife()
    ok = False
    allowed: set[int] = set()
    values: dict[int, int] = {}
    while (word := w.peek()) is not None:
        if matches(word, "ife"):
            next_arg(w)
            continue
        if matches(word, "decode") or matches(word, "encode"):
            action.encode = matches(word, "encode")
            ok = True
        elif matches(word, "allow"):
            name = next_arg(w)
            meta = next((m for m in _META if matches(name, m[0])), None)
            if meta is None:
                raise invalid(name, "Illegal meta define")
            allowed.add(meta[1])
        elif matches(word, "use"):
            name = next_arg(w)
            meta = next((m for m in _META if matches(name, m[0])), None)
            if meta is None:
                raise invalid(name, "Illegal meta use type")
            values[meta[1]] = next_number(w, meta[2], meta[3])
        elif matches(word, "type"):
            action.type = next_number(w, 16, "ife type is invalid")
            say(f"IFE type 0x{action.type:04X}")
        elif matches(word, "dst") or matches(word, "src"):
            text = next_arg(w)
            mac = scan_mac(text)
            if mac is None:
                raise invalid(text, "Invalid mac address")
            if matches(word, "dst"):
                action.dmac = mac
                say(f"dst MAC address <{text}>")
            else:
                action.smac = mac
                say(f"src MAC address <{text}>")
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
    said = checked_tail(action, w, failed, ok, "IFE requires decode/encode specified", USAGE)
    if said:  # tc says it here, before its own note below; the next action says it again
        say(said.rstrip("\n"))
    if action.encode:
        if action.type is None:
            say(f"IFE type 0x{_ETH_P_IFE:04X}")
        # sent when allowed or given a value; a value of 0 is no value (tc's test)
        action.meta = tuple((type_, _FORMS[bits].pack(values[type_]) if values.get(type_) else b"")
                            for _, type_, bits, _ in _META
                            if type_ in allowed or values.get(type_))
    if said:
        raise gact.usage_error(said.rstrip("\n"))
    return action
