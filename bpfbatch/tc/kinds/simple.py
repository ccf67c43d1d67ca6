"""simple (``m_simple.c``): ``simple [sdata STRING] [CONTROL] [index N]``, an action that logs
its string; tc's usage, words and attributes."""

from __future__ import annotations

import dataclasses
import functools

from .. import linebuffer
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
    """simple: ``sdata``, the 32 bytes tc sends (the string of at most 31 bytes, its NUL, and
    what tc's line buffer holds after it), or None (no data attribute)."""

    sdata: bytes | None = None
    kind = "simple"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms())]
        if self.sdata is not None:
            options.append((_DATA, self.sdata))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Simple:
    """tc's ``parse_simple``, the cursor on ``simple``."""
    failed = functools.partial(action_failed, left=left, kind="simple")
    action = Simple()
    text = at = None
    while (word := w.peek()) is not None:
        if matches(word, "simple"):
            next_arg(w)
        elif matches(word, "sdata"):
            text, at = next_arg(w), w.pos
            w.pos += 1
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
    said, indexed = action.read_tail(w, failed, 'simple: Illegal "index" ({word})')
    if text is None and not indexed:
        raise failed(said + USAGE)
    if text is not None:
        sdata = text.encode(errors="surrogateescape")
        if len(sdata) > _MAX_DATA - 1:
            raise failed(f"{said}simple: Illegal string len {len(sdata)} <{text}>")
        # tc copies 32 bytes from the string's start in its line buffer, past its NUL
        buffer = linebuffer.current()
        copied = buffer.word(at, text, _MAX_DATA) if buffer is not None else None
        action.sdata = copied if copied is not None else sdata.ljust(_MAX_DATA, b"\0")
    gact.refused_again(said)
    return action
