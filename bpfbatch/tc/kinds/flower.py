"""flower (``f_flower.c``, iproute2 6.1): ``flower [MATCH ...] [verbose] [skip_sw|skip_hw]
[classid ID | hw_tc TC] [action ...]``; tc's usage, words, order of checks and attributes.

tc appends each key's attributes as it reads the line, then FLAGS, the ``ip_flags`` pair and
the filter's ethertype (``protocol``; not when it is ``all``); so does :func:`parse_filter`,
into a :class:`~.common.Listed` sent as it is. Keys whose values depend on what came before
read flower's running state as tc's variables hold it: the ethertype (the filter's protocol,
replaced by ``vlan_ethtype``, ``cvlan_ethtype`` and ``ppp_proto``), the VLAN ethertype, the
number of VLANs and ``ip_proto``. The tunnel and MPLS keys are :mod:`.flower_tunnel`'s.

Kernels built without cls_flower refuse the filter: the kernel's refusal is then the line's
error, as with tc."""

from __future__ import annotations

import socket

from .. import specs as S
from ..grammar import CommandError, Words, invalid, matches, parse_classid, unsigned, what_is
from ..numbers import strtoul
from ..resolve import IFNAMSIZ
from . import flower_tunnel
from . import flower_values as V
from .flower_tunnel import ip_address, tos_ttl
from .common import Listed, actions_attr, next_value
from .ct import labels

NAMES = ("flower",)

USAGE = """\
Usage: ... flower\t[ MATCH-LIST ] [ verbose ]
\t\t\t[ skip_sw | skip_hw ]
\t\t\t[ action ACTION-SPEC ] [ classid CLASSID ]

Where: MATCH-LIST := [ MATCH-LIST ] MATCH
       MATCH      := {\tindev DEV-NAME |
\t\t\tnum_of_vlans VLANS_COUNT |
\t\t\tvlan_id VID |
\t\t\tvlan_prio PRIORITY |
\t\t\tvlan_ethtype [ ipv4 | ipv6 | ETH-TYPE ] |
\t\t\tcvlan_id VID |
\t\t\tcvlan_prio PRIORITY |
\t\t\tcvlan_ethtype [ ipv4 | ipv6 | ETH-TYPE ] |
\t\t\tpppoe_sid PSID |
\t\t\tppp_proto [ ipv4 | ipv6 | mpls_uc | mpls_mc | PPP_PROTO ]\
\t\t\tdst_mac MASKED-LLADDR |
\t\t\tsrc_mac MASKED-LLADDR |
\t\t\tip_proto [tcp | udp | sctp | icmp | icmpv6 | IP-PROTO ] |
\t\t\tip_tos MASKED-IP_TOS |
\t\t\tip_ttl MASKED-IP_TTL |
\t\t\tmpls LSE-LIST |
\t\t\tmpls_label LABEL |
\t\t\tmpls_tc TC |
\t\t\tmpls_bos BOS |
\t\t\tmpls_ttl TTL |
\t\t\tdst_ip PREFIX |
\t\t\tsrc_ip PREFIX |
\t\t\tdst_port PORT-NUMBER |
\t\t\tsrc_port PORT-NUMBER |
\t\t\ttcp_flags MASKED-TCP_FLAGS |
\t\t\ttype MASKED-ICMP-TYPE |
\t\t\tcode MASKED-ICMP-CODE |
\t\t\tarp_tip IPV4-PREFIX |
\t\t\tarp_sip IPV4-PREFIX |
\t\t\tarp_op [ request | reply | OP ] |
\t\t\tarp_tha MASKED-LLADDR |
\t\t\tarp_sha MASKED-LLADDR |
\t\t\tenc_dst_ip [ IPV4-ADDR | IPV6-ADDR ] |
\t\t\tenc_src_ip [ IPV4-ADDR | IPV6-ADDR ] |
\t\t\tenc_key_id [ KEY-ID ] |
\t\t\tenc_tos MASKED-IP_TOS |
\t\t\tenc_ttl MASKED-IP_TTL |
\t\t\tgeneve_opts MASKED-OPTIONS |
\t\t\tvxlan_opts MASKED-OPTIONS |
                       erspan_opts MASKED-OPTIONS |
\t\t\tgtp_opts MASKED-OPTIONS |
\t\t\tip_flags IP-FLAGS |
\t\t\tenc_dst_port [ port_number ] |
\t\t\tct_state MASKED_CT_STATE |
\t\t\tct_label MASKED_CT_LABEL |
\t\t\tct_mark MASKED_CT_MARK |
\t\t\tct_zone MASKED_CT_ZONE }
\tLSE-LIST := [ LSE-LIST ] LSE
\tLSE := lse depth DEPTH { label LABEL | tc TC | bos BOS | ttl TTL }
\tFILTERID := X:Y:Z
\tMASKED_LLADDR := { LLADDR | LLADDR/MASK | LLADDR/BITS }
\tMASKED_CT_STATE := combination of {+|-} and flags trk,est,new,rel,rpl,inv
\tACTION-SPEC := ... look at individual actions

NOTE:\tCLASSID, IP-PROTO are parsed as hexadecimal input.
NOTE:\tThere can be only used one mask per one prio. If user needs
\tto specify different mask, he has to use different prio."""

