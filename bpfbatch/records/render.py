"""Renderers: a map's elements to ``table``, ``json``, ``jsonl``, ``csv`` or ``bpftool-json``.

A renderer is built for one map (its :class:`~bpfbatch.map.handle.MapInfo` and key/value
:class:`~bpfbatch.records.codec.Codec`) and a binary output stream, then fed one
:class:`~bpfbatch.map.cursor.Batch` at a time: it formats the whole batch and writes it with one
``write()``, so memory stays bounded by the batch size whatever the map size. :meth:`close`
writes the trailer (``]`` for the JSON arrays) and flushes.

``json``/``jsonl`` are typed from BTF: ``{"key":…,"value":…}``, per-CPU maps
``{"key":…,"values":[{"cpu":0,"value":…},…]}``, with bpftool's value rules (see
:mod:`bpfbatch.records.codec`); a side without BTF prints bpftool's raw byte list. ``bpftool-json``
is byte for byte what ``bpftool -j map dump`` prints, ``formatted`` member included when the
map has BTF. ``csv`` and ``table`` flatten structs into ``key.field`` / ``value.field``
columns, with one row per CPU for per-CPU maps.
"""

from __future__ import annotations

import csv
import io
import json
from typing import BinaryIO

from tabulate import tabulate

from ..errors import InputError
from .codec import BtfCodec, Codec, PerCpuCodec, RawCodec, rows
from .jsontext import Template
from .layout import Bits, Enum, Int, Node, leaf_columns


def _byte_list(offset: int, size: int) -> Template:
    """bpftool's ``print_hex_data_json``, ``["0x01",…]``, of ``size`` bytes at ``offset``."""
    return RawCodec(size).template().shifted(offset)


class Renderer:
    """Base: splits a batch into key rows and value rows; subclasses format them."""

    def __init__(self, info, key: Codec, value: Codec, out: BinaryIO):
        self.info = info
        self.key = key
        self.value = value
        self.out = out
        self.count = 0

    def write_batch(self, batch) -> None:
        """Format and write ``batch`` (a :class:`~bpfbatch.map.cursor.Batch`) with one write."""
        if batch.count:
            self._write(batch.count, rows(batch.keys, batch.count, self.key.size),
                        rows(batch.values, batch.count, self.value.size))
            self.count += batch.count

    def _write(self, count, keys, values) -> None:
        raise NotImplementedError

    def close(self) -> None:
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

    def _entry_template(self) -> Template:
        raise NotImplementedError

    def _write(self, count, keys, values):
        text = self.template.render_joined([keys, values], self.sep)
        self.out.write((self.sep if self.count else self.open) + text)

    def close(self):
        self.out.write(self.end if self.count else self.empty)
        super().close()


class BpftoolJson(_JsonArray):
    """``bpftool -j map dump``, byte for byte (``print_entry_json`` + ``do_dump_btf``)."""

    def _entry_template(self):
        info, value = self.info, self.value
        out = Template().text(b'{"key":').extend(_byte_list(0, info.key_size), 0)
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


class TypedJson(_JsonArray):
    """A JSON array of typed entries, one per line."""

    open = b"[\n"
    sep = b",\n"
    end = b"\n]\n"

    def _entry_template(self):
        return _typed_entry(Template(), self.key, self.value, exact=False)


class JsonLines(TypedJson):
    """One typed entry per line, no enclosing array."""

    def _write(self, count, keys, values):
        self.out.write(self.template.render_joined([keys, values], b"\n") + b"\n")

    def close(self):
        Renderer.close(self)


def _typed_entry(out: Template, key: Codec, value: Codec, *, exact: bool) -> Template:
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
        return [(name, _cells(node, node.values(rows)))
                for name, node in leaf_columns(codec.node, prefix)]
    return [(prefix, [raw.hex() for raw in codec.values(rows)])]


def _cells(node: Node, values: list) -> list:
    if isinstance(node, (Int, Bits, Enum)):  # numbers, or enum names: as they are
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

    def _write(self, count, keys, values):
        first = self.header is None
        self.out.write(self._format(self._table(keys, values), first).encode())

    def _format(self, table: list[tuple], first: bool) -> str:
        raise NotImplementedError


class Csv(_Flat):
    def _format(self, table, first):
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if first:
            writer.writerow(self.header)
        writer.writerows(table)
        return buf.getvalue()


class Table(_Flat):
    """Aligned columns, numbers to the right: tabulate lays out the first batch under the
    header; later batches keep its column widths and alignments (a longer cell widens only
    its own row), so the table reads as one while memory stays per batch. A column is
    numeric when every cell of the first batch is a number."""

    def __init__(self, info, key, value, out):
        super().__init__(info, key, value, out)
        self.widths: list[int] = []
        self.right: list[bool] = []

    def _format(self, table, first):
        if first:
            self.right = [all(type(cell) in (int, float) for cell in column)
                          for column in zip(*table)]
            text = tabulate(table, headers=self.header, tablefmt="simple",
                            disable_numparse=True,
                            colalign=["right" if r else "left" for r in self.right])
            self.widths = [len(dashes) for dashes in text.splitlines()[1].split("  ")]
            return text + "\n"
        return "".join("  ".join(str(cell).rjust(width) if right else str(cell).ljust(width)
                                 for cell, width, right in zip(row, self.widths, self.right)
                                 ).rstrip() + "\n"
                       for row in table)


#: Every output format by name: the one place format names are defined.
RENDERERS: dict[str, type[Renderer]] = {
    "table": Table,
    "json": TypedJson,
    "jsonl": JsonLines,
    "csv": Csv,
    "bpftool-json": BpftoolJson,
}


def check_format(fmt: str, source: str = "fmt") -> str:
    """``fmt`` if it names a renderer, else an :class:`InputError` naming ``source`` (the
    parameter, or the caller's flag) and the formats there are."""
    if fmt not in RENDERERS:
        raise InputError(f"unknown format '{fmt}' (use {', '.join(RENDERERS)})", obj=source)
    return fmt


def make_renderer(fmt: str, info, key: Codec, value: Codec, out: BinaryIO) -> Renderer:
    """The renderer for output format ``fmt`` (one of :data:`RENDERERS`)."""
    return RENDERERS[check_format(fmt)](info, key, value, out)
