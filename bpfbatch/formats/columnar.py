"""Arrow columns <-> a map's key and value bytes, typed from BTF, one column per leaf field.

The schema rule (the README states it too):

* columns are the leaves of :func:`~bpfbatch.records.layout.leaf_columns`, as in ``-o csv``:
  ``key`` or ``key.field``, ``value`` or ``value.field``; nested struct members are flattened
  with dotted names (``value.stats.bytes``); anonymous members add no name;
* integers are Arrow integers of the same width and signedness, ``bool`` is ``bool``, ``float``
  and ``double`` are ``float32``/``float64``;
* an enum is a **dictionary** column (``int32`` indices) of its enumerators' names; a value no
  enumerator names appears as its number in decimal text (as ``dump -o json`` prints it);
* a ``char[N]`` is a ``string``: the bytes before its first NUL, as C reads it (bytes after
  that NUL are not kept; a value that is not ASCII is an error naming the field, in and
  out, as in ``-o jsonl``, whose strings are ASCII); loading pads it with NULs;
* an array of integers, floats or bools is a ``fixed_size_list`` of them;
* a side without BTF is one ``fixed_size_binary`` column, ``key`` or ``value``; a side of no
  bytes (the key of a queue or stack) has no column;
* per-CPU maps: every value column is a ``fixed_size_list`` with one item per possible CPU;
  summed (``dump --sum``), one ``int64`` (a signed field) or ``uint64`` column per field, the
  exact sum: one that does not fit 64 bits is an error naming the field and the key.

Columns hold the values of the map's view, as every other output shows them
(:func:`~bpfbatch.records.decoding.view`): a field shown through a decoder, automatically
(a ``__be32 saddr``, a ``__be16 dport``, a ``struct in6_addr``) or by ``--decode
FIELD=KIND``, is a column of the decoder's display values — ``uint16/32/64`` for the
byte-order kinds (a port as read), ``float64`` for ``age``, ``string`` for the others (a
number shown by ``ifname`` or ``errno`` as its decimal text) — whose field metadata names the
decoder (:data:`DECODE_KEY`). ``--decode none`` gives the stored values. A reader takes a
column as its metadata says, whatever view it was given; without metadata, numbers are the
stored values and text is the display: so every dump loads back, with or without the
``--decode`` options it was made with.

Other fields (bitfields, 128-bit integers, unions, arrays of structs, ...) have no column
type here: asking for one is an error naming the field (``-o jsonl`` carries them).
Loading reads the same columns back and writes the bytes column by column with numpy, no
record is built in Python. pyarrow is an optional extra (``bpfbatch[arrow]``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..errors import BpfBatchError, InputError
from ..records.codec import BtfCodec, Codec, PerCpuCodec
from ..records.cpusum import Summed
from ..records.columns import rows, store
from ..records.decoders import get
from ..records.decoding import Decoded
from ..records.fill import fill
from ..records.layout import Enum, LeafKind, Node, leaf_columns, leaf_kind, scalar_type
from ..records.plain import key_text
from .read import FormatError, PerCpuGiven, read_bytes
from ..records.values import dtype as layout_dtype

if TYPE_CHECKING:
    import pyarrow as pa

#: The field metadata naming the decoder a column's values are the display values of.
DECODE_KEY = b"bpfbatch.decode"

#: The extra that installs pyarrow, named in the error when it is missing.
EXTRA = "bpfbatch[arrow]"


def pyarrow():
    """The pyarrow module, or one clear error naming the extra that installs it."""
    try:
        import pyarrow as pa
    except ImportError:
        raise BpfBatchError(f"pyarrow is not installed (pip install '{EXTRA}')",
                            obj="arrow") from None
    return pa


class Columns:
    """The column layout of one map: its schema, batches of bytes -> Arrow record batches,
    and an Arrow table -> packed bytes."""

    def __init__(self, key: Codec, value: Codec):
        self.pa = pyarrow()
        self.key_codec = key
        self.key_size, self.value_size = key.size, value.size
        self.ncpus = value.ncpus if isinstance(value, PerCpuCodec) else None
        value_base = value.base if isinstance(value, PerCpuCodec) else value
        self.stride = value.stride if isinstance(value, PerCpuCodec) else value.size
        self.fields = [*_fields(key, "key"), *_fields(value_base, "value")]
        self.raw_width = {"key": key.size, "value": value_base.size}  # of a side without BTF
        self.schema = self.record_batch(np.zeros((0, self.key_size), np.uint8),
                                        np.zeros((0, self.value_size), np.uint8)).schema

    # -- bytes -> Arrow ------------------------------------------------------------------

    def record_batch(self, key_rows: np.ndarray, value_rows: np.ndarray) -> pa.RecordBatch:
        """The Arrow record batch of the entries whose packed keys and values are the rows of
        ``key_rows`` and ``value_rows`` (``count × size`` uint8, see
        :func:`~bpfbatch.records.columns.rows`)."""
        count = len(key_rows)
        arrays = []
        for name, node in self.fields:
            if name.startswith("key"):
                arrays.append(self._read(node, key_rows, name))
            elif isinstance(node, Summed):  # dump --sum: one column of the sums
                arrays.append(_from_numpy(self.pa, node.sums64(
                    value_rows, lambda row, name=name:
                    f"{name} of {key_text(self.key_codec, key_rows, row)}",
                    "the widest Arrow integer (use -o jsonl, json or csv)")))
            elif self.ncpus is None:
                arrays.append(self._read(node, value_rows, name))
            else:
                per_cpu = [self._read(node, value_rows[:, c * self.stride:], name)
                           for c in range(self.ncpus)]
                arrays.append(self._interleave(per_cpu, count))
        return self.pa.RecordBatch.from_arrays(arrays, schema=self._schema(arrays))

    def _schema(self, arrays: list):
        """The columns' schema: a field shown through a decoder says which in its metadata
        (:data:`DECODE_KEY`), so that a reader takes its values back as that decoder's
        whatever ``--decode`` options it was given (a ``be16`` port's ``uint16`` is not
        the stored one)."""
        pa = self.pa
        return pa.schema([
            pa.field(name, array.type, metadata={DECODE_KEY: node.decoder.kind}
                     if node is not None and leaf_kind(node) is LeafKind.DISPLAY else None)
            for (name, node), array in zip(self.fields, arrays)])

    def _interleave(self, per_cpu: list, count: int):
        """One ``fixed_size_list`` of ``ncpus`` items per entry from one array per CPU."""
        flat = self.pa.concat_arrays([_plain(self.pa, a) for a in per_cpu])
        order = (np.arange(self.ncpus)[None, :] * count + np.arange(count)[:, None]).ravel()
        return self.pa.FixedSizeListArray.from_arrays(flat.take(_from_numpy(self.pa, order)),
                                                      self.ncpus)

    def _read(self, node, rows_, name: str):
        pa = self.pa
        if node is None:  # raw bytes
            width = self.raw_width[name]
            raw = np.ascontiguousarray(rows_[:, :width])
            return pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(width), len(raw), [None, pa.py_buffer(raw.tobytes())])
        kind = leaf_kind(node)
        if kind is LeafKind.DISPLAY:
            raw = rows_[:, node.offset:node.offset + node.size]
            fast = _COLUMN_FORMATS.get(node.decoder.kind)
            if fast is not None:
                return fast(pa, np.ascontiguousarray(raw))
            shown = node.decoder.format(raw)
            dtype = _decoded_dtype(node)
            return _strings(pa, [str(v) for v in shown]) if dtype is None else \
                _from_numpy(pa, np.array(shown, dtype=dtype))
        if kind is LeafKind.ENUM:
            numbers = _scalar(rows_, node.offset, node.code)
            unique, index = np.unique(numbers, return_inverse=True)
            names = [node.names.get(v, str(v)) for v in unique.tolist()]
            return pa.DictionaryArray.from_arrays(_from_numpy(pa, index.astype(np.int32)),
                                                  _strings(pa, names))
        if kind is LeafKind.TEXT:
            chars = rows_[:, node.offset:node.offset + len(node.elems)]
            binary = _before_nul(pa, chars)
            wide = np.flatnonzero(((chars >= 0x80) & np.cumprod(chars != 0, axis=1)).any(axis=1))
            if len(wide):  # every reader takes a char array's text as ASCII only
                bad = int(wide[0])
                raise InputError(f"{binary[bad].as_py()!r} is not ASCII text; Arrow columns "
                                 "hold char arrays as ASCII strings (use -o jsonl)",
                                 obj=f"{name} of entry {bad + 1} of the batch")
            return _retyped(pa, binary, pa.string())
        if kind is LeafKind.ARRAY:
            elem = node.elems[0]
            flat = np.ascontiguousarray(
                rows_[:, node.offset:node.offset + len(node.elems) * _width(elem)]
            ).view(scalar_type(elem)).ravel()
            return pa.FixedSizeListArray.from_arrays(_numbers(pa, elem, flat), len(node.elems))
        return _numbers(pa, node, _scalar(rows_, node.offset, scalar_type(node)))

    # -- Arrow -> bytes ------------------------------------------------------------------

    def packed(self, table: pa.Table, source: str) -> tuple[int, bytearray, bytearray]:
        """``(count, keys, values)`` of ``table`` (writable buffers), whose columns must be
        exactly this layout's; a missing or unknown column, a null, or a value that does not
        fit its field is an :class:`InputError` naming the column (and the record, counted
        from 1)."""
        pa = self.pa
        names = [name for name, _ in self.fields]
        unknown = [c for c in table.column_names if c not in names]
        if unknown:
            raise FormatError(f"unknown column {unknown[0]!r} (expected {', '.join(names)})",
                              obj=source)
        missing = [c for c in names if c not in table.column_names]
        if missing:
            raise FormatError(f"missing column {missing[0]!r}", obj=source)
        twice = [c for c in names if table.column_names.count(c) > 1]
        if twice:
            raise InputError(f"column {twice[0]!r} appears {table.column_names.count(twice[0])} "
                             "times", obj=source)
        count = table.num_rows
        keys, values = bytearray(count * self.key_size), bytearray(count * self.value_size)
        key_rows = rows(keys, count, self.key_size)
        value_rows = rows(values, count, self.value_size)
        for name, node in self.fields:
            chunked = table.column(name)  # combine_chunks of no chunk imports pandas
            column = chunked.combine_chunks() if chunked.num_chunks else pa.nulls(0, chunked.type)
            where = f"{source}: column {name}"
            if column.null_count:
                raise InputError(f"null in record {_first_null(pa, column) + 1}", obj=where)
            node = _as_written(pa, node, column, table.schema.field(name).metadata, where)
            if name.startswith("key"):
                self._write(node, key_rows, column, where)
            elif self.ncpus is None:
                if _listed(pa, column) and (node is None
                                            or leaf_kind(node) is not LeafKind.ARRAY):
                    raise PerCpuGiven(f"a list of values ({column.type}) for a field of one: "
                                      "per-CPU values for a map that is not per-CPU", obj=where)
                self._write(node, value_rows, column, where)
            else:
                items = self._cpu_items(column, where)
                for c in range(self.ncpus):
                    self._write(node, value_rows[:, c * self.stride:], items[c::self.ncpus], where)
        return count, keys, values

    def _cpu_items(self, column, where: str):
        pa = self.pa
        if not _listed(pa, column):
            raise InputError(f"expected a list of {self.ncpus} per-CPU values, got {column.type}",
                             obj=where)
        wrong = _wrong_length(pa, column, self.ncpus)
        if wrong is not None:
            raise InputError(f"record {wrong[0] + 1}: {wrong[1]} per-CPU values for "
                             f"{self.ncpus} CPUs", obj=where)
        return _items(pa, column, self.ncpus, where)

    def _write(self, node, rows_, column, where: str) -> None:
        pa = self.pa
        if node is None:
            size = self.raw_width[where.rsplit(" ", 1)[1]]
            data = _binary_values(pa, column, where)
            _check_widths(data, size, where)
            rows_[:, :size] = np.frombuffer(b"".join(data), np.uint8).reshape(-1, size)
            return
        kind = leaf_kind(node)
        if kind is LeafKind.DISPLAY:
            fast = _COLUMN_PARSES.get(node.decoder.kind)
            parsed = None if fast is None else fast(pa, column, node.size)
            if parsed is not None:
                rows_[:, node.offset:node.offset + node.size] = parsed
                return
            _parse_into(rows_, node, column.to_pylist(), where)
            return
        if kind is LeafKind.ENUM:
            numbers = _enum_numbers(pa, node, column, where)
            store(rows_, node.offset, node.code,
                  _in_range(numbers, node.size, node.signed, where))
            return
        if kind is LeafKind.TEXT:
            n = len(node.elems)
            data = _binary_values(pa, column, where)
            wide = [i for i, v in enumerate(data) if not v.isascii()]
            if wide:  # as every reader: text of a char array is ASCII
                raise InputError(f"record {wide[0] + 1}: not ASCII: "
                                 f"{data[wide[0]].decode(errors='replace')!r}", obj=where)
            long = [i for i, v in enumerate(data) if len(v) > n]
            if long:
                raise InputError(f"record {long[0] + 1}: {len(data[long[0]])} bytes do not fit "
                                 f"char[{n}]", obj=where)
            rows_[:, node.offset:node.offset + n] = \
                np.array(data, dtype=f"S{n}").view(np.uint8).reshape(-1, n)
            return
        if kind is LeafKind.ARRAY:
            if not pa.types.is_fixed_size_list(column.type) and not pa.types.is_list(column.type):
                raise InputError(f"expected a list of {len(node.elems)}, got {column.type}",
                                 obj=where)
            wrong = _wrong_length(pa, column, len(node.elems))
            if wrong is not None:
                raise InputError(f"record {wrong[0] + 1}: expected {len(node.elems)} items",
                                 obj=where)
            elem = node.elems[0]
            flat = _checked(elem, _numpy(pa, _items(pa, column, len(node.elems), where), where),
                            where)
            width = len(node.elems) * _width(elem)
            rows_[:, node.offset:node.offset + width] = (
                flat.astype(scalar_type(elem)).view(np.uint8).reshape(len(column), width))
            return
        store(rows_, node.offset, scalar_type(node),
             _checked(node, _numpy(pa, column, where), where))


def read_packed(path: str, fmt: str, source: str, key: Codec, value: Codec,
                data: bytes | None = None) -> tuple[int, bytearray, bytearray]:
    """``(count, keys, values)`` of a ``parquet`` file or an ``arrow`` IPC stream (``-``:
    stdin; ``data``: its bytes, already read), packed for the map whose codecs are ``key``
    and ``value``. A pipe or stdin is read whole first (bounded, as every reader does:
    :func:`~.read.read_bytes`): Arrow reads a file by seeking in it."""
    columns = Columns(key, value)
    pa = columns.pa
    if data is None and (path == "-" or os.path.exists(path) and not os.path.isfile(path)):
        data = read_bytes(path, source)
    try:
        if data is not None:
            stream = pa.BufferReader(pa.py_buffer(data))
        else:
            stream = pa.OSFile(path)
        with stream:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                table = pq.ParquetFile(stream).read()  # read_table imports pandas (~0.3 s)
            else:
                table = pa.ipc.open_stream(stream).read_all()
    except OSError as exc:  # pyarrow's errors (ArrowInvalid too) are OSError or ValueError
        raise InputError(f"cannot read {fmt}: {exc}", obj=source) from None
    except (ValueError, pa.ArrowException) as exc:
        raise FormatError(f"not {fmt}: {exc}", obj=source) from None
    return columns.packed(table, source)


# -- the leaf kinds ---------------------------------------------------------------------------


def _fields(codec: Codec, side: str) -> list[tuple[str, Node | None]]:
    """``(column, leaf node)`` of one side (``None``: the side's raw bytes); a side of no
    bytes (a queue's or stack's key) has no column (Parquet has no zero-width binary)."""
    if not codec.size:
        return []
    if not isinstance(codec, BtfCodec):
        return [(side, None)]
    fields = list(leaf_columns(codec.node, side))
    for name, node in fields:
        if not _supported(node):
            raise InputError(f"{type(node).__name__.lower()} fields have no Arrow column type "
                             f"(use -o jsonl, or --decode {name}=hex)", obj=name)
    return fields


def _as_written(pa, node: Node | None, column, metadata: dict | None, where: str
                ) -> Node | None:
    """The node that reads ``column`` as its writer meant it: through the decoder its
    metadata names (:data:`DECODE_KEY`), whatever the reader's view; else, for a decoded
    field, a column of numbers as the stored values (``--decode none``'s) and text through
    the field's decoder."""
    if node is None:
        return None
    stored = node.inner if leaf_kind(node) is LeafKind.DISPLAY else node
    kind = (metadata or {}).get(DECODE_KEY)
    if kind is not None:
        decoder = get(kind.decode(errors="replace"), where)
        dtype = layout_dtype(stored)
        size = dtype.itemsize if dtype is not None else 0
        decoder.check_size(size, where)
        return Decoded(stored.offset, stored, size, decoder)
    values = column.type
    if pa.types.is_list(values) or pa.types.is_fixed_size_list(values):
        values = values.value_type  # per-CPU
    numbers = pa.types.is_integer(values) or pa.types.is_floating(values)
    if stored is not node and numbers and _supported(stored):
        return stored
    return node


def _decoded_dtype(node: Decoded) -> np.dtype | None:
    """The numpy type of a decoded field's column, ``None`` for text (see the module
    doc)."""
    if not node.decoder.numeric:
        return None
    return np.dtype(np.float64 if node.decoder.clocked else f"u{node.size}")


# The decoders a flow table meets by the million, over whole Arrow columns: what
# Decoder.format and Decoder.parse do value by value, in numpy and Arrow's kernels. A parse
# returns None for a column it does not take exactly as Decoder.parse would (a value out of
# range, a text ipaddress refuses): the value-by-value path then reads it or names the record.

def _format_be(pa, raw: np.ndarray):
    """The numbers in network byte order, as read."""
    return _from_numpy(pa, raw.view(f">u{raw.shape[1]}")[:, 0].astype(f"<u{raw.shape[1]}"))


def _format_ipv4(pa, raw: np.ndarray):
    """Dotted quads: each byte's decimal text, joined (Arrow's join, not a str per row)."""
    import pyarrow.compute as pc

    digits = _strings(pa, [str(b) for b in range(256)])
    return pc.binary_join_element_wise(
        *(digits.take(_from_numpy(pa, raw[:, i].copy())) for i in range(4)), ".")


def _parse_be(pa, column, size: int) -> np.ndarray | None:
    """The numbers of an unsigned column of the field's width, in network byte order
    (another type: the value-by-value path checks each number's range)."""
    if not pa.types.is_unsigned_integer(column.type) or column.type.bit_width != 8 * size:
        return None
    numbers = _to_numpy(pa, column)
    return numbers.astype(f">u{size}").view(np.uint8).reshape(len(numbers), size)


#: A dotted quad as ipaddress takes it: four decimal parts of 0..255 without leading zeros.
_QUAD = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"^{_QUAD}\.{_QUAD}\.{_QUAD}\.{_QUAD}$"


def _parse_ipv4(pa, column, size: int) -> np.ndarray | None:
    if not pa.types.is_string(column.type) or not len(column):
        return None
    import pyarrow.compute as pc

    if not pc.all(pc.match_substring_regex(column, _IPV4)).as_py():
        return None
    parts = pc.split_pattern(column, ".").flatten()
    return _to_numpy(pa, pc.cast(parts, pa.uint8())).reshape(len(column), 4)


_COLUMN_FORMATS = {"be16": _format_be, "be32": _format_be, "be64": _format_be,
                   "ipv4": _format_ipv4}
_COLUMN_PARSES = {"be16": _parse_be, "be32": _parse_be, "be64": _parse_be,
                  "ipv4": _parse_ipv4}


def _parse_into(rows_, node: Decoded, shown: list, where: str) -> None:
    """Each display value parsed back into its field's bytes by the field's decoder; the
    first that does not parse is an error naming its record."""
    bad = np.zeros(len(shown), dtype=bool)
    fill(node, rows_, shown, bad)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        try:
            node.decoder.parse(shown[first], node.size, where)
        except InputError as exc:
            raise InputError(f"record {first + 1}: {exc.message}", obj=where) from None


def _supported(node: Node) -> bool:
    kind = leaf_kind(node)
    if kind in (LeafKind.DISPLAY, LeafKind.ENUM, LeafKind.TEXT) or isinstance(node, Summed):
        return True
    if kind is LeafKind.ARRAY:
        return bool(node.elems) and scalar_type(node.elems[0]) is not None
    return scalar_type(node) is not None


def _listed(pa, column) -> bool:
    return pa.types.is_fixed_size_list(column.type) or pa.types.is_list(column.type)


def _width(node: Node) -> int:
    return np.dtype(scalar_type(node)).itemsize


def _scalar(rows_, offset: int, np_type: str) -> np.ndarray:
    size = np.dtype(np_type).itemsize
    return np.ascontiguousarray(rows_[:, offset:offset + size]).view(np_type)[:, 0]


def _numbers(pa, node: Node, column: np.ndarray):
    return _from_numpy(pa, column != 0 if leaf_kind(node) is LeafKind.BOOL else column)


# Arrays are built from their buffers, not with ``pa.array``: its first call in a process
# imports pandas (~0.3 s) to ask whether the input is a pandas object, even for a list.


def _from_numpy(pa, column: np.ndarray):
    """The Arrow array of a numpy column of numbers (sharing its memory) or bools."""
    column = np.ascontiguousarray(column)
    if column.dtype == np.bool_:
        bits = np.packbits(column, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(column), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(column.dtype), len(column),
                                 [None, pa.py_buffer(column)])


def _to_numpy(pa, column) -> np.ndarray:
    """A numpy view of an Arrow array of numbers (a copy for bools), nulls read as what
    their slots hold; the callers refuse nulls first."""
    data, end = column.buffers()[1], column.offset + len(column)
    if pa.types.is_boolean(column.type):
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little", count=end)
        return bits[column.offset:].astype(bool)
    kind = "f" if pa.types.is_floating(column.type) else \
        "i" if pa.types.is_signed_integer(column.type) else "u"
    dtype = np.dtype(f"{kind}{column.type.bit_width // 8}")
    return np.frombuffer(data, dtype=dtype, count=end)[column.offset:]


def _wrong_length(pa, column, n: int) -> tuple[int, int] | None:
    """``(record, items)`` of the first record of a list column that does not hold ``n``
    items, ``None`` if all do; read from the type or the offsets, since ``value_lengths()``
    imports ``pyarrow.compute`` (~40 ms, as much as the rest of a Parquet file's decoding)."""
    if not len(column):
        return None
    if pa.types.is_fixed_size_list(column.type):
        return None if column.type.list_size == n else (0, column.type.list_size)
    offsets = np.frombuffer(column.buffers()[1], np.int32, len(column) + 1, column.offset * 4)
    lengths = np.diff(offsets)
    wrong = np.flatnonzero(lengths != n)
    return (int(wrong[0]), int(lengths[wrong[0]])) if len(wrong) else None


def _items(pa, column, n: int, where: str):
    """The items of a list column whose records hold ``n`` items each, as one array (what
    ``flatten()`` gives, without importing ``pyarrow.compute``); a null item is an error
    naming its record."""
    start = column.offset * n if pa.types.is_fixed_size_list(column.type) else \
        int(np.frombuffer(column.buffers()[1], np.int32, 1, column.offset * 4)[0])
    items = column.values.slice(start, len(column) * n)
    if items.null_count:
        raise InputError(f"null in record {_first_null(pa, items) // n + 1}", obj=where)
    return items


def _offsets(lengths) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _strings(pa, values: list[str]):
    """A ``string`` array of ``values``."""
    data = [v.encode() for v in values]
    return pa.Array.from_buffers(pa.string(), len(data), [
        None, pa.py_buffer(_offsets(np.fromiter(map(len, data), np.int64, len(data)))),
        pa.py_buffer(b"".join(data))])


def _plain(pa, array):
    """A dictionary array as its values (per-CPU enum columns are interleaved as text)."""
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def _numpy(pa, column, where: str) -> np.ndarray:
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
            or pa.types.is_boolean(column.type)):
        hint = (" (a column dumped with --decode loads with the same --decode)"
                if pa.types.is_string(column.type) else "")
        raise InputError(f"expected numbers, got {column.type}{hint}", obj=where)
    return _to_numpy(pa, column)


def _checked(node: Node, column: np.ndarray, where: str) -> np.ndarray:
    """``column`` if every value fits ``node``'s type exactly, else an error naming the first
    record that does not (a float for an integer field must be whole)."""
    if leaf_kind(node) is LeafKind.FLOAT:
        return column
    if leaf_kind(node) is LeafKind.BOOL:  # as every reader takes a bool: 0 or 1, no other
        wrong = (column != 0) & (column != 1)
        if wrong.any():
            bad = int(np.flatnonzero(wrong)[0])
            raise InputError(f"record {bad + 1}: expected true or false, got {column[bad]}",
                             obj=where)
        return column
    if column.dtype.kind == "f":
        whole = np.isfinite(column) & (column == np.floor(column))
        if not whole.all():
            bad = int(np.flatnonzero(~whole)[0])
            raise InputError(f"record {bad + 1}: {column[bad]} is not an integer", obj=where)
    return _in_range(column, node.size, node.signed, where)


def _in_range(column: np.ndarray, size: int, signed: bool, where: str) -> np.ndarray:
    bits = size * 8
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if len(column):
        as_obj = column if column.dtype.kind in "iub" else column.astype(object)
        outside = (as_obj < low) | (as_obj > high)
        if outside.any():
            bad = int(np.flatnonzero(outside)[0])
            raise InputError(f"record {bad + 1}: {column[bad]} does not fit "
                             f"{'s' if signed else 'u'}{bits}", obj=where)
    return column


def _holding(numbers: list[int]):
    """The numpy type that holds each of ``numbers`` exactly: int64, else uint64 (a u64
    enum's enumerators from 2^63 up), else Python ints, which :func:`_in_range` then refuses
    with the record that holds one (``"-1"`` for an unsigned enum, a number past 64 bits)."""
    if all(-(1 << 63) <= n < (1 << 63) for n in numbers):
        return np.int64
    if all(0 <= n < (1 << 64) for n in numbers):
        return np.uint64
    return object


def _enum_numbers(pa, node: Enum, column, where: str) -> np.ndarray:
    """An enum column as numbers: dictionary or text columns by name (or decimal text),
    integer columns as they are."""
    if pa.types.is_integer(column.type):
        return _to_numpy(pa, column)
    if pa.types.is_dictionary(column.type):
        names, index = column.dictionary.to_pylist(), _to_numpy(pa, column.indices)
    elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        names, index = column.unique().to_pylist(), None
    else:
        raise InputError(f"expected enumerator names or numbers, got {column.type}", obj=where)
    numbers = []
    for name in names:
        if name in node.by_name:
            numbers.append(node.by_name[name])
            continue
        try:
            numbers.append(int(name))
        except (TypeError, ValueError):
            raise InputError(f"no enumerator {name!r} (known: {', '.join(node.by_name)})",
                             obj=where) from None
    table = np.array(numbers, dtype=_holding(numbers))
    if index is None:
        index = _to_numpy(pa, pa.compute.index_in(column, value_set=_strings(pa, names)))
    return table[index]


def _binary_values(pa, column, where: str) -> list[bytes]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = _retyped(pa, column, pa.binary() if pa.types.is_string(column.type)
                          else pa.large_binary())
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)
            or pa.types.is_fixed_size_binary(column.type)):
        raise InputError(f"expected text or bytes, got {column.type}", obj=where)
    return column.to_pylist()


