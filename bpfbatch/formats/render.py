"""Renderers: a map's elements to ``table``, ``json``, ``jsonl``, ``csv``, ``bpftool-json``,
``arrow`` or ``parquet``.

A renderer is built for one map (its :class:`~bpfbatch.map.handle.MapInfo` and key/value
:class:`~bpfbatch.records.codec.Codec`) and a binary output stream, then fed one
:class:`~bpfbatch.map.cursor.Batch` at a time: it formats the whole batch and writes it with one
``write()``, so memory stays bounded by the batch size whatever the map size. :meth:`close`
writes the trailer (``]`` for the JSON arrays) and flushes.

:meth:`Renderer.render` gives the same bytes without writing them, with the offset where each
record ends (its line end included): what :mod:`bpfbatch.delivery` needs to tell the records
that were completely written from those that were not. In ``arrow`` every record of a batch
ends where the batch ends (a record batch is read whole or not at all); ``parquet`` is readable
only once closed (:attr:`Renderer.delivers_prefix`).

``json``/``jsonl`` are typed from BTF: ``{"key":…,"value":…}``, per-CPU maps
``{"key":…,"values":[{"cpu":0,"value":…},…]}``, with bpftool's value rules (see
:mod:`bpfbatch.records.codec`); a side without BTF prints bpftool's raw byte list. ``bpftool-json``
is byte for byte what ``bpftool -j map dump`` prints, ``formatted`` member included when the
map has BTF. ``csv`` and ``table`` flatten structs into ``key.field`` / ``value.field``
columns, with one row per CPU for per-CPU maps.
"""

from __future__ import annotations

import io
import itertools
import json
import os
from collections import namedtuple
from collections.abc import Sequence

from ..errors import InputError
from .._numpy import np
from ..records.codec import BtfCodec, Codec, PerCpuCodec, RawCodec
from ..records.columns import ByteRows, batch_rows, is_small
from ..records.jsontext import RecordText, json_string
from ..records.layout import LeafKind, Node, leaf_columns, leaf_kind
from .table import aligned_row, simple
from ..records.values import values as layout_values

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from typing import BinaryIO


def _byte_list(offset: int, size: int) -> RecordText:
    """bpftool's ``print_hex_data_json``, ``["0x01",…]``, of ``size`` bytes at ``offset``."""
    return RawCodec(size).template().shifted(offset)


# collections', not typing's NamedTuple: importing typing costs ~2 ms of start-up
class Rendered(namedtuple("Rendered", "data ends")):
    """A batch as bytes, ``data``: ``ends[i]`` is the offset in ``data`` just past record
    ``i`` (past its line end in the line formats; before the separator that follows it in the
    JSON arrays), ascending: a list, or a numpy array for a large batch. Whatever precedes
    record 0 (``[``, a header) belongs to it."""

    __slots__ = ()
    data: bytes
    ends: Sequence[int]


def _record_ends(lengths: list[int], head: int, per_record: int = 1) -> list[int]:
    """Record ends from the byte lengths of consecutive pieces after a ``head``-byte prefix,
    ``per_record`` pieces to a record (per-CPU rows)."""
    return list(itertools.accumulate(lengths, initial=head))[per_record::per_record]


class Renderer:
    """Base: splits a batch into key rows and value rows; subclasses format them."""

    #: Whether the records :meth:`render` reports as ended can be read from the output as
    #: soon as their bytes are written, before :meth:`trailer`. A deleting command needs it.
    delivers_prefix = True
    #: Whether a small batch is read as :class:`~bpfbatch.records.columns.ByteRows` (pyarrow
    #: takes arrays).
    reads_byte_rows = True

    def __init__(self, info, key: Codec, value: Codec, out: BinaryIO | None):
        self.info = info
        self.key = key
        self.value = value
        self.out = out
        self.count = 0
        self._bytes_read = 0  # of keys and values, the batch being rendered included

    def render(self, batch) -> Rendered:
        """``batch`` (a :class:`~bpfbatch.map.cursor.Batch`) formatted, with its record ends."""
        if not batch.count:
            return Rendered(b"", [])
        rendered = self._render(batch.count, *self._rows(batch))
        self.count += batch.count
        return rendered

    def _rows(self, batch) -> tuple:
        """The batch's key rows and value rows: both
        :class:`~bpfbatch.records.columns.ByteRows` while the output so far, this batch
        included, is small (:func:`~bpfbatch.records.columns.is_small`), both numpy arrays
        from then on. A small dump never imports numpy; a large one reads at most
        the small size without it, then pays the import once for all its batches."""
        count, key_size, value_size = batch.count, self.key.size, self.value.size
        self._bytes_read += count * (key_size + value_size)
        small = self.reads_byte_rows and is_small(self._bytes_read)
        return (batch_rows(batch.keys, count, key_size, small=small),
                batch_rows(batch.values, count, value_size, small=small))

    def write_batch(self, batch) -> None:
        """Format and write ``batch`` with one write (none for an empty batch)."""
        if batch.count:
            self.out.write(self.render(batch).data)

    def _render(self, count, keys, values) -> Rendered:
        raise NotImplementedError

    def trailer(self) -> bytes:
        """What ends the output (``]`` for the JSON arrays)."""
        return b""

    def close(self) -> None:
        trailer = self.trailer()
        if trailer:
            self.out.write(trailer)
        self.out.flush()


