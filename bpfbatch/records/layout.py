"""The layout tree: a BTF type as plain data, the C layout at absolute byte offsets.

:func:`build_node` follows bpftool's ``btf_dumper_do_type`` and yields frozen dataclasses
that say what BTF says and nothing else: where each piece of the record is (``offset``), its
size, signedness, enumerators, elements and members. They hold no behaviour; each job over
the tree lives in its own module and dispatches on the node's type there (:class:`job`), so a
new job is a new module, not a method added to every class:

* :mod:`~bpfbatch.records.values` — Python values of a whole batch, and numpy dtypes;
* :mod:`~bpfbatch.records.encode` — one record's encoder, compiled once per codec, errors
  naming the field's path;
* :mod:`~bpfbatch.records.fill` — a whole batch encoded column by column;
* :mod:`~bpfbatch.records.template` — JSON text as template leaves (bpftool's or typed).

The questions consumers ask of the tree are answered here, documented, so that they need
not test node classes (a few still name one where no question fits yet: a bitfield refused
by the exporter, a decoded or per-CPU node): :func:`leaf_kind` (what a field holds, in the terms the output formats
and readers need), :func:`scalar_type` (the numpy type of a field numpy holds as stored),
:func:`integer_field` (a field as an integer of 1, 2, 4 or 8 bytes), :func:`extent` (the bytes
a node covers), :meth:`Struct.fields` (every field by name, as C names them),
:meth:`Struct.required` (what a load must give), :attr:`Enum.by_name` and the enumerator
tables, and :func:`leaf_columns` (the flat column layout shared by the flat output formats and
the CSV loader).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections import namedtuple
from collections.abc import Callable
from functools import cached_property

from ..btf import INT_BOOL, INT_CHAR, INT_SIGNED, MODIFIERS, Btf, Kind
from .decoders import automatic_kind


class job:  # noqa: N801 - used as a decorator, like functools.singledispatch
    """A function over layout nodes whose implementation is chosen by the node's class, as
    :func:`functools.singledispatch` chooses it for these classes — the first class of the
    node's MRO that has one (subclasses inherit); ``register`` adds a class, also by
    annotation — kept in plain dicts: singledispatch's weak-keyed cache costs a weak
    reference per call, which shows on trees of thousands of nodes (long arrays), and its
    ``register`` imports typing, ~2 ms of every typed dump's start-up."""

    def __init__(self, default: Callable):
        self._registry: dict[type, Callable] = {object: default}
        self._chosen: dict[type, Callable] = {}
        functools.update_wrapper(self, default)

    def register(self, cls, func: Callable | None = None):
        """``@job.register`` on a function whose first parameter is annotated with a node
        class (``Int`` or ``layout.Int``), ``@job.register(cls)``, or
        ``job.register(cls, func)``."""
        if func is None and isinstance(cls, type):
            return lambda f: self.register(cls, f)
        if func is None:
            cls, func = _annotated_class(cls), cls
            if cls is None:
                raise TypeError(f"{func.__qualname__}: its first annotation names no class")
        self._registry[cls] = func
        self._chosen.clear()
        return func

    def dispatch(self, cls: type) -> Callable:
        """The implementation for nodes of class ``cls``."""
        return next(self._registry[base] for base in cls.__mro__ if base in self._registry)

    def __call__(self, node, *args):
        try:
            chosen = self._chosen[node.__class__]
        except KeyError:
            chosen = self._chosen[node.__class__] = self.dispatch(node.__class__)
        return chosen(node, *args)


def _annotated_class(func: Callable) -> type | None:
    """The class that ``func``'s first annotation names (``Int``, ``layout.Int``), looked up
    in ``func``'s module as ``typing.get_type_hints`` would; ``None`` for anything else."""
    annotation = next(iter(func.__annotations__.values()), None)
    if not isinstance(annotation, str) or not annotation.replace(".", "_").isidentifier():
        return annotation if isinstance(annotation, type) else None
    head, *attributes = annotation.split(".")
    named = func.__globals__.get(head)
    for attribute in attributes:
        named = getattr(named, attribute, None)
    return named if isinstance(named, type) else None


