"""The values flower's keys take, read as ``f_flower.c`` (iproute2 6.1) and the ``utils.c``
readers under it read them: masked numbers, MAC addresses (``ll_addr_a2n``), port ranges,
conntrack states and labels, fragment flags (addresses and tos/ttl: :mod:`.flower_tunnel`'s
readers, which the tunnel keys share). Not a kind: it names none.

Each reader returns the attributes tc appends for the value, ``(type, bytes)`` in tc's order, or
raises :class:`Bad` where tc's reader returns -1 (the key then says ``Illegal "KEY"``); where tc
exits (``invarg``, ``get_prefix``) it raises that :class:`~..grammar.CommandError` itself."""

from __future__ import annotations

import struct

from .. import grammar
from ..numbers import unsigned

#: The layouts of flower's numbers: host order (U*) or network order (BE*).
U8, U16, BE16, U32, BE32 = (struct.Struct(f) for f in ("=B", "=H", "!H", "=I", "!I"))
_ETH_ALEN = 6


class Bad(Exception):
    """A flower reader returned -1: the key's ``Illegal "KEY"`` follows (``text``: what the
    reader printed before, a whole line, or empty)."""

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.text = text


def number(text: str, base: int, bits: int) -> int:
    """``get_u8``/``get_u16``/``get_u32`` (``bits``) in ``base``, or :class:`Bad`."""
    value = unsigned(text, base, bits=bits)
    if value is None:
        raise Bad
    return value


def masked(text: str, value_type: int, mask_type: int, bits: int, network: bool = False,
           base: int = 0, names: dict[str, int] | None = None, valid=None
           ) -> list[tuple[int, bytes]]:
    """``VALUE[/MASK]`` (``flower_parse_u16``/``_u32``/``_u8``) in ``base``: both ``bits``
    wide, the mask all ones when absent; host order, or network order with ``network``. The
    value may be one of ``names`` (exact), and must pass ``valid`` when given."""
    value_text, slash, mask_text = text.partition("/")
    value = names.get(value_text) if names else None
    if value is None:
        value = number(value_text, base, bits)
    if valid is not None and not valid(value):
        raise Bad
    mask = number(mask_text, base, bits) if slash else (1 << bits) - 1
    pack = {8: U8, 16: BE16 if network else U16, 32: BE32 if network else U32}[bits].pack
    return [(value_type, pack(value)), (mask_type, pack(mask))]


def tcp_flags(text: str, flags_type: int, mask_type: int) -> list[tuple[int, bytes]]:
    """``flower_parse_tcp_flags``: ``FLAGS[/MASK]`` in hex, at most 0xfff each (the mask 0xfff
    when absent), network order."""
    value_text, slash, mask_text = text.partition("/")
    flags = number(value_text, 16, 16)
    mask = number(mask_text, 16, 16) if slash else 0xFFF
    if (flags | mask) & ~0xFFF:
        raise Bad
    return [(flags_type, BE16.pack(flags)), (mask_type, BE16.pack(mask))]


def lladdr(text: str, into: bytearray) -> None:
    """``ll_addr_a2n`` (:func:`..grammar.lladdr`) over ``into``, or :class:`Bad` with its
    line. tc's buffer is on its stack: the bytes a short MAC leaves unwritten are unknowable,
    zeros here (a mask read after an address keeps the address's)."""
    try:
        grammar.lladdr(text, into)
    except grammar.BadLladdr as bad:
        raise Bad(bad.said) from None


def eth_addr(text: str, addr_type: int, mask_type: int) -> list[tuple[int, bytes]]:
    """``flower_parse_eth_addr``: ``LLADDR``, ``LLADDR/BITS`` or ``LLADDR/MASK`` → address then
    mask. tc reads the mask into the address's buffer: a short mask keeps the address's bytes
    after it. ``/BITS`` shifts 48 ones by ``64 - BITS`` in 64 bits, which x86 takes modulo 64
    (``/0`` is then all ones, ``/100`` a shift by 28): tc's arithmetic, kept."""
    addr_text, slash, mask_text = text.partition("/")
    addr = bytearray(_ETH_ALEN)
    lladdr(addr_text, addr)
    attrs = [(addr_type, bytes(addr))]
    if slash:
        bits = unsigned(mask_text, 10)
        if bits is not None:
            shifted = (0xFFFFFFFFFFFF << ((64 - bits) & 63)) & 0xFFFFFFFFFFFFFFFF
            addr[:] = shifted.to_bytes(8, "big")[:_ETH_ALEN]
        else:
            lladdr(mask_text, addr)
        mask = bytes(addr)
    else:
        mask = b"\xff" * _ETH_ALEN
    attrs.append((mask_type, mask))
    return attrs


def port(text: str, types: tuple[int, int, int, int] | None) -> list[tuple[int, bytes]]:
    """``flower_parse_port``: ``PORT``, ``PORT/MASK`` or ``MIN-MAX``, decimal u16s (``MAX-0``
    is ``MAX`` alone, as tc reads it). ``types``: (port, port mask, range min, range max)
    attributes of the filter's ip_proto, None where it has no ports."""
    # parse_range: tc cuts the word at its first "-" (a NUL it never takes back)
    low_text, dash, high_text = text.partition("-")
    low = unsigned(low_text, 10, bits=16)
    high = unsigned(high_text, 10, bits=16) if dash and low is not None else 0
    slash = low is None or high is None
    if slash:  # no range read: a "/" in what is left of the word makes it PORT/MASK
        if "/" not in low_text:
            raise Bad
        low = high = 0
    if low and high:
        if high <= low:
            raise Bad("max value should be greater than min value")
        if types is None:
            raise Bad
        return [(types[2], BE16.pack(low)), (types[3], BE16.pack(high))]
    if not (slash or low) or types is None:
        raise Bad
    if not slash:
        return [(types[0], BE16.pack(low))]
    return masked(low_text, types[0], types[1], 16, network=True)


#: ``flower_ct_states``, in tc's order of trial: a word's flag, TCA_FLOWER_KEY_CT_FLAGS_*.
_CT_STATES = (("trk", 8), ("new", 1), ("est", 2), ("rel", 4), ("inv", 16), ("rpl", 32))


def ct_state(text: str, state_type: int, mask_type: int) -> list[tuple[int, bytes]]:
    """``flower_parse_ct_state``: ``{+|-}FLAG...``, each flag's name read as a prefix of what
    follows the sign (tc's ``strncmp``)."""
    flags = mask = 0
    pos = 0
    while pos < len(text):
        if text[pos] not in "+-":
            raise Bad
        for name, flag in _CT_STATES:
            if text.startswith(name, pos + 1):
                if text[pos] == "+":
                    flags |= flag
                mask |= flag
                pos += len(name) + 1
                break
        else:
            raise Bad
    return [(state_type, U16.pack(flags)), (mask_type, U16.pack(mask))]


#: ``flags_str``: the fragment flags ``ip_flags`` names, TCA_FLOWER_KEY_FLAGS_*.
_IP_FLAGS = {"frag": 1, "firstfrag": 2}


def ip_flags(text: str, flags: int, mask: int) -> tuple[int, int]:
    """``flower_parse_matching_flags``: ``[no]FLAG/[no]FLAG...`` (``strtok``: empty parts
    skipped) over the (flags, mask) read so far → the new (flags, mask)."""
    for token in text.split("/"):
        if not token:
            continue
        negated = token.startswith("no")
        flag = _IP_FLAGS.get(token[2:] if negated else token)
        if flag is None:
            raise Bad
        flags = flags & ~flag if negated else flags | flag
        mask |= flag
    return flags, mask
