"""ct (``m_ct.c``): ``ct clear | commit [force] [zone Z] [mark M[/MASK]] [label L[/MASK]]
[nat src|dst addr A[-A] [port P[-P]]] | [nat] [zone Z]``, ``index N`` among them, then
``[CONTROL]``; tc's usage, words and attributes (in the order the line gives them, then the
ct action bits and the parameters). tc 6.1 reads no ``helper``: the word ends ct's options."""

from __future__ import annotations

import dataclasses
import socket
import struct

from .. import specs as S
from ..action_list import failure, next_arg
from ..encoding import encode, strz
from ..grammar import CommandError, Words, get_address, invalid, matches, unsigned
from ..resolve import Resolver
from . import gact
from .tail import Tail

NAMES = ("ct",)

USAGE = """\
Usage: ct clear
\tct commit [force] [zone ZONE] [mark MASKED_MARK] [label MASKED_LABEL] [nat NAT_SPEC]
\tct [nat] [zone ZONE]
Where: ZONE is the conntrack zone table number
\tNAT_SPEC is {src|dst} addr addr1[-addr2] [port port1[-port2]]
"""

# linux/tc_act/tc_ct.h TCA_CT_*
_PARMS, _ACTION, _ZONE, _MARK, _MARK_MASK, _LABELS, _LABELS_MASK = 1, 3, 4, 5, 6, 7, 8
_NAT_IPV4_MIN, _NAT_IPV4_MAX, _NAT_IPV6_MIN, _NAT_IPV6_MAX = 9, 10, 11, 12
_NAT_PORT_MIN, _NAT_PORT_MAX = 13, 14
# TCA_CT_ACT_*
_COMMIT, _FORCE, _CLEAR, _NAT, _NAT_SRC, _NAT_DST = 1, 2, 4, 8, 16, 32
#: The flag words in tc's order of ``matches()`` (after ``zone`` and ``nat``).
_FLAGS = (("clear", _CLEAR), ("commit", _COMMIT), ("force", _FORCE))
_LABELS_SIZE = 16
_KIND = encode((strz(S.ActAttr.KIND, "ct"),))
_U16 = struct.Struct("=H")
_BE16 = struct.Struct("!H")
_U32 = struct.Struct("=I")


@dataclasses.dataclass(slots=True)
class Ct(Tail):
    """ct: send the packet through conntrack (``flags``: TCA_CT_ACT_* — commit, force, clear,
    nat and its direction) with ``options`` (zone, mark, labels, NAT range: the attributes in
    the line's order, a word given twice sent twice as tc sends it)."""

    flags: int = 0
    options: list = dataclasses.field(default_factory=list)
    kind = "ct"

    def attrs(self, resolve: Resolver) -> tuple:
        return self.action_attrs(_KIND, (*self.options, (_ACTION, _U16.pack(self.flags)),
                                         (_PARMS, self.parms())))


def parse_action(w: Words, left: int) -> Ct:
    """tc's ``parse_ct``, the cursor on ``ct``."""
    failed = failure(left, "ct")

    action = Ct()
    options = action.options
    w.pos += 1
    while (word := w.peek()) is not None:
        flag = next((bit for name, bit in _FLAGS if matches(word, name)), None)
        if matches(word, "zone"):
            zone = unsigned(next_arg(w), 0, bits=16)
            if zone is None:
                raise failed('ct: Illegal "zone"')
            options.append((_ZONE, _U16.pack(zone)))
        elif matches(word, "nat"):
            action.flags |= _NAT
            if not _nat(w, action, failed):
                continue  # tc reads the word after ``nat`` again as an option
        elif flag is not None:
            action.flags |= flag
        elif matches(word, "index"):
            action.index = unsigned(next_arg(w), 10)
            if action.index is None:
                raise failed('ct: Illegal "index"')
        elif matches(word, "mark"):
            mark = _masked(next_arg(w))
            if mark is None:
                raise failed('ct: Illegal "mark"')
            options += ((_MARK, _U32.pack(mark[0])), (_MARK_MASK, _U32.pack(mark[1])))
        elif matches(word, "label"):
            options += labels(next_arg(w), (_LABELS, _LABELS_MASK), "ct: ")
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
    problem = _conflict(action.flags)
    if problem:
        raise failed(f"ct: {problem}")
    action.verdict = gact.optional_control(w) or action.verdict
    return action


