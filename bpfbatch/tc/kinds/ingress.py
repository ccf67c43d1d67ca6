"""ingress and clsact (``q_ingress.c``, ``q_clsact.c``): qdiscs that take no option."""

from __future__ import annotations

from ..grammar import CommandError, Words, what_is

NAMES = ("ingress", "clsact")


def parse_qdisc(w: Words, name: str) -> str:
    if w.peek() is not None:  # tc's ingress/clsact parsers take no option
        raise CommandError(what_is(w.peek(), f"Usage: ... {name}"))
    return name
