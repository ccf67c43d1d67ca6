"""cgroup (``f_cgroup.c``): ``cgroup [match EMATCH_TREE] [police ...] [action ...]``, the
packet's cgroup classid as the class; tc's usage, words and attributes (in the order the line
gives them; an options nest even when the line gives none, as tc sends). The tree as
:mod:`..ematch` reads it."""

from __future__ import annotations

from ..grammar import CommandError, Words, strtol_handle
from .common import EmatchOption, Listed, listed_options

NAMES = ("cgroup",)

USAGE = """\
Usage: ... cgroup [ match EMATCH_TREE ]
                  [ action ACTION_SPEC ]"""

# linux/pkt_cls.h TCA_CGROUP_*
_NUMBERS = {"action": 1, "police": 2}
_EMATCHES = 3


def parse_filter(w: Words) -> Listed:
    """tc's ``cgroup_parse_opt``, the cursor past ``cgroup``."""
    tree = EmatchOption(w, _EMATCHES)
    try:
        listed = listed_options(w, "cgroup", USAGE, _NUMBERS, tree)
    except CommandError as exc:
        raise tree.failed(exc) from None
    listed.sends_options = True
    return listed


def parse_handle(text: str | None, classifier: Listed | None) -> int:
    """cgroup reads its handle as basic does: :func:`..grammar.strtol_handle`."""
    return strtol_handle(text)