def _nat(w: Words, action: Ct, failed) -> bool:
    """After ``nat`` (the cursor on it): ``src|dst addr RANGE [port RANGE]`` into ``action``,
    the cursor on the last word read — False (the cursor on the word after ``nat``) when that
    word is neither ``src`` nor ``dst``. tc steps on after the address range whatever follows
    (the line must go on), and reads that word again as an option unless it is ``port``."""
    word = next_arg(w)
    if matches(word, "src"):
        action.flags |= _NAT_SRC
    elif matches(word, "dst"):
        action.flags |= _NAT_DST
    else:
        return False
    if not matches(next_arg(w), "addr"):
        raise CommandError(USAGE, fatal=True)
    action.options += _address_range(next_arg(w))
    if not matches(next_arg(w), "port"):
        w.pos -= 1
        return True
    ports = _port_range(next_arg(w))
    if ports is None:
        raise failed("ct: Illegal nat port range")
    action.options += ports
    return True


def _address_range(text: str) -> tuple:
    """``ct_parse_nat_addr_range``: ``ADDR[-ADDR]`` (the second in the first's family; alone,
    the first is both ends) → the MIN and MAX attributes. An address tc cannot read: its words,
    and it exits."""
    first, dash, second = text[:63].partition("-")  # tc copies the word into 64 bytes
    family, low = get_address(first)
    v4 = family == socket.AF_INET
    attrs = ((_NAT_IPV4_MIN if v4 else _NAT_IPV6_MIN, low),)
    if dash:
        family, high = get_address(second, family)
        v4 = family == socket.AF_INET
    else:
        high = low
    return (*attrs, (_NAT_IPV4_MAX if v4 else _NAT_IPV6_MAX, high))


def _port_range(text: str) -> tuple | None:
    """``ct_parse_nat_port_range``: ``PORT[-PORT]`` (decimal) → the MIN and MAX attributes, or
    None where tc refuses it."""
    first, dash, second = text[:63].partition("-")
    low = unsigned(first, 10, bits=16)
    high = unsigned(second, 10, bits=16) if dash else low
    if low is None or high is None:
        return None
    return (_NAT_PORT_MIN, _BE16.pack(low)), (_NAT_PORT_MAX, _BE16.pack(high))


def _masked(text: str) -> tuple[int, int] | None:
    """``ct_parse_u32``: ``VALUE[/MASK]`` (C numbers; the mask all ones when absent)."""
    value, slash, mask = text.partition("/")
    value, mask = unsigned(value, 0), unsigned(mask, 0) if slash else 0xFFFFFFFF
    return None if value is None or mask is None else (value, mask)


def labels(text: str, numbers: tuple[int, int], said: str) -> tuple:
    """``ct_parse_labels`` (flower's ``flower_parse_ct_labels`` too): ``HEX[/HEX]`` → the
    labels and mask attributes, ``numbers`` (the mask 16 bytes of ones when absent). As in tc,
    each hex string is read two digits at a time, so an odd last digit is dropped; too long or
    not hex: tc's words after ``said`` (``invarg``), and it exits."""
    labels, slash, mask = text.partition("/")
    if len(labels) > 2 * _LABELS_SIZE or len(mask) > 2 * _LABELS_SIZE:
        # tc names the label's length even when the mask is the long one
        raise invalid(labels, f"{len(labels)} Max allowed size {2 * _LABELS_SIZE}")
    value = _hex_bytes(labels)
    if value is None:
        raise invalid(labels, f"{said}labels must be a hex string\n")
    if slash:
        lmask = _hex_bytes(mask)
        if lmask is None:
            raise invalid(mask, f"{said}labels mask must be a hex string\n")
    else:
        lmask = b"\xff" * _LABELS_SIZE
    return (numbers[0], value), (numbers[1], lmask)


def _hex_bytes(text: str) -> bytes | None:
    """``hex2mem(text, len(text) / 2)``: whole pairs of hex digits (a last odd digit unread)."""
    pairs = text[:len(text) & ~1]
    if not all(c in "0123456789abcdefABCDEF" for c in pairs):
        return None
    return bytes.fromhex(pairs)


def _conflict(flags: int) -> str | None:
    """What ``parse_ct`` refuses in the flags the line set, or None."""
    if flags & _CLEAR and flags & ~_CLEAR:
        return "clear can only be used alone"
    if flags & _NAT_SRC and flags & _NAT_DST:
        return "src and dst nat can't be used together"
    if flags & _COMMIT and flags & _NAT and not flags & (_NAT_SRC | _NAT_DST):
        return "commit and nat must set src or dst"
    if not flags & _COMMIT and flags & (_NAT_SRC | _NAT_DST):
        return "src or dst is only valid if commit is set"
    return None
