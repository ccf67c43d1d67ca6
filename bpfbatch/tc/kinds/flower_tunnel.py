"""flower's tunnel and MPLS keys, as ``f_flower.c`` (iproute2 6.1) reads them: ``enc_dst_ip``,
``enc_src_ip``, ``enc_key_id``, ``enc_dst_port``, ``enc_tos``, ``enc_ttl``, ``geneve_opts``,
``vxlan_opts``, ``erspan_opts``, ``gtp_opts`` and ``mpls_label``/``mpls_tc``/``mpls_bos``/
``mpls_ttl`` or ``mpls lse depth N [label L] [tc T] [bos B] [ttl T] [lse ...]``.

flower's loop (:mod:`.flower`) hands each key word to :func:`parse_key`, which takes the words
tc's if-chain gives these keys and appends the attributes tc adds for them, in tc's order.
"""

from __future__ import annotations

import socket
import struct

from ..action_list import next_arg
from ..encoding import NLA_F_NESTED, encode
from ..grammar import CommandError, Words, get_prefix, matches, unsigned
from . import tunnel_opts
from .flower_values import Bad, number

# linux/pkt_cls.h: TCA_FLOWER_KEY_*
_ENC_KEY_ID = 26
_ENC_IPV4_SRC, _ENC_IPV4_DST, _ENC_IPV6_SRC, _ENC_IPV6_DST = 27, 29, 31, 33  # each + 1: its mask
_ENC_UDP_DST_PORT = 45
_MPLS_TTL, _MPLS_BOS, _MPLS_TC, _MPLS_LABEL = 67, 68, 69, 70
_ENC_IP_TOS, _ENC_IP_TTL = 80, 82  # each + 1: its mask
_ENC_OPTS, _ENC_OPTS_MASK = 84, 85
_MPLS_OPTS = 99
_MPLS_OPTS_LSE = 1
# TCA_FLOWER_KEY_MPLS_OPT_LSE_*
_LSE_DEPTH, _LSE_TTL, _LSE_BOS, _LSE_TC, _LSE_LABEL = 1, 2, 3, 4, 5

_ETH_P_MPLS = (0x8847, 0x8848)  # ETH_P_MPLS_UC, ETH_P_MPLS_MC
_MPLS_OLD = frozenset((_MPLS_TTL, _MPLS_BOS, _MPLS_TC, _MPLS_LABEL))


def ip_address(text: str, family: int, v4: int, v6: int) -> list[tuple[int, bytes]]:
    """``__flower_parse_ip_addr``: ``get_prefix(text, family)`` (tc's words and status 1 where
    it fails) → the address as given under ``v4`` or ``v6`` (AF_UNSPEC's ``default``/``any``
    take v6, with no bytes: tc's quirk), then its prefix as a mask of as many bytes under the
    number after it."""
    read, address, bits = get_prefix(text, family)
    size = len(address)
    mask = (((1 << bits) - 1) << (8 * size - bits)).to_bytes(size, "big")
    attr = v4 if read == socket.AF_INET else v6
    return [(attr, address), (attr + 1, mask)]


def tos_ttl(text: str) -> tuple[int, int] | None:
    """``flower_parse_ip_tos_ttl``: ``VALUE[/MASK]``, the value ``get_u8`` in base 10 or else
    16, the mask in base 16 (0xff when not given) → (value, mask); None where it fails."""
    value, slash, mask = text.partition("/")
    read = unsigned(value, 10, 8)
    read = unsigned(value, 16, 8) if read is None else read
    mask_read = unsigned(mask, 16, 8) if slash else 0xFF
    if read is None or mask_read is None:
        return None
    return read, mask_read


