"""Extended matches (``m_ematch.c``): the ``match EMATCH_TREE`` of basic and cgroup.

:mod:`.lexer` reads the words as tc's flex scanner does, :mod:`.tree` parses and encodes the
tree as tc's bison grammar and ``parse_tree()`` do, and each ematch kind tc 6.1 builds has its
module (``em_cmp.c`` → :mod:`.cmp`, ...) holding ``KIND``, ``KIND_NUM``, ``USAGE`` and
``parse(args) -> bytes``. This module holds what those share: an argument as tc's ``struct
bstr`` holds it, the error a kind raises, and the number and layer readers."""

from __future__ import annotations

import dataclasses

from .. import numbers
from ..numbers import ULONG_MAX

#: linux/pkt_cls.h TCF_LAYER_*
LAYER_NETWORK, LAYER_MAX = 1, 2
_LAYERS = {ord("l"): 0, ord("n"): 1, ord("t"): 2}


@dataclasses.dataclass(slots=True, eq=False)
class Arg:
    """One argument between an ematch's parentheses (tc's ``struct bstr``). A quoted one
    (``"..."``) has no bytes of its own: tc points every quoted argument of a line at the
    scanner's one string buffer, so each reads the buffer's first ``len`` bytes as the *last*
    quoted string left them (``"abc"`` followed by ``"xy"`` reads ``xyc``) — ``buffer`` is that
    shared buffer."""

    text: bytes
    quoted: bool = False
    buffer: bytearray | None = None
    length: int = 0

    @property
    def data(self) -> bytes:
        """The argument's ``len`` bytes (``b->data``, ``b->len``)."""
        return bytes(self.buffer[:self.length]) if self.quoted else self.text

    def cstr(self) -> bytes:
        """The argument read as a C string (what ``strncpy``/``sscanf`` on ``b->data`` see):
        a quoted one runs on in the buffer to its first NUL."""
        if not self.quoted:
            return self.text
        return bytes(self.buffer).split(b"\0", 1)[0]

    def printable(self) -> str:
        """``bstr_print(..., ascii)``: each byte, or ``.`` where it is not printable."""
        return "".join(chr(c) if 0x20 <= c < 0x7F else "." for c in self.data)


class EmError(Exception):
    """A kind's failure. ``report`` (tc's ``PARSE_ERR(carg, ...)``): the text, then tc's lines
    naming the words read, the kind's arguments with ``carg`` marked ``>>arg<<`` (None: none
    marked) and the kind's usage; otherwise the text alone (what the kind printed before
    failing). ``before``: what the kind printed ahead of its ``PARSE_ERR``. ``first``: the
    argument the list shown starts at (a kind that steps its ``args`` pointer shows the rest;
    None: it stepped past the end and no list is shown). The tree fills in ``where`` (the
    kind's module and arguments)."""

    def __init__(self, text: str, carg: Arg | None = None, *, before: str = "",
                 report: bool = True, first: int | None = 0) -> None:
        super().__init__(text)
        self.carg = carg
        self.first = first
        self.before = before
        self.report = report
        self.where: tuple | None = None


def is_word(arg: Arg | None, word: str) -> bool:
    """``!bstrcmp(arg, word)``: the argument is exactly ``word``."""
    return arg is not None and arg.data == word.encode()


def bstrtoul(arg: Arg) -> int:
    """``bstrtoul()``: ``strtoul(data, &end, 0)``; :data:`ULONG_MAX` where nothing is read (or
    the value overflows). What follows the number is ignored, as in tc."""
    value = strtoul(arg.data.decode("latin-1"), 0)
    return ULONG_MAX if value is None else value


def strtoul(text: str, base: int) -> int | None:
    """C's ``strtoul`` (:func:`..numbers.strtoul`: a negative number wraps, an overflow is
    :data:`ULONG_MAX`); None where no digit is read (``end == text``)."""
    value, end, _ = numbers.strtoul(text, base)
    return value if end else None


def parse_layer(arg: Arg) -> int:
    """``parse_layer()`` then the number, as cmp and nbyte read ``layer``: a word opening with
    l/n/t names a layer; anything else is read as a number (:data:`ULONG_MAX` if none)."""
    data = arg.data
    if data[:1] and data[0] in _LAYERS:
        return _LAYERS[data[0]]
    return bstrtoul(arg)
