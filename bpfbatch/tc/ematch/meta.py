"""meta (``em_meta.c``): ``meta(OBJECT {eq|lt|gt} OBJECT)``, OBJECT a value (a number, or a
quoted string) or a meta id with ``shift``/``mask``; a ``struct tcf_meta_hdr`` and the two
values as attributes. tc's words, table and checks in tc's order.

As in tc, a right-hand meta id whose type differs from the left value's takes the left's type
when the id's table entry allows it; for an id allowing only INT, tc's loop over the entry's
types runs past its end and prints what it finds there until it meets a 'v' (README:
differences): the bytes are the same, those lines are not printed here."""

from __future__ import annotations

import struct

from ..encoding import encode, u32
from . import ULONG_MAX, Arg, EmError, bstrtoul, is_word

KIND, KIND_NUM = "meta", 4
USAGE = """\
Usage: meta(OBJECT { eq | lt | gt } OBJECT)
where: OBJECT  := { META_ID | VALUE }
       META_ID := id [ shift SHIFT ] [ mask MASK ]

Example: meta(nf_mark gt 24)
         meta(indev shift 1 eq "ppp")
         meta(tcindex mask 0xf0 eq 0xf0)

For a list of meta identifiers, use meta(list).
"""
_VAR, _INT = 0, 1  # TCF_META_TYPE_*
_HDR, _LVALUE, _RVALUE = 1, 2, 3  # TCA_EM_META_*
_OPERANDS = {b"eq": 0, b"gt": 1, b"lt": 2}
_VAL = struct.Struct("=HBB")  # struct tcf_meta_val: kind, shift, op

#: tc's meta_table: (TCF_META_ID_*, name, types, description); id 0 opens a section.
TABLE = (
    (0, "Generic", "", ""),
    (1, "random", "i", "Random value (32 bit)"),
    (2, "loadavg_1", "i", "Load average in last minute"),
    (3, "loadavg_5", "i", "Load average in last 5 minutes"),
    (4, "loadavg_15", "i", "Load average in last 15 minutes"),
    (0, "Interfaces", "", ""),
    (5, "dev", "iv", "Device the packet is on"),
    (0, "Packet attributes", "", ""),
    (6, "priority", "i", "Priority of packet"),
    (7, "protocol", "i", "Link layer protocol"),
    (8, "pkt_type", "i", "Packet type (uni|multi|broad|...)cast"),
    (9, "pkt_len", "i", "Length of packet"),
    (10, "data_len", "i", "Length of data in packet"),
    (11, "mac_len", "i", "Length of link layer header"),
    (0, "Netfilter", "", ""),
    (12, "nf_mark", "i", "Netfilter mark"),
    (12, "fwmark", "i", "Alias for nf_mark"),
    (0, "Traffic Control", "", ""),
    (13, "tc_index", "i", "TC Index"),
    (0, "Routing", "", ""),
    (14, "rt_classid", "i", "Routing ClassID (cls_route)"),
    (15, "rt_iif", "i", "Incoming interface index"),
    (46, "vlan", "i", "Vlan tag"),
    (0, "Sockets", "", ""),
    (16, "sk_family", "i", "Address family"),
    (17, "sk_state", "i", "State"),
    (18, "sk_reuse", "i", "Reuse Flag"),
    (19, "sk_bind_if", "iv", "Bound interface"),
    (20, "sk_refcnt", "i", "Reference counter"),
    (21, "sk_shutdown", "i", "Shutdown mask"),
    (22, "sk_proto", "i", "Protocol"),
    (23, "sk_type", "i", "Type"),
    (24, "sk_rcvbuf", "i", "Receive buffer size"),
    (25, "sk_rmem", "i", "RMEM"),
    (26, "sk_wmem", "i", "WMEM"),
    (27, "sk_omem", "i", "OMEM"),
    (28, "sk_wmem_queue", "i", "WMEM queue"),
    (30, "sk_snd_queue", "i", "Send queue length"),
    (29, "sk_rcv_queue", "i", "Receive queue length"),
    (31, "sk_err_queue", "i", "Error queue length"),
    (32, "sk_fwd_alloc", "i", "Forward allocations"),
    (33, "sk_sndbuf", "i", "Send buffer size"),
)
_BY_NAME = {name.encode(): (ident, types) for ident, name, types, _ in reversed(TABLE) if ident}
_RULE = "-" * 56


