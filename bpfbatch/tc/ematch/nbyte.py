"""nbyte (``em_nbyte.c``): ``nbyte(NEEDLE at OFFSET [layer LAYER])``, a ``struct
tcf_em_nbyte`` and the needle's bytes; tc's words and checks in tc's order."""

from __future__ import annotations

import struct

from . import LAYER_MAX, LAYER_NETWORK, ULONG_MAX, Arg, EmError, bstrtoul, is_word, parse_layer

KIND, KIND_NUM = "nbyte", 2
USAGE = f"""\
Usage: nbyte(NEEDLE at OFFSET [layer LAYER])
where: NEEDLE := {{ string | "c-escape-sequence" }}
       OFFSET := int
       LAYER  := {{ link | network | transport | 0..{LAYER_MAX} }}

Example: nbyte("ababa" at 12 layer 1)
"""
_NBYTE = struct.Struct("=HH")  # off, len:12 | layer:4


def parse(args: list[Arg]) -> bytes:
    """``nbyte_parse_eopt``: the needle, then its words → struct and needle (the length cut to
    the field's 12 bits, as tc's bitfield does)."""
    needle = args[0].data
    if not needle:
        raise EmError("nbyte: needle length is 0", args[0])
    offset, layer, offset_present = 0, LAYER_NETWORK, False
    at = 1
    while at < len(args):
        arg = args[at]
        if not (is_word(arg, "at") or is_word(arg, "layer")):
            raise EmError("nbyte: unknown parameter", arg)
        if at + 1 == len(args):
            raise EmError("nbyte: missing argument", arg)
        at += 1
        value = args[at]
        if is_word(arg, "at"):
            offset = bstrtoul(value)
            if offset == ULONG_MAX:
                raise EmError("nbyte: invalid offset, must be numeric", value)
            offset_present = True
        else:
            layer = parse_layer(value)
            if layer == ULONG_MAX:
                raise EmError("nbyte: invalid layer", value)
            if layer > LAYER_MAX:
                raise EmError(f"nbyte: illegal layer, must be in 0..{LAYER_MAX}", value)
        at += 1
    if not offset_present:
        raise EmError("nbyte: offset required")
    return _NBYTE.pack(offset & 0xFFFF, (len(needle) & 0xFFF) | layer << 12) + needle
