"""vlan (``m_vlan.c``): ``vlan pop | push|modify [protocol P] id ID [priority N] | pop_eth |
push_eth dst_mac MAC src_mac MAC``, then ``[CONTROL] [index N]``; tc's usage, words and
attributes."""

from __future__ import annotations

import dataclasses
import struct

from .. import specs as S
from ..action_list import failure, next_arg
from ..encoding import encode, strz
from ..grammar import BadLladdr, CommandError, Words, invalid, lladdr, matches, unsigned
from ..resolve import Resolver
from . import gact
from .tail import Tail

NAMES = ("vlan",)

USAGE = """\
Usage: vlan pop [CONTROL]
       vlan push [ protocol VLANPROTO ] id VLANID [ priority VLANPRIO ] [CONTROL]
       vlan modify [ protocol VLANPROTO ] id VLANID [ priority VLANPRIO ] [CONTROL]
       vlan pop_eth [CONTROL]
       vlan push_eth dst_mac LLADDR src_mac LLADDR [CONTROL]
       VLANPROTO is one of 802.1Q or 802.1AD
            with default: 802.1Q
       CONTROL := reclassify | pipe | drop | continue | pass |
                  goto chain <CHAIN_INDEX>"""

#: The vlan operations in tc's order (a prefix names the first it starts), TCA_VLAN_ACT_*.
_OPERATIONS = (("pop", 1), ("push", 2), ("modify", 3), ("pop_eth", 4), ("push_eth", 5))
_NAMES = {value: name for name, value in _OPERATIONS}
_PUSH, _MODIFY, _PUSH_ETH = 2, 3, 5
# linux/tc_act/tc_vlan.h TCA_VLAN_*
_PARMS, _ID, _PROTOCOL, _PRIORITY, _ETH_DST, _ETH_SRC = 2, 3, 4, 6, 7, 8
#: struct tc_vlan: tc_gen, v_action.
_TC_VLAN = struct.Struct("=IIiiii")
_KIND = encode((strz(S.ActAttr.KIND, "vlan"),))
_VLAN_PROTOCOLS = (0x8100, 0x88A8)  # ETH_P_8021Q, ETH_P_8021AD


@dataclasses.dataclass(slots=True)
class Vlan(Tail):
    """vlan: ``operation`` (1 pop, 2 push, 3 modify, 4 pop_eth, 5 push_eth) with its tag
    (``id``, ``protocol``, ``priority``) or Ethernet header (``dst_mac``, ``src_mac``); None
    leaves a field out."""

    operation: int = 0
    id: int | None = None
    protocol: int | None = None
    priority: int | None = None
    dst_mac: bytes | None = None
    src_mac: bytes | None = None
    kind = "vlan"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms(_TC_VLAN, self.operation))]
        if self.id is not None:
            options.append((_ID, struct.pack("=H", self.id)))
        if self.protocol is not None:
            options.append((_PROTOCOL, struct.pack("!H", self.protocol)))
        if self.priority is not None:
            options.append((_PRIORITY, bytes((self.priority,))))
        for type_, mac in ((_ETH_DST, self.dst_mac), (_ETH_SRC, self.src_mac)):
            if mac is not None:
                options.append((type_, mac))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Vlan:
    """tc's ``parse_vlan``, the cursor on ``vlan``."""
    failed = failure(left, "vlan")

    next_arg(w)
    action = Vlan()
    while (word := w.peek()) is not None:
        operation = next((v for name, v in _OPERATIONS if matches(word, name)), None)
        if operation is not None:
            if action.operation:
                raise failed(f'unexpected "{word}" - action already specified\n{USAGE}')
            action.operation = operation
        elif matches(word, "id"):
            _push_only(action, word)
            action.id = _valid(unsigned(next_arg(w), 0, bits=16), w, "id is invalid")
        elif matches(word, "protocol"):
            _push_only(action, word)
            action.protocol = _valid(S.protocol_number(next_arg(w)), w, "protocol is invalid")
        elif matches(word, "priority"):
            _push_only(action, word)
            prio = unsigned(next_arg(w), 0, bits=8)
            action.priority = _valid(prio if prio is not None and prio <= 7 else None, w,
                                     "prio is invalid")
        elif matches(word, "dst_mac") or matches(word, "src_mac"):
            name = "dst_mac" if matches(word, "dst_mac") else "src_mac"
            if action.operation != _PUSH_ETH:
                raise invalid(word, "only valid for push_eth")
            setattr(action, name, _lladdr(next_arg(w), f"{name} is invalid",
                                          getattr(action, name)))
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
    said, _ = action.read_tail(w, failed, 'vlan: Illegal "index"')
    problem = _incomplete(action)
    if problem:
        raise failed(f"{said}{problem}\n{USAGE}")
    gact.refused_again(said)
    return action


def _incomplete(action: Vlan) -> str | None:
    """What ``parse_vlan`` finds missing or wrong once it has read the words, or None."""
    name = _NAMES.get(action.operation)
    if action.operation in (_PUSH, _MODIFY) and action.id is None:
        return f"id needs to be set for {name}"
    if action.operation == _PUSH_ETH:
        for mac in ("dst_mac", "src_mac"):
            if getattr(action, mac) is None:
                return f"{mac} needs to be set for {name}"
    if action.protocol is not None and action.protocol not in _VLAN_PROTOCOLS:
        return "protocol not supported"
    return None


def _lladdr(text: str, what: str, before: bytes | None) -> bytes:
    """``ll_addr_a2n`` (:func:`..grammar.lladdr`) into tc's 6-byte array, which holds
    ``before`` (the same option given earlier on the line; zeros if none). A word it cannot
    read: its line, then ``invarg``'s naming ``what`` and the word as tc left it."""
    out = bytearray(before or bytes(6))
    try:
        lladdr(text, out)
    except BadLladdr as bad:
        raise CommandError(f"{bad.said}\n{invalid(bad.word, what)}", fatal=True) from None
    return bytes(out)


def _push_only(action: Vlan, word: str) -> None:
    if action.operation not in (_PUSH, _MODIFY):
        raise invalid(word, "only valid for push/modify")


def _valid(value, w: Words, what: str):
    """``value``, or tc's ``invarg`` naming the word at the cursor and ``what``."""
    if value is None:
        raise invalid(w.peek(), what)
    return value
