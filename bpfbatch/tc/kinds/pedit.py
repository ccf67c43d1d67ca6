"""pedit (``m_pedit.c``): ``pedit [ex] munge MUNGE [munge MUNGE ...] [CONTROL] [index N]``, the
generic packet editor. A MUNGE is raw (``offset OFF u8|u16|u32 [at AT OFFMASK SHIFT] CMD``) or a
header field (``ip ttl set 5``, the tables of :mod:`.pedit_fields`); CMD is ``set|add VAL``,
``invert``, ``clear``, ``preserve`` or ``decrement``, then ``[retain MASK]``. tc's usage, error
words and attributes: ``TCA_PEDIT_PARMS`` (``struct tc_pedit_sel`` and its keys), or with ``ex``
``TCA_PEDIT_PARMS_EX`` and the keys' header types and commands in ``TCA_PEDIT_KEYS_EX``.

Each munge becomes one or more 32-bit keys (``val``/``mask`` written in network order, the
word at ``off`` becoming ``(word & mask) ^ val``), as tc's ``pack_key8/16/32`` build them."""

from __future__ import annotations

import dataclasses
import re
import socket
import struct

from .. import specs as S
from ..action_list import failure, next_arg
from ..encoding import NLA_F_NESTED, encode, strz
from ..grammar import BadLladdr, CommandError, Words, ipv4_prefix, lladdr, matches, unsigned
from ..resolve import Resolver
from . import gact
from . import pedit_fields as F
from .tail import Tail

NAMES = ("pedit",)

USAGE = """\
Usage: ... pedit munge [ex] <MUNGE> [CONTROL]
Where: MUNGE := <RAW>|<LAYERED>
\t<RAW>:= <OFFSETC>[ATC]<CMD>
 \t\tOFFSETC:= offset <offval> <u8|u16|u32>
\t\tATC:= at <atval> offmask <maskval> shift <shiftval>
\t\tNOTE: offval is byte offset, must be multiple of 4
\t\tNOTE: maskval is a 32 bit hex number
 \t\tNOTE: shiftval is a shift value
\t\tCMD:= clear | invert | set <setval> | add <addval> | decrement | retain
\t<LAYERED>:= ip <ipdata> | ip6 <ip6data>
 \t\t| udp <udpdata> | tcp <tcpdata> | icmp <icmpdata>
\tCONTROL:= reclassify | pipe | drop | continue | pass |
\t          goto chain <CHAIN_INDEX>
\tNOTE: if 'ex' is set, extended functionality will be supported (kernel >= 4.11)
For Example usage look at the examples directory"""

# linux/tc_act/tc_pedit.h
_PARMS, _PARMS_EX, _KEYS_EX, _KEY_EX, _KEY_EX_HTYPE, _KEY_EX_CMD = 2, 4, 5, 6, 1, 2
_MAX_KEYS = 128  # tc's MAX_OFFS: one more key fails the munge without a word
_M32 = 0xFFFFFFFF
#: struct tc_pedit_sel: tc_gen, nkeys, flags (never set by tc), padding; then the keys.
_SEL = struct.Struct("=IIiiiBBxx")
#: struct tc_pedit_key after its mask and val (network order): off, at, offmask, shift.
_KEY_TAIL = struct.Struct("=IIII")
_U16 = struct.Struct("=H")
_KIND = encode((strz(S.ActAttr.KIND, "pedit"),))
#: The size words in tc's order (a prefix names the first it starts): bytes, default retain.
_SIZES = (("u32", 4, _M32), ("u16", 2, 0xFFFF), ("u8", 1, 0xFF))
#: What ``invert`` XORs with, by field length (tc's ``o``: 0xFF for anything not 2 or 4 bytes).
_ONES = {2: 0xFFFF, 4: _M32}
#: ``pack_key16``/``pack_key8``: the bits of the word outside the field, by byte index.
_KEEP16 = (0x0000FFFF, 0xFF0000FF, 0xFFFF0000)
_KEEP8 = (0x00FFFFFF, 0xFF00FFFF, 0xFFFF00FF, 0xFFFFFF00)
_NON_EXTENDED = "Non extended mode. only 'set' command is supported\n"
#: ``strtol(..., 0)`` over the whole word, as ``get_integer`` takes it.
_C_INT = re.compile(r"[ \t\n\v\f\r]*([+-]?)(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))\Z")


