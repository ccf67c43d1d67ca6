"""basic (``f_basic.c``): ``basic [match EMATCH_TREE] [classid ID] [police ...] [action ...]``;
tc's usage, words and attributes (in the order the line gives them); the tree as
:mod:`..ematch` reads it."""

from __future__ import annotations

from ..grammar import CommandError, Words, strtol_handle
from .common import EmatchOption, Listed, listed_options

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
_EMATCHES = 2


def parse_filter(w: Words) -> Listed:
    """tc's ``basic_parse_opt``, the cursor past ``basic``."""
    tree = EmatchOption(w, _EMATCHES)
    try:
        return listed_options(w, "basic", USAGE, _NUMBERS, tree)
    except CommandError as exc:
        raise tree.failed(exc) from None


def parse_handle(text: str | None, classifier: Listed | None) -> int:
    """basic reads its handle as matchall does: :func:`..grammar.strtol_handle`."""
    return strtol_handle(text)
