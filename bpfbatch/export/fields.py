"""A metric bound to a live map: which bytes of each entry are its value, its labels and its
histogram bucket, found through the map's BTF as ``exec --where`` finds fields.

Field paths: ``key`` or ``value`` alone (a whole integer key or value; also for maps without
BTF, read as an unsigned little-endian integer), ``key.a.b`` (a field of the key), ``a.b`` or
``value.a.b`` (a field of the value). A value must be a 1, 2, 4 or 8-byte integer; a
per-CPU map's value is the sum over every possible CPU. A label may be any integer, enum,
bool or char array (printed as ``dump -o json`` prints it), or any field a decoder takes;
labels of a per-CPU map come from its key (a per-CPU value has no one value to label with).

Errors name the configuration's ``file:line``, the key and the map, with the fields there are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from ..errors import InputError
from ..map.handle import MapInfo
from ..records.codec import Codec, PerCpuCodec
from ..records.layout import Array, Bits, LeafKind, Node, extent, integer_field, leaf_kind
from ..records.values import values as layout_values
from .config import ConfigError, Label, Metric


@dataclasses.dataclass(frozen=True)
class Column:
    """``width`` bytes at ``offset`` of each key (``in_key``) or of each CPU's value slot."""

    path: str
    in_key: bool
    offset: int
    width: int
    signed: bool = False
    node: Node | None = None

    def slice(self, keys: np.ndarray, values: np.ndarray, cpu_offset: int = 0) -> np.ndarray:
        """This field's bytes in every row: ``count × width`` uint8 (a view)."""
        rows = keys if self.in_key else values
        start = cpu_offset + self.offset
        return rows[:, start:start + self.width]

    def integers(self, keys: np.ndarray, values: np.ndarray, cpu_offset: int = 0) -> np.ndarray:
        """This (integer) field in every row as int64/uint64."""
        return self.decode(self.slice(keys, values, cpu_offset))

    def decode(self, raw: np.ndarray) -> np.ndarray:
        """``count × width`` bytes of this (integer) field → int64/uint64."""
        dtype = np.dtype(f"<{'i' if self.signed else 'u'}{self.width}")
        column = np.ascontiguousarray(raw).view(dtype).reshape(-1)
        return column.astype(np.int64 if self.signed else np.uint64)


@dataclasses.dataclass(frozen=True)
class Binding:
    """A metric's columns in one map's layout, and how each label's bytes become text."""

    metric: Metric
    value: Column | None          # None: count entries
    labels: tuple[Column, ...]
    formats: tuple[Callable[[np.ndarray], list[str]], ...]  # label rows → texts
    bucket: Column | None
    cpus: int                     # per-CPU slots to sum (1 for a plain map)
    cpu_stride: int


#: What a metric's value may be: a number as stored (bitfields are refused by name).
_INTEGERS = frozenset({LeafKind.INTEGER, LeafKind.ENUM, LeafKind.BOOL})
_AGGREGATES = frozenset({LeafKind.ARRAY, LeafKind.TEXT, LeafKind.STRUCT})


def bind(metric: Metric, info: MapInfo, codecs: tuple[Codec, Codec]) -> Binding:
    """``metric``'s columns in the map ``info`` describes, or a :class:`ConfigError`."""
    key_codec, value_codec = codecs
    percpu = isinstance(value_codec, PerCpuCodec)
    base = value_codec.base if percpu else value_codec
    finder = _Finder(metric, info, key_codec, base)
    value = None
    if metric.aggregate == "sum":
        value = finder.integer(metric.value or "value", metric.place("value"), "value")
    labels, formats = [], []
    for i, label in enumerate(metric.labels):
        column = finder.find(label.field, metric.place(f"labels[{i}]"), f"labels[{i}].field")
        if percpu and not column.in_key:
            finder.fail(metric.place(f"labels[{i}]"), f"labels[{i}].field",
                        f"'{label.field}' is in a per-CPU value; labels come from the key")
        labels.append(column)
        formats.append(_label_format(label, column, finder, metric.place(f"labels[{i}]"), i))
    bucket = None
    if metric.bucket:
        bucket = finder.integer(metric.bucket.field, metric.place("bucket"), "bucket.field")
    return Binding(metric, value, tuple(labels), tuple(formats), bucket,
                   cpus=value_codec.ncpus if percpu else 1,
                   cpu_stride=value_codec.stride if percpu else 0)