# linux/pkt_cls.h TCA_FLOWER_*
_CLASSID, _INDEV, _ACT, _ETH_DST, _ETH_DST_MASK, _ETH_SRC, _ETH_SRC_MASK, _ETH_TYPE, \
    _IP_PROTO = range(1, 10)
_IPV4_SRC, _IPV4_DST, _IPV6_SRC, _IPV6_DST = 10, 12, 14, 16  # each mask the next number
_FLAGS, _VLAN_ID, _VLAN_PRIO, _VLAN_ETH_TYPE = 22, 23, 24, 25
_KEY_FLAGS, _KEY_FLAGS_MASK = 47, 48
_ARP_SIP, _ARP_TIP, _ARP_OP, _ARP_SHA, _ARP_THA = 57, 59, 61, 63, 65  # each mask the next
_TCP_FLAGS, _IP_TOS, _IP_TTL = 71, 73, 75  # each mask the next
_CVLAN_ID, _CVLAN_PRIO, _CVLAN_ETH_TYPE = 77, 78, 79
_CT_STATE, _CT_ZONE, _CT_MARK, _CT_LABELS = 91, 93, 95, 97  # each mask the next
_NUM_OF_VLANS, _PPPOE_SID, _PPP_PROTO = 102, 103, 104
#: (type, type mask) of ICMP's type and code, by (ethertype, ip_proto).
_ICMP = {(S.ETH_P_IP, socket.IPPROTO_ICMP): {"type": (51, 52), "code": (49, 50)},
         (S.ETH_P_IPV6, socket.IPPROTO_ICMPV6): {"type": (55, 56), "code": (53, 54)}}
#: (port, port mask, range min, range max) of the source and destination, by ip_proto.
_PORTS = {socket.IPPROTO_TCP: {"src": (18, 35, 87, 88), "dst": (19, 36, 89, 90)},
          socket.IPPROTO_UDP: {"src": (20, 37, 87, 88), "dst": (21, 38, 89, 90)},
          socket.IPPROTO_SCTP: {"src": (41, 39, 87, 88), "dst": (42, 40, 89, 90)}}

_ETH_P_8021AD, _ETH_P_RARP, _ETH_P_PPP_SES = 0x88A8, 0x8035, 0x8864
_ETH_P_MPLS_UC, _ETH_P_MPLS_MC = 0x8847, 0x8848
_TC_QOPT_MAX_QUEUE, _TC_H_MIN_PRIORITY = 16, 0xFFE0
_CLS_FLAGS_VERBOSE = 1 << 4
#: ``ppp_proto_names`` (``lib/ppp_proto.c``, matched case-insensitively).
_PPP_PROTOCOLS = {"ip": 0x21, "at": 0x29, "ipx": 0x2B, "vjc_comp": 0x2D, "vjc_uncomp": 0x2F,
                  "mp": 0x3D, "ipv6": 0x57, "compfrag": 0xFB, "comp": 0xFD, "mpls_uc": 0x281,
                  "mpls_mc": 0x283, "ipcp": 0x8021, "atcp": 0x8029, "ipxcp": 0x802B,
                  "ipv6cp": 0x8057, "ccpfrag": 0x80FB, "ccp": 0x80FD, "mplscp": 0x80FD,
                  "lcp": 0xC021, "pap": 0xC023, "lqr": 0xC025, "chap": 0xC223, "cbcp": 0xC029}
