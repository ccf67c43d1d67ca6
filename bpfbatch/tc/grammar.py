"""The words every tc command and kind shares, as iproute2's ``tc_util.c``/``utils.c`` read
them: the batch reader (``getcmdline()``/``makeargs()``), a cursor over a command's words,
handles, class ids, numbers and MAC addresses, and the error tc's parser raises.

A kind's own parser (:mod:`.kinds`) is written over these, so a word means the same thing in
every kind and a bad value gets the same reply.
"""

from __future__ import annotations

import contextvars
import functools
import socket
from collections.abc import Callable, Iterable, Iterator

from . import specs as S
from .numbers import LONG_MAX, strtol, strtoul, unsigned


#: Where tc resolves a device while it parses (mirred's ``dev``, route's ``fromif``), and so
#: fails there before reading the rest of the line: a device's ifindex, or None where it does
#: not exist. Set by the batch reader around each line it parses; unset (None), the encoder
#: reports a missing device instead.
DEVICES: contextvars.ContextVar[Callable[[str], int | None] | None] = \
    contextvars.ContextVar("tc_devices", default=None)

#: Where tc loads or opens a BPF program while it parses (the bpf action's ``object-file`` and
#: ``object-pinned``), and so fails there: the batch's :class:`~.resolve.Resolver`, whose fds
#: the encoder then finds cached. Set by the batch reader around each line it parses; unset
#: (None), the encoder loads the program instead.
PROGRAMS: contextvars.ContextVar = contextvars.ContextVar("tc_programs", default=None)

#: What a kind's parser keeps from one line of a batch to the next, as tc's static variables do
#: (the ematch scanner's rest of input and string mode): a dict per batch, keyed by the kind's
#: module. Set by the batch reader around each line it parses; unset (None), each line is read
#: as the first of a batch.
BATCH_STATE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("tc_batch_state",
                                                                          default=None)

#: What tc prints on stderr while it parses a line that may still go on to be sent (skbmod's
#: ``dst MAC address <...>``, ife's ``IFE type 0xED3E``): a list set by the reader around each
#: line (:func:`.parse.parse_numbered`), printed before the line's outcome, or before its error
#: when the parse fails after all. Unset (None), nothing is kept.
SAID: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("tc_said", default=None)


class CommandError(Exception):
    """A parse failure inside one command; :func:`.parse.parse_numbered` adds FILE:LINE.
    ``fatal``: tc's own parser exits on this input (``usage()``, ``invarg()``: status 255, the
    rest of the batch never read, even with ``-force``; ``status``: the exit status where tc
    exits with another, e.g. 1 from ``get_addr``); otherwise tc reports the line and goes on."""

    def __init__(self, text: str, *, fatal: bool = False, status: int = 255) -> None:
        super().__init__(text)
        self.fatal = fatal
        self.status = status


def say(text: str) -> None:
    """tc's ``fprintf(stderr, ...)`` in a parser that goes on: ``text``, a whole line, into
    :data:`SAID`."""
    said = SAID.get()
    if said is not None:
        said.append(text + "\n")


def matches(token: str | None, word: str) -> bool:
    """tc's ``matches()``: ``token`` is a non-empty prefix of ``word``."""
    return bool(token) and word.startswith(token)


def what_is(word: str, usage: str) -> str:
    """tc's reply to an option a kind does not know: the word, then the kind's usage."""
    return f'What is "{word}"?\n{usage}'


def invalid(word: str, what: str) -> CommandError:
    """tc's ``invarg()``: it prints this and exits."""
    return CommandError(f'Error: argument "{word}" is wrong: {what}', fatal=True)


def illegal_unless(value, option: str):
    """``value``, or tc's ``Illegal "OPTION"`` when it is None."""
    if value is None:
        raise CommandError(f'Illegal "{option}"')
    return value


def split_words(text: str) -> list[str]:
    """``makeargs()``: blank-separated words, a word opening with ``'``/``"`` runs to the same quote."""
    if "'" not in text and '"' not in text:
        return text.split()
    words, pos, end = [], 0, len(text)
    while pos < end:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos == end:
            break
        if text[pos] in "'\"":
            close = text.find(text[pos], pos + 1)
            if close < 0:
                raise CommandError("unterminated quoted string")
            words.append(text[pos + 1:close])
            pos = close + 1
        else:
            stop = pos
            while stop < end and text[stop] not in " \t\r\n":
                stop += 1
            words.append(text[pos:stop])
            pos = stop
    return words


