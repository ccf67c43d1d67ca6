"""Display decoders: a field's raw bytes ↔ the form a person reads, and back.

One registry, :data:`DECODERS`, by kind. Each :class:`Decoder` has a batch ``format`` (the
field's bytes in every row of a batch, a ``count × size`` uint8 array, → one display value
per row) and its exact inverse ``parse`` (one display value → the field's bytes), so that what
``--decode`` prints, ``load`` and ``--where`` accept back, and the Prometheus exporter labels
with the same text. Decoders work on bytes in memory order, the way the kernel stored them;
they know nothing of BTF (:func:`automatic_kind` states the one rule that looks at types).

=========  ===========  ===================================================================
kind       field bytes  display
=========  ===========  ===================================================================
ipv4       4            ``"10.0.0.1"`` (the bytes in network order, as the kernel stores
                        ``__be32`` addresses)
ipv6       16           ``"2001:db8::1"`` (RFC 5952 text, ``"::ffff:10.0.0.1"`` for mapped)
mac        6            ``"02:00:00:00:00:01"``
be16/32/64 2/4/8        the integer read in network byte order (a port: ``443``)
hex        any          the bytes in memory order as hex digits (``"0a000001"``), as
                        bpftool shows a raw key
str        any          the text before the first NUL, non-printable bytes and ``\\`` as
                        ``\\xNN`` (``"bash"``); the bytes after that NUL are not shown, and
                        ``parse`` writes zeros there (what ``bpf_get_current_comm`` leaves)
ksym       8            ``"tcp_sendmsg+0x1c"`` from ``/proc/kallsyms``; ``"0x…"`` when no
                        symbol, or a name kallsyms holds twice, would read back elsewhere
ifname     4            the interface name of an ifindex in this network namespace, the
                        number when there is none (``0``, a device gone)
errno      1/2/4/8      ``"-ENOENT"`` for -2, ``"ENOENT"`` for 2, numbers with no name as is
age        8            seconds since a ``CLOCK_MONOTONIC`` ns timestamp (what
                        ``bpf_ktime_get_ns()`` returns), to the ns: ``12.5`` is 12.5 s ago
=========  ===========  ===================================================================

``parse(format(x)) == x`` for every kind and every raw value, except ``str`` (bytes after the
first NUL read back as zeros) and ``age``: it is relative to the clock when parsed (a loaded
table keeps its ages, not its timestamps; pass the same ``now`` to get the timestamp back), and a
double holds it to the ns only within 2**53 ns (104 days) of ``now``. Integer kinds read the host's byte order (little
endian) where a number is meant (``errno``, ``ifname``, ``ksym``, ``age``).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import re
import time
from collections.abc import Callable

from ..errors import InputError, errno_code, errno_name
from .._numpy import np
from .columns import int_words

__all__ = ["DECODERS", "Decoder", "automatic_kind", "get", "parse_decode_option"]


@dataclasses.dataclass(frozen=True)
class Decoder:
    """One display kind: ``format`` a batch of a field's bytes, ``parse`` one display value
    back into them. ``sizes`` are the field sizes the kind is defined for (``None``: any)."""

    kind: str
    summary: str
    sizes: tuple[int, ...] | None
    _format: Callable[[np.ndarray], list]
    _parse: Callable[[object, int], bytes]
    numeric: bool = False  # displays numbers (right-aligned in a table)
    clocked: bool = False  # relative to CLOCK_MONOTONIC now (``age``)
    #: ``parse`` of a whole column at C speed, for the kinds a load meets by the million
    #: (the automatic ones): raises on any value it does not take exactly as ``parse`` does.
    _parse_column: Callable[[list, int], bytes] | None = None

    def check_size(self, size: int, path: str) -> None:
        """An :class:`InputError` naming ``path`` when the kind does not fit a field of
        ``size`` bytes."""
        if self.sizes is not None and size not in self.sizes:
            fits = " or ".join(map(str, self.sizes))
            raise InputError(f"--decode {self.kind} needs a field of {fits} bytes, this one "
                             f"has {size}", obj=path)

    def format(self, raw: np.ndarray, *, now: int | None = None) -> list:
        """Display values of every row of ``raw`` (``count × size`` uint8, the field's bytes).
        ``now``: the CLOCK_MONOTONIC ns a clocked kind counts from (default: the clock)."""
        raw = np.ascontiguousarray(raw, dtype=np.uint8)
        if raw.ndim != 2:
            raise ValueError("raw must be a count × size uint8 array")
        return self._format(raw, _now(now)) if self.clocked else self._format(raw)

    def format_one(self, data: bytes, *, now: int | None = None) -> object:
        """The display value of one field's bytes."""
        return self.format(np.frombuffer(data, dtype=np.uint8).reshape(1, -1), now=now)[0]

    def parse(self, value, size: int, path: str = "value", *, now: int | None = None) -> bytes:
        """The ``size`` bytes whose display is ``value``; an :class:`InputError` naming
        ``path`` and the kind when ``value`` is not a display of this kind."""
        self.check_size(size, path)
        try:
            raw = self._parse(value, size, _now(now)) if self.clocked else \
                self._parse(value, size)
        except (ValueError, TypeError, OverflowError, OSError) as exc:
            detail = f" ({exc})" if isinstance(exc, OSError) else ""
            raise InputError(f"not {_article(self.kind)} {self.kind} value: {value!r}{detail}",
                             obj=path) from None
        if len(raw) != size:
            raise InputError(f"{self.kind} value {value!r} does not fit {size} bytes", obj=path)
        return raw

    def parse_column(self, values: list, size: int) -> np.ndarray | None:
        """The ``len(values) × size`` uint8 rows whose displays are ``values``, exactly the
        bytes of :meth:`parse` of each; ``None`` when the kind has no column parse or any
        value needs :meth:`parse`'s own look (to be read, or refused with its error)."""
        if self._parse_column is None or self.sizes is not None and size not in self.sizes:
            return None
        try:
            raw = self._parse_column(values, size)
        except (ValueError, TypeError, OverflowError, OSError):
            return None
        return np.frombuffer(raw, dtype=np.uint8).reshape(len(values), size)


# -- integers ------------------------------------------------------------------------------

def _int_of(value) -> int:
    """An exact integer from an int or its decimal/``0x`` text; never a bool or a float."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(value)
    return value if isinstance(value, int) else int(value.strip(), 0)


def _host_ints(raw: np.ndarray, signed: bool = False) -> np.ndarray:
    size = raw.shape[1]
    return raw.view(f"<{'i' if signed else 'u'}{size}")[:, 0]


def _to_bytes(number: int, size: int, order: str, signed: bool = False) -> bytes:
    """``number`` in ``size`` bytes; signed or unsigned spellings of the bits both fit."""
    if signed and number < 0:
        number += 1 << (8 * size)
    return number.to_bytes(size, order)


def _format_be(raw: np.ndarray) -> list:
    return raw.view(f">u{raw.shape[1]}")[:, 0].tolist()


def _parse_be(value, size: int) -> bytes:
    return _to_bytes(_int_of(value), size, "big")


def _parse_be_column(values: list, size: int) -> bytes:
    """Exact ``int``s (no bools, no text) in ``[0, 2**bits)``, as ``_parse_be`` takes them
    (:func:`~.columns.int_words` checks the range as it converts: OverflowError)."""
    if set(map(type, values)) - {int}:
        raise TypeError("not only ints")
    return int_words(values, size, False, "big").tobytes()


# -- addresses -----------------------------------------------------------------------------

#: The decimal text of each byte value.
_DECIMAL = [str(b) for b in range(256)]


def _format_ipv4(raw: np.ndarray) -> list:
    """Dotted quads, column by column through the byte texts: four times as fast as
    ``"%d.%d.%d.%d" % row`` (a flow table's dump formats two addresses per entry)."""
    quads = (map(_DECIMAL.__getitem__, column) for column in raw.T.tolist())
    return list(map(".".join, zip(*quads)))


def _parse_ipv4(value, size: int) -> bytes:
    import ipaddress  # here: only loading an address needs it

    return ipaddress.IPv4Address(_text(value)).packed


def _parse_ip_column(family: str) -> Callable[[list, int], bytes]:
    """``inet_pton`` over a column (``family``: ``socket``'s ``AF_INET`` or ``AF_INET6``):
    for IPv4 it takes exactly the dotted quads ``ipaddress`` does (four decimal parts of
    0..255, no leading zeros, nothing around), for IPv6 it is ``_parse_ipv6`` itself;
    anything else raises."""
    def parse(values: list, size: int) -> bytes:
        import socket  # here, as below: a dump that decodes no address does not import it

        return b"".join(map(socket.inet_pton, itertools.repeat(getattr(socket, family)), values))
    return parse


def _format_ipv6(raw: np.ndarray) -> list:
    import socket

    ntop = socket.inet_ntop
    data = raw.tobytes()
    return [ntop(socket.AF_INET6, data[i:i + 16]) for i in range(0, len(data), 16)]


def _parse_ipv6(value, size: int) -> bytes:
    import socket

    return socket.inet_pton(socket.AF_INET6, _text(value))


_MAC = re.compile(r"[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}")


def _format_mac(raw: np.ndarray) -> list:
    return [":".join(f"{b:02x}" for b in row) for row in raw.tolist()]


def _parse_mac(value, size: int) -> bytes:
    text = _text(value)
    if not _MAC.fullmatch(text):
        raise ValueError(text)
    return bytes.fromhex(text.replace(":", ""))


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


# -- bytes ---------------------------------------------------------------------------------

def _format_hex(raw: np.ndarray) -> list:
    text = raw.tobytes().hex()
    step = 2 * raw.shape[1]
    return [text[i:i + step] for i in range(0, len(text), step)] if step else [""] * len(raw)


def _parse_hex(value, size: int) -> bytes:
    text = _text(value)
    return bytes.fromhex(text[2:] if text[:2] in ("0x", "0X") else text)


# str: printable ASCII but the backslash as is; everything else as \xNN.
_STR_SHOWN = {b: chr(b) for b in range(0x20, 0x7F) if b != 0x5C}
_STR_PLAIN = bytes(_STR_SHOWN)
_STR_TABLE = [_STR_SHOWN.get(b, f"\\x{b:02x}") for b in range(256)]
_STR_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})|\\")


