"""One encoded rtnetlink request, what the reader yields in its place when a line is bad, and
how the effect of a request can be taken back exactly.

The sender batches many requests per ``sendmsg``; without ``force`` a failure at line k must
leave the kernel as ``tc -b`` leaves it — lines 1..k-1 applied, nothing after. Requests after
k in the same ``sendmsg`` have already been processed, so each may travel there only if its
effect can be undone exactly. :func:`undo_of` decides that from the bytes alone (templates and
rule objects produce the same bytes, so both get the same answer):

* ``actions add`` whose every action carries an explicit index: delete those indexes.
* ``filter add`` of a bpf/matchall/flower filter: delete that filter by its handle (if the add
  created the classifier instance, deleting its only filter removes it again). When the line
  leaves the handle or the priority to the kernel, the request asks for an echo
  (``NLM_F_ECHO``) and the undo is built from the echoed header.
* ``filter add`` of a u32 key node: as above, with one catch — deleting a u32 instance's last
  key node destroys the instance *and its hash tables*. Such an add is undoable only when the
  sender knows the instance keeps another key node (:class:`Undo` says which instance to ask
  about; the sender tracks it). In a hash table the batch created, the sender predicts the
  handle the kernel gives instead of asking for an echo (:mod:`.u32_known`).
* everything else — replace, change, delete, qdisc and class requests, u32 hash tables —
  cannot be undone exactly: it never travels behind another request that could fail.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import NamedTuple

from ..errors import BpfBatchError
from . import specs as S
from .encoding import encode, strz

_TLV = struct.Struct("=HH")
_U32 = struct.Struct("=I")
_ADD = S.NLM_F_EXCL | S.NLM_F_CREATE


#: ``Message.undo`` when nobody has worked it out yet.
UNKNOWN = object()


class Message(NamedTuple):
    """An encoded request: type, nlmsg flags (the sender adds REQUEST and ACK), body, and
    ``undo`` when already known (a template works it out once for all its lines: their fields
    — indexes, handles, priorities — are never zero, and zero is what decides). Its action
    delete messages may name the template's indexes: :func:`undo_of` rebuilds them from the
    message when an undo is due."""

    msg_type: int
    flags: int
    body: bytes | bytearray
    undo: object = UNKNOWN
    #: What tc prints on stderr while parsing the line (see :class:`Said`), "" mostly.
    said: str = ""


class Said(NamedTuple):
    """A parsed rule and the lines tc prints on stderr while parsing it (skbmod's and ife's
    notes): its message carries them (``said``), and the sender prints them once every line
    before it is settled, so they land between the earlier lines' errors and its own."""

    rule: object
    text: str

    def message(self, resolve) -> tuple:
        return (*self.rule.message(resolve), UNKNOWN, self.text)


@dataclasses.dataclass(frozen=True, slots=True)
class LineError:
    """A line the reader refused, in the place of its message. ``fatal``: tc would exit on it
    (its usage/invarg paths: exit(-1), or ``status``), ending the whole batch even with
    ``-force``."""

    error: BpfBatchError
    fatal: bool = False
    status: int = 255

    @classmethod
    def at(cls, error: BpfBatchError, source: str, line: int) -> "LineError":
        """``error`` (raised while encoding a parsed line) as the failure of ``source:line``."""
        error.obj = f"{source}:{line}"
        return cls(error)


class Joined(NamedTuple):
    """Consecutive ``actions add`` lines sent as one ``message`` (:mod:`.coalesce`), which the
    kernel applies all or nothing. ``split()`` encodes each line's own message, as the line
    sends it alone: called only when the joined message fails and its lines are re-sent one by
    one, so the failure lands on its own line."""

    lines: tuple[int, ...]
    message: Message
    split: Callable[[], tuple[Message, ...]]


class Listing(NamedTuple):
    """A line tc answers by printing (``filter show``, ``actions list``, ``qdisc show``,
    ``class show``, ``... get``, ``help``), ``actions flush``, or an ``actions`` line of
    several commands (``actions add action ... add action ...``): no message of ours. The sender
    settles every line before it, then hands its ``words`` to whoever prints listings (the
    CLI runs iproute2's tc on them, so the listing is tc's own, text or JSON)."""

    words: tuple[str, ...]


#: What the batch reader yields per command: the message to send, or why there is none; with
#: coalescing, also one message for several lines (yielded with its last line).
Parsed = Message | Joined | LineError | Listing


class Undo(NamedTuple):
    """How to take a request back: fixed ``messages``, or (``echo``) a filter delete built from
    the kernel's echo of the add; ``u32_instance`` (ifindex, parent, info) when the undo is exact
    only while that u32 instance keeps another key node; ``slot`` (a hash table and bucket) and
    ``handle`` when the kernel was predicted to give the key node that handle, whose delete is
    built only when due (:func:`.u32_known.predicted_delete`)."""

    messages: tuple[Message, ...] = ()
    echo: bool = False
    u32_instance: tuple[int, int, int] | None = None
    slot: tuple | None = None
    handle: int = 0


#: ``undo`` of an ``actions add`` known to name every index: undoable; :func:`undo_of`
#: builds the deletes from the message itself when an undo is due.
BY_INDEX = Undo()


def attrs(data, offset: int, end: int):
    """``(type, payload_offset, payload_end)`` of each attribute in ``data[offset:end]``."""
    while offset + 4 <= end:
        size, type_ = _TLV.unpack_from(data, offset)
        if size < 4 or offset + size > end:
            return
        yield type_ & 0x3FFF, offset + 4, offset + size
        offset += (size + 3) & ~3


