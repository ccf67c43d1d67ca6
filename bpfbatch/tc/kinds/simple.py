"""simple (``m_simple.c``): ``simple [sdata STRING] [CONTROL] [index N]``, an action that logs
its string; tc's usage, words and attributes."""

from __future__ import annotations

import dataclasses
import functools

from .. import specs as S
from ..action_list import action_failed, next_arg
from ..encoding import encode, strz
from ..grammar import CommandError, Words, matches
from ..resolve import Resolver
from . import gact
from .tail import Tail

NAMES = ("simple",)

USAGE = """\
Usage:... simple [sdata STRING] [index INDEX] [CONTROL]
\tSTRING being an arbitrary string
\tINDEX := optional index value used
\tCONTROL := reclassify|pipe|drop|continue|ok"""

# linux/tc_act/tc_defact.h
_PARMS, _DATA = 2, 3
_MAX_DATA = 32  # SIMP_MAX_DATA: the string and its NUL
_KIND = encode((strz(S.ActAttr.KIND, "simple"),))


@dataclasses.dataclass(slots=True)
class Simple(Tail):
    """simple: ``sdata``, at most 31 bytes, or None (no data attribute)."""

    sdata: bytes | None = None
    kind = "simple"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms())]
        if self.sdata is not None:
            # tc copies 32 bytes from the string's start, reading past its NUL into the rest
            # of its line buffer; the NUL-padded string is sent here (the kernel reads up to
            # the NUL, so both store the same)
            options.append((_DATA, self.sdata.ljust(_MAX_DATA, b"\0")))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Simple:
    """tc's ``parse_simple``, the cursor on ``simple``."""
    failed = functools.partial(action_failed, left=left, kind="simple")
    action = Simple()
    text = None
    while (word := w.peek()) is not None:
        if matches(word, "simple"):
            next_arg(w)
        elif matches(word, "sdata"):
            text = next_arg(w)
            w.pos += 1
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
    said, indexed = action.read_tail(w, failed, 'simple: Illegal "index" ({word})')
    if text is None and not indexed:
        raise failed(said + USAGE)
    if text is not None:
        action.sdata = text.encode(errors="surrogateescape")
        if len(action.sdata) > _MAX_DATA - 1:
            raise failed(f"{said}simple: Illegal string len {len(action.sdata)} <{text}>")
    gact.refused_again(said)
    return action
