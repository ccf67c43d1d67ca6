"""gact (``m_gact.c``): a control verdict, bare or after ``gact``, and ``index N``."""

from __future__ import annotations

from .. import rules as R
from ..action_list import control
from ..grammar import CommandError, Words

NAMES = ("gact",)


def parse_action(w: Words, left: int) -> R.Gact:
    verdict = control(w, w.take("gact verdict"))
    if verdict is None:  # tc: gact's usage(), which exits
        raise CommandError(f"Bad action type {w.words[w.pos - 1]}", fatal=True)
    index = 0
    if w.peek() == "index":
        w.pos += 1
        index = w.number("action index", 10)
    return R.Gact(verdict, index)
