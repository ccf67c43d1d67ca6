"""mirred (``m_mirred.c``): ``mirred egress|ingress redirect|mirror [index N] dev DEV
[CONTROL] [index N]``, or ``mirred index N`` naming an existing action."""

from __future__ import annotations

from .. import rules as R
from ..action_list import action_failed, control, verdict_word
from ..grammar import CommandError, Words

NAMES = ("mirred",)

_INCOMPLETE = 'Command line is not complete. Try option "help"'


def parse_action(w: Words, left: int) -> R.Mirred:
    """tc's ``parse_mirred``: direction, mode, ``index N`` and/or ``dev DEV``; for a mirror a
    control verdict after the device; ``index`` also after it. ``mirred index N`` alone names
    an existing action (tc sends it with nothing else set). The cursor is on ``mirred``."""
    w.pos += 1
    if w.peek() == "index":
        w.pos += 1
        return R.Mirred("", "", 0, _index(w, left))
    direction = w.take("mirred direction")
    if direction not in ("egress", "ingress"):
        raise action_failed(f"mirred option not supported {direction}", left, "mirred")
    mode = w.peek()
    if mode not in ("redirect", "mirror"):  # tc skips words it does not know, to the end
        raise CommandError(_INCOMPLETE, fatal=True)
    w.pos += 1
    dev, index, verdict = None, 0, None
    while dev is None:
        word = w.peek()
        if word == "index" and not index:
            w.pos += 1
            index = _index(w, left)
        elif word == "dev":
            w.pos += 1
            dev = w.take("device name")
        else:
            raise CommandError(_INCOMPLETE, fatal=True)
    if mode == "mirror" and verdict_word(w.peek()):
        verdict = control(w)
    if w.peek() == "index":
        if index:
            raise action_failed('mirred: Illegal double index', left, "mirred")
        w.pos += 1
        index = _index(w, left)
    return R.Mirred(direction, mode, dev, index, verdict=verdict, tc_argc=left)


def _index(w: Words, left: int) -> int:
    word = w.take("action index")
    if not (word.isdecimal() and word.isascii()) or int(word) > 0xFFFFFFFF:
        raise action_failed('mirred: Illegal "index"', left, "mirred")
    return int(word)
