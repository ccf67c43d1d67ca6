"""tc state as comparable objects: the live state of devices, read with netlink dumps, and
the desired state of a batch file of adds, read through the batch reader's own encoder.

Both sides go through one decoder (:func:`decode`): a request the reader encodes and an object
the kernel dumps carry the same ``tcmsg`` and attributes, so decoding both into one shape is
what makes "unchanged" mean "the kernel would hold the same thing". Each object is a
:class:`TcObject`: its ``key`` (what identifies it: a qdisc's handle, a class's classid, a
filter's parent, chain, priority, protocol, kind and handle, an action's kind and index) and
its ``spec`` (everything else the kernel keeps of it that tc can set). Counters, timestamps and
reference counts are in neither.

What the kernel derives where a request says nothing is filled in on the desired side, so an
object added without, say, a quantum compares equal to what the kernel made of it: an htb
leaf's quantum (``rate / r2q`` within 1000..200000), its priority (at most 7). An inner htb
class keeps the quantum and priority it got as a leaf (the kernel does not change them once it
has children), so those are compared for leaves only.

u32 needs one more step. Each u32 instance (one per priority and protocol) has a root hash
table whose id the kernel picks (``800:`` for the first instance of a block, then ``801:``...,
handed out cyclically), so the same file gives different ids on different histories. Root
tables are therefore named :data:`ROOT` in keys and specs: on the live side the root is the
instance's last table in the dump (the kernel lists tables newest first), on the desired side
any table id the file does not create with ``divisor``. Supported kinds: qdiscs htb and ingress,
htb classes, u32 filters, mirred actions; anything else is an error naming the object.
"""

from __future__ import annotations

import dataclasses
import errno
import socket
import struct
from collections.abc import Iterable
from typing import NamedTuple

from ..errors import BpfBatchError, InputError, from_errno
from . import specs as S
from .htb import TC_HTB_OPT_TAIL, TC_RATESPEC
from .message import Listing, LineError, Message, attr_str, attrs, find_attr
from .netns import entered

#: The name of every u32 instance's root hash table in keys and specs.
ROOT = "root"
#: Message types a dump answers with (a request's type less one for qdiscs and classes).
GETQDISC, GETTCLASS = 38, 42
NLMSG_DONE = 3
NLM_F_DUMP = 0x300
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
_I32 = struct.Struct("=i")
#: htb's quantum bounds when the kernel computes it (sch_htb.c), and its priorities.
HTB_QUANTUM_MIN, HTB_QUANTUM_MAX, HTB_PRIOS = 1000, 200000, 8
#: Flags a u32 filter keeps that tc sets (skip_hw, skip_sw); the rest are the kernel's.
_CLS_USER_FLAGS = 3
#: Dump requests per sendmsg: each finished one leaves a reply skb in the receive buffer.
_DUMPS_PER_SEND = 128
_RCVBUF = 32 << 20


class TcObject(NamedTuple):
    """One qdisc, class, filter or standalone action: ``key`` identifies it, ``spec`` is what
    is compared. ``kind`` is ``qdisc``, ``class``, ``filter``, ``ht`` (a u32 hash table) or
    ``action``. ``line``: the batch line that adds it (desired side), else None; ``message``:
    that line as the reader encoded it, which an apply sends as it is (not encoded twice)."""

    kind: str
    key: tuple
    spec: tuple
    line: str | None = None
    message: Message | None = None


# --- decoding ------------------------------------------------------------------------------------

