"""htb class options: rates, and the rate tables the kernel still wants with them.

iproute2 computes, for each class, a 256-entry transmission-time table per rate (``rtab``,
``ctab``) and the burst sizes in scheduler ticks, from ``/proc/net/psched`` (``tc_core.c``,
``q_htb.c``). The same double-precision arithmetic and truncations are reproduced here so the
messages equal tc's byte for byte.
"""

from __future__ import annotations

import dataclasses
import functools
import struct

from ..errors import InputError
from . import specs as S
from .encoding import Attr

PSCHED = "/proc/net/psched"
TIME_UNITS_PER_SEC = 1_000_000
#: The link MTU tc assumes for htb (``mtu 1600``), which also sets the table's cell size.
HTB_MTU = 1600
LINKLAYER_ETHERNET = 1
LINKLAYER_ATM = 2
ATM_CELL_SIZE, ATM_CELL_PAYLOAD = 53, 48

#: tc's rate units (``get_rate64``), matched case-insensitively; a bare number is bit/s.
RATE_UNITS = {"bit": 1.0, "kibit": 1024.0, "kbit": 1000.0, "mibit": 1024.0 ** 2, "mbit": 1e6,
              "gibit": 1024.0 ** 3, "gbit": 1e9, "tibit": 1024.0 ** 4, "tbit": 1e12,
              "bps": 8.0, "kibps": 8.0 * 1024, "kbps": 8000.0, "mibps": 8.0 * 1024 ** 2,
              "mbps": 8e6, "gibps": 8.0 * 1024 ** 3, "gbps": 8e9, "tibps": 8.0 * 1024 ** 4,
              "tbps": 8e12}

#: struct tc_ratespec: cell_log, linklayer, overhead, cell_align, mpu, rate.
TC_RATESPEC = struct.Struct("=BBHhHI")
#: struct tc_htb_opt after its two ratespecs: buffer, cbuffer, quantum, level, prio.
TC_HTB_OPT_TAIL = struct.Struct("=IIIII")
_U64 = struct.Struct("=Q")
_TABLE = struct.Struct("=256I")


def parse_rate(text: str) -> int:
    """``100mbit`` → bytes per second, as tc's ``get_rate64`` (InputError if malformed)."""
    number = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = text[len(number):].lower()
    scale = RATE_UNITS.get(unit) if unit else 1.0
    if scale is None or not number:
        raise InputError(f"bad rate '{text}'")
    try:
        bits = float(number) * scale
    except ValueError:
        raise InputError(f"bad rate '{text}'") from None
    if not 0 < bits < 2 ** 64 * 8:
        raise InputError(f"bad rate '{text}'")
    return int(bits / 8)


@functools.cache
def _psched() -> tuple[float, int]:
    """(scheduler ticks per microsecond, timer HZ) as ``tc_core_init``/``get_hz`` derive them."""
    with open(PSCHED) as f:
        t2us, us2t, clock_res, denom = (int(word, 16) for word in f.read().split()[:4])
    if clock_res == 1_000_000_000:
        t2us = us2t
    tick_in_usec = t2us / us2t * (clock_res / TIME_UNITS_PER_SEC)
    return tick_in_usec, denom if clock_res == 1_000_000 else 1000


def xmittime(rate: int, size: int) -> int:
    """Ticks to send ``size`` bytes at ``rate`` bytes/s (``tc_calc_xmittime``, truncations kept)."""
    tick_in_usec, _ = _psched()
    usec = int(TIME_UNITS_PER_SEC * (size / rate)) & 0xFFFFFFFF
    return int(usec * tick_in_usec) & 0xFFFFFFFF


#: ``get_size`` units (tc_util.c), matched case-insensitively; a bare number is bytes.
SIZE_UNITS = {"b": 1.0, "k": 1024.0, "kb": 1024.0, "m": 1024.0 ** 2, "mb": 1024.0 ** 2,
              "g": 1024.0 ** 3, "gb": 1024.0 ** 3, "kbit": 1024.0 / 8, "mbit": 1024.0 ** 2 / 8,
              "gbit": 1024.0 ** 3 / 8}