class _Finder:
    def __init__(self, metric: Metric, info: MapInfo, key: Codec, value: Codec):
        self.metric, self.info, self.key, self.value = metric, info, key, value

    def fail(self, where: str, key: str, message: str):
        raise ConfigError(f"metric '{self.metric.name}': {key}: {message} ({self.info.label})",
                          obj=where)

    def find(self, path: str, where: str, key: str) -> Column:
        parts = path.split(".")
        in_key = parts[0] == "key"
        if parts[0] in ("key", "value"):
            parts = parts[1:]
        codec = self.key if in_key else self.value
        node = getattr(codec, "node", None)
        if node is None:  # no BTF: only the whole key or value
            if parts:
                self.fail(where, key, f"'{path}': the map has no BTF "
                                      f"{'key' if in_key else 'value'} type, fields cannot be "
                                      f"named (use '{'key' if in_key else 'value'}')")
            return Column(path, in_key, 0, codec.size)
        walked = []
        for part in parts:
            members = dict(m for m in node.members if m[0]) \
                if leaf_kind(node) is LeafKind.STRUCT else {}
            if part not in members:
                what = f"no field '{part}'" if members else f"'{'.'.join(walked) or path}' " \
                    "is not a struct"
                self.fail(where, key, f"'{path}': {what}"
                          + (f" (fields: {', '.join(members)})" if members else ""))
            node = members[part]
            walked.append(part)
        if isinstance(node, Bits):
            self.fail(where, key, f"'{path}' is a bitfield, which cannot be exported")
        start, end = extent(node)
        field = integer_field(node)  # an enum keeps BTF's signedness, as every output does
        return Column(path, in_key, start, end - start, bool(field and field.signed), node)

    def integer(self, path: str, where: str, key: str) -> Column:
        column = self.find(path, where, key)
        node = column.node
        if node is not None and leaf_kind(node) not in _INTEGERS or \
                column.width not in (1, 2, 4, 8):
            kind = type(node).__name__.lower() if node is not None else f"{column.width}-byte"
            self.fail(where, key, f"'{path}' is a {kind}, not a 1, 2, 4 or 8-byte integer")
        return column


def _label_format(label: Label, column: Column, finder: _Finder, where: str, index: int
                  ) -> Callable[[np.ndarray], list[str]]:
    """``rows`` (``count × width`` uint8: the label field of each distinct series) → label
    texts: a decoder, a static value map, or the value as ``dump -o json`` prints it (the
    automatic decoders included: a ``__be16`` port reads ``443``, as ``dump`` shows it)."""
    key = f"labels[{index}]"
    auto = column.node.auto if column.node is not None and not label.values else None
    if label.decoder or auto:
        from ..records import decoders

        try:
            decoder = decoders.get(label.decoder or auto, f"{key}.decoder")
            decoder.check_size(column.width, f"{key}.decoder")
        except InputError as exc:  # names the kinds, or the sizes the kind fits
            finder.fail(where, f"{key}.decoder", f"'{label.field}': {exc.message}")
        return lambda rows: [str(text) for text in decoder.format(rows)]
    if label.values:
        if column.width not in (1, 2, 4, 8) or \
                column.node is not None and leaf_kind(column.node) in _AGGREGATES:
            finder.fail(where, f"{key}.values", f"'{label.field}' is not an integer")
        static = dict(label.values)
        dtype = np.dtype(f"<{'i' if column.signed else 'u'}{column.width}")
        return lambda rows: [static.get(n, str(n))
                             for n in np.ascontiguousarray(rows).view(dtype).reshape(-1).tolist()]
    node = column.node
    if node is None:  # a whole key or value without BTF
        if column.width not in (1, 2, 4, 8):
            finder.fail(where, f"{key}.field", f"'{label.field}' is {column.width} bytes of "
                                               "raw data: name a decoder")
        dtype = np.dtype(f"<u{column.width}")
        return lambda rows: [str(n) for n in
                             np.ascontiguousarray(rows).view(dtype).reshape(-1).tolist()]
    if leaf_kind(node) in (LeafKind.STRUCT, LeafKind.ARRAY):
        finder.fail(where, f"{key}.field", f"'{label.field}' is a {type(node).__name__.lower()}"
                                           ": name a scalar field, or a decoder")
    at_zero = dataclasses.replace(node, offset=0) if not isinstance(node, Array) else \
        type(node)(0, tuple(dataclasses.replace(e, offset=e.offset - node.offset) for e in node.elems))

    def texts(rows: np.ndarray) -> list[str]:
        out = []
        for row, value in zip(rows, layout_values(at_zero, np.ascontiguousarray(rows))):
            if isinstance(value, bool):
                out.append("true" if value else "false")
            elif isinstance(value, list):  # a char array that is not a printable string
                out.append(row.tobytes().hex())
            else:
                out.append(str(value))
        return out
    return texts
