"""The rtnetlink/tc ABI this package speaks: message types, flags, fixed headers, attribute
numbers and the C structs carried in attributes (from ``linux/rtnetlink.h``, ``pkt_sched.h``,
``pkt_cls.h``, ``tc_act/*.h``). Values only; building messages is :mod:`.rules`' job."""

from __future__ import annotations

import struct
from enum import IntEnum

from .numbers import unsigned


class Msg(IntEnum):
    NEWQDISC = 36
    DELQDISC = 37
    NEWTCLASS = 40
    DELTCLASS = 41
    NEWTFILTER = 44
    DELTFILTER = 45
    GETTFILTER = 46
    NEWACTION = 48
    DELACTION = 49
    GETACTION = 50


# nlmsghdr flags
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_ECHO = 0x8
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
# NLMSG_ERROR reply flags
NLM_F_CAPPED = 0x100
NLM_F_ACK_TLVS = 0x200
NLMSG_ERROR = 2
NLMSGERR_ATTR_MSG = 1

#: Flags of each tc verb, as iproute2 6.x sets them (the sender adds REQUEST and ACK). They
#: differ per object: ``filter replace`` is a bare CREATE (tc_filter.c), ``actions change`` is
#: a replace (m_action.c).
QDISC_VERB_FLAGS = {"add": NLM_F_EXCL | NLM_F_CREATE, "replace": NLM_F_CREATE | NLM_F_REPLACE,
                    "del": 0}
CLASS_VERB_FLAGS = {"add": NLM_F_EXCL | NLM_F_CREATE, "replace": NLM_F_CREATE, "change": 0,
                    "del": 0}
FILTER_VERB_FLAGS = {"add": NLM_F_EXCL | NLM_F_CREATE, "replace": NLM_F_CREATE, "change": 0,
                     "del": 0}
ACTION_VERB_FLAGS = {"add": NLM_F_EXCL | NLM_F_CREATE, "replace": NLM_F_CREATE | NLM_F_REPLACE,
                     "change": NLM_F_CREATE | NLM_F_REPLACE, "del": 0}

NLMSGHDR = struct.Struct("=IHHII")
#: struct tcmsg: family, pad, pad, ifindex, handle, parent, info (prio << 16 | protocol).
TCMSG = struct.Struct("=BxxxiIII")
#: struct tcamsg: family, pad, pad.
TCAMSG = struct.Struct("=Bxxx")

# Handles (pkt_sched.h)
TC_H_ROOT = 0xFFFFFFFF
TC_H_INGRESS = 0xFFFFFFF1  # == TC_H_CLSACT
TC_H_MIN_INGRESS = 0xFFF2
TC_H_MIN_EGRESS = 0xFFF3
INGRESS_HANDLE = 0xFFFF0000


def tc_h_make(major: int, minor: int) -> int:
    return (major & 0xFFFF0000) | (minor & 0xFFFF)


ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_ARP = 0x0806
ETH_P_8021Q = 0x8100
#: ``protocol`` names: iproute2 6.1's ll_proto.c table (matched case-insensitively, as it does).
PROTOCOLS = {
    "loop": 0x0060, "pup": 0x0200, "pupat": 0x0201, "ip": ETH_P_IP, "x25": 0x0805,
    "arp": ETH_P_ARP, "bpq": 0x08FF, "ieeepup": 0x0A00, "ieeepupat": 0x0A01, "dec": 0x6000,
    "dna_dl": 0x6001, "dna_rc": 0x6002, "dna_rt": 0x6003, "lat": 0x6004, "diag": 0x6005,
    "cust": 0x6006, "sca": 0x6007, "rarp": 0x8035, "atalk": 0x809B, "aarp": 0x80F3,
    "ipx": 0x8137, "ipv6": ETH_P_IPV6, "ppp_disc": 0x8863, "ppp_ses": 0x8864, "atmmpoa": 0x884C,
    "atmfate": 0x8884, "802_3": 0x0001, "ax25": 0x0002, "all": ETH_P_ALL, "802_2": 0x0004,
    "snap": 0x0005, "ddcmp": 0x0006, "wan_ppp": 0x0007, "ppp_mp": 0x0008, "localtalk": 0x0009,
    "can": 0x000C, "ppptalk": 0x0010, "tr_802_2": 0x0011, "mobitex": 0x0015, "control": 0x0016,
    "irda": 0x0017, "econet": 0x0018, "tipc": 0x88CA, "profinet": 0x8892, "aoe": 0x88A2,
    "ethercat": 0x88A4, "802.1q": ETH_P_8021Q, "802.1ad": 0x88A8, "mpls_uc": 0x8847,
    "mpls_mc": 0x8848, "teb": 0x6558, "lldp": 0x88CC, "ipv4": ETH_P_IP,
}


def protocol_number(word: str) -> int | None:
    """``ll_proto_a2n``: a name from :data:`PROTOCOLS` (any case) or a ``get_u16`` number."""
    found = PROTOCOLS.get(word.lower())
    if found is not None:
        return found
    return unsigned(word, 0, bits=16)


class TCA(IntEnum):
    KIND = 1
    OPTIONS = 2
    CHAIN = 11


class ActAttr(IntEnum):
    """TCA_ACT_* inside one action of a TCA_ACT_TAB / TCA_*_ACT nest."""

    KIND = 1
    OPTIONS = 2
    INDEX = 3
    COOKIE = 6
    FLAGS = 7


