"""gate (``m_gate.c``): ``gate [index N] [priority P] [base-time T] [cycle-time T]
[cycle-time-ext T] [clockid CLOCK] [flags N] [sched-entry open|close INTERVAL [IPV [MAX-OCTETS]]]...
[CONTROL]``, a time-based gate (IEEE 802.1Qci); tc's usage, words and attributes, and the C
number readers it uses (``strtol``/``strtoll``, ``strtod`` under ``get_time64``/``get_size``)
with the conversions x86-64 makes of their results (patterns compiled on first use, by re's
cache: most batches never read a gate)."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import struct

from .. import specs as S
from ..action_list import action_failed, next_arg
from ..encoding import NLA_F_NESTED, encode, strz
from ..numbers import integer, strtol
from ..grammar import CommandError, Words, invalid, matches, unsigned
from ..resolve import Resolver
from . import gact
from .tail import Tail

NAMES = ("gate",)

USAGE = """\
Usage: gate [ priority PRIO-SPEC ] [ base-time BASE-TIME ]
       [ cycle-time CYCLE-TIME ]
       [ cycle-time-ext CYCLE-TIME-EXT ]
       [ clockid CLOCKID ] [flags FLAGS]
       [ sched-entry GATE0 INTERVAL [ INTERNAL-PRIO-VALUE MAX-OCTETS ] ]
       [ sched-entry GATE1 INTERVAL [ INTERNAL-PRIO-VALUE MAX-OCTETS ] ]
       ......
       [ sched-entry GATEn INTERVAL [ INTERNAL-PRIO-VALUE MAX-OCTETS ] ]
       [ CONTROL ]
       GATEn := open | close
       INTERVAL : nanoseconds period of gate slot
       INTERNAL-PRIO-VALUE : internal priority decide which
                             rx queue number direct to.
                             default to be -1 which means wildcard.
       MAX-OCTETS : maximum number of MSDU octets that are
                    permitted to pas the gate during the
                    specified TimeInterval.
                    default to be -1 which means wildcard.
       CONTROL := pipe | drop | continue | pass |
                  goto chain <CHAIN_INDEX>"""

_INCOMPLETE = ("Usage: sched-entry <open | close> <interval> [ <interval ipv> <octets max bytes> ]\n"
               '"sched-entry" is incomplete')

# linux/tc_act/tc_gate.h
_PARMS, _PRIORITY, _ENTRY_LIST, _BASE_TIME, _CYCLE_TIME, _CYCLE_TIME_EXT = 2, 4, 5, 6, 7, 8
_FLAGS, _CLOCKID = 9, 10
_ONE_ENTRY = 1 | NLA_F_NESTED
_ENTRY_GATE, _ENTRY_INTERVAL, _ENTRY_IPV, _ENTRY_MAX_OCTETS = 2, 3, 4, 5
#: get_clockid's names (case-insensitive, after an optional ``CLOCK_``): the clock ids.
_CLOCKS = {"realtime": 0, "tai": 11, "boottime": 7, "monotonic": 1}
_KIND = encode((strz(S.ActAttr.KIND, "gate"),))
_U32 = struct.Struct("=I")
_S32 = struct.Struct("=i")
_S64 = struct.Struct("=q")
_INT_MAX = (1 << 31) - 1
_S64_MIN = -(1 << 63)

#: What ``strtod`` reads at the start of a word: hex and decimal floats, inf, nan.
_STRTOD = (r"[ \t\n\v\f\r]*([+-]?)(?:(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
           r"|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)|((?i:inf(?:inity)?|nan(?:\([0-9a-z_]*\))?)))")
#: get_time64's units (case-insensitive): nanoseconds each.
_TIME_UNITS = dict.fromkeys(("s", "sec", "secs"), 1e9) | dict.fromkeys(("ms", "msec", "msecs"), 1e6) \
    | dict.fromkeys(("us", "usec", "usecs"), 1e3) | dict.fromkeys(("ns", "nsec", "nsecs"), 1.0)
#: get_size's units (case-insensitive): bytes each (C integer arithmetic: ``1024/8``).
_SIZE_UNITS = {"kb": 1024, "k": 1024, "gb": 1 << 30, "g": 1 << 30, "gbit": (1 << 30) // 8,
               "mb": 1 << 20, "m": 1 << 20, "mbit": (1 << 20) // 8, "kbit": 1024 // 8, "b": 1}


@dataclasses.dataclass(slots=True)
class Gate(Tail):
    """gate: the schedule ``entries`` (open, interval ns, internal priority, max octets; -1 a
    wildcard) and its timing (ns; 0 is not sent), the ``priority`` and ``clockid`` (-1 not
    sent), ``flags``."""

    priority: int = -1
    flags: int = 0
    base_time: int = 0
    cycle_time: int = 0
    cycle_time_ext: int = 0
    clockid: int = -1
    entries: tuple[tuple[bool, int, int, int], ...] = ()
    kind = "gate"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms())]
        for type_, value, form, unset in ((_PRIORITY, self.priority, _S32, -1),
                                          (_FLAGS, self.flags, _U32, 0),
                                          (_BASE_TIME, self.base_time, _S64, 0),
                                          (_CYCLE_TIME, self.cycle_time, _S64, 0),
                                          (_CYCLE_TIME_EXT, self.cycle_time_ext, _S64, 0),
                                          (_CLOCKID, self.clockid, _S32, -1)):
            if value != unset:
                options.append((type_, form.pack(value)))
        entries = tuple((_ONE_ENTRY, ((_ENTRY_GATE, b""),) * is_open
                         + ((_ENTRY_INTERVAL, _U32.pack(interval)), (_ENTRY_IPV, _S32.pack(ipv)),
                            (_ENTRY_MAX_OCTETS, _S32.pack(octets))))
                        for is_open, interval, ipv, octets in self.entries)
        options.append((_ENTRY_LIST | NLA_F_NESTED, entries))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Gate:
    """tc's ``parse_gate``, the cursor on ``gate``."""
    failed = functools.partial(action_failed, left=left, kind="gate")
    action = Gate()
    entries = []
    next_arg(w)
    while (word := w.peek()) is not None:
        if matches(word, "index"):
            action.index = _value(unsigned(next_arg(w), 10), w, "index")
        elif matches(word, "priority"):
            action.priority = _value(integer(next_arg(w)), w, "priority")
        elif matches(word, "base-time"):
            action.base_time = _value(_time(next_arg(w)), w, "base-time")
        elif matches(word, "cycle-time"):
            action.cycle_time = _value(_time(next_arg(w)), w, "cycle-time")
        elif matches(word, "cycle-time-ext"):
            action.cycle_time_ext = _value(_time(next_arg(w)), w, "cycle-time-ext")
        elif matches(word, "clockid"):
            action.clockid = _value(_clockid(next_arg(w)), w, "clockid")
        elif matches(word, "flags"):
            action.flags = _value(unsigned(next_arg(w), 0), w, "flags")
        elif matches(word, "sched-entry"):
            entries.append(_entry(w, failed))
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
    verdict, said = gact.control_dflt(w)
    action.verdict = verdict or action.verdict
    if not entries and not action.index:
        raise failed(f"{said}gate: must add at least one entry")
    action.entries = tuple(entries)
    gact.refused_again(said)
    return action