def read_commands(lines: Iterable[str], buffer=None) -> Iterator[tuple[int, str | None]]:
    """Yield ``(line_number, command_text)`` per logical command, numbered like tc; text None
    when the input ends inside a continuation (tc: "Missing continuation line"). ``buffer``,
    a :class:`~.linebuffer.LineBuffer`, is shown every line as tc's line buffer takes it."""
    number = 0
    pending: list[str] = []
    # the buffer's stack, fed here rather than through a call: this loop reads every line
    kept, sizes = (buffer.lines, buffer.sizes) if buffer is not None else (None, None)
    for raw in lines:
        number += 1
        if kept is not None:  # getline(): the line hides the shorter ones it overwrites
            size = len(raw) if raw.isascii() else len(raw.encode("utf-8", "surrogateescape"))
            while sizes and sizes[-1] <= size:
                sizes.pop()
                kept.pop()
            sizes.append(size)
            kept.append(raw)
        text = raw.split("#", 1)[0] if "#" in raw else raw
        if text.endswith("\\\n"):
            pending.append(text[:-2])
            continue
        if pending:
            pending.append(text)
            text = "".join(pending)
            pending.clear()
            if buffer is not None:
                buffer.join(text)
        if text and not text.isspace():
            yield number, text
    if pending:
        yield number, None


class Words:
    """A cursor over one command's words, raising :class:`CommandError` with the offending token."""

    __slots__ = ("words", "pos")

    def __init__(self, words: list[str]) -> None:
        words.append(None)  # end sentinel: peek and take need no length check
        self.words = words
        self.pos = 0

    def peek(self) -> str | None:
        return self.words[self.pos]

    def take(self, what: str) -> str:
        word = self.words[self.pos]
        if word is None:
            raise CommandError(f"missing {what}")
        self.pos += 1
        return word

    def left(self) -> int:
        """Words from the cursor to the end of the command (tc's ``argc`` there)."""
        return len(self.words) - 1 - self.pos

    def number(self, what: str, base: int = 0) -> int:
        """The next word as ``get_u32`` reads it, in this package's words where it fails."""
        word = self.take(what)
        value = unsigned(word, base, bits=64)
        if value is None:
            raise CommandError(f"bad {what} '{word}'")
        if value > 0xFFFFFFFF:
            raise CommandError(f"{what} out of range '{word}'")
        return value

    def handle(self, what: str, parse) -> int:
        word = self.take(what)
        value = parse(word)
        if value is None:
            raise CommandError(f"bad {what} '{word}'")
        return value


@functools.lru_cache(maxsize=4096)  # handles repeat across a file's lines
def parse_classid(text: str) -> int | None:
    """``get_tc_classid``: ``root``, ``none``, ``MAJ:MIN`` / ``MAJ:`` / ``:MIN`` (hex), or a bare
    hex number; each part ``strtoul``'s, cut to 32 bits as tc's ``__u32`` holds it."""
    if text == "root":
        return S.TC_H_ROOT
    if text == "none":
        return 0
    major, end = _hex(text)
    if not end:
        major = 0
        if not text.startswith(":"):
            return None
    if text[end:end + 1] == ":":
        minor, minor_end = _hex(text[end + 1:])
        if major >= 1 << 16 or end + 1 + minor_end != len(text) or minor >= 1 << 16:
            return None
        return major << 16 | minor
    return major if end == len(text) else None


@functools.lru_cache(maxsize=4096)  # handles repeat across a file's lines
def parse_qdisc_handle(text: str) -> int | None:
    """``get_qdisc_handle``: ``none``, or ``MAJ`` (hex) alone or before a ``:`` (what follows
    the colon is not read)."""
    if text == "none":
        return 0
    major, end = _hex(text)
    if not end or major >= 1 << 16 or text[end:end + 1] not in (":", ""):
        return None
    return major << 16


