"""One field read out of every row of a batch at once.

A batch is a ``count × size`` uint8 array (one record a row); each helper here reads the
field at one byte offset of every row with one numpy operation, and :func:`char_array_text`
says whether a char array's bytes read as a string. They are shared by the Python values of
the layout tree (:mod:`~bpfbatch.records.values`), the JSON text leaves
(:mod:`~bpfbatch.records.jsontext`) and the raw codec, so the three read a field the same way.
"""

from __future__ import annotations

import numpy as np

_PRINTABLE = bytes(range(0x20, 0x7F))
#: What a char array may hold before its first NUL to print as a string in the typed JSON:
#: printable ASCII, tab, line feed, carriage return (JSON escapes them).
_TEXT = _PRINTABLE + b"\t\n\r"


def scalars(rows: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """Zero-copy column of one little-endian scalar of numpy type ``dtype`` at ``offset``."""
    size = np.dtype(dtype).itemsize
    return rows[:, offset:offset + size].view(dtype)[:, 0]


def uints(rows: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
    """``nbytes`` (≤ 8) little-endian bytes at ``offset`` of every row as uint64."""
    wide = np.zeros((rows.shape[0], 8), dtype=np.uint8)
    wide[:, :nbytes] = rows[:, offset:offset + nbytes]
    return wide.view("<u8")[:, 0]


def bits(rows: np.ndarray, offset: int, shift: int, nbits: int) -> list[int]:
    """The ``nbits`` bits ``shift`` bits into the byte at ``offset`` of every row, unsigned
    (a bitfield, or an integer of any width)."""
    nbytes = (shift + nbits + 7) // 8
    if nbytes <= 8:
        column = uints(rows, offset, nbytes) >> np.uint64(shift)
        if nbits < 64:
            column &= np.uint64((1 << nbits) - 1)
        return column.tolist()
    mask = (1 << nbits) - 1
    return [(int.from_bytes(raw, "little") >> shift) & mask
            for raw in raw_bytes(rows, offset, nbytes)]


def raw_bytes(rows: np.ndarray, offset: int, size: int) -> list[bytes]:
    """The ``size`` bytes at ``offset`` of every row, as bytes objects."""
    if not size:
        return [b""] * rows.shape[0]
    data = np.ascontiguousarray(rows[:, offset:offset + size]).tobytes()
    return [data[i:i + size] for i in range(0, len(data), size)]


def char_array_text(raw: bytes, exact: bool) -> str | None:
    """The string a ``char[N]`` prints as, or ``None`` for the list of its elements.

    ``exact`` (bpftool's ``is_str_array``): a NUL comes before the end and every byte before
    it is printable ASCII. Typed (the value rule): the bytes before the first NUL, or all of
    them when there is none, are printable ASCII, tab, LF or CR — so a full 16-character name
    or one with a tab reads back as the string it is; what follows the NUL is not shown (as
    bpftool), and a load writes the string and its NUL only."""
    text, nul, _ = raw.partition(b"\0")
    if exact:
        return text.decode("ascii") if nul and not text.translate(None, _PRINTABLE) else None
    return None if text.translate(None, _TEXT) else text.decode("ascii")