def find_attr(data, offset: int, end: int, wanted: int) -> tuple[int, int] | None:
    """``(payload_offset, payload_end)`` of the first attribute of type ``wanted``, or None."""
    return next(((start, stop) for type_, start, stop in attrs(data, offset, end) if type_ == wanted),
                None)


def _padded_tlv(data, span: tuple[int, int]) -> bytes:
    """The whole attribute whose payload is ``span``, header and padding included."""
    return bytes(data[span[0] - 4:span[0] - 4 + ((span[1] - span[0] + 7) & ~3)])


def attr_str(data, span: tuple[int, int] | None) -> str | None:
    """A string attribute's text (its payload up to the NUL), None for no attribute."""
    return None if span is None else bytes(data[span[0]:span[1]]).rstrip(b"\0").decode(errors="replace")


def action_table(body) -> tuple[int, int] | None:
    """The span of an actions message's action table (``TCA_ACT_TAB``), None without one."""
    return find_attr(body, S.TCAMSG.size, len(body), S.TCA_ACT_TAB)


def action_parms(data, start: int, end: int):
    """Per action of the action table nest ``[start, end)`` (``TCA_ACT_TAB``, or a
    classifier's ``*_ACT``): ``(order, KIND span, PARMS span)``, a span None when the
    attribute is missing. PARMS is attribute 2 of the action's options for every kind
    (``TCA_GACT_PARMS``, ``TCA_MIRRED_PARMS``, ...), a struct that opens with ``struct
    tc_gen``: index, capab, action, refcnt, bindcnt."""
    for order, first, last in attrs(data, start, end):
        options = find_attr(data, first, last, S.ActAttr.OPTIONS)
        yield (order, find_attr(data, first, last, S.ActAttr.KIND),
               options and find_attr(data, *options, S.TCA_GACT_PARMS))


def _action_refs(body) -> tuple[bytes, ...] | None:
    """Per action of an actions message: a ``(KIND, INDEX)`` nest naming it; None if any
    action leaves its index to the kernel."""
    tab = action_table(body)
    if tab is None:
        return None
    refs = []
    for order, kind, parms in action_parms(body, *tab):
        if kind is None or not parms or parms[1] - parms[0] < 4:
            return None
        index = _U32.unpack_from(body, parms[0])[0]
        if index == 0:
            return None
        refs.append(_action_ref(order, _padded_tlv(body, kind), index))
    return tuple(refs) or None


def _action_ref(order: int, kind_tlv: bytes, index: int) -> bytes:
    """The nest naming one action (its KIND attribute, whole, and its index) at ``order``."""
    return (_TLV.pack(4 + len(kind_tlv) + 8, order) + kind_tlv
            + _TLV.pack(8, S.ActAttr.INDEX) + _U32.pack(index))


def _actions_request(msg_type: int, refs) -> Message:
    """An actions request (delete, get) naming each action by a :func:`_action_ref` nest."""
    tab = _TLV.pack(4 + sum(map(len, refs)), S.TCA_ACT_TAB) + b"".join(refs)
    return Message(msg_type, 0, S.TCAMSG.pack(0) + tab)


def action_get(kind: str, index: int) -> Message:
    """The request reading back action ``kind`` ``index`` (``tc actions get``)."""
    kind_tlv = encode((strz(S.ActAttr.KIND, kind),))
    return _actions_request(S.Msg.GETACTION, (_action_ref(1, kind_tlv, index),))


def undo_of(message: Message) -> Undo | None:
    """How to undo ``message`` exactly, or None when it cannot be (see the module docs)."""
    msg_type, flags, body = message[:3]
    if flags != _ADD:
        return None
    if msg_type == S.Msg.NEWACTION:
        refs = _action_refs(body)
        if refs is None:
            return None
        return Undo((_actions_request(S.Msg.DELACTION, refs),))
    if msg_type != S.Msg.NEWTFILTER:
        return None
    _family, ifindex, handle, parent, info = S.TCMSG.unpack_from(body, 0)
    kind = find_attr(body, S.TCMSG.size, len(body), S.TCA.KIND)
    if kind is None:
        return None
    kind_name = attr_str(body, kind)
    echo = handle == 0 or info >> 16 == 0
    u32_instance = None
    if kind_name == "u32":
        options = find_attr(body, S.TCMSG.size, len(body), S.TCA.OPTIONS)
        if options is not None and find_attr(body, options[0], options[1], S.U32Attr.DIVISOR):
            return None  # a hash table: deleting it may take the whole instance along
        if info >> 16 == 0:
            return None  # a new instance at a priority the kernel picks: nothing to track
        u32_instance = (ifindex, parent, info)
    elif kind_name not in ("bpf", "matchall", "flower"):
        return None
    if echo:
        return Undo(echo=True, u32_instance=u32_instance)
    return Undo((filter_delete(body[:S.TCMSG.size], body),), u32_instance=u32_instance)


def filter_delete(header, request_body) -> Message:
    """The request deleting the filter a ``tcmsg`` ``header`` names (ifindex, handle, parent,
    info), in the chain and of the kind ``request_body`` (the add) carries."""
    end = len(request_body)
    chain = find_attr(request_body, S.TCMSG.size, end, S.TCA.CHAIN)
    kind = find_attr(request_body, S.TCMSG.size, end, S.TCA.KIND)
    return Message(S.Msg.DELTFILTER, 0, bytes(header[:S.TCMSG.size])
                   + (_padded_tlv(request_body, chain) if chain else b"")
                   + _padded_tlv(request_body, kind))


def filter_get(delete: Message) -> Message:
    """The request reading back the filter a :func:`filter_delete` message names."""
    return Message(S.Msg.GETTFILTER, 0, delete.body)
