"""rsvp and rsvp6 (``f_rsvp.c``): ``rsvp ipproto PROTOCOL session DST[/PORT | GPI] [sender
SRC[/PORT | GPI]] [classid ID] [tunnelid ID] [tunnel ID skip N] [police ...] [action ...]``;
tc's usage, words and attributes (in the order the line gives them, then PINFO when a port,
GPI, protocol or tunnel was given; nothing at all when the line ends at the kind word).

Kernels since 6.3 have no rsvp classifier: the kernel's refusal is then the line's error."""

from __future__ import annotations

import dataclasses
import socket
import struct

from ..grammar import CommandError, Words, any_address, illegal_unless, matches, unsigned
from ..numbers import integer
from .common import Listed, listed_options, next_value

NAMES = ("rsvp", "rsvp6")

USAGE = """\
Usage:\t... rsvp ipproto PROTOCOL session DST[/PORT | GPI ]
\t\t[ sender SRC[/PORT | GPI ] ]
\t\t[ classid CLASSID ] [ action ACTION_SPEC ]
\t\t[ tunnelid ID ] [ tunnel ID skip NUMBER ]
Where:\tGPI := { flowlabel NUMBER | spi/ah SPI | spi/esp SPI |
\t\tu{8|16|32} NUMBER mask MASK at OFFSET}
\tACTION_SPEC := ... look at individual actions
\tFILTERID := X:Y

NOTE: CLASSID is parsed as hexadecimal input."""

# linux/pkt_cls.h TCA_RSVP_*
_NUMBERS = {"classid": 1, "police": 5, "action": 6}
_CLASSID, _DST, _SRC, _PINFO = 1, 2, 3, 4
_OFFSET = struct.Struct("=i")
_IPPROTO_AH, _IPPROTO_ESP = 51, 50
#: The ``u8``/``u16``/``u32`` forms: (size, tc's default mask: its own, u32's and u16's swapped).
_SIZED = {"u8": (1, 0xFF), "u16": (2, 0xFFFFFFFF), "u32": (4, 0xFFFF)}


@dataclasses.dataclass(slots=True)
class _Gpi:
    """struct tc_rsvp_gpi: what to match at ``offset`` of the packet (key, mask in host order)."""

    key: int = 0
    mask: int = 0
    offset: int = 0

    def pack(self) -> bytes:
        """Key and mask in network order, then the offset in host order."""
        return struct.pack("!II", self.key, self.mask) + _OFFSET.pack(self.offset)


@dataclasses.dataclass(slots=True)
class _Pinfo:
    """struct tc_rsvp_pinfo, and whether the line set any of it (tc's ``pinfo_ok``)."""

    dpi: _Gpi = dataclasses.field(default_factory=_Gpi)
    spi: _Gpi = dataclasses.field(default_factory=_Gpi)
    protocol: int = 0
    tunnelid: int = 0
    tunnelhdr: int = 0
    said: bool = False

    def pack(self) -> bytes:
        return self.dpi.pack() + self.spi.pack() + bytes(
            (self.protocol, self.tunnelid & 0xFF, self.tunnelhdr & 0xFF, 0))


class _Failed(Exception):
    """``get_addr_and_pi`` failed: the caller says which option."""


def parse_filter(w: Words) -> Listed:
    """tc's ``rsvp_parse_opt``, the cursor past ``rsvp``/``rsvp6`` (IPv4 or IPv6 addresses)."""
    kind = w.words[w.pos - 1]
    family = socket.AF_INET if kind == "rsvp" else socket.AF_INET6
    pinfo = _Pinfo()

    def extra(word: str, attrs: list) -> bool:
        if matches(word, "session"):
            attrs.append(_address_option(w, pinfo, 1, family, "session"))
            pinfo.said |= bool(pinfo.dpi.mask or pinfo.protocol)
        elif matches(word, "sender") or matches(word, "flowspec"):
            attrs.append(_address_option(w, pinfo, 0, family, "sender"))
            pinfo.said |= bool(pinfo.spi.mask or pinfo.protocol)
        elif word.startswith("ipproto"):  # tc: matches("ipproto", word), the arguments swapped
            pinfo.protocol = _protocol(next_value(w))
            pinfo.said = True
        elif word == "tunnelid":
            pinfo.tunnelid = illegal_unless(unsigned(next_value(w)), "tunnelid")
            pinfo.said = True
        elif word == "tunnel":  # its ID goes out as the classid
            tunnel = illegal_unless(unsigned(next_value(w)), "tunnel")
            attrs.append((_CLASSID, struct.pack("=I", tunnel)))
            if next_value(w) == "skip":
                next_value(w)
            pinfo.tunnelhdr = illegal_unless(unsigned(w.peek()), "skip")
            pinfo.said = True
        else:
            return False
        return True

    listed = Listed(kind)
    if w.peek() is not None:
        listed = listed_options(w, kind, USAGE, _NUMBERS, extra)
        if pinfo.said:
            listed.attrs += ((_PINFO, pinfo.pack()),)
    return listed