# (size, signed) -> numpy spelling of the plain integers.
NP_INT = {(size, signed): ("<i%d" if signed else "<u%d") % size
          for size in (1, 2, 4, 8) for signed in (False, True)}


@dataclasses.dataclass(frozen=True)
class Node:
    """A piece of a type at an absolute byte ``offset`` of the record. ``auto`` is the
    display kind its BTF type names (see :func:`~bpfbatch.records.decoders.automatic_kind`),
    set on struct members by :func:`build_node`; it changes nothing until a caller decodes."""

    offset: int
    auto: str | None = dataclasses.field(default=None, kw_only=True, compare=False,
                                         repr=False)


@dataclasses.dataclass(frozen=True)
class Int(Node):
    """An integer of 1, 2, 4, 8 or 16 bytes (also a pointer: 8 bytes, unsigned)."""

    size: int
    signed: bool
    #: numpy's spelling (``"<u4"``); ``None`` for 16 bytes, which numpy has no int for.
    np_type: str | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "np_type", NP_INT.get((self.size, self.signed)))


@dataclasses.dataclass(frozen=True)
class Bits(Node):
    """``nbits`` bits starting ``shift`` bits into the byte at ``offset`` (bitfields, and
    integers whose width is not 8/16/32/64/128)."""

    shift: int
    nbits: int
    signed: bool

    @property
    def nbytes(self) -> int:
        return (self.shift + self.nbits + 7) // 8


@dataclasses.dataclass(frozen=True)
class Bool(Node):
    """An int with BTF_INT_BOOL encoding, of ``size`` bytes."""

    size: int


@dataclasses.dataclass(frozen=True)
class Char(Node):
    """An int with BTF_INT_CHAR encoding: one character (one byte)."""

    size = 1  # not a field: a char is always one byte


@dataclasses.dataclass(frozen=True)
class Float(Node):
    size: int
    #: numpy's and struct's spelling (``"<d"``); ``None`` for sizes they lack (16).
    code: str | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "code", {2: "<e", 4: "<f", 8: "<d"}.get(self.size))


@dataclasses.dataclass(frozen=True)
class Enum(Node):
    """An enum of 1, 2, 4 or 8 bytes. ``signed`` is BTF's (the kind flag; an enum without it
    but with a negative enumerator, from an older compiler, is signed too): an ``enum x :
    __u8`` holding 200 reads 200 or its enumerator, never -56. ``enumerators`` hold the
    values as BTF stores them (ENUM: s32, ENUM64: u64).

    bpftool 7.1 reads one whatever the sign: the bytes as a signed number, compared with the
    stored values (:attr:`exact_names`)."""

    size: int
    enumerators: tuple[tuple[str, int], ...]
    signed: bool

    @cached_property
    def code(self) -> str:
        """numpy's spelling of the stored integer, with the enum's signedness."""
        return NP_INT[self.size, self.signed]

    @cached_property
    def names(self) -> dict[int, str]:
        """Value (as the field reads with its signedness) → the first enumerator naming it."""
        out: dict[int, str] = {}
        for name, stored in self.enumerators:
            out.setdefault(_as_int(stored, self.size * 8, self.signed), name)
        return out

    @cached_property
    def exact_names(self) -> dict[int, str]:
        """Value → first enumerator, as bpftool 7.1 compares them (see the class doc)."""
        out: dict[int, str] = {}
        for name, stored in self.enumerators:
            out.setdefault(_as_int(stored, 64, True) if self.size == 8 else stored, name)
        return out

    @cached_property
    def by_name(self) -> dict[str, int]:
        """Enumerator → the value the field holds for it."""
        return {name: _as_int(stored, self.size * 8, self.signed)
                for name, stored in self.enumerators}


@dataclasses.dataclass(frozen=True)
class Array(Node):
    elems: tuple[Node, ...]


