"""Records numpy cannot view as stored, copied into structured arrays named like the BTF
fields.

:meth:`~bpfbatch.records.codec.Codec.array` views a batch in place when the layout has a
numpy dtype (:func:`~bpfbatch.records.values.dtype`). A bitfield has none, nor has a field
numpy holds no type for (a 128-bit float), and such a record used to be bare ``uint8`` rows
although every other output names its fields. :func:`unpacked` copies those records into an
array with the same field names instead: a bitfield holds its value in the smallest integer
of its signedness that fits it, a field numpy cannot hold is its bytes (``uint8 × size``), a
union's members each get a slot of their own (a copy need not overlap them), and what has
no size (a kind bpftool cannot print) is left out.
"""

from __future__ import annotations

from . import layout
from .._numpy import np
from .values import dtype, values

__all__ = ["unpacked", "unpacked_dtype"]


@layout.job
def unpacked_dtype(node: layout.Node) -> np.dtype | None:
    """The dtype of ``node`` in an unpacked record (``None``: left out)."""
    dt = dtype(node)
    if dt is not None:
        return dt
    size = getattr(node, "size", None)
    return None if size is None else np.dtype((np.uint8, (size,)))


@unpacked_dtype.register
def _(node: layout.Bits):
    for size in (1, 2, 4, 8):
        if node.nbits <= 8 * size:
            return np.dtype(layout.NP_INT[size, node.signed])
    return np.dtype((np.uint8, (node.nbytes,)))


@unpacked_dtype.register
def _(node: layout.Array):
    whole = dtype(node)
    if whole is not None:  # a char[N] stays bytes (S{N}), as numpy views it
        return whole
    elem = unpacked_dtype(node.elems[0])
    return None if elem is None else np.dtype((elem, (len(node.elems),)))


@unpacked_dtype.register
def _(node: layout.Struct):
    dt = dtype(node)
    if dt is not None:
        return dt
    fields = [(name or f"_anon{i}", unpacked_dtype(member))
              for i, (name, member) in enumerate(node.members)]
    return np.dtype([(name, dt) for name, dt in fields if dt is not None])


@layout.job
def _copy(node: layout.Node, rows: np.ndarray, out: np.ndarray) -> None:
    """``node``'s field of every row of ``rows`` (``count × size`` uint8) into ``out``, the
    field's column of the unpacked array: the stored bytes, viewed as its dtype."""
    width = out.dtype.itemsize * int(np.prod(out.shape[1:]))  # a subarray is out's own axes
    raw = np.ascontiguousarray(rows[:, node.offset:node.offset + width])
    out[...] = raw.view(out.dtype).reshape(out.shape)


@_copy.register
def _(node: layout.Bits, rows, out):
    if out.dtype.fields is None and out.dtype.kind in "iu":
        out[...] = np.array(values(node, rows), dtype=out.dtype)
    else:
        _copy.dispatch(layout.Node)(node, rows, out)


@_copy.register
def _(node: layout.Array, rows, out):
    if dtype(node) is not None:
        return _copy.dispatch(layout.Node)(node, rows, out)
    for i, elem in enumerate(node.elems):
        _copy(elem, rows, out[:, i])


@_copy.register
def _(node: layout.Struct, rows, out):
    if dtype(node) is not None:
        return _copy.dispatch(layout.Node)(node, rows, out)
    for i, (name, member) in enumerate(node.members):
        name = name or f"_anon{i}"
        if name in out.dtype.names:
            _copy(member, rows, out[name])


def unpacked(node: layout.Node, rows: np.ndarray) -> np.ndarray:
    """The records whose bytes are ``rows`` (``count × size`` uint8) as an array of
    :func:`unpacked_dtype`."""
    out = np.zeros(len(rows), dtype=unpacked_dtype(node))
    _copy(node, rows, out)
    return out