#: The ethertype a PPP protocol sets for the keys after it.
_PPP_ETHERTYPES = {0x21: S.ETH_P_IP, 0x57: S.ETH_P_IPV6, 0x281: _ETH_P_MPLS_UC,
                   0x283: _ETH_P_MPLS_MC}
_ARP_OPS = {"request": 1, "reply": 2}


class _State:
    """What ``flower_parse_opt`` keeps while it reads a line: the attributes so far, the
    ethertypes, VLAN count, ip_proto (0xff: none), FLAGS and the ``ip_flags`` pair."""

    __slots__ = ("attrs", "tc_proto", "eth_type", "vlan_ethtype", "cvlan_ethtype",
                 "num_of_vlans", "ip_proto", "flags", "mtf", "mtf_mask", "parent")

    def __init__(self, protocol: int, parent: int) -> None:
        self.attrs: list = []
        self.tc_proto = self.eth_type = protocol
        self.vlan_ethtype = self.cvlan_ethtype = self.num_of_vlans = 0
        self.ip_proto = 0xFF
        self.flags = self.mtf = self.mtf_mask = 0
        self.parent = parent


def parse_filter(w: Words, protocol: int = S.ETH_P_ALL, parent: int = 0) -> Listed:
    """tc's ``flower_parse_opt``, the cursor past ``flower``; ``protocol`` and ``parent``: the
    filter's ethertype and parent as tc holds them in the message's header (its default
    protocol: ``all`` for add/replace, 0 otherwise)."""
    state = _State(protocol, parent)
    attrs = state.attrs
    while (word := w.peek()) is not None:
        key = _KEYS.get(word) or _prefixed(word)
        if key is not None:
            read, takes_value, illegal = key
            if takes_value:
                next_value(w)
            try:
                read(state, w.peek())
            except V.Bad as exc:
                raise CommandError(f"{exc.text}\n{illegal}" if exc.text else illegal) from None
        elif flower_tunnel.parse_key(w, attrs, (state.eth_type, state.vlan_ethtype,
                                                state.cvlan_ethtype)):
            continue
        elif matches(word, "action"):
            attrs.append(actions_attr(w, _ACT))
            continue
        elif word == "help":
            raise CommandError(USAGE)
        else:
            raise CommandError(what_is(word, USAGE))
        w.pos += 1
    attrs.append((_FLAGS, V.U32.pack(state.flags)))
    if state.mtf_mask:
        attrs += ((_KEY_FLAGS, V.BE32.pack(state.mtf)), (_KEY_FLAGS_MASK, V.BE32.pack(state.mtf_mask)))
    if state.tc_proto != S.ETH_P_ALL:
        attrs.append((_ETH_TYPE, V.BE16.pack(state.tc_proto)))
    return Listed("flower", tuple(attrs), sends_options=True)


parse_filter.reads_header = True  # the filter's protocol and parent, as tc's message holds them


def _prefixed(word: str):
    """The key ``word`` abbreviates, the first in tc's order (None: not one of these; tc's
    ``matches`` takes no empty word)."""
    if not word:
        return None
    for name in _ORDER:
        if name.startswith(word) and name not in _EXACT:
            return _KEYS[name]
    return None


# --- the keys, each reading its value into the state: (reader, takes a value, tc's words) -------


def _classid(state: _State, value: str) -> None:
    classid = parse_classid(value)
    if classid is None:
        raise V.Bad
    state.attrs.append((_CLASSID, V.U32.pack(classid)))