@dataclasses.dataclass(slots=True)
class Pedit(Tail):
    """pedit: ``keys`` (mask, val, off, at, offmask, shift, header type, command; mask and val
    as the 32-bit numbers sent in network order), sent extended (with each key's header type
    and command) when ``extended``."""

    keys: list = dataclasses.field(default_factory=list)
    extended: bool = False
    verdict: str = "ok"
    kind = "pedit"

    def attrs(self, resolve: Resolver) -> tuple:
        sel = self.parms(_SEL, len(self.keys), 0) + b"".join(
            mask.to_bytes(4, "big") + val.to_bytes(4, "big") + _KEY_TAIL.pack(off, at, offmask, shift)
            for mask, val, off, at, offmask, shift, _, _ in self.keys)
        if not self.extended:
            return self.action_attrs(_KIND, ((_PARMS, sel),))
        keys_ex = tuple((_KEY_EX | NLA_F_NESTED, ((_KEY_EX_HTYPE, _U16.pack(htype)),
                                                  (_KEY_EX_CMD, _U16.pack(cmd))))
                        for *_, htype, cmd in self.keys)
        return self.action_attrs(_KIND, ((_PARMS_EX, sel), (_KEYS_EX | NLA_F_NESTED, keys_ex)))


class _Bad(Exception):
    """A munge tc fails: ``said``, what tc printed on the way (newline-ended lines), and
    ``word``, the one its ``Bad pedit construct (WORD)`` names."""

    def __init__(self, word: str, said: str = "") -> None:
        super().__init__(word)
        self.word, self.said = word, said


class _Key:
    """The key a munge is building (tc's ``struct m_pedit_key``); a plain class, as the kinds'
    modules are all imported when the first action is read."""

    __slots__ = ("off", "at", "offmask", "shift", "htype", "cmd")

    def __init__(self, off: int, htype: int = F.NETWORK) -> None:
        self.off, self.htype = off, htype
        self.at = self.offmask = self.shift = 0
        self.cmd = F.SET


def parse_action(w: Words, left: int) -> Pedit:
    """tc's ``parse_pedit``, the cursor on ``pedit``: ``pedit [ex]`` (again at will, ``ex`` only
    before the first munge) and ``munge ...`` in any order, then the verdict and index."""
    failed = failure(left, "pedit")

    action = Pedit()
    ok = 0  # tc's count of ``pedit`` words and munges read
    while (word := w.peek()) is not None:
        if matches(word, "pedit"):
            ok += 1
            if matches(next_arg(w), "ex"):
                if ok > 1:
                    raise failed(f"'ex' must be before first 'munge'\n{USAGE}")
                action.extended = True
                next_arg(w)
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        elif matches(word, "munge"):
            next_arg(w)
            try:
                _munge(w, action)
            except _Bad as bad:
                raise failed(f"{bad.said}Bad pedit construct ({bad.word})\n{USAGE}") from None
            ok += 1
        else:
            break
    told, _ = action.read_tail(w, failed, 'Pedit: Illegal "index"')
    gact.refused_again(told)
    return action


def _munge(w: Words, action: Pedit) -> None:
    """``parse_munge``, the cursor past ``munge``: a raw munge or a header's field. A header's
    failure names the header word, after ``bad pedit parsing``."""
    layer = w.peek()
    if matches(layer, "offset"):
        next_arg(w)
        _raw(w, action)
        return
    next_arg(w)
    try:
        _field(w, action, layer)
    except _Bad as bad:
        raise _Bad(layer, f"{bad.said}bad pedit parsing\n") from None


def _raw(w: Words, action: Pedit) -> None:
    """``parse_offset``, the cursor on OFF: ``OFF u8|u16|u32 [at AT OFFMASK SHIFT] CMD``.
    Until CMD, a failure names OFF (tc keeps its cursor there)."""
    off_word = w.peek()
    off = _c_int(off_word)
    w.pos += 1
    size = w.peek()
    form = next((f for f in _SIZES if matches(size, f[0])), None) if off is not None else None
    if form is None:
        raise _Bad(off_word)
    key = _Key(off & _M32)
    if matches(next_arg(w), "at"):
        numbers = []
        for base in (0, 16, 0):  # AT, OFFMASK (hex), SHIFT: tc stops at the first bad one
            numbers.append(unsigned(next_arg(w), base))
            if numbers[-1] is None:
                raise _Bad(off_word)
        key.at, key.offmask, key.shift = numbers
        next_arg(w)
    _cmd(w, action, key, form[1], F.TU32, form[2])