def parse_key(w: Words, attrs: list[tuple[int, bytes]], types: tuple[int, int, int]) -> bool:
    """One of these keys at the cursor: consume it and its values (the cursor then on the next
    unread word), append tc's attributes for it to ``attrs`` (``types``: flower's eth_type,
    vlan_ethtype, cvlan_ethtype so far, host order) and return True; False, nothing moved, for
    any other word — also for words that an earlier key of tc's chain takes (``v`` is
    ``verbose``), so the caller may ask before its own keys. CommandError with tc's words."""
    word = w.peek()
    if not word or word[0] not in "megv" or matches(word, "verbose"):
        return False
    for name, parse in _KEYS:
        if word == name if name == "gtp_opts" else matches(word, name):  # gtp_opts: strcmp
            try:
                parse(w, attrs, types[0], name)
            except Bad as failed:  # the key's reader returned -1
                said = f"{failed.text}\n" if failed.text else ""
                raise CommandError(f'{said}Illegal "{name}"') from None
            return True
    return False


def _enc_ip(v4: int, v6: int):
    def parse(w: Words, attrs: list, eth_type: int, name: str) -> None:
        # flower_parse_ip_addr(..., 0, ...): any family; get_prefix exits where it fails, so
        # tc's 'Illegal "enc_dst_ip"' after it is never printed.
        attrs += ip_address(next_arg(w), socket.AF_UNSPEC, v4, v6)
        w.pos += 1
    return parse


def _number(attr: int, form: str, base: int, bits: int):
    """A key of one number: ``get_be32``/``get_be16`` in ``base``."""
    def parse(w: Words, attrs: list, eth_type: int, name: str) -> None:
        attrs.append((attr, struct.pack(form, number(next_arg(w), base, bits))))
        w.pos += 1
    return parse


def _tos_ttl(attr: int):
    def parse(w: Words, attrs: list, eth_type: int, name: str) -> None:
        read = tos_ttl(next_arg(w))
        if read is None:
            raise Bad
        attrs += ((attr, bytes((read[0],))), (attr + 1, bytes((read[1],))))
        w.pos += 1
    return parse


def _option_block(text: str, readers: tuple, block: int, unknown: str) -> bytes:
    """One option's ``:``-fields as ``strsep`` splits them (an empty field is skipped but
    keeps its place), each read by the reader at its place, as the encoded ``block`` nest
    (NLA_F_NESTED on all but geneve's, as tc sets it). A field past the readers: tc's words
    ``Unknown "<unknown>" type``, once those before it have been read."""
    tokens = text.split(":")
    fields = tunnel_opts.fields(tokens[:len(readers)], readers)
    if fields is None:
        raise Bad
    if len(tokens) > len(readers):
        raise Bad(f'Unknown "{unknown}" type')
    flag = 0 if block == tunnel_opts.GENEVE else NLA_F_NESTED
    return encode(((block | flag, fields),))


def _geneve(text: str) -> tuple[list, list]:
    """``flower_parse_enc_opts_geneve``: ``CLASS:TYPE:DATA[/MASK][,...]``, each key all three
    fields, non-empty (``flower_check_enc_opt_key``); a missing mask is ``ffff:ff:`` and an
    ``f`` for each digit of DATA. The keys, then the masks, as geneve blocks."""
    keys, masks = [], []
    for option in text.split(","):
        key, slash, mask = option.partition("/")
        if not all(key.split(":")) or key.count(":") != 2:
            raise Bad
        keys.append(key)
        masks.append(mask if slash else "ffff:ff:" + "f" * len(key.rpartition(":")[2]))
    return ([_option_block(key, tunnel_opts.GENEVE_FIELDS, tunnel_opts.GENEVE, "geneve_opts")
             for key in keys],
            [_option_block(mask, tunnel_opts.GENEVE_FIELDS, tunnel_opts.GENEVE, "geneve_opts")
             for mask in masks])