_TLV = struct.Struct("=HH")
#: Enum members as plain ints: an enum attribute costs ~100 ns, and a decode reads a dozen
#: of them for each of tens of thousands of objects.
_U32ATTR_ACT = int(S.U32Attr.ACT)
_U32ATTR_CLASSID = int(S.U32Attr.CLASSID)
_U32ATTR_DIVISOR = int(S.U32Attr.DIVISOR)
_U32ATTR_FLAGS = int(S.U32Attr.FLAGS)
_U32ATTR_HASH = int(S.U32Attr.HASH)
_U32ATTR_INDEV = int(S.U32Attr.INDEV)
_U32ATTR_LINK = int(S.U32Attr.LINK)
_U32ATTR_POLICE = int(S.U32Attr.POLICE)
_U32ATTR_SEL = int(S.U32Attr.SEL)
_HTBATTR_CEIL64 = int(S.HtbAttr.CEIL64)
_HTBATTR_DIRECT_QLEN = int(S.HtbAttr.DIRECT_QLEN)
_HTBATTR_INIT = int(S.HtbAttr.INIT)
_HTBATTR_PARMS = int(S.HtbAttr.PARMS)
_HTBATTR_RATE64 = int(S.HtbAttr.RATE64)
_TCA_CHAIN = int(S.TCA.CHAIN)
_TCA_KIND = int(S.TCA.KIND)
_TCA_OPTIONS = int(S.TCA.OPTIONS)
_MSG_NEWQDISC = int(S.Msg.NEWQDISC)
_MSG_NEWTCLASS = int(S.Msg.NEWTCLASS)
_MSG_NEWTFILTER = int(S.Msg.NEWTFILTER)
_MSG_NEWACTION = int(S.Msg.NEWACTION)
_MSG_GETACTION = int(S.Msg.GETACTION)
_MSG_GETTFILTER = int(S.Msg.GETTFILTER)


def _table(data, span: tuple[int, int] | None) -> dict[int, tuple[int, int]]:
    """Attribute type → payload span, of the attributes in ``span`` (the first of each type),
    in one pass: a dump decodes tens of thousands of objects."""
    out: dict[int, tuple[int, int]] = {}
    if span is None:
        return out
    offset, end = span
    unpack = _TLV.unpack_from
    while offset + 4 <= end:
        size, type_ = unpack(data, offset)
        if size < 4 or offset + size > end:
            break
        out.setdefault(type_ & 0x3FFF, (offset + 4, offset + size))
        offset += (size + 3) & ~3
    return out


def _ratespec(data, offset: int) -> tuple[int, int, int, int]:
    """(rate, overhead, mpu, linklayer) of a ``tc_ratespec``: what the kernel keeps of it."""
    _cell_log, linklayer, overhead, _align, mpu, rate = TC_RATESPEC.unpack_from(data, offset)
    return rate, overhead, mpu, linklayer & 0x0F


def _htb_class(body, options: dict) -> tuple:
    """An htb class's spec without its parent: rates (64-bit when given so), bursts in ticks,
    quantum, priority, and the level (0 for a leaf; a request says 0)."""
    parms = options.get(_HTBATTR_PARMS)
    if parms is None:
        raise InputError("htb class without parameters")
    rate, overhead, mpu, linklayer = _ratespec(body, parms[0])
    ceil, c_overhead, c_mpu, c_linklayer = _ratespec(body, parms[0] + TC_RATESPEC.size)
    buffer, cbuffer, quantum, level, prio = TC_HTB_OPT_TAIL.unpack_from(
        body, parms[0] + 2 * TC_RATESPEC.size)
    if _HTBATTR_RATE64 in options:
        rate = _U64.unpack_from(body, options[_HTBATTR_RATE64][0])[0]
    if _HTBATTR_CEIL64 in options:
        ceil = _U64.unpack_from(body, options[_HTBATTR_CEIL64][0])[0]
    return (rate, ceil, buffer, cbuffer, quantum, prio, overhead, mpu, linklayer, c_overhead,
            c_mpu, c_linklayer, level)


def _htb_qdisc(body, options: dict) -> tuple:
    """(r2q, default class, direct_qlen or None when the request leaves it to the device)."""
    init = options.get(_HTBATTR_INIT)
    if not init:
        raise InputError("htb qdisc without its init parameters")
    _version, r2q, defcls, _debug, _direct = S.TC_HTB_GLOB.unpack_from(body, init[0])
    qlen = options.get(_HTBATTR_DIRECT_QLEN)
    return r2q, defcls, None if qlen is None else _U32.unpack_from(body, qlen[0])[0]