def _field(w: Words, action: Pedit, layer: str) -> None:
    """A header's parser (``p_ip.c``, ``p_ip6.c``, ``p_tcp.c``, ``p_udp.c``, ``p_eth.c``,
    ``p_icmp.c``), the cursor on the field; :class:`_Bad` where it fails."""
    header = F.HEADERS.get(layer)
    if header is None:  # tc's stand-in for a header it has no parser for
        raise _Bad(layer, f'Unknown action  hence option "{w.peek()}" is unparsable\n')
    if w.left() < 2 or (header.extended_only and not action.extended):
        raise _Bad(layer)
    field = F.find(header, w.peek(), action.extended)
    if field is None:
        raise _Bad(layer)
    key = _Key(field.off, htype=header.htype if action.extended else F.NETWORK)
    next_arg(w)
    _cmd(w, action, key, field.length, field.kind, field.retain, field.decrement)
    if field.nibble_shift:  # ip6 traffic_class: the byte's field starts 4 bits in
        mask, val, *rest = action.keys[-1]
        action.keys[-1] = ((mask << 4 | 0xF) & _M32, val << 4 & _M32, *rest)


def _cmd(w: Words, action: Pedit, key: _Key, length: int, kind: int, retain: int,
         decrement: bool = False) -> None:
    """``parse_cmd``, the cursor on CMD: the command, its value, ``[retain MASK]``, then the
    key(s) packed. A failure before packing names CMD; a failed pack names the word after the
    munge (``(null)`` at the end of the line), as tc's cursor has moved there."""
    word = w.peek()
    val = bytes(16) if kind in (F.TIPV6, F.TMAC) else 0  # tc's 16-byte value buffer
    mask = 0
    if matches(word, "invert"):
        val = mask = _ONES.get(length, 0xFF)
        if kind in (F.TIPV6, F.TMAC):  # the ones fill the buffer's first u32
            val = val.to_bytes(16, "little")
    elif matches(word, "set") or matches(word, "add"):
        if matches(word, "add"):
            key.cmd = F.ADD
        if not action.extended and key.cmd:
            raise _Bad(word, _NON_EXTENDED)
        val, said = _value(next_arg(w), kind)
        if val is None:
            raise _Bad(word, said)
    elif matches(word, "decrement"):
        if not decrement:
            raise _Bad(word, "decrement command is not supported for this field\n")
        if not action.extended:
            raise _Bad(word, _NON_EXTENDED)
        key.cmd, val = F.ADD, retain  # adding the field's ones subtracts one
    elif matches(word, "preserve"):
        retain = 0
    elif not matches(word, "clear"):
        raise _Bad(word)
    w.pos += 1
    if matches(w.peek(), "retain"):
        retain = unsigned(next_arg(w), 0)
        if retain is None:
            raise _Bad(word)
        w.pos += 1
    if length > 4 and retain != _M32:
        raise _Bad(word, "retain is not supported for fields longer the 32 bits\n")
    said = _pack(action, key, length, kind, val, mask, retain)
    if said is not None:
        raise _Bad(w.peek() or "(null)", said)


def _pack(action: Pedit, key: _Key, length: int, kind: int, val, mask: int, retain: int
          ) -> str | None:
    """The munge's keys into ``action`` (``pack_mac``, ``pack_ipv6``, ``pack_key8/16/32``):
    None, or what tc said where it failed (maybe nothing)."""
    off = key.off
    if kind == F.TIPV6:
        for i in range(0, 16, 4):
            said = _pack32(action, key, off + i, int.from_bytes(val[i:i + 4], "big"), 0, _M32)
            if said is not None:
                return said
        return None
    if kind == F.TMAC:  # a word and a half, in the order the offset allows
        if not off & 3:
            said = (_pack32(action, key, off, int.from_bytes(val[:4], "big"), 0, _M32),
                    _pack16(action, key, off + 4, int.from_bytes(val[4:6], "big"), 0, _M32))
        else:  # tc moves the offset to the word's start, then 4 bytes on
            said = (_pack16(action, key, off, int.from_bytes(val[:2], "big"), 0, _M32),
                    _pack32(action, key, (off & ~3) + 4, int.from_bytes(val[2:6], "big"), 0, _M32))
        return None if said == (None, None) else "".join(s or "" for s in said)
    return (_pack32, _pack16, _pack8)[(4, 2, 1).index(length)](action, key, off, val, mask, retain)