def _hw_tc(state: _State, value: str) -> None:
    tc, end, _ = strtoul(value)  # into a __u32: 2**32 is TC 0, as in tc
    if end != len(value):
        raise CommandError("Illegal TC index")
    if (tc & 0xFFFFFFFF) >= _TC_QOPT_MAX_QUEUE:
        raise CommandError("TC index exceeds max range")
    classid = state.parent & 0xFFFF0000 | (tc + _TC_H_MIN_PRIORITY) & 0xFFFF
    state.attrs.append((_CLASSID, V.U32.pack(classid)))


def _ip_flags(state: _State, value: str) -> None:
    state.mtf, state.mtf_mask = V.ip_flags(value, state.mtf, state.mtf_mask)


def _flag(bit: int):
    def read(state: _State, value: str) -> None:
        state.flags |= bit
    return read


def _indev(state: _State, value: str) -> None:
    if not value or len(value.encode()) >= IFNAMSIZ or any(c == "/" or c in " \t\n\v\f\r"
                                                              for c in value):
        raise invalid(value, '"indev" not a valid ifname')
    state.attrs.append((_INDEV, value.encode() + b"\0"))


def _num_of_vlans(state: _State, value: str) -> None:
    state.num_of_vlans = V.number(value, 10, 8)
    state.attrs.append((_NUM_OF_VLANS, V.U8.pack(state.num_of_vlans)))


def _is_vlan(ethertype: int, enough_vlans: bool) -> bool:
    """``eth_type_vlan``."""
    return ethertype in (S.ETH_P_8021Q, _ETH_P_8021AD) or enough_vlans


_OUTER = ('Can\'t set "{}" if ethertype isn\'t 802.1Q or 802.1AD and num_of_vlans is 0')
_INNER = ('Can\'t set "{}" if inner vlan ethertype isn\'t 802.1Q or 802.1AD and num_of_vlans is '
          'less than 2')


def _vlan_field(name: str, type_: int, inner: bool, bits: int, limit: int):
    """``vlan_id``/``vlan_prio``/``cvlan_id``/``cvlan_prio``: the ethertype checked first,
    then a decimal number of at most ``limit``."""
    pack = V.U16.pack if bits == 16 else V.U8.pack

    def read(state: _State, value: str) -> None:
        if not (_is_vlan(state.vlan_ethtype, state.num_of_vlans > 1) if inner
                else _is_vlan(state.tc_proto, state.num_of_vlans > 0)):
            raise CommandError((_INNER if inner else _OUTER).format(name))
        number = unsigned(value, 10, bits=bits)
        if number is None or number & ~limit:
            raise CommandError(f'Illegal "{name}"')
        state.attrs.append((type_, pack(number)))
    return read


def _vlan_ethtype(state: _State, value: str) -> None:
    state.vlan_ethtype = state.eth_type = _ethtype(state, value, state.eth_type,
                                                   state.num_of_vlans > 0, "vlan_ethtype")


def _cvlan_ethtype(state: _State, value: str) -> None:
    state.cvlan_ethtype = state.eth_type = _ethtype(state, value, state.vlan_ethtype,
                                                    state.num_of_vlans > 1, "cvlan_ethtype")


def _ethtype(state: _State, value: str, outer: int, enough_vlans: bool, name: str) -> int:
    """``flower_parse_vlan_eth_type``: the ethertype inside a VLAN of ethertype ``outer``."""
    if not _is_vlan(outer, enough_vlans):
        raise CommandError(f'Can\'t set "{name}" if ethertype isn\'t 802.1Q or 802.1AD and '
                           f'num_of_vlans {"is 0" if name == "vlan_ethtype" else "less than 2"}')
    ethertype = S.protocol_number(value)
    if ethertype is None:
        raise invalid(value, "invalid vlan_ethtype")  # cvlan's too, as tc says
    state.attrs.append((_VLAN_ETH_TYPE if name == "vlan_ethtype" else _CVLAN_ETH_TYPE,
                        V.BE16.pack(ethertype)))
    return ethertype


def _eth_addr(addr_type: int):
    def read(state: _State, value: str) -> None:
        state.attrs += V.eth_addr(value, addr_type, addr_type + 1)
    return read