def _action(data, first: int, last: int) -> tuple:
    """One action of an action nest: ``(kind, index or None, params)``; a mirred's params are
    (verdict, direction-and-mode, target ifindex), or None for ``mirred index N`` naming an
    existing action."""
    action = _table(data, (first, last))
    kind = attr_str(data, action.get(S.ActAttr.KIND))
    if kind != "mirred":
        raise InputError(f"{kind} actions are not supported by apply/dump (mirred is)")
    parms = _table(data, action.get(S.ActAttr.OPTIONS)).get(S.TCA_MIRRED_PARMS)
    if not parms:
        index = action.get(S.ActAttr.INDEX)
        return kind, index and _U32.unpack_from(data, index[0])[0] or None, None
    index, _capab, verdict, _ref, _bind, eaction, ifindex = S.TC_MIRRED.unpack_from(data, parms[0])
    params = None if eaction == 0 else (verdict, eaction, ifindex)
    return kind, index or None, params


def _actions(data, span: tuple[int, int] | None) -> tuple:
    if span is None:
        return ()
    return tuple(_action(data, first, last) for _order, first, last in attrs(data, *span))


def _u32(body, handle: int, options: dict):
    """``("ht", (ht, 0, 0), (divisor,))`` for a hash table, ``("filter", (ht, bucket, node),
    spec)`` for a key node; ``ht`` and ``link`` are raw ids here (:func:`_name_roots`)."""
    divisor = options.get(_U32ATTR_DIVISOR)
    if divisor is not None:
        count = _U32.unpack_from(body, divisor[0])[0]
        return "ht", (handle >> 20, 0, 0), (max(count, 1),)
    hashed = options.get(_U32ATTR_HASH)
    table = _U32.unpack_from(body, hashed[0])[0] if hashed else None
    if table is not None and table >> 20 == 0xFFF:  # tc's "ht fff:": the root
        table = None
    if table is None:  # the root of whatever instance this is; the handle may say which
        where = (handle >> 20 or None, 0)
    else:
        where = (table >> 20, (table >> 12) & 0xFF)
    node = handle & 0xFFF
    sel = options.get(_U32ATTR_SEL)
    classid = options.get(_U32ATTR_CLASSID)
    link = options.get(_U32ATTR_LINK)
    flags = options.get(_U32ATTR_FLAGS)
    indev = options.get(_U32ATTR_INDEV)
    if _U32ATTR_POLICE in options:
        raise InputError("u32 police is not supported by apply/dump")
    spec = (bytes(body[sel[0]:sel[1]]) if sel else b"",
            _U32.unpack_from(body, classid[0])[0] if classid else 0,
            _U32.unpack_from(body, link[0])[0] >> 20 if link else None,
            _U32.unpack_from(body, flags[0])[0] & _CLS_USER_FLAGS if flags else 0,
            attr_str(body, indev), _actions(body, options.get(_U32ATTR_ACT)))
    return "filter", (*where, node or None), spec


def decode(msg_type: int, body, block: int | None = None) -> TcObject | None:
    """The object a request (an add) or a dumped object describes; None for what is not an
    object of its own (a default qdisc, a u32 instance's header). ``block``: a filter's parent
    when it is known better than the message says (the parent its dump was asked for).
    Raises InputError for kinds apply/dump do not support."""
    if msg_type in (_MSG_NEWACTION, _MSG_GETACTION):
        raise InputError("decode actions with decode_actions")
    _family, ifindex, handle, parent, info = S.TCMSG.unpack_from(body, 0)
    top = _table(body, (S.TCMSG.size, len(body)))
    kind = attr_str(body, top.get(_TCA_KIND))
    options = _table(body, top.get(_TCA_OPTIONS))
    if msg_type == _MSG_NEWQDISC:
        if handle == 0 and parent == S.TC_H_ROOT:
            return None  # the device's default qdisc: nothing anyone added
        if kind == "ingress":
            return TcObject("qdisc", (ifindex, S.INGRESS_HANDLE), (S.TC_H_INGRESS, kind))
        if kind == "htb":
            return TcObject("qdisc", (ifindex, handle), (parent, kind, *_htb_qdisc(body, options)))
        raise InputError(f"{kind} qdiscs are not supported by apply/dump (htb, ingress are)")
    if msg_type == _MSG_NEWTCLASS:
        if kind != "htb":
            raise InputError(f"{kind} classes are not supported by apply/dump (htb is)")
        if parent == S.TC_H_ROOT:  # a top class: its parent is its qdisc, however written
            parent = handle & 0xFFFF0000
        return TcObject("class", (ifindex, handle), (parent, *_htb_class(body, options)))
    if msg_type == _MSG_NEWTFILTER:
        if handle == 0 and not options:
            return None  # an instance's own entry in a dump, before its filters
        if kind != "u32":
            raise InputError(f"{kind} filters are not supported by apply/dump (u32 is)")
        chain = top.get(_TCA_CHAIN)
        instance = (ifindex, parent if block is None else block, _U32.unpack_from(body, chain[0])[0] if chain else 0,
                    info >> 16, info & 0xFFFF)
        what, where, spec = _u32(body, handle, options)
        return TcObject(what, (*instance, *where), spec)
    raise InputError(f"message type {msg_type} is not a qdisc, class or filter")