@dataclasses.dataclass(frozen=True)
class CharArray(Array):
    """``char[N]``: text when its bytes read as text (see
    :func:`~bpfbatch.records.columns.char_array_text`), else the list of its elements."""


@dataclasses.dataclass(frozen=True)
class Struct(Node):
    """A struct or union (``union``). As in C, an anonymous member's fields belong to the
    record that holds it (``v.x`` for ``struct { struct { int x; }; } v``), and an unnamed
    bitfield (padding) is not a field. ``default_zero``: a load may leave fields out (they
    are 0); otherwise every field is required (see :meth:`required`)."""

    size: int
    members: tuple[tuple[str, Node], ...]
    union: bool = False
    default_zero: bool = False

    def fields(self) -> dict[str, Node]:
        """Every field by its name, anonymous members' fields included (they are placed at
        absolute offsets, so each encodes into the record directly)."""
        out: dict[str, Node] = {}
        for name, node in self.members:
            if name:
                out[name] = node
            elif isinstance(node, Struct):
                out.update(node.fields())
        return out

    def required(self) -> list[frozenset[str]]:
        """Groups of field names of which a record must give at least one: each field of a
        struct, any one of a union's (a dump gives all of them)."""
        if self.union:
            return [frozenset(self.fields())] if self.members else []
        groups: list[frozenset[str]] = []
        for name, node in self.members:
            if name:
                groups.append(frozenset({name}))
            elif isinstance(node, Struct):
                groups.extend(node.required())
        return groups


@dataclasses.dataclass(frozen=True)
class Var(Node):
    """A BTF VAR (``.data``/``.bss`` maps): ``{"name": value}``."""

    name: str
    node: Node


@dataclasses.dataclass(frozen=True)
class Datasec(Node):
    """A BTF DATASEC: ``{"section": [var, ...]}``."""

    name: str
    vars: tuple[Node, ...]


@dataclasses.dataclass(frozen=True)
class Unsupported(Node):
    """A kind bpftool cannot print, with its error ``text`` (``fatal``: bpftool stops the
    enclosing aggregates there; ``(unknown)`` is not fatal)."""

    text: bytes
    fatal: bool = True


class LeafKind(enum.Enum):
    """What a node holds, as the formats that print or read it one field at a time (CSV,
    table, Arrow, ``--where``) tell fields apart."""

    INTEGER = "integer"  # ints of any width, bitfields, pointers: a number
    ENUM = "enum"  # an enumerator's name, else the number
    BOOL = "bool"
    CHAR = "char"  # one character
    FLOAT = "float"
    TEXT = "text"  # char[N]: a string when its bytes read as one
    ARRAY = "array"
    STRUCT = "struct"  # structs and unions
    VARIABLE = "variable"  # a BTF VAR
    SECTION = "section"  # a BTF DATASEC
    UNSUPPORTED = "unsupported"  # a kind bpftool cannot print either
    DISPLAY = "display"  # shown through a decoder (registered by records.decoding)


@job
def leaf_kind(node: Node) -> LeafKind:
    """What ``node`` holds (see :class:`LeafKind`). A node kind defined outside this module
    registers its answer with ``leaf_kind.register``."""
    raise TypeError(f"no leaf kind for a {type(node).__name__} node")


for _class, _kind in ((Int, LeafKind.INTEGER), (Bits, LeafKind.INTEGER), (Enum, LeafKind.ENUM),
                      (Bool, LeafKind.BOOL), (Char, LeafKind.CHAR), (Float, LeafKind.FLOAT),
                      (CharArray, LeafKind.TEXT), (Array, LeafKind.ARRAY),
                      (Struct, LeafKind.STRUCT), (Var, LeafKind.VARIABLE),
                      (Datasec, LeafKind.SECTION), (Unsupported, LeafKind.UNSUPPORTED)):
    leaf_kind.register(_class, lambda node, kind=_kind: kind)


