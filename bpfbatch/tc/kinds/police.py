"""police (``m_police.c``): ``police [rate BPS burst BYTES[/CELL]] [pkts_rate N pkts_burst N]
[mtu BYTES[/CELL]] [peakrate BPS] [avrate BPS] [overhead N] [linklayer TYPE] [mpu BYTES]
[CONTROL | conform-exceed EXCEED[/CONFORM]] [index N]``, in any order; tc's usage, words and
attributes (the rate tables computed as tc computes them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
import re
import struct

from ...errors import InputError
from .. import rules as R
from .. import specs as S
from ..action_list import action_failed, control, next_arg, verdict_word
from ..encoding import encode, strz
from ..grammar import CommandError, Words, invalid, matches, unsigned
from ..htb import (LINKLAYER_ATM, LINKLAYER_ETHERNET, TC_RATESPEC, parse_rate, parse_size,
                   ratespec, xmittime)
from ..resolve import Resolver

NAMES = ("police",)

USAGE = """\
Usage: ... police [ rate BPS burst BYTES[/BYTES] ] 
\t\t[ pkts_rate RATE pkts_burst PACKETS ] [ mtu BYTES[/BYTES] ]
\t\t[ peakrate BPS ] [ avrate BPS ] [ overhead BYTES ]
\t\t[ linklayer TYPE ] [ CONTROL ]
Where: CONTROL := conform-exceed <EXCEEDACT>[/NOTEXCEEDACT]
\t\t  Define how to handle packets which exceed (<EXCEEDACT>)
\t\t  or conform (<NOTEXCEEDACT>) the configured bandwidth limit.
       EXCEEDACT/NOTEXCEEDACT := { pipe | ok | reclassify | drop | continue |
\t\t\t\t   goto chain <CHAIN_INDEX> }"""

# linux/pkt_cls.h TCA_POLICE_*
_TBF, _RATE, _PEAKRATE, _AVRATE, _RESULT = 1, 2, 3, 4, 5
_RATE64, _PEAKRATE64, _PKTRATE64, _PKTBURST64 = 8, 9, 10, 11
#: struct tc_police: index, action, limit, burst, mtu, rate and peakrate (tc_ratespec),
#: refcnt, bindcnt, capab.
_TC_POLICE = struct.Struct(f"=IiIII{TC_RATESPEC.size}s{TC_RATESPEC.size}siiI")
_NO_RATE = bytes(TC_RATESPEC.size)
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
_KIND = encode((strz(S.ActAttr.KIND, "police"),))
#: The words that open a control verdict inside police's options (``jump``/``trap`` do not).
_CONTROL_OPENERS = ("reclassify", "drop", "shot", "continue", "pass", "ok", "pipe", "goto")
_SIZE_OPTIONS = {"mtu": "mtu", "minburst": "mtu", "buffer": "burst", "maxburst": "burst"}
_LINKLAYERS = (("ethernet", LINKLAYER_ETHERNET), ("atm", LINKLAYER_ATM), ("adsl", LINKLAYER_ATM))
_INT = re.compile(r"\s*[+-]?\d+")


@dataclasses.dataclass(slots=True)
class Police:
    """police: a token bucket of ``burst`` bytes at ``rate`` bytes/s (or ``pkts_burst``
    packets at ``pkts_rate`` packets/s, or an ``avrate`` estimate), ``peakrate`` over ``mtu``;
    packets over it take ``action``, those within it ``result`` (0: unset); both TC_ACT_*
    values (tc's ``conform-exceed`` takes numbers too)."""

    #: bytes/s, and the bucket's size in bytes.
    rate: int = 0
    burst: int = 0
    #: The largest packet the rate tables cover (and peakrate's bucket), the smallest size a
    #: packet is charged, the bytes added to each, and the link layer sizing them (1 ethernet,
    #: 2 atm).
    mtu: int = 0
    mpu: int = 0
    overhead: int = 0
    linklayer: int = LINKLAYER_ETHERNET
    #: bytes/s: a second bucket's rate (of ``mtu`` bytes), and an estimator's ceiling.
    peakrate: int = 0
    avrate: int = 0
    #: packets/s, and the bucket's size in packets (a packet policer instead of ``rate``).
    pkts_rate: int = 0
    pkts_burst: int = 0
    #: cell logs given as ``burst B/CELL`` and ``mtu M/CELL`` (-1: computed from the mtu).
    rate_cell_log: int = -1
    peak_cell_log: int = -1
    action: int = int(S.Verdict.RECLASSIFY)
    result: int = 0
    index: int = 0
    no_percpu: bool = False
    cookie: bytes | None = None
    kind = "police"

    def attrs(self, resolve: Resolver) -> tuple:
        return R.action_attrs(_KIND, self.options(), self.no_percpu, self.cookie)

    def options(self) -> tuple:
        """``act_parse_police``'s attributes, in its order."""
        rate_spec = peak_spec = _NO_RATE
        burst = 0
        tables = []
        if self.rate:
            rate_spec, table = self._ratespec(self.rate, self.rate_cell_log)
            burst = xmittime(self.rate, self.burst)
            tables.append((_RATE, table))
            if self.rate >= 1 << 32:
                tables.append((_RATE64, _U64.pack(self.rate)))
        if self.peakrate:
            peak_spec, table = self._ratespec(self.peakrate, self.peak_cell_log)
            tables.append((_PEAKRATE, table))
            if self.peakrate >= 1 << 32:
                tables.append((_PEAKRATE64, _U64.pack(self.peakrate)))
        tbf = _TC_POLICE.pack(self.index, self.action, 0, burst, self.mtu,
                              rate_spec, peak_spec, 0, 0, 0)
        options = [(_TBF, tbf), *tables]
        if self.avrate:
            options.append((_AVRATE, _U32.pack(self.avrate)))
        if self.result:
            options.append((_RESULT, _U32.pack(self.result & 0xFFFFFFFF)))
        if self.pkts_rate:
            options.append((_PKTRATE64, _U64.pack(self.pkts_rate)))
            options.append((_PKTBURST64, _U64.pack(xmittime(self.pkts_rate, self.pkts_burst))))
        return tuple(options)

    def _ratespec(self, rate: int, cell_log: int) -> tuple[bytes, bytes]:
        return ratespec(rate, self.mtu, self.mpu, cell_log, self.linklayer, self.overhead,
                        wide_table=True)


def parse_action(w: Words, left: int) -> Police:
    """tc's ``act_parse_police`` as an action, the cursor on ``police``."""
    next_arg(w)
    return parse_police(w, lambda text="": action_failed(text, left, "police"))


def parse_police(w: Words, failed: Callable[..., CommandError]) -> Police:
    """``act_parse_police``'s options, the cursor on the first; on a failure the caller's
    ``failed(text)`` (or ``failed()`` where police says nothing) adds its own lines to police's
    words (an action's, u32's ``police`` shorthand's), a fatal CommandError for tc's exits."""
    police = Police()
    given: set[str] = set()
    ok = False
    while (word := w.peek()) is not None:
        if matches(word, "index"):
            police.index = _value(w, unsigned(next_arg(w), 10), "index")
        elif matches(word, "burst") or word in _SIZE_OPTIONS:
            name = _SIZE_OPTIONS.get(word, "burst")
            text = _once(w, given, "buffer/burst" if name == "burst" else "mtu/minburst")
            size, cell_log = _value(w, _size_and_cell(text), "buffer" if name == "burst" else "mtu")
            if name == "burst":
                police.burst, police.rate_cell_log = size, cell_log
            else:
                police.mtu, police.peak_cell_log = size, cell_log
        elif word == "mpu":
            police.mpu = _value(w, _size(_once(w, given, "mpu")), "mpu")
        elif word in ("rate", "avrate") or matches(word, "peakrate"):
            name = word if word in ("rate", "avrate") else "peakrate"
            rate = _value(w, _rate(_once(w, given, name), name != "avrate"), name)
            setattr(police, name, rate)
        elif any(matches(word, opener) for opener in _CONTROL_OPENERS):
            try:
                police.action = S.control_value(control(w))
            except CommandError as exc:
                if exc.fatal:
                    raise
                raise failed(str(exc) if verdict_word(word) else "") from None
            ok = True
            continue
        elif word == "conform-exceed":
            next_arg(w)
            police.action, police.result = _slash_control(w, failed)
            ok = True
            continue
        elif matches(word, "overhead"):
            police.overhead = _value(w, unsigned(next_arg(w), 10, bits=16), "overhead")
        elif matches(word, "linklayer"):
            name = next_arg(w)
            police.linklayer = _value(w, next((v for layer, v in _LINKLAYERS
                                               if matches(name, layer)), None), "linklayer")
        elif matches(word, "pkts_rate") or matches(word, "pkts_burst"):
            name = "pkts_rate" if matches(word, "pkts_rate") else "pkts_burst"
            setattr(police, name, _value(w, unsigned(_once(w, given, name), 10, bits=64), name))
        elif word == "help":
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
        ok = True
    if not ok or police.rate and police.avrate:
        raise failed()
    if not (police.rate or police.avrate or police.index or police.mtu or police.pkts_rate):
        raise failed("'rate' or 'avrate' or 'mtu' or 'pkts_rate' MUST be specified.")
    if police.rate and not police.burst and not police.avrate:
        raise failed("'burst' requires 'rate'.")
    if police.pkts_rate and not police.pkts_burst:
        raise failed("'pkts_burst' requires 'pkts_rate'.")
    if police.pkts_rate and police.rate:
        raise failed("'rate' and 'pkts_rate' are not allowed in same action.")
    if police.peakrate and not police.rate:
        raise failed("'peakrate' requires 'rate'.")
    if police.peakrate and not police.mtu:
        raise failed("'mtu' is required, if 'peakrate' is requested.")
    return police


def _once(w: Words, given: set[str], name: str) -> str:
    """The option's value (``NEXT_ARG``); tc's ``duparg`` when ``name`` was given before."""
    text = next_arg(w)
    if name in given:
        raise CommandError(f'Error: duplicate "{name}": "{text}" is the second value.', fatal=True)
    given.add(name)
    return text


def _value(w: Words, value, what: str):
    """``value``, or tc's ``invarg`` naming the word at the cursor and ``what``."""
    if value is None:
        raise invalid(w.peek(), what)
    return value


def _size(text: str) -> int | None:
    try:
        return parse_size(text)
    except InputError:
        return None


def _size_and_cell(text: str) -> tuple[int, int] | None:
    """``get_size_and_cell``: ``SIZE[/CELL]``, CELL a power of two → (size, cell_log or -1)."""
    size_text, slash, cell_text = text.partition("/")
    size = _size(size_text)
    if size is None:
        return None
    if not slash:
        return size, -1
    cell = _c_int(cell_text)
    if cell is None or cell <= 0 or cell & (cell - 1) or cell >= 1 << 32:
        return None
    return size, cell.bit_length() - 1


def _rate(text: str, wide: bool) -> int | None:
    """``get_rate64`` (``wide``) or ``get_rate`` (at most 32 bits)."""
    try:
        rate = parse_rate(text)
    except InputError:
        return None
    return rate if wide or rate <= 0xFFFFFFFF else None


def _c_int(text: str) -> int | None:
    """``sscanf("%d%c")`` read exactly one integer."""
    return int(text) if _INT.fullmatch(text) else None


def _verdict_or_number(text: str) -> int | None:
    """``action_a2n`` allowing numbers: the TC_ACT_* value a verdict word or integer names
    (``goto``/``jump`` without their operand)."""
    word = verdict_word(text)
    if word is not None:
        return _OPERAND_VERDICTS.get(word) or S.GACT_VERDICTS[word]
    return _c_int(text)


_OPERAND_VERDICTS = {"goto": S.TC_ACT_GOTO_CHAIN, "jump": S.TC_ACT_JUMP}


def _slash_control(w: Words, failed) -> tuple[int, int]:
    """``parse_action_control_slash``, the cursor on ``EXCEED[/CONFORM]`` → (exceed value,
    conform value or 0). A word without a slash is ``parse_action_control_slash_spaces``: a
    control (a number allowed), then, where the next word is ``/``, a second one."""
    text = w.peek()
    exceed, slash, conform = text.partition("/")
    if not slash:
        first = _control_or_number(w, failed)
        if w.peek() != "/":
            return first, 0
        next_arg(w)
        return first, _control_or_number(w, failed)
    first, second = _verdict_or_number(exceed), _verdict_or_number(conform)
    if first is None or second is None:  # tc says nothing more
        raise failed()
    w.pos += 1
    return first, second


def _control_or_number(w: Words, failed) -> int:
    """``parse_action_control`` allowing a number (a verdict word first, as ``action_a2n``
    tries them), the cursor on it and left after it; ``failed`` with tc's words otherwise."""
    number = None if verdict_word(w.peek()) else _c_int(w.peek())
    if number is not None:
        w.pos += 1
        return number
    try:
        return S.control_value(control(w))
    except CommandError as exc:
        if exc.fatal:
            raise
        raise failed(str(exc)) from None
