"""Codecs: a map's key and value bytes <-> Python values, numpy dtypes and JSON text, from BTF.

A :class:`Codec` is compiled once per map from its BTF type into a small layout tree
(:class:`Node` subclasses with absolute byte offsets). The tree serves four uses:

* :meth:`Codec.decode` / :meth:`Codec.encode` — one record <-> Python values (ints, bools,
  strings for printable char arrays, enum names, dicts for structs and unions, lists for
  arrays). ``encode`` also accepts what the JSON output prints (``"0x.."`` strings for 128-bit
  ints and bitfields), so a dump can be loaded back. :meth:`Codec.encode_batch` encodes a
  whole batch with one numpy column per leaf field, to the same bytes and errors.
* :attr:`Codec.dtype` — a numpy structured dtype when the layout is representable (no
  bitfields), for zero-copy ``np.frombuffer`` views over a batch.
* :meth:`Codec.template` — JSON text as bpftool's ``btf_dumper.c`` prints it, as a
  :class:`Template`: a ``%``-format plus :class:`Leaf` columns read vectorised from a whole
  batch, so a 1M-record dump never walks the type per record (one ``%`` per batch).

bpftool's rules (``btf_dumper.c``): integers of 8/16/32/64 bits in decimal; 128-bit
integers, bitfields and integers of other widths as ``"0x.."`` hex strings of the raw bits; a
char array is a string when a NUL comes before the end and every byte before it is printable
ASCII, else an array; enums print the first matching name, else the number (signed);
pointers print as unsigned decimal; unions print every member.

``exact`` mode (the ``bpftool-json`` output) also copies bpftool 7.1's quirks, byte for byte:
a ``bool`` is read as a 4-byte int (the bytes after it leak in; past the end of the record
they are taken as zero, where bpftool reads whatever its buffer holds); a backslash in a
string is written ``\n``; a ``BTF_INT_CHAR`` char is not escaped; ``float`` and other kinds
it cannot print give its error text and end the enclosing aggregates. The typed mode (the
``json`` outputs) keeps valid JSON instead: one-byte bools, standard escapes, floats as
numbers (non-finite ones as ``"NaN"``/``"Infinity"`` strings) and ``null`` for the rest.

No BTF: :class:`RawCodec` (bytes, printed as bpftool's ``["0x01",...]`` byte lists).
Per-CPU values: :class:`PerCpuCodec` over a base codec — ``ncpus`` slots of
``round_up(size, 8)`` bytes; a pure function of ``ncpus`` so it is testable anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import struct
from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np

from .btf import INT_BOOL, INT_CHAR, INT_SIGNED, MODIFIERS, Btf, Kind
from .errors import BpfBatchError, InputError

# -- JSON text pieces ---------------------------------------------------------------------

# bpftool v7.1's jsonw_puts: C escapes only, and a backslash comes out as "\n" (a bug of
# that json_writer.c, reproduced for byte-identical output).
_JSONW_ESCAPES = {ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r", ord("\f"): "\\f",
                  ord("\b"): "\\b", ord("\\"): "\\n", ord('"'): '\\"'}


def json_string(text: str, exact: bool = False) -> bytes:
    """A JSON string: standard (``exact=False``), or as bpftool v7.1 writes it."""
    if exact:
        return b'"' + text.translate(_JSONW_ESCAPES).encode() + b'"'
    return json.dumps(text).encode()


_PRINTABLE = bytes(range(0x20, 0x7F))
_BOOL_TEXT = (b"false", b"true")


def _exact_char(byte: int) -> bytes:
    # btf_dumper_int, BTF_INT_CHAR: "%c" when isprint (unescaped), else "\u00XX".
    return b'"%c"' % byte if 0x20 <= byte < 0x7F else b'"\\u00%02x"' % byte


_CHAR_TEXT = {True: [_exact_char(b) for b in range(256)],
              False: [json.dumps(chr(b)).encode() for b in range(256)]}


def _column(rows: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """Zero-copy column of one little-endian scalar at ``offset`` of every row."""
    size = np.dtype(dtype).itemsize
    return rows[:, offset:offset + size].view(dtype)[:, 0]


def _uint_column(rows: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
    """``nbytes`` (≤ 8) little-endian bytes at ``offset`` of every row as uint64."""
    wide = np.zeros((rows.shape[0], 8), dtype=np.uint8)
    wide[:, :nbytes] = rows[:, offset:offset + nbytes]
    return wide.view("<u8")[:, 0]


def _chunks(rows: np.ndarray, offset: int, size: int) -> list[bytes]:
    """The ``size`` bytes at ``offset`` of every row, as bytes objects."""
    if not size:
        return [b""] * rows.shape[0]
    data = np.ascontiguousarray(rows[:, offset:offset + size]).tobytes()
    return [data[i:i + size] for i in range(0, len(data), size)]


class Leaf:
    """One ``%`` placeholder of a template; :meth:`column` reads it from every row of a batch
    (``rows``: a ``count × row_size`` uint8 array) at once."""

    placeholder = b"%s"

    def __init__(self, offset: int):
        self.offset = offset

    def column(self, rows: np.ndarray) -> list:
        raise NotImplementedError


class IntLeaf(Leaf):
    placeholder = b"%d"

    def __init__(self, offset: int, dtype: str):
        super().__init__(offset)
        self.dtype = dtype

    def column(self, rows):
        return _column(rows, self.offset, self.dtype).tolist()


class HexIntLeaf(Leaf):
    """Raw bits as ``"0x.."`` (btf_int128_print): 128-bit ints, bitfields, odd widths."""

    placeholder = b'"0x%x"'

    def __init__(self, offset: int, shift: int, nbits: int):
        super().__init__(offset)
        self.shift = shift
        self.nbits = nbits
        self.nbytes = (shift + nbits + 7) // 8

    def column(self, rows):
        if self.nbytes <= 8:
            bits = _uint_column(rows, self.offset, self.nbytes) >> np.uint64(self.shift)
            if self.nbits < 64:
                bits &= np.uint64((1 << self.nbits) - 1)
            return bits.tolist()
        mask = (1 << self.nbits) - 1
        n = self.nbytes
        data = np.ascontiguousarray(rows[:, self.offset:self.offset + n]).tobytes()
        return [(int.from_bytes(data[i:i + n], "little") >> self.shift) & mask
                for i in range(0, len(data), n)]


class BoolLeaf(Leaf):
    """``true``/``false`` from ``width`` bytes (bpftool reads 4: ``*(int *)data``)."""

    def __init__(self, offset: int, width: int):
        super().__init__(offset)
        self.width = width

    def column(self, rows):
        width = max(0, min(self.width, rows.shape[1] - self.offset))
        nonzero = rows[:, self.offset:self.offset + width].any(axis=1)
        return [_BOOL_TEXT[v] for v in nonzero.tolist()]


class CharLeaf(Leaf):
    def __init__(self, offset: int, exact: bool):
        super().__init__(offset)
        self.table = _CHAR_TEXT[exact]

    def column(self, rows):
        table = self.table
        return [table[b] for b in rows[:, self.offset].tolist()]


class EnumLeaf(Leaf):
    def __init__(self, offset: int, dtype: str, names: dict[int, bytes]):
        super().__init__(offset)
        self.dtype = dtype
        self.names = names

    def column(self, rows):
        get = self.names.get
        return [get(v) or b"%d" % v for v in _column(rows, self.offset, self.dtype).tolist()]


class FloatLeaf(Leaf):
    def __init__(self, offset: int, dtype: str):
        super().__init__(offset)
        self.dtype = dtype

    def column(self, rows):
        # Non-finite values as strings ("NaN", "Infinity"): strict JSON has no literal.
        return [json.dumps(v if math.isfinite(v) else json.dumps(v)).encode()
                for v in _column(rows, self.offset, self.dtype).tolist()]


class StrLeaf(Leaf):
    """A char array: a JSON string when a NUL ends printable ASCII, else ``fallback`` (the
    array of its elements, rendered per row)."""

    def __init__(self, offset: int, nelems: int, fallback: "Template", exact: bool):
        super().__init__(offset)
        self.nelems = nelems
        self.fallback = fallback
        self.backslash = b"\\n" if exact else b"\\\\"  # see _JSONW_ESCAPES

    def column(self, rows):
        n = self.nelems
        chunk = np.ascontiguousarray(rows[:, self.offset:self.offset + n])
        data = chunk.tobytes()
        out = []
        for i in range(0, len(data), n):
            text, nul, _ = data[i:i + n].partition(b"\0")
            if nul and not text.translate(None, _PRINTABLE):
                out.append(b'"' + text.replace(b"\\", self.backslash).replace(b'"', b'\\"') + b'"')
            else:
                out.append(self.fallback.render([chunk[i // n:i // n + 1]])[0])
        return out


class HexBytesLeaf(Leaf):
    """bpftool's raw byte list body, ``"0x01","0x00",...``: fixed width, so the template
    builds it for a whole batch in a numpy block (see :func:`_fixed_column`)."""

    def __init__(self, offset: int, size: int):
        super().__init__(offset)
        self.size = size

    def pattern(self) -> bytes:
        return b",".join([b'"0x00"'] * self.size)


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_HEX_HIGH = _HEX_DIGITS[np.arange(256) >> 4]
_HEX_LOW = _HEX_DIGITS[np.arange(256) & 15]


def _fixed_column(items: list):
    """A run of literals and raw byte lists rendered as one ``%s`` column: a uint8 block
    pre-filled with the run's text, whose hex digits are overwritten per batch."""
    pattern = b"".join(item if isinstance(item, bytes) else item[1].pattern() for item in items)
    digits = []  # (column of the first high digit, source, leaf)
    pos = 0
    for item in items:
        if isinstance(item, bytes):
            pos += len(item)
        else:
            digits.append((pos + 3, item[0], item[1]))
            pos += len(item[1].pattern())
    row = np.frombuffer(pattern, dtype=np.uint8)
    cache: dict[int, np.ndarray] = {}

    def column(sources, count):
        block = cache.get(count)
        if block is None:
            cache.clear()
            block = cache[count] = np.tile(row, (count, 1))
        for first, source, leaf in digits:
            data = sources[source][:, leaf.offset:leaf.offset + leaf.size]
            end = first + 7 * leaf.size
            block[:, first:end:7] = _HEX_HIGH[data]
            block[:, first + 1:end:7] = _HEX_LOW[data]
        # The template's bytes never contain NUL, which numpy's S dtype would strip.
        return block.view(f"S{len(pattern)}")[:, 0].tolist() if len(pattern) else \
            [b""] * count
    return column


