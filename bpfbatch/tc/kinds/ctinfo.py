"""ctinfo (``m_ctinfo.c``): ``ctinfo [dscp MASK [STATEMASK]] [cpmark [MASK]] [zone ZONE]
[CONTROL] [index N]``, the DSCP or mark a connection stored restored to its packets; tc's
usage, words (each option in that order only) and attributes."""

from __future__ import annotations

import dataclasses
import struct

from .. import specs as S
from ..action_list import failure, next_arg
from ..encoding import encode, strz
from ..grammar import Words, matches, unsigned
from ..resolve import Resolver
from . import gact
from .tail import Tail, skip_kind_words

NAMES = ("ctinfo",)

USAGE = """\
Usage: ... ctinfo [dscp mask [statemask]] [cpmark [mask]] [zone ZONE] [CONTROL] [index <INDEX>]
where :
\tdscp   MASK bitmask location of stored DSCP
\t       STATEMASK bitmask to determine conditional restoring
\tcpmark MASK mask applied to mark on restoration
\tZONE is the conntrack zone
\tCONTROL := reclassify | pipe | drop | continue | ok |
\t           goto chain <CHAIN_INDEX>"""

# linux/tc_act/tc_ctinfo.h TCA_CTINFO_*
_ACT, _ZONE, _DSCP_MASK, _DSCP_STATEMASK, _CPMARK_MASK = 3, 4, 5, 6, 7
_KIND = encode((strz(S.ActAttr.KIND, "ctinfo"),))
_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")


@dataclasses.dataclass(slots=True)
class Ctinfo(Tail):
    """ctinfo: restore the DSCP stored in the bits ``dscp_mask`` of the connection's mark
    (only where the bits ``dscp_statemask`` are clear), and/or the mark under ``cpmark_mask``,
    for connections of conntrack ``zone``; a mask of 0 is left out, as tc leaves it."""

    zone: int = 0
    dscp_mask: int = 0
    dscp_statemask: int = 0
    cpmark_mask: int = 0
    kind = "ctinfo"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_ACT, self.parms()), (_ZONE, _U16.pack(self.zone))]
        for type_, mask in ((_DSCP_MASK, self.dscp_mask), (_DSCP_STATEMASK, self.dscp_statemask),
                            (_CPMARK_MASK, self.cpmark_mask)):
            if mask:
                options.append((type_, _U32.pack(mask)))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Ctinfo:
    """tc's ``parse_ctinfo``, the cursor on ``ctinfo``."""
    failed = failure(left, "ctinfo")

    skip_kind_words(w, "ctinfo", USAGE)
    action = Ctinfo()
    if matches(w.peek(), "dscp"):
        action.dscp_mask = unsigned(next_arg(w), 0)
        if action.dscp_mask is None:
            raise failed('ctinfo: Illegal dscp "mask"')
        action.dscp_statemask = _optional_mask(w, 0)
    if matches(w.peek(), "cpmark"):
        action.cpmark_mask = _optional_mask(w, 0xFFFFFFFF)
    if matches(w.peek(), "zone"):
        action.zone = gact.decimal_option(w, failed, 'ctinfo: Illegal "zone"', bits=16)
    said, _ = action.read_tail(w, failed, 'ctinfo: Illegal "index"')
    if action.dscp_mask & action.dscp_statemask:
        raise failed(f"{said}ctinfo: dscp mask & statemask must NOT overlap")
    lowest = action.dscp_mask & -action.dscp_mask
    if action.dscp_mask and action.dscp_mask // lowest != 0x3F:
        raise failed(f"{said}ctinfo: dscp mask must be 6 contiguous bits long")
    gact.refused_again(said)
    return action


def _optional_mask(w: Words, default: int) -> int:
    """The number after the word at the cursor if there is one tc reads as a u32 (the cursor
    past it), else ``default`` (the cursor on that next word): how tc reads the optional
    statemask after ``dscp MASK`` and the optional mask after ``cpmark``."""
    w.pos += 1
    mask = unsigned(w.peek(), 0)
    if mask is None:
        return default
    w.pos += 1
    return mask