@functools.lru_cache(maxsize=4096)  # handles repeat across a file's lines
def parse_u32_handle(text: str) -> int | None:
    """``get_u32_handle``: ``0x...`` (``get_u32`` in hex) or ``HTID:HASH:NODE`` (hex, parts
    optional). tc's quirks kept: the character after each part is skipped whatever it is, and
    what follows the node is not read (``1:2:3:4`` is 1:2:3)."""
    if ":" not in text:
        return unsigned(text, 16) if text.startswith("0x") else None
    htid, end = _hex(text)
    if not end and text[0] != ":" or htid >= 0x1000:
        return None
    bucket = node = 0
    if end < len(text):
        rest = text[end + 1:]
        bucket, end = _hex(rest)
        if not end and rest[:1] not in (":", "") or bucket >= 0x100:
            return None
        if end < len(rest):
            rest = rest[end + 1:]
            node, end = _hex(rest)
            if not end and rest or node >= 0x1000:
                return None
    return htid << 20 | bucket << 12 | node


def _hex(text: str) -> tuple[int, int]:
    """``strtoul(text, &end, 16)`` into a ``__u32``: (value, end)."""
    if _is_hex(text):
        return int(text, 16) & 0xFFFFFFFF, len(text)
    value, end, _ = strtoul(text, 16)
    return value & 0xFFFFFFFF, end


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def parse_mac(text: str) -> bytes | None:
    """``aa:bb:cc:dd:ee:ff`` (one or two hex digits a part) → 6 bytes; None if malformed."""
    parts = text.split(":")
    if len(parts) != 6 or not all(1 <= len(p) <= 2 and _is_hex(p) for p in parts):
        return None
    return bytes(int(p, 16) for p in parts)


class BadLladdr(Exception):
    """``ll_addr_a2n`` returned -1: ``said`` is the line it printed (``"PART" is invalid
    lladdr.``, no newline), ``word`` the argument as tc left it, cut at its first ``:`` when it
    was read as hex parts (tc writes a NUL over each ``:`` it passes), which is what a message
    printed after it (vlan's ``invarg``) names."""

    def __init__(self, said: str, word: str) -> None:
        super().__init__(said)
        self.said = said
        self.word = word


def lladdr(text: str, into: bytearray) -> int:
    """``ll_addr_a2n(into, len(into), text)`` (lib/ll_addr.c), for every kind that reads a
    link-layer address: a word with a ``.`` is an IPv4 address (``get_addr_1(AF_INET)``) over
    the first four bytes, returning 4; any other is ``:``-separated parts, each a
    ``sscanf("%x")`` into an int (C's ``strtoul`` cut to 32 bits: a sign, ``0x`` and trailing
    junk are taken, ``-0`` and ``100000000`` read 0) of 0..255, written over as many bytes as
    the buffer holds, returning the parts read (one more than fit when more follow, as tc
    counts). The bytes not written keep what ``into`` held. ``into`` holds at least 4 bytes.
    Raises :class:`BadLladdr` where tc prints its line and returns -1."""
    if "." in text:
        address = ipv4_address(text)
        if address is None:
            raise BadLladdr(f'"{text}" is invalid lladdr.', text)
        into[:4] = address
        return 4
    parts = text.split(":")
    for i, part in enumerate(parts[:len(into)]):
        value, end, _ = strtoul(part, 16)
        if not end or value & 0xFFFFFFFF > 255:
            raise BadLladdr(f'"{part}" is invalid lladdr.', parts[0])
        into[i] = value & 0xFF
    return min(len(parts), len(into) + 1)


def classifier_flag(word: str, opts: dict) -> bool:
    """``skip_hw``/``skip_sw``, the flags every classifier takes, into ``opts["flags"]``."""
    if word not in S.CLS_FLAGS:
        return False
    opts["flags"] = opts.get("flags", 0) | S.CLS_FLAGS[word]
    return True


def ipv4_address(text: str) -> bytes | None:
    """``get_addr_ipv4``: up to four ``.``-separated ``strtoul(..., 0)`` numbers, each at most
    255, the parts not given zero → 4 bytes; None where tc's reader fails."""
    try:  # a strict dotted quad (no sign, prefix or leading zero) reads alike: the common case
        return socket.inet_pton(socket.AF_INET, text)
    except OSError:
        pass
    parts = text.split(".")
    if len(parts) > 4:
        return None
    out = bytearray(4)
    for i, part in enumerate(parts):
        value = unsigned(part, 0, bits=8)
        if value is None:
            return None
        out[i] = value
    return bytes(out)