class Template:
    """Text built from literals and leaves; each leaf reads from one of several sources
    (e.g. 0 = key rows, 1 = value rows).

    Compiled on first use into one ``%``-format per row and a list of columns: each value
    leaf is a column read vectorised from the batch; each run of literals and raw byte lists
    (fixed width) is one ``%s`` column built as a numpy block. :meth:`render_joined` formats
    a whole batch with a single ``%`` over the interleaved columns.
    """

    def __init__(self):
        self._items: list = []  # bytes literals and (source, leaf) pairs, in order
        self._compiled: tuple | None = None
        self._joined: tuple[int, bytes, bytes] | None = None  # (count, sep, batch format)
        #: False when bpftool stops printing inside this text (an unsupported kind).
        self.complete = True

    def text(self, literal: bytes) -> "Template":
        return self._add(literal)

    def leaf(self, leaf: Leaf, source: int = 0) -> "Template":
        return self._add((source, leaf))

    def extend(self, other: "Template", source: int = 0) -> "Template":
        """Append ``other`` with all its leaves reading from ``source``."""
        for item in other._items:
            self._add(item if isinstance(item, bytes) else (source, item[1]))
        return self

    def _add(self, item) -> "Template":
        self._items.append(item)
        self._compiled = self._joined = None
        return self

    def shifted(self, delta: int) -> "Template":
        """A copy whose leaves read ``delta`` bytes further into each row."""
        out = Template()
        for item in self._items:
            if not isinstance(item, bytes):
                source, leaf = item
                moved = object.__new__(type(leaf))
                moved.__dict__.update(leaf.__dict__, offset=leaf.offset + delta)
                item = (source, moved)
            out._items.append(item)
        out.complete = self.complete
        return out

    def _compile(self) -> tuple[bytes, list]:
        if self._compiled is None:
            fmt, columns, run = [], [], []

            def close_run():
                if any(not isinstance(item, bytes) for item in run):
                    fmt.append(b"%s")
                    columns.append(_fixed_column(list(run)))
                else:
                    fmt.extend(item.replace(b"%", b"%%") for item in run)
                run.clear()

            for item in self._items:
                if isinstance(item, bytes) or isinstance(item[1], HexBytesLeaf):
                    run.append(item)
                    continue
                close_run()
                source, leaf = item
                fmt.append(leaf.placeholder)
                columns.append(lambda sources, count, s=source, f=leaf.column: f(sources[s]))
            close_run()
            self._compiled = (b"".join(fmt), columns)
        return self._compiled

    def _columns(self, sources) -> list[list]:
        count = sources[0].shape[0]
        return [column(sources, count) for column in self._compile()[1]]

    def render(self, sources: list[np.ndarray]) -> list[bytes]:
        """One text per row; every source has the same number of rows."""
        fmt = self._compile()[0]
        columns = self._columns(sources)
        if not columns:
            return [fmt % ()] * sources[0].shape[0]
        return [fmt % row for row in zip(*columns)]

    def render_joined(self, sources: list[np.ndarray], sep: bytes) -> bytes:
        """All rows' texts joined by ``sep``: one ``%`` for the whole batch."""
        count = sources[0].shape[0]
        fmt = self._compile()[0]
        if self._joined is None or self._joined[:2] != (count, sep):
            self._joined = (count, sep, sep.replace(b"%", b"%%").join([fmt] * count))
        columns = self._columns(sources)
        args: list = [None] * (count * len(columns))
        for i, column in enumerate(columns):
            args[i::len(columns)] = column
        return self._joined[2] % tuple(args)


