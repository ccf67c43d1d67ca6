"""``--sum``: a per-CPU value shown as one value, each integer field summed over the CPUs.

What bcc's ``PerCpuHash.sum()`` gives a tool, for every output format: :func:`summed` turns a
:class:`~bpfbatch.records.codec.PerCpuCodec` into a codec that reads the same per-CPU bytes
and shows ``{"key": K, "value": V}`` with V's integers added up exactly (Python integers: a
sum may exceed the field's width, it never wraps). Counters are what is summed; a value with
a field that has no meaningful sum (an enum, a string, a float, a decoded address or age) is
refused, naming the field.
"""

from __future__ import annotations

import dataclasses

from .._numpy import np
from ..errors import InputError
from .codec import BtfCodec, Codec, PerCpuCodec
from .columns import scalars
from .jsontext import Leaf
from .layout import Int, LeafKind, Node, Struct, field_range, leaf_columns, leaf_kind
from .template import emit
from .values import values as layout_values

__all__ = ["Summed", "Totals", "summed"]


@dataclasses.dataclass(frozen=True)
class Summed(Node):
    """An integer field added up over ``ncpus`` slots ``stride`` bytes apart (``inner``: the
    field as one CPU's slot holds it, an ``Int`` or ``Bits``)."""

    inner: Node
    ncpus: int
    stride: int

    def sums64(self, rows, where, why: str) -> np.ndarray:
        """The exact sums over ``rows`` in an ``int64`` column (a signed field) or
        ``uint64``; a sum past that width is refused, not wrapped: an :class:`InputError`
        naming ``where(row)``, ``why`` saying what needs 64 bits. Integers of up to 8 bytes
        are added in numpy (:func:`_sums64`), others (bitfields, 128 bits) in Python."""
        signed = self.inner.signed
        if isinstance(self.inner, Int) and self.inner.np_type is not None:
            slots = np.stack([scalars(rows, cpu * self.stride + self.inner.offset,
                                      self.inner.np_type) for cpu in range(self.ncpus)])
            sums, fits = _sums64(slots)
            if fits.all():
                return sums
            bad = int(np.flatnonzero(~fits)[0])
            total = sum(int(v) for v in slots[:, bad])
        else:
            exact = layout_values(self, rows)
            low, high = field_range(64, signed)
            bad = next((i for i, total in enumerate(exact) if not low <= total < high), None)
            if bad is None:
                return np.array(exact, np.int64 if signed else np.uint64)
            total = exact[bad]
        raise InputError(f"its sum {total} does not fit {'s' if signed else 'u'}64: {why}",
                         obj=where(bad))


@leaf_kind.register
def _(node: Summed):
    return LeafKind.INTEGER


@layout_values.register
def _(node: Summed, rows):
    total = layout_values(node.inner, rows)
    for cpu in range(1, node.ncpus):
        slot = layout_values(node.inner, rows[:, cpu * node.stride:])
        total = [a + b for a, b in zip(total, slot)]
    return total


@emit.register
def _(node: Summed, out, exact):
    out.leaf(_SumLeaf(node))
    return True


class _SumLeaf(Leaf):
    placeholder = b"%d"

    def __init__(self, node: Summed):
        super().__init__(node.offset)
        self.node = node

    def column(self, rows):
        return layout_values(self.node, rows)


def summed(codec: Codec) -> Codec:
    """A codec showing ``codec``'s per-CPU values summed (see the module doc); an
    :class:`InputError` naming ``--sum`` when the map is not per-CPU or a field cannot be
    summed."""
    if not isinstance(codec, PerCpuCodec):
        raise InputError("the map is not per-CPU: there is nothing to sum", obj="--sum")
    base = codec.base
    if not isinstance(base, BtfCodec):
        raise InputError("the map has no BTF value type: its fields are unknown", obj="--sum")
    # it reads the whole per-CPU record; no dtype, no batch encoding: a sum is only shown
    return base.with_node(_sum_node(base.node, "value", codec.ncpus, codec.stride),
                          size=codec.size)


