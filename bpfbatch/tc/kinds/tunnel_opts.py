"""The tunnel option fields tunnel_key (``m_tunnel_key.c``) and flower (``f_flower.c``) both
read: geneve's ``CLASS:TYPE:DATA``, vxlan's ``GBP`` and erspan's ``VERSION:INDEX:DIR:HWID``,
each field with the same reader and the same attribute number in both (the kinds' enums agree).
How a kind splits its text into fields (strtok_r or strsep) and nests them stays with it."""

from __future__ import annotations

import struct

from ..grammar import unsigned

#: The option blocks' numbers inside ENC_OPTS (TCA_TUNNEL_KEY_ENC_OPTS_*, TCA_FLOWER_KEY_ENC_OPTS_*).
GENEVE, VXLAN, ERSPAN, GTP = 1, 2, 3, 4
_VXLAN_GBP = 1


def _packed(form: str, base: int, bits: int):
    """A reader: ``get_u8``/``get_be16``/``get_be32`` in ``base``, packed as ``form``."""
    def read(token: str) -> bytes | None:
        value = unsigned(token, base, bits)
        return None if value is None else struct.pack(form, value)
    return read


def _hex_data(token: str) -> bytes | None:
    """``hex2mem`` of ``len // 2`` bytes: an odd last digit is not read (tc's quirk)."""
    digits = token[:len(token) // 2 * 2]
    if not all(c in "0123456789abcdefABCDEF" for c in digits):
        return None
    return bytes.fromhex(digits)


#: A field's reader at each place (the attribute numbered 1, 2, ...).
GENEVE_FIELDS = (_packed("!H", 16, 16), _packed("B", 16, 8), _hex_data)
ERSPAN_FIELDS = (_packed("B", 0, 8), _packed("!I", 0, 32), _packed("B", 0, 8), _packed("B", 0, 8))
GTP_FIELDS = (_packed("B", 16, 8), _packed("B", 16, 8))


def fields(tokens: list[str], readers: tuple) -> tuple | None:
    """Each token read by the reader at its place into the attribute numbered by that place;
    an empty token adds nothing but takes its place (flower's ``strsep``; tunnel_key passes
    ``strtok_r``'s tokens, which are never empty). None where a token fails or there are more
    tokens than readers."""
    if len(tokens) > len(readers):
        return None
    attrs = []
    for number, (token, read) in enumerate(zip(tokens, readers), 1):
        if not token:
            continue
        value = read(token)
        if value is None:
            return None
        attrs.append((number, value))
    return tuple(attrs)


def vxlan_gbp(text: str) -> tuple | None:
    """``vxlan_opts GBP`` (``get_u32``, base 0): the VXLAN block's GBP attribute, None where
    it fails."""
    gbp = unsigned(text)
    return None if gbp is None else ((_VXLAN_GBP, struct.pack("=I", gbp)),)
