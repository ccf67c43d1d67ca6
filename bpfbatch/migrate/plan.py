"""The plan of a migration: two layout trees matched by field name, as a list of operations.

:func:`side_plan` walks the target's tree (:mod:`bpfbatch.records.layout`) and finds, for each
field, the source field of the same name (or the one ``--rename OLD=NEW`` names), through
nested structs, unions and arrays; each pair of leaves becomes one operation of the
conversion, with the rule it follows:

* integers (bitfields, bools, chars and enums read as numbers too) are widened with the
  source's signedness (sign- or zero-extended), and narrowed — a smaller width, a change of
  signedness — only when every value fits (checked when the values are there);
* an enum into an enum goes by enumerator name: a value no source enumerator names, or whose
  name the target lacks, is an error;
* arrays are matched element by element: a longer target gets zeros, a shorter one only
  when the elements it cuts are empty (all zero bytes; for a ``char[N]``: nothing of the
  string is cut); ``float`` widens to ``double``, narrows only when every value survives;
* a union goes through its first member both sides name (C's rule: a union is initialised
  by its first member); a subtree whose layout did not change is one copy of its bytes;
* a target field with no source is zero, or the value ``--set FIELD=VALUE`` gives it; a
  source field no target field takes is listed as removed.

A pair of fields of kinds no rule converts (a struct into an integer) is an error naming
both, before anything is read. The plan is plain data: :mod:`.convert` runs it over whole
batches, and :func:`describe` prints it (``migrate --plan``).
"""

from __future__ import annotations

import dataclasses

from ..errors import InputError
from ..records import layout
from ..records.layout import (
    Array,
    Bits,
    Bool,
    Char,
    CharArray,
    Enum,
    Float,
    Int,
    Node,
    Struct,
)

__all__ = ["Bytes", "Empty", "Enums", "Field", "Floats", "Ints", "SidePlan", "describe",
           "find_field", "side_plan", "type_text"]


@dataclasses.dataclass(frozen=True)
class IntAt:
    """An integer stored at ``offset``: ``size`` bytes (1, 2, 4, 8), or ``nbits`` bits
    ``shift`` bits into it (a bitfield: then ``size`` is the bytes it touches)."""

    offset: int
    size: int
    signed: bool
    shift: int = 0
    nbits: int | None = None

    @property
    def bits(self) -> int:
        return self.nbits if self.nbits is not None else self.size * 8


# -- operations --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Bytes:
    """Copy ``size`` bytes as they are (a field whose layout did not change)."""

    src: int
    dst: int
    size: int


@dataclasses.dataclass(frozen=True)
class Ints:
    """``count`` integers ``src_stride``/``dst_stride`` bytes apart (an array's elements, or
    one), converted by value: widened with the source's signedness, checked to fit."""

    src: IntAt
    dst: IntAt
    count: int = 1
    src_stride: int = 0
    dst_stride: int = 0


@dataclasses.dataclass(frozen=True)
class Enums:
    """An enum into an enum, by enumerator name."""

    src: IntAt
    dst: IntAt
    src_enum: Enum
    dst_enum: Enum


@dataclasses.dataclass(frozen=True)
class Floats:
    """A float into a float of another width (a narrowing is checked to be exact)."""

    src: int
    src_code: str
    dst: int
    dst_code: str


@dataclasses.dataclass(frozen=True)
class Empty:
    """Bytes the target has no room for: every entry must have them all zero."""

    src: int
    size: int


@dataclasses.dataclass(frozen=True)
class Field:
    """One line of the plan: the target field, where it comes from and by which rule.
    ``ops`` are its operations (none: zero or set), ``path`` names it in errors."""

    path: str
    type: str
    source: str | None
    source_type: str | None
    rule: str
    ops: tuple = ()


@dataclasses.dataclass
class SidePlan:
    """The plan of one side (``key`` or ``value``): its fields in target order, the source
    fields nothing takes, the source fields each ``--rename`` consumed."""

    side: str
    fields: list[Field]
    removed: list[str]
    renamed: set[str]

    @property
    def ops(self) -> list[tuple[Field, object]]:
        return [(field, op) for field in self.fields for op in field.ops]

    @property
    def whole_copy(self) -> bool:
        """Whether the target is the source's bytes unchanged (one copy of each row)."""
        return len(self.fields) == 1 and self.fields[0].rule == "same layout" and \
            self.fields[0].path == self.side


