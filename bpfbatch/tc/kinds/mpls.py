"""mpls (``m_mpls.c``): ``mpls pop protocol P | push|mac_push [protocol P] label L [tc N]
[ttl N] [bos N] | modify [label L] [tc N] [ttl N] [bos N] | dec_ttl``, then ``[CONTROL]
[index N]``; tc's usage, words and attributes."""

from __future__ import annotations

import dataclasses
import struct

from .. import specs as S
from ..action_list import failure, incomplete, next_arg
from ..encoding import encode, strz
from ..grammar import CommandError, Words, invalid, matches, unsigned
from ..resolve import Resolver
from . import gact
from .tail import Tail

NAMES = ("mpls",)

USAGE = """\
Usage: mpls pop [ protocol MPLS_PROTO ] [CONTROL]
       mpls push [ protocol MPLS_PROTO ] [ label MPLS_LABEL ] [ tc MPLS_TC ]
                 [ ttl MPLS_TTL ] [ bos MPLS_BOS ] [CONTROL]
       mpls mac_push [ protocol MPLS_PROTO ] [ label MPLS_LABEL ] [ tc MPLS_TC ]
                     [ ttl MPLS_TTL ] [ bos MPLS_BOS ] [CONTROL]
       mpls modify [ label MPLS_LABEL ] [ tc MPLS_TC ] [ ttl MPLS_TTL ]
                   [ bos MPLS_BOS ] [CONTROL]
           for pop, MPLS_PROTO is next header of packet - e.g. ip or mpls_uc
           for push and mac_push, MPLS_PROTO is one of mpls_uc or mpls_mc
               with default: mpls_uc
       CONTROL := reclassify | pipe | drop | continue | pass |
                  goto chain <CHAIN_INDEX>"""

#: The operations in tc's order of ``matches()`` (a prefix names the first it starts),
#: TCA_MPLS_ACT_*.
_OPERATIONS = (("pop", 1), ("push", 2), ("modify", 3), ("mac_push", 5), ("dec_ttl", 4))
_NAMES = {value: name for name, value in _OPERATIONS}
_POP, _PUSH, _MODIFY, _MAC_PUSH = 1, 2, 3, 5
_SETS_FIELDS = (_PUSH, _MAC_PUSH, _MODIFY)
_SETS_ETHTYPE = (_PUSH, _MAC_PUSH, _POP)
_MPLS_PROTOCOLS = (0x8847, 0x8848)  # ETH_P_MPLS_UC, ETH_P_MPLS_MC
# linux/tc_act/tc_mpls.h TCA_MPLS_*
_PARMS, _PROTO, _LABEL, _TC, _TTL, _BOS = 2, 4, 5, 6, 7, 8
#: struct tc_mpls: tc_gen, m_action.
_TC_MPLS = struct.Struct("=IIiiii")
_KIND = encode((strz(S.ActAttr.KIND, "mpls"),))
#: The label fields: (word, attribute, reader → value or None where tc refuses, its words).
_FIELDS = {
    "label": (_LABEL, lambda t: _at_most(unsigned(t, 0), 0xFFFFF), "label must be <=0xFFFFF"),
    "tc": (_TC, lambda t: _at_most(unsigned(t, 0, bits=8), 7), "tc field is 3 bits max"),
    "ttl": (_TTL, lambda t: unsigned(t, 0, bits=8) or None, "ttl must be >0 and <=255"),
    "bos": (_BOS, lambda t: _at_most(unsigned(t, 0, bits=8), 1), "bos must be 0 or 1"),
}


@dataclasses.dataclass(slots=True)
class Mpls(Tail):
    """mpls: ``operation`` (1 pop, 2 push, 3 modify, 4 dec_ttl, 5 mac_push) with the
    ethertype ``protocol`` and the label stack entry's fields (``fields``: attribute → value,
    those the line gave)."""

    operation: int = 0
    protocol: int | None = None
    fields: dict = dataclasses.field(default_factory=dict)
    kind = "mpls"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms(_TC_MPLS, self.operation))]
        # tc sends the label before the protocol (the header numbers them the other way)
        if _LABEL in self.fields:
            options.append((_LABEL, struct.pack("=I", self.fields[_LABEL])))
        if self.protocol:
            options.append((_PROTO, struct.pack("!H", self.protocol)))
        for type_ in (_TC, _TTL, _BOS):
            if type_ in self.fields:
                options.append((type_, bytes((self.fields[type_],))))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Mpls:
    """tc's ``parse_mpls``, the cursor on ``mpls``."""
    failed = failure(left, "mpls")

    next_arg(w)
    action = Mpls()
    while (word := w.peek()) is not None:
        operation = next((v for name, v in _OPERATIONS if matches(word, name)), None)
        field = next((name for name in _FIELDS if matches(word, name)), None)
        if operation is not None:
            if action.operation:
                raise failed(f'Error: got "{word}" but action already set to '
                             f'"{_NAMES[action.operation]}"\n{USAGE}')
            action.operation = operation
        elif field is not None:
            if action.operation not in _SETS_FIELDS:
                raise invalid(word, "only valid for push, mac_push and modify")
            type_, read, what = _FIELDS[field]
            value = read(next_arg(w))
            if value is None:
                raise invalid(w.peek(), what)
            action.fields[type_] = value
        elif matches(word, "protocol"):
            if action.operation not in _SETS_ETHTYPE:
                raise invalid(word, "only valid for push, mac_push and pop")
            action.protocol = S.protocol_number(next_arg(w))
            if action.protocol is None:
                raise invalid(w.peek(), "protocol is invalid")
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
    if not action.operation:
        raise incomplete()
    said, _ = action.read_tail(w, lambda word: invalid(word, "illegal index"), "{word}")
    if action.operation == _PUSH and _LABEL not in action.fields:
        raise _missing(said, "label")
    if action.operation in (_PUSH, _MAC_PUSH) and action.protocol \
            and action.protocol not in _MPLS_PROTOCOLS:
        prefix = "mac_" if action.operation == _MAC_PUSH else ""
        raise failed(f'{said}invalid {prefix}push protocol "{action.protocol:#06x}" - '
                     "use mpls_(uc|mc)")
    if action.operation == _POP and not action.protocol:
        raise _missing(said, "protocol")
    gact.refused_again(said)
    return action


def _at_most(value: int | None, limit: int) -> int | None:
    return value if value is not None and value <= limit else None


def _missing(said: str, name: str) -> CommandError:
    """tc's ``missarg()`` after what it ``said`` about a malformed verdict: it exits."""
    return CommandError(f'{said}Error: argument "{name}" is required', fatal=True)
