"""sample (``m_sample.c``): ``sample rate RATE group GROUP [trunc SIZE] [CONTROL] [index N]``
(or ``sample index N`` naming an existing action), packets sampled to a psample group; tc's
usage, words and attributes."""

from __future__ import annotations

import dataclasses
import struct

from .. import specs as S
from ..action_list import action_failed, next_arg
from ..encoding import encode, strz
from ..grammar import CommandError, Words, matches, unsigned
from ..resolve import Resolver
from . import gact
from .tail import Tail

NAMES = ("sample",)

USAGE = """\
Usage: sample SAMPLE_CONF
where:
\tSAMPLE_CONF := SAMPLE_PARAMS | SAMPLE_INDEX
\tSAMPLE_PARAMS := rate RATE group GROUP [trunc SIZE] [SAMPLE_INDEX]
\tSAMPLE_INDEX := index INDEX
\tRATE := The ratio of packets observed at the data source to the samples generated.
\tGROUP := the psample sampling group
\tSIZE := the truncation size
\tINDEX := integer index of the sample action"""

#: The options in tc's order (a prefix names the first it starts), the words for a bad value.
_OPTIONS = (("rate", "Illegal rate"), ("group", "Illegal group num"),
            ("trunc", "Illegal truncation size"))
# linux/tc_act/tc_sample.h TCA_SAMPLE_*
_PARMS, _RATE, _TRUNC, _GROUP = 2, 3, 4, 5
_U32 = struct.Struct("=I")
_KIND = encode((strz(S.ActAttr.KIND, "sample"),))


@dataclasses.dataclass(slots=True)
class Sample(Tail):
    """sample: one packet in ``rate`` sent to psample ``group``, cut to ``trunc`` bytes."""

    rate: int | None = None
    group: int | None = None
    trunc: int | None = None
    kind = "sample"

    def attrs(self, resolve: Resolver) -> tuple:
        options = [(_PARMS, self.parms())]
        for type_, value in ((_RATE, self.rate), (_GROUP, self.group), (_TRUNC, self.trunc)):
            if value is not None:
                options.append((type_, _U32.pack(value)))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> Sample:
    """tc's ``parse_sample``, the cursor on ``sample``."""
    if left <= 1:
        raise CommandError(f"sample bad argument count {left}\n{USAGE}", fatal=True)
    next_arg(w)
    action = Sample()
    while (word := w.peek()) is not None:
        option = next(((name, illegal) for name, illegal in _OPTIONS if matches(word, name)), None)
        if option is not None:
            name, illegal = option
            value = unsigned(next_arg(w), 10)
            if value is None:
                raise CommandError(f"{illegal} {w.peek()}\n{USAGE}", fatal=True)
            setattr(action, name, value)
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
    said, _ = action.read_tail(w, lambda text: action_failed(text, left, "sample"),
                               'sample: Illegal "index"')
    for name in ("group", "rate"):
        if not action.index and getattr(action, name) is None:
            raise CommandError(f'{said}param "{name}" not set\n{USAGE}', fatal=True)
    gact.refused_again(said)
    return action
