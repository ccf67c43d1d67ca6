"""basic (``f_basic.c``): ``basic [classid ID] [police ...] [action ...]``; tc's usage, words
and attributes. Its ``match EMATCH_TREE`` (``m_ematch.c``'s own grammar) is not read here: a
line using it is refused as unsupported."""

from __future__ import annotations

from ..grammar import CommandError, Words, matches, strtol_handle
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


def parse_filter(w: Words) -> Listed:
    """tc's ``basic_parse_opt``, the cursor past ``basic``."""
    def extra(word: str, attrs: list) -> bool:
        if matches(word, "match"):
            raise CommandError("unsupported basic option 'match' (ematch trees are not read)")
        return False

    return listed_options(w, "basic", USAGE, _NUMBERS, extra)


def parse_handle(text: str | None, classifier: Listed | None) -> int:
    """basic reads its handle as matchall does: :func:`..grammar.strtol_handle`."""
    return strtol_handle(text)
