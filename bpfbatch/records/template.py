"""The JSON text of a layout tree (:mod:`~bpfbatch.records.layout`) as a record template.

:func:`emit` appends a node's text to a :class:`~bpfbatch.records.jsontext.RecordText`:
literals for the structure, :class:`~bpfbatch.records.jsontext.Leaf` columns for the values,
so a whole batch renders with one ``%`` (see :mod:`~bpfbatch.records.jsontext`). Two modes:
typed (the value rule, see :mod:`~bpfbatch.records.codec`) and ``exact``, bpftool 7.1's
``btf_dumper`` byte for byte, where a kind bpftool cannot print gives its error text and ends
the enclosing aggregates (:func:`emit` returns ``False`` there).

It dispatches on the node's type (:class:`~bpfbatch.records.layout.job`); a node kind defined elsewhere registers its own text with
``emit.register``.
"""

from __future__ import annotations


from . import layout
from .jsontext import (
    BoolLeaf,
    CharLeaf,
    EnumLeaf,
    FloatLeaf,
    HexIntLeaf,
    IntLeaf,
    RecordText,
    StrLeaf,
    json_string,
)

__all__ = ["emit", "record_text"]


def record_text(node: layout.Node, exact: bool) -> RecordText:
    """The template of a whole record whose type is ``node``; its ``complete`` says whether
    bpftool printed it to the end."""
    out = RecordText()
    out.complete = emit(node, out, exact)
    return out


@layout.job
def emit(node: layout.Node, out: RecordText, exact: bool) -> bool:
    """Append ``node``'s JSON text to ``out``; ``False`` when bpftool would stop there."""
    raise TypeError(f"no JSON text for a {type(node).__name__} node")


def _emit_list(out: RecordText, nodes, exact: bool) -> bool:
    """Comma-separated nodes; stops after the first one bpftool cannot print."""
    for i, node in enumerate(nodes):
        if i:
            out.text(b",")
        if not emit(node, out, exact):
            return False
    return True


@emit.register
def _(node: layout.Int, out, exact):
    if node.np_type:
        out.leaf(IntLeaf(node.offset, node.np_type))
    else:
        out.leaf(HexIntLeaf(node.offset, 0, node.size * 8))
    return True


@emit.register
def _(node: layout.Bits, out, exact):
    out.leaf(HexIntLeaf(node.offset, node.shift, node.nbits))
    return True


@emit.register
def _(node: layout.Bool, out, exact):
    out.leaf(BoolLeaf(node.offset, 1 if exact else node.size))  # bpftool: *(bool *)data
    return True


@emit.register
def _(node: layout.Char, out, exact):
    out.leaf(CharLeaf(node.offset, exact))
    return True


@emit.register
def _(node: layout.Float, out, exact):
    if exact:
        out.text(b"(unsupported-kind")  # bpftool's btf_dumper has no FLOAT case
        return False
    if node.code:
        out.leaf(FloatLeaf(node.offset, node.code))
    else:
        out.text(b"null")  # e.g. a 16-byte long double
    return True


@emit.register
def _(node: layout.Enum, out, exact):
    if exact:  # bpftool 7.1 reads the bytes signed whatever the enum's sign
        names = {value: json_string(name, True) for value, name in node.exact_names.items()}
        out.leaf(EnumLeaf(node.offset, layout.NP_INT[node.size, True], names))
    else:
        names = {value: json_string(name) for value, name in node.names.items()}
        out.leaf(EnumLeaf(node.offset, node.code, names))
    return True


@emit.register
def _array(node: layout.Array, out, exact):
    out.text(b"[")
    ok = _emit_list(out, node.elems, exact)
    out.text(b"]")
    return ok


@emit.register
def _(node: layout.CharArray, out, exact):
    """A string when its bytes read as one, else the list of its elements (each row
    decides, so the list is a template of its own, read from offset 0)."""
    elems = RecordText()
    _array(node, elems, exact)
    out.leaf(StrLeaf(node.offset, len(node.elems), elems.shifted(-node.offset), exact))
    return True


@emit.register
def _(node: layout.Struct, out, exact):
    out.text(b"{")
    ok = _emit_members(node, out, exact, first=True)[0]
    out.text(b"}")
    return ok


def _emit_members(node: layout.Struct, out: RecordText, exact: bool,
                  first: bool) -> tuple[bool, bool]:
    """``(complete, first)``: the members as ``"name":value`` pairs; in the typed output an
    anonymous member's inline and an unnamed bitfield (padding) left out, while the exact
    output keeps bpftool's ``"":`` keys."""
    for name, member in node.members:
        if not exact and not name:
            if isinstance(member, layout.Struct):
                ok, first = _emit_members(member, out, exact, first)
                if not ok:
                    return False, first
            continue  # an unnamed bitfield: padding
        out.text((b"" if first else b",") + json_string(name, exact) + b":")
        first = False
        if not emit(member, out, exact):
            return False, first
    return True, first


@emit.register
def _(node: layout.Var, out, exact):
    out.text(b"{" + json_string(node.name, exact) + b":")
    ok = emit(node.node, out, exact)
    out.text(b"}")
    return ok


@emit.register
def _(node: layout.Datasec, out, exact):
    out.text(b"{" + json_string(node.name, exact) + b":[")
    ok = _emit_list(out, node.vars, exact)
    out.text(b"]}")
    return ok


@emit.register
def _(node: layout.Unsupported, out, exact):
    if not exact:  # the typed JSON stays valid JSON
        out.text(b"null")
        return True
    out.text(node.text)
    return not node.fatal
