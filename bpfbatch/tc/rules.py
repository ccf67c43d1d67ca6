"""tc rules as Python objects, and the rtnetlink message each one becomes.

This is the Python API for tools that generate rules: build :class:`Qdisc`, :class:`Filter`
and :class:`Actions` objects (with :class:`Gact` / :class:`Mirred` actions and a
:class:`U32`, :class:`BpfProg` or :class:`Matchall` classifier) and hand them
to :class:`bpfbatch.tc.Session`. The batch-file parser builds the very same objects, so a
rule sent from Python and the equivalent ``tc -b`` line are one code path.

Every ``message()`` returns ``(msg_type, nlmsg_flags, body)``: the body is the fixed tc header
plus the attribute tree of :mod:`.encoding`, laid out in the order iproute2 6.x emits it, so the
bytes equal what ``tc`` sends (the kernel ignores attribute order; the tests compare bytes).
Devices are names or ifindexes; names are resolved through the :class:`~.resolve.Resolver`
cache passed in.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Union

from ..errors import InputError, NotFoundError
from . import specs as S
from .htb import HtbClass
from .bpf_program import EbpfProgram, fd_attrs, ops_attrs
from .resolve import BPF_PROG_TYPE_SCHED_CLS, Resolver
from .encoding import NLA_F_NESTED, Attr, encode, nest, strz, u32

Dev = Union[str, int]


# --- actions -----------------------------------------------------------------------------------


_GACT_KIND = encode((strz(S.ActAttr.KIND, "gact"),))
_MIRRED_KIND = encode((strz(S.ActAttr.KIND, "mirred"),))
_NO_PERCPU = encode((Attr(S.ActAttr.FLAGS, S.BITFIELD32.pack(S.TCA_ACT_FLAGS_NO_PERCPU_STATS,
                                                             S.TCA_ACT_FLAGS_NO_PERCPU_STATS)),))
_ACT_OPTIONS = int(S.ActAttr.OPTIONS) | NLA_F_NESTED


def action_attrs(kind: bytes, options: tuple, no_percpu: bool | int,
                 cookie: bytes | None) -> tuple:
    """KIND (encoded), OPTIONS { ``options`` }, COOKIE and, for no_percpu, FLAGS — every
    action's shape, in iproute2's order (``options``: the kind's own attributes). ``no_percpu``
    may also be the int of TCA_ACT_FLAGS bits tc sets after an action (1 ``no_percpu``, 2
    ``skip_hw``, 4 ``skip_sw``)."""
    options = (_ACT_OPTIONS, options)  # plain pairs: the hottest path
    attrs = (kind, options)
    if cookie is not None:
        attrs += ((S.ActAttr.COOKIE, cookie),)
    if not no_percpu:
        return attrs
    if no_percpu is True:
        return attrs + (_NO_PERCPU,)
    return attrs + ((S.ActAttr.FLAGS, S.BITFIELD32.pack(no_percpu, no_percpu)),)


@dataclasses.dataclass(slots=True)
class Gact:
    """gact: a verdict (``drop``, ``pass``/``ok``, ``pipe``, ``continue``, ``reclassify``,
    ``trap``, ``jump N``, ``goto chain N``); ``prob`` (random type — 1 netrand, 2 determ —,
    verdict, value 0..10000) takes the other verdict at random (tc's ``random``)."""

    verdict: str = "pass"
    index: int = 0
    no_percpu: bool = False
    #: Up to 16 bytes the kernel stores with the action (tc's ``cookie HEX``).
    cookie: bytes | None = None
    prob: tuple[int, str, int] | None = None
    kind = "gact"

    def attrs(self, resolve: Resolver) -> tuple[Attr | bytes, ...]:
        parms = S.TC_GACT.pack(self.index, 0, S.control_value(self.verdict), 0, 0)
        attrs = action_attrs(_GACT_KIND, ((S.TCA_GACT_PARMS, parms),), self.no_percpu, self.cookie)
        if self.prob is None:
            return attrs
        ptype, verdict, value = self.prob
        prob = (S.TCA_GACT_PROB, S.TC_GACT_P.pack(ptype, value, S.control_value(verdict)))
        return (attrs[0], (attrs[1][0], attrs[1][1] + (prob,))) + attrs[2:]


@dataclasses.dataclass(slots=True)
class Mirred:
    """mirred: ``direction`` egress|ingress, ``mode`` redirect|mirror, to ``dev``.

    ``verdict`` overrides the control action (default: stolen for redirect, pipe for mirror).
    An empty ``direction`` names an existing action by ``index`` alone (tc's ``mirred index
    N``: nothing else set).
    """

    direction: str
    mode: str
    dev: Dev
    index: int = 0
    no_percpu: bool = False
    verdict: str | None = None
    cookie: bytes | None = None
    #: Words tc's parser had left at this action (it prints the count when ``dev`` is missing).
    tc_argc: int = dataclasses.field(default=0, compare=False, repr=False)
    kind = "mirred"

    def attrs(self, resolve: Resolver) -> tuple[Attr | bytes, ...]:
        if not self.direction:
            parms = S.TC_MIRRED.pack(self.index, 0, 0, 0, 0, 0, 0)
        else:  # without a mode or a device tc sends zeros there (the kernel refuses them)
            eaction, control = S.MIRRED_MODES.get((self.direction, self.mode), (0, 0))
            if self.verdict is not None:
                control = S.control_value(self.verdict)
            ifindex = self._ifindex(resolve) if self.dev else 0
            parms = S.TC_MIRRED.pack(self.index, 0, control, 0, 0, eaction, ifindex)
        return action_attrs(_MIRRED_KIND, ((S.TCA_MIRRED_PARMS, parms),), self.no_percpu,
                            self.cookie)

    def _ifindex(self, resolve: Resolver) -> int:
        try:
            return resolve.ifindex(self.dev)
        except NotFoundError as exc:
            if not self.tc_argc:
                raise
            raise NotFoundError(f"{exc.message}\nbad action parsing\nparse_action: bad value "
                                f'({self.tc_argc}:mirred)!\nIllegal "action"') from None


@dataclasses.dataclass(slots=True)
class ActionRef:
    """An existing action named by kind and index (what ``actions del`` sends)."""

    kind: str
    index: int

    def attrs(self, resolve: Resolver) -> tuple[Attr, ...]:
        return (strz(S.ActAttr.KIND, self.kind), u32(S.ActAttr.INDEX, self.index))


Action = Union[Gact, Mirred, ActionRef]


def action_tab(type_: int, actions: tuple[Action, ...], resolve: Resolver) -> Attr:
    """Actions nested by order (1, 2, ...) under ``type_`` (TCA_ACT_TAB or a classifier's ACT)."""
    return Attr(type_, tuple(enumerate([action.attrs(resolve) for action in actions], 1)))


def actions_body(attrs: list[tuple[Attr | bytes, ...]]) -> bytes:
    """The body of an actions message whose actions have these attributes (each action's
    ``attrs()``, in order): ``tcamsg``, then TCA_ACT_TAB nesting them by order 1, 2, ...
    Separate from :meth:`Actions.message` so the coalescer can resolve each line's actions on
    their own (a missing device fails that line alone) and still encode all of them once."""
    return S.TCAMSG.pack(0) + encode(((S.TCA_ACT_TAB, tuple(enumerate(attrs, 1))),))


@dataclasses.dataclass(slots=True)
class Actions:
    """``tc actions add|change|replace|del``: standalone actions, at most 32 per message."""

    verb: str
    actions: tuple[Action, ...]

    def __post_init__(self) -> None:
        if not 0 < len(self.actions) <= S.TCA_ACT_MAX_PRIO:
            raise InputError(f"an actions message carries 1..{S.TCA_ACT_MAX_PRIO} actions")

    def message(self, resolve: Resolver) -> tuple[int, int, bytes]:
        msg_type = S.Msg.DELACTION if self.verb == "del" else S.Msg.NEWACTION
        body = actions_body([action.attrs(resolve) for action in self.actions])
        return msg_type, S.ACTION_VERB_FLAGS[self.verb], body


#: ``(msg_type, flags)`` of an ``actions add`` message: the ones that may share a message.
ACTIONS_ADD = (S.Msg.NEWACTION, S.ACTION_VERB_FLAGS["add"])


# --- qdiscs ------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Htb:
    """htb qdisc options: ``default`` class minor id, ``r2q``, ``direct_qlen`` (packets; None:
    the device's queue length)."""

    default: int = 0
    r2q: int = 10
    direct_qlen: int | None = None
    kind = "htb"

    def options(self) -> tuple[Attr, ...]:
        glob = S.TC_HTB_GLOB.pack(S.TC_HTB_PROTOVER, self.r2q, self.default, 0, 0)
        attrs = [Attr(S.TCA_HTB_INIT, glob)]
        if self.direct_qlen is not None:
            attrs.append(u32(S.HtbAttr.DIRECT_QLEN, self.direct_qlen))
        return (nest(S.TCA.OPTIONS, *attrs),)


@dataclasses.dataclass(slots=True)
class Qdisc:
    """``tc qdisc add|del|replace``. ``kind`` is "ingress", "clsact", an :class:`Htb` or None
    (a ``del`` naming only the parent). ingress/clsact take their fixed parent and handle."""

    verb: str
    dev: Dev
    kind: Union[str, Htb, None]
    parent: int = S.TC_H_ROOT
    handle: int = 0

    def message(self, resolve: Resolver) -> tuple[int, int, bytes]:
        parent, handle, attrs = self.parent, self.handle, []
        if self.kind in ("ingress", "clsact"):
            parent, handle = S.TC_H_INGRESS, S.INGRESS_HANDLE
            attrs.append(strz(S.TCA.KIND, self.kind))
        elif isinstance(self.kind, Htb):
            attrs += (strz(S.TCA.KIND, "htb"), *self.kind.options())
        body = S.TCMSG.pack(0, resolve.ifindex(self.dev), handle, parent, 0) + encode(attrs)
        msg_type = S.Msg.DELQDISC if self.verb == "del" else S.Msg.NEWQDISC
        return msg_type, S.QDISC_VERB_FLAGS[self.verb], body


@dataclasses.dataclass(slots=True)
class Class:
    """``tc class add|del|change|replace``: ``classid`` under ``parent``; ``kind`` an
    :class:`~.htb.HtbClass`, or None for a ``del``."""

    verb: str
    dev: Dev
    classid: int
    kind: HtbClass | None = None
    parent: int = 0

    def message(self, resolve: Resolver) -> tuple[int, int, bytes]:
        attrs = [] if self.kind is None else [strz(S.TCA.KIND, self.kind.kind), *self.kind.options()]
        body = S.TCMSG.pack(0, resolve.ifindex(self.dev), self.classid, self.parent, 0) + encode(attrs)
        msg_type = S.Msg.DELTCLASS if self.verb == "del" else S.Msg.NEWTCLASS
        return msg_type, S.CLASS_VERB_FLAGS[self.verb], body


# --- classifiers -------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class U32Key:
    """One 32-bit selector word: ``(packet[off] & mask) == val``, mask/val as the word reads
    in network order; ``offmask`` -1 makes ``off`` count from the next header (``nexthdr+``)."""

    val: int
    mask: int
    off: int
    offmask: int = 0


def u32_key(val: int, mask: int, off: int, offmask: int = 0) -> U32Key:
    """``match u32 VAL MASK at OFF`` (tc's ``pack_key32``)."""
    if not (0 <= val <= 0xFFFFFFFF and 0 <= mask <= 0xFFFFFFFF):
        raise InputError(f"u32 value/mask wider than 32 bits: {val:#x}/{mask:#x}")
    return U32Key(val & mask, mask, off, offmask)


def u16_key(val: int, mask: int, off: int, offmask: int = 0) -> U32Key:
    """``match u16 VAL MASK at OFF`` (tc's ``pack_key16``: the upper half only when ``off`` is
    word-aligned, as tc places it)."""
    if not (0 <= val <= 0xFFFF and 0 <= mask <= 0xFFFF):
        raise InputError(f"u16 value/mask wider than 16 bits: {val:#x}/{mask:#x}")
    shift = 16 if off & 3 == 0 else 0
    return U32Key((val & mask) << shift, mask << shift, off & ~3, offmask)


def u8_key(val: int, mask: int, off: int, offmask: int = 0) -> U32Key:
    """``match u8 VAL MASK at OFF`` (tc's ``pack_key8``)."""
    if not (0 <= val <= 0xFF and 0 <= mask <= 0xFF):
        raise InputError(f"u8 value/mask wider than 8 bits: {val:#x}/{mask:#x}")
    shift = 24 - 8 * (off & 3)
    return U32Key((val & mask) << shift, mask << shift, off & ~3, offmask)


#: ``match ip FIELD``: (key builder, offset, offmask) as tc's ``parse_ip`` has them.
IP_FIELDS = {"sport": (u16_key, 20, 0), "dport": (u16_key, 22, 0), "protocol": (u8_key, 9, 0),
              "tos": (u8_key, 1, 0), "dsfield": (u8_key, 1, 0), "ihl": (u8_key, 0, 0),
              "precedence": (u8_key, 1, 0), "icmp_type": (u8_key, 20, 0),
              "icmp_code": (u8_key, 20, 1)}
#: ``match tcp|udp src|dst`` and ``match icmp type|code``: relative to the next header.
L4_FIELDS = {("tcp", "src"): (u16_key, 0), ("tcp", "dst"): (u16_key, 2),
             ("udp", "src"): (u16_key, 0), ("udp", "dst"): (u16_key, 2),
             ("icmp", "type"): (u8_key, 0), ("icmp", "code"): (u8_key, 1)}


def ipv4_prefix(text: str) -> tuple[int, int]:
    """``A.B.C.D[/LEN|/NETMASK]`` → (address, netmask) as tc's ``get_prefix_1`` reads it."""
    address, slash, length = text.partition("/")
    try:
        addr = int.from_bytes(socket.inet_pton(socket.AF_INET, address), "big")
    except OSError:
        raise InputError(f"bad IPv4 address '{address}'") from None
    if not slash:
        bits = 32
    elif length.isdecimal() and length.isascii():
        bits = int(length)
    else:
        try:
            netmask = int.from_bytes(socket.inet_pton(socket.AF_INET, length), "big")
        except OSError:
            netmask = -1
        bits = 32 - (~netmask & 0xFFFFFFFF).bit_length() if netmask >= 0 else -1
        if bits < 0 or ((0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF) != netmask:
            raise InputError(f"bad netmask '{length}'")
    if not 0 <= bits <= 32:
        raise InputError(f"bad prefix length '{length}'")
    return addr, (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF


def ip_match(field: str, value: str, mask: int | None = None) -> U32Key:
    """The key tc's ``match ip FIELD VALUE [MASK]`` builds (src, dst, sport, dport, protocol,
    tos, ...); InputError when tc would refuse it."""
    if field in ("src", "dst"):
        addr, netmask = ipv4_prefix(value)
        return U32Key(addr & netmask, netmask, 12 if field == "src" else 16)
    build, off, offmask = IP_FIELDS[field]
    try:
        val = int(value, 0)
    except ValueError:
        raise InputError(f"bad {field} value '{value}'") from None
    return build(val, (0xFFFF if build is u16_key else 0xFF) if mask is None else mask, off, offmask)


def pack_keys(keys: list[U32Key]) -> list[U32Key]:
    """Merge keys on the same word as tc's ``pack_key`` does (sport + dport → one key);
    InputError on a contradiction or an unaligned offset."""
    packed: list[U32Key] = []
    for key in keys:
        val = key.val & key.mask
        for i, have in enumerate(packed):
            if have.off == key.off and have.offmask == key.offmask:
                if (val ^ have.val) & key.mask & have.mask:
                    raise InputError("conflicting matches on the same word")
                packed[i] = U32Key(have.val | val, have.mask | key.mask, have.off, have.offmask)
                break
        else:
            if key.off % 4:
                raise InputError("match offset must be a multiple of 4")
            if len(packed) >= 128:
                raise InputError("more than 128 match keys")
            packed.append(U32Key(val, key.mask, key.off, key.offmask))
    return packed


@dataclasses.dataclass(slots=True)
class U32:
    """u32 classifier: ``keys`` (already packed), hash table ``ht``, ``link``, ``divisor``,
    ``hashkey`` (mask, offset), ``classid`` and actions. Handles use tc's ``htid:hash:node``
    numbering (``0x800 << 20`` is table 800:)."""

    keys: tuple[U32Key, ...] = ()
    ht: int = 0
    link: int = 0
    divisor: int = 0
    hashkey: tuple[int, int] | None = None
    classid: int | None = None
    actions: tuple[Action, ...] = ()
    flags: int = 0
    #: Input device name (``indev``), checked by the kernel.
    indev: str | None = None
    #: tc's ``police`` shorthand: a :class:`~.kinds.police.Police` sent as the classifier's
    #: own policer (TCA_U32_POLICE) rather than as an action.
    police: object | None = None
    #: The order tc met these options in, which is the order it emits them in.
    order: tuple[str, ...] = dataclasses.field(
        default=("classid", "divisor", "link", "indev", "actions"), compare=False, repr=False)
    #: Class ids a line gave before its last (``flowid 1:6 classid 1:5``): tc sends each, in
    #: order (the kernel keeps the last).
    earlier_classids: tuple[int, ...] = dataclasses.field(default=(), compare=False, repr=False)
    #: Action lists a line gave before its last (``action drop a pass``): likewise.
    earlier_actions: tuple[tuple[Action, ...], ...] = dataclasses.field(default=(), compare=False,
                                                                        repr=False)
    kind = "u32"

    def options(self, resolve: Resolver, protocol: int) -> tuple[Attr, ...] | None:
        attrs = []
        classids = iter((*self.earlier_classids, self.classid))
        action_lists = iter((*self.earlier_actions, self.actions))
        for name in self.order:
            if name == "classid" and self.classid is not None:
                attrs.append(u32(S.U32Attr.CLASSID, next(classids)))
            elif name == "divisor" and self.divisor:
                attrs.append(u32(S.U32Attr.DIVISOR, self.divisor))
            elif name == "link" and self.link:
                attrs.append(u32(S.U32Attr.LINK, self.link))
            elif name == "indev" and self.indev is not None:
                attrs.append(strz(S.U32Attr.INDEV, self.indev))
            elif name == "actions" and self.actions:
                attrs.append(action_tab(S.U32Attr.ACT, next(action_lists), resolve))
            elif name == "police" and self.police is not None:
                attrs.append((S.U32Attr.POLICE, self.police.options()))
        if self.ht:
            attrs.append(u32(S.U32Attr.HASH, self.ht))
        if self.keys or self.hashkey:
            attrs.append(Attr(S.U32Attr.SEL, self._selector()))
        if self.flags:
            attrs.append(u32(S.U32Attr.FLAGS, self.flags))
        return tuple(attrs) if attrs else None

    def _selector(self) -> bytes:
        terminal = S.TC_U32_TERMINAL if (self.actions or self.classid is not None
                                         or self.police is not None) else 0
        hmask, hoff = self.hashkey or (0, 0)
        head = S.TC_U32_SEL.pack(terminal, 0, len(self.keys), 0, 0, 0, hoff) + S.BE32.pack(hmask)
        return head + b"".join(S.TC_U32_KEY_MATCH.pack(k.mask, k.val) + S.TC_U32_KEY_AT.pack(k.off, k.offmask)
                               for k in self.keys)


def _classid_and_actions(numbers, classid: int | None, actions: tuple[Action, ...],
                         resolve: Resolver) -> list[Attr]:
    """CLASSID then ACT, in a classifier's own attribute ``numbers`` (as bpf/matchall/flower emit)."""
    attrs = []
    if classid is not None:
        attrs.append(u32(numbers.CLASSID, classid))
    if actions:
        attrs.append(action_tab(numbers.ACT, actions, resolve))
    return attrs


@dataclasses.dataclass(slots=True)
class BpfProg:
    """bpf classifier: a pinned program (``pinned``), an open program ``fd`` with a ``name``,
    classic BPF ``bytecode`` ((code, jt, jf, k) per instruction), or an ``object_file`` whose
    ``section`` (tc's default: "classifier") the package's loader loads; none of them for a
    ``del`` naming the filter. ``direct_action`` is tc's ``da``."""

    pinned: str | None = None
    fd: int | None = None
    name: str | None = None
    direct_action: bool = False
    classid: int | None = None
    actions: tuple[Action, ...] = ()
    bytecode: tuple[tuple[int, int, int, int], ...] | None = None
    object_file: str | None = None
    section: str | None = None
    flags: int = 0
    kind = "bpf"

    def options(self, resolve: Resolver, protocol: int) -> tuple[Attr, ...] | None:
        attrs = _classid_and_actions(S.Bpf, self.classid, self.actions, resolve)
        if self.bytecode is not None:
            attrs += ops_attrs(S.Bpf.OPS_LEN, S.Bpf.OPS, self.bytecode)
        elif self.fd is not None:
            name = (self.name or f"fd{self.fd}").encode(errors="surrogateescape")
            attrs += fd_attrs(S.Bpf.FD, S.Bpf.NAME, self.fd, name)
        elif self.pinned is not None or self.object_file is not None:
            program = self._program()
            try:
                fd = program.fd(resolve)
            except NotFoundError as exc:  # tc's line after its loader's, per form
                then = "Unable to load program" if self.object_file else "Unable to parse bpf command line"
                raise NotFoundError(f"{exc.message}\n{then}") from None
            attrs += fd_attrs(S.Bpf.FD, S.Bpf.NAME, fd, program.annotation())
        elif attrs or self.direct_action or self.flags:
            # options without a program: tc sends an empty classic program (the kernel refuses
            # it); a bare ``bpf`` (a delete) carries no options at all
            attrs += ops_attrs(S.Bpf.OPS_LEN, S.Bpf.OPS, ())
        if self.flags:
            attrs.append(u32(S.Bpf.FLAGS_GEN, self.flags))
        if self.direct_action:
            attrs.append(u32(S.Bpf.FLAGS, S.TCA_BPF_FLAG_ACT_DIRECT))
        return tuple(attrs) or None

    def _program(self) -> EbpfProgram:
        """The pinned or object-file program, as the batch parser names it."""
        if self.object_file is not None:
            return EbpfProgram(self.object_file, self.section or "classifier",
                               prog_type=BPF_PROG_TYPE_SCHED_CLS)
        return EbpfProgram(self.pinned)


@dataclasses.dataclass(slots=True)
class Matchall:
    """matchall classifier: actions, ``classid``, skip_hw/skip_sw ``flags``."""

    actions: tuple[Action, ...] = ()
    classid: int | None = None
    flags: int = 0
    kind = "matchall"

    def options(self, resolve: Resolver, protocol: int) -> tuple[Attr, ...]:
        attrs = _classid_and_actions(S.Matchall, self.classid, self.actions, resolve)
        if self.flags:
            attrs.append(u32(S.Matchall.FLAGS, self.flags))
        return tuple(attrs) or None


Classifier = Union[U32, BpfProg, Matchall]
class _KindTlv(dict):
    """TCA_KIND of each classifier kind, encoded once, on first use."""

    def __missing__(self, kind: str) -> bytes:
        tlv = self[kind] = encode((strz(S.TCA.KIND, kind),))
        return tlv


_KIND_TLV = _KindTlv()


@dataclasses.dataclass(slots=True)
class Filter:
    """``tc filter add|del|change|replace``. ``parent`` is a classid (``S.TC_H_ROOT``,
    ``INGRESS``, ``EGRESS``, ``tc_h_make(maj, min)``); ``protocol`` an ethertype or None for
    tc's default (all for add/replace, unset otherwise); ``classifier`` None only for a ``del``
    naming no kind."""

    verb: str
    dev: Dev
    parent: int
    classifier: Classifier | None
    prio: int = 0
    protocol: int | None = None
    handle: int = 0
    #: The filter chain (tc's ``chain N``); None: chain 0, unsaid.
    chain: int | None = None

    def message(self, resolve: Resolver) -> tuple[int, int, bytes]:
        flags = S.FILTER_VERB_FLAGS[self.verb]
        protocol = filter_protocol(self.verb, self.protocol)
        info = (self.prio << 16) | socket.htons(protocol)
        attrs = [] if self.chain is None else [u32(S.TCA.CHAIN, self.chain)]  # tc: before KIND
        if self.classifier is not None:
            attrs.append(_KIND_TLV[self.classifier.kind])
            options = self.classifier.options(resolve, protocol)
            if options is not None:
                attrs.append(nest(S.TCA.OPTIONS, *options))
        body = S.TCMSG.pack(0, resolve.ifindex(self.dev), self.handle, self.parent, info) + encode(attrs)
        msg_type = S.Msg.DELTFILTER if self.verb == "del" else S.Msg.NEWTFILTER
        return msg_type, flags, body


def filter_protocol(verb: str, protocol: int | None) -> int:
    """The ethertype a filter line sends: its ``protocol``, or tc's default where it names none
    (``all`` for the verbs that create, add and replace; 0 for change and del)."""
    if protocol is not None:
        return protocol
    return S.ETH_P_ALL if S.FILTER_VERB_FLAGS[verb] & S.NLM_F_CREATE else 0


INGRESS = S.tc_h_make(S.TC_H_INGRESS, S.TC_H_MIN_INGRESS)
EGRESS = S.tc_h_make(S.TC_H_INGRESS, S.TC_H_MIN_EGRESS)

Rule = Union[Qdisc, Class, Filter, Actions]