def type_text(node: Node) -> str:
    """A short C-like spelling of a node's type for the plan (``u16``, ``s3:bits``,
    ``char[16]``, ``enum32``, ``struct``)."""
    if isinstance(node, Int):
        return f"{'s' if node.signed else 'u'}{node.size * 8}"
    if isinstance(node, Bits):
        return f"{'s' if node.signed else 'u'}{node.nbits}:bits"
    if isinstance(node, Bool):
        return "bool"
    if isinstance(node, Char):
        return "char"
    if isinstance(node, Float):
        return {2: "half", 4: "float", 8: "double"}.get(node.size, f"float{node.size * 8}")
    if isinstance(node, Enum):
        return f"enum{node.size * 8}"
    if isinstance(node, CharArray):
        return f"char[{len(node.elems)}]"
    if isinstance(node, Array):
        return f"{type_text(node.elems[0]) if node.elems else 'void'}[{len(node.elems)}]"
    if isinstance(node, Struct):
        return "union" if node.union else "struct"
    return type(node).__name__.lower()


def _shape(node: Node, base: int):
    """What a node's layout is, offsets relative to ``base``: equal shapes hold the same
    bytes for the same values (the field names included: a renamed field is a change)."""
    at = node.offset - base
    if isinstance(node, Struct):
        return ("struct", at, node.size, node.union,
                tuple((name, _shape(member, base)) for name, member in node.members))
    if isinstance(node, Array):
        return (type(node).__name__, at, tuple(_shape(e, base) for e in node.elems))
    fields = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)
              if f.name not in ("offset", "auto")}
    return (type(node).__name__, at, tuple(sorted(fields.items(), key=lambda kv: kv[0])))


def _integer(node: Node) -> IntAt | None:
    """``node`` read as an integer, or ``None`` (floats, aggregates, 128-bit ints)."""
    if isinstance(node, Bits):
        return IntAt(node.offset, node.nbytes, node.signed, node.shift, node.nbits)
    found = layout.integer_field(node)
    return None if found is None else IntAt(found.offset, found.size, found.signed)


def _size(node: Node) -> int:
    start, end = layout.extent(node)
    return end - start


