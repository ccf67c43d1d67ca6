"""The difference between a desired and a live tc state, as the ``tc -b`` lines that close it.

Objects are matched by key (:mod:`.state`); a desired u32 key node without a handle matches a
live one of its table and bucket with the same spec. Then, in this order:

1. **deletes** of live objects nothing desired matches, children before parents: u32 key
   nodes, then u32 tables, then classes deepest first, then qdiscs deepest first. What goes with
   a deleted qdisc (its classes, filters, leaf qdiscs) is not deleted again; a u32 instance
   none of whose objects is wanted goes in one delete.
2. **action deletes**: after the filter deletes, which release their actions only after an RCU
   grace period (the caller waits for that between the two, :attr:`Plan.released`).
3. **changes and adds**, in the desired file's order (the order ``tc -b FILE`` itself needs):
   an htb class whose parent stays is changed in place (``class change``), a u32 key node
   whose selector stays is replaced (``filter replace``: new classid, link, actions), a
   standalone action is changed (``actions change``). Everything else that differs is deleted
   (in 1) and added again: a qdisc (htb has no in-place change; what it holds goes with it
   and is added again), a class that moves, a u32 table whose divisor changes (its whole
   instance), a key node whose selector changes (u32 keeps a node's selector on replace) or
   whose live form links to a table or points to a class that is being deleted (the delete
   must not find it in use).

Unchanged objects get no line: their counters and queues stay.
"""

from __future__ import annotations

import dataclasses
import re

from . import render
from . import specs as S
from .state import Live, TcObject

_VERB = re.compile(r"^(\s*\S+\s+)(\S+)")
#: The verb that changes each kind of object in place.
#: Parents of a device's own qdiscs (not inside another qdisc).
_TOP = (S.TC_H_ROOT, S.TC_H_INGRESS)
_CHANGE = {"class": "change", "action": "change"}


@dataclasses.dataclass
class Plan:
    """The lines of each phase, and how many objects each kind of step touches."""

    deletes: list[str] = dataclasses.field(default_factory=list)
    action_deletes: list[str] = dataclasses.field(default_factory=list)
    #: (kind, index) of actions the deletes must wait for (bound to deleted filters).
    released: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    adds: list[str] = dataclasses.field(default_factory=list)
    #: Per add, the desired line's message as the reader encoded it (None for a change or
    #: replace, which is a line of its own and is encoded as it is sent).
    add_messages: list = dataclasses.field(default_factory=list)
    unchanged: int = 0

    @property
    def lines(self) -> list[str]:
        return self.deletes + self.action_deletes + self.adds


def with_verb(line: str, verb: str) -> str:
    """``line`` (``OBJECT add ...``) with its verb replaced."""
    return _VERB.sub(lambda m: m.group(1) + verb, line, count=1)


def same(want: TcObject, have: TcObject) -> bool:
    """Whether live ``have`` is what ``want`` asks for: an htb qdisc's direct_qlen left to the
    device (None) takes whatever the device gave it; an htb class that is inner on either side
    is compared without quantum and prio (an inner class keeps those of its leaf days, and a
    leaf's are set as it is added or changed, before its children come)."""
    if want.kind == "qdisc" and want.spec[1] == "htb" and want.spec[-1] is None:
        return want.spec[:-1] == have.spec[:-1]
    if want.kind == "class" and (want.spec[-1] or have.spec[-1]):
        return want.spec[:5] + want.spec[7:-1] == have.spec[:5] + have.spec[7:-1]
    return want.spec == have.spec


def _instance(obj: TcObject) -> tuple | None:
    return obj.key[:5] if obj.kind in ("filter", "ht") else None


def _qdisc_of(obj: TcObject) -> tuple[int, int]:
    """(ifindex, major) of a qdisc, or of the qdisc a class or filter lives in."""
    return obj.key[0], obj.key[1] & 0xFFFF0000


def _depth(obj: TcObject, classes: dict[tuple, TcObject]) -> int:
    """How many classes lie above a class or qdisc (deepest deleted first)."""
    depth, parent = 0, obj.spec[0]
    while (obj.key[0], parent) in classes and depth < 64:
        depth += 1
        parent = classes[obj.key[0], parent].spec[0]
    return depth


