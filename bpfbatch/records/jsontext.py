"""JSON text of whole batches of records: :class:`RecordText` and its :class:`Leaf` columns.

A record text is the text of one record as a ``%``-format whose placeholders are leaves;
each leaf reads its field from every row of a batch (a ``count × size`` uint8 array with one
numpy operation, or the :class:`~.columns.ByteRows` of a small dump in a loop), so a batch
renders with a single ``%`` and the type is never walked per record.
:mod:`bpfbatch.records.template` builds the record texts of a layout tree; this module
knows nothing of BTF. :func:`json_string` writes a string as standard JSON, or as bpftool
v7.1 does (``exact``).
"""

from __future__ import annotations

import functools
import json
import math
from json.encoder import encode_basestring_ascii

from .._numpy import np
from .columns import ByteRows, any_set, bits, byte_list, char_array_text, raw_bytes, scalar_list

# bpftool v7.1's jsonw_puts: C escapes only, and a backslash comes out as "\n" (a bug of
# that json_writer.c, reproduced for byte-identical output).
_JSONW_ESCAPES = {ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r", ord("\f"): "\\f",
                  ord("\b"): "\\b", ord("\\"): "\\n", ord('"'): '\\"'}


def json_string(text: str, exact: bool = False) -> bytes:
    """A JSON string: standard (``exact=False``), or as bpftool v7.1 writes it."""
    if exact:
        return b'"' + text.translate(_JSONW_ESCAPES).encode() + b'"'
    return encode_basestring_ascii(text).encode()  # what json.dumps does with a str


def json_texts(values: list) -> list[bytes]:
    """The JSON text of each of ``values``, byte for byte what ``json.dumps`` writes: in C
    loops for a column of only ``str`` or only ``int`` values (what the address and
    byte-order decoders give: ``json.dumps`` itself took a µs each, most of a flow table's
    dump), through ``json.dumps`` otherwise."""
    kinds = set(map(type, values))
    if kinds <= {str}:
        return list(map(str.encode, map(encode_basestring_ascii, values)))
    if kinds <= {int}:  # not bool: type() tells them apart
        return list(map(b"%d".__mod__, values))
    dumps = json.dumps
    return [dumps(v).encode() for v in values]


_BOOL_TEXT = (b"false", b"true")


def _exact_char(byte: int) -> bytes:
    # btf_dumper_int, BTF_INT_CHAR: "%c" when isprint (unescaped), else "\u00XX".
    return b'"%c"' % byte if 0x20 <= byte < 0x7F else b'"\\u00%02x"' % byte


_CHAR_TEXT = {True: [_exact_char(b) for b in range(256)],
              False: [json.dumps(chr(b)).encode() for b in range(256)]}


class Leaf:
    """One ``%`` placeholder of a record text; :meth:`column` reads it from every row of a batch
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
        return scalar_list(rows, self.offset, self.dtype)


class HexIntLeaf(Leaf):
    """Raw bits as ``"0x.."`` (btf_int128_print): 128-bit ints, bitfields, odd widths."""

    placeholder = b'"0x%x"'

    def __init__(self, offset: int, shift: int, nbits: int):
        super().__init__(offset)
        self.shift = shift
        self.nbits = nbits

    def column(self, rows):
        return bits(rows, self.offset, self.shift, self.nbits)


class BoolLeaf(Leaf):
    """``true``/``false``: whether any of ``width`` bytes is set."""

    def __init__(self, offset: int, width: int):
        super().__init__(offset)
        self.width = width

    def column(self, rows):
        width = max(0, min(self.width, rows.shape[1] - self.offset))
        return [_BOOL_TEXT[v] for v in any_set(rows, self.offset, width)]


class CharLeaf(Leaf):
    def __init__(self, offset: int, exact: bool):
        super().__init__(offset)
        self.table = _CHAR_TEXT[exact]

    def column(self, rows):
        table = self.table
        return [table[b] for b in byte_list(rows, self.offset)]


class EnumLeaf(Leaf):
    def __init__(self, offset: int, dtype: str, names: dict[int, bytes]):
        super().__init__(offset)
        self.dtype = dtype
        self.names = names

    def column(self, rows):
        get = self.names.get
        return [get(v) or b"%d" % v for v in scalar_list(rows, self.offset, self.dtype)]


class FloatLeaf(Leaf):
    def __init__(self, offset: int, dtype: str):
        super().__init__(offset)
        self.dtype = dtype

    def column(self, rows):
        # Non-finite values as strings ("NaN", "Infinity"): strict JSON has no literal.
        return [json.dumps(v if math.isfinite(v) else json.dumps(v)).encode()
                for v in scalar_list(rows, self.offset, self.dtype)]


class StrLeaf(Leaf):
    """A char array: a JSON string when :func:`char_array_text` says so, else ``fallback``
    (the array of its elements, rendered per row)."""

    def __init__(self, offset: int, nelems: int, fallback: "RecordText", exact: bool):
        super().__init__(offset)
        self.nelems = nelems
        self.fallback = fallback
        self.exact = exact

    def column(self, rows):
        chunk = rows[:, self.offset:self.offset + self.nelems]
        out = []
        for i, raw in enumerate(raw_bytes(chunk, 0, self.nelems)):
            text = char_array_text(raw, self.exact)
            if text is None:
                out.append(self.fallback.render([chunk[i:i + 1]])[0])
            else:
                out.append(json_string(text, self.exact))
        return out


class HexBytesLeaf(Leaf):
    """bpftool's raw byte list body, ``"0x01","0x00",...``: fixed width, so the record text
    builds it for a whole batch in a numpy block (see :func:`_fixed_column`)."""

    def __init__(self, offset: int, size: int):
        super().__init__(offset)
        self.size = size

    def pattern(self) -> bytes:
        return b",".join([b'"0x00"'] * self.size)


@functools.cache
def _hex_digits():
    """(high, low): the hex digit of each byte value's high and low nibble, as uint8."""
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    return digits[np.arange(256) >> 4], digits[np.arange(256) & 15]