def _vxlan(text: str) -> tuple[list, list]:
    """``flower_parse_enc_opts_vxlan``: ``GBP[/MASK]``, the mask 0xffffffff when not given."""
    key, slash, mask = text.partition("/")
    blocks = []
    for gbp in (key, mask if slash else "0xffffffff"):
        fields = tunnel_opts.vxlan_gbp(gbp)
        if fields is None:
            raise Bad
        blocks.append([encode(((tunnel_opts.VXLAN | NLA_F_NESTED, fields),))])
    return blocks[0], blocks[1]


def _erspan(text: str) -> tuple[list, list]:
    """``flower_parse_enc_opts_erspan``: ``VERSION:INDEX:DIR:HWID[/MASK]``, a missing mask the
    key's VERSION then ``:0xffffffff:0xff:0xff``. tc's quirks kept: a field past HWID is
    ``Unknown "geneve_opts" type``; where tc overruns its buffer and aborts (no ``/`` and no
    ``:``), the line is refused as illegal."""
    key, slash, mask = text.partition("/")
    if not slash:
        if ":" not in key:
            raise Bad
        mask = key.partition(":")[0] + ":0xffffffff:0xff:0xff"
    return ([_option_block(key, tunnel_opts.ERSPAN_FIELDS, tunnel_opts.ERSPAN, "geneve_opts")],
            [_option_block(mask, tunnel_opts.ERSPAN_FIELDS, tunnel_opts.ERSPAN, "geneve_opts")])


def _gtp(text: str) -> tuple[list, list]:
    """``flower_parse_enc_opts_gtp``: ``PDU_TYPE:QFI[/MASK]`` in hex, the mask ``ff:ff`` when
    not given; tc reads two fields and no more, and where one is missing (where tc reads a
    NULL and crashes) the line is refused as illegal."""
    key, slash, mask = text.partition("/")
    blocks = []
    for option in (key, mask if slash else "ff:ff"):
        tokens = option.split(":")
        if len(tokens) < 2:
            raise Bad
        blocks.append([_option_block(":".join(tokens[:2]), tunnel_opts.GTP_FIELDS,
                                     tunnel_opts.GTP, "gtp_opts")])
    return blocks[0], blocks[1]


def _options(read, flag: int):
    """An ``*_opts`` key: ENC_OPTS { the key's blocks } then ENC_OPTS_MASK { the masks' },
    NLA_F_NESTED on both where ``flag``."""
    def parse(w: Words, attrs: list, eth_type: int, name: str) -> None:
        keys, masks = read(next_arg(w))
        attrs += ((_ENC_OPTS | flag, b"".join(keys)), (_ENC_OPTS_MASK | flag, b"".join(masks)))
        w.pos += 1
    return parse


def _mpls_checked(w: Words, attrs: list, eth_type: int, name: str, format_new: bool) -> str:
    """The checks every mpls key makes, in tc's order: its value is there (tc exits
    otherwise), the ethertype is MPLS, and the other format (``mpls`` or the single-field
    keys) was not used; the value."""
    value = next_arg(w)
    if eth_type not in _ETH_P_MPLS:
        raise CommandError(f'Can\'t set "{name}" if ethertype isn\'t MPLS')
    used = {attr & ~NLA_F_NESTED for attr, _ in attrs}
    if format_new and used & _MPLS_OLD:
        raise CommandError('Can\'t set "mpls" if "mpls_label", "mpls_tc", "mpls_bos" or '
                           '"mpls_ttl" is set')
    if not format_new and _MPLS_OPTS in used:
        raise CommandError(f'Can\'t set "{name}" if "mpls" is set')
    return value


def _field(attr: int, form: str, most: int):
    """A number of an MPLS label stack entry: ``get_u32``/``get_u8`` in base 10, at most
    ``most`` (its field's width) → (attribute, read) where read is None where it fails."""
    def read(text: str) -> bytes | None:
        value = unsigned(text, 10, 32 if form == "=I" else 8)
        return None if value is None or value & ~most else struct.pack(form, value)
    return attr, read


