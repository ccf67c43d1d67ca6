"""What the packer knows about the u32 instances a batch touches, so that a u32 key node add
may travel behind a message that can fail and still be undone exactly (see :mod:`.sender`).

Two facts, each relied on only once the batch that establishes it has been handed over (a
failure in that batch stops the sending without ``force``: nothing packed on a false premise
is ever sent):

* **An instance holds a key node.** Deleting a u32 instance's last key node destroys the
  instance and its hash tables; undoing an add is exact only while another key node stays.
* **A hash table is the batch's own.** ``filter add ... handle H: u32 divisor N`` is an
  exclusive create: when it succeeds the table is new. While every key node put in it leaves
  its handle to the kernel, the kernel numbers them (``gen_new_kid`` in ``cls_u32.c``) with
  the lowest free node id from 0x800 of their bucket: the n-th add into a bucket that succeeds
  gets node 0x800 + n - 1, failed adds giving their id back. The packer predicts each add's
  handle as if every earlier add succeeds; the undo takes off the failed adds before it in the
  same bucket (:func:`predicted_delete`) and reads the key node back to check it holds the add's
  selector before deleting it. So these adds need no echo: ``NLM_F_ECHO`` has the kernel build
  and queue a notification per add, a quarter of a u32 batch's time, which ``tc -b`` never
  pays.

Any other request that cannot be undone (a filter delete, replace or change, a qdisc, class or
chain request) ends all that is known — on every device: a shared filter block is reached by
its number as well as through each device bound to it —, and an add naming its handle in a
table of ours, or a bucket's 2048th add (the kernel then numbers from elsewhere), ends what is
known of that table; such adds ask for the echo again. Only without ``force``: with it a failed
table create does not stop the batch.
"""

from __future__ import annotations

import struct

from . import specs as S
from .message import Message, Undo, attr_str, attrs, filter_delete, find_attr

_U32 = struct.Struct("=I")
_ADD = S.NLM_F_EXCL | S.NLM_F_CREATE
#: Key node ids the kernel hands out first in a bucket, 0x800..0xFFF.
_FIRST_NODE, _NODES = 0x800, 0x800
#: Table ids that name an instance's root table: 800: (the first instance's root, as the kernel
#: numbers it) and fff: (TC_U32_ROOT, the kernel's alias for "this instance's root").
_ROOTS = (0x800, 0xFFF)

#: ``(ifindex, parent, info)``: one u32 instance (prio and protocol in ``info``).
Instance = tuple[int, int, int]
#: ``(ifindex, parent, info, chain, table id)``: one hash table of an instance.
Table = tuple[int, int, int, int, int]


def selector(body) -> bytes | None:
    """The ``TCA_U32_SEL`` payload of a u32 filter message or dump, None without one."""
    options = find_attr(body, S.TCMSG.size, len(body), S.TCA.OPTIONS)
    span = options and find_attr(body, *options, S.U32Attr.SEL)
    return bytes(body[span[0]:span[1]]) if span else None


def predicted_delete(add: Message, undo: Undo, failed_before: int) -> Message:
    """The delete of the key node ``add`` was predicted to get (``undo.handle``), once
    ``failed_before`` earlier adds into its bucket failed (each gave its node id back, so the
    kernel numbered this one that much lower). Built only when an undo is due."""
    _family, ifindex, _handle, parent, info = S.TCMSG.unpack_from(add.body, 0)
    return filter_delete(S.TCMSG.pack(0, ifindex, undo.handle - failed_before, parent, info),
                         add.body)


def _is_table(body) -> bool:
    """A u32 message creating a hash table (it carries ``TCA_U32_DIVISOR``)."""
    if attr_str(body, find_attr(body, S.TCMSG.size, len(body), S.TCA.KIND)) != "u32":
        return False
    options = find_attr(body, S.TCMSG.size, len(body), S.TCA.OPTIONS)
    return options is not None and find_attr(body, *options, S.U32Attr.DIVISOR) is not None


