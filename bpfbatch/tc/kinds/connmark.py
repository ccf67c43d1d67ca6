"""connmark (``m_connmark.c``): ``connmark [zone ZONE] [CONTROL] [index N]``, the conntrack mark
restored to the packet; tc's usage, words and attributes."""

from __future__ import annotations

import dataclasses
import struct

from .. import specs as S
from ..action_list import failure
from ..encoding import encode, strz
from ..grammar import Words, matches
from ..resolve import Resolver
from . import gact
from .tail import Tail, skip_kind_words

NAMES = ("connmark",)

USAGE = """\
Usage: ... connmark [zone ZONE] [CONTROL] [index <INDEX>]
where :
\tZONE is the conntrack zone
\tCONTROL := reclassify | pipe | drop | continue | ok |
\t           goto chain <CHAIN_INDEX>"""

_PARMS = 1  # TCA_CONNMARK_PARMS
#: struct tc_connmark: tc_gen, zone (and the struct's padding, which tc sends).
_TC_CONNMARK = struct.Struct("=IIiiiHxx")
_KIND = encode((strz(S.ActAttr.KIND, "connmark"),))


@dataclasses.dataclass(slots=True)
class Connmark(Tail):
    """connmark: restore the mark of the packet's connection in conntrack ``zone``."""

    zone: int = 0
    kind = "connmark"

    def attrs(self, resolve: Resolver) -> tuple:
        return self.action_attrs(_KIND, ((_PARMS, self.parms(_TC_CONNMARK, self.zone)),))


def parse_action(w: Words, left: int) -> Connmark:
    """tc's ``parse_connmark``, the cursor on ``connmark``."""
    failed = failure(left, "connmark")

    skip_kind_words(w, "connmark", USAGE)
    action = Connmark()
    if matches(w.peek(), "zone"):
        action.zone = gact.decimal_option(w, failed, 'connmark: Illegal "zone"', bits=16)
    said, _ = action.read_tail(w, failed, 'connmark: Illegal "index"')
    gact.refused_again(said)
    return action