def _format_str(raw: np.ndarray) -> list:
    table = _STR_TABLE
    out = []
    for data in _format_rows(raw):
        text = data.partition(b"\0")[0]
        out.append(text.decode("ascii") if not text.translate(None, _STR_PLAIN)
                   else "".join(table[b] for b in text))
    return out


def _parse_str(value, size: int) -> bytes:
    text = _text(value)

    def unescape(m: re.Match) -> str:
        if m.group(1) is None:
            raise ValueError(f"lone backslash in {text!r} (write \\x5c)")
        return chr(int(m.group(1), 16))

    data = _STR_ESCAPE.sub(unescape, text).encode("latin-1")
    if b"\0" in data:
        raise ValueError("a NUL ends the text; it cannot be inside it")
    return data.ljust(size, b"\0") if len(data) <= size else data


def _format_rows(raw: np.ndarray) -> list[bytes]:
    data, size = raw.tobytes(), raw.shape[1]
    return [data[i:i + size] for i in range(0, len(data), size)] if size else [b""] * len(raw)


# -- kernel symbols, interfaces, errnos ----------------------------------------------------

@functools.lru_cache(maxsize=1)
def _kallsyms() -> tuple[list[int], list[str], dict[str, int]]:
    """Sorted symbol addresses with their names, and each name's address when it is unique
    (a name kallsyms lists at two addresses cannot be read back, so it is never shown)."""
    pairs, seen = [], {}
    with open("/proc/kallsyms") as f:
        for line in f:
            addr, _, name = line.split()[:3]
            number = int(addr, 16)
            if number:
                pairs.append((number, name))
                seen[name] = number if name not in seen else None
    pairs.sort()
    return [a for a, _ in pairs], [n for _, n in pairs], \
        {n: a for n, a in seen.items() if a is not None}


