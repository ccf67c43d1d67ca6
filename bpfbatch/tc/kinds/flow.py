"""flow (``f_flow.c``): ``flow map key KEY [OPS] | hash keys KEY-LIST [perturb SECS]``, then
``[divisor N] [baseclass ID] [match EMATCH_TREE] [police ...] [action ...]``; tc's usage, words
and attributes (in the order the line gives them, then MODE, then MASK and XOR when
``and``/``or``/``xor`` changed them); the tree as :mod:`..ematch` reads it."""

from __future__ import annotations

from ..encoding import u32
from ..grammar import (CommandError, Words, get_address, illegal_unless, matches, parse_classid,
                       unsigned)
from .common import EmatchOption, Listed, listed_options, next_value

NAMES = ("flow",)

USAGE = """\
Usage: ... flow ...

 [mapping mode]: map key KEY [ OPS ] ...
 [hashing mode]: hash keys KEY-LIST ... [ perturb SECS ]

                 [ divisor NUM ] [ baseclass ID ] [ match EMATCH_TREE ]
                 [ action ACTION_SPEC ]

KEY-LIST := [ KEY-LIST , ] KEY
KEY      := [ src | dst | proto | proto-src | proto-dst | iif | priority |
              mark | nfct | nfct-src | nfct-dst | nfct-proto-src |
              nfct-proto-dst | rt-classid | sk-uid | sk-gid |
              vlan-tag | rxhash ]
OPS      := [ or NUM | and NUM | xor NUM | rshift NUM | addend NUM ]
ID       := X:Y"""

# linux/pkt_cls.h TCA_FLOW_*
_KEYS, _MODE, _BASECLASS, _RSHIFT, _ADDEND, _MASK, _XOR, _DIVISOR = 1, 2, 3, 4, 5, 6, 7, 8
_NUMBERS = {"action": 9, "police": 10}
_EMATCHES, _PERTURB = 11, 12
_MAP, _HASH = 0, 1
#: FLOW_KEY_* in bit order: a word takes the first key it is a prefix of.
KEY_NAMES = ("src", "dst", "proto", "proto-src", "proto-dst", "iif", "priority", "mark", "nfct",
             "nfct-src", "nfct-dst", "nfct-proto-src", "nfct-proto-dst", "rt-classid", "sk-uid",
             "sk-gid", "vlan-tag", "rxhash")
#: tc's get_addend reads an address where ``keys & (FLOW_KEY_SRC | FLOW_KEY_DST |
#: FLOW_KEY_NFCT_SRC | FLOW_KEY_NFCT_DST)``: enum values OR-ed as if they were bits (0|1|9|10
#: = 0b1011), so the keys src, dst and proto-src allow it and nfct-src, nfct-dst do not.
_ADDRESS_KEYS = 0 | 1 | 9 | 10
#: The words tc reads as plain numbers (``get_u32``), with their attribute.
_NUMBER_WORDS = {"rshift": _RSHIFT, "divisor": _DIVISOR, "perturb": _PERTURB}
#: and/or/xor: (tc's name for a bad value, (mask, xor) the operand folds in).
_BITOPS = {"and": ("mask", lambda v: (v, 0)), "or": ("or", lambda v: (~v & 0xFFFFFFFF, v)),
           "xor": ("xor", lambda v: (0xFFFFFFFF, v))}
_WORDS = ("map", "hash", "keys", "and", "or", "xor", "rshift", "addend", "divisor", "baseclass",
          "perturb")


def parse_filter(w: Words) -> Listed:
    """tc's ``flow_parse_opt``, the cursor past ``flow``. tc sends the options nest even when
    the line ends at ``flow``."""
    state = {"mode": _MAP, "keys": 0, "nkeys": 0, "mask": 0xFFFFFFFF, "xor": 0}
    tree = EmatchOption(w, _EMATCHES)

    def extra(word: str, attrs: list) -> bool:
        name = next((name for name in _WORDS if matches(word, name)), None)
        if name is None:
            if matches(word, "help"):
                raise CommandError(USAGE)
            return tree(word, attrs)
        if name in ("map", "hash"):
            state["mode"] = _MAP if name == "map" else _HASH
        elif name == "keys":
            state["keys"], state["nkeys"] = _keys(next_value(w))
            attrs.append(u32(_KEYS, state["keys"]))
        elif name in _BITOPS:
            what, fold = _BITOPS[name]
            value = illegal_unless(unsigned(next_value(w)), what)
            mask, xor = fold(value)
            state["xor"] = xor ^ (state["xor"] & mask)  # tc's transfer_bitop
            state["mask"] &= mask
        elif name == "addend":
            attrs.append(u32(_ADDEND, _addend(next_value(w), state["keys"])))
        elif name == "baseclass":
            classid = parse_classid(next_value(w))
            if classid is None or not classid & 0xFFFF:
                raise CommandError('Illegal "baseclass"')
            attrs.append(u32(_BASECLASS, classid))
        else:
            attrs.append(u32(_NUMBER_WORDS[name], illegal_unless(unsigned(next_value(w)), name)))
        return True

    try:
        listed = listed_options(w, "flow", USAGE, _NUMBERS, extra, extra_first=True)
        if state["nkeys"] > 1 and state["mode"] != _HASH:
            raise CommandError('Invalid mode "map" for multiple keys')
    except CommandError as exc:
        raise tree.failed(exc) from None
    listed.attrs += (u32(_MODE, state["mode"]),)
    if state["mask"] != 0xFFFFFFFF or state["xor"]:
        listed.attrs += (u32(_MASK, state["mask"]), u32(_XOR, state["xor"]))
    listed.sends_options = True
    return listed


def _keys(text: str) -> tuple[int, int]:
    """``flow_parse_keys``: comma-separated key names (or prefixes) → (key bits, how many were
    named: a key named twice counts twice, as in tc)."""
    keys = 0
    names = text.split(",")
    for name in names:
        bit = next((i for i, key in enumerate(KEY_NAMES) if matches(name, key)), None)
        if bit is None:
            raise CommandError(f'Unknown flow key "{name}"')
        keys |= 1 << bit
    return keys, len(names)


def _addend(text: str, keys: int) -> int:
    """``get_addend``: ``[-]NUM``, or ``[-]ADDRESS`` (its last 32 bits) after address keys;
    the minus negates modulo 2**32."""
    negative = text.startswith("-")
    body = text[1:] if negative else text
    value = unsigned(body)
    if value is None and keys & _ADDRESS_KEYS:
        _, address = get_address(body)  # get_addr: tc's words, and exit(1)
        if address:
            value = int.from_bytes(address[-4:], "big")
    if value is None:
        raise CommandError('Illegal "addend"')
    return -value & 0xFFFFFFFF if negative else value