class _JsonArray(Renderer):
    """Entries from one template, written as a JSON array (``open``, ``sep``, ``close``)."""

    open = b"["
    sep = b","
    end = b"]\n"
    empty = b"[]\n"

    def __init__(self, info, key, value, out):
        super().__init__(info, key, value, out)
        self.template = self._entry_template()

    def _entry_template(self) -> RecordText:
        raise NotImplementedError

    def _render(self, count, keys, values):
        head = self.sep if self.count else self.open
        text, ends = _joined(self.template, keys, values, self.sep, shift=len(head))
        return Rendered(head + text, ends)

    def trailer(self):
        return self.end if self.count else self.empty


def _joined(template: RecordText, keys, values, sep: bytes, *, shift: int = 0,
            end: bytes = b"") -> tuple[bytes, Sequence[int]]:
    """The rows' texts joined by ``sep``, then ``end``, and where each one ends (plus
    ``shift``: what precedes the text, or follows each row). A large batch's ends come with
    its text; a small one's rows are joined by a newline first (JSON text holds none) and
    located by it, and a row that does hold one (never seen, but not ours to rule out) makes
    the batch render row by row."""
    count = len(keys)
    if template.assembles([keys, values]):
        text, ends = template.render_ends([keys, values], sep, end)
        return text, ends + shift
    text = template.render_joined([keys, values], b"\n")
    newlines = _newlines(text, numpy=not isinstance(keys, ByteRows))
    if len(newlines) != count - 1:
        parts = [template.render_joined([keys[i:i + 1], values[i:i + 1]], b"")
                 for i in range(count)]
        ends = [stop + i * len(sep) + shift
                for i, stop in enumerate(itertools.accumulate(len(p) for p in parts))]
        return sep.join(parts) + end, ends
    grow = len(sep) - 1  # each separator's bytes beyond the newline it replaces
    if isinstance(newlines, list):
        ends = [stop + i * grow + shift for i, stop in enumerate([*newlines, len(text)])]
    else:
        ends = np.append(newlines, len(text)) + np.arange(count) * grow + shift
    return (text if sep == b"\n" else text.replace(b"\n", sep)) + end, ends


def _newlines(text: bytes, *, numpy: bool):
    """Offsets of the newlines in ``text``: a numpy array (one pass in C) or a list."""
    if numpy:
        return np.flatnonzero(np.frombuffer(text, np.uint8) == 0x0A)
    out, at = [], text.find(b"\n")
    while at >= 0:
        out.append(at)
        at = text.find(b"\n", at + 1)
    return out


class BpftoolJson(_JsonArray):
    """``bpftool -j map dump``, byte for byte (``print_entry_json`` + ``do_dump_btf``), the
    entries whose value could not be read (:attr:`Batch.failed`) as ``print_entry_error``
    writes them."""

    def write_batch(self, batch) -> None:
        failed = dict(batch.failed)
        if not failed:
            return super().write_batch(batch)
        keys, values = self._rows(batch)
        pieces, start = [], 0
        for index in [*sorted(failed), batch.count]:
            if index > start:
                pieces.append(self.template.render_joined([keys[start:index],
                                                           values[start:index]], self.sep))
            if index < batch.count:
                pieces.append(_error_entry(keys[index:index + 1].tobytes(), failed[index]))
            start = index + 1
        self.out.write((self.sep if self.count else self.open) + self.sep.join(pieces))
        self.count += batch.count

    def _entry_template(self):
        info, value = self.info, self.value
        out = RecordText().text(b'{"key":').extend(_byte_list(0, info.key_size), 0)
        if isinstance(value, PerCpuCodec):
            out.text(b',"values":[')
            for c in range(value.ncpus):
                out.text(b'%s{"cpu":%d,"value":' % (b"," if c else b"", c))
                out.extend(_byte_list(c * value.stride, info.value_size), 1).text(b"}")
            out.text(b"]")
        else:
            out.text(b',"value":').extend(_byte_list(0, info.value_size), 1)
        if value.typed:
            out.text(b',"formatted":')
            _typed_entry(out, self.key, value, exact=True)
        return out.text(b"}")