def any_address(text: str, family: int = socket.AF_UNSPEC) -> bytes | None:
    """``get_addr_1(..., family)``: IPv6 when it has a ``:``, IPv4 as tc reads it otherwise,
    either refused where ``family`` (AF_INET, AF_INET6) names the other; ``default`` the
    family's zero address, ``any``/``all`` an address of no bytes (AF_UNSPEC's ``default``
    too); None where it fails."""
    if text in ("default", "any", "all"):
        return bytes(_ADDRESS_BYTES.get(family, 0) if text == "default" else 0)
    if ":" in text:
        if family == socket.AF_INET:
            return None
        try:
            return socket.inet_pton(socket.AF_INET6, text)
        except OSError:
            return None
    return None if family == socket.AF_INET6 else ipv4_address(text)


_ADDRESS_BYTES = {socket.AF_INET: 4, socket.AF_INET6: 16}
#: ``family_name_verbose``: how ``get_addr`` names the family it wanted.
_FAMILY_NAMES = {socket.AF_UNSPEC: "any valid", socket.AF_INET: "inet", socket.AF_INET6: "inet6"}


def get_address(text: str, family: int = socket.AF_UNSPEC) -> tuple[int, bytes]:
    """``get_addr(..., family)``: (family, address bytes) as :func:`any_address` reads them —
    ``any``/``all``/``default`` keep ``family`` — or tc's words, exiting with status 1."""
    address = any_address(text, family)
    if address is None:
        raise CommandError(f'Error: {_FAMILY_NAMES[family]} address is expected rather than '
                           f'"{text}".', fatal=True, status=1)
    if text in ("default", "any", "all"):
        return family, address
    return (socket.AF_INET6 if ":" in text else socket.AF_INET), address


def ipv4_prefix(text: str) -> tuple[bytes, int] | None:
    """``get_prefix_1(..., AF_INET)``: ``ADDRESS[/LEN|/NETMASK]`` (the address as
    :func:`ipv4_address` reads it; ``default``/``any``/``all``: 0.0.0.0/0, with no ``/``) →
    (4 address bytes as given, prefix length); None where tc's reader fails."""
    address, slash, length = text.partition("/")
    if address in ("default", "any", "all"):
        return None if slash else (bytes(4), 0)
    addr = ipv4_address(address)
    if addr is None:
        return None
    if not slash:
        return addr, 32
    bits = _netmask(length)
    return (addr, bits) if bits is not None and bits <= 32 else None


def _netmask(text: str) -> int | None:
    """``get_netmask``: a prefix length (``get_unsigned``, base 0) or an IPv4 netmask whose ones
    are contiguous (``get_addr_1``'s, so ``default``/``any``/``all`` are 0) → the length; None
    where it fails."""
    bits = unsigned(text)
    if bits is not None:
        return bits
    mask = any_address(text, socket.AF_INET)
    if mask is None:
        return None
    host = ~int.from_bytes(mask.ljust(4, b"\0"), "big") & 0xFFFFFFFF
    return None if host & (host + 1) else 32 - host.bit_length()


def get_prefix(text: str, family: int = socket.AF_UNSPEC) -> tuple[int, bytes, int]:
    """``get_prefix(..., family)``: ``ADDRESS[/LEN|/NETMASK]`` → (family, address bytes as
    given, prefix length), the address as :func:`get_address` reads it and the length at most
    the family's bits (all of them when not given). ``default``/``any``/``all`` keep
    ``family`` and take no ``/`` (length 0). tc's words where it fails, exiting with status 1."""
    address, slash, length = text.partition("/")
    found = any_address(address, family)
    bits = None
    read = family
    if found is not None:
        if address in ("default", "any", "all"):
            bits = None if slash else 0
        else:
            read = socket.AF_INET6 if ":" in address else socket.AF_INET
            most = 8 * _ADDRESS_BYTES[read]
            bits = _netmask(length) if slash else most
            bits = bits if bits is not None and bits <= most else None
    if bits is None:
        raise CommandError(f'Error: {_FAMILY_NAMES[family]} prefix is expected rather than '
                           f'"{text}".', fatal=True, status=1)
    return read, found, bits


def strtol_handle(text: str | None) -> int:
    """A handle as basic and matchall read it, ``strtol(text, NULL, 0)`` cut to 32 bits: what
    it cannot read is 0, and only LONG_MAX and LONG_MIN are refused (tc's words)."""
    if text is None:
        return 0
    value, _, _ = strtol(text)
    if value in (LONG_MAX, -LONG_MAX - 1):
        raise CommandError(f'Illegal handle "{text}", must be numeric.')
    return value & 0xFFFFFFFF
