"""One field read out of every row of a batch at once.

A batch is ``count`` records of ``size`` bytes, one record a row: a ``count × size`` uint8
numpy array, or, for a batch small enough that importing numpy would cost more than reading
it, a :class:`ByteRows` over the same bytes (:func:`batch_rows` picks). Each helper here reads
the field at one byte offset of every row — with one numpy operation, or a loop over the
bytes — and :func:`char_array_text` says whether a char array's bytes read as a string. They
are shared by the Python values of the layout tree (:mod:`~bpfbatch.records.values`), the
JSON text leaves (:mod:`~bpfbatch.records.jsontext`) and the raw codec, so the three read a
field the same way, and a small batch prints exactly what a large one does.
"""

from __future__ import annotations

import array
import struct
import sys

from .._numpy import np

#: Records up to this many bytes (keys and values) are read without numpy: ~3,000 records of
#: a 20-byte layout, which Python renders 1–8 ms slower than numpy (~15 ms for a layout of
#: 1-byte fields), where importing numpy costs ~80 ms.
SMALL_BATCH_BYTES = 64 << 10


class ByteRows:
    """``count`` rows of ``width`` bytes, row ``i`` at ``start + i × stride`` of ``data``:
    the part of a ``count × size`` uint8 array the decoders use — ``shape``, ``len``, row
    slices ``rows[i:j]`` and column slices ``rows[:, a:b]`` (both views) — over a bytes-like
    buffer, without numpy. ``numpy.asarray(rows)`` gives the array, for code that needs one."""

    __slots__ = ("data", "count", "stride", "start", "width")

    def __init__(self, data, count: int, stride: int, start: int = 0,
                 width: int | None = None):
        self.data = data
        self.count = count
        self.stride = stride
        self.start = start
        self.width = stride if width is None else width

    @property
    def shape(self) -> tuple[int, int]:
        return self.count, self.width

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if isinstance(index, tuple):  # rows[:, a:b]
            whole, columns = index
            if whole != slice(None) or not isinstance(columns, slice) or columns.step:
                raise TypeError(f"ByteRows takes rows[:, a:b], not {index!r}")
            first, last, _ = columns.indices(self.width)
            return ByteRows(self.data, self.count, self.stride, self.start + first,
                            max(0, last - first))
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError(f"ByteRows takes rows[i:j], not {index!r}")
        first, last, _ = index.indices(self.count)
        return ByteRows(self.data, max(0, last - first), self.stride,
                        self.start + first * self.stride, self.width)

    def row(self, i: int) -> bytes:
        at = self.start + i * self.stride
        return bytes(self.data[at:at + self.width])

    def tobytes(self) -> bytes:
        return b"".join(self.row(i) for i in range(self.count))

    def __array__(self, dtype=None, copy=None):
        array = np.frombuffer(self.tobytes(), np.uint8).reshape(self.count, self.width)
        return array if dtype is None else array.astype(dtype)


def is_small(nbytes: int) -> bool:
    """Whether a batch of ``nbytes`` is read without numpy (see :data:`SMALL_BATCH_BYTES`)."""
    return nbytes <= SMALL_BATCH_BYTES


def rows(data, count: int, size: int) -> np.ndarray:
    """``count × size`` uint8 view of a buffer holding ``count`` records (zero-copy)."""
    return np.frombuffer(data, dtype=np.uint8, count=count * size).reshape(count, size)


def batch_rows(data, count: int, size: int, *, small: bool | None = None):
    """``count × size`` rows over a buffer holding ``count`` records (zero-copy): a
    :class:`ByteRows` when ``small`` (default: when :func:`is_small`), else :func:`rows`."""
    if small if small is not None else is_small(count * size):
        return ByteRows(data, count, size)
    return rows(data, count, size)


#: ``array.array`` type code of each (size, signed) integer.
_INT_CODES = {(array.array(code).itemsize, code.islower()): code for code in "BbHhIiQq"}


def int_words(values, size: int, signed: bool, byteorder: str = "little") -> array.array:
    """``values`` (exact ``int``s) as ``size``-byte words in ``byteorder``, converted by
    ``array.array`` in one C pass that also checks each value fits the word's width and
    signedness (``OverflowError`` when one does not)."""
    words = array.array(_INT_CODES[size, signed], values)
    if sys.byteorder != byteorder:
        words.byteswap()
    return words