class _Matcher:
    """One side's walk: ``renames`` maps a target path to the source path it takes;
    ``sets`` the target paths given a value; ``summed`` reads per-CPU integers summed."""

    def __init__(self, side: str, src: Node, renames: dict[str, str], sets: set[str],
                 summed: bool):
        self.side, self.src, self.renames, self.sets = side, src, renames, sets
        self.summed = summed
        self.fields: list[Field] = []
        self.consumed: set[str] = set()  # source paths some target field takes
        self.renamed: set[str] = set()

    def source_path(self, path: str) -> str:
        """The source path a target path comes from: itself, or through the rename of it
        or of the aggregate holding it."""
        for new, old in self.renames.items():
            if path == new or path.startswith(new + ".") or path.startswith(new + "["):
                self.renamed.add(new)
                return old + path[len(new):]
        return path

    def add(self, dst: Node, path: str, src: Node | None, src_path: str | None, rule: str,
            ops=()) -> None:
        self.fields.append(Field(path, type_text(dst), src_path,
                                 None if src is None else type_text(src), rule, tuple(ops)))

    def match(self, dst: Node, path: str, src: Node | None, src_path: str) -> None:
        if path in self.sets:
            self.add(dst, path, None, None, "set")
            self._consume(src, src_path)
            return
        if src is None:
            self.add(dst, path, None, None, "new: zero")
            return
        self.consumed.add(src_path)
        if not self.summed and not self._named_under(path) and type(dst) is type(src) and \
                _shape(dst, dst.offset) == _shape(src, src.offset) and _size(dst) == _size(src):
            self.add(dst, path, src, src_path, "same layout" if path == src_path else "renamed",
                     [Bytes(src.offset, dst.offset, _size(dst))])
            self._consume(src, src_path)
            return
        if isinstance(dst, Struct) and isinstance(src, Struct):
            self._struct(dst, path, src, src_path)
        elif isinstance(dst, Array) and isinstance(src, Array):
            self._array(dst, path, src, src_path)
        else:
            self._leaf(dst, path, src, src_path)

    def _named_under(self, path: str) -> bool:
        """Whether a ``--set`` or ``--rename`` names a field inside ``path``: then it is not
        copied whole even when its layout did not change."""
        return any(p.startswith(path + ".") or p.startswith(path + "[")
                   for p in (*self.sets, *self.renames))

    def _consume(self, src: Node | None, src_path: str) -> None:
        """Mark every field under ``src`` as taken."""
        if src is None:
            return
        self.consumed.add(src_path)
        if isinstance(src, Struct):
            for name, member in src.fields().items():
                self._consume(member, f"{src_path}.{name}")

    def _struct(self, dst: Struct, path: str, src: Struct, src_path: str) -> None:
        if dst.union != src.union:
            raise _mismatch(path, dst, src_path, src)
        src_fields = src.fields()
        dst_fields = dst.fields()
        if dst.union:  # through the first member both name; the rest share its bytes
            for name, member in dst_fields.items():
                sub = f"{path}.{name}"
                origin = self.source_path(sub)
                head, _, leaf = origin.rpartition(".")
                if head == src_path and leaf in src_fields:
                    self.match(member, sub, src_fields[leaf], origin)
                    for other in src_fields:  # the union's other members: the same bytes
                        self._consume(src_fields[other], f"{src_path}.{other}")
                    return
            self.add(dst, path, src, src_path, "union: no member in common, zero")
            return
        for name, member in dst_fields.items():
            sub = f"{path}.{name}"
            origin = self.source_path(sub)
            head, _, leaf = origin.rpartition(".")
            found = src_fields.get(leaf) if head == src_path else \
                find_field(self.src, origin, self.side)  # renamed from another aggregate
            self.match(member, sub, found, origin)

    def _array(self, dst: Array, path: str, src: Array, src_path: str) -> None:
        n, m = len(dst.elems), len(src.elems)
        common = min(n, m)
        first_dst = dst.elems[0] if dst.elems else None
        first_src = src.elems[0] if src.elems else None
        ops: list = []
        rule = f"{m} → {n} elements" if n != m else "elements"
        scalar_dst = _integer(first_dst) if first_dst is not None else None
        scalar_src = _integer(first_src) if first_src is not None else None
        if self.summed and isinstance(src, CharArray):
            raise _no_sum(src, src_path)
        if common and scalar_dst and scalar_src and not isinstance(first_dst, (Enum, Bits)) \
                and not isinstance(first_src, (Enum, Bits)) \
                and not (self.summed and not isinstance(first_src, Int)):
            ops.append(Ints(scalar_src, scalar_dst, common, _size(first_src), _size(first_dst)))
            rule += ", " + _int_rule(scalar_src, scalar_dst, self.summed)
        elif common:
            for i in range(common):
                self.match(dst.elems[i], f"{path}[{i}]", src.elems[i], f"{src_path}[{i}]")
        if m > n:
            start = layout.extent(src.elems[n])[0]
            ops.append(Empty(start, layout.extent(src)[1] - start))
            rule += ", cut elements must be empty"
        if ops or m != n:
            self.add(dst, path, src, src_path, rule, ops)

    def _leaf(self, dst: Node, path: str, src: Node, src_path: str) -> None:
        if isinstance(dst, Enum) and isinstance(src, Enum):
            if self.summed:
                raise _no_sum(src, src_path)
            self.add(dst, path, src, src_path, "enum by name",
                     [Enums(_integer(src), _integer(dst), src, dst)])
            return
        src_int, dst_int = _integer(src), _integer(dst)
        if src_int is not None and dst_int is not None and not isinstance(src, Char) \
                and not isinstance(dst, Char) and not (self.summed and isinstance(src, Bool)):
            self.add(dst, path, src, src_path, _int_rule(src_int, dst_int, self.summed),
                     [Ints(src_int, dst_int)])
            return
        if self.summed:
            raise _no_sum(src, src_path)
        if isinstance(dst, Float) and isinstance(src, Float) and dst.code and src.code:
            rule = "widened" if dst.size > src.size else "narrowed (checked: exact)"
            self.add(dst, path, src, src_path, rule,
                     [Floats(src.offset, src.code, dst.offset, dst.code)])
            return
        if type(dst) is type(src) and _size(dst) == _size(src):
            self.add(dst, path, src, src_path, "copied",
                     [Bytes(src.offset, dst.offset, _size(dst))])
            return
        raise _mismatch(path, dst, src_path, src)