def _protocol(text: str) -> int:
    """``inet_proto_a2n``: a decimal u8, or a name of /etc/protocols."""
    value = unsigned(text, 10, bits=8)
    if value is None:
        try:
            value = socket.getprotobyname(text)
        except OSError:
            raise CommandError('Illegal "ipproto"') from None
    return value


def _address_option(w: Words, pinfo: _Pinfo, dest: int, family: int, option: str) -> tuple:
    """``session``/``sender`` and what follows, the cursor on the option word; it ends on the
    last word read → (attribute, address bytes)."""
    next_value(w)
    try:
        address = _addr_and_pi(w, pinfo, dest, family)
    except _Failed:
        raise CommandError(f'Illegal "{option}"') from None
    w.pos -= 1
    return (_DST if dest else _SRC), address


def _addr_and_pi(w: Words, pinfo: _Pinfo, dest: int, family: int) -> bytes:
    """tc's ``get_addr_and_pi``, the cursor on ``ADDRESS[/PORT]``: the address, and the port or
    GPI into ``pinfo``; the cursor ends past what it read."""
    pi = pinfo.dpi if dest else pinfo.spi
    text, slash, port_text = w.peek().partition("/")
    if slash:
        port = unsigned(port_text, 0, bits=16)
        if port is None:
            raise _Failed
        pi.key, pi.mask = (port, 0xFFFF) if dest else (port << 16, 0xFFFF0000)
        pi.offset = 0
    address = any_address(text, family)
    if address is None:
        raise _Failed
    w.pos += 1
    word = w.peek()
    if pi.mask or word is None:
        return address
    if word in ("spi/ah", "gpi/ah", "spi/esp", "gpi/esp"):
        pi.key, pi.mask = _read(next_value(w), unsigned), 0xFFFFFFFF
        ah = word.endswith("/ah")
        pi.offset = 4 if ah else 0
        if not pinfo.protocol:
            pinfo.protocol = _IPPROTO_AH if ah else _IPPROTO_ESP
        w.pos += 1
    elif word == "flowlabel":
        label = _read(next_value(w), unsigned)
        if family != socket.AF_INET6:
            raise _Failed
        pi.key, pi.mask, pi.offset = label & 0xFFFFF, 0xFFFFF, -40
        w.pos += 1
    elif word in _SIZED:
        _sized(w, pi, *_SIZED[word])
    return address


def _sized(w: Words, pi: _Gpi, size: int, mask: int) -> None:
    """``u8|u16|u32 VALUE [mask MASK] [at OFFSET]``, the cursor on the size word."""
    value = _read(next_value(w), unsigned)
    w.pos += 1
    for word in ("mask", "at"):
        if w.peek() is None:  # tc compares the NULL past the end and crashes (SIGSEGV)
            raise CommandError("rsvp: a GPI's value or mask is the last word of the line "
                               "(tc crashes on this line)")
        if w.peek() == word:
            if word == "mask":
                mask = _read(next_value(w), lambda text: unsigned(text, 16))
            else:
                pi.offset = _read(next_value(w), integer)
            w.pos += 1
    value, mask = _aligned(value, mask, size, pi.offset & 3)
    pi.offset &= ~3
    pi.mask = mask
    pi.key = value & mask


def _aligned(value: int, mask: int, size: int, low: int) -> tuple[int, int]:
    """Value and mask moved to their place in the 32-bit word at offset & ~3, as tc does."""
    shift = {1: {0: 24, 1: 16, 3: 8}, 2: {0: 16}}.get(size, {}).get(low, 0)
    return value << shift & 0xFFFFFFFF, mask << shift & 0xFFFFFFFF


def _read(text: str, reader) -> int:
    value = reader(text)
    if value is None:
        raise _Failed
    return value
