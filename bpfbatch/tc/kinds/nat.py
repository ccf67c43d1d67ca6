"""nat (``m_nat.c``): ``nat ingress|egress OLD[/LEN] NEW [CONTROL] [index N]``, stateless
IPv4 address translation; tc's usage, words and attributes."""

from __future__ import annotations

import dataclasses
import struct

from .. import specs as S
from ..action_list import failure, next_arg
from ..encoding import encode, strz
from ..grammar import Words, ipv4_prefix, matches
from ..resolve import Resolver
from . import gact
from .tail import Tail, read_kind_words

NAMES = ("nat",)

USAGE = """\
Usage: ... nat NAT
NAT := DIRECTION OLD NEW
DIRECTION := { ingress | egress }
OLD := PREFIX
NEW := ADDRESS"""

_PARMS = 1  # TCA_NAT_PARMS
_EGRESS = 1  # TCA_NAT_FLAG_EGRESS
#: struct tc_nat: tc_gen, old_addr, new_addr, mask (network order), flags.
_TC_NAT = struct.Struct("=IIiii4s4s4sI")
_KIND = encode((strz(S.ActAttr.KIND, "nat"),))


@dataclasses.dataclass(slots=True)
class Nat(Tail):
    """nat: rewrite addresses in ``old``/``mask`` to ``new`` (the source of egress packets,
    the destination of ingress ones; each 4 bytes, network order)."""

    old: bytes = bytes(4)
    mask: bytes = bytes(4)
    new: bytes = bytes(4)
    egress: bool = False
    verdict: str = "ok"
    kind = "nat"

    def attrs(self, resolve: Resolver) -> tuple:
        parms = self.parms(_TC_NAT, self.old, self.new, self.mask, _EGRESS if self.egress else 0)
        return self.action_attrs(_KIND, ((_PARMS, parms),))


def parse_action(w: Words, left: int) -> Nat:
    """tc's ``parse_nat``, the cursor on ``nat``."""
    failed = failure(left, "nat")

    action = Nat()

    def translation() -> None:
        direction = next_arg(w)
        if not _read_args(w, action):
            raise failed(f"Illegal nat construct ({direction})\n{USAGE}")

    if not read_kind_words(w, "nat", USAGE, translation):
        raise failed(USAGE)
    said, _ = action.read_tail(w, failed, 'Nat: Illegal "index"')
    gact.refused_again(said)
    return action


def _read_args(w: Words, action: Nat) -> bool:
    """``parse_nat_args``, the cursor on the direction: DIRECTION OLD NEW into ``action``,
    the cursor past them; False (the cursor back on the direction) where tc fails."""
    start = w.pos
    word = w.peek()
    if matches(word, "egress"):
        action.egress = True
    elif not matches(word, "ingress"):
        return False
    old = ipv4_prefix(next_arg(w))
    new = ipv4_prefix(next_arg(w)) if old is not None else None
    if new is None:
        w.pos = start
        return False
    # tc shifts ~0 by 32 - LEN: a /0 prefix (a 32-bit shift) leaves the mask whole on x86
    action.old, action.new = old[0], new[0]
    action.mask = (0xFFFFFFFF << (32 - old[1]) & 0xFFFFFFFF or 0xFFFFFFFF).to_bytes(4, "big")
    w.pos += 1
    return True