# -- the layout tree ----------------------------------------------------------------------

@dataclasses.dataclass
class Node:
    """A piece of a type at an absolute byte ``offset`` of the record."""

    offset: int

    def values(self, rows: np.ndarray) -> list:
        """Python values of this node in every row of a batch (``count × size`` uint8)."""
        raise NotImplementedError

    def encode(self, buf: bytearray, value, path: str) -> None:
        raise NotImplementedError

    def emit(self, out: Template, exact: bool) -> bool:
        """Append this node's JSON text; ``False`` when bpftool would stop here (error)."""
        raise NotImplementedError

    def dtype(self):
        """numpy dtype of this node, or ``None`` when not representable."""
        return None

    def can_fill(self) -> bool:
        """Whether :meth:`fill` is implemented for this node (and everything under it)."""
        return False

    def fill(self, rows: np.ndarray, values: Sequence, bad: np.ndarray) -> None:
        """Batch encoding: write this node's value of every record into ``rows`` (``count ×
        record size`` uint8) at once, and flag in ``bad`` each record whose value the
        vectorised path does not take as it is (see :func:`_int_column`)."""
        raise NotImplementedError

    def blank(self):
        """A value :meth:`fill` takes as it is, standing in for a flagged record's value."""
        raise NotImplementedError


def _emit_list(out: "Template", nodes: list[Node], exact: bool) -> bool:
    """Comma-separated nodes; stops after the first one bpftool cannot print."""
    for i, node in enumerate(nodes):
        if i:
            out.text(b",")
        if not node.emit(out, exact):
            return False
    return True


# (size, signed) -> numpy dtype of the plain integers.
_NP_INT = {(size, signed): ("<i%d" if signed else "<u%d") % size
           for size in (1, 2, 4, 8) for signed in (False, True)}


def _parse_int(value, path: str) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            pass
    raise InputError(f"expected an integer, got {value!r}", obj=path)


def _check_range(value: int, nbits: int, path: str) -> int:
    """The ``nbits`` two's-complement bits of ``value``. Signed and unsigned spellings of
    the same bits are both accepted (-1 and 0xff for any 8-bit field), as in C."""
    if not -(1 << (nbits - 1)) <= value < (1 << nbits):
        raise InputError(f"{value} does not fit in {nbits} bits", obj=path)
    return value & ((1 << nbits) - 1)


# -- batch encoding helpers ----------------------------------------------------------------
# The vectorised path only decides on the values it takes as they are (exact ``int``s in
# range for an integer, ``str``s of the right size for a char array, dicts with known
# fields for a struct, ...); every other value flags its record, and the codec encodes the
# flagged records again with ``encode``, which accepts them (a ``"0x1f"`` string, a float
# for a bool, ...) or raises the usual error. So a batch encodes to exactly the bytes, and
# fails with exactly the error, of encoding its records one by one.

_INT_TYPES = frozenset({int, bool})
_NUMBER_TYPES = frozenset({int, float})
_SEQUENCE_TYPES = frozenset({list, tuple})
_U64 = (1 << 64) - 1


def _conform(values: Sequence, ok: Callable[[object], bool], blank, bad: np.ndarray) -> list:
    """``values`` with each one failing ``ok`` replaced by ``blank`` and its record flagged."""
    out = []
    for i, value in enumerate(values):
        if ok(value):
            out.append(value)
        else:
            bad[i] = True
            out.append(blank)
    return out


def _int_column(values: Sequence, lo: int, hi: int, bad: np.ndarray) -> np.ndarray:
    """``values`` as an integer column (two's complement bits) where each is an exact ``int``
    or ``bool`` in ``[lo, hi)``; the others are flagged (and read as 0)."""
    if len(values) and set(map(type, values)) <= _INT_TYPES:
        for dtype in (np.int64, np.uint64):  # a given dtype converts twice as fast
            try:
                column = np.array(values, dtype=dtype)
            except OverflowError:  # beyond this dtype's range
                continue
            if int(column.min()) >= lo and int(column.max()) < hi:
                return column
            break
    clean = _conform(values, lambda v: type(v) in _INT_TYPES and lo <= v < hi, 0, bad)
    return np.array([v & _U64 for v in clean], dtype=np.uint64)


def _float_column(values: Sequence, bad: np.ndarray) -> np.ndarray:
    """``values`` as doubles where each is an exact ``int`` or ``float`` a double holds; the
    others (bools, strings, ints beyond the float range, ...) are flagged."""
    if set(map(type, values)) <= _NUMBER_TYPES:
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:
            pass
    return np.array(_conform(values, _is_double, 0.0, bad), dtype=np.float64)


def _is_double(value) -> bool:
    if type(value) not in _NUMBER_TYPES:
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _signed_range(nbits: int) -> tuple[int, int]:
    """What :func:`_check_range` accepts: signed or unsigned spellings of ``nbits`` bits."""
    return -(1 << (nbits - 1)), 1 << nbits


def _put(rows: np.ndarray, offset: int, size: int, column: np.ndarray) -> None:
    """Store an integer column as ``size``-byte little-endian words at ``offset``."""
    rows[:, offset:offset + size] = column.astype(f"<u{size}").view(np.uint8).reshape(-1, size)


@dataclasses.dataclass
class Int(Node):
    """An integer of 1, 2, 4, 8 or 16 bytes (a 16-byte one is raw ``V16`` in the dtype)."""

    size: int
    signed: bool

    def __post_init__(self):
        self.np_type = _NP_INT.get((self.size, self.signed))

    def values(self, rows):
        if self.np_type:
            return _column(rows, self.offset, self.np_type).tolist()
        return [int.from_bytes(raw, "little", signed=self.signed)
                for raw in _chunks(rows, self.offset, self.size)]

    def encode(self, buf, value, path):
        bits = _check_range(_parse_int(value, path), self.size * 8, path)
        buf[self.offset:self.offset + self.size] = bits.to_bytes(self.size, "little")

    def emit(self, out, exact):
        if self.np_type:
            out.leaf(IntLeaf(self.offset, self.np_type))
        else:
            out.leaf(HexIntLeaf(self.offset, 0, self.size * 8))
        return True

    def dtype(self):
        return np.dtype(self.np_type or "V16")

    def can_fill(self):
        return self.np_type is not None  # not 128-bit

    def fill(self, rows, values, bad):
        _put(rows, self.offset, self.size,
             _int_column(values, *_signed_range(self.size * 8), bad))

    def blank(self):
        return 0