def _sum_node(node: Node, path: str, ncpus: int, stride: int) -> Node:
    if leaf_kind(node) is LeafKind.INTEGER:
        return Summed(node.offset, node, ncpus, stride)
    if leaf_kind(node) is LeafKind.STRUCT:
        return dataclasses.replace(node, members=tuple(
            (name, _sum_node(member, f"{path}.{name}" if name else path, ncpus, stride))
            for name, member in node.members))
    kind = type(node).__name__.lower()
    raise InputError(f"field '{path}' ({kind}) cannot be summed: only integers are",
                     obj="--sum")


def _sums64(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column of ``slots`` (``(ncpus, n)``, integers of up to 8 bytes) summed exactly:
    ``(sums, fits)``, the sums as ``int64`` (signed slots) or ``uint64`` and whether each
    fits that width (where it does not, its sum is not meaningful). Narrower integers cannot
    overflow 64 bits over fewer than 2^31 CPUs; 8-byte ones are added as their high and low
    32-bit halves, each sum exact in 64 bits, then joined."""
    signed = slots.dtype.kind == "i"
    if slots.dtype.itemsize < 8:
        return slots.astype(np.int64 if signed else np.uint64).sum(axis=0), \
            np.ones(slots.shape[1], bool)
    bits, low32 = slots.view(np.uint64), np.uint64(0xFFFFFFFF)
    low = (bits & low32).sum(axis=0)  # < 2^32 per CPU
    high = ((slots >> 32) if signed else (bits >> np.uint64(32))).sum(axis=0)
    high = high + (low >> np.uint64(32)).astype(high.dtype)
    low &= low32
    if signed:
        fits = (high >= -(1 << 31)) & (high < (1 << 31))
        return np.where(fits, high, 0) * (1 << 32) + low.astype(np.int64), fits
    fits = high < np.uint64(1 << 32)
    return (high << np.uint64(32)) | low, fits


class Totals:
    """A per-CPU value's sums as records of their own, which compare by their bytes (``diff
    --sum``): each integer field an 8-byte integer (signed if the field is) holding its exact
    sum over the CPUs, the fields in layout order under the value's own names. ``codec``
    shows and reads those records, so a file that ``dump --sum`` wrote reads into them;
    :meth:`rows` makes them from a per-CPU map's value rows. A sum past 64 bits has no such
    record and is refused, as Arrow's columns refuse it."""

    def __init__(self, codec: Codec):
        shown = summed(codec)
        self._sums = [(path, node) for path, node in leaf_columns(shown.node, "value")]
        slots = iter(range(0, 8 * len(self._sums), 8))
        self.codec = shown.with_node(_totals_node(shown.node, slots), size=8 * len(self._sums))

    def rows(self, per_cpu: np.ndarray, where) -> np.ndarray:
        """The totals of each of the ``(n, ncpus × stride)`` per-CPU value rows, ``(n,
        8 × fields)`` uint8; ``where(i)`` names row ``i`` in the error of a sum that does not
        fit."""
        out = np.empty((len(per_cpu), self.codec.size), np.uint8)
        for slot, (path, node) in enumerate(self._sums):
            column = node.sums64(per_cpu, lambda row, path=path: f"{where(row)}: {path}",
                                 "--sum compares sums of up to 64 bits")
            out[:, 8 * slot:8 * slot + 8] = column.view(np.uint8).reshape(-1, 8)
        return out


def _totals_node(node: Node, slots) -> Node:
    """``node`` (a summed value's tree) with each sum an 8-byte integer in the next slot."""
    if isinstance(node, Summed):
        return Int(next(slots), 8, node.inner.signed)
    members = tuple((name, _totals_node(member, slots)) for name, member in node.members)
    offsets = [leaf.offset for _, leaf in leaf_columns(Struct(0, 0, members), "")]
    start = offsets[0] if offsets else 0
    return dataclasses.replace(node, offset=start, members=members,
                               size=8 * len(offsets), union=False)