def _hash_and_chain(body, handle: int) -> tuple[int, int]:
    """The table and bucket an add names (``TCA_U32_HASH``, else its handle's) and its chain,
    in one pass over its attributes (this runs for every key node add of a batch)."""
    htid, chain = handle & 0xFFF00000, 0
    for kind, start, end in attrs(body, S.TCMSG.size, len(body)):
        if kind == S.TCA.OPTIONS:
            for inner, at, _end in attrs(body, start, end):
                if inner == S.U32Attr.HASH:
                    htid = _U32.unpack_from(body, at)[0]
                    break
        elif kind == S.TCA.CHAIN:
            chain = _U32.unpack_from(body, start)[0]
    return htid, chain


class U32Known:
    """The packer's knowledge (module docs). ``predict``: handles may be predicted (not with
    ``force``)."""

    def __init__(self, *, predict: bool) -> None:
        self._predict = predict
        self._nonempty: set[Instance] = set()
        self._nonempty_pending: set[Instance] = set()
        #: Tables of ours: per bucket, the adds packed into it so far.
        self._tables: dict[Table, dict[int, int]] = {}
        self._tables_pending: set[Table] = set()

    def irreversible(self, message: Message) -> None:
        """A request that cannot be undone is being packed: note the hash table it creates, or
        forget everything (it may change any instance; module docs)."""
        if message.msg_type in (S.Msg.NEWACTION, S.Msg.DELACTION):
            return
        body = message.body
        if message.msg_type == S.Msg.NEWTFILTER and message.flags == _ADD and _is_table(body):
            _family, ifindex, handle, parent, info = S.TCMSG.unpack_from(body, 0)
            table = handle >> 20  # created whole (EXCL): no key node changes elsewhere
            if self._predict and table and table not in _ROOTS and not handle & 0xFFFFF and info >> 16:
                self._tables_pending.add((ifindex, parent, info, _hash_and_chain(body, 0)[1], table))
            return
        self._nonempty.clear()
        self._nonempty_pending.clear()
        self._tables.clear()
        self._tables_pending.clear()

    def key_node(self, message: Message, undo: Undo) -> tuple[Undo, bool]:
        """A u32 key node add with an undo: that undo made exact (the instance it needs to keep
        a key node; where the handle can be predicted, the delete naming it instead of an
        echo), and whether the add is risky (its instance may hold no other key node). Call
        :meth:`packed` once it is packed."""
        body = message.body
        _family, ifindex, handle, parent, info = S.TCMSG.unpack_from(body, 0)
        instance = (ifindex, parent, info)
        risky = instance not in self._nonempty
        if undo.u32_instance != instance:  # a template's undo was worked out on its first line
            undo = undo._replace(u32_instance=instance)
        if not self._tables:
            return undo, risky
        htid, chain = _hash_and_chain(body, handle)
        table = (ifindex, parent, info, chain, htid >> 20)
        buckets = self._tables.get(table)
        if buckets is None:
            return undo, risky
        bucket = (htid >> 12) & 0xFF
        packed = buckets.get(bucket, 0)
        if handle or packed >= _NODES - 1:  # the kernel's numbering no longer follows
            del self._tables[table]
            return undo, risky
        buckets[bucket] = packed + 1
        return Undo(u32_instance=instance, slot=(table, bucket),
                    handle=(htid & 0xFFFFF000) | (_FIRST_NODE + packed)), risky

    def packed(self, instance: Instance) -> None:
        """A key node add into ``instance`` was packed: it holds one once the batch is handed
        over."""
        self._nonempty_pending.add(instance)

    def handed_over(self) -> None:
        """The batch packed so far was handed to the sending thread."""
        self._nonempty |= self._nonempty_pending
        self._nonempty_pending = set()
        for table in self._tables_pending:
            self._tables[table] = {}
        self._tables_pending = set()