def difference(desired: list[TcObject], live: Live) -> Plan:
    """The :class:`Plan` taking ``live`` to ``desired`` (see the module docs)."""
    live_by_key = {(obj.kind, obj.key): obj for obj in live.objects}
    names = live.names
    matched: dict[int, TcObject] = {}  # desired position → live object it stands for
    claimed: set[tuple] = set()
    for i, obj in enumerate(desired):
        found = live_by_key.get((obj.kind, obj.key))
        if found is not None:
            matched[i] = found
            claimed.add((obj.kind, obj.key))
    bucket_nodes: dict[tuple, list[TcObject]] | None = None  # live key nodes by table, bucket
    for i, obj in enumerate(desired):  # key nodes the kernel numbers: by content
        if obj.kind == "filter" and obj.key[7] is None:
            if bucket_nodes is None:
                bucket_nodes = {}
                for other in live.objects:
                    if other.kind == "filter":
                        bucket_nodes.setdefault(other.key[:7], []).append(other)
            for other in bucket_nodes.get(obj.key[:7], ()):
                if ("filter", other.key) not in claimed and same(obj, other):
                    matched[i] = other
                    claimed.add(("filter", other.key))
                    break
    if (len(matched) == len(desired) == len(claimed) == len(live.objects)
            and all(same(obj, matched[i]) for i, obj in enumerate(desired))):
        return Plan(unchanged=len(desired))  # the live state is the file's: nothing to send

    # what must go (and come back) whole
    rebuilt_instances = {obj.key[:5] for i, obj in enumerate(desired)
                         if obj.kind == "ht" and i in matched and not same(obj, matched[i])}
    wanted_instances = {_instance(obj) for obj in desired} - {None}
    keyed = {}
    for obj in desired:
        keyed.setdefault(_instance(obj), []).append(obj)
    rebuilt_instances |= {inst for inst in wanted_instances
                          if not any(o.kind == "filter" for o in keyed[inst])
                          and any(o.kind == "filter" and _instance(o) == inst
                                  for o in live.objects)}
    moved_qdiscs = {_qdisc_of(m) for i, m in matched.items()
                    if m.kind == "qdisc" and not same(desired[i], m)}
    recreated = set()  # (kind, key) of live objects deleted then added again
    for i, m in matched.items():
        d = desired[i]
        if same(d, m):
            continue
        if (m.kind == "qdisc" and _qdisc_of(m) in moved_qdiscs
                or m.kind == "class" and m.spec[0] != d.spec[0]):
            recreated.add((m.kind, m.key))
    unwanted = [obj for obj in live.objects if (obj.kind, obj.key) not in claimed
                or (obj.kind, obj.key) in recreated]
    gone_qdiscs = {_qdisc_of(obj) for obj in unwanted if obj.kind == "qdisc"}
    gone_classes = {obj.key for obj in unwanted if obj.kind == "class"}
    gone_tables = {(obj.key[:5], obj.key[5]) for obj in unwanted if obj.kind == "ht"}

    def swept(obj: TcObject) -> bool:
        """Whether ``obj`` goes with a deleted qdisc or a rebuilt u32 instance."""
        if obj.kind == "qdisc":  # a leaf qdisc, with the class it hangs from
            return obj.spec[0] not in _TOP and (obj.key[0], obj.spec[0] & 0xFFFF0000) in gone_qdiscs
        return _qdisc_of(obj) in gone_qdiscs or _instance(obj) in rebuilt_instances

    # key nodes replace cannot change, or holding on to a class or table that is deleted (even
    # one added again: htb refuses to delete a class a filter points to): delete, add again
    for i, m in matched.items():
        if m.kind == "filter" and ("filter", m.key) not in recreated:
            sel, classid, link, *_ = m.spec
            if (sel != desired[i].spec[0] or (m.key[0], classid) in gone_classes
                    or (m.key[:5], link) in gone_tables):
                recreated.add(("filter", m.key))
                unwanted.append(m)

    plan = Plan()
    classes = {obj.key: obj for obj in live.objects if obj.kind == "class"}
    deleted_instances = {inst for inst in {_instance(o) for o in unwanted} - {None}
                         if inst not in wanted_instances or inst in rebuilt_instances}
    for inst in sorted(deleted_instances):
        if _qdisc_of_instance(inst) not in gone_qdiscs:
            plan.deletes.append(render.instance_delete_line(inst, names))
    rank = {"filter": 0, "ht": 1, "class": 2, "qdisc": 3}
    ordered = sorted((obj for obj in unwanted if obj.kind != "action"),
                     key=lambda o: (rank[o.kind], -_depth(o, classes) if o.kind in ("class", "qdisc")
                                    else 0))
    for obj in ordered:
        if _instance(obj) in deleted_instances or swept(obj):
            continue
        plan.deletes.append(render.delete_line(obj, names, live.root_ids))
    gone_filters = [obj for obj in unwanted if obj.kind == "filter"]
    for obj in unwanted:
        if obj.kind == "action":
            plan.action_deletes.append(render.delete_line(obj, names, live.root_ids))
            if any(a[:2] == obj.key for f in gone_filters for a in f.spec[5]):
                plan.released.append(obj.key)

    gone = {(o.kind, o.key) for o in unwanted}
    sent = set()  # a line naming several actions stands for each of them: sent once
    for i, obj in enumerate(desired):
        m = matched.get(i)
        message = None
        if m is None or (m.kind, m.key) in gone or swept(m) or _instance(m) in deleted_instances:
            line, message = obj.line, obj.message
        elif same(obj, m):
            plan.unchanged += 1
            continue
        elif obj.kind == "filter":  # by its live handle: a root table's id is the kernel's
            line = render.add_line(obj._replace(key=m.key), names, "replace",
                                   live.root_ids.get(m.key[:5]))
        else:
            line = with_verb(obj.line, _CHANGE[obj.kind])
        if line not in sent:
            sent.add(line)
            plan.adds.append(line)
            plan.add_messages.append(message)
    return plan


def _qdisc_of_instance(instance: tuple) -> tuple[int, int]:
    return instance[0], instance[1] & 0xFFFF0000
