"""Waiting until deleted filters have let go of their actions.

A filter delete returns before the filter's actions are released: the kernel drops the
filter's references after an RCU grace period, from a workqueue (``tcf_queue_work``). Until
then an action the filter created is still listed and still holds its index (the next action
the kernel numbers gets another one than after ``tc -b``), and an action the filter was bound
to still counts the binding (deleting that action is refused: EPERM, "action bound").

The sender's undo must leave the kernel as if the undone lines had never been sent, before
it deletes undone actions and before it returns. So it reads the actions each filter holds
before deleting the filters (:func:`filter_actions` on the answers to :func:`.filter_get`),
works out what the kernel owes (:func:`releases`), and polls those actions until it is paid
(:func:`wait_released`). ``tc -b`` itself exits with the same kind of release pending after a
``filter del``/``replace``/``change``; the undo only must not add its own.
"""

from __future__ import annotations

import errno
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ..errors import BpfBatchError
from . import specs as S
from .message import Message, action_get, action_parms, action_table, attr_str, find_attr
from .netlink import Reply

#: How long the kernel may take to release: normally one grace period (milliseconds), longer
#: on a loaded machine; past this something else holds the actions and waiting is pointless.
RELEASE_TIMEOUT = 10.0
_FIRST_PAUSE, _LONGEST_PAUSE = 0.001, 0.05
#: The attribute holding a classifier's actions, per classifier kind.
_ACTIONS_ATTR = {"u32": S.U32Attr.ACT, "bpf": S.Bpf.ACT, "matchall": S.Matchall.ACT,
                 "flower": S.Flower.ACT}
#: struct tc_gen, which a gact's or mirred's PARMS opens with: index, capab, action, refcnt,
#: bindcnt (struct tc_gact is it alone).
_TC_GEN = S.TC_GACT
#: A :func:`releases` target: the action must be gone.
GONE = -1


class HeldAction(NamedTuple):
    """An action as the kernel dumped it: ``ref`` counts its holders (each bound filter, plus
    one when it was added on its own), ``bind`` the filters bound to it."""

    kind: str
    index: int
    ref: int
    bind: int


def _actions_in(data, start: int, end: int) -> list[HeldAction]:
    """The actions of an action table nest (``TCA_ACT_TAB`` or a classifier's ``*_ACT``)."""
    held = []
    for _order, kind_span, parms in action_parms(data, start, end):
        kind = attr_str(data, kind_span)
        if kind not in ("gact", "mirred") or not parms or parms[1] - parms[0] < _TC_GEN.size:
            raise BpfBatchError(f"cannot read the reference counts of a {kind} action",
                                obj="tc undo")
        index, _capab, _verdict, ref, bind = _TC_GEN.unpack_from(data, parms[0])
        held.append(HeldAction(kind, index, ref, bind))
    return held


def filter_actions(dump: bytes) -> list[HeldAction]:
    """The actions a filter holds, from its dump (an answer to :func:`.filter_get`)."""
    end = len(dump)
    kind = attr_str(dump, find_attr(dump, S.TCMSG.size, end, S.TCA.KIND))
    options = find_attr(dump, S.TCMSG.size, end, S.TCA.OPTIONS)
    wanted = _ACTIONS_ATTR.get(kind)
    table = options and wanted and find_attr(dump, *options, wanted)
    return _actions_in(dump, *table) if table else []


def releases(held: Iterable[HeldAction]) -> dict[tuple[str, int], int]:
    """What the kernel owes once the filters holding ``held`` (read before any was deleted)
    are deleted, per ``(kind, index)``: :data:`GONE` when those filters were its only holders,
    else the bind count it must come down to."""
    held = list(held)
    dropped = Counter((a.kind, a.index) for a in held)
    read = {(a.kind, a.index): a for a in held}
    return {key: GONE if read[key].ref == count else read[key].bind - count
            for key, count in dropped.items()}


def _paid(reply: Reply | None, target: int) -> bool:
    if reply is not None and reply.error == errno.ENOENT:
        return True
    if reply is None or reply.dump is None:
        raise BpfBatchError("no answer when reading back an action", obj="tc undo")
    table = action_table(reply.dump)
    held = _actions_in(reply.dump, *table) if table else []
    return target != GONE and bool(held) and held[0].bind <= target


def wait_released(query: Callable[[list[Message]], list[Reply | None]],
                  owed: dict[tuple[str, int], int], *, source: str) -> None:
    """Poll the actions in ``owed`` (:func:`releases`) with ``query`` — which sends get
    requests and returns each one's answer or error — until the kernel has released them all;
    raise naming those still held after :data:`RELEASE_TIMEOUT` seconds."""
    deadline = time.monotonic() + RELEASE_TIMEOUT
    pause = _FIRST_PAUSE
    while owed:
        keys = list(owed)
        answers = query([action_get(kind, index) for kind, index in keys])
        owed = {key: owed[key] for key, answer in zip(keys, answers) if not _paid(answer, owed[key])}
        if not owed:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{kind} {index}" for kind, index in sorted(owed)[:8])
            raise BpfBatchError(f"actions {names}{' ...' if len(owed) > 8 else ''} still held "
                                f"{RELEASE_TIMEOUT:g} s after the filters undone were deleted",
                                obj=source)
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)
