"""Python values and numpy dtypes of a layout tree (:mod:`~bpfbatch.records.layout`).

:func:`values` reads one node from every row of a batch (a ``count × size`` uint8 array, or
the :class:`~.columns.ByteRows` of a small dump) through :mod:`~.columns`, field by field,
and gives the typed values of the value rule (see :mod:`~bpfbatch.records.codec`): ints and
bools as they read with their signedness, enum names (else the number), printable char arrays
as strings, dicts for structs and unions (anonymous members' fields inline, as in C), lists
for arrays, ``None`` for kinds it cannot print. :func:`dtype` is the numpy dtype of a node, ``None`` when numpy cannot hold it
(bitfields, odd floats, data sections).

Both dispatch on the node's type (:class:`~bpfbatch.records.layout.job`); a node kind defined
elsewhere (a decoded field, a per-CPU sum) registers its own implementation with
``values.register``.
"""

from __future__ import annotations

from . import layout
from .._numpy import np
from .columns import any_set, bits, byte_list, char_array_text, raw_bytes, scalar_list

__all__ = ["dtype", "values"]


@layout.job
def values(node: layout.Node, rows: np.ndarray) -> list:
    """Python values of ``node`` in every row of a batch (``count × size`` uint8)."""
    raise TypeError(f"no Python values for a {type(node).__name__} node")


@values.register
def _(node: layout.Int, rows):
    if node.np_type:
        return scalar_list(rows, node.offset, node.np_type)
    return [int.from_bytes(raw, "little", signed=node.signed)
            for raw in raw_bytes(rows, node.offset, node.size)]


@values.register
def _(node: layout.Bits, rows):
    column = bits(rows, node.offset, node.shift, node.nbits)
    if not node.signed:
        return column
    sign, wrap = 1 << (node.nbits - 1), 1 << node.nbits
    return [v - wrap if v & sign else v for v in column]


@values.register
def _(node: layout.Bool, rows):
    return any_set(rows, node.offset, node.size)


@values.register
def _(node: layout.Char, rows):
    return [chr(b) for b in byte_list(rows, node.offset)]


@values.register
def _(node: layout.Float, rows):
    if not node.code:
        return raw_bytes(rows, node.offset, node.size)
    return scalar_list(rows, node.offset, node.code)


@values.register
def _(node: layout.Enum, rows):
    names = node.names
    return [names.get(v, v) for v in scalar_list(rows, node.offset, node.code)]


@values.register
def _array(node: layout.Array, rows):
    if not node.elems:
        return [[] for _ in range(rows.shape[0])]
    return [list(items) for items in zip(*(values(e, rows) for e in node.elems))]


@values.register
def _(node: layout.CharArray, rows):
    out = []
    for i, raw in enumerate(raw_bytes(rows, node.offset, len(node.elems))):
        text = char_array_text(raw, exact=False)
        out.append(_array(node, rows[i:i + 1])[0] if text is None else text)
    return out


@values.register
def _(node: layout.Struct, rows):
    out = [{} for _ in range(rows.shape[0])]
    for name, member in node.members:
        if name:
            for record, value in zip(out, values(member, rows)):
                record[name] = value
        elif isinstance(member, layout.Struct):  # anonymous: its fields are the record's
            for record, value in zip(out, values(member, rows)):
                record.update(value)
    return out


@values.register
def _(node: layout.Var, rows):
    return [{node.name: v} for v in values(node.node, rows)]


@values.register
def _(node: layout.Datasec, rows):
    columns = [values(var, rows) for var in node.vars]
    if not columns:
        return [{node.name: []} for _ in range(rows.shape[0])]
    return [{node.name: list(row)} for row in zip(*columns)]


@values.register
def _(node: layout.Unsupported, rows):
    return [None] * rows.shape[0]


@layout.job
def dtype(node: layout.Node) -> np.dtype | None:
    """numpy dtype of ``node``, or ``None`` when not representable."""
    return None


@dtype.register
def _(node: layout.Int):
    return np.dtype(node.np_type or "V16")


@dtype.register
def _(node: layout.Bool):
    return np.dtype("?") if node.size == 1 else np.dtype(layout.NP_INT[node.size, False])


@dtype.register
def _(node: layout.Char):
    return np.dtype("S1")


@dtype.register
def _(node: layout.Float):
    return np.dtype(node.code) if node.code else None


@dtype.register
def _(node: layout.Enum):
    return np.dtype(node.code)


@dtype.register
def _(node: layout.Array):
    if not node.elems:
        return np.dtype((np.uint8, (0,)))
    base = dtype(node.elems[0])
    return None if base is None else np.dtype((base, (len(node.elems),)))


@dtype.register
def _(node: layout.CharArray):
    return np.dtype(f"S{len(node.elems)}")


@dtype.register
def _(node: layout.Struct):
    names, formats, offsets = [], [], []
    for i, (name, member) in enumerate(node.members):
        dt = dtype(member)
        if dt is None:
            return None
        names.append(name or f"_anon{i}")
        formats.append(dt)
        offsets.append(member.offset - node.offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": node.size})
