"""gact (``m_gact.c``): ``[gact] CONTROL [random netrand|determ CONTROL VAL] [index N]``, or
``gact index N`` naming an existing action; tc's usage and words."""

from __future__ import annotations

from .. import rules as R
from .. import specs as S
from ..action_list import action_failed, control, incomplete, next_arg, verdict_word
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
    """tc's ``parse_action_control_dflt`` in a kind that cannot fail after it: the verdict at
    the cursor, or None (the kind's default) when no verdict word is there; a malformed
    ``goto``/``jump`` raises as :func:`refused_again`."""
    verdict, said = control_dflt(w)
    refused_again(said)
    return verdict


def verdict_and_index(w: Words, failed, illegal_index: str, base: int = 10
                      ) -> tuple[str | None, int | None, str]:
    """The tail of many kinds' options: ``parse_action_control_dflt``, then ``index N``
    (``failed``: the kind's failure, for its ``illegal_index`` words, ``{word}`` the bad
    one — ``KIND: Illegal "index"`` in most kinds; ``base``: how the kind reads N, 0 for a
    C literal as skbmod and ife do) → (verdict, index,
    what tc said about a malformed ``goto``/``jump``). None where absent. With something said,
    the words stay where they were: the kind prefixes it to a failure of its own, or else
    ends with :func:`refused_again`."""
    verdict, said = control_dflt(w)
    if said or not matches(w.peek(), "index"):
        return verdict, None, said
    return verdict, decimal_option(w, failed, illegal_index, base), said


def decimal_option(w: Words, failed, illegal: str, base: int = 10, bits: int = 32) -> int:
    """``OPTION N`` (``index N``, connmark's and ctinfo's ``zone N``), the cursor on the option
    word: N, a decimal number (or of ``base``) of at most ``bits`` bits, or ``failed`` with the
    ``illegal`` words."""
    index = unsigned(next_arg(w), base, bits)
    if index is None:
        raise failed(illegal.format(word=w.peek()))
    w.pos += 1
    return index


def refused_again(said: str) -> None:
    """After a kind that read its options though a ``goto``/``jump`` after them was malformed
    (tc said so, ``said``, and kept its default verdict): those words open the next action, a
    gact, which refuses them again with its usage."""
    if said:
        raise usage_error(f"{said}{said}".rstrip("\n"))


def control_dflt(w: Words) -> tuple[str | None, str]:
    """tc's ``parse_action_control_dflt``, the cursor on the word after a kind's options:
    (verdict or None, tc's line about a malformed one, newline-ended, or ""), the cursor past
    the verdict (left where it was when there is none or it is malformed)."""
    if not verdict_word(w.peek()):
        return None, ""
    try:
        return control(w), ""
    except CommandError as exc:
        if exc.fatal:
            raise
        return None, f"{exc}\n"


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
