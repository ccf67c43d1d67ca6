"""The option loop bpf, matchall and flower share: ``classid``/``flowid``, actions, and each
kind's own words. Not a kind: it names none."""

from __future__ import annotations

from ..action_list import parse_actions
from ..grammar import CommandError, Words, illegal_unless, parse_classid


def classifier_options(w: Words, kind: str, extra) -> dict:
    """The options shared by bpf, matchall and flower; ``extra(word, opts)`` handles the rest."""
    opts: dict = {}
    while (word := w.peek()) is not None:
        w.pos += 1
        if word in ("classid", "flowid"):
            opts["classid"] = illegal_unless(parse_classid(w.take("classid")), "classid")
        elif word in ("action", "actions"):
            w.pos -= 1
            opts["actions"] = parse_actions(w)
        elif not extra(word, opts):
            raise CommandError(f"unsupported {kind} option '{word}'")
    return opts
