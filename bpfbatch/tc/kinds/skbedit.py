"""skbedit (``m_skbedit.c``): ``skbedit [queue_mapping Q] [priority CLASSID] [mark MARK[/MASK]]
[ptype TYPE] [inheritdsfield] [CONTROL] [index N]``; tc's usage, words and attributes."""

from __future__ import annotations

import dataclasses
import struct

from .. import specs as S
from ..action_list import failure, next_arg
from ..encoding import encode, strz
from ..grammar import CommandError, Words, matches, parse_classid, unsigned
from ..resolve import Resolver
from . import gact
from .tail import Tail

NAMES = ("skbedit",)

USAGE = """\
Usage: ... skbedit <[QM] [PM] [MM] [PT] [IF]>
QM = queue_mapping QUEUE_MAPPING
PM = priority PRIORITY
MM = mark MARK[/MASK]
PT = ptype PACKETYPE
IF = inheritdsfield
PACKETYPE = is one of:
  host, otherhost, broadcast, multicast
QUEUE_MAPPING = device transmit queue to use
PRIORITY = classID to assign to priority field
MARK = firewall mark to set
MASK = mask applied to firewall mark (0xffffffff by default)
note: inheritdsfield maps DS field to skb->priority"""

# linux/tc_act/tc_skbedit.h
_PARMS, _PRIORITY, _QUEUE_MAPPING, _MARK, _PTYPE, _MASK, _FLAGS = 2, 3, 4, 5, 7, 8, 9
_INHERITDSFIELD = 0x20  # SKBEDIT_F_INHERITDSFIELD
#: ``ptype`` words in tc's order (a prefix names the first it starts), PACKET_* values.
_PTYPES = (("host", 0), ("broadcast", 1), ("multicast", 2), ("otherhost", 3))
_KIND = encode((strz(S.ActAttr.KIND, "skbedit"),))
_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")


@dataclasses.dataclass(slots=True)
class Skbedit(Tail):
    """skbedit: set the packet's queue, priority (a class id), mark (under ``mask``), packet
    type, or its priority from the DS field; each None/False leaves that untouched."""

    queue_mapping: int | None = None
    priority: int | None = None
    mark: int | None = None
    mask: int | None = None
    ptype: int | None = None
    inheritdsfield: bool = False
    kind = "skbedit"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms())]
        for type_, value, form in ((_QUEUE_MAPPING, self.queue_mapping, _U16),
                                   (_PRIORITY, self.priority, _U32), (_MARK, self.mark, _U32),
                                   (_MASK, self.mask, _U32), (_PTYPE, self.ptype, _U16)):
            if value is not None:
                options.append((type_, form.pack(value)))
        if self.inheritdsfield:
            options.append((_FLAGS, _U64.pack(_INHERITDSFIELD)))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Skbedit:
    """tc's ``parse_skbedit``, the cursor on ``skbedit``."""
    failed = failure(left, "skbedit")

    next_arg(w)
    action = Skbedit()
    ok = False
    while (word := w.peek()) is not None:
        if matches(word, "queue_mapping"):
            action.queue_mapping = unsigned(next_arg(w), 10)
            if action.queue_mapping is None or action.queue_mapping > 0xFFFF:
                raise failed("Illegal queue_mapping")
        elif matches(word, "priority"):
            action.priority = parse_classid(next_arg(w))
            if action.priority is None:
                raise failed("Illegal priority")
        elif matches(word, "mark"):
            mark, slash, mask = next_arg(w).partition("/")
            action.mark = unsigned(mark, 0)
            if action.mark is None:
                raise failed("Illegal mark")
            if slash:
                action.mask = unsigned(mask, 0)
                if action.mask is None:
                    raise failed("Illegal mask")
        elif matches(word, "ptype"):
            name = next_arg(w)
            action.ptype = next((v for ptype, v in _PTYPES if matches(name, ptype)), None)
            if action.ptype is None:
                raise failed(f"Illegal ptype ({name})")
        elif matches(word, "inheritdsfield"):
            action.inheritdsfield = True
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        ok = True
        w.pos += 1
    said, indexed = action.read_tail(w, failed, 'skbedit: Illegal "index"')
    if not ok and not indexed:
        raise failed(said + USAGE)
    gact.refused_again(said)
    return action
