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

from ..errors import InputError
from .codec import BtfCodec, Codec, PerCpuCodec
from .jsontext import Leaf
from .layout import LeafKind, Node, leaf_kind
from .template import emit
from .values import values as layout_values

__all__ = ["Summed", "summed"]


@dataclasses.dataclass(frozen=True)
class Summed(Node):
    """An integer field added up over ``ncpus`` slots ``stride`` bytes apart (``inner``: the
    field as one CPU's slot holds it, an ``Int`` or ``Bits``)."""

    inner: Node
    ncpus: int
    stride: int


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
