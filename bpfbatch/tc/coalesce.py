"""``--coalesce``: consecutive ``actions add`` lines grouped as parsed actions and encoded once,
into one RTM_NEWACTION message of up to 32 actions (TCA_ACT_MAX_PRIO, tc's own limit per
message).

tc sends one message per line. The kernel takes up to 32 actions per ``actions add`` message
and applies it all or nothing, which saves it a message (and the sender a header and a reply
slot) per action. Grouping happens on the parsed rules, before any bytes exist: each line's
actions are resolved on their own (a missing device fails that line alone, after the lines
before it were handed on), and the group is encoded by the same function that encodes one
``Actions`` rule, so the joined message is byte for byte ``Actions("add", all_actions)``.

Only lines whose every action names its index join a group: the sender must be able to take
a joined message's effect back exactly (delete by index) and to re-send its lines one by one
when it fails (see :mod:`.sender`). Any other line ends the group in front of it, so lines
keep their order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..errors import BpfBatchError
from . import rules as R
from . import specs as S
from .message import BY_INDEX, Joined, LineError, Listing, Message, Parsed
from .resolve import Resolver
from .templates import encode_rule

#: Reader items passed through as they are; anything else is a rule still to be encoded.
_ENCODED = (Message, LineError, Listing)


#: Actions whose message carries their index in its parms (an ActionRef names no kind options).
_INDEXED = (R.Gact, R.Mirred)


def coalescible(rule: object) -> bool:
    """True for an ``actions add`` whose every action is a gact or mirred with an explicit
    index — exactly the ``actions add`` messages :func:`.message.undo_of` can undo."""
    if rule.__class__ is not R.Actions or rule.verb != "add":
        return False
    for action in rule.actions:  # a loop: all() over a generator costs twice as much per line
        if action.__class__ not in _INDEXED or not action.index:
            return False
    return True


class _Group:
    """The ``actions add`` lines waiting to be encoded together: their lines, their actions'
    attributes (resolved, not yet bytes) in order, and where each line's actions end."""

    __slots__ = ("lines", "attrs", "ends")

    def __init__(self) -> None:
        self.lines: list[int] = []
        self.attrs: list[tuple] = []
        self.ends: list[int] = []

    def close(self) -> Iterator[tuple[int, Parsed]]:
        """The group's one message (nothing if empty), yielded with its last line; empties it."""
        if not self.lines:
            return
        lines, attrs, ends = self.lines, self.attrs, self.ends
        self.lines, self.attrs, self.ends = [], [], []
        message = Message(*R.ACTIONS_ADD, R.actions_body(attrs), BY_INDEX)
        if len(lines) == 1:
            yield lines[0], message
        else:
            yield lines[-1], Joined(tuple(lines), message, lambda: _split(attrs, ends))


def _split(attrs: list[tuple], ends: list[int]) -> tuple[Message, ...]:
    """Each line's own message, as it is sent when not coalesced."""
    return tuple(Message(*R.ACTIONS_ADD, R.actions_body(attrs[start:end]), BY_INDEX)
                 for start, end in zip([0, *ends], ends))


def coalesce(items: Iterable[tuple[int, R.Rule | Parsed]], resolve: Resolver, source: str
             ) -> Iterator[tuple[int, Parsed]]:
    """``(line, Parsed)`` for a stream of ``(line, rule or already encoded item)``: runs of
    :func:`coalescible` rules become one message per up to 32 actions, other rules are encoded
    one each, encoded items and line errors pass through — all in line order."""
    group = _Group()
    for line, item in items:
        if coalescible(item):
            try:
                attrs = [action.attrs(resolve) for action in item.actions]
            except BpfBatchError as exc:
                yield from group.close()
                yield line, LineError.at(exc, source, line)
                continue
            if len(group.attrs) + len(attrs) > S.TCA_ACT_MAX_PRIO:
                yield from group.close()
            group.lines.append(line)
            group.attrs += attrs
            group.ends.append(len(group.attrs))
            continue
        yield from group.close()
        yield line, (item if item.__class__ in _ENCODED else encode_rule(item, resolve, source, line))
    yield from group.close()