def _format_ksym(raw: np.ndarray) -> list:
    addrs, names, unique = _kallsyms()
    out = []
    for address in _host_ints(raw).tolist():
        i = bisect.bisect_right(addrs, address) - 1
        name = names[i] if i >= 0 and address else None
        if name is None or unique.get(name) != addrs[i]:
            out.append(f"0x{address:x}")
        else:
            offset = address - addrs[i]
            out.append(f"{name}+0x{offset:x}" if offset else name)
    return out


def _parse_ksym(value, size: int) -> bytes:
    text = _text(value).strip()
    if text[:2] in ("0x", "0X"):
        return int(text, 16).to_bytes(size, "little")
    name, plus, offset = text.partition("+")
    address = _kallsyms()[2].get(name)
    if address is None:
        raise ValueError(f"no unique kernel symbol {name!r}")
    return (address + (int(offset, 16) if plus else 0)).to_bytes(size, "little")


def _format_ifname(raw: np.ndarray) -> list:
    import socket

    out = []
    for index in _host_ints(raw).tolist():
        try:
            out.append(socket.if_indextoname(index) if index else 0)
        except OSError:  # no such device (any more), or not in this namespace
            out.append(index)
    return out


def _parse_ifname(value, size: int) -> bytes:
    import socket

    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        return socket.if_nametoindex(value).to_bytes(size, "little")
    return _to_bytes(_int_of(value), size, "little")


