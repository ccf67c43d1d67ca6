"""JSON text of whole batches of records: :class:`RecordText` and its :class:`Leaf` columns.

A record text is the text of one record: literals, and leaves that each read their field
from every row of a batch (a ``count × size`` uint8 array with one numpy operation, or the
:class:`~.columns.ByteRows` of a small dump in a loop), so the type is never walked per
record. A small batch renders as a ``%``-format whose placeholders are the leaves, with a
single ``%``; a large one without a Python object per field: each leaf gives its column's
texts as a numpy block (integers turned into ASCII digits four at a time), and the rows are
assembled from the blocks and the literals by windowed copies
(:meth:`RecordText._text_rows`), byte for byte what the ``%`` gives.
:mod:`bpfbatch.records.template` builds the record texts of a layout tree; this module
knows nothing of BTF. :func:`json_string` writes a string as standard JSON, or as bpftool
v7.1 does (``exact``).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from json.encoder import encode_basestring_ascii

from .._numpy import np
from .columns import (
    ByteRows,
    any_set,
    bits,
    byte_list,
    char_array_text,
    raw_bytes,
    scalar_list,
    scalars,
)

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

    def texts(self, rows: np.ndarray, suffix: bytes) -> tuple[np.ndarray, np.ndarray | int]:
        """The column's texts, each followed by ``suffix``, right-aligned (see
        :func:`_aligned`); by default built from :meth:`column`, a leaf that can do it in
        numpy operations does."""
        column = self.column(rows)
        if self.placeholder != b"%s":
            column = list(map(self.placeholder.__mod__, column))
        return _aligned(column, suffix)


class IntLeaf(Leaf):
    placeholder = b"%d"

    def __init__(self, offset: int, dtype: str):
        super().__init__(offset)
        self.dtype = dtype

    def column(self, rows):
        return scalar_list(rows, self.offset, self.dtype)

    def texts(self, rows, suffix):
        return _decimal(scalars(rows, self.offset, self.dtype), suffix)


def _aligned(texts: list[bytes], suffix: bytes) -> tuple[np.ndarray, np.ndarray | int]:
    """``(block, pad)``: a ``count × width`` uint8 block whose row ``i`` ends with
    ``texts[i] + suffix``, and the bytes before it (``pad[i]``, whatever they hold: the
    record text writes over them)."""
    lengths = np.fromiter(map(len, texts), np.intp, len(texts))
    return _aligned_packed(np.frombuffer(b"".join(texts), np.uint8), lengths, suffix)


def _looked_up(index: np.ndarray, table: list[bytes], suffix: bytes):
    """:func:`_aligned` of ``table[i]`` for each ``i`` of ``index``: the table's texts
    aligned once, then gathered."""
    block, pad = _aligned(table, suffix)
    return block[index], pad[index]


def _aligned_packed(packed: np.ndarray, lengths: np.ndarray, suffix: bytes):
    """:func:`_aligned` of texts given one after the other in ``packed``, with their
    ``lengths``: each row is a window of them ending where its text ends (one gather)."""
    width = int(lengths.max(initial=0))
    block = np.empty((len(lengths), width + len(suffix)), np.uint8)
    if width:
        joined = np.concatenate([np.zeros(width, np.uint8), packed])
        block[:, :width] = _windows(joined, width)[np.cumsum(lengths)]
    block[:, width:] = np.frombuffer(suffix, np.uint8)
    return block, width - lengths


def json_column(values: list, suffix: bytes) -> tuple[np.ndarray, np.ndarray | int]:
    """:func:`json_texts` of ``values``, each followed by ``suffix``, as :func:`_aligned`
    gives them: a column of only ``int`` values (a byte-order decoder's) in numpy
    operations."""
    if values and set(map(type, values)) <= {int}:
        try:
            column = np.array(values)
        except OverflowError:  # beyond 64 bits
            column = None
        if column is not None and column.dtype.kind in "iu":
            return _decimal(column, suffix)
    return _aligned(json_texts(values), suffix)


def _windows(data: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of the 1-d ``data`` (a view: row ``i`` starts at byte
    ``i``); writing to a row writes ``data``."""
    return np.lib.stride_tricks.sliding_window_view(data, width, writeable=True)


@functools.cache
def _decimal_tables():
    """(the ASCII of 0000..9999 as uint32 words, the powers of ten up to 10**19)."""
    quads = np.frombuffer(b"".join(b"%04d" % i for i in range(10000)), "<u4")
    return quads, np.array([10 ** k for k in range(1, 20)], np.uint64)


def _decimal(column: np.ndarray, suffix: bytes) -> tuple[np.ndarray, np.ndarray]:
    """An integer column's ``%d`` texts as :func:`_aligned` gives them, in numpy
    operations: four digits at a time from a table, as many groups as the largest
    magnitude needs, and a ``-`` before the negative ones."""
    quads, powers = _decimal_tables()
    magnitude = column.astype(np.uint64)  # two's complement: negatives negated below
    negative = column < 0 if column.dtype.kind == "i" else None
    if negative is not None:
        if negative.any():
            np.negative(magnitude, out=magnitude, where=negative)
        else:
            negative = None
    digits = np.searchsorted(powers, magnitude, side="right") + 1
    groups = -(-(int(digits.max(initial=1)) + (negative is not None)) // 4)
    width = 4 * groups
    words = np.empty((len(column), groups + -(-len(suffix) // 4)), "<u4")
    for k in range(groups - 1, -1, -1):
        rest = magnitude // np.uint64(10000)
        words[:, k] = quads[magnitude - rest * np.uint64(10000)]
        magnitude = rest
    block = words.view(np.uint8)[:, :width + len(suffix)]
    block[:, width:] = np.frombuffer(suffix, np.uint8)
    pad = width - digits
    if negative is not None:
        pad -= negative
        rows = np.flatnonzero(negative)
        block[rows, pad[rows]] = ord("-")
    return block, pad


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
        return [_BOOL_TEXT[v] for v in any_set(rows, self.offset, self._width(rows))]

    def texts(self, rows, suffix):
        chosen = rows[:, self.offset:self.offset + self._width(rows)].any(axis=1)
        return _looked_up(chosen.view(np.uint8), _BOOL_TEXT, suffix)

    def _width(self, rows) -> int:
        return max(0, min(self.width, rows.shape[1] - self.offset))


class CharLeaf(Leaf):
    def __init__(self, offset: int, exact: bool):
        super().__init__(offset)
        self.table = _CHAR_TEXT[exact]

    def column(self, rows):
        table = self.table
        return [table[b] for b in byte_list(rows, self.offset)]

    def texts(self, rows, suffix):
        return _looked_up(rows[:, self.offset], self.table, suffix)


class EnumLeaf(Leaf):
    def __init__(self, offset: int, dtype: str, names: dict[int, bytes]):
        super().__init__(offset)
        self.dtype = dtype
        self.names = names

    def column(self, rows):
        get = self.names.get
        return [get(v) or b"%d" % v for v in scalar_list(rows, self.offset, self.dtype)]

    def texts(self, rows, suffix):
        """Each value's text looked up among the batch's distinct values."""
        distinct, index = np.unique(scalars(rows, self.offset, self.dtype),
                                    return_inverse=True)
        get = self.names.get
        return _looked_up(index, [get(v) or b"%d" % v for v in distinct.tolist()], suffix)


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


class _FixedRun:
    """A run of literals and raw byte lists as one column of fixed width: a uint8 block
    pre-filled with the run's text, whose hex digits are overwritten per batch (a small
    batch's rows, :class:`ByteRows`, are joined row by row instead)."""

    def __init__(self, items: list):
        self.items = items
        self.pattern = b"".join(item if isinstance(item, bytes) else item[1].pattern()
                                for item in items)
        self.digits = []  # (column of the first high digit, source, leaf)
        pos = 0
        for item in items:
            if isinstance(item, bytes):
                pos += len(item)
            else:
                self.digits.append((pos + 3, item[0], item[1]))
                pos += len(item[1].pattern())
        self._block: np.ndarray | None = None

    def texts(self, sources, count, suffix: bytes = b"") -> tuple[np.ndarray, int]:
        """The run's block for ``count`` numpy rows, each followed by ``suffix`` (valid until
        the next call), no pad."""
        block = self._block
        if block is None or block.shape != (count, len(self.pattern) + len(suffix)) or \
                block[0, len(self.pattern):].tobytes() != suffix:
            block = self._block = np.tile(np.frombuffer(self.pattern + suffix, np.uint8),
                                          (count, 1))
        high, low = _hex_digits()
        for first, source, leaf in self.digits:
            data = sources[source][:, leaf.offset:leaf.offset + leaf.size]
            end = first + 7 * leaf.size
            block[:, first:end:7] = high[data]
            block[:, first + 1:end:7] = low[data]
        return block, 0

    def column(self, sources, count) -> list[bytes]:
        if isinstance(sources[0], ByteRows):
            return _joined_rows(self.items, sources, count)
        if not self.pattern:
            return [b""] * count
        # The record text never contains NUL, which numpy's S dtype would strip.
        return self.texts(sources, count)[0].view(f"S{len(self.pattern)}")[:, 0].tolist()


class _LeafColumn:
    """A value leaf as a column of a record text, reading from source ``source``."""

    def __init__(self, source: int, leaf: Leaf):
        self.source, self.leaf = source, leaf

    def texts(self, sources, count, suffix: bytes):
        return self.leaf.texts(sources[self.source], suffix)

    def column(self, sources, count):
        return self.leaf.column(sources[self.source])


#: Below this many rows a batch renders with ``%`` (numpy's fixed cost per column would
#: outweigh it); above, rows are assembled by :meth:`RecordText._text_rows`, this many at
#: a time (its buffers stay in the caches).
_BLOCK_ROWS = 64
_CHUNK_ROWS = 1 << 15


def _joined_rows(items: list, sources: list[ByteRows], count: int) -> list[bytes]:
    """:func:`_fixed_column`'s texts, one row at a time."""
    pieces = [[item] * count if isinstance(item, bytes) else
              list(map(_hex_list, raw_bytes(sources[item[0]], item[1].offset, item[1].size)))
              for item in items]
    return [b"".join(row) for row in zip(*pieces)] if pieces else [b""] * count


def _hex_list(raw: bytes) -> bytes:
    """``"0x01","0x00",...``: ``raw`` as a raw byte list's body, built by C string calls."""
    return b'"0x' + raw.hex("|").encode().replace(b"|", b'","0x') + b'"' if raw else b""


#: The most a row's window in :meth:`RecordText._packed` reaches past its text.
_SPILL = 32


def _bucketed(lengths: np.ndarray) -> int:
    """The rounding of row lengths that :meth:`RecordText._packed` copies rows by: up to a
    multiple of the returned step (a power of two, at most 32 and at most the shortest
    row), so a few widths cover rows of many lengths. A row's window then spills up to
    ``step - 1`` bytes into the next row, all inside that row's first ``step`` bytes, which
    are written again once every window is."""
    shortest = int(lengths.min())
    return 1 << min(_SPILL.bit_length() - 1, shortest.bit_length() - 1) if shortest else 1


def _chunks(sources: list[np.ndarray]):
    """The sources' rows, :data:`_CHUNK_ROWS` at a time."""
    count = sources[0].shape[0]
    for at in range(0, count, _CHUNK_ROWS):
        yield [rows[at:at + _CHUNK_ROWS] for rows in sources]


class RecordText:
    """Text built from literals and leaves; each leaf reads from one of several sources
    (e.g. 0 = key rows, 1 = value rows).

    Compiled on first use into one ``%``-format per row and a list of columns: each value
    leaf is a column read vectorised from the batch; each run of literals and raw byte lists
    (fixed width) is one ``%s`` column built as a numpy block. :meth:`render_joined` formats
    a small batch with a single ``%`` over the interleaved columns, and assembles a large
    one (numpy rows, at least :data:`_BLOCK_ROWS`) from the columns' text blocks.
    """

    def __init__(self):
        self._items: list = []  # bytes literals and (source, leaf) pairs, in order
        self._compiled: tuple | None = None
        self._joined: tuple[int, bytes, bytes] | None = None  # (count, sep, batch format)
        self._scratch: np.ndarray | None = None  # the rows of _text_rows, reused
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

    def _compile(self) -> tuple[bytes, list, bytes, list]:
        """``(format, columns, head, segments)``: the ``%``-format of a row and its
        columns; the same row as the literal ``head`` then ``(column, literal)`` segments."""
        if self._compiled is None:
            fmt, columns, run = [], [], []
            segments, literal = [], [b""]  # the literal after the last column

            def close_run():
                if any(not isinstance(item, bytes) for item in run):
                    fmt.append(b"%s")
                    add(_FixedRun(list(run)))
                else:
                    fmt.extend(item.replace(b"%", b"%%") for item in run)
                    literal[-1] += b"".join(run)
                run.clear()

            def add(column):
                columns.append(column)
                segments.append(column)
                literal.append(b"")

            for item in self._items:
                if isinstance(item, bytes) or isinstance(item[1], HexBytesLeaf):
                    run.append(item)
                    continue
                close_run()
                fmt.append(item[1].placeholder)
                add(_LeafColumn(*item))
            close_run()
            self._compiled = (b"".join(fmt), columns, literal[0],
                              list(zip(segments, literal[1:])))
        return self._compiled

    def _columns(self, sources) -> list[list]:
        count = sources[0].shape[0]
        return [column.column(sources, count) for column in self._compile()[1]]

    def assembles(self, sources) -> bool:
        """Whether a batch renders by :meth:`_text_rows` (numpy rows, enough of them), so
        that :meth:`render_ends` gives its ends."""
        return (not isinstance(sources[0], ByteRows) and sources[0].shape[0] >= _BLOCK_ROWS
                and bool(self._compile()[1]))

    def render(self, sources: list[np.ndarray]) -> list[bytes]:
        """One text per row; every source has the same number of rows."""
        if self.assembles(sources):
            text, ends = self.render_ends(sources, b"")
            ends = ends.tolist()
            return [text[start:end] for start, end in zip([0, *ends], ends)]
        fmt = self._compile()[0]
        columns = self._columns(sources)
        if not columns:
            return [fmt % ()] * sources[0].shape[0]
        return [fmt % row for row in zip(*columns)]

    def render_joined(self, sources: list[np.ndarray], sep: bytes) -> bytes:
        """All rows' texts joined by ``sep``."""
        return self.render_ends(sources, sep)[0]

    def render_ends(self, sources: list[np.ndarray], sep: bytes, end: bytes = b""):
        """All rows' texts joined by ``sep``, then ``end``, and where each row's text ends
        in it (before the ``sep`` after it): a numpy array; ``None`` for a batch formatted
        with one ``%`` (a small one: the caller finds the ends if it needs them)."""
        if self.assembles(sources):
            pieces, ends, at = [], [], 0
            for rows in _chunks(sources):
                packed, lengths = self._packed(rows, sep)
                pieces.append(packed)
                ends.append(np.cumsum(lengths) + at)
                at += len(packed)
            pieces[-1] = pieces[-1][:len(pieces[-1]) - len(sep)]  # no sep after the last
            return b"".join([*pieces, end]), np.concatenate(ends) - len(sep)
        count = sources[0].shape[0]
        fmt = self._compile()[0]
        if self._joined is None or self._joined[:2] != (count, sep):
            self._joined = (count, sep, sep.replace(b"%", b"%%").join([fmt] * count))
        columns = self._columns(sources)
        args: list = [None] * (count * len(columns))
        for i, column in enumerate(columns):
            args[i::len(columns)] = column
        text = self._joined[2] % tuple(args)
        return (text + end if end else text), None

    def aligned(self, sources, suffix: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Every row's text followed by ``suffix``, right-aligned as :meth:`Leaf.texts`
        gives a column's: a record text used as the text of one field."""
        packed, lengths = self._packed(sources, suffix)
        return _aligned_packed(packed, lengths, b"")

    def _packed(self, sources, tail: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Every row's text followed by ``tail``, one after the other in a uint8 array, and
        their lengths. The rows of :meth:`_text_rows` are copied out by length, all rows of
        one length at once as windows of that width, which never overlap; see
        :func:`_bucketed`."""
        rows, lengths = self._text_rows(sources, tail)
        ends = np.cumsum(lengths)
        step = _bucketed(lengths)
        out = np.empty(int(ends[-1]) + step, np.uint8)  # the last window may spill too
        starts = ends - lengths
        widths = -(-lengths // step) * step  # each row's window: its length, rounded up
        order = np.argsort(widths, kind="stable")
        ordered = widths[order]
        bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(order)]
        for first, last in zip(bounds, bounds[1:]):
            width = int(ordered[first])
            chosen = order[first:last] if last - first < len(order) else slice(None)
            _windows(out, width)[starts[chosen]] = \
                rows[chosen, :width]
        if step > 1:  # each row's first bytes again, over what the row before spilled
            _windows(out, step)[starts] = rows[:, :step]
        return out[:int(ends[-1])], lengths
    def _text_rows(self, sources, tail: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Every row's text followed by ``tail``: a uint8 array whose row ``i`` begins with
        it, and its length.

        Each segment (a column and the literal after it) is a block of right-aligned texts
        (:meth:`Leaf.texts`). Rows are laid out ``margin + width`` bytes apart; the segments
        are written last to first, each row's block placed so that its text starts where
        the texts before it in the row end (one windowed assignment per segment). A block's
        pad then falls on the segments before it, written afterwards, or on the margin,
        before the row."""
        _, _, head, segments = self._compile()
        count = sources[0].shape[0]
        blocks, lengths = [], []
        for i, (column, literal) in enumerate(segments):
            block, pad = column.texts(sources, count,
                                      literal + (tail if i == len(segments) - 1 else b""))
            blocks.append((block, pad))
            lengths.append(block.shape[1] - pad)
        width = len(head) + sum(block.shape[1] for block, _ in blocks)
        margin = max(int(np.max(pad, initial=0)) for _, pad in blocks)
        stride = margin + width + _SPILL  # room for a window rounded up (see _packed)
        buf = self._scratch
        if buf is None or len(buf) < count * stride:  # kept: new pages cost a fault each
            buf = self._scratch = np.empty(count * stride, np.uint8)
        buf = buf[:count * stride]
        starts = list(itertools.accumulate(lengths, initial=len(head) + margin + np.arange(
            count) * stride))
        for (block, pad), start in zip(reversed(blocks), reversed(starts[:-1])):
            if block.shape[1]:
                _windows(buf, block.shape[1])[start - pad] = block
        rows = buf.reshape(count, stride)[:, margin:]
        rows[:, :len(head)] = np.frombuffer(head, np.uint8)
        return rows, starts[-1] - (margin + np.arange(count) * stride)