def _retyped(pa, column, type_):
    """``column`` as ``type_``, whose buffers are laid out the same (string and binary):
    what a cast between them does, without importing ``pyarrow.compute`` (~40 ms, as long as
    decoding the columns of a million records) as ``cast`` does."""
    return pa.Array.from_buffers(type_, len(column), column.buffers(), column.null_count,
                                 column.offset)


def _check_widths(data: Iterable[bytes], size: int, where: str) -> None:
    for i, value in enumerate(data):
        if len(value) != size:
            raise InputError(f"record {i + 1}: {len(value)} bytes, the map's are {size}",
                             obj=where)


def _before_nul(pa, chars: np.ndarray):
    """The ``binary`` array of each row of ``chars`` (``count × N`` bytes) up to its first
    NUL: the string C reads there."""
    nul = chars == 0
    lengths = np.where(nul.any(axis=1), nul.argmax(axis=1), chars.shape[1])
    data = chars[np.arange(chars.shape[1]) < lengths[:, None]]  # row by row
    return pa.Array.from_buffers(pa.binary(), len(chars), [
        None, pa.py_buffer(_offsets(lengths)), pa.py_buffer(data.tobytes())])


def _first_null(pa, column) -> int:
    return int(np.flatnonzero(_to_numpy(pa, column.is_null()))[0])