@dataclasses.dataclass
class Bits(Node):
    """``nbits`` bits starting ``shift`` bits into the byte at ``offset`` (bitfields, and
    integers whose width is not 8/16/32/64/128)."""

    shift: int
    nbits: int
    signed: bool

    @property
    def nbytes(self) -> int:
        return (self.shift + self.nbits + 7) // 8

    def values(self, rows):
        bits = HexIntLeaf(self.offset, self.shift, self.nbits).column(rows)
        if not self.signed:
            return bits
        sign, wrap = 1 << (self.nbits - 1), 1 << self.nbits
        return [v - wrap if v & sign else v for v in bits]

    def encode(self, buf, value, path):
        bits = _check_range(_parse_int(value, path), self.nbits, path)
        end = self.offset + self.nbytes
        raw = int.from_bytes(buf[self.offset:end], "little")
        mask = ((1 << self.nbits) - 1) << self.shift
        raw = (raw & ~mask) | (bits << self.shift)
        buf[self.offset:end] = raw.to_bytes(self.nbytes, "little")

    def emit(self, out, exact):
        out.leaf(HexIntLeaf(self.offset, self.shift, self.nbits))
        return True


@dataclasses.dataclass
class Bool(Node):
    size: int

    def values(self, rows):
        return rows[:, self.offset:self.offset + self.size].any(axis=1).tolist()

    def encode(self, buf, value, path):
        if isinstance(value, str) and value in ("true", "false"):
            value = value == "true"
        if value not in (0, 1):  # True/False compare equal to 1/0
            raise InputError(f"expected true or false, got {value!r}", obj=path)
        buf[self.offset:self.offset + self.size] = int(value).to_bytes(self.size, "little")

    def emit(self, out, exact):
        out.leaf(BoolLeaf(self.offset, 4 if exact else self.size))
        return True

    def dtype(self):
        return np.dtype("?") if self.size == 1 else np.dtype(_NP_INT[self.size, False])

    def can_fill(self):
        return self.size in (1, 2, 4, 8)

    def fill(self, rows, values, bad):
        _put(rows, self.offset, self.size, _int_column(values, 0, 2, bad))

    def blank(self):
        return False


@dataclasses.dataclass
class Char(Node):
    """An int with BTF_INT_CHAR encoding: one character."""

    def values(self, rows):
        return [chr(b) for b in rows[:, self.offset].tolist()]

    def encode(self, buf, value, path):
        if isinstance(value, str) and len(value) == 1 and ord(value) < 256:
            value = ord(value)
        buf[self.offset] = _check_range(_parse_int(value, path), 8, path)

    def emit(self, out, exact):
        out.leaf(CharLeaf(self.offset, exact))
        return True

    def dtype(self):
        return np.dtype("S1")

    def can_fill(self):
        return True

    def fill(self, rows, values, bad):
        if set(map(type, values)) == {str} and set(map(len, values)) == {1}:
            try:
                rows[:, self.offset] = np.frombuffer("".join(values).encode("latin-1"),
                                                     dtype=np.uint8)
                return
            except UnicodeEncodeError:
                pass
        _put(rows, self.offset, 1, _int_column(values, *_signed_range(8), bad))

    def blank(self):
        return 0


@dataclasses.dataclass
class Float(Node):
    size: int

    def __post_init__(self):
        self.code = {2: "<e", 4: "<f", 8: "<d"}.get(self.size)

    def values(self, rows):
        if not self.code:
            return _chunks(rows, self.offset, self.size)
        return _column(rows, self.offset, self.code).tolist()

    def encode(self, buf, value, path):
        """A number, or ``"NaN"``/``"Infinity"``/``"-Infinity"`` as the JSON output prints
        them. One out of the field's range is an error: it would be stored as infinity."""
        if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
            value = float(value)
        elif self.code and isinstance(value, str) and overflows_double(value):  # 1e400
            raise InputError(f"{value} is beyond the range of a {self.size}-byte float",
                             obj=path)
        if not self.code or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"expected a number for a {self.size}-byte float, got {value!r}",
                             obj=path)
        try:
            struct.pack_into(self.code, buf, self.offset, float(value))
        except OverflowError:  # a finite value beyond the format, or an int beyond a double
            shown = repr(value) if isinstance(value, float) else \
                f"an integer of {value.bit_length()} bits"
            raise InputError(f"{shown} is beyond the range of a {self.size}-byte float",
                             obj=path) from None

    def emit(self, out, exact):
        if exact:
            out.text(b"(unsupported-kind")  # bpftool's btf_dumper has no FLOAT case
            return False
        if self.code:
            out.leaf(FloatLeaf(self.offset, self.code))
        else:
            out.text(b"null")  # e.g. a 16-byte long double
        return True

    def dtype(self):
        return np.dtype(self.code) if self.code else None

    def can_fill(self):
        return self.code in ("<f", "<d")  # half floats round and overflow in struct's way

    def fill(self, rows, values, bad):
        column = _float_column(values, bad)
        if self.code == "<f":
            with np.errstate(over="ignore"):
                narrow = column.astype("<f4")
            bad |= np.isinf(narrow) & np.isfinite(column)  # struct.pack raises there
            column = narrow
        size = column.dtype.itemsize
        rows[:, self.offset:self.offset + size] = column.view(np.uint8).reshape(-1, size)

    def blank(self):
        return 0.0


def overflows_double(text: str) -> bool:
    """Whether ``text`` is a finite number literal beyond a double's range, such as
    ``1e400``, which ``float()`` reads as infinity: input readers keep it as text, so that
    :class:`Float` names it rather than storing infinity."""
    try:
        return math.isinf(float(text)) and "inf" not in text.lower()
    except ValueError:
        return False


@dataclasses.dataclass
class Enum(Node):
    size: int
    enumerators: tuple[tuple[str, int], ...]

    def __post_init__(self):
        self.code = _NP_INT[self.size, True]
        self.names: dict[int, str] = {}
        for name, value in self.enumerators:
            self.names.setdefault(value, name)  # bpftool prints the first match
        self.by_name = {name: value for name, value in self.enumerators}

    def values(self, rows):
        names = self.names
        return [names.get(v, v) for v in _column(rows, self.offset, self.code).tolist()]

    def encode(self, buf, value, path):
        if isinstance(value, str):
            if value in self.by_name:
                value = self.by_name[value]
            else:
                try:
                    value = int(value, 0)
                except ValueError:
                    raise InputError(f"no enumerator {value!r} (known: "
                                     f"{', '.join(self.by_name)})", obj=path) from None
        bits = _check_range(_parse_int(value, path), self.size * 8, path)
        buf[self.offset:self.offset + self.size] = bits.to_bytes(self.size, "little")

    def emit(self, out, exact):
        names = {value: json_string(name, exact) for value, name in self.names.items()}
        out.leaf(EnumLeaf(self.offset, _NP_INT[self.size, True], names))
        return True

    def dtype(self):
        return np.dtype(_NP_INT[self.size, True])

    def can_fill(self):
        return True

    def fill(self, rows, values, bad):
        by_name = self.by_name
        numbers = [by_name.get(v, v) if type(v) is str else v for v in values]
        _put(rows, self.offset, self.size,
             _int_column(numbers, *_signed_range(self.size * 8), bad))

    def blank(self):
        return 0