def _int_rule(src: IntAt, dst: IntAt, summed: bool) -> str:
    total = "summed over CPUs, " if summed else ""
    if summed:
        return total + "checked to fit"
    if (src.bits, src.signed) == (dst.bits, dst.signed):
        return "copied"
    if src.signed == dst.signed and dst.bits > src.bits or not src.signed and dst.bits > src.bits:
        return f"widened ({'sign' if src.signed else 'zero'}-extended)"
    return "narrowed (checked: every value must fit)"


def _no_sum(src: Node, src_path: str) -> InputError:
    return InputError(f"a {type_text(src)} has no sum over CPUs (only integers add up)",
                      obj=f"{src_path} (--sum)")


def _mismatch(path: str, dst: Node, src_path: str, src: Node) -> InputError:
    return InputError(f"no rule converts a {type_text(src)} ({src_path}) into a "
                      f"{type_text(dst)} (rename or --set it)", obj=path)


def _source_paths(node: Node, path: str):
    """Every field path under ``node`` (structs' fields by name, arrays not expanded)."""
    yield path
    if isinstance(node, Struct):
        for name, member in node.fields().items():
            yield from _source_paths(member, f"{path}.{name}")


def find_field(node: Node, path: str, root: str) -> Node | None:
    """The node at ``path`` (``value.a.b``) under ``node`` (at ``root``)."""
    if path == root:
        return node
    if not path.startswith(root + ".") or not isinstance(node, Struct):
        return None
    rest = path[len(root) + 1:]
    name = rest.split(".", 1)[0]
    member = node.fields().get(name)
    return None if member is None else find_field(member, path, f"{root}.{name}")


def side_plan(side: str, dst: Node | None, src: Node | None, *, renames: dict[str, str],
              sets: set[str], summed: bool = False) -> SidePlan:
    """The plan of one side: ``dst`` (the target's layout tree) from ``src`` (the source's).
    A side without BTF (``None``) is refused: nothing says what its bytes are (FROM's
    types can be given: ``--btf OBJ --key-type T --value-type T``)."""
    if dst is None:
        raise InputError(f"the {side} has no BTF on TO: fields cannot be matched by name",
                         obj=side)
    if src is None:
        raise InputError(f"the {side} has no BTF on FROM: fields cannot be matched by name "
                         f"(--{side}-type T gives its type)", obj=side)
    matcher = _Matcher(side, src, {k: v for k, v in renames.items() if k.startswith(side)},
                       {s for s in sets if s.startswith(side)}, summed)
    matcher.match(dst, side, src, side)
    gone = [p for p in _source_paths(src, side) if p not in matcher.consumed]
    removed = [p for p in gone if p.rpartition(".")[0] not in gone]  # a struct, not its fields
    return SidePlan(side, matcher.fields, removed, matcher.renamed)


def describe(plans: list[SidePlan], sets: dict[str, str]) -> str:
    """The plan as ``migrate --plan`` prints it: one line per target field (its type, where
    it comes from and how), then the removed fields."""
    lines = []
    for plan in plans:
        for f in plan.fields:
            rule = f"set to {sets[f.path]}" if f.rule == "set" else f.rule
            origin = "" if f.source is None else f"  <- {f.source} {f.source_type}"
            lines.append(f"{f.path} {f.type}{origin}: {rule}")
    removed = [p for plan in plans for p in plan.removed]
    lines.append(f"removed: {', '.join(removed) if removed else 'nothing'}")
    return "\n".join(lines) + "\n"
