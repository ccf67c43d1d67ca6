"""tcindex (``f_tcindex.c``): ``tcindex [hash SIZE] [mask MASK] [shift SHIFT] [pass_on |
fall_through] [classid ID] [police ...] [action ...]``, every word spelled out; tc's usage,
words and attributes (in the order the line gives them; nothing at all when the line ends at
``tcindex``). tc reads its numbers with a bare ``strtoul`` into C ints: an empty word is 0, a
value is cut to the attribute's width, only ``hash`` is checked (1..0x10000 as a signed int).

Kernels since 6.3 have no tcindex classifier: the kernel's refusal is then the line's error."""

from __future__ import annotations

import struct

from ..grammar import CommandError, Words, parse_classid
from ..numbers import strtoul
from .common import Listed, actions_attr, next_value, police_attr

NAMES = ("tcindex",)

USAGE = """\
 Usage: ... tcindex\t[ hash SIZE ] [ mask MASK ] [ shift SHIFT ]
\t\t\t[ pass_on | fall_through ]
\t\t\t[ classid CLASSID ] [ action ACTION_SPEC ]"""

# linux/pkt_cls.h TCA_TCINDEX_*
_HASH, _MASK, _SHIFT, _FALL_THROUGH, _CLASSID, _POLICE, _ACT = 1, 2, 3, 4, 5, 6, 7
_INT = struct.Struct("=i")
_U16 = struct.Struct("=H")


def parse_filter(w: Words) -> Listed:
    """tc's ``tcindex_parse_opt``, the cursor past ``tcindex``."""
    listed = Listed("tcindex", sends_options=w.peek() is not None)
    attrs: list = []
    while (word := w.peek()) is not None:
        if word in ("hash", "mask", "shift"):
            value = _strtoul(next_value(w))
            if word == "mask":
                attrs.append((_MASK, _U16.pack(value & 0xFFFF)))
            else:
                value = _INT.unpack(struct.pack("=I", value & 0xFFFFFFFF))[0]
                if word == "hash" and (value == 0 or value > 0x10000):  # negative passes
                    raise CommandError(USAGE)
                attrs.append((_HASH if word == "hash" else _SHIFT, _INT.pack(value)))
        elif word in ("fall_through", "pass_on"):
            attrs.append((_FALL_THROUGH, _INT.pack(word == "fall_through")))
        elif word == "classid":
            classid = parse_classid(next_value(w))
            if classid is None:
                raise CommandError('Illegal "classid"')
            attrs.append((_CLASSID, struct.pack("=I", classid)))
        elif word == "police":
            attrs.append(police_attr(w, _POLICE))
            continue
        elif word == "action":
            attrs.append(actions_attr(w, _ACT))
            continue
        else:
            raise CommandError(USAGE)
        w.pos += 1
    listed.attrs = tuple(attrs)
    return listed


def _strtoul(text: str) -> int:
    """``strtoul(text, &end, 0)`` where tc checks only that nothing follows the number."""
    value, end, _ = strtoul(text)
    if text[end:]:
        raise CommandError(USAGE)
    return value


def parse_handle(text: str | None, classifier: Listed | None) -> int:
    """The handle, a bare ``strtoul`` cut to 32 bits (an empty word is 0); tc's words."""
    if text is None:
        return 0
    value, end, _ = strtoul(text)
    if text[end:]:
        raise CommandError("Illegal filter ID")
    return value & 0xFFFFFFFF