def _value(value, w: Words, what: str):
    """``value``, or tc's ``invarg(WHAT, word)`` (its words, and it exits)."""
    if value is None:
        raise invalid(w.peek(), what)
    return value


def _entry(w: Words, failed) -> tuple[bool, int, int, int]:
    """``sched-entry open|close INTERVAL [IPV [MAX-OCTETS]]``, the cursor on ``sched-entry``;
    it ends on the last word taken. IPV and MAX-OCTETS are read only where they parse (the
    cursor stays before a word that does not), and are -1 on a closed gate."""
    if w.left() < 2:
        raise failed(_INCOMPLETE)
    text = next_arg(w)
    state = text.lower() if text.isascii() else ""  # strcasecmp: ASCII letters alone
    if state not in ("open", "close") or w.left() < 2:
        raise failed(_INCOMPLETE)
    is_open = state == "open"
    text = next_arg(w)
    interval = unsigned(text, 0)
    if interval is None:  # a time: larger than 32 bits refused, a negative one wraps
        nsec = _time64(text)
        if nsec is None:
            raise failed(_INCOMPLETE)
        if nsec > 0xFFFFFFFF:
            raise failed('"interval" is too large')
        interval = nsec & 0xFFFFFFFF
    ipv = octets = -1
    if w.left() < 2:
        return is_open, interval, ipv, octets
    ipv = integer(next_arg(w))
    if ipv is None:
        w.pos -= 1
        return is_open, interval, -1, octets
    if not is_open:
        ipv = -1
    if w.left() < 2:
        return is_open, interval, ipv, octets
    text = next_arg(w)
    octets = integer(text)
    size = 0
    if octets is None:
        octets = -1
        read, size = _size(text)
        if not read:
            w.pos -= 1
        # a size that failed its overflow check is still used, as tc stored it first
        if size > _INT_MAX:
            raise failed('"maxoctets" is too large')
        if size:
            octets = size
    return is_open, interval, ipv, octets if is_open else -1