@dataclasses.dataclass
class Array(Node):
    elems: list[Node]

    def values(self, rows):
        if not self.elems:
            return [[] for _ in range(rows.shape[0])]
        return [list(items) for items in zip(*(e.values(rows) for e in self.elems))]

    def encode(self, buf, value, path):
        if not isinstance(value, (list, tuple)) or len(value) != len(self.elems):
            raise InputError(f"expected a list of {len(self.elems)} elements, got {value!r}",
                             obj=path)
        for i, (elem, item) in enumerate(zip(self.elems, value)):
            elem.encode(buf, item, f"{path}[{i}]")

    def emit(self, out, exact):
        out.text(b"[")
        ok = _emit_list(out, self.elems, exact)
        out.text(b"]")
        return ok

    def dtype(self):
        if not self.elems:
            return np.dtype((np.uint8, (0,)))
        base = self.elems[0].dtype()
        return None if base is None else np.dtype((base, (len(self.elems),)))

    def can_fill(self):
        return all(elem.can_fill() for elem in self.elems)

    def fill(self, rows, values, bad):
        n = len(self.elems)
        if not (set(map(type, values)) <= _SEQUENCE_TYPES and set(map(len, values)) <= {n}):
            values = _conform(values, lambda v: type(v) in _SEQUENCE_TYPES and len(v) == n,
                              self.blank(), bad)
        columns = list(zip(*values)) if len(values) else [()] * n
        for elem, column in zip(self.elems, columns):
            elem.fill(rows, column, bad)

    def blank(self):
        return [elem.blank() for elem in self.elems]


@dataclasses.dataclass
class CharArray(Array):
    """``char[N]``: a string when a NUL ends printable ASCII (bpftool's ``is_str_array``),
    else the list of its elements."""

    def values(self, rows):
        out = []
        for i, raw in enumerate(_chunks(rows, self.offset, len(self.elems))):
            text, nul, _ = raw.partition(b"\0")
            if nul and not text.translate(None, _PRINTABLE):
                out.append(text.decode("ascii"))
            else:
                out.append(super().values(rows[i:i + 1])[0])
        return out

    def encode(self, buf, value, path):
        if isinstance(value, str):
            try:
                raw = value.encode("ascii")
            except UnicodeEncodeError:
                raise InputError(f"not ASCII: {value!r}", obj=path) from None
            if len(raw) > len(self.elems):
                raise InputError(f"string longer than {len(self.elems)} bytes: {value!r}",
                                 obj=path)
            buf[self.offset:self.offset + len(self.elems)] = raw.ljust(len(self.elems), b"\0")
            return
        super().encode(buf, value, path)

    def emit(self, out, exact):
        fallback = Template()
        shifted = CharArray(0, [dataclasses.replace(e, offset=e.offset - self.offset)
                                for e in self.elems])
        Array.emit(shifted, fallback, exact)
        out.leaf(StrLeaf(self.offset, len(self.elems), fallback, exact))
        return True

    def dtype(self):
        return np.dtype(f"S{len(self.elems)}")

    def fill(self, rows, values, bad):
        """Strings only; a record giving the list of elements is encoded on its own."""
        n = len(self.elems)
        if not (set(map(type, values)) <= {str} and "".join(values).isascii()
                and max(map(len, values), default=0) <= n):
            values = _conform(values, lambda v: type(v) is str and v.isascii() and len(v) <= n,
                              "", bad)
        rows[:, self.offset:self.offset + n] = \
            np.array(values, dtype=f"S{n}").view(np.uint8).reshape(-1, n)

    def blank(self):
        return ""


@dataclasses.dataclass
class Struct(Node):
    size: int
    members: list[tuple[str, Node]]

    def values(self, rows):
        names = [name for name, _ in self.members]
        columns = [node.values(rows) for _, node in self.members]
        if not columns:
            return [{} for _ in range(rows.shape[0])]
        return [dict(zip(names, row)) for row in zip(*columns)]

    def encode(self, buf, value, path):
        if not isinstance(value, dict):
            raise InputError(f"expected an object with fields "
                             f"{', '.join(n for n, _ in self.members)}, got {value!r}", obj=path)
        fields = dict(self.members)
        for name, item in value.items():
            if name not in fields:
                raise InputError(f"no field {name!r} (fields: "
                                 f"{', '.join(n for n, _ in self.members)})", obj=path)
            fields[name].encode(buf, item, f"{path}.{name}" if name else path)

    def emit(self, out, exact):
        out.text(b"{")
        ok = True
        for i, (name, node) in enumerate(self.members):
            out.text((b"," if i else b"") + json_string(name, exact) + b":")
            if not node.emit(out, exact):
                ok = False
                break
        out.text(b"}")
        return ok

    def dtype(self):
        names, formats, offsets = [], [], []
        for i, (name, node) in enumerate(self.members):
            dt = node.dtype()
            if dt is None:
                return None
            names.append(name or f"_anon{i}")
            formats.append(dt)
            offsets.append(node.offset - self.offset)
        return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                         "itemsize": self.size})

    def can_fill(self):
        """Members with distinct names that do not overlap: not a union (whose members
        ``encode`` writes over each other in the record's order)."""
        names = [name for name, _ in self.members]
        if len(set(names)) != len(names) or not all(n.can_fill() for _, n in self.members):
            return False
        end = self.offset
        for node in sorted((node for _, node in self.members), key=lambda n: n.offset):
            if node.offset < end:
                return False
            end = node.offset + node.dtype().itemsize
        return True

    def fill(self, rows, values, bad):
        names = tuple(name for name, _ in self.members)
        columns = None
        if names and set(map(type, values)) == {dict} and set(map(len, values)) == {len(names)}:
            try:  # every record names every field: one C-level pass per field
                columns = [list(map(operator.itemgetter(name), values)) for name in names]
            except KeyError:
                pass
        if columns is None:
            known = frozenset(names)
            values = _conform(values, lambda v: type(v) is dict and known.issuperset(v), {}, bad)
            columns = [[v.get(name, blank) for v in values]
                       for name, blank in ((name, node.blank()) for name, node in self.members)]
        for (_, node), column in zip(self.members, columns):
            node.fill(rows, column, bad)

    def blank(self):
        return {}