def _format_errno(raw: np.ndarray) -> list:
    out = []
    for number in _host_ints(raw, signed=True).tolist():
        name = errno_name(abs(number)) if number else None
        if name is None or name == f"E{abs(number)}":
            out.append(number)
        else:
            out.append(f"-{name}" if number < 0 else name)
    return out


def _parse_errno(value, size: int) -> bytes:
    if isinstance(value, str) and value.strip().lstrip("-").startswith("E"):
        text = value.strip()
        code = errno_code(text.lstrip("-"))
        if code is None:
            raise ValueError(f"unknown errno name {text!r}")
        return _to_bytes(-code if text.startswith("-") else code, size, "little", signed=True)
    number = _int_of(value)
    if not -(1 << (8 * size - 1)) <= number < 1 << (8 * size):
        raise OverflowError(number)
    return _to_bytes(number, size, "little", signed=True)


# -- age -----------------------------------------------------------------------------------

def _now(now: int | None) -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) if now is None else now


def _format_age(raw: np.ndarray, now: int) -> list:
    # Exact integer ns first, then one division: the float is the nearest to the true age.
    return [(now - stamp) / 1e9 for stamp in _host_ints(raw).tolist()]


def _parse_age(value, size: int, now: int) -> bytes:
    """The timestamp ``value`` seconds before now; ``repr`` of a float is the shortest text
    that reads back as it, so the decimal of it is the age ``format`` meant, to the ns."""
    from decimal import Decimal, InvalidOperation  # here: only loading an age needs it

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(value)
    try:
        seconds = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except InvalidOperation:
        raise ValueError(value) from None
    if not seconds.is_finite():
        raise ValueError(value)
    stamp = now - int((seconds * Decimal(10**9)).to_integral_value())
    return stamp.to_bytes(size, "little") if stamp >= 0 else \
        _to_bytes(stamp, size, "little", signed=True)


