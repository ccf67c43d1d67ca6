"""matchall (``f_matchall.c``): ``matchall [skip_hw|skip_sw] [classid ID] [action ...]``; tc's
usage, words and attributes (classid and actions in the line's order, the flags last), its
``strtol`` handle."""

from __future__ import annotations

from .. import specs as S
from ..encoding import u32
from ..grammar import CommandError, Words, strtol_handle
from .common import Listed, listed_options, next_value

NAMES = ("matchall",)

USAGE = """\
Usage: ... matchall [skip_sw | skip_hw]
                 [ action ACTION_SPEC ] [ classid CLASSID ]

Where: SELECTOR := SAMPLE SAMPLE ...
       FILTERID := X:Y:Z
       ACTION_SPEC := ... look at individual actions

NOTE: CLASSID is parsed as hexadecimal input."""

_NUMBERS = {"classid": S.Matchall.CLASSID, "action": S.Matchall.ACT}


def parse_filter(w: Words) -> Listed:
    """tc's ``matchall_parse_opt``, the cursor past ``matchall``."""
    flags = 0

    def extra(word: str, attrs: list) -> bool:
        nonlocal flags
        if word not in S.CLS_FLAGS:
            return False
        next_value(w)  # tc steps past the flag with NEXT_ARG(): another word must follow
        w.pos -= 1
        flags |= S.CLS_FLAGS[word]
        return True

    listed = listed_options(w, "matchall", USAGE, _NUMBERS, extra)
    if flags:
        if flags == S.CLS_FLAGS["skip_hw"] | S.CLS_FLAGS["skip_sw"]:
            raise CommandError("skip_hw and skip_sw are mutually exclusive")
        listed.attrs += (u32(S.Matchall.FLAGS, flags),)
    return listed


def parse_handle(text: str | None, classifier: Listed | None) -> int:
    """matchall reads its handle with ``strtol``: :func:`..grammar.strtol_handle`."""
    return strtol_handle(text)