def parse_size(text: str) -> int:
    """``1000``, ``10kb`` → bytes, as tc's ``get_size`` (InputError if malformed or > 32 bits)."""
    number = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = text[len(number):].lower()
    scale = SIZE_UNITS.get(unit) if unit else 1.0
    try:
        size = float(number) * scale if scale is not None else -1.0
    except ValueError:
        size = -1.0
    if not 0 <= size <= 0xFFFFFFFF:
        raise InputError(f"bad size '{text}'")
    return int(size)


@functools.lru_cache(maxsize=4096)  # a file's classes share a few rates (its plans)
def rate_table(rate: int, mtu: int, mpu: int, cell_log: int = -1,
               linklayer: int = LINKLAYER_ETHERNET) -> tuple[int, bytes]:
    """``tc_calc_rtable_64``: (cell_log, the 256-slot table of ticks to send a packet of each
    cell at ``rate`` bytes/s) for packets up to ``mtu``, none counted smaller than ``mpu``,
    sized as ``linklayer`` carries them; ``cell_log`` < 0: the smallest that covers ``mtu``."""
    mtu = mtu or 2047
    if cell_log < 0:
        cell_log = 0
        while (mtu >> cell_log) > 255:
            cell_log += 1
    sizes = (max((i + 1) << cell_log, mpu) for i in range(256))
    if linklayer == LINKLAYER_ATM:  # tc_align_to_atm: whole 53-byte cells of 48 payload bytes
        sizes = (-(-size // ATM_CELL_PAYLOAD) * ATM_CELL_SIZE for size in sizes)
    return cell_log, _TABLE.pack(*(xmittime(rate, size) for size in sizes))


def ratespec(rate: int, mtu: int, mpu: int, cell_log: int = -1,
             linklayer: int = LINKLAYER_ETHERNET, overhead: int = 0, *,
             wide_table: bool = False) -> tuple[bytes, bytes]:
    """``struct tc_ratespec`` (its rate cut to 32 bits) and the :func:`rate_table` of a rate
    of ``rate`` bytes/s. The table is computed from the 32-bit rate as htb's ``tc_calc_rtable``
    does, or from the whole rate with ``wide_table`` (police's ``tc_calc_rtable_64``)."""
    rate32 = min(rate, 0xFFFFFFFF)
    cell_log, table = rate_table(rate if wide_table else rate32, mtu, mpu, cell_log, linklayer)
    return TC_RATESPEC.pack(cell_log, linklayer, overhead, -1, mpu, rate32), table


@dataclasses.dataclass(slots=True)
class HtbClass:
    """htb class: ``rate`` and ``ceil`` in bytes/s (ceil defaults to rate), ``prio``,
    ``quantum``, and tc's ``burst``/``cburst``/``mtu``/``mpu``."""

    rate: int
    ceil: int | None = None
    prio: int = 0
    quantum: int = 0
    #: Bytes that may go at ``rate``/``ceil`` at once (tc's ``burst``/``cburst``; 0: computed).
    burst: int = 0
    cburst: int = 0
    #: Largest packet the rate tables cover, and the smallest size a packet is charged.
    mtu: int = HTB_MTU
    mpu: int = 0
    kind = "htb"

    def options(self) -> tuple[Attr, ...]:
        ceil = self.ceil or self.rate
        _, hz = _psched()
        rate_spec, rtab = ratespec(self.rate, self.mtu, self.mpu)
        ceil_spec, ctab = ratespec(ceil, self.mtu, self.mpu)
        buffer = xmittime(self.rate, self.burst or self.rate // hz + self.mtu)
        cbuffer = xmittime(ceil, self.cburst or ceil // hz + self.mtu)
        parms = rate_spec + ceil_spec + TC_HTB_OPT_TAIL.pack(buffer, cbuffer, self.quantum, 0,
                                                            self.prio)
        attrs = []
        if self.rate > 0xFFFFFFFF:
            attrs.append(Attr(S.HtbAttr.RATE64, _U64.pack(self.rate)))
        if ceil > 0xFFFFFFFF:
            attrs.append(Attr(S.HtbAttr.CEIL64, _U64.pack(ceil)))
        attrs += (Attr(S.HtbAttr.PARMS, parms), Attr(S.HtbAttr.RTAB, rtab),
                  Attr(S.HtbAttr.CTAB, ctab))
        return (Attr(S.TCA.OPTIONS, tuple(attrs)),)
