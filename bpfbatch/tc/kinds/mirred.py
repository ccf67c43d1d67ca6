"""mirred (``m_mirred.c``): ``mirred egress|ingress redirect|mirror [index N] dev DEV
[CONTROL] [index N]``, or ``mirred index N`` naming an existing action; tc's usage and words.

Read as tc's ``parse_direction`` reads it: a word it does not expect where it looks for the
direction, the mode or ``dev`` is skipped, and running out of words there ends tc
(``Command line is not complete``)."""

from __future__ import annotations

from .. import rules as R
from ..action_list import action_failed, failure, next_arg
from ..grammar import DEVICES, CommandError, Words, matches, unsigned
from . import gact

NAMES = ("mirred",)

USAGE = """\
Usage: mirred <DIRECTION> <ACTION> [index INDEX] <dev DEVICENAME>
where:
\tDIRECTION := <ingress | egress>
\tACTION := <mirror | redirect>
\tINDEX  is the specific policy instance id
\tDEVICENAME is the devicename"""


def parse_action(w: Words, left: int) -> R.Mirred:
    """tc's ``parse_mirred``, the cursor on ``mirred``."""
    next_arg(w)
    word = w.peek()
    if matches(word, "egress") or matches(word, "ingress") or matches(word, "index"):
        return _direction(w, left)
    if matches(word, "help"):
        raise CommandError(USAGE, fatal=True)
    raise action_failed(f"mirred option not supported {word}", left, "mirred")


def _direction(w: Words, left: int) -> R.Mirred:
    """``parse_direction``."""
    failed = failure(left, "mirred")

    direction = mode = dev = None
    index = None
    while (word := w.peek()) is not None:
        if matches(word, "action"):
            next_arg(w)
            break
        if direction != "egress" and matches(word, "egress") or \
                direction != "ingress" and matches(word, "ingress"):
            new = "egress" if matches(word, "egress") and direction != "egress" else "ingress"
            if direction is not None:
                raise failed(f"Can't have both {new} and {direction}")
            direction = new
            next_arg(w)
            continue
        if matches(word, "index"):
            next_arg(w)
            index = _index(w, failed, 'Illegal "index"')
            if direction is None:
                w.pos += 1
                break
        elif direction is None:
            # tc says so and stops reading mirred's words; without a direction or an index
            # the action fails (after this line, when no index came first)
            raise failed(f"was expecting egress or ingress ({word})")
        elif mode != "mirror" and matches(word, "mirror") or \
                mode != "redirect" and matches(word, "redirect"):
            new = "mirror" if mode != "mirror" and matches(word, "mirror") else "redirect"
            if mode is not None:
                raise failed("Can't have both mirror and redir")
            mode = new
        elif mode is not None and matches(word, "dev"):
            next_arg(w)
            dev = w.peek()
            exists = DEVICES.get()
            if exists is not None and not exists(dev):  # tc looks it up here and stops
                raise failed(f'Cannot find device "{dev}"')
            w.pos += 1
            break
        next_arg(w)
    verdict = gact.optional_control(w) if mode == "mirror" else None
    if w.peek() is not None and matches(w.peek(), "index"):
        if index is not None:
            raise failed("mirred: Illegal double index")
        next_arg(w)
        index = _index(w, failed, 'mirred: Illegal "index"')
        w.pos += 1
    if direction is None:  # ``mirred index N``: an existing action, nothing else set
        return R.Mirred("", "", 0, index or 0)
    return R.Mirred(direction, mode or "", dev or "", index or 0, verdict=verdict, tc_argc=left)


def _index(w: Words, failed, text: str) -> int:
    value = unsigned(w.peek(), 10)
    if value is None:
        raise failed(text)
    return value
