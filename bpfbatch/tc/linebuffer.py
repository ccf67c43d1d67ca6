"""What tc's batch reader leaves in its line buffer, for the one attribute tc copies out of it
past a word's end: simple's ``sdata``, 32 bytes from the string's start (``m_simple.c``).

tc reads each line with ``getline()`` into one buffer it reuses for the whole batch
(``lib/utils.c``: ``do_batch``, ``getcmdline``): the line, its newline and a NUL overwrite the
buffer's start and leave whatever longer lines wrote after them; then ``getcmdline`` cuts the
line at its first ``#`` (a NUL there) and ``makeargs`` writes a NUL on the character ending each
word (the blank after it, or its closing quote). A continued line (``\\`` at its end) is joined
into a buffer reallocated to the joined line's exact size, so nothing after it is known.

Exact as long as tc's parsers leave the words of earlier lines as makeargs left them (some cut
their own word in place, at a ``:`` or ``/``: a MAC, a mask, a range), and where a line never
reached (a fresh buffer, or one grown past every earlier line) holds zeros, as tc's freshly
allocated buffer did in every run here; there the bytes may differ.
"""

from __future__ import annotations

from .grammar import BATCH_STATE

_BLANKS = b" \t\r\n"  # makeargs' separators
_QUOTES = b"'\""


class LineBuffer:
    """The lines that still show in tc's buffer (``lines``, their sizes in bytes in
    ``sizes``), the current one last: each is shorter than every line below it, as a line
    hides those no longer than itself. :func:`.grammar.read_commands` pushes every physical
    line (``getline()``, its newline included) in its loop; the reader keeps the buffer in
    :data:`~.grammar.BATCH_STATE` under this class. ``used``: a parser read it for the current
    line (whose bytes then depend on the lines before it)."""

    __slots__ = ("lines", "sizes", "used")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.sizes: list[int] = []
        self.used = False

    def join(self, text: str) -> None:
        """A continued line joined (``text``, comments cut): the buffer holds it alone."""
        self.lines[:] = [text]
        self.sizes[:] = [len(text.encode("utf-8", "surrogateescape"))]

    def word(self, index: int, word: str, count: int) -> bytes | None:
        """``count`` bytes of the buffer from the start of the current line's word ``index``
        (makeargs' ``argv[index]``, which must read ``word``), zeros where no line reached;
        None where makeargs finds other words than the reader did."""
        self.used = True
        if not self.lines:
            return None
        layers = [_as_tc_leaves(raw) for raw in self.lines]
        data, starts = layers[-1]
        expected = word.encode("utf-8", "surrogateescape")
        if index >= len(starts) or data[starts[index]:starts[index] + len(expected)] != expected:
            return None
        buffer = bytearray()
        for layer, _ in layers:  # longest first: each later line overwrites its start
            buffer[:len(layer)] = layer
        start = starts[index]
        return bytes(buffer[start:start + count]).ljust(count, b"\0")


def current() -> LineBuffer | None:
    """The batch's line buffer, or None outside a batch reader that keeps one."""
    kept = BATCH_STATE.get()
    return None if kept is None else kept.get(LineBuffer)


def _as_tc_leaves(raw: str) -> tuple[bytearray, list[int]]:
    """A line as tc's buffer holds it once read and split (its NUL after it, the ``#`` cut,
    makeargs' NULs), and where each of makeargs' words starts."""
    data = bytearray(raw.encode("utf-8", "surrogateescape"))
    data.append(0)
    cut = data.find(b"#", 0, data.find(0))  # strchr(): up to the line's first NUL
    if cut >= 0:
        data[cut] = 0
    end = data.find(0)
    starts = []
    pos = 0
    while pos < end:
        while pos < end and data[pos] in _BLANKS:
            pos += 1
        if pos >= end:
            break
        if data[pos] in _QUOTES:
            close = data.find(data[pos:pos + 1], pos + 1, end)
            starts.append(pos + 1)
            if close < 0:  # tc exits on this line
                break
            data[close] = 0
            pos = close + 1
        else:
            starts.append(pos)
            while pos < end and data[pos] not in _BLANKS:
                pos += 1
            if pos >= end:
                break
            data[pos] = 0
            pos += 1
    return data, starts