def scalar_type(node: Node) -> str | None:
    """numpy's spelling of a field numpy holds exactly as stored — ints of 1 to 8 bytes,
    bools of 1, 2, 4 or 8 bytes (as unsigned ints), 4- and 8-byte floats — else ``None``."""
    if isinstance(node, Int):
        return node.np_type
    if isinstance(node, Bool):
        return NP_INT.get((node.size, False))
    if isinstance(node, Float) and node.code in ("<f", "<d"):
        return node.code
    return None


# collections', not typing's NamedTuple: importing typing costs ~2 ms of start-up
class IntegerField(namedtuple("IntegerField", "offset size signed")):
    """A field read as an integer: ``size`` bytes (1, 2, 4 or 8) at ``offset``."""

    __slots__ = ()
    offset: int
    size: int
    signed: bool


def integer_field(node: Node) -> IntegerField | None:
    """``node`` as an integer of 1, 2, 4 or 8 bytes — an int, an enum (with its
    signedness), a bool or a char (unsigned) — or ``None`` (bitfields, 128-bit ints,
    floats, aggregates): what a comparison in the kernel or a metric can read."""
    if isinstance(node, (Int, Enum)) and node.size in (1, 2, 4, 8):
        return IntegerField(node.offset, node.size, node.signed)
    if isinstance(node, (Bool, Char)) and node.size in (1, 2, 4, 8):
        return IntegerField(node.offset, node.size, False)
    return None


def extent(node: Node) -> tuple[int, int]:
    """The byte range ``[start, end)`` a node covers."""
    if isinstance(node, Array):
        return (node.offset, extent(node.elems[-1])[1]) if node.elems else \
            (node.offset, node.offset)
    if isinstance(node, Bits):
        return node.offset, node.offset + node.nbytes
    return node.offset, node.offset + getattr(node, "size", 1)


def leaf_columns(node: Node, prefix: str):
    """``(name, node)`` of every scalar or array leaf under ``node``: struct members become
    ``prefix.field`` (anonymous members add no name). The column layout shared by the flat
    output formats and the CSV loader, so that what one writes the other reads."""
    if isinstance(node, Struct):
        for name, member in node.members:
            yield from leaf_columns(member, f"{prefix}.{name}" if name else prefix)
    elif isinstance(node, Var):
        yield from leaf_columns(node.node, f"{prefix}.{node.name}")
    else:
        yield prefix, node


def field_range(nbits: int, signed: bool) -> tuple[int, int]:
    """``[lo, hi)`` of an ``nbits``-bit field of this signedness."""
    return (-(1 << (nbits - 1)), 1 << (nbits - 1)) if signed else (0, 1 << nbits)


