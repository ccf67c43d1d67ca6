"""Columns of values msgspec has typed, written into a batch's rows: the typed JSONL path's
counterpart of :func:`~bpfbatch.records.fill.fill`.

The general fill takes whatever ``json`` made of the text, so each column is first scanned
for its Python types (a ``true`` must not pass for 1), converted, then range-checked. The
values here come from msgspec decoding against types compiled from the same layout
(:mod:`~bpfbatch.formats.typedjson`): an integer is an exact ``int``, an array a tuple of
the right length. What is left to check of an integer column is its range, and
``array.array`` checks it while it converts the column, in one C pass (an ``OverflowError``
for a value beyond the field's width or signedness). Integers, enums and arrays of
integers — most of a typical record — are written that way; every other leaf goes through
the general fill.

:func:`write_column` returns ``False`` when a value is not taken as it is (out of range, a
display text its decoder does not parse at once, ...): the typed path then declines the
block, and the general reader accepts it or names the error, as it always has.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from . import layout
from .._numpy import np
from .columns import int_words
from .fill import fill

__all__ = ["write_column"]

def _write_ints(rows: np.ndarray, offset: int, width: int, size: int, signed: bool,
                column: Sequence[int]) -> bool:
    """Store ``column`` (exact ints, ``width // size`` of them a row) as ``size``-byte
    little-endian words from ``offset`` of every row; ``False`` when one does not fit."""
    try:
        words = int_words(column, size, signed)
    except OverflowError:
        return False
    rows[:, offset:offset + width] = np.frombuffer(words, dtype=np.uint8).reshape(-1, width)
    return True


@layout.job
def write_column(node: layout.Node, rows: np.ndarray, column: Sequence) -> bool:
    """Write ``node``'s value of every record (msgspec-typed, see the module doc) into
    ``rows``; ``False`` when the block is to be declined. Kinds without a typed writer take
    the general fill, whose flags decline it."""
    bad = np.zeros(len(column), dtype=bool)
    fill(node, rows, column, bad)
    return not bad.any()


@write_column.register
def _(node: layout.Int, rows, column):
    if node.np_type is None:  # 128 bits: the general fill (which refuses it)
        return write_column.dispatch(layout.Node)(node, rows, column)
    return _write_ints(rows, node.offset, node.size, node.size, node.signed, column)


@write_column.register
def _(node: layout.Enum, rows, column):
    """Enumerator names (msgspec took only the enum's own) become their numbers."""
    return _write_ints(rows, node.offset, node.size, node.size, node.signed,
                       list(map(node.by_name.get, column, column)))


@write_column.register
def _(node: layout.Array, rows, column):
    """An array of plain integers (tuples of its length): all its elements at once. A
    ``char[N]`` is a string (or the general fill's list of characters)."""
    elem = node.elems[0] if node.elems else None
    if isinstance(node, layout.CharArray) or type(elem) is not layout.Int \
            or elem.np_type is None:
        return write_column.dispatch(layout.Node)(node, rows, column)
    return _write_ints(rows, node.offset, len(node.elems) * elem.size, elem.size, elem.signed,
                       list(itertools.chain.from_iterable(column)))
