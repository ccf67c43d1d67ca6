"""tc's ematch scanner (``emp_ematch.l``), word for word: what it reads, and when.

tc hands its flex scanner the command's words one at a time (``YY_INPUT``), each followed by a
blank, empty words skipped; the grammar then asks for tokens. Which words were read when the
grammar stops matters: tc steps back one word (``parse_ematch``'s "undo look ahead") and goes
on from there, and its error lines print the words read. So this scanner reads a word only
where flex does: when it must look past the blank that ends the last one.

Tokens: ``(`` and ``)``; ``and``/``or``/``not`` in any case (a whole word between blanks or
parentheses); ``"..."`` with C escapes, running across words (joined by the blank); any other
run of characters up to a blank or parenthesis. A bad escape prints tc's line and yields
:data:`ERROR`.

tc's scanner is static: what is left of the last word it read, and its string mode (a string
left open, or broken by a bad escape), carry over to the next ``match`` of the batch, as does
its one string buffer. :class:`ScanState` holds them, one per batch."""

from __future__ import annotations

import re

from . import Arg

AND, OR, NOT, ERROR, END = "and", "or", "not", "error", "end"
_KEYWORDS = {b"and": AND, b"or": OR, b"not": NOT}
_BLANKS = b" \t\r\n"
_WORD_END = re.compile(rb"[ \t\r\n()]")
_PLAIN = re.compile(rb'[^\\\n"]+')
_OCTAL = re.compile(rb"\\([0-7]{1,3})")
_DIGITS = re.compile(rb"\\[0-9]+")
_HEX = re.compile(rb"\\x([0-9a-fA-F]{1,2})")
_ESCAPES = {ord(k): v for k, v in zip("nrtvbfa", b"\n\r\t\v\b\f\a")}
#: flex reads at most YY_READ_BUF_SIZE bytes at a time; tc refuses a longer word.
_READ_SIZE = 8192


class ScanState:
    """What tc's scanner keeps between calls: the unread rest of its buffer (``buf[at:]``),
    string mode, the string buffer (tc ``calloc()``s 512 bytes, grows it by 512) and its
    fill; and the grammar's last tree (``root``: tc's ``ematch_root``, kept when a later
    ``match`` holds no term)."""

    __slots__ = ("buf", "at", "string", "strbuf", "index", "root")

    def __init__(self) -> None:
        self.buf, self.at, self.string = b"", 0, False
        self.strbuf, self.index = bytearray(512), 0
        self.root = None


class Lexer:
    """The scanner over ``words[pos:end]``; ``pos`` is tc's ``ematch_argv`` (the next word to
    read); ``notes``: what it printed."""

    __slots__ = ("words", "pos", "end", "state", "notes")

    def __init__(self, words: list[str], pos: int, end: int, state: ScanState) -> None:
        self.words = words
        self.pos = pos
        self.end = end
        self.state = state
        self.notes: list[str] = []

    def _fill(self) -> bool:
        """``YY_INPUT``: the next non-empty word and a blank; False at the end of the line (or at
        a word too long for flex's buffer, left unread), where flex empties its buffer."""
        state = self.state
        while self.pos < self.end and self.words[self.pos] == "":
            self.pos += 1
        state.buf, state.at = b"", 0
        if self.pos >= self.end:
            return False
        word = self.words[self.pos].encode("utf-8", "surrogateescape")  # the file's bytes
        if len(word) + 1 >= _READ_SIZE:
            self.notes.append("match argument too long.\n")
            return False
        state.buf = word + b" "
        self.pos += 1
        return True

    def token(self) -> str | Arg:
        """The next token: a keyword constant, ``(``/``)``, an :class:`~. Arg`, :data:`ERROR` or
        :data:`END`."""
        state = self.state
        while True:
            if state.string:
                return self._string()
            buf, at = state.buf, state.at
            while at < len(buf) and buf[at] in _BLANKS:
                at += 1
            state.at = at
            if at == len(buf):
                if not self._fill():
                    return END
                continue
            char = buf[at]
            if char == 0x22:  # '"'
                state.at, state.string, state.index = at + 1, True, 0
                continue
            if char in (0x28, 0x29):
                state.at = at + 1
                return chr(char)
            found = _WORD_END.search(buf, at + 1)
            stop = found.start() if found else len(buf)
            text = buf[at:stop]
            state.at = stop
            return _KEYWORDS.get(text.lower()) or Arg(text)

    def _put(self, data: bytes | int) -> None:
        """``strbuf_append_*``: write at the string's end in the shared buffer."""
        state = self.state
        data = bytes((data,)) if data.__class__ is int else data
        stop = state.index + len(data)
        while stop >= len(state.strbuf):
            state.strbuf.extend(bytes(512))
        state.strbuf[state.index:stop] = data
        state.index = stop

    def _string(self) -> Arg | str:
        """The ``lexstr`` mode: up to the closing quote, escapes read; refilling across words."""
        state = self.state
        while True:
            buf, at = state.buf, state.at
            if at == len(buf):
                if not self._fill():
                    return END  # still in string mode for the next ematch, as in tc
                continue
            char = buf[at]
            if char == 0x22:
                state.at, state.string = at + 1, False
                return Arg(b"", quoted=True, buffer=state.strbuf, length=state.index)
            if char == 0x5C:  # backslash
                if self._escape():
                    return ERROR
                continue
            found = _PLAIN.match(buf, at)
            if found is None:  # a newline: flex echoes it (a batch word never holds one)
                state.at = at + 1
                continue
            self._put(found.group())
            state.at = found.end()

    def _escape(self) -> bool:
        """One ``\\`` sequence into the string; True where tc's scanner fails (its line noted;
        the string mode stays, as in tc)."""
        state = self.state
        buf, at = state.buf, state.at
        octal, digits = _OCTAL.match(buf, at), _DIGITS.match(buf, at)
        if digits:  # flex takes the longer match, the octal rule on a tie
            if octal and octal.end() >= digits.end():
                state.at = octal.end()
                value = int(octal.group(1), 8)
                if value > 0xFF:
                    self.notes.append("error: octal escape sequence out of range\n")
                    return True
                self._put(value)
                return False
            state.at = digits.end()
            self.notes.append("error: invalid octale escape sequence\n")
            return True
        hexa = _HEX.match(buf, at)
        if hexa:
            self._put(int(hexa.group(1), 16))
            state.at = hexa.end()
            return False
        follower = buf[at + 1]  # a word always ends in the blank tc appends
        self._put(_ESCAPES.get(follower, follower))
        state.at = at + 2
        return False