def build_node(btf: Btf, type_id: int, offset: int = 0, bit: int = 0, *,
               default_zero: bool = False, auto: str | None = None) -> Node:
    """The layout tree of ``type_id`` placed at ``offset`` (+ ``bit`` bits, 0–7), following
    ``btf_dumper_do_type``. ``default_zero``: structs take records that leave fields out
    (see :class:`Struct`); ``auto``: the node's display kind (see :class:`Node`)."""
    t = btf[type_id]
    kind = t.kind
    if kind == Kind.INT:
        return _int_node(t, offset, bit, auto)
    if kind in (Kind.STRUCT, Kind.UNION):
        members = []
        for m in t.members:
            at = offset + m.bit_offset // 8
            if m.bitfield_size:
                node = Bits(at, m.bit_offset % 8, m.bitfield_size, _is_signed(btf, m.type))
            else:
                node = build_node(btf, m.type, at, m.bit_offset % 8, default_zero=default_zero,
                                  auto=_automatic_kind(btf, m.type, m.name))
            members.append((m.name, node))
        return Struct(offset, t.size, tuple(members), union=kind == Kind.UNION,
                      default_zero=default_zero, auto=auto)
    if kind == Kind.ARRAY:
        elem_size = btf.size_of(t.type) if t.nelems else 0
        elems = tuple(build_node(btf, t.type, offset + i * elem_size, default_zero=default_zero)
                      for i in range(t.nelems))
        return (CharArray if _is_char_elem(btf, t) else Array)(offset, elems, auto=auto)
    if kind in (Kind.ENUM, Kind.ENUM64):
        if t.size not in (1, 2, 4, 8):
            return Unsupported(offset, b"", auto=auto)
        signed = t.kind_flag or any(v < 0 for _, v in t.values)
        return Enum(offset, t.size, tuple(t.values), signed, auto=auto)
    if kind == Kind.PTR:
        return Int(offset, 8, False, auto=auto)
    if kind == Kind.UNKN:
        return Unsupported(offset, b"(unknown)", fatal=False, auto=auto)
    if kind == Kind.FWD:
        return Unsupported(offset, b"(fwd-kind-invalid)", auto=auto)
    if kind in (Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT):
        return build_node(btf, btf.resolve(type_id), offset, bit, default_zero=default_zero,
                          auto=auto)
    if kind == Kind.VAR:
        return Var(offset, t.name,
                   build_node(btf, t.type, offset, bit, default_zero=default_zero), auto=auto)
    if kind == Kind.DATASEC:
        return Datasec(offset, t.name,
                       tuple(build_node(btf, vt, offset + voff, default_zero=default_zero)
                             for vt, voff, _ in t.entries), auto=auto)
    if kind == Kind.FLOAT:
        return Float(offset, t.size, auto=auto)
    return Unsupported(offset, b"(unsupported-kind", auto=auto)


def _as_int(value: int, nbits: int, signed: bool) -> int:
    """``value``'s low ``nbits`` bits read with this signedness."""
    bits = value & ((1 << nbits) - 1)
    return bits - (1 << nbits) if signed and bits >> (nbits - 1) else bits


def _automatic_kind(btf: Btf, type_id: int, member: str) -> str | None:
    """The display kind a member's type names: the typedefs it goes through and the struct
    it ends at (``__be16``, ``struct in6_addr``)."""
    typedefs, t = [], btf[type_id]
    while t.kind in (Kind.TYPEDEF, *MODIFIERS):
        if t.kind == Kind.TYPEDEF:
            typedefs.append(t.name)
        t = btf[t.type]
    aggregate = t.kind in (Kind.STRUCT, Kind.UNION)
    return automatic_kind(typedefs=tuple(typedefs), struct=t.name if aggregate else None,
                          member=member, size=t.size if aggregate else 0)


def _int_node(t, offset: int, bit: int, auto: str | None) -> Node:
    signed = bool(t.encoding & INT_SIGNED)
    total = bit + t.int_offset
    if total or t.bits % 8:
        return Bits(offset + total // 8, total % 8, t.bits, signed, auto=auto)
    if t.bits == 128:
        return Int(offset, 16, signed, auto=auto)
    if t.encoding in (0, INT_SIGNED):
        if t.bits in (8, 16, 32, 64):
            return Int(offset, t.bits // 8, signed, auto=auto)
        return Bits(offset, 0, t.bits, signed, auto=auto)
    if t.encoding == INT_CHAR:
        return Char(offset, auto=auto)
    if t.encoding == INT_BOOL:
        return Bool(offset, t.size, auto=auto)
    return Unsupported(offset, b"", auto=auto)  # bpftool: -EINVAL, prints nothing


def _is_signed(btf: Btf, type_id: int) -> bool:
    t = btf[btf.resolve(type_id)]
    return t.kind == Kind.INT and bool(t.encoding & INT_SIGNED)


def _is_char_elem(btf: Btf, array) -> bool:
    """bpftool's ``is_str_array`` static part: modifiers (not typedefs) skipped, a 1-byte
    int that is CHAR-encoded or named ``char``."""
    if not array.nelems:
        return False
    elem = btf[array.type]
    while elem.kind in MODIFIERS:
        elem = btf[elem.type]
    return elem.kind == Kind.INT and elem.size == 1 and (
        elem.encoding == INT_CHAR or elem.name == "char")
