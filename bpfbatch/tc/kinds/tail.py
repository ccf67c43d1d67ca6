"""What every action kind of the newer tc modules (``m_skbedit.c``, ``m_vlan.c``, ``m_csum.c``,
``m_connmark.c``, ``m_sample.c``, ...) ends with: the fields (verdict, index, cookie,
``no_percpu``), the ``struct tc_gen`` head of its parameters, its attributes in iproute2's
order, and the optional ``[CONTROL] [index N]`` read after its options. Not a kind: it names
none; a kind's dataclass derives from :class:`Tail` and its parser calls :meth:`Tail.read_tail`.
"""

from __future__ import annotations

import dataclasses
import struct

from .. import rules as R
from .. import specs as S
from ..grammar import CommandError, Words, matches
from . import gact


@dataclasses.dataclass(slots=True)
class Tail:
    """The fields every action shares; a kind whose default verdict is not ``pipe`` redeclares
    ``verdict`` with its own default."""

    verdict: str = "pipe"
    index: int = 0
    no_percpu: bool = False
    #: Up to 16 bytes the kernel stores with the action (tc's ``cookie HEX``).
    cookie: bytes | None = None

    def parms(self, form: struct.Struct = S.TC_GACT, *fields) -> bytes:
        """The kind's parameters struct: ``tc_gen`` (index, capab, action, refcnt, bindcnt)
        as tc fills it, then the kind's own ``fields``."""
        return form.pack(self.index, 0, S.control_value(self.verdict), 0, 0, *fields)

    def action_attrs(self, kind: bytes, options) -> tuple:
        """KIND, OPTIONS { ``options`` }, then the cookie and ``no_percpu`` (see
        :func:`~..rules.action_attrs`)."""
        return R.action_attrs(kind, tuple(options), self.no_percpu, self.cookie)

    def read_tail(self, w: Words, failed, illegal_index: str, base: int = 10) -> tuple[str, bool]:
        """``[CONTROL] [index N]`` after the kind's options, into this action (the default
        verdict kept when none is given): (what tc said about a malformed ``goto``/``jump``,
        "" if nothing; whether an index was given). See :func:`.gact.verdict_and_index`."""
        verdict, index, said = gact.verdict_and_index(w, failed, illegal_index, base)
        self.verdict, self.index = verdict or self.verdict, index or 0
        return said, index is not None


def read_kind_words(w: Words, kind: str, usage: str, read) -> bool:
    """The loop several tc kinds open with (csum, nat, connmark), the cursor on the kind word:
    while the word is the kind's name (or a prefix), ``read()`` what follows it; ``help`` is
    the usage, and tc exits. Whether the kind's name was met."""
    met = False
    while (word := w.peek()) is not None:
        if matches(word, kind):
            read()
            met = True
        elif matches(word, "help"):
            raise CommandError(usage, fatal=True)
        else:
            break
    return met


def skip_kind_words(w: Words, kind: str, usage: str) -> None:
    """connmark's and ctinfo's opening loop, the cursor on the kind word: past the kind's
    name as often as it is given (``help`` there: the usage, and tc exits)."""
    read_kind_words(w, kind, usage, lambda: setattr(w, "pos", w.pos + 1))