#: Every display kind by name: the one place kinds are defined.
DECODERS: dict[str, Decoder] = {d.kind: d for d in (
    Decoder("ipv4", "IPv4 address, network order", (4,), _format_ipv4, _parse_ipv4,
            _parse_column=_parse_ip_column("AF_INET")),
    Decoder("ipv6", "IPv6 address (struct in6_addr)", (16,), _format_ipv6, _parse_ipv6,
            _parse_column=_parse_ip_column("AF_INET6")),
    Decoder("mac", "Ethernet address", (6,), _format_mac, _parse_mac),
    Decoder("be16", "16-bit integer in network byte order", (2,), _format_be, _parse_be, True,
            _parse_column=_parse_be_column),
    Decoder("be32", "32-bit integer in network byte order", (4,), _format_be, _parse_be, True,
            _parse_column=_parse_be_column),
    Decoder("be64", "64-bit integer in network byte order", (8,), _format_be, _parse_be, True,
            _parse_column=_parse_be_column),
    Decoder("hex", "the bytes in memory order, as hex digits", None, _format_hex, _parse_hex),
    Decoder("str", "text up to the first NUL, other bytes as \\xNN", None,
            _format_str, _parse_str),
    Decoder("ksym", "kernel address as symbol+offset", (8,), _format_ksym, _parse_ksym),
    Decoder("ifname", "interface index as its name", (4,), _format_ifname, _parse_ifname),
    Decoder("errno", "error number as its name (-ENOENT)", (1, 2, 4, 8),
            _format_errno, _parse_errno),
    Decoder("age", "seconds since a CLOCK_MONOTONIC ns timestamp", (8,),
            _format_age, _parse_age, numeric=True, clocked=True),
)}


def get(kind: str, source: str = "--decode") -> Decoder:
    """The decoder of ``kind``, else an :class:`InputError` listing the kinds."""
    try:
        return DECODERS[kind]
    except KeyError:
        raise InputError(f"unknown kind {kind!r} (kinds: {', '.join(DECODERS)})",
                         obj=source) from None


def parse_decode_option(text: str) -> tuple[str, Decoder]:
    """``FIELD=KIND`` (the ``--decode`` flag) → ``(field path, decoder)``."""
    field, eq, kind = text.partition("=")
    if not eq or not field.strip() or not kind.strip():
        raise InputError(f"expected FIELD=KIND, got {text!r} (kinds: {', '.join(DECODERS)})",
                         obj="--decode")
    return field.strip(), get(kind.strip(), f"--decode {text}")


#: Typedefs whose name says the bytes are in network order.
_NETWORK_ORDER = {"__be16": "be16", "__be32": "be32", "__be64": "be64"}


def automatic_kind(*, typedefs: tuple[str, ...] = (), struct: str | None = None,
                   member: str = "", size: int = 0) -> str | None:
    """The kind chosen without ``--decode`` for a field, or ``None``. The documented rules:

    * a ``struct in6_addr`` → ``ipv6``;
    * a ``__be32`` whose member name ends in ``addr`` (``saddr``, ``daddr``) → ``ipv4``;
    * another ``__be16``/``__be32``/``__be64`` (``typedefs``: the typedef names the field's
      type goes through, outermost first) → ``be16``/``be32``/``be64``.

    (A ``char[]`` holding text is already a string in the typed output, by bpftool's rule.)
    """
    if struct == "in6_addr" and size == 16:
        return "ipv6"
    for name in typedefs:
        if name in _NETWORK_ORDER:
            kind = _NETWORK_ORDER[name]
            return "ipv4" if kind == "be32" and member.endswith("addr") else kind
    return None


def _article(word: str) -> str:
    """``an`` before a vowel sound as a decoder's name is read (an ipv4, an errno), else
    ``a`` (a be16, a mac)."""
    return "an" if word[0] in "aeiou" else "a"
