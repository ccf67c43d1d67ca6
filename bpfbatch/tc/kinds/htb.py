"""htb (``q_htb.c``): the qdisc's and the class's options, their usage and words."""

from __future__ import annotations

from ...errors import InputError
from .. import rules as R
from ..grammar import CommandError, Words, illegal_unless, unsigned, what_is
from ..htb import HtbClass, parse_rate, parse_size

NAMES = ("htb",)

USAGE = """\
Usage: ... qdisc add ... htb [default N] [r2q N]
                      [direct_qlen P] [offload]
 default  minor id of class to which unclassified packets are sent {0}
 r2q      DRR quantums are computed as rate in Bps/r2q {10}
 debug    string of 16 numbers each 0-3 {0}

 direct_qlen  Limit of the direct queue {in packets}
 offload  enable hardware offload
... class add ... htb rate R1 [burst B1] [mpu B] [overhead O]
                      [prio P] [slot S] [pslot PS]
                      [ceil R2] [cburst B2] [mtu MTU] [quantum Q]
 rate     rate allocated to this class (class can still borrow)
 burst    max bytes burst which can be accumulated during idle period {computed}
 mpu      minimum packet size used in rate computations
 overhead per-packet size overhead used in rate computations
 linklay  adapting to a linklayer e.g. atm
 ceil     definite upper class rate (no borrows) {rate}
 cburst   burst but for ceil {computed}
 mtu      max packet size we create rate map for {1600}
 prio     priority of leaf; lower are served first {0}
 quantum  how much bytes to serve from leaf at once {use r2q}

TC HTB version 3.3"""

#: htb class size options (with tc's synonyms) → :class:`~..htb.HtbClass` fields.
_SIZES = {"burst": "burst", "buffer": "burst", "maxburst": "burst", "cburst": "cburst",
          "cbuffer": "cburst", "cmaxburst": "cburst", "mpu": "mpu"}


def parse_qdisc(w: Words, name: str) -> R.Htb:
    opts = {}
    while (word := w.peek()) is not None:
        w.pos += 1
        if word == "default":
            opts["default"] = w.number("htb default", 16)
        elif word == "r2q":
            opts["r2q"] = w.number("htb r2q", 10)
        elif word == "direct_qlen":
            opts["direct_qlen"] = illegal_unless(unsigned(w.take("direct_qlen"), 10), "direct_qlen")
        else:
            raise CommandError(what_is(word, USAGE))
    return R.Htb(**opts)


def parse_class(w: Words, name: str) -> HtbClass:
    opts = {}
    while (word := w.peek()) is not None:
        w.pos += 1
        if word in ("rate", "ceil"):
            text = w.take(word)
            try:
                opts[word] = parse_rate(text)
            except InputError:
                raise CommandError(f"bad {word} '{text}'") from None
            if not opts[word]:  # below one byte per second: tc treats it as missing
                raise CommandError(f'"{word}" is required.')
        elif word == "prio":
            opts["prio"] = w.number("htb prio", 10)
        elif word == "quantum":
            opts["quantum"] = w.number("htb quantum", 10)
        elif word in _SIZES:
            name = _SIZES[word]
            try:
                opts[name] = parse_size(w.take(word))
            except InputError:
                raise CommandError(f'Illegal "{name}"') from None
        elif word == "mtu":
            opts["mtu"] = illegal_unless(unsigned(w.take("mtu"), 10), "mtu")
        else:
            raise CommandError(what_is(word, USAGE))
    if "rate" not in opts:
        raise CommandError("htb class needs 'rate RATE'")
    return HtbClass(**opts)