_LABEL, _TC, _BOS, _TTL = ("=I", 0xFFFFF), ("B", 7), ("B", 1), ("B", 0xFF)
#: ``mpls_label``/``mpls_tc``/``mpls_bos``/``mpls_ttl``: attribute and reader.
_SINGLE = {"mpls_label": _field(_MPLS_LABEL, *_LABEL), "mpls_tc": _field(_MPLS_TC, *_TC),
           "mpls_bos": _field(_MPLS_BOS, *_BOS), "mpls_ttl": _field(_MPLS_TTL, *_TTL)}
#: ``lse``'s words in tc's order of checks (``t`` is ``tc``): attribute and reader.
_LSE = {"depth": _field(_LSE_DEPTH, "B", 0xFF), "label": _field(_LSE_LABEL, *_LABEL),
        "tc": _field(_LSE_TC, *_TC), "bos": _field(_LSE_BOS, *_BOS),
        "ttl": _field(_LSE_TTL, *_TTL)}


def _mpls_single(w: Words, attrs: list, eth_type: int, name: str) -> None:
    attr, read = _SINGLE[name]
    value = read(_mpls_checked(w, attrs, eth_type, name, False))
    if value is None:
        raise Bad
    attrs.append((attr, value))
    w.pos += 1


def _mpls(w: Words, attrs: list, eth_type: int, name: str) -> None:
    """``mpls [lse depth N [label L] [tc T] [bos B] [ttl T]] ...``: MPLS_OPTS { LSE { ... }
    ... }, the cursor left on the first word that is not ``lse`` or an entry's (which may be
    none: an empty MPLS_OPTS, as tc sends it)."""
    _mpls_checked(w, attrs, eth_type, name, True)
    entries = []
    while matches(w.peek(), "lse"):
        next_arg(w)
        entries.append((_MPLS_OPTS_LSE | NLA_F_NESTED, _lse(w)))
    attrs.append((_MPLS_OPTS | NLA_F_NESTED, encode(entries)))


def _lse(w: Words) -> bytes:
    """``flower_parse_mpls_lse``: an entry's words up to the first other one; ``depth`` (at
    least 1) must be among them (tc exits otherwise)."""
    fields = []
    depth = False
    while (word := w.peek()) is not None:
        name = next((name for name in _LSE if matches(word, name)), None)
        if name is None:
            break
        attr, read = _LSE[name]
        value = read(next_arg(w))
        if value is None or name == "depth" and value == b"\0":
            raise CommandError(f'Illegal "{name}"')  # the entry's word, not the key's
        depth = depth or name == "depth"
        fields.append((attr, value))
        w.pos += 1
    if not depth:
        raise CommandError('Error: argument "depth" is required', fatal=True)
    return encode(fields)


#: The keys in the order of tc's if-chain (a prefix is the first one's it matches).
_KEYS = (("mpls", _mpls), ("mpls_label", _mpls_single), ("mpls_tc", _mpls_single),
         ("mpls_bos", _mpls_single), ("mpls_ttl", _mpls_single),
         ("enc_dst_ip", _enc_ip(_ENC_IPV4_DST, _ENC_IPV6_DST)),
         ("enc_src_ip", _enc_ip(_ENC_IPV4_SRC, _ENC_IPV6_SRC)),
         ("enc_key_id", _number(_ENC_KEY_ID, "!I", 10, 32)),
         ("enc_dst_port", _number(_ENC_UDP_DST_PORT, "!H", 10, 16)),
         ("enc_tos", _tos_ttl(_ENC_IP_TOS)), ("enc_ttl", _tos_ttl(_ENC_IP_TTL)),
         ("geneve_opts", _options(_geneve, 0)), ("vxlan_opts", _options(_vxlan, NLA_F_NESTED)),
         ("erspan_opts", _options(_erspan, NLA_F_NESTED)),
         ("gtp_opts", _options(_gtp, NLA_F_NESTED)))