class BpftoolElement(BpftoolJson):
    """One element as ``bpftool -j map lookup``, ``peek`` and ``pop`` print it: the object
    alone on its line, not dump's array of one."""

    open = b""
    end = b"\n"
    empty = b""


def _error_entry(key: bytes, errno: int) -> bytes:
    """``{"key":[…],"value":{"error":"<strerror>"}}`` (bpftool's ``print_entry_error``)."""
    hexes = b",".join(b'"0x%02x"' % b for b in key)
    return b'{"key":[%s],"value":{"error":%s}}' % (hexes, json_string(os.strerror(errno), True))


class TypedJson(_JsonArray):
    """A JSON array of typed entries, one per line."""

    open = b"[\n"
    sep = b",\n"
    end = b"\n]\n"

    def _entry_template(self):
        return _typed_entry(RecordText(), self.key, self.value, exact=False)


class JsonLines(TypedJson):
    """One typed entry per line, no enclosing array."""

    def _render(self, count, keys, values):
        return Rendered(*_joined(self.template, keys, values, b"\n", shift=1, end=b"\n"))

    def trailer(self):
        return b""


def _typed_entry(out: RecordText, key: Codec, value: Codec, *, exact: bool) -> RecordText:
    """``{"key":K,"value":V}`` or ``{"key":K,"values":[…]}`` (bpftool's ``do_dump_btf``).

    In ``exact`` mode a key without BTF is left out and a key bpftool cannot print ends the
    entry, as bpftool does; the typed formats always print the key (raw bytes if untyped).
    """
    out.text(b"{")
    if key.typed or not exact:
        key_text = key.template(exact)
        out.text(b'"key":').extend(key_text, 0)
        if not key_text.complete:
            return out.text(b"}")
        out.text(b",")
    out.text(b'"values":' if isinstance(value, PerCpuCodec) else b'"value":')
    out.extend(value.template(exact), 1)
    return out.text(b"}")


# -- flat formats -------------------------------------------------------------------------

def _flat_columns(codec: Codec, prefix: str, rows) -> list[tuple[str, list]]:
    """``(name, cells)`` columns of a batch: struct members become ``prefix.field``
    columns (anonymous members add no name); anything else is one cell per row."""
    if isinstance(codec, BtfCodec):
        return [(name, _cells(node, layout_values(node, rows)))
                for name, node in leaf_columns(codec.node, prefix)]
    return [(prefix, [raw.hex() for raw in codec.values(rows)])]


_AS_THEY_ARE = (LeafKind.INTEGER, LeafKind.ENUM)  # numbers, or enum names


def _cells(node: Node, values: list) -> list:
    if leaf_kind(node) in _AS_THEY_ARE:
        return values
    return [_cell(v) for v in values]