def listing() -> str:
    """``list_meta_ids()``: the table as ``meta(list)`` prints it."""
    out = [f"{_RULE}\n  ID               Type       Description\n{_RULE}"]
    for ident, name, types, text in TABLE:
        if not ident:
            out.append(f"\n{name}:\n")
        else:
            kinds = ",".join("INT" if t == "i" else "VAR" for t in types)
            out.append(f"  {name:<16} {kinds:<10} {text}\n")
    out.append(f"{_RULE}\n")
    return "".join(out)


class _Object:
    """One side: its ``kind`` (type << 12 | id), ``shift``, and its value (a number, the
    quoted :class:`~. Arg`, or a meta id's mask)."""

    __slots__ = ("kind", "shift", "value")

    def __init__(self) -> None:
        self.kind, self.shift, self.value = 0, 0, 0


def parse(args: list[Arg]) -> bytes:
    """``meta_parse_eopt``: the arguments after the kind → header and value attributes."""
    if is_word(args[0], "list"):
        raise EmError(listing(), report=False)
    left, right = _Object(), _Object()
    at = _object(args, 0, left, None)
    if at == len(args):
        raise EmError("meta: missing operand", args[0])
    opnd = _OPERANDS.get(args[at].data)
    if opnd is None:
        raise EmError("meta: invalid operand", args[at])
    if at + 1 == len(args):
        raise EmError("meta: missing rvalue", args[0])
    at = _object(args, at + 1, right, left)
    if at != len(args):
        raise EmError("meta: unexpected trailer", args[at])
    header = _VAL.pack(left.kind, left.shift, opnd) + _VAL.pack(right.kind, right.shift, 0)
    return encode(((_HDR, header), *_value(_LVALUE, left),
                   *_value(_RVALUE, right)))


def _object(args: list[Arg], at: int, obj: _Object, left: _Object | None) -> int:
    """``parse_object``: one side from ``args[at]`` → the index of the first argument after it."""
    arg = args[at]
    if arg.quoted:
        obj.kind, obj.value = _VAR << 12, arg
        return at + 1
    number = bstrtoul(arg)
    if number != ULONG_MAX:
        obj.kind, obj.value = _INT << 12, number
        return at + 1
    entry = _BY_NAME.get(arg.data)
    if entry is None:
        raise EmError("meta: unknown meta id\n", arg)
    obj.kind = _INT << 12 | entry[0]
    if left is not None and left.kind >> 12 != obj.kind >> 12:
        # only a quoted (VAR) left value differs from an id: the id adopts VAR (see above)
        obj.kind = left.kind & 0xF000 | entry[0]
    at += 1
    while at < len(args) and args[at].data in (b"shift", b"mask"):
        if at + 1 == len(args):
            raise EmError("meta: missing argument", args[at])
        value = bstrtoul(args[at + 1])
        if is_word(args[at], "shift"):
            if value == ULONG_MAX:
                raise EmError("meta: invalid shift, must be numeric", args[at + 1])
            obj.shift = value & 0xFF
        else:
            if value == ULONG_MAX:
                raise EmError("meta: invalid mask, must be numeric", args[at + 1])
            obj.value = value
        at += 2
    return at


def _value(type_: int, obj: _Object) -> tuple:
    """``dump_value``: an INT side's number (a value, or an id's mask: 0 when none), a quoted
    value's bytes; nothing for an id of type VAR."""
    if obj.kind >> 12 == _INT:
        return (u32(type_, obj.value & 0xFFFFFFFF),)
    if obj.kind & 0x7FF == 0:
        return ((type_, obj.value.data),)
    return ()