def _fixed_column(items: list):
    """A run of literals and raw byte lists rendered as one ``%s`` column: a uint8 block
    pre-filled with the run's text, whose hex digits are overwritten per batch (a small
    batch's rows, :class:`ByteRows`, are joined row by row instead)."""
    pattern = b"".join(item if isinstance(item, bytes) else item[1].pattern() for item in items)
    digits = []  # (column of the first high digit, source, leaf)
    pos = 0
    for item in items:
        if isinstance(item, bytes):
            pos += len(item)
        else:
            digits.append((pos + 3, item[0], item[1]))
            pos += len(item[1].pattern())
    cache: dict[int, np.ndarray] = {}

    def column(sources, count):
        if isinstance(sources[0], ByteRows):
            return _joined_rows(items, sources, count)
        block = cache.get(count)
        if block is None:
            cache.clear()
            block = cache[count] = np.tile(np.frombuffer(pattern, dtype=np.uint8), (count, 1))
        high, low = _hex_digits()
        for first, source, leaf in digits:
            data = sources[source][:, leaf.offset:leaf.offset + leaf.size]
            end = first + 7 * leaf.size
            block[:, first:end:7] = high[data]
            block[:, first + 1:end:7] = low[data]
        # The record text never contains NUL, which numpy's S dtype would strip.
        return block.view(f"S{len(pattern)}")[:, 0].tolist() if len(pattern) else \
            [b""] * count
    return column


def _joined_rows(items: list, sources: list[ByteRows], count: int) -> list[bytes]:
    """:func:`_fixed_column`'s texts, one row at a time."""
    pieces = [[item] * count if isinstance(item, bytes) else
              list(map(_hex_list, raw_bytes(sources[item[0]], item[1].offset, item[1].size)))
              for item in items]
    return [b"".join(row) for row in zip(*pieces)] if pieces else [b""] * count


def _hex_list(raw: bytes) -> bytes:
    """``"0x01","0x00",...``: ``raw`` as a raw byte list's body, built by C string calls."""
    return b'"0x' + raw.hex("|").encode().replace(b"|", b'","0x') + b'"' if raw else b""


class RecordText:
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

    def text(self, literal: bytes) -> "RecordText":
        return self._add(literal)

    def leaf(self, leaf: Leaf, source: int = 0) -> "RecordText":
        return self._add((source, leaf))

    def extend(self, other: "RecordText", source: int = 0) -> "RecordText":
        """Append ``other`` with all its leaves reading from ``source``."""
        for item in other._items:
            self._add(item if isinstance(item, bytes) else (source, item[1]))
        return self

    def _add(self, item) -> "RecordText":
        self._items.append(item)
        self._compiled = self._joined = None
        return self

    def shifted(self, delta: int) -> "RecordText":
        """A copy whose leaves read ``delta`` bytes further into each row."""
        out = RecordText()
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