def store(rows: np.ndarray, offset: int, np_type: str, column: np.ndarray) -> None:
    """Write ``column`` as little-endian ``np_type`` words at ``offset`` of every row (an
    integer column is cut to the word's two's-complement bits)."""
    width = np.dtype(np_type).itemsize
    rows[:, offset:offset + width] = column.astype(np_type).view(np.uint8).reshape(-1, width)


_PRINTABLE = bytes(range(0x20, 0x7F))
#: What a char array may hold before its first NUL to print as a string in the typed JSON:
#: printable ASCII, tab, line feed, carriage return (JSON escapes them).
_TEXT = _PRINTABLE + b"\t\n\r"


#: numpy scalar type → struct code (little-endian throughout).
_STRUCT_CODES = {"i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I",
                 "i8": "q", "u8": "Q", "e": "e", "f": "f", "d": "d", "f2": "e", "f4": "f",
                 "f8": "d"}


def scalars(rows, offset: int, dtype: str):
    """Zero-copy column of one little-endian scalar of numpy type ``dtype`` at ``offset``
    (a numpy array: ``rows`` must be one; :func:`scalar_list` takes both kinds)."""
    size = np.dtype(dtype).itemsize
    return rows[:, offset:offset + size].view(dtype)[:, 0]


def scalar_list(rows, offset: int, dtype: str) -> list:
    """The little-endian scalar of numpy type ``dtype`` at ``offset`` of every row, as
    Python ints or floats."""
    if not isinstance(rows, ByteRows):
        return scalars(rows, offset, dtype).tolist()
    unpack = struct.Struct("<" + _STRUCT_CODES[dtype.lstrip("<")]).unpack_from
    data, at, stride = rows.data, rows.start + offset, rows.stride
    return [unpack(data, at + i * stride)[0] for i in range(rows.count)]


def _uints(rows: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
    """``nbytes`` (≤ 8) little-endian bytes at ``offset`` of every numpy row, as uint64."""
    wide = np.zeros((rows.shape[0], 8), dtype=np.uint8)
    wide[:, :nbytes] = rows[:, offset:offset + nbytes]
    return wide.view("<u8")[:, 0]


def bits(rows, offset: int, shift: int, nbits: int) -> list[int]:
    """The ``nbits`` bits ``shift`` bits into the byte at ``offset`` of every row, unsigned
    (a bitfield, or an integer of any width). Numpy rows up to 8 bytes wide are read as one
    uint64 column; :class:`ByteRows` (and wider fields) byte string by byte string."""
    nbytes = (shift + nbits + 7) // 8
    if nbytes <= 8 and not isinstance(rows, ByteRows):
        column = _uints(rows, offset, nbytes) >> np.uint64(shift)
        if nbits < 64:
            column &= np.uint64((1 << nbits) - 1)
        return column.tolist()
    mask = (1 << nbits) - 1
    return [(int.from_bytes(raw, "little") >> shift) & mask
            for raw in raw_bytes(rows, offset, nbytes)]


def raw_bytes(rows, offset: int, size: int) -> list[bytes]:
    """The ``size`` bytes at ``offset`` of every row, as bytes objects."""
    if not size:
        return [b""] * rows.shape[0]
    if isinstance(rows, ByteRows):
        data, at, stride = rows.data, rows.start + offset, rows.stride
        size = max(0, min(size, rows.width - offset))  # as a numpy slice is cut at the edge
        return [bytes(data[at + i * stride:at + i * stride + size]) for i in range(rows.count)]
    data = np.ascontiguousarray(rows[:, offset:offset + size]).tobytes()
    return [data[i:i + size] for i in range(0, len(data), size)]


def byte_list(rows, offset: int) -> list[int]:
    """The byte at ``offset`` of every row."""
    if isinstance(rows, ByteRows):
        data, at, stride = rows.data, rows.start + offset, rows.stride
        return [data[at + i * stride] for i in range(rows.count)]
    return rows[:, offset].tolist()


def any_set(rows, offset: int, width: int) -> list[bool]:
    """Whether any of the ``width`` bytes at ``offset`` of each row is non-zero."""
    if isinstance(rows, ByteRows):
        return [any(raw) for raw in raw_bytes(rows, offset, width)]
    return rows[:, offset:offset + width].any(axis=1).tolist()


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
