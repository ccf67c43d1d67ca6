"""The header fields pedit's layered munges name (iproute2's ``p_ip.c``, ``p_ip6.c``,
``p_tcp.c``, ``p_udp.c``, ``p_eth.c``, ``p_icmp.c``): for each header, its key type and whether
it needs ``ex``; for each field, its offset in that header, length, value type, the bits it
keeps (tc's ``retain``) and the commands it allows. Not a kind: :mod:`.pedit` reads them."""

from __future__ import annotations

from typing import NamedTuple

# enum pedit_header_type and enum pedit_cmd (linux/tc_act/tc_pedit.h)
NETWORK, ETH, IP4, IP6, TCP, UDP = range(6)
SET, ADD = 0, 1
#: How a field's value is read (m_pedit.h): a u32, an IPv4 or IPv6 address, a MAC address.
TIPV4, TIPV6, TU32, TMAC = 1, 2, 4, 5


class Field(NamedTuple):
    """One field: ``name`` (``prefix``: any prefix of it names it too, as tc's ``matches()``),
    its byte offset and length, value type, retained bits, whether ``decrement`` is allowed,
    whether only a non-``ex`` munge reaches it (ip's transport fields, at fixed offsets behind a
    20-byte header), and ``nibble_shift``: ip6's traffic class, 4 bits into its byte."""

    name: str
    off: int
    length: int
    kind: int = TU32
    retain: int = 0xFF
    decrement: bool = False
    prefix: bool = False
    network_only: bool = False
    nibble_shift: bool = False


class Header(NamedTuple):
    """A header word's fields in tc's order of checks, its key type under ``ex``, and whether
    it exists only under ``ex``."""

    htype: int
    extended_only: bool
    fields: tuple[Field, ...]


_U32, _U16 = 0xFFFFFFFF, 0xFFFF

HEADERS = {
    "ip": Header(IP4, False, (
        Field("src", 12, 4, TIPV4, _U32), Field("dst", 16, 4, TIPV4, _U32),
        Field("tos", 1, 1), Field("dsfield", 1, 1, prefix=True),
        Field("ihl", 0, 1, retain=0x0F), Field("ttl", 8, 1, decrement=True),
        Field("protocol", 9, 1), Field("precedence", 1, 1, prefix=True),
        # tc's own notes call these unvalidated: the bits each keeps are reproduced as written
        Field("nofrag", 6, 1, retain=0x3F), Field("firstfrag", 6, 1, retain=0x1F),
        Field("ce", 6, 1, retain=0x80), Field("df", 6, 1, retain=0x40),
        Field("mf", 6, 1, retain=0x20),
        Field("dport", 22, 2, retain=_U16, network_only=True),
        Field("sport", 20, 2, retain=_U16, network_only=True),
        Field("icmp_type", 20, 1, network_only=True),
        Field("icmp_code", 20, 1, network_only=True),  # tc's offset, the type's byte
    )),
    "ip6": Header(IP6, True, (
        Field("src", 8, 16, TIPV6, _U32), Field("dst", 24, 16, TIPV6, _U32),
        Field("flow_lbl", 0, 4, retain=0x0007FFFF), Field("payload_len", 4, 2, retain=_U16),
        Field("nexthdr", 6, 1), Field("hoplimit", 7, 1, decrement=True),
        Field("traffic_class", 1, 1, nibble_shift=True),
    )),
    "tcp": Header(TCP, True, (
        Field("sport", 0, 2, retain=_U16), Field("dport", 2, 2, retain=_U16),
        Field("flags", 13, 1),
    )),
    "udp": Header(UDP, True, (Field("sport", 0, 2, retain=_U16), Field("dport", 2, 2, retain=_U16))),
    "eth": Header(ETH, True, (
        Field("type", 12, 2, retain=_U16), Field("dst", 0, 6, TMAC, _U32),
        Field("src", 6, 6, TMAC, _U32),
    )),
    "icmp": Header(NETWORK, False, ()),  # tc's icmp parser takes no field at all
}


def find(header: Header, word: str, extended: bool) -> Field | None:
    """The field ``word`` names in ``header`` (the first in tc's order), or None."""
    for field in header.fields:
        if field.network_only and extended:
            return None
        if word == field.name or (field.prefix and word and field.name.startswith(word)):
            return field
    return None