def _cell(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"), default=_cell)
    return value


class _Flat(Renderer):
    """Rows of flattened columns, built column by column for the whole batch; per-CPU
    maps get a ``cpu`` column and one row per CPU."""

    def __init__(self, info, key, value, out):
        super().__init__(info, key, value, out)
        self.header: list[str] | None = None

    def _table(self, keys, values) -> list[tuple]:
        key_columns = _flat_columns(self.key, "key", keys)
        if not isinstance(self.value, PerCpuCodec):
            columns = key_columns + _flat_columns(self.value, "value", values)
            self.header = [name for name, _ in columns]
            return list(zip(*(cells for _, cells in columns)))
        codec = self.value
        table: list = [None] * (len(keys) * codec.ncpus)
        for cpu in range(codec.ncpus):
            slots = values[:, cpu * codec.stride:cpu * codec.stride + codec.base.size]
            columns = key_columns + [("cpu", [cpu] * len(keys))] + \
                _flat_columns(codec.base, "value", slots)
            table[cpu::codec.ncpus] = zip(*(cells for _, cells in columns))
        self.header = [name for name, _ in columns]
        return table

    def _render(self, count, keys, values):
        first = self.header is None
        head, lines = self._format(self._table(keys, values), first)
        head_bytes = head.encode()
        encoded = [line.encode() for line in lines]
        per_record = len(encoded) // count
        return Rendered(head_bytes + b"".join(encoded),
                        _record_ends([len(e) for e in encoded], len(head_bytes), per_record))

    def _format(self, table: list[tuple], first: bool) -> tuple[str, list[str]]:
        """The header (or ``""``) and one string per row of ``table``."""
        raise NotImplementedError


class Csv(_Flat):
    def _format(self, table, first):
        import csv  # only -o csv needs it: not imported by every dump

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")

        def line(row) -> str:  # row by row: a quoted cell may hold a newline
            buf.seek(0)
            buf.truncate()
            writer.writerow(row)
            return buf.getvalue()

        return (line(self.header) if first else ""), [line(row) for row in table]


class Table(_Flat):
    """Aligned columns, numbers to the right: tabulate's simple table (:mod:`.table`) lays
    out the first batch under the header; later batches keep its column widths and
    alignments (a longer cell widens only its own row), so the table reads as one while
    memory stays per batch. A column is numeric when every cell of the first batch is a
    number."""

    def __init__(self, info, key, value, out):
        super().__init__(info, key, value, out)
        self.widths: list[int] = []
        self.right: list[bool] = []

    def _format(self, table, first):
        if first:
            self.right = [all(type(cell) in (int, float) for cell in column)
                          for column in zip(*table)]
            text = simple(table, self.header, self.right)
            lines = text.split("\n")
            self.widths = [len(dashes) for dashes in lines[1].split("  ")]
            if len(lines) != len(table) + 2:  # a multi-line cell: the batch is one piece
                return "", [text + "\n"] + [""] * (len(table) - 1)
            return lines[0] + "\n" + lines[1] + "\n", [line + "\n" for line in lines[2:]]
        return "", [aligned_row(row, self.widths, self.right) + "\n" for row in table]


class _Columnar(Renderer):
    """Arrow record batches, one per batch, typed by the rule of
    :mod:`bpfbatch.formats.columnar`; binary, so never written to a terminal.

    pyarrow's writer writes into a :class:`_Spool`, from which :meth:`render` takes the bytes
    one batch produced, so a columnar batch is written like any other format's: one write, and
    through the delivery step's writer too. Its records all end where the batch ends: a record
    batch is read whole or not at all, so it is delivered whole or put back whole."""

    reads_byte_rows = False

    def __init__(self, info, key, value, out):
        super().__init__(info, key, value, out)
        from .columnar import Columns

        isatty = getattr(out, "isatty", None)
        if isatty and isatty():
            raise InputError("binary output: redirect it to a file or a pipe", obj="--output")
        self.columns = Columns(key, value)
        self.spool = _Spool()
        self.writer = self._writer(self.columns.pa, self.columns.pa.PythonFile(self.spool, "w"),
                                   self.columns.schema)

    def _writer(self, pa, sink, schema):
        raise NotImplementedError

    def _render(self, count, keys, values):
        self.writer.write_batch(self.columns.record_batch(keys, values))
        data = self.spool.take()
        return Rendered(data, [len(data)] * count)

    def trailer(self):
        self.writer.close()
        return self.spool.take()


class _Spool(io.RawIOBase):
    """A write-only file that keeps what was written until :meth:`take`, and counts every
    byte ever written as its position (writers record offsets: Parquet's footer does)."""

    def __init__(self):
        super().__init__()
        self.pending: list[bytes] = []
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.pending.append(bytes(data))
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        """What was written since the last take."""
        data = b"".join(self.pending)
        self.pending.clear()
        return data


class ArrowStream(_Columnar):
    """The Arrow IPC stream format (for pipes: ``pyarrow.ipc.open_stream``, DuckDB, polars).
    The schema goes out with the first batch (or, for an empty map, with the end-of-stream
    marker in the trailer)."""

    def _writer(self, pa, sink, schema):
        return pa.ipc.new_stream(sink, schema)


class Parquet(_Columnar):
    """Parquet, one row group per batch. The file is readable only once :meth:`trailer`
    has written its footer, so no prefix of it holds a record: :attr:`delivers_prefix` is
    false, and the commands that delete what they print refuse it."""

    delivers_prefix = False

    def _writer(self, pa, sink, schema):
        import pyarrow.parquet as pq

        return pq.ParquetWriter(sink, schema)


#: Every output format by name: the one place format names are defined.
RENDERERS: dict[str, type[Renderer]] = {
    "table": Table,
    "json": TypedJson,
    "jsonl": JsonLines,
    "csv": Csv,
    "bpftool-json": BpftoolJson,
    "parquet": Parquet,
    "arrow": ArrowStream,
}


def check_format(fmt: str, source: str = "fmt") -> str:
    """``fmt`` if it names a renderer, else an :class:`InputError` naming ``source`` (the
    parameter, or the caller's flag) and the formats there are."""
    if fmt not in RENDERERS:
        raise InputError(f"unknown format '{fmt}' (use {', '.join(RENDERERS)})", obj=source)
    return fmt


def make_renderer(fmt: str, info, key: Codec, value: Codec, out: BinaryIO, *,
                  element: bool = False) -> Renderer:
    """The renderer for output format ``fmt`` (one of :data:`RENDERERS`). ``element``: the
    output is one element, which bpftool prints as an object, not as a dump of one
    (:class:`BpftoolElement`); the other formats print it as a dump of one."""
    if element and check_format(fmt) == "bpftool-json":
        return BpftoolElement(info, key, value, out)
    return RENDERERS[check_format(fmt)](info, key, value, out)