def decode_actions(body) -> list[TcObject]:
    """The actions of an actions request or of one dumped action table."""
    table = find_attr(body, S.TCAMSG.size, len(body), S.TCA_ACT_TAB)
    return [TcObject("action", (kind, index), (params,))
            for kind, index, params in _actions(body, table)]


def _name_roots(objects: list[TcObject], roots: dict[tuple, int | None]) -> list[TcObject]:
    """u32 tables and links named :data:`ROOT` where they are their instance's root;
    ``roots`` maps an instance key (ifindex, parent, chain, prio, protocol) to its root's id
    (None: any id that is no table of the instance)."""
    tables: dict[tuple, set[int]] = {}
    for obj in objects:
        if obj.kind == "ht":
            tables.setdefault(obj.key[:5], set()).add(obj.key[5])

    def named(instance: tuple, table: int | None) -> int | str | None:
        root = roots.get(instance)
        if table is None or table == root or root is None and table not in tables.get(instance, ()):
            return ROOT
        return table

    out = []
    for obj in objects:
        if obj.kind == "filter":  # rebuilt only when a name changes: there are tens of thousands
            key, spec = obj.key, obj.spec
            instance, table, link = key[:5], key[5], spec[2]
            named_table = named(instance, table)
            named_link = None if link is None else named(instance, link)
            if named_table != table or named_link != link:
                obj = TcObject("filter", (*instance, named_table, *key[6:]),
                               (*spec[:2], named_link, *spec[3:]), obj.line, obj.message)
        out.append(obj)
    return out


# --- the desired state ---------------------------------------------------------------------------


def desired(reader_items: Iterable[tuple[int, object]], texts: dict[int, str],
            source: str) -> list[TcObject]:
    """The objects a batch file of adds describes, from the batch reader's ``(line, parsed)``
    and each line's text; InputError naming ``source:line`` for a bad line, a verb other than
    add, or a kind apply does not support."""
    objects = []
    for line, parsed in reader_items:
        where = f"{source}:{line}"
        if isinstance(parsed, LineError):
            raise InputError(parsed.error.message, obj=where)
        if isinstance(parsed, Listing) or not isinstance(parsed, Message):
            raise InputError("a desired state lists adds only", obj=where)
        msg_type, flags, body = parsed[:3]
        if flags != S.NLM_F_EXCL | S.NLM_F_CREATE:
            raise InputError("a desired state lists adds only", obj=where)
        text = texts[line].strip()
        try:
            if msg_type == _MSG_NEWACTION:
                found = [obj._replace(line=text, message=parsed)
                         for obj in decode_actions(body)]
                if any(obj.key[1] is None for obj in found):
                    raise InputError("standalone actions need an index")
                objects += found
                continue
            obj = decode(msg_type, body)
        except InputError as exc:
            raise InputError(exc.message, obj=where) from None
        if obj is not None:
            if obj.kind == "filter" and obj.key[3] == 0:
                raise InputError("filters need a prio (the kernel's choice cannot be compared)",
                                 obj=where)
            objects.append(TcObject(obj.kind, obj.key, obj.spec, text, parsed))
    return _kernel_defaults(_name_roots(objects, {}))