#: ``ip_proto``'s names (a prefix of one is it, in this order): number, the only ethertype.
_IP_PROTOS = (("tcp", socket.IPPROTO_TCP, None), ("udp", socket.IPPROTO_UDP, None),
              ("sctp", socket.IPPROTO_SCTP, None), ("icmp", socket.IPPROTO_ICMP, S.ETH_P_IP),
              ("icmpv6", socket.IPPROTO_ICMPV6, S.ETH_P_IPV6))


def _ip_proto(state: _State, value: str) -> None:
    """``flower_parse_ip_proto``: a name (a prefix of it), else a hex u8; IP and IPv6 only."""
    wrong = V.Bad('Illegal "eth_type" for ip proto')
    if state.eth_type not in (S.ETH_P_IP, S.ETH_P_IPV6):
        raise wrong
    named = next((entry for entry in _IP_PROTOS if matches(value, entry[0])), None)
    if named is None:
        proto = V.number(value, 16, 8)
    elif named[2] is not None and state.eth_type != named[2]:
        raise wrong
    else:
        proto = named[1]
    state.ip_proto = proto
    state.attrs.append((_IP_PROTO, V.U8.pack(proto)))


def _tos_ttl(key_type: int):
    def read(state: _State, value: str) -> None:
        read = tos_ttl(value)
        if read is None:
            raise V.Bad
        state.attrs += ((key_type, V.U8.pack(read[0])), (key_type + 1, V.U8.pack(read[1])))
    return read


def _ip_addr(v4_type: int, v6_type: int):
    """``flower_parse_ip_addr``: the family the ethertype says (none when it is 0)."""
    families = {S.ETH_P_IP: socket.AF_INET, S.ETH_P_IPV6: socket.AF_INET6, 0: socket.AF_UNSPEC}

    def read(state: _State, value: str) -> None:
        family = families.get(state.eth_type)
        if family is None:
            raise V.Bad
        state.attrs += ip_address(value, family, v4_type, v6_type)
    return read


def _port(end: str):
    def read(state: _State, value: str) -> None:
        types = _PORTS.get(state.ip_proto)
        state.attrs += V.port(value, types and types[end])
    return read


def _tcp_flags(state: _State, value: str) -> None:
    state.attrs += V.tcp_flags(value, _TCP_FLAGS, _TCP_FLAGS + 1)


def _icmp(field: str):
    def read(state: _State, value: str) -> None:
        types = _ICMP.get((state.eth_type, state.ip_proto))
        if types is None:
            raise V.Bad
        state.attrs += V.masked(value, *types[field], 8, base=10)
    return read


def _is_arp(state: _State) -> None:
    if state.eth_type not in (S.ETH_P_ARP, _ETH_P_RARP):
        raise V.Bad


def _arp_ip(type_: int):
    def read(state: _State, value: str) -> None:
        _is_arp(state)
        state.attrs += ip_address(value, socket.AF_INET, type_, type_)
    return read


def _arp_op(state: _State, value: str) -> None:
    _is_arp(state)
    state.attrs += V.masked(value, _ARP_OP, _ARP_OP + 1, 8, base=10, names=_ARP_OPS,
                            valid=lambda op: op <= 2)


def _need_pppoe(state: _State, name: str) -> None:
    if state.eth_type != _ETH_P_PPP_SES:
        raise CommandError(f'Can\'t set "{name}" if ethertype isn\'t PPPoE session')


def _pppoe_sid(state: _State, value: str) -> None:
    _need_pppoe(state, "pppoe_sid")
    state.attrs.append((_PPPOE_SID, V.BE16.pack(V.number(value, 10, 16))))


def _ppp_proto(state: _State, value: str) -> None:
    _need_pppoe(state, "ppp_proto")
    proto = _PPP_PROTOCOLS.get(value.lower())
    if proto is None:
        proto = unsigned(value, 0, bits=16)
        if proto is None:
            raise invalid(value, "invalid ppp_proto")
    state.eth_type = _PPP_ETHERTYPES.get(proto, state.eth_type)
    state.attrs.append((_PPP_PROTO, V.BE16.pack(proto)))


def _ct(type_: int, reader):
    def read(state: _State, value: str) -> None:
        state.attrs += reader(value, type_, type_ + 1)
    return read