@dataclasses.dataclass
class Var(Node):
    """A BTF VAR (``.data``/``.bss`` maps): ``{"name": value}``."""

    name: str
    node: Node

    def values(self, rows):
        return [{self.name: v} for v in self.node.values(rows)]

    def encode(self, buf, value, path):
        if not isinstance(value, dict) or set(value) != {self.name}:
            raise InputError(f"expected {{{self.name!r}: ...}}, got {value!r}", obj=path)
        self.node.encode(buf, value[self.name], f"{path}.{self.name}")

    def emit(self, out, exact):
        out.text(b"{" + json_string(self.name, exact) + b":")
        ok = self.node.emit(out, exact)
        out.text(b"}")
        return ok


@dataclasses.dataclass
class Datasec(Node):
    """A BTF DATASEC: ``{"section": [var, ...]}``."""

    name: str
    vars: list[Node]

    def values(self, rows):
        columns = [var.values(rows) for var in self.vars]
        if not columns:
            return [{self.name: []} for _ in range(rows.shape[0])]
        return [{self.name: list(row)} for row in zip(*columns)]

    def encode(self, buf, value, path):
        items = value.get(self.name) if isinstance(value, dict) else None
        if not isinstance(items, list) or len(items) != len(self.vars):
            raise InputError(f"expected {{{self.name!r}: [{len(self.vars)} variables]}}",
                             obj=path)
        for var, item in zip(self.vars, items):
            var.encode(buf, item, f"{path}.{self.name}")

    def emit(self, out, exact):
        out.text(b"{" + json_string(self.name, exact) + b":[")
        ok = _emit_list(out, self.vars, exact)
        out.text(b"]}")
        return ok


@dataclasses.dataclass
class Unsupported(Node):
    """A kind bpftool cannot print: its error text in ``exact`` mode (``(unknown)`` is not
    an error), ``null`` in the typed JSON."""

    text: bytes
    fatal: bool = True

    def values(self, rows):
        return [None] * rows.shape[0]

    def encode(self, buf, value, path):
        if value is not None:
            raise InputError(f"cannot encode {self.text.decode()}", obj=path)

    def emit(self, out, exact):
        if not exact:  # the typed JSON stays valid JSON
            out.text(b"null")
            return True
        out.text(self.text)
        return not self.fatal


def leaf_columns(node: Node, prefix: str):
    """``(name, node)`` of every scalar or array leaf under ``node``: struct members become
    ``prefix.field`` (anonymous members add no name). The column layout shared by the flat
    output formats and the CSV loader, so that what one writes the other reads."""
    if isinstance(node, Struct):
        for name, member in node.members:
            yield from leaf_columns(member, f"{prefix}.{name}" if name else prefix)
    elif isinstance(node, Var):
        yield from leaf_columns(node.node, f"{prefix}.{node.name}")
    else:
        yield prefix, node


def build_node(btf: Btf, type_id: int, offset: int = 0, bit: int = 0) -> Node:
    """The layout tree of ``type_id`` placed at ``offset`` (+ ``bit`` bits, 0–7), following
    ``btf_dumper_do_type``."""
    t = btf[type_id]
    kind = t.kind
    if kind == Kind.INT:
        return _int_node(t, offset, bit)
    if kind in (Kind.STRUCT, Kind.UNION):
        members = []
        for m in t.members:
            at = offset + m.bit_offset // 8
            if m.bitfield_size:
                signed = _is_signed(btf, m.type)
                node = Bits(at, m.bit_offset % 8, m.bitfield_size, signed)
            else:
                node = build_node(btf, m.type, at, m.bit_offset % 8)
            members.append((m.name, node))
        return Struct(offset, t.size, members)
    if kind == Kind.ARRAY:
        elem_size = btf.size_of(t.type) if t.nelems else 0
        elems = [build_node(btf, t.type, offset + i * elem_size) for i in range(t.nelems)]
        return (CharArray if _is_char_elem(btf, t) else Array)(offset, elems)
    if kind in (Kind.ENUM, Kind.ENUM64):
        if t.size not in (1, 2, 4, 8):
            return Unsupported(offset, b"")
        values = t.values
        if kind == Kind.ENUM64:  # bpftool compares the raw 64 bits, prints them signed
            values = tuple((n, v - (1 << 64) if v >> 63 else v) for n, v in values)
        return Enum(offset, t.size, values)
    if kind == Kind.PTR:
        return Int(offset, 8, False)
    if kind == Kind.UNKN:
        return Unsupported(offset, b"(unknown)", fatal=False)
    if kind == Kind.FWD:
        return Unsupported(offset, b"(fwd-kind-invalid)")
    if kind in (Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT):
        return build_node(btf, btf.resolve(type_id), offset, bit)
    if kind == Kind.VAR:
        return Var(offset, t.name, build_node(btf, t.type, offset, bit))
    if kind == Kind.DATASEC:
        return Datasec(offset, t.name,
                       [build_node(btf, vt, offset + voff) for vt, voff, _ in t.entries])
    if kind == Kind.FLOAT:
        return Float(offset, t.size)
    return Unsupported(offset, b"(unsupported-kind")


