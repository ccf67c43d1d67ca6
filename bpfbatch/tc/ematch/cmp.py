"""cmp (``em_cmp.c``): ``cmp(ALIGN at OFFSET [layer L] [mask M] [trans] {eq|lt|gt} VALUE)``,
a ``struct tcf_em_cmp``; tc's words and checks in tc's order."""

from __future__ import annotations

import struct

from . import LAYER_MAX, LAYER_NETWORK, ULONG_MAX, Arg, EmError, bstrtoul, is_word, parse_layer

KIND, KIND_NUM = "cmp", 1
USAGE = f"""\
Usage: cmp(ALIGN at OFFSET [ ATTRS ] {{ eq | lt | gt }} VALUE)
where: ALIGN  := {{ u8 | u16 | u32 }}
       ATTRS  := [ layer LAYER ] [ mask MASK ] [ trans ]
       LAYER  := {{ link | network | transport | 0..{LAYER_MAX} }}

Example: cmp(u16 at 3 layer 2 mask 0xff00 gt 20)
"""
_ALIGNS = {b"u8": 1, b"u16": 2, b"u32": 4}  # TCF_EM_ALIGN_*
_OPERANDS = {b"eq": 0, b"gt": 1, b"lt": 2}  # TCF_EM_OPND_*
_TRANS = 1  # TCF_EM_CMP_TRANS
# val, mask, off, align:4 | flags:4, layer:4 | opnd:4
_CMP = struct.Struct("=IIHBB")


def parse(args: list[Arg]) -> bytes:
    """``cmp_parse_eopt``: the arguments after the kind → the struct."""
    align = _ALIGNS.get(args[0].data)
    if align is None:
        raise EmError("cmp: invalid alignment", args[0])
    offset = mask = value = opnd = flags = 0
    layer = LAYER_NETWORK
    offset_present = value_present = False
    at = 1
    while at < len(args):
        arg = args[at]
        following = args[at + 1] if at + 1 < len(args) else None
        if arg.data in (b"at", b"layer", b"mask") or arg.data in _OPERANDS:
            if following is None:
                raise EmError("cmp: missing argument", arg)
            at += 1
            if is_word(arg, "at"):
                offset = bstrtoul(following)
                if offset == ULONG_MAX:
                    raise EmError("cmp: invalid offset, must be numeric", following)
                offset_present = True
            elif is_word(arg, "layer"):
                layer = parse_layer(following)
                if layer == ULONG_MAX:
                    raise EmError("cmp: invalid layer", following)
                if layer > LAYER_MAX:
                    raise EmError(f"cmp: illegal layer, must be in 0..{LAYER_MAX}", following)
            elif is_word(arg, "mask"):
                mask = bstrtoul(following)
                if mask == ULONG_MAX:
                    raise EmError("cmp: invalid mask", following)
            else:
                opnd = _OPERANDS[arg.data]
                value = bstrtoul(following)
                if value == ULONG_MAX:
                    raise EmError("cmp: invalid value", following)
                value_present = True
        elif is_word(arg, "trans"):
            flags |= _TRANS
        else:
            raise EmError("nbyte: unknown parameter", arg)  # sic: tc's words
        at += 1
    if not (offset_present and value_present):
        raise EmError("cmp: offset and value required")
    return _CMP.pack(value & 0xFFFFFFFF, mask & 0xFFFFFFFF, offset & 0xFFFF,
                     align | flags << 4, layer | opnd << 4)
