"""fw (``f_fw.c``): ``[handle HANDLE[/FWMASK]] fw [classid ID] [indev DEV] [police ...]
[action ...]``, the packet's firewall mark as the filter's handle; tc's usage, words and
attributes (in the order the line gives them, the mask first)."""

from __future__ import annotations

from ..encoding import u32
from ..grammar import CommandError, Words, unsigned
from .common import Listed, listed_options

NAMES = ("fw",)

USAGE = """\
Usage: ... fw [ classid CLASSID ] [ indev DEV ] [ action ACTION_SPEC ]
\tCLASSID := Push matching packets to the class identified by CLASSID with format X:Y
\t\tCLASSID is parsed as hexadecimal input.
\tDEV := specify device for incoming device classification.
\tACTION_SPEC := Apply an action on matching packets.
\tNOTE: handle is represented as HANDLE[/FWMASK].
\t\tFWMASK is 0xffffffff by default."""

# linux/pkt_cls.h TCA_FW_*
_NUMBERS = {"classid": 1, "police": 2, "action": 4}
_INDEV, _MASK = 3, 5
_IFNAMSIZ = 16


def parse_filter(w: Words) -> Listed:
    """tc's ``fw_parse_opt``, the cursor past ``fw``."""
    def extra(word: str, attrs: list) -> bool:
        if word != "indev":
            return False
        w.pos += 1
        if w.peek() is None:
            raise CommandError("Illegal indev")
        attrs.append((_INDEV, w.peek().encode()[:_IFNAMSIZ] + b"\0"))
        return True

    return listed_options(w, "fw", USAGE, _NUMBERS, extra, flowid_prefix=True,
                          action_line='Illegal fw "action"')


def parse_handle(text: str | None, classifier: Listed | None) -> int:
    """``HANDLE[/FWMASK]``: the handle; the mask goes first among the ``classifier``'s options
    (and nowhere when the line has none, as in tc; nowhere with None, a check alone)."""
    if text is None:
        return 0
    handle, slash, mask = text.partition("/")
    value = unsigned(handle)
    if value is None:
        raise CommandError('Illegal "handle"')
    if slash:
        mask_value = unsigned(mask)
        if mask_value is None:
            raise CommandError('Illegal "handle" mask')
        if classifier is not None:
            classifier.attrs = (u32(_MASK, mask_value), *classifier.attrs)
    return value
