"""Numbers as iproute2 reads them: C's ``strtoul``/``strtol`` (glibc, LP64: 64-bit longs, no
``0b`` prefix) and tc's readers over them (``get_u32``, ``get_u16``, ``get_u8``,
``get_unsigned``, ``get_u64``, ``get_integer``, ``utils.c``).

One model, so that every word tc reads as a number means the same here, quirks included:
blanks before the number (a quoted word can hold them), a ``+`` or ``-`` sign (``-N`` wraps
around as C's unsigned arithmetic does, so ``get_u32`` takes ``-0``), ``0x`` (hex) and ``0``
(octal) prefixes in base 0, an optional ``0x`` in base 16, ``0x`` with no hex digit after it read
as ``0`` followed by ``x``. Python's ``int()`` differs on each of these (and takes ``1_000``),
so no tc word goes through it.
"""

from __future__ import annotations

import functools
import re

ULONG_MAX = (1 << 64) - 1
LONG_MAX = (1 << 63) - 1
_BLANKS = "[ \t\n\v\f\r]*"


@functools.cache
def _pattern(base: int) -> re.Pattern:
    """Blanks, a sign, then the digits ``strtoul`` reads in ``base`` (0: the prefix decides)."""
    if base == 0:
        digits = "0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*"
    elif base == 16:
        digits = "(?:0[xX])?[0-9a-fA-F]+"
    elif 2 <= base <= 36:
        chars = "0123456789abcdefghijklmnopqrstuvwxyz"[:base]
        digits = "[" + re.escape(chars + chars.upper()) + "]+"
    else:
        raise ValueError(base)
    return re.compile(f"{_BLANKS}([+-]?)({digits})?")


def _read(text: str, base: int) -> tuple[str, int | None, int]:
    """(sign, magnitude or None where no digit was read, end): what ``strto*`` parses."""
    found = _pattern(base).match(text)
    sign, digits = found.groups()
    if digits is None:
        return sign, None, 0
    if base == 0:
        base = 16 if digits[1:2] in ("x", "X") else 8 if digits[0] == "0" else 10
    return sign, int(digits, base), found.end()


def strtoul(text: str, base: int = 0) -> tuple[int, int, bool]:
    """C's ``strtoul(text, &end, base)`` → (value, end, overflowed): end 0 where nothing was
    read; on overflow the value is ULONG_MAX; a ``-`` negates modulo 2**64."""
    sign, magnitude, end = _read(text, base)
    if magnitude is None:
        return 0, 0, False
    if magnitude > ULONG_MAX:
        return ULONG_MAX, end, True
    return (-magnitude & ULONG_MAX if sign == "-" else magnitude), end, False


def strtol(text: str, base: int = 0) -> tuple[int, int, bool]:
    """C's ``strtol(text, &end, base)`` → (value, end, overflowed); on overflow LONG_MAX or
    LONG_MIN."""
    sign, magnitude, end = _read(text, base)
    if magnitude is None:
        return 0, 0, False
    if sign == "-":
        return (-magnitude, end, False) if magnitude <= LONG_MAX + 1 else (-LONG_MAX - 1, end, True)
    return (magnitude, end, False) if magnitude <= LONG_MAX else (LONG_MAX, end, True)


def unsigned(word: str | None, base: int = 0, bits: int = 32) -> int | None:
    """``get_u32`` (``bits`` 32; ``get_unsigned`` too), ``get_u16`` (16), ``get_u8`` (8),
    ``get_u64`` (64): the whole word one ``strtoul`` number below ``2**bits``; None where tc's
    reader fails."""
    if not word:
        return None
    if word.isdigit() and word.isascii() and (base in (10, 16) or base == 0 and (
            word[0] != "0" or word == "0")):
        value = int(word, base or 10)  # the common case, read without the regex
    else:
        value, end, overflowed = strtoul(word, base)
        if not end or end != len(word) or overflowed:
            return None
    return value if value >> bits == 0 else None


def integer(word: str | None, base: int = 0) -> int | None:
    """``get_integer``: the whole word one ``strtol`` number in a C int; None where it fails."""
    if not word:
        return None
    value, end, overflowed = strtol(word, base)
    if not end or end != len(word) or overflowed or not -(1 << 31) <= value < 1 << 31:
        return None
    return value