def _kernel_defaults(objects: list[TcObject]) -> list[TcObject]:
    """What the kernel derives where the file is silent (see the module docs)."""
    r2q = {obj.key: obj.spec[2] for obj in objects if obj.kind == "qdisc" and obj.spec[1] == "htb"}
    parents = {(obj.key[0], obj.spec[0]) for obj in objects if obj.kind == "class"}
    out = []
    for obj in objects:
        if obj.kind == "class":
            parent, rate, ceil, buffer, cbuffer, quantum, prio, *rest, _level = obj.spec
            if not quantum:
                computed = rate // max(r2q.get((obj.key[0], obj.key[1] & 0xFFFF0000), 10), 1)
                quantum = min(max(computed, HTB_QUANTUM_MIN), HTB_QUANTUM_MAX)
            inner = (obj.key[0], obj.key[1]) in parents
            obj = TcObject("class", obj.key, class_spec(parent, rate, ceil, buffer, cbuffer,
                                                        quantum, min(prio, HTB_PRIOS - 1), rest,
                                                        inner), obj.line, obj.message)
        out.append(obj)
    return out


def class_spec(parent, rate, ceil, buffer, cbuffer, quantum, prio, rest, inner: bool) -> tuple:
    """An htb class's compared spec: quantum and priority only for a leaf (see module docs);
    the last field says which it is."""
    if inner:
        quantum = prio = None
    return (parent, rate, ceil, buffer, cbuffer, quantum, prio, *rest, inner)


# --- the live state ------------------------------------------------------------------------------


@dataclasses.dataclass
class Live:
    """What a dump read: the objects, the raw u32 ids of each instance's root (for deletes,
    which must name them), and the devices' names by ifindex."""

    objects: list[TcObject]
    root_ids: dict[tuple, int]
    names: dict[int, str]
    #: (kind, index) → (ref, bind) of every action in the namespace.
    action_refs: dict[tuple[str, int], tuple[int, int]]


