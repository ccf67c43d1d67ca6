"""A list of actions, as iproute2's ``m_action.c`` reads it: ``action KIND ...`` groups, each
kind's options read by its module in :mod:`.kinds`, then the words every action takes
(``cookie``, ``no_percpu``, ``skip_sw``/``skip_hw``); and the control verdicts (``parse_action_control``) several kinds
share.

As in tc, any word where an action may start opens one: a control verdict (or a prefix of one)
is gact's, a kind with a module here is read by it, and any other word falls to gact (tc finds
no module for it and loads gact in its place), whose parser then refuses it with its usage.
``flowid``/``classid`` end the list (the classifier reads them)."""

from __future__ import annotations

from collections.abc import Callable

from . import rules as R
from . import specs as S
from .grammar import CommandError, Words, matches, unsigned
from .kinds import parsers

_MAX_COOKIE = 16  # TC_COOKIE_MAX_SIZE
#: The flags tc reads after an action's cookie and no_percpu: TCA_ACT_FLAGS_SKIP_HW/_SW.
_SKIP_FLAGS = {"skip_hw": 2, "skip_sw": 4}


def verdict_word(token: str | None) -> str | None:
    """``action_a2n``: the control word ``token`` names (itself or a prefix of it, the first in
    tc's order), or None."""
    if token in S.GACT_VERDICTS:
        return token
    return next((word for word in S.CONTROL_WORDS if matches(token, word)), None)


#: ``new_cmd``: the words tc's ``parse_action`` ends the list at, every non-empty prefix of
#: change, replace, delete, get and add (a set: looked up once per action on the hot path),
#: with flowid and classid, where it ends too.
_LIST_ENDS = frozenset(word[:n] for word in ("change", "replace", "delete", "get", "add")
                       for n in range(1, len(word) + 1)) | {"flowid", "classid"}


def parse_actions(w: Words) -> tuple[R.Action, ...]:
    """One or more actions, the cursor on the first ``action`` (or kind). Only ``action``
    itself is skipped (tc's ``strcmp``): ``actions`` there names a kind, which gact refuses.

    As in tc's ``parse_action``, a cookie stays set for the rest of the command: an action
    without one of its own carries the last one given before it (tc keeps one cookie buffer
    per command and never clears it). The list ends, as tc's does, at ``flowid``/``classid``
    or at a prefix of a command word (``a``, ``d``, ``get``...: ``new_cmd``), its caller
    reading on from there (none read yet: none at all): a classifier its own words, ``tc
    actions`` its next command."""
    kinds = parsers("action")
    actions = []
    cookie = None
    while (word := w.peek()) is not None:
        if word == "action":
            w.pos += 1
            continue
        if word in _LIST_ENDS:
            break
        if word == "help":  # tc's parse_action fails at once: only its caller's line is said
            raise CommandError('Illegal "action"')
        action = parse_action(w, kinds)
        if action.cookie is None:
            action.cookie = cookie
        cookie = action.cookie
        actions.append(action)
    if len(actions) > S.TCA_ACT_MAX_PRIO:
        raise CommandError(f"more than {S.TCA_ACT_MAX_PRIO} actions")
    return tuple(actions)


def parse_action(w: Words, kinds: dict) -> R.Action:
    """One action, the cursor on its kind word (each kind's parser starts there, as tc's
    ``parse_aopt`` does)."""
    left = w.left()
    word = w.peek()
    kind = "gact" if verdict_word(word) else word
    parse = kinds.get(kind)
    if parse is None:
        parse = kinds["gact"]  # tc: no module by that name, gact's parser takes the words
    action = parse(w, left)
    if w.peek() == "cookie":
        w.pos += 1
        action.cookie = _cookie(w.take("cookie"))
    if w.peek() == "no_percpu":
        w.pos += 1
        action.no_percpu = True
    flags = 0
    for _ in range(2):  # tc reads the two flags twice, so either order is taken
        flag = _SKIP_FLAGS.get(w.peek())
        if flag:
            w.pos += 1
            flags |= flag
    if flags:
        action.no_percpu = flags | (S.TCA_ACT_FLAGS_NO_PERCPU_STATS if action.no_percpu else 0)
    return action


def action_failed(text: str, left: int, kind: str) -> CommandError:
    """A failure inside an action's own parser, followed by the lines tc's parse_action adds
    (``left``: the words from the action's kind to the end of the line, tc's argc there;
    ``kind``: the word there)."""
    head = f"{text}\n" if text else ""  # some parsers fail without a word of their own
    return CommandError(f"{head}bad action parsing\nparse_action: bad value ({left}:{kind})!\n"
                        'Illegal "action"')


def failure(left: int, kind: str) -> Callable[[str], CommandError]:
    """:func:`action_failed` for one action's parser, where only the text varies."""
    return lambda text: action_failed(text, left, kind)


def incomplete() -> CommandError:
    """tc's ``NEXT_ARG()`` at the end of the line: ``incomplete_command()``, which exits."""
    return CommandError('Command line is not complete. Try option "help"', fatal=True)


def control(w: Words) -> str:
    """A control verdict as tc's ``parse_action_control`` reads it, the cursor on it: a word of
    :data:`~.specs.CONTROL_WORDS` (or a prefix), ``jump N`` or ``goto chain N``; the verdict in
    :func:`~.specs.control_value`'s spelling. CommandError with tc's words otherwise."""
    token = w.peek()
    word = verdict_word(token)
    if word is None:
        raise CommandError(f"Bad action type {token}")
    w.pos += 1
    if word == "goto":
        if not matches(_next(w), "chain"):
            raise CommandError('"chain index" expected')
        w.pos += 1
        chain = unsigned(_next(w), 10)
        if chain is None or chain > S.TC_ACT_EXT_VAL_MASK:
            raise CommandError('Illegal "chain index"')
        w.pos += 1
        return f"goto chain {chain}"
    if word == "jump":
        count = unsigned(_next(w), 10)
        if count is None or count > S.TC_ACT_EXT_VAL_MASK:
            raise CommandError(f'Invalid "jump count" ({w.peek()})')
        w.pos += 1
        return f"jump {count}"
    return word


def next_arg(w: Words) -> str:
    """tc's ``NEXT_ARG()`` as a kind's parser calls it: step to the next word, which must be
    there (tc ends otherwise); that word."""
    w.pos += 1
    word = w.peek()
    if word is None:
        raise incomplete()
    return word


def _next(w: Words) -> str:
    """tc's ``NEXT_ARG()``: the next word must be there."""
    if w.peek() is None:
        raise incomplete()
    return w.peek()


def _cookie(text: str) -> bytes:
    if len(text) > 2 * _MAX_COOKIE:
        raise CommandError(f'Error: argument "{text}" is wrong: {len(text)} Max allowed size '
                           f"{2 * _MAX_COOKIE}", fatal=True)
    try:
        if len(text) % 2:
            raise ValueError(text)
        return bytes.fromhex(text)
    except ValueError:
        # tc's text ends in its own newline, then invarg() adds one: a blank line follows
        raise CommandError(f'Error: argument "{text}" is wrong: cookie must be a hex string\n',
                           fatal=True) from None