def _pack32(action: Pedit, key: _Key, off: int, val: int, mask: int, retain: int) -> str | None:
    if off & 3:
        return "pack_key32: 32 bit offsets must begin in 32bit boundaries\n"
    return _add(action, key, off, val & retain, (mask | ~retain) & _M32)


def _pack16(action: Pedit, key: _Key, off: int, val: int, mask: int, retain: int) -> str | None:
    if val > 0xFFFF or mask > 0xFFFF:
        return "pack_key16 bad value\n"
    index = off & 3
    if index == 3:
        return "pack_key16 bad index value 3\n"
    stride = 8 * (2 - index)
    return _add(action, key, off & ~3, (val & retain) << stride & _M32,
                ((mask | ~retain) << stride | _KEEP16[index]) & _M32)


def _pack8(action: Pedit, key: _Key, off: int, val: int, mask: int, retain: int) -> str | None:
    if val > 0xFF or mask > 0xFF:
        return f"pack_key8 bad value (val {val:x} mask {mask:x}\n"
    index = off & 3
    stride = 8 * (3 - index)
    return _add(action, key, off & ~3, (val & retain) << stride & _M32,
                ((mask | ~retain) << stride | _KEEP8[index]) & _M32)


def _add(action: Pedit, key: _Key, off: int, val: int, mask: int) -> str | None:
    """``pack_key``: one more key, or "" (tc fails without a word) past the 128th."""
    if len(action.keys) >= _MAX_KEYS:
        return ""
    action.keys.append((mask, val, off, key.at, key.offmask, key.shift, key.htype, key.cmd))
    return None


def _value(word: str, kind: int) -> tuple:
    """``parse_val``: (the value, "") or (None, what tc said)."""
    if kind == F.TU32:
        return unsigned(word, 0), ""
    if kind == F.TIPV4:
        prefix = ipv4_prefix(word)
        return (None if prefix is None else int.from_bytes(prefix[0], "big")), ""
    if kind == F.TIPV6:
        return _ipv6_prefix(word), ""
    return _lladdr(word)


def _c_int(word: str) -> int | None:
    """``get_integer(..., 0)``: the whole word a C int as ``strtol`` reads it, or None."""
    found = _C_INT.match(word)
    if found is None:
        return None
    sign, hex_, octal, decimal = found.groups()
    value = int(hex_, 16) if hex_ else int(octal, 8) if octal else int(decimal)
    value = -value if sign == "-" else value
    return value if -(1 << 31) <= value < 1 << 31 else None


def _ipv6_prefix(text: str) -> bytes | None:
    """``get_prefix_1(..., AF_INET6)``: the address's 16 bytes (``default``/``any``/``all``:
    zeros, with no ``/``); a ``/LEN`` (or an IPv4 netmask) is checked, then ignored."""
    address, slash, length = text.partition("/")
    if address in ("default", "any", "all"):
        return None if slash else bytes(16)
    try:
        data = socket.inet_pton(socket.AF_INET6, address)
    except OSError:
        return None
    if not slash:
        return data
    bits = unsigned(length)
    if bits is None:  # get_netmask: a dotted IPv4 netmask is a length too
        return data if ipv4_prefix(f"0/{length}") is not None else None
    return data if bits <= 128 else None


def _lladdr(text: str) -> tuple[bytes | None, str]:
    """``ll_addr_a2n`` (:func:`..grammar.lladdr`) for a 6-byte address: (the bytes, "") when
    it read exactly six parts, else (None, what tc said, maybe nothing: an IPv4 address, which
    reads 4 bytes, or a seventh part)."""
    out = bytearray(6)
    try:
        count = lladdr(text, out)
    except BadLladdr as bad:
        return None, bad.said + "\n"
    return (bytes(out), "") if count == 6 else (None, "")
