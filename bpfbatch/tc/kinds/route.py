"""route (``f_route.c``): ``route [from REALM | fromif DEV] [to REALM] [order N] [classid ID]
[police ...] [action ...]``, the realms of the packet's route; tc's usage, words, attributes
and the handle it derives from them when the line names none."""

from __future__ import annotations

import functools

from ..encoding import u32
from ..grammar import DEVICES, CommandError, Words, matches, unsigned
from .common import Listed, listed_options, next_value

NAMES = ("route",)

USAGE = """\
Usage: ... route [ from REALM | fromif TAG ] [ to REALM ]
                [ classid CLASSID ] [ action ACTION_SPEC ]
       ACTION_SPEC := ... look at individual actions
       CLASSID := X:Y

NOTE: CLASSID is parsed as hexadecimal input."""

# linux/pkt_cls.h TCA_ROUTE4_*
_NUMBERS = {"classid": 1, "police": 5, "action": 6}
_TO, _FROM, _IIF = 2, 3, 4
#: Where iproute2 reads realm names (``CONFDIR "/rt_realms"``).
RT_REALMS = "/etc/iproute2/rt_realms"


def parse_filter(w: Words) -> Listed:
    """tc's ``route_parse_opt``, the cursor past ``route``; the handle it would fill in is
    kept as the classifier's ``auto_handle``."""
    handle = 0xFFFF8000
    order = 0

    def extra(word: str, attrs: list) -> bool:
        nonlocal handle, order
        if matches(word, "to") or matches(word, "from"):
            name = "to" if matches(word, "to") else "from"
            realm = realm_number(next_value(w))
            if realm is None:
                raise CommandError(f'Illegal "{name}"')
            if name == "to":
                attrs.append(u32(_TO, realm))
                handle = handle & ~0x80FF | realm & 0xFF
            else:
                attrs.append(u32(_FROM, realm))
                handle = handle & 0xFFFF | realm << 16
        elif matches(word, "fromif"):
            ifindex = _ifindex(next_value(w))
            if ifindex is None:
                raise CommandError('Illegal "fromif"')
            attrs.append(u32(_IIF, ifindex))
            handle = handle & 0xFFFF | (0x8000 | ifindex) << 16 & 0xFFFFFFFF
        elif matches(word, "order"):
            order = unsigned(next_value(w))
            if order is None:
                raise CommandError('Illegal "order"')
        else:
            return False
        return True

    listed = listed_options(w, "route", USAGE, _NUMBERS, extra)
    if order:
        handle = handle & ~0x7F00 | order << 8 & 0x7F00
    listed.auto_handle = handle & 0xFFFFFFFF
    return listed


def parse_handle(text: str | None, classifier: Listed | None) -> int:
    """The line's handle (a u32), or the one route derived from its options (``classifier``
    None: before them)."""
    if text is None:
        return classifier.auto_handle if classifier is not None and classifier.sends_options else 0
    value = unsigned(text)
    if value is None:
        raise CommandError('Illegal "handle"')
    return value


@functools.cache
def _realm_names() -> dict[str, int]:
    """``rtnl_rtrealm_tab``: "unknown" is 0 until the file's own names replace it."""
    names = {"unknown": 0}
    try:
        with open(RT_REALMS) as f:
            for line in f:
                fields = line.split("#", 1)[0].split()
                if len(fields) >= 2 and (number := unsigned(fields[0])) is not None \
                        and number < 256:
                    names = {k: v for k, v in names.items() if v != number}
                    names[fields[1]] = number
    except OSError:
        pass
    return names


def realm_number(text: str) -> int | None:
    """``rtnl_rtrealm_a2n``: a realm name of the table, or a number up to 255."""
    named = _realm_names().get(text)
    if named is not None:
        return named
    value = unsigned(text)
    return value if value is not None and value <= 255 else None


def _ifindex(name: str) -> int | None:
    """``ll_name_to_index`` in the batch's namespace, as the reader resolves devices."""
    find = DEVICES.get()
    return None if find is None else find(name)
