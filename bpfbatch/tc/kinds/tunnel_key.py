"""tunnel_key (``m_tunnel_key.c``): ``tunnel_key unset | set src_ip IP dst_ip IP [id N]
[dst_port N] [tos N] [ttl N] [geneve_opts CLASS:TYPE:DATA,...] [vxlan_opts GBP]
[erspan_opts VERSION:INDEX:DIR:HWID] [csum|nocsum]``, then ``[CONTROL] [index N]``; tc's usage,
words and attributes (in the order the line gives them, then NO_CSUM, then the parameters)."""

from __future__ import annotations

import dataclasses
import socket
import struct

from .. import specs as S
from ..action_list import failure, next_arg
from ..encoding import NLA_F_NESTED, encode, strz
from ..grammar import CommandError, Words, get_address, matches, unsigned
from ..resolve import Resolver
from . import gact, tunnel_opts
from .tail import Tail

NAMES = ("tunnel_key",)

USAGE = """\
Usage: tunnel_key unset
       tunnel_key set <TUNNEL_KEY>
Where TUNNEL_KEY is a combination of:
id <TUNNELID>
src_ip <IP> (mandatory)
dst_ip <IP> (mandatory)
dst_port <UDP_PORT>
geneve_opts | vxlan_opts | erspan_opts <OPTIONS>
csum | nocsum (default is "csum")"""

# linux/tc_act/tc_tunnel_key.h
_PARMS, _IPV4_SRC, _IPV4_DST, _IPV6_SRC, _IPV6_DST, _KEY_ID = 2, 3, 4, 5, 6, 7
_DST_PORT, _NO_CSUM, _TOS, _TTL = 9, 10, 12, 13
_ENC_OPTS = 11
_SET, _RELEASE = 1, 2
#: struct tc_tunnel_key: tc_gen, t_action.
_TC_TUNNEL_KEY = struct.Struct("=IIiiii")
_KIND = encode((strz(S.ActAttr.KIND, "tunnel_key"),))


@dataclasses.dataclass(slots=True)
class TunnelKey(Tail):
    """tunnel_key: ``t_action`` (1 set, 2 release) with the tunnel metadata ``keys`` (the
    attributes in the line's order) and whether to compute the UDP checksum."""

    t_action: int = 0
    keys: tuple = ()
    csum: bool = True
    kind = "tunnel_key"

    def attrs(self, resolve: Resolver) -> tuple:
        return self.action_attrs(_KIND, (*self.keys, (_NO_CSUM, bytes((not self.csum,))),
                                         (_PARMS, self.parms(_TC_TUNNEL_KEY, self.t_action))))


def parse_action(w: Words, left: int) -> TunnelKey:
    """tc's ``parse_tunnel_key``, the cursor on ``tunnel_key``."""
    failed = failure(left, "tunnel_key")

    action = TunnelKey()
    keys = []
    has_src = has_dst = False
    next_arg(w)
    while (word := w.peek()) is not None:
        if matches(word, "unset") or matches(word, "set"):
            if action.t_action:
                raise failed(f'unexpected "{word}" - action already specified\n{USAGE}')
            action.t_action = _RELEASE if matches(word, "unset") else _SET
        elif matches(word, "src_ip") or matches(word, "dst_ip"):
            name = "src_ip" if matches(word, "src_ip") else "dst_ip"
            family, address = get_address(next_arg(w))
            v4, v6 = (_IPV4_SRC, _IPV6_SRC) if name == "src_ip" else (_IPV4_DST, _IPV6_DST)
            keys.append((v4 if family == socket.AF_INET else v6, address))
            has_src, has_dst = has_src or name == "src_ip", has_dst or name == "dst_ip"
        elif matches(word, "id"):
            key_id = unsigned(next_arg(w), 10)
            if key_id is None:
                raise failed('Illegal "id"')
            keys.append((_KEY_ID, struct.pack("!I", key_id)))
        elif matches(word, "dst_port"):
            port = unsigned(next_arg(w), 10, bits=16)
            if port is None:
                raise failed('Illegal "dst port"')
            keys.append((_DST_PORT, struct.pack("!H", port)))
        elif name := next((name for name in _OPTIONS if matches(word, name)), None):
            options = _OPTIONS[name](next_arg(w))
            if options is None:
                raise failed(f'Illegal "{name}"')
            keys.append(options)
        elif matches(word, "tos") or matches(word, "ttl"):
            name = "tos" if matches(word, "tos") else "ttl"
            text = next_arg(w)
            value = unsigned(text, 10, bits=8)
            value = unsigned(text, 16, bits=8) if value is None else value
            if value is None:
                raise failed(f'Illegal "{name}"')
            keys.append((_TOS if name == "tos" else _TTL, bytes((value,))))
        elif matches(word, "csum") or matches(word, "nocsum"):
            action.csum = matches(word, "csum")
        elif matches(word, "help"):
            raise CommandError(USAGE, fatal=True)
        else:
            break
        w.pos += 1
    action.keys = tuple(keys)
    said, _ = action.read_tail(w, failed, 'tunnel_key: Illegal "index"')
    if action.t_action == _SET and not (has_src and has_dst):
        raise failed(f"{said}set needs tunnel_key parameters\n{USAGE}")
    gact.refused_again(said)
    return action



def _tokens(text: str, separator: str) -> list[str]:
    """``strtok_r``'s tokens: empty ones (separators in a row, at either end) skipped."""
    return [token for token in text.split(separator) if token]


def _geneve(text: str) -> tuple | None:
    """``geneve_opts CLASS:TYPE:DATA[,...]``: ENC_OPTS { GENEVE { CLASS TYPE DATA } ... },
    without NLA_F_NESTED (tc sets it on the vxlan and erspan nests only)."""
    options = []
    for option in _tokens(text, ","):
        fields = tunnel_opts.fields(_tokens(option, ":"), tunnel_opts.GENEVE_FIELDS)
        if fields is None:
            return None
        options.append((tunnel_opts.GENEVE, fields))
    return _ENC_OPTS, tuple(options)


def _vxlan(text: str) -> tuple | None:
    """``vxlan_opts GBP``: ENC_OPTS { VXLAN { GBP } }."""
    gbp = tunnel_opts.vxlan_gbp(text)
    if gbp is None:
        return None
    return _ENC_OPTS | NLA_F_NESTED, ((tunnel_opts.VXLAN | NLA_F_NESTED, gbp),)


def _erspan(text: str) -> tuple | None:
    """``erspan_opts VERSION:INDEX:DIR:HWID``: ENC_OPTS { ERSPAN { ... } }."""
    fields = tunnel_opts.fields(_tokens(text, ":"), tunnel_opts.ERSPAN_FIELDS)
    if fields is None:
        return None
    return _ENC_OPTS | NLA_F_NESTED, ((tunnel_opts.ERSPAN | NLA_F_NESTED, fields),)


#: The option blocks, in tc's order of checks: each reader → its attribute, None where it fails.
_OPTIONS = {"geneve_opts": _geneve, "vxlan_opts": _vxlan, "erspan_opts": _erspan}