TCA_ACT_TAB = 1
#: Most actions one message can carry (TCA_ACT_MAX_PRIO).
TCA_ACT_MAX_PRIO = 32
TCA_ACT_FLAGS_NO_PERCPU_STATS = 1
#: struct nla_bitfield32: value, selector.
BITFIELD32 = struct.Struct("=II")


class Verdict(IntEnum):
    """TC_ACT_* control actions (gact's verdict, mirred's action)."""

    UNSPEC = -1
    OK = 0
    RECLASSIFY = 1
    SHOT = 2
    PIPE = 3
    STOLEN = 4
    TRAP = 8


#: gact verdict words (tc/tc_util.c action_a2n).
GACT_VERDICTS = {"continue": Verdict.UNSPEC, "drop": Verdict.SHOT, "shot": Verdict.SHOT,
                 "pass": Verdict.OK, "ok": Verdict.OK, "reclassify": Verdict.RECLASSIFY,
                 "pipe": Verdict.PIPE, "trap": Verdict.TRAP}
#: ``action_a2n``'s words in its order: a prefix names the first word it begins.
CONTROL_WORDS = ("continue", "drop", "shot", "pass", "ok", "reclassify", "pipe", "goto", "jump",
                 "trap")
#: The largest chain index or jump count a control verdict carries (TC_ACT_EXT_VAL_MASK).
TC_ACT_EXT_VAL_MASK = 0x0FFFFFFF
TCA_GACT_PROB = 3
#: struct tc_gact_p: ptype, pval, paction.
TC_GACT_P = struct.Struct("=HHi")
#: gact's ``random`` types (PGACT_NETRAND, PGACT_DETERM).
GACT_RANDOM = {"netrand": 1, "determ": 2}

TC_ACT_JUMP = 0x10000000
TC_ACT_GOTO_CHAIN = 0x20000000


def control_value(verdict: str) -> int:
    """A control verdict's TC_ACT_* value: a word of :data:`GACT_VERDICTS`, ``jump N`` or
    ``goto chain N`` (``parse_action_control``'s forms)."""
    if verdict.startswith("jump "):
        return TC_ACT_JUMP | int(verdict[5:])
    if verdict.startswith("goto chain "):
        return TC_ACT_GOTO_CHAIN | int(verdict[11:])
    return GACT_VERDICTS[verdict]


TCA_GACT_PARMS = 2
#: struct tc_gact (tc_gen): index, capab, action, refcnt, bindcnt.
TC_GACT = struct.Struct("=IIiii")

TCA_MIRRED_PARMS = 2
#: struct tc_mirred: tc_gen + eaction, ifindex.
TC_MIRRED = struct.Struct("=IIiiiii")
#: (direction, mode) -> (eaction, verdict)
MIRRED_MODES = {
    ("egress", "redirect"): (1, Verdict.STOLEN),
    ("egress", "mirror"): (2, Verdict.PIPE),
    ("ingress", "redirect"): (3, Verdict.STOLEN),
    ("ingress", "mirror"): (4, Verdict.PIPE),
}


class U32Attr(IntEnum):
    """TCA_U32_* (named apart from :class:`~.rules.U32`, the classifier)."""

    CLASSID = 1
    HASH = 2
    LINK = 3
    DIVISOR = 4
    SEL = 5
    POLICE = 6
    ACT = 7
    INDEV = 8
    FLAGS = 11


TC_U32_TERMINAL = 1
#: struct tc_u32_sel header up to hmask: flags, offshift, nkeys, pad, offmask, off, offoff, hoff;
#: then hmask in network order (BE32).
TC_U32_SEL = struct.Struct("=BBBxHHhh")
BE32 = struct.Struct(">I")
#: struct tc_u32_key: mask and val in network order, then off and offmask in host order.
TC_U32_KEY_MATCH = struct.Struct(">II")
TC_U32_KEY_AT = struct.Struct("=ii")


class Bpf(IntEnum):
    ACT = 1
    CLASSID = 3
    OPS_LEN = 4
    OPS = 5
    FD = 6
    NAME = 7
    FLAGS = 8
    FLAGS_GEN = 9


TCA_BPF_FLAG_ACT_DIRECT = 1


class Matchall(IntEnum):
    CLASSID = 1
    ACT = 2
    FLAGS = 3


class Flower(IntEnum):
    CLASSID = 1
    ACT = 3
    KEY_ETH_DST = 4
    KEY_ETH_DST_MASK = 5
    KEY_ETH_SRC = 6
    KEY_ETH_SRC_MASK = 7
    KEY_ETH_TYPE = 8
    FLAGS = 22


# TCA_CLS_FLAGS_*
CLS_FLAGS = {"skip_hw": 1, "skip_sw": 2}

class HtbAttr(IntEnum):
    PARMS = 1
    INIT = 2
    CTAB = 3
    RTAB = 4
    DIRECT_QLEN = 5
    RATE64 = 6
    CEIL64 = 7


TCA_HTB_INIT = HtbAttr.INIT
#: struct tc_htb_glob: version, rate2quantum, defcls, debug, direct_pkts.
TC_HTB_GLOB = struct.Struct("=IIIII")
TC_HTB_PROTOVER = 3