class Dumper:
    """A NETLINK_ROUTE socket for dump requests, opened in ``netns``."""

    def __init__(self, netns: str | None) -> None:
        with entered(netns):
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                       socket.NETLINK_ROUTE)
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, 33, _RCVBUF)  # SO_RCVBUFFORCE
            except PermissionError:
                pass
            self._sock.bind((0, 0))
            self.names = {index: name for index, name in socket.if_nameindex()}
        self._seq = 0
        self._buf = bytearray(1 << 20)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "Dumper":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def dump(self, requests: list[tuple[int, bytes]]) -> list[list[bytes]]:
        """Run dump ``requests`` ((type, body) each), many per sendmsg; per request, the bodies
        of the objects it answered with. A dump that does not finish at once makes the ones
        sent after it busy (one dump at a time per socket): those are sent again."""
        answers: list[list[bytes] | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        while pending:
            busy = []
            for start in range(0, len(pending), _DUMPS_PER_SEND):
                busy += self._round([(i, requests[i]) for i in pending[start:start + _DUMPS_PER_SEND]],
                                    answers)
            if len(busy) == len(pending):
                raise from_errno("dump tc state", errno.EBUSY)
            pending = busy
        return answers  # type: ignore[return-value]

    def _round(self, batch: list[tuple[int, tuple[int, bytes]]], answers: list) -> list[int]:
        out = bytearray()
        by_seq = {}
        for i, (msg_type, body) in batch:
            self._seq += 1
            by_seq[self._seq] = i
            out += S.NLMSGHDR.pack(16 + len(body), msg_type, S.NLM_F_REQUEST | NLM_F_DUMP,
                                   self._seq, 0) + body
        try:
            self._sock.sendmsg((out,))
        except OSError as exc:
            raise from_errno("dump tc state", exc.errno) from None
        busy, open_ = [], set(by_seq)
        collected: dict[int, list[bytes]] = {seq: [] for seq in by_seq}
        view = memoryview(self._buf)
        while open_:
            size = self._sock.recv_into(self._buf)
            offset = 0
            while offset + 16 <= size:
                length, msg_type, _flags, seq, _pid = S.NLMSGHDR.unpack_from(view, offset)
                if seq in open_:
                    if msg_type == NLMSG_DONE:
                        open_.discard(seq)
                    elif msg_type == S.NLMSG_ERROR:
                        code = -_I32.unpack_from(view, offset + 16)[0]
                        open_.discard(seq)
                        if code == errno.EBUSY:
                            busy.append(by_seq[seq])
                        elif code:
                            raise from_errno("dump tc state", code)
                    else:
                        collected[seq].append(bytes(view[offset + 16:offset + length]))
                offset += (length + 3) & ~3
        for seq, i in by_seq.items():
            if i not in busy:
                answers[i] = collected[seq]
        return busy


def _tcmsg(ifindex: int, parent: int = 0) -> bytes:
    return S.TCMSG.pack(0, ifindex, 0, parent, 0)


def read_live(dumper: Dumper, devices: Iterable[str]) -> Live:
    """The live state of ``devices`` (names) and the namespace's standalone actions."""
    ifindexes = []
    by_name = {name: index for index, name in dumper.names.items()}
    for dev in devices:
        if dev not in by_name:
            raise BpfBatchError(f'Cannot find device "{dev}"', obj="--dev")
        ifindexes.append(by_name[dev])
    wanted = set(ifindexes)
    qdisc_bodies, = dumper.dump([(GETQDISC, _tcmsg(0))])
    class_answers = dumper.dump([(GETTCLASS, _tcmsg(i)) for i in ifindexes])
    objects: list[TcObject] = []
    for body in qdisc_bodies:
        if S.TCMSG.unpack_from(body, 0)[1] in wanted:
            obj = decode(_MSG_NEWQDISC, body)
            if obj is not None:
                objects.append(obj)
    for bodies in class_answers:
        for body in bodies:
            objects.append(_live_class(decode(_MSG_NEWTCLASS, body)))
    # every block: each qdisc's and each class's
    parents = [(obj.key[0], obj.key[1]) for obj in objects if obj.kind in ("qdisc", "class")]
    filter_answers = dumper.dump([(_MSG_GETTFILTER, _tcmsg(ifindex, parent))
                                  for ifindex, parent in parents])
    filters, roots = [], {}
    for (_ifindex, parent), bodies in zip(parents, filter_answers):
        for body in bodies:
            obj = decode(_MSG_NEWTFILTER, body, parent)
            if obj is None:
                continue
            if obj.kind == "ht":
                roots[obj.key[:5]] = obj.key[5]  # the last table listed is the root
            filters.append(obj)
    filters = [obj for obj in filters if not (obj.kind == "ht" and roots[obj.key[:5]] == obj.key[5])]
    actions, refs = _read_actions(dumper)
    return Live(objects + _name_roots(filters, roots) + actions, roots, dumper.names, refs)


def _live_class(obj: TcObject) -> TcObject:
    parent, rate, ceil, buffer, cbuffer, quantum, prio, *rest, level = obj.spec
    return TcObject("class", obj.key, class_spec(parent, rate, ceil, buffer, cbuffer, quantum,
                                                 prio, rest, level > 0))


#: The action kinds a dump lists (the namespace's; a kind the kernel lacks answers an error).
ACTION_KINDS = ("mirred",)


def _read_actions(dumper: Dumper) -> tuple[list[TcObject], dict]:
    """Standalone actions (held by more than the filters bound to them), and every action's
    reference counts."""
    from .encoding import Attr, encode, strz

    requests = [(_MSG_GETACTION, S.TCAMSG.pack(0) + encode((Attr(S.TCA_ACT_TAB, (
        Attr(1, (strz(S.ActAttr.KIND, kind),)),)),))) for kind in ACTION_KINDS]
    standalone, refs = [], {}
    for bodies in dumper.dump(requests):
        for body in bodies:
            table = find_attr(body, S.TCAMSG.size, len(body), S.TCA_ACT_TAB)
            if table is None:
                continue
            for _order, first, last in attrs(body, *table):
                kind, index, params = _action(body, first, last)
                options = find_attr(body, first, last, S.ActAttr.OPTIONS)
                parms = find_attr(body, *options, S.TCA_MIRRED_PARMS)
                ref, bind = S.TC_GACT.unpack_from(body, parms[0])[3:5]
                refs[kind, index] = (ref, bind)
                if ref > bind:
                    standalone.append(TcObject("action", (kind, index), (params,)))
    return standalone, refs