def _time(text: str) -> int | None:
    """base-time and the cycle times: ``get_s64(..., 10)``, else ``get_time64``."""
    value, end, overflowed = strtol(text, 10)
    if end and end == len(text) and not overflowed:
        return value
    return _time64(text)


def _time64(text: str) -> int | None:
    """``get_time64``: a ``strtod`` number with an optional unit (s, ms, us, ns ...; none:
    ns), in ns, cut to 64 bits as x86-64 converts (out of range or NaN: INT64_MIN)."""
    read = _strtod(text)
    if read is None:
        return None
    value, rest = read
    if rest:
        scale = _TIME_UNITS.get(rest.lower()) if rest.isascii() else None
        if scale is None:
            return None
        value *= scale
    return int(value) if -2.0 ** 63 <= value < 2.0 ** 63 else _S64_MIN


def _size(text: str) -> tuple[bool, int]:
    """``get_size`` into an unsigned int: (read it, the value it stored). tc stores the
    ``strtod`` number times the unit before it checks it (the store is x86-64's: the double
    cut to 64 bits, then to 32; out of range or NaN: 0), and refuses what does not equal its
    floor — the stored value stays."""
    read = _strtod(text)
    if read is None:
        return False, 0
    value, rest = read
    if rest:
        scale = _SIZE_UNITS.get(rest.lower()) if rest.isascii() else None
        if scale is None:
            return False, 0
        value *= scale
    stored = int(value) & 0xFFFFFFFF if -2.0 ** 63 <= value < 2.0 ** 63 else 0
    return stored == math.floor(value) if math.isfinite(value) else False, stored


def _strtod(text: str) -> tuple[float, str] | None:
    """``strtod``: (the number at the start of ``text``, what follows it), None if none."""
    found = re.match(_STRTOD, text)
    if found is None:
        return None
    sign, hexa, decimal, named = found.groups()
    if hexa is not None:
        value = float.fromhex(hexa)
    elif decimal is not None:
        value = float(decimal)
    else:
        value = float(named.partition("(")[0])
    return (-value if sign == "-" else value), text[found.end():]


def _clockid(text: str) -> int | None:
    """``get_clockid``: a clock name, case-insensitive; a word holding ``CLOCK_`` anywhere
    loses its first six characters first (tc's quirk: it skips from the start)."""
    if "clock_" in text.lower():
        text = text[6:]
    return _CLOCKS.get(text.lower()) if text.isascii() else None
