"""What the classifiers share: for the classifiers tc writes in the order it reads them
(fw, route, basic, matchall: ``f_fw.c``, ``f_route.c``, ``f_basic.c``, ``f_matchall.c``),
their option loop with its words and their :class:`Listed` form (bpf's too), and the
readers of ``action``, ``police`` and an option's value. Not a kind: it names none."""

from __future__ import annotations

import dataclasses

from .. import rules as R
from ..action_list import incomplete, parse_actions
from ..encoding import Attr, u32
from ..grammar import CommandError, Words, matches, parse_classid, what_is
from ..resolve import Resolver
from . import police


def police_failed(text: str = "") -> CommandError:
    """How a classifier reports a failed ``police``: police's own words, then this."""
    return CommandError(f'{text}\nIllegal "police"' if text else 'Illegal "police"')


@dataclasses.dataclass(slots=True)
class Listed:
    """A classifier sent as tc sends fw, route and basic: its attributes in the order the line
    gave them (``attrs``: ``(type, bytes | attributes)``, or ``(type, [actions])``, a list,
    encoded with the resolver), none at all (``sends_options`` False) when the line ended at the kind word.
    ``auto_handle``: the handle the kind fills in when the line names none (route's)."""

    kind: str
    attrs: tuple = ()
    sends_options: bool = False
    auto_handle: int = 0

    def options(self, resolve: Resolver, protocol: int) -> tuple[Attr, ...] | None:
        if not self.sends_options:
            return None
        return tuple(R.action_tab(type_, tuple(value), resolve) if value.__class__ is list
                     else (type_, value) for type_, value in self.attrs)


def listed_options(w: Words, kind: str, usage: str, numbers: dict, extra=None,
                   flowid_prefix: bool = False, action_line: str = 'Illegal "action"',
                   extra_first: bool = False) -> Listed:
    """The option loop of fw, route, basic, cgroup, rsvp and flow, the cursor past the kind word:
    ``classid`` (or a prefix; ``flowid`` too, or a prefix of it with ``flowid_prefix``) where
    ``numbers`` has a "classid", ``police``, ``action``, ``help``, and the kind's own words
    through ``extra(word, attrs) -> bool`` (called with the cursor on the word, before the
    shared words with ``extra_first``, as flow's ``a`` is ``and``; it leaves the cursor on the
    last word it took). ``numbers``: the kind's attribute numbers for "action" and, if it
    takes them, "classid" and "police". tc's words: ``Illegal "classid"``, ``Illegal
    "police"``, ``action_line`` after a failed action, ``What is "WORD"?`` and the usage."""
    listed = Listed(kind, sends_options=w.peek() is not None)
    attrs: list = []
    while (word := w.peek()) is not None:
        if extra_first and extra(word, attrs):
            pass
        elif "classid" in numbers and (matches(word, "classid") or (
                matches(word, "flowid") if flowid_prefix else word == "flowid")):
            classid = parse_classid(next_value(w))
            if classid is None:
                raise CommandError('Illegal "classid"')
            attrs.append(u32(numbers["classid"], classid))
        elif "police" in numbers and matches(word, "police"):
            attrs.append(police_attr(w, numbers["police"]))
            continue
        elif matches(word, "action"):
            attrs.append(actions_attr(w, numbers["action"], action_line))
            continue
        elif word == "help":
            raise CommandError(usage)
        elif extra_first or extra is None or not extra(word, attrs):
            raise CommandError(what_is(word, usage))
        w.pos += 1
    listed.attrs = tuple(attrs)
    return listed


def police_attr(w: Words, number: int) -> tuple:
    """``police ...`` as a classifier's own policer (attribute ``number``), the cursor on
    ``police``; it ends past the police's words."""
    next_value(w)
    return number, police.parse_police(w, police_failed).options()


def actions_attr(w: Words, number: int, action_line: str = 'Illegal "action"') -> tuple:
    """``action ...`` as a classifier's actions (attribute ``number``, encoded with the
    resolver by :meth:`Listed.options`), the cursor on ``action``; tc's ``action_line`` after a
    failed action."""
    try:
        return number, list(action_list(w))
    except CommandError as exc:
        text = str(exc)
        if exc.fatal or not text.endswith('Illegal "action"'):
            raise
        raise CommandError(text[:-len('Illegal "action"')] + action_line) from None


def action_list(w: Words) -> tuple:
    """A classifier's ``action ...``, the cursor on its action word (tc's ``matches(*argv,
    "action")``: any prefix of it, ``actions`` not): tc's ``NEXT_ARG()``, then the list, which
    ends where tc's ``parse_action`` ends it, at a prefix of a command word (``a``, ``get``...)
    that the classifier then reads as its own word (``a``: another action list)."""
    next_value(w)
    return parse_actions(w)


def next_value(w: Words) -> str:
    """tc's ``NEXT_ARG()`` from an option word: its value (tc ends at the end of the line)."""
    w.pos += 1
    if w.peek() is None:
        raise incomplete()
    return w.peek()


class EmatchOption:
    """``match EMATCH_TREE`` as basic and cgroup read it: an ``extra`` for
    :func:`listed_options` adding the tree as attribute ``attr_type`` (the grammar,
    :mod:`..ematch`, is loaded by the first line that uses it). tc prints what the ematch
    scanner printed whatever follows: :meth:`failed` puts it before a later failure's words."""

    __slots__ = ("w", "attr_type", "printed")

    def __init__(self, w: Words, attr_type: int) -> None:
        self.w = w
        self.attr_type = attr_type
        self.printed: list[str] = []

    def __call__(self, word: str, attrs: list) -> bool:
        if not matches(word, "match"):
            return False
        from ..ematch.tree import match_option
        next_value(self.w)
        tree = match_option(self.w, self.attr_type, self.printed)
        if tree is not None:
            attrs.append(tree)
        self.w.pos -= 1  # the option loop steps on to the word tc reads next
        return True

    def failed(self, exc: CommandError) -> CommandError:
        """``exc``, after the lines the scanner printed."""
        if not self.printed:
            return exc
        return CommandError("".join(self.printed) + str(exc), fatal=exc.fatal, status=exc.status)
