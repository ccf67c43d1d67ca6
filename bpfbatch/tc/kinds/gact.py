"""gact (``m_gact.c``): ``[gact] CONTROL [random netrand|determ CONTROL VAL] [index N]``, or
``gact index N`` naming an existing action; tc's usage and words."""

from __future__ import annotations

from .. import rules as R
from .. import specs as S
from ..action_list import action_failed, control, incomplete, verdict_word
from ..grammar import CommandError, Words, matches, unsigned

NAMES = ("gact",)

USAGE = """\
Usage: ... gact <ACTION> [RAND] [INDEX]
Where: \tACTION := reclassify | drop | continue | pass | pipe |
       \t          goto chain <CHAIN_INDEX> | jump <JUMP_COUNT>
\tRAND := random <RANDTYPE> <ACTION> <VAL>
\tRANDTYPE := netrand | determ
\tVAL : = value not exceeding 10000
\tJUMP_COUNT := Absolute jump from start of action list
\tINDEX := index value used
"""


def usage_error(text: str = "") -> CommandError:
    """gact's ``usage()``: the usage block, and tc exits (status 255)."""
    return CommandError(f"{text}\n{USAGE}" if text else USAGE, fatal=True)


def optional_control(w: Words) -> str | None:
    """tc's ``parse_action_control_dflt`` in a kind other than gact: the verdict at the cursor,
    or None (the kind's default) when no verdict word is there. A malformed ``goto``/``jump``:
    tc says so, keeps the default and leaves the words where they were, so they open the next
    action, a gact, which refuses them again with its usage — raised here as that end."""
    if not verdict_word(w.peek()):
        return None
    try:
        return control(w)
    except CommandError as exc:
        if exc.fatal:
            raise
        raise usage_error(f"{exc}\n{exc}") from None


def parse_action(w: Words, left: int) -> R.Gact:
    """tc's ``parse_gact``, the cursor on the action's kind word (``gact``, a verdict, or a
    word tc has no module for)."""
    kind_word = w.peek()
    if matches(kind_word, "gact"):
        w.pos += 1
        if w.peek() is None:
            raise incomplete()
    if matches(w.peek(), "index"):
        return R.Gact("pass", _index(w, left, kind_word))
    try:
        verdict = control(w)
    except CommandError as exc:
        raise exc if exc.fatal else usage_error(str(exc)) from None
    prob = None
    word = w.peek()
    if matches(word, "random"):
        prob = _random(w, left, kind_word)
    elif matches(word, "help"):
        raise usage_error()
    index = 0
    word = w.peek()
    if matches(word, "index"):
        index = _index(w, left, kind_word)
    elif matches(word, "help"):
        raise usage_error()
    return R.Gact(verdict, index, prob=prob)


def _random(w: Words, left: int, kind_word: str) -> tuple[int, str, int]:
    """``random netrand|determ CONTROL VAL`` → (type, verdict, value)."""
    w.pos += 1
    word = w.peek()
    if word is None:
        raise incomplete()
    ptype = next((v for name, v in S.GACT_RANDOM.items() if matches(word, name)), None)
    if ptype is None:
        raise action_failed('Illegal "random type"', left, kind_word)
    w.pos += 1
    if w.peek() is None:
        raise incomplete()
    try:
        verdict = control(w)
    except CommandError as exc:
        raise exc if exc.fatal else usage_error(str(exc)) from None
    value = unsigned(w.peek(), 10, bits=16)
    if value is None:
        # tc prints its never-set field here: what it holds is not defined; 0 is printed
        raise action_failed("Illegal probability val 0x0", left, kind_word)
    if value > 10000:
        raise action_failed(f"Illegal probability val  {value:#x}", left, kind_word)
    w.pos += 1
    return ptype, verdict, value


def _index(w: Words, left: int, kind_word: str) -> int:
    w.pos += 1
    word = w.peek()
    if word is None:
        raise incomplete()
    index = unsigned(word, 10)
    if index is None:
        raise action_failed('Illegal "index"', left, kind_word)
    w.pos += 1
    return index