def _int_node(t, offset: int, bit: int) -> Node:
    signed = bool(t.encoding & INT_SIGNED)
    total = bit + t.int_offset
    if total or t.bits % 8:
        return Bits(offset + total // 8, total % 8, t.bits, signed)
    if t.bits == 128:
        return Int(offset, 16, signed)
    if t.encoding in (0, INT_SIGNED):
        if t.bits in (8, 16, 32, 64):
            return Int(offset, t.bits // 8, signed)
        return Bits(offset, 0, t.bits, signed)
    if t.encoding == INT_CHAR:
        return Char(offset)
    if t.encoding == INT_BOOL:
        return Bool(offset, t.size)
    return Unsupported(offset, b"")  # bpftool: -EINVAL, prints nothing


def _is_signed(btf: Btf, type_id: int) -> bool:
    t = btf[btf.resolve(type_id)]
    return t.kind == Kind.INT and bool(t.encoding & INT_SIGNED)


def _is_char_elem(btf: Btf, array) -> bool:
    """bpftool's ``is_str_array`` static part: modifiers (not typedefs) skipped, a 1-byte
    int that is CHAR-encoded or named ``char``."""
    if not array.nelems:
        return False
    elem = btf[array.type]
    while elem.kind in MODIFIERS:
        elem = btf[elem.type]
    return elem.kind == Kind.INT and elem.size == 1 and (
        elem.encoding == INT_CHAR or elem.name == "char")


# -- codecs -------------------------------------------------------------------------------

class Codec:
    """Bytes <-> values for one key or value type."""

    size: int

    def values(self, rows: np.ndarray) -> list:
        """Python values of every row of a ``count × size`` uint8 array (see :func:`rows`),
        built field by field with vectorised reads."""
        raise NotImplementedError

    def decode(self, data) -> object:
        """Python value of the record at the start of ``data``."""
        return self.values(rows(data, 1, self.size))[0]

    def decode_batch(self, data, count: int) -> list:
        """Python values of ``count`` consecutive records in ``data``."""
        return self.values(rows(data, count, self.size))

    def encode(self, value, path: str = "value") -> bytes:
        raise NotImplementedError

    def encode_batch(self, values: Sequence, where: Callable[[int], str]) -> bytes:
        """Every record of ``values`` encoded and packed back to back.

        The same bytes as ``b"".join(self.encode(v, where(i)) for i, v in
        enumerate(values))``, and the same error (the first failing record's, its path from
        ``where(i)``), but vectorised over the layout: one numpy column per leaf field for
        the whole batch. Records the vectorised path does not take as they are, and layouts
        it cannot write (bitfields, 128-bit ints, unions, ...), go through :meth:`encode`.
        """
        rows = np.zeros((len(values), self.size), dtype=np.uint8)
        bad = np.zeros(len(values), dtype=bool)
        if not self._fill(rows, values, bad):
            bad[:] = True
        for i in np.flatnonzero(bad).tolist():
            rows[i] = np.frombuffer(self.encode(values[i], where(i)), dtype=np.uint8)
        return rows.tobytes()

    def _fill(self, rows: np.ndarray, values: Sequence, bad: np.ndarray) -> bool:
        """Write ``values`` into ``rows`` (``count × size`` uint8) at once, flagging in
        ``bad`` the records to encode one by one; ``False`` when the layout is not
        vectorised (every record is then encoded on its own)."""
        return False

    def template(self, exact: bool = False) -> Template:
        """JSON text of one record (bpftool rules; ``exact`` keeps bpftool's quirks)."""
        raise NotImplementedError

    @property
    def dtype(self) -> np.dtype | None:
        """numpy dtype of one record, ``None`` when the layout has bitfields."""
        raise NotImplementedError

    @property
    def typed(self) -> bool:
        """Whether values are typed from BTF (``False``: raw bytes)."""
        return True

    def array(self, data, count: int) -> np.ndarray:
        """``count`` records of ``data`` as a zero-copy numpy array of :attr:`dtype` (raw
        bytes, ``uint8 × size``, when the layout has no dtype)."""
        dtype = self.dtype if self.dtype is not None else np.dtype((np.uint8, (self.size,)))
        return np.frombuffer(data, dtype=dtype, count=count)

    def render_batch(self, data, count: int, exact: bool = False) -> list[bytes]:
        """JSON text of ``count`` consecutive records in ``data``."""
        return self.template(exact).render([rows(data, count, self.size)])


def rows(data, count: int, size: int) -> np.ndarray:
    """``count × size`` uint8 view of a buffer holding ``count`` records (zero-copy)."""
    return np.frombuffer(data, dtype=np.uint8, count=count * size).reshape(count, size)


class BtfCodec(Codec):
    """A codec compiled from a BTF type."""

    def __init__(self, btf: Btf, type_id: int):
        self.type_id = type_id
        self.type_name = btf.name_of(type_id)
        self.size = btf.size_of(type_id)
        self.node = build_node(btf, type_id)
        self._templates: dict[bool, Template] = {}
        self._dtype = self._make_dtype()
        self._fills = self.node.can_fill()

    def values(self, rows):
        return self.node.values(rows)

    def encode(self, value, path="value"):
        buf = bytearray(self.size)
        self.node.encode(buf, value, path)
        return bytes(buf)

    def _fill(self, rows, values, bad):
        if self._fills:
            self.node.fill(rows, values, bad)
        return self._fills

    def template(self, exact=False):
        if exact not in self._templates:
            out = Template()
            out.complete = self.node.emit(out, exact)
            self._templates[exact] = out
        return self._templates[exact]

    def _make_dtype(self):
        dt = self.node.dtype()
        if dt is None:
            return None
        if dt.itemsize != self.size:  # e.g. a scalar typedef: pad to the record size
            dt = np.dtype({"names": ["value"], "formats": [dt], "offsets": [0],
                           "itemsize": self.size})
        return dt

    @property
    def dtype(self):
        return self._dtype

    def __repr__(self) -> str:
        return f"<BtfCodec {self.type_name} size {self.size}>"


class RawCodec(Codec):
    """No BTF: values are ``bytes``; JSON is bpftool's ``["0x01",...]`` byte list."""

    def __init__(self, size: int):
        self.size = size
        self._template = Template().text(b"[")
        if size:
            self._template.leaf(HexBytesLeaf(0, size))
        self._template.text(b"]")

    @property
    def typed(self):
        return False

    def values(self, rows):
        return _chunks(rows, 0, self.size)

    def encode(self, value, path="value"):
        if isinstance(value, str):
            text = value[2:] if value[:2].lower() == "0x" else value
            try:
                raw = bytes.fromhex(text)
            except ValueError:
                raise InputError(f"not a hex string: {value!r}", obj=path) from None
        elif isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
        elif isinstance(value, list):
            raw = bytes(_check_range(_parse_int(v, f"{path}[{i}]"), 8, f"{path}[{i}]")
                        for i, v in enumerate(value))
        else:
            raise InputError(f"expected bytes, a hex string or a list of bytes, got {value!r}",
                             obj=path)
        if len(raw) != self.size:
            raise InputError(f"expected {self.size} bytes, got {len(raw)}", obj=path)
        return raw

    def _fill(self, rows, values, bad):
        """Hex strings, or lists of bytes as ints or ``"0x.."`` strings (bpftool's dump)."""
        size, count = self.size, len(values)
        kinds = set(map(type, values))
        if kinds == {str}:
            digits = [v[2:] if v[:2] in ("0x", "0X") else v for v in values]
            raw = None
            if set(map(len, digits)) == {2 * size}:
                try:
                    raw = bytes.fromhex("".join(digits))
                except ValueError:
                    pass
            if raw is None or len(raw) != count * size:  # odd input (e.g. spaces): one by one
                return False
            rows[:] = np.frombuffer(raw, dtype=np.uint8).reshape(count, size)
            return True
        if kinds != {list} or set(map(len, values)) != {size}:
            return bool(count == 0)
        flat = list(chain.from_iterable(values))
        flat_bad = np.zeros(len(flat), dtype=bool)
        if set(map(type, flat)) == {str}:
            column = _hex_byte_column(flat, flat_bad)
        else:
            column = _int_column(flat, *_signed_range(8), flat_bad)
        rows[:] = column.astype(np.uint8).reshape(count, size)
        bad |= flat_bad.reshape(count, size).any(axis=1)
        return True

    def template(self, exact=False):
        return self._template

    @property
    def dtype(self):
        return np.dtype((np.uint8, (self.size,)))

    def __repr__(self) -> str:
        return f"<RawCodec size {self.size}>"


_HEX_VALUE = np.full(256, 255, dtype=np.uint8)
_HEX_VALUE[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16)
_HEX_VALUE[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16)


def _hex_byte_column(texts: list[str], bad: np.ndarray) -> np.ndarray:
    """Strings of the form ``"0x07"`` (as bpftool prints bytes) as a uint8 column; any other
    string is flagged."""
    joined = "".join(texts)
    if set(map(len, texts)) != {4} or not joined.isascii():
        bad |= np.array([not (len(t) == 4 and t.isascii()) for t in texts], dtype=bool)
        texts = [t if len(t) == 4 and t.isascii() else "0x00" for t in texts]
        joined = "".join(texts)
    chars = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(-1, 4)
    high, low = _HEX_VALUE[chars[:, 2]], _HEX_VALUE[chars[:, 3]]
    bad |= (chars[:, 0] != ord("0")) | ((chars[:, 1] | 0x20) != ord("x")) | (high > 15) | (low > 15)
    return (high << 4) | (low & 15)


class PerCpuCodec(Codec):
    """A per-CPU value: ``ncpus`` slots of ``round_up(base.size, 8)`` bytes, one per possible
    CPU (CPU ``c`` at ``c × stride``; the pad bytes carry no meaning)."""

    def __init__(self, base: Codec, ncpus: int):
        if ncpus < 1:
            raise BpfBatchError(f"per-CPU codec needs at least one CPU, got {ncpus}")
        self.base = base
        self.ncpus = ncpus
        self.stride = (base.size + 7) & ~7
        self.size = self.stride * ncpus

    @property
    def typed(self):
        return self.base.typed

    def values(self, rows):
        size = self.base.size
        columns = [self.base.values(rows[:, c * self.stride:c * self.stride + size])
                   for c in range(self.ncpus)]
        return [list(cpus) for cpus in zip(*columns)]

    def encode(self, value, path="value"):
        """A list of one value per CPU, or one value copied to every CPU (like bpftool).

        A list of ``ncpus`` items is read per CPU when each item encodes as a value; else
        (e.g. an array type whose length happens to be ``ncpus``) as one value.
        """
        if isinstance(value, list) and len(value) == self.ncpus:
            try:
                return self.encode_cpus(value, path)
            except InputError as per_cpu:
                try:
                    return self.encode_cpus([value] * self.ncpus, path)
                except InputError:
                    raise per_cpu from None
        return self.encode_cpus([value] * self.ncpus, path)

    def encode_cpus(self, values: list, path: str = "value") -> bytes:
        """Exactly one value per CPU."""
        if len(values) != self.ncpus:
            raise InputError(f"expected {self.ncpus} per-CPU values, got {len(values)}",
                             obj=path)
        pad = bytes(self.stride - self.base.size)
        return b"".join(self.base.encode(v, f"{path}[cpu {c}]") + pad
                        for c, v in enumerate(values))

    def _fill(self, rows, values, bad):
        """Records giving one value per CPU fill each slot from their own column; the others
        fill one column copied to every slot. A record the base flags in either reading goes
        through :meth:`encode`, which settles which reading applies."""
        ncpus, size = self.ncpus, self.base.size
        per_cpu = [i for i, v in enumerate(values) if type(v) is list and len(v) == ncpus]
        taken = set(per_cpu)
        shared = [i for i, v in enumerate(values) if i not in taken]
        for i in shared:
            if isinstance(values[i], list):  # a list subclass: encode decides
                bad[i] = True
        slots = [(c * self.stride, c * self.stride + size) for c in range(ncpus)]
        if shared:
            base_rows, base_bad = self._base_fill([values[i] for i in shared])
            if base_rows is None:
                return False
            for start, end in slots:
                rows[shared, start:end] = base_rows
            bad[shared] |= base_bad
        for c, (start, end) in enumerate(slots if per_cpu else ()):
            base_rows, base_bad = self._base_fill([values[i][c] for i in per_cpu])
            if base_rows is None:
                return False
            rows[per_cpu, start:end] = base_rows
            bad[per_cpu] |= base_bad
        return True

    def _base_fill(self, values: list) -> tuple[np.ndarray | None, np.ndarray]:
        rows = np.zeros((len(values), self.base.size), dtype=np.uint8)
        bad = np.zeros(len(values), dtype=bool)
        return (rows if self.base._fill(rows, values, bad) else None), bad

    def template(self, exact=False):
        """``[{"cpu":0,"value":…},…]`` as in bpftool's ``formatted``."""
        base = self.base.template(exact)
        out = Template().text(b"[")
        for c in range(self.ncpus):
            out.text(b'%s{"cpu":%d,"value":' % (b"," if c else b"", c))
            out.extend(base.shifted(c * self.stride))
            out.text(b"}")
            if not base.complete:  # bpftool stops after the first CPU that failed
                break
        out.complete = base.complete
        return out.text(b"]")

    @property
    def dtype(self):
        base = self.base.dtype
        if base is None:
            return None
        slot = np.dtype({"names": ["value"], "formats": [base], "offsets": [0],
                         "itemsize": self.stride})
        return np.dtype((slot, (self.ncpus,)))

    def __repr__(self) -> str:
        return f"<PerCpuCodec {self.base!r} × {self.ncpus}>"


def codec_for(btf: Btf | None, type_id: int, size: int) -> Codec:
    """A typed codec for ``type_id`` of ``btf``, or raw bytes when there is no type."""
    if btf is None or not type_id:
        return RawCodec(size)
    codec = BtfCodec(btf, type_id)
    if codec.size != size:
        raise BpfBatchError(f"BTF type {codec.type_name} is {codec.size} bytes, "
                            f"the map says {size}", obj="BTF")
    return codec


def map_codecs(info, btf: Btf | None = None, ncpus: int | None = None) -> tuple[Codec, Codec]:
    """``(key codec, value codec)`` of a map (:class:`bpfbatch.maps.MapInfo`).

    The BTF is loaded from the kernel when the map has one and ``btf`` is not given. Like
    bpftool, types are used only when the map has a value type. Per-CPU maps get a
    :class:`PerCpuCodec` for ``ncpus`` (default: the possible CPUs).
    """
    if btf is None and info.btf_id and info.btf_value_type_id:
        btf = Btf.from_kernel(info.btf_id)
    typed = btf is not None and info.btf_value_type_id
    key = codec_for(btf if typed else None, info.btf_key_type_id, info.key_size)
    value = codec_for(btf if typed else None, info.btf_value_type_id, info.value_size)
    if info.percpu:
        if ncpus is None:
            from ._libbpf import num_possible_cpus
            ncpus = num_possible_cpus()
        value = PerCpuCodec(value, ncpus)
    return key, value
