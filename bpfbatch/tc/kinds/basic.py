"""basic (``f_basic.c``): ``basic [classid ID] [police ...] [action ...]``; tc's usage, words
and attributes. Its ``match EMATCH_TREE`` (``m_ematch.c``'s own grammar) is not read here: a
line using it is refused as unsupported."""

from __future__ import annotations

import re

from ..grammar import CommandError, Words, matches
from .common import Listed, listed_options

NAMES = ("basic",)

USAGE = """\
Usage: ... basic [ match EMATCH_TREE ]
                 [ action ACTION_SPEC ] [ classid CLASSID ]

Where:\tSELECTOR := SAMPLE SAMPLE ...
\tFILTERID := X:Y:Z
\tACTION_SPEC := ... look at individual actions

NOTE: CLASSID is parsed as hexadecimal input."""

# linux/pkt_cls.h TCA_BASIC_*
_NUMBERS = {"classid": 1, "action": 3, "police": 4}
#: What ``strtol(text, NULL, 0)`` reads: blanks, a sign, then digits of the base the prefix
#: names (it stops at the first other character).
_STRTOL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX](?=[0-9a-fA-F])[0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)?")
_LONG_MAX = (1 << 63) - 1


def parse_filter(w: Words) -> Listed:
    """tc's ``basic_parse_opt``, the cursor past ``basic``."""
    def extra(word: str, attrs: list) -> bool:
        if matches(word, "match"):
            raise CommandError("unsupported basic option 'match' (ematch trees are not read)")
        return False

    return listed_options(w, "basic", USAGE, _NUMBERS, extra)


def parse_handle(text: str | None, classifier: Listed) -> int:
    """basic reads its handle with ``strtol(text, NULL, 0)``: what it cannot read is 0, and
    only a value past a C long is refused."""
    if text is None:
        return 0
    sign, digits = _STRTOL.match(text).groups()
    if not digits:
        return 0
    value = int(digits, 16) if digits[:2] in ("0x", "0X") else int(digits, 8 if digits[0] == "0" else 10)
    if value >= _LONG_MAX + (sign == "-"):
        raise CommandError(f'Illegal handle "{text}", must be numeric.')
    return (-value if sign == "-" else value) & 0xFFFFFFFF