def _ct_masked(type_: int, bits: int):
    def read(state: _State, value: str) -> None:
        state.attrs += V.masked(value, type_, type_ + 1, bits)
    return read


def _illegal(name: str) -> str:
    return f'Illegal "{name}"'


#: flower's own keys in tc's order of trial (a word takes the first key it abbreviates, but
#: those of :data:`_EXACT`): key → (reader, takes a value, tc's words where the reader fails).
_KEYS = {
    "classid": (_classid, True, _illegal("classid")),
    "flowid": (_classid, True, _illegal("classid")),
    "hw_tc": (_hw_tc, True, ""),
    "ip_flags": (_ip_flags, True, _illegal("ip_flags")),
    "verbose": (_flag(_CLS_FLAGS_VERBOSE), False, ""),
    "skip_hw": (_flag(S.CLS_FLAGS["skip_hw"]), False, ""),
    "skip_sw": (_flag(S.CLS_FLAGS["skip_sw"]), False, ""),
    "ct_state": (_ct(_CT_STATE, V.ct_state), True, _illegal("ct_state")),
    "ct_zone": (_ct_masked(_CT_ZONE, 16), True, _illegal("ct_zone")),
    "ct_mark": (_ct_masked(_CT_MARK, 32), True, _illegal("ct_mark")),
    "ct_label": (_ct(_CT_LABELS, lambda text, *numbers: labels(text, numbers, "")), True,
                 _illegal("ct_label")),
    "indev": (_indev, True, ""),
    "num_of_vlans": (_num_of_vlans, True, _illegal("num_of_vlans")),
    "vlan_id": (_vlan_field("vlan_id", _VLAN_ID, False, 16, 0xFFF), True, ""),
    "vlan_prio": (_vlan_field("vlan_prio", _VLAN_PRIO, False, 8, 7), True, ""),
    "vlan_ethtype": (_vlan_ethtype, True, ""),
    "cvlan_id": (_vlan_field("cvlan_id", _CVLAN_ID, True, 16, 0xFFF), True, ""),
    "cvlan_prio": (_vlan_field("cvlan_prio", _CVLAN_PRIO, True, 8, 7), True, ""),
    "cvlan_ethtype": (_cvlan_ethtype, True, ""),
    "dst_mac": (_eth_addr(_ETH_DST), True, _illegal("dst_mac")),
    "src_mac": (_eth_addr(_ETH_SRC), True, _illegal("src_mac")),
    "ip_proto": (_ip_proto, True, _illegal("ip_proto")),
    "ip_tos": (_tos_ttl(_IP_TOS), True, _illegal("ip_tos")),
    "ip_ttl": (_tos_ttl(_IP_TTL), True, _illegal("ip_ttl")),
    "dst_ip": (_ip_addr(_IPV4_DST, _IPV6_DST), True, _illegal("dst_ip")),
    "src_ip": (_ip_addr(_IPV4_SRC, _IPV6_SRC), True, _illegal("src_ip")),
    "dst_port": (_port("dst"), True, _illegal("dst_port")),
    "src_port": (_port("src"), True, _illegal("src_port")),
    "tcp_flags": (_tcp_flags, True, _illegal("tcp_flags")),
    "type": (_icmp("type"), True, _illegal("icmp type")),
    "code": (_icmp("code"), True, _illegal("icmp code")),
    "arp_tip": (_arp_ip(_ARP_TIP), True, _illegal("arp_tip")),
    "arp_sip": (_arp_ip(_ARP_SIP), True, _illegal("arp_sip")),
    "arp_op": (_arp_op, True, _illegal("arp_op")),
    "arp_tha": (_eth_addr(_ARP_THA), True, _illegal("arp_tha")),
    "arp_sha": (_eth_addr(_ARP_SHA), True, _illegal("arp_sha")),
    "pppoe_sid": (_pppoe_sid, True, _illegal("pppoe_sid")),
    "ppp_proto": (_ppp_proto, True, ""),
}
_ORDER = tuple(_KEYS)
#: The keys tc compares whole (``strcmp``), not as prefixes.
_EXACT = frozenset(("num_of_vlans", "pppoe_sid", "ppp_proto"))
