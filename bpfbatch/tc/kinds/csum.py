"""csum (``m_csum.c``): ``csum TARGET... [CONTROL] [index N]``, the checksums to recompute
(at least one: iproute2 6.1 reads no ``csum index N`` alone); tc's usage, words and
attributes."""

from __future__ import annotations

import dataclasses
import struct

from .. import specs as S
from ..action_list import failure, next_arg
from ..encoding import encode, strz
from ..grammar import Words, matches
from ..resolve import Resolver
from . import gact
from .tail import Tail, read_kind_words

NAMES = ("csum",)

USAGE = """\
Usage: ... csum <UPDATE>
Where: UPDATE := <TARGET> [<UPDATE>]
       TARGET := { ip4h | icmp | igmp | tcp | udp | udplite | sctp | <SWEETS> }
       SWEETS := { and | or | '+' }"""

#: Target words in tc's order (a prefix names the first it starts) → TCA_CSUM_UPDATE_FLAG_*;
#: ``and``/``or``/``+`` are read and ignored (0).
_TARGETS = (("iph", 1), ("ip4h", 1), ("ipv4h", 1), ("icmp", 2), ("igmp", 4), ("tcp", 8),
            ("udp", 16), ("udplite", 32), ("sctp", 64), ("and", 0), ("or", 0), ("+", 0))
_PARMS = 1  # TCA_CSUM_PARMS
#: struct tc_csum: tc_gen, update_flags.
_TC_CSUM = struct.Struct("=IIiiiI")
_KIND = encode((strz(S.ActAttr.KIND, "csum"),))
_ILLEGAL_INDEX = 'Illegal "index" ({word}) <csum>'


@dataclasses.dataclass(slots=True)
class Csum(Tail):
    """csum: recompute the checksums ``update_flags`` names (1 IPv4 header, 2 ICMP, 4 IGMP,
    8 TCP, 16 UDP, 32 UDP-Lite, 64 SCTP)."""

    update_flags: int = 0
    verdict: str = "ok"
    kind = "csum"

    def attrs(self, resolve: Resolver) -> tuple:
        return self.action_attrs(_KIND, ((_PARMS, self.parms(_TC_CSUM, self.update_flags)),))


def parse_action(w: Words, left: int) -> Csum:
    """tc's ``parse_csum``, the cursor on ``csum``."""
    failed = failure(left, "csum")

    action = Csum()

    def targets() -> None:
        next_arg(w)
        while (target := w.peek()) is not None:
            flag = next((v for name, v in _TARGETS if matches(target, name)), None)
            if flag is None:
                break
            action.update_flags |= flag
            w.pos += 1

    if not read_kind_words(w, "csum", USAGE, targets):
        raise failed(USAGE)
    if not action.update_flags:
        raise failed("Illegal csum construct, empty <UPDATE> list")
    said, _ = action.read_tail(w, failed, _ILLEGAL_INDEX)
    gact.refused_again(said)
    return action
