"""A whole batch encoded column by column, by the layout tree (:mod:`~bpfbatch.records.layout`).

:func:`fill` writes one node's value of every record of a batch into ``rows`` (``count ×
record size`` uint8) with one numpy column per leaf field. It only decides on the values it
takes as they are (exact ``int``s in range for an integer, ``str``s of the right size for a
char array, dicts with known fields for a struct, ...); every other value flags its record in
``bad`` and stands in as :func:`blank`, and the codec encodes the flagged records again with
:func:`~bpfbatch.records.encode.encoder`, which accepts them (a ``"0x1f"`` string, a float
for a bool, ...) or raises the usual error. So a batch encodes to exactly the bytes, and
fails with exactly the error, of encoding its records one by one. :func:`can_fill` says
whether a tree can be filled at all (bitfields, 128-bit ints and unions cannot).

The three dispatch on the node's type (:class:`~bpfbatch.records.layout.job`); a node kind defined elsewhere registers its own.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

from . import layout
from .._numpy import np
from .columns import store

__all__ = ["blank", "can_fill", "fill", "int_column"]

_INT_TYPES = frozenset({int})
_BOOL_TYPES = frozenset({int, bool})
_NUMBER_TYPES = frozenset({int, float})
_SEQUENCE_TYPES = frozenset({list, tuple})
_U64 = (1 << 64) - 1


def _conform(values: Sequence, ok: Callable[[object], bool], stand_in, bad: np.ndarray) -> list:
    """``values`` with each one failing ``ok`` replaced by ``stand_in`` and its record
    flagged."""
    out = []
    for i, value in enumerate(values):
        if ok(value):
            out.append(value)
        else:
            bad[i] = True
            out.append(stand_in)
    return out


def int_column(values: Sequence, lo: int, hi: int, bad: np.ndarray,
               types: frozenset = _INT_TYPES) -> np.ndarray:
    """``values`` as an integer column (two's complement bits) where each is of ``types``
    (exact ``int`` unless told) in ``[lo, hi)``; the others are flagged (and read as 0)."""
    if len(values) and set(map(type, values)) <= types:
        for dtype in (np.int64, np.uint64):  # a given dtype converts twice as fast
            if dtype is np.uint64 and min(values) < 0:
                break  # numpy 1.x wraps a negative into uint64 (a warning) instead of raising
            try:
                column = np.array(values, dtype=dtype)
            except OverflowError:  # beyond this dtype's range
                continue
            if int(column.min()) >= lo and int(column.max()) < hi:
                return column
            break
    clean = _conform(values, lambda v: type(v) in types and lo <= v < hi, 0, bad)
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


def _put(rows: np.ndarray, offset: int, size: int, column: np.ndarray) -> None:
    """Store an integer column as ``size``-byte little-endian words at ``offset``."""
    store(rows, offset, f"<u{size}", column)


@layout.job
def can_fill(node: layout.Node) -> bool:
    """Whether :func:`fill` takes ``node`` (and everything under it)."""
    return False


@layout.job
def fill(node: layout.Node, rows: np.ndarray, values: Sequence, bad: np.ndarray) -> None:
    """Write ``node``'s value of every record into ``rows`` at once, flagging in ``bad``
    each record whose value is to be encoded on its own (see the module doc)."""
    raise TypeError(f"no batch encoding for a {type(node).__name__} node")


@layout.job
def blank(node: layout.Node):
    """A value :func:`fill` takes as it is, standing in for a flagged record's value."""
    raise TypeError(f"no batch encoding for a {type(node).__name__} node")


@can_fill.register
def _(node: layout.Int):
    return node.np_type is not None  # not 128-bit


@fill.register
def _(node: layout.Int, rows, values, bad):
    _put(rows, node.offset, node.size,
         int_column(values, *layout.field_range(node.size * 8, node.signed), bad))


@can_fill.register
def _(node: layout.Bool):
    return node.size in (1, 2, 4, 8)


@fill.register
def _(node: layout.Bool, rows, values, bad):
    _put(rows, node.offset, node.size, int_column(values, 0, 2, bad, _BOOL_TYPES))


@blank.register
def _(node: layout.Bool):
    return False


@can_fill.register
def _(node: layout.Char):
    return True


@fill.register
def _(node: layout.Char, rows, values, bad):
    if set(map(type, values)) == {str} and set(map(len, values)) == {1}:
        try:
            rows[:, node.offset] = np.frombuffer("".join(values).encode("latin-1"),
                                                 dtype=np.uint8)
            return
        except UnicodeEncodeError:
            pass
    _put(rows, node.offset, 1, int_column(values, *layout.field_range(8, True), bad))


@can_fill.register
def _(node: layout.Float):
    return node.code in ("<f", "<d")  # half floats round and overflow in struct's way


@fill.register
def _(node: layout.Float, rows, values, bad):
    column = _float_column(values, bad)
    if node.code == "<f":
        with np.errstate(over="ignore"):
            narrow = column.astype("<f4")
        bad |= np.isinf(narrow) & np.isfinite(column)  # struct.pack raises there
        column = narrow
    size = column.dtype.itemsize
    rows[:, node.offset:node.offset + size] = column.view(np.uint8).reshape(-1, size)


@blank.register
def _(node: layout.Float):
    return 0.0


@can_fill.register
def _(node: layout.Enum):
    return True


@fill.register
def _(node: layout.Enum, rows, values, bad):
    by_name = node.by_name
    numbers = [by_name.get(v, v) if type(v) is str else v for v in values]
    _put(rows, node.offset, node.size,
         int_column(numbers, *layout.field_range(node.size * 8, node.signed), bad))


@blank.register(layout.Int)
@blank.register(layout.Char)
@blank.register(layout.Enum)
def _(node):
    return 0


@can_fill.register
def _(node: layout.Array):
    return all(can_fill(elem) for elem in node.elems)


@fill.register
def _(node: layout.Array, rows, values, bad):
    n = len(node.elems)
    if not (set(map(type, values)) <= _SEQUENCE_TYPES and set(map(len, values)) <= {n}):
        values = _conform(values, lambda v: type(v) in _SEQUENCE_TYPES and len(v) == n,
                          blank(node), bad)
    columns = list(zip(*values)) if len(values) else [()] * n
    for elem, column in zip(node.elems, columns):
        fill(elem, rows, column, bad)


@blank.register
def _(node: layout.Array):
    return [blank(elem) for elem in node.elems]


@fill.register
def _(node: layout.CharArray, rows, values, bad):
    """Strings only; a record giving the list of elements is encoded on its own."""
    n = len(node.elems)
    if not (set(map(type, values)) <= {str} and "".join(values).isascii()
            and max(map(len, values), default=0) <= n):
        values = _conform(values, lambda v: type(v) is str and v.isascii() and len(v) <= n,
                          "", bad)
    rows[:, node.offset:node.offset + n] = \
        np.array(values, dtype=f"S{n}").view(np.uint8).reshape(-1, n)


@blank.register
def _(node: layout.CharArray):
    return ""


@can_fill.register
def _(node: layout.Struct):
    """Fields (anonymous members' included) that do not overlap: not a union, whose
    members ``encode`` writes over each other in the record's order."""
    fields = node.fields()
    if node.union or not all(can_fill(field) for field in fields.values()):
        return False
    end = node.offset
    for field in sorted(fields.values(), key=lambda n: n.offset):
        if field.offset < end:
            return False
        end = layout.extent(field)[1]
    return True


@fill.register
def _(node: layout.Struct, rows, values, bad):
    fields = node.fields()
    names = tuple(fields)
    columns = None
    if names and set(map(type, values)) == {dict} and set(map(len, values)) == {len(names)}:
        try:  # every record names every field: one C-level pass per field
            columns = [list(map(operator.itemgetter(name), values)) for name in names]
        except KeyError:
            pass
    if columns is None:
        known, partial = frozenset(names), node.default_zero
        values = _conform(values, lambda v: type(v) is dict and known.issuperset(v)
                          and (partial or len(v) == len(known)), {}, bad)
        columns = [[v.get(name, stand_in) for v in values]
                   for name, stand_in in ((name, blank(field)) for name, field in fields.items())]
    for field, column in zip(fields.values(), columns):
        fill(field, rows, column, bad)


@blank.register
def _(node: layout.Struct):
    return {}
