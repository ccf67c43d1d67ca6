"""A list of actions, as iproute2's ``m_action.c`` reads it: ``action KIND ...`` groups, each
kind's options read by its module in :mod:`.kinds`, then the words every action takes
(``cookie``, ``no_percpu``); and the control verdicts (``parse_action_control``) several kinds
share."""

from __future__ import annotations

from . import rules as R
from . import specs as S
from .grammar import CommandError, Words
from .kinds import parsers

#: Words that open an action right after another one (tc's gact takes a bare verdict).
CONTROLS = frozenset((*S.GACT_VERDICTS, "jump", "goto"))
_MAX_COOKIE = 16  # TC_COOKIE_MAX_SIZE


def parse_actions(w: Words) -> tuple[R.Action, ...]:
    """One or more ``action KIND ...`` groups, the cursor on the first ``action``.

    As in tc's ``parse_action``, a cookie stays set for the rest of the command: an action
    without one of its own carries the last one given before it (tc keeps one cookie buffer
    per command and never clears it)."""
    kinds = parsers("action")
    actions = []
    cookie = None
    while True:
        word = w.peek()
        if word in ("action", "actions"):
            w.pos += 1
        elif word is None:
            break
        elif not (actions and (word in CONTROLS or word in kinds)):
            # tc's parse_action takes any other word as the next action's kind; one it has no
            # module for falls to gact, whose usage() ends tc (status 255)
            raise CommandError(f"Bad action type {word}", fatal=True)
        action = parse_action(w, kinds)
        if action.cookie is None:
            action.cookie = cookie
        cookie = action.cookie
        actions.append(action)
    if len(actions) > S.TCA_ACT_MAX_PRIO:
        raise CommandError(f"more than {S.TCA_ACT_MAX_PRIO} actions")
    return tuple(actions)


def parse_action(w: Words, kinds: dict) -> R.Action:
    left = w.left()
    kind = w.take("action kind")
    if kind in CONTROLS:  # a bare verdict is gact's
        w.pos -= 1
        kind = "gact"
    parse = kinds.get(kind)
    if parse is None:
        raise CommandError(f"unsupported action '{kind}'")
    action = parse(w, left)
    if w.peek() == "cookie":
        w.pos += 1
        action.cookie = _cookie(w.take("cookie"))
    if w.peek() == "no_percpu":
        w.pos += 1
        action.no_percpu = True
    return action


def action_failed(text: str, left: int, kind: str) -> CommandError:
    """A failure inside an action's own parser, followed by the lines tc's parse_action adds
    (``left``: the words from the action's kind to the end of the line, tc's argc there)."""
    return CommandError(f"{text}\nbad action parsing\nparse_action: bad value ({left}:{kind})!\n"
                        'Illegal "action"')


def control(w: Words, word: str) -> str | None:
    """A control verdict as tc's ``parse_action_control`` reads it: a word of
    :data:`~.specs.GACT_VERDICTS`, ``jump N`` or ``goto chain N`` (the cursor after ``word``);
    None if ``word`` is none of them."""
    if word in S.GACT_VERDICTS:
        return word
    if word == "jump":
        return f"jump {w.number('jump count', 10)}"
    if word == "goto":
        if w.take("'chain'") != "chain":
            raise CommandError("Bad action type goto", fatal=True)
        return f"goto chain {w.number('chain index', 10)}"
    return None


def _cookie(text: str) -> bytes:
    if len(text) > 2 * _MAX_COOKIE:
        raise CommandError(f'Error: argument "{text}" is wrong: {len(text)} Max allowed size '
                           f"{2 * _MAX_COOKIE}", fatal=True)
    try:
        if len(text) % 2:
            raise ValueError(text)
        return bytes.fromhex(text)
    except ValueError:
        raise CommandError(f'Error: argument "{text}" is wrong: cookie must be a hex string',
                           fatal=True) from None
