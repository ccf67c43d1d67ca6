"""The layout tree: a BTF type compiled into :class:`Node` subclasses at absolute offsets.

:func:`build_node` follows bpftool's ``btf_dumper_do_type``. Each node answers for its piece
of the record: Python values of a whole batch (:meth:`Node.values`), one value encoded with
errors naming its path (:meth:`Node.encode`), a whole batch encoded column by column
(:meth:`Node.fill`, with the helpers that flag the records it does not take as they are),
its JSON text as template leaves (:meth:`Node.emit`) and its numpy dtype.
:func:`leaf_columns` is the flat column layout shared by the flat output formats and the
CSV loader.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import struct
from collections.abc import Callable, Sequence


from ..btf import INT_BOOL, INT_CHAR, INT_SIGNED, MODIFIERS, Btf, Kind
from ..errors import InputError
from ._numpy import np
from .columns import any_set, byte_list, char_array_text, raw_bytes, scalar_list
from .decoders import automatic_kind
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


@dataclasses.dataclass
class Node:
    """A piece of a type at an absolute byte ``offset`` of the record. ``auto`` is the
    display kind its BTF type names (see :func:`~bpfbatch.records.decoders.automatic_kind`),
    set on struct members by :func:`build_node`; it changes nothing until a caller decodes."""

    offset: int
    auto = None  # not a dataclass field: a hint attached after construction

    def values(self, rows: np.ndarray) -> list:
        """Python values of this node in every row of a batch (``count × size`` uint8)."""
        raise NotImplementedError

    def encode(self, buf: bytearray, value, path: str) -> None:
        raise NotImplementedError

    def emit(self, out: RecordText, exact: bool) -> bool:
        """Append this node's JSON text; ``False`` when bpftool would stop here (error)."""
        raise NotImplementedError

    def dtype(self):
        """numpy dtype of this node, or ``None`` when not representable."""
        return None

    def can_fill(self) -> bool:
        """Whether :meth:`fill` is implemented for this node (and everything under it)."""
        return False

    def fill(self, rows: np.ndarray, values: Sequence, bad: np.ndarray) -> None:
        """Batch encoding: write this node's value of every record into ``rows`` (``count ×
        record size`` uint8) at once, and flag in ``bad`` each record whose value the
        vectorised path does not take as it is (see :func:`int_column`)."""
        raise NotImplementedError

    def blank(self):
        """A value :meth:`fill` takes as it is, standing in for a flagged record's value."""
        raise NotImplementedError


def _emit_list(out: "RecordText", nodes: list[Node], exact: bool) -> bool:
    """Comma-separated nodes; stops after the first one bpftool cannot print."""
    for i, node in enumerate(nodes):
        if i:
            out.text(b",")
        if not node.emit(out, exact):
            return False
    return True


# (size, signed) -> numpy dtype of the plain integers.
_NP_INT = {(size, signed): ("<i%d" if signed else "<u%d") % size
           for size in (1, 2, 4, 8) for signed in (False, True)}


def parse_int(value, path: str) -> int:
    """An integer, or a string spelling one (``"0x1f"``); a JSON ``true`` is not a number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            pass
    shown = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    raise InputError(f"expected an integer, got {shown}", obj=path)


def field_range(nbits: int, signed: bool) -> tuple[int, int]:
    """``[lo, hi)`` of an ``nbits``-bit field of this signedness."""
    return (-(1 << (nbits - 1)), 1 << (nbits - 1)) if signed else (0, 1 << nbits)


def check_range(value: int, nbits: int, path: str, signed: bool) -> int:
    """The ``nbits`` two's-complement bits of ``value``, which must fit the field as its
    signedness says: -1 is refused for an unsigned field and 40000 for an s16 (the value
    rule: nothing wraps silently)."""
    lo, hi = field_range(nbits, signed)
    if not lo <= value < hi:
        raise InputError(f"{value} does not fit {'s' if signed else 'u'}{nbits} "
                         f"({lo}..{hi - 1})", obj=path)
    return value & ((1 << nbits) - 1)


def _raw_or_number(value, nbits: int, signed: bool, path: str) -> int:
    """The bits of a field the output prints as ``"0x.."`` raw bits (bitfields, 128-bit and
    odd-width integers): such a string is taken as the raw bits; a number must fit the
    field's signedness."""
    if isinstance(value, str) and value[:2].lower() == "0x":
        return check_range(parse_int(value, path), nbits, path, signed=False)
    return check_range(parse_int(value, path), nbits, path, signed)


# -- batch encoding helpers ----------------------------------------------------------------
# The vectorised path only decides on the values it takes as they are (exact ``int``s in
# range for an integer, ``str``s of the right size for a char array, dicts with known
# fields for a struct, ...); every other value flags its record, and the codec encodes the
# flagged records again with ``encode``, which accepts them (a ``"0x1f"`` string, a float
# for a bool, ...) or raises the usual error. So a batch encodes to exactly the bytes, and
# fails with exactly the error, of encoding its records one by one.

_INT_TYPES = frozenset({int})
_BOOL_TYPES = frozenset({int, bool})
_NUMBER_TYPES = frozenset({int, float})
_SEQUENCE_TYPES = frozenset({list, tuple})
_U64 = (1 << 64) - 1


def _conform(values: Sequence, ok: Callable[[object], bool], blank, bad: np.ndarray) -> list:
    """``values`` with each one failing ``ok`` replaced by ``blank`` and its record flagged."""
    out = []
    for i, value in enumerate(values):
        if ok(value):
            out.append(value)
        else:
            bad[i] = True
            out.append(blank)
    return out


def int_column(values: Sequence, lo: int, hi: int, bad: np.ndarray,
                types: frozenset = _INT_TYPES) -> np.ndarray:
    """``values`` as an integer column (two's complement bits) where each is of ``types``
    (exact ``int`` unless told) in ``[lo, hi)``; the others are flagged (and read as 0)."""
    if len(values) and set(map(type, values)) <= types:
        for dtype in (np.int64, np.uint64):  # a given dtype converts twice as fast
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
    rows[:, offset:offset + size] = column.astype(f"<u{size}").view(np.uint8).reshape(-1, size)


@dataclasses.dataclass
class Int(Node):
    """An integer of 1, 2, 4, 8 or 16 bytes (a 16-byte one is raw ``V16`` in the dtype)."""

    size: int
    signed: bool

    def __post_init__(self):
        self.np_type = _NP_INT.get((self.size, self.signed))

    def values(self, rows):
        if self.np_type:
            return scalar_list(rows, self.offset, self.np_type)
        return [int.from_bytes(raw, "little", signed=self.signed)
                for raw in raw_bytes(rows, self.offset, self.size)]

    def encode(self, buf, value, path):
        if self.np_type:
            bits = check_range(parse_int(value, path), self.size * 8, path, self.signed)
        else:  # 128 bits: printed as "0x.." raw bits
            bits = _raw_or_number(value, self.size * 8, self.signed, path)
        buf[self.offset:self.offset + self.size] = bits.to_bytes(self.size, "little")

    def emit(self, out, exact):
        if self.np_type:
            out.leaf(IntLeaf(self.offset, self.np_type))
        else:
            out.leaf(HexIntLeaf(self.offset, 0, self.size * 8))
        return True

    def dtype(self):
        return np.dtype(self.np_type or "V16")

    def can_fill(self):
        return self.np_type is not None  # not 128-bit

    def fill(self, rows, values, bad):
        _put(rows, self.offset, self.size,
             int_column(values, *field_range(self.size * 8, self.signed), bad))

    def blank(self):
        return 0


@dataclasses.dataclass
class Bits(Node):
    """``nbits`` bits starting ``shift`` bits into the byte at ``offset`` (bitfields, and
    integers whose width is not 8/16/32/64/128)."""

    shift: int
    nbits: int
    signed: bool

    @property
    def nbytes(self) -> int:
        return (self.shift + self.nbits + 7) // 8

    def values(self, rows):
        bits = HexIntLeaf(self.offset, self.shift, self.nbits).column(rows)
        if not self.signed:
            return bits
        sign, wrap = 1 << (self.nbits - 1), 1 << self.nbits
        return [v - wrap if v & sign else v for v in bits]

    def encode(self, buf, value, path):
        bits = _raw_or_number(value, self.nbits, self.signed, path)
        end = self.offset + self.nbytes
        raw = int.from_bytes(buf[self.offset:end], "little")
        mask = ((1 << self.nbits) - 1) << self.shift
        raw = (raw & ~mask) | (bits << self.shift)
        buf[self.offset:end] = raw.to_bytes(self.nbytes, "little")

    def emit(self, out, exact):
        out.leaf(HexIntLeaf(self.offset, self.shift, self.nbits))
        return True


@dataclasses.dataclass
class Bool(Node):
    size: int

    def values(self, rows):
        return any_set(rows, self.offset, self.size)

    def encode(self, buf, value, path):
        if isinstance(value, str) and value in ("true", "false"):
            value = value == "true"
        if value not in (0, 1):  # True/False compare equal to 1/0
            raise InputError(f"expected true or false, got {value!r}", obj=path)
        buf[self.offset:self.offset + self.size] = int(value).to_bytes(self.size, "little")

    def emit(self, out, exact):
        out.leaf(BoolLeaf(self.offset, 1 if exact else self.size))  # bpftool: *(bool *)data
        return True

    def dtype(self):
        return np.dtype("?") if self.size == 1 else np.dtype(_NP_INT[self.size, False])

    def can_fill(self):
        return self.size in (1, 2, 4, 8)

    def fill(self, rows, values, bad):
        _put(rows, self.offset, self.size, int_column(values, 0, 2, bad, _BOOL_TYPES))

    def blank(self):
        return False


@dataclasses.dataclass
class Char(Node):
    """An int with BTF_INT_CHAR encoding: one character."""

    def values(self, rows):
        return [chr(b) for b in byte_list(rows, self.offset)]

    def encode(self, buf, value, path):
        """The one character it prints as (U+0000 to U+00FF: the byte), or a number."""
        if isinstance(value, str) and len(value) == 1 and ord(value) < 256:
            buf[self.offset] = ord(value)
            return
        buf[self.offset] = _raw_or_number(value, 8, True, path)

    def emit(self, out, exact):
        out.leaf(CharLeaf(self.offset, exact))
        return True

    def dtype(self):
        return np.dtype("S1")

    def can_fill(self):
        return True

    def fill(self, rows, values, bad):
        if set(map(type, values)) == {str} and set(map(len, values)) == {1}:
            try:
                rows[:, self.offset] = np.frombuffer("".join(values).encode("latin-1"),
                                                     dtype=np.uint8)
                return
            except UnicodeEncodeError:
                pass
        _put(rows, self.offset, 1, int_column(values, *field_range(8, True), bad))

    def blank(self):
        return 0


@dataclasses.dataclass
class Float(Node):
    size: int

    def __post_init__(self):
        self.code = {2: "<e", 4: "<f", 8: "<d"}.get(self.size)

    def values(self, rows):
        if not self.code:
            return raw_bytes(rows, self.offset, self.size)
        return scalar_list(rows, self.offset, self.code)

    def encode(self, buf, value, path):
        """A number, or ``"NaN"``/``"Infinity"``/``"-Infinity"`` as the JSON output prints
        them. One out of the field's range is an error: it would be stored as infinity."""
        if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
            value = float(value)
        elif self.code and isinstance(value, str) and overflows_double(value):  # 1e400
            raise InputError(f"{value} is beyond the range of a {self.size}-byte float",
                             obj=path)
        if not self.code or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"expected a number for a {self.size}-byte float, got {value!r}",
                             obj=path)
        try:
            struct.pack_into(self.code, buf, self.offset, float(value))
        except OverflowError:  # a finite value beyond the format, or an int beyond a double
            shown = repr(value) if isinstance(value, float) else \
                f"an integer of {value.bit_length()} bits"
            raise InputError(f"{shown} is beyond the range of a {self.size}-byte float",
                             obj=path) from None

    def emit(self, out, exact):
        if exact:
            out.text(b"(unsupported-kind")  # bpftool's btf_dumper has no FLOAT case
            return False
        if self.code:
            out.leaf(FloatLeaf(self.offset, self.code))
        else:
            out.text(b"null")  # e.g. a 16-byte long double
        return True

    def dtype(self):
        return np.dtype(self.code) if self.code else None

    def can_fill(self):
        return self.code in ("<f", "<d")  # half floats round and overflow in struct's way

    def fill(self, rows, values, bad):
        column = _float_column(values, bad)
        if self.code == "<f":
            with np.errstate(over="ignore"):
                narrow = column.astype("<f4")
            bad |= np.isinf(narrow) & np.isfinite(column)  # struct.pack raises there
            column = narrow
        size = column.dtype.itemsize
        rows[:, self.offset:self.offset + size] = column.view(np.uint8).reshape(-1, size)

    def blank(self):
        return 0.0


def overflows_double(text: str) -> bool:
    """Whether ``text`` is a finite number literal beyond a double's range, such as
    ``1e400``, which ``float()`` reads as infinity: input readers keep it as text, so that
    :class:`Float` names it rather than storing infinity."""
    try:
        return math.isinf(float(text)) and "inf" not in text.lower()
    except ValueError:
        return False


@dataclasses.dataclass
class Enum(Node):
    """An enum of 1, 2, 4 or 8 bytes. ``signed`` is BTF's (the kind flag; an enum without it
    but with a negative enumerator, from an older compiler, is signed too): an ``enum x :
    __u8`` holding 200 reads 200 or its enumerator, never -56. ``enumerators`` hold the
    values as BTF stores them (ENUM: s32, ENUM64: u64).

    ``exact`` output reads it as bpftool 7.1 does whatever the sign: the bytes as a signed
    number, compared with the stored values, printed signed."""

    size: int
    enumerators: tuple[tuple[str, int], ...]
    signed: bool

    def __post_init__(self):
        bits = self.size * 8
        self.code = _NP_INT[self.size, self.signed]
        self.names: dict[int, str] = {}
        self.exact_names: dict[int, str] = {}
        for name, stored in self.enumerators:
            self.names.setdefault(_as_int(stored, bits, self.signed), name)  # first match
            self.exact_names.setdefault(_as_int(stored, 64, True) if self.size == 8
                                        else stored, name)
        self.by_name = {name: _as_int(stored, bits, self.signed)
                        for name, stored in self.enumerators}

    def values(self, rows):
        names = self.names
        return [names.get(v, v) for v in scalar_list(rows, self.offset, self.code)]

    def encode(self, buf, value, path):
        if isinstance(value, str):
            if value in self.by_name:
                value = self.by_name[value]
            else:
                try:
                    value = int(value, 0)
                except ValueError:
                    raise InputError(f"no enumerator {value!r} (known: "
                                     f"{', '.join(self.by_name)})", obj=path) from None
        bits = check_range(parse_int(value, path), self.size * 8, path, self.signed)
        buf[self.offset:self.offset + self.size] = bits.to_bytes(self.size, "little")

    def emit(self, out, exact):
        if exact:
            names = {value: json_string(name, True) for value, name in self.exact_names.items()}
            out.leaf(EnumLeaf(self.offset, _NP_INT[self.size, True], names))
        else:
            names = {value: json_string(name) for value, name in self.names.items()}
            out.leaf(EnumLeaf(self.offset, self.code, names))
        return True

    def dtype(self):
        return np.dtype(self.code)

    def can_fill(self):
        return True

    def fill(self, rows, values, bad):
        by_name = self.by_name
        numbers = [by_name.get(v, v) if type(v) is str else v for v in values]
        _put(rows, self.offset, self.size,
             int_column(numbers, *field_range(self.size * 8, self.signed), bad))

    def blank(self):
        return 0


@dataclasses.dataclass
class Array(Node):
    elems: list[Node]

    def values(self, rows):
        if not self.elems:
            return [[] for _ in range(rows.shape[0])]
        return [list(items) for items in zip(*(e.values(rows) for e in self.elems))]

    def encode(self, buf, value, path):
        if not isinstance(value, (list, tuple)) or len(value) != len(self.elems):
            raise InputError(f"expected a list of {len(self.elems)} elements, got {value!r}",
                             obj=path)
        for i, (elem, item) in enumerate(zip(self.elems, value)):
            elem.encode(buf, item, f"{path}[{i}]")

    def emit(self, out, exact):
        out.text(b"[")
        ok = _emit_list(out, self.elems, exact)
        out.text(b"]")
        return ok

    def dtype(self):
        if not self.elems:
            return np.dtype((np.uint8, (0,)))
        base = self.elems[0].dtype()
        return None if base is None else np.dtype((base, (len(self.elems),)))

    def can_fill(self):
        return all(elem.can_fill() for elem in self.elems)

    def fill(self, rows, values, bad):
        n = len(self.elems)
        if not (set(map(type, values)) <= _SEQUENCE_TYPES and set(map(len, values)) <= {n}):
            values = _conform(values, lambda v: type(v) in _SEQUENCE_TYPES and len(v) == n,
                              self.blank(), bad)
        columns = list(zip(*values)) if len(values) else [()] * n
        for elem, column in zip(self.elems, columns):
            elem.fill(rows, column, bad)

    def blank(self):
        return [elem.blank() for elem in self.elems]


@dataclasses.dataclass
class CharArray(Array):
    """``char[N]``: a string or the list of its elements, as :func:`char_array_text` rules.
    A string loads as its bytes and a NUL when there is room, nothing after it: in a union,
    the bytes past the NUL belong to the other members."""

    def values(self, rows):
        out = []
        for i, raw in enumerate(raw_bytes(rows, self.offset, len(self.elems))):
            text = char_array_text(raw, exact=False)
            out.append(super().values(rows[i:i + 1])[0] if text is None else text)
        return out

    def encode(self, buf, value, path):
        if isinstance(value, str):
            try:
                raw = value.encode("ascii")
            except UnicodeEncodeError:
                raise InputError(f"not ASCII: {value!r}", obj=path) from None
            if len(raw) > len(self.elems):
                raise InputError(f"string longer than {len(self.elems)} bytes: {value!r}",
                                 obj=path)
            if len(raw) < len(self.elems):
                raw += b"\0"
            buf[self.offset:self.offset + len(raw)] = raw
            return
        super().encode(buf, value, path)

    def emit(self, out, exact):
        fallback = RecordText()
        shifted = CharArray(0, [dataclasses.replace(e, offset=e.offset - self.offset)
                                for e in self.elems])
        Array.emit(shifted, fallback, exact)
        out.leaf(StrLeaf(self.offset, len(self.elems), fallback, exact))
        return True

    def dtype(self):
        return np.dtype(f"S{len(self.elems)}")

    def fill(self, rows, values, bad):
        """Strings only; a record giving the list of elements is encoded on its own."""
        n = len(self.elems)
        if not (set(map(type, values)) <= {str} and "".join(values).isascii()
                and max(map(len, values), default=0) <= n):
            values = _conform(values, lambda v: type(v) is str and v.isascii() and len(v) <= n,
                              "", bad)
        rows[:, self.offset:self.offset + n] = \
            np.array(values, dtype=f"S{n}").view(np.uint8).reshape(-1, n)

    def blank(self):
        return ""


@dataclasses.dataclass
class Struct(Node):
    """A struct or union (``union``). In the typed JSON (the value rule) an anonymous
    member's fields belong to the record that holds it, as in C (``v.x`` for ``struct {
    struct { int x; }; } v``), and an unnamed bitfield (padding) is not a field; the exact
    output keeps bpftool's ``"":`` keys.

    A load must give every field of a struct, and at least one of each union's (a dump
    gives all of them, written in order), unless ``default_zero``: a missing field is an
    error, not a silent 0."""

    size: int
    members: list[tuple[str, Node]]
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

    def _required(self) -> list[frozenset[str]]:
        """Groups of field names of which each must be given at least one."""
        if self.union:
            return [frozenset(self.fields())] if self.members else []
        groups: list[frozenset[str]] = []
        for name, node in self.members:
            if name:
                groups.append(frozenset({name}))
            elif isinstance(node, Struct):
                groups.extend(node._required())
        return groups

    def values(self, rows):
        out = [{} for _ in range(rows.shape[0])]
        for name, node in self.members:
            if name:
                for record, value in zip(out, node.values(rows)):
                    record[name] = value
            elif isinstance(node, Struct):
                for record, value in zip(out, node.values(rows)):
                    record.update(value)
        return out

    def encode(self, buf, value, path):
        fields = self.fields()
        if not isinstance(value, dict):
            raise InputError(f"expected an object with fields {', '.join(fields)}, got "
                             f"{value!r}", obj=path)
        for name, item in value.items():
            if name not in fields:
                raise InputError(f"no field {name!r} (fields: {', '.join(fields)})", obj=path)
            fields[name].encode(buf, item, f"{path}.{name}")
        if not self.default_zero:
            for group in self._required():
                if not group & value.keys():
                    missing = " or ".join(sorted(group, key=list(fields).index))
                    raise InputError(f"missing field {missing} (a field left out is an error; "
                                     f"--default-zero makes it 0)", obj=path)

    def emit(self, out, exact):
        out.text(b"{")
        ok = self._emit_members(out, exact, first=True)[0]
        out.text(b"}")
        return ok

    def _emit_members(self, out, exact: bool, first: bool) -> tuple[bool, bool]:
        """``(complete, first)``: the members as ``"name":value`` pairs, an anonymous
        member's inline in the typed output."""
        for name, node in self.members:
            if not exact and not name:
                if isinstance(node, Struct):
                    ok, first = node._emit_members(out, exact, first)
                    if not ok:
                        return False, first
                continue  # an unnamed bitfield: padding
            out.text((b"" if first else b",") + json_string(name, exact) + b":")
            first = False
            if not node.emit(out, exact):
                return False, first
        return True, first

    def dtype(self):
        names, formats, offsets = [], [], []
        for i, (name, node) in enumerate(self.members):
            dt = node.dtype()
            if dt is None:
                return None
            names.append(name or f"_anon{i}")
            formats.append(dt)
            offsets.append(node.offset - self.offset)
        return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                         "itemsize": self.size})

    def can_fill(self):
        """Fields (anonymous members' included) that do not overlap: not a union, whose
        members ``encode`` writes over each other in the record's order."""
        fields = self.fields()
        if self.union or not all(node.can_fill() for node in fields.values()):
            return False
        end = self.offset
        for node in sorted(fields.values(), key=lambda n: n.offset):
            if node.offset < end:
                return False
            end = node.offset + node.dtype().itemsize
        return True

    def fill(self, rows, values, bad):
        fields = self.fields()
        names = tuple(fields)
        columns = None
        if names and set(map(type, values)) == {dict} and set(map(len, values)) == {len(names)}:
            try:  # every record names every field: one C-level pass per field
                columns = [list(map(operator.itemgetter(name), values)) for name in names]
            except KeyError:
                pass
        if columns is None:
            known, partial = frozenset(names), self.default_zero
            values = _conform(values, lambda v: type(v) is dict and known.issuperset(v)
                              and (partial or len(v) == len(known)), {}, bad)
            columns = [[v.get(name, blank) for v in values]
                       for name, blank in ((name, node.blank()) for name, node in fields.items())]
        for node, column in zip(fields.values(), columns):
            node.fill(rows, column, bad)

    def blank(self):
        return {}


@dataclasses.dataclass
class Var(Node):
    """A BTF VAR (``.data``/``.bss`` maps): ``{"name": value}``."""

    name: str
    node: Node

    def values(self, rows):
        return [{self.name: v} for v in self.node.values(rows)]

    def encode(self, buf, value, path):
        if not isinstance(value, dict) or set(value) != {self.name}:
            raise InputError(f"expected {{{self.name!r}: ...}}, got {value!r}", obj=path)
        self.node.encode(buf, value[self.name], f"{path}.{self.name}")

    def emit(self, out, exact):
        out.text(b"{" + json_string(self.name, exact) + b":")
        ok = self.node.emit(out, exact)
        out.text(b"}")
        return ok


@dataclasses.dataclass
class Datasec(Node):
    """A BTF DATASEC: ``{"section": [var, ...]}``."""

    name: str
    vars: list[Node]

    def values(self, rows):
        columns = [var.values(rows) for var in self.vars]
        if not columns:
            return [{self.name: []} for _ in range(rows.shape[0])]
        return [{self.name: list(row)} for row in zip(*columns)]

    def encode(self, buf, value, path):
        items = value.get(self.name) if isinstance(value, dict) else None
        if not isinstance(items, list) or len(items) != len(self.vars):
            raise InputError(f"expected {{{self.name!r}: [{len(self.vars)} variables]}}",
                             obj=path)
        for var, item in zip(self.vars, items):
            var.encode(buf, item, f"{path}.{self.name}")

    def emit(self, out, exact):
        out.text(b"{" + json_string(self.name, exact) + b":[")
        ok = _emit_list(out, self.vars, exact)
        out.text(b"]}")
        return ok


@dataclasses.dataclass
class Unsupported(Node):
    """A kind bpftool cannot print: its error text in ``exact`` mode (``(unknown)`` is not
    an error), ``null`` in the typed JSON."""

    text: bytes
    fatal: bool = True

    def values(self, rows):
        return [None] * rows.shape[0]

    def encode(self, buf, value, path):
        if value is not None:
            raise InputError(f"cannot encode {self.text.decode()}", obj=path)

    def emit(self, out, exact):
        if not exact:  # the typed JSON stays valid JSON
            out.text(b"null")
            return True
        out.text(self.text)
        return not self.fatal


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


def build_node(btf: Btf, type_id: int, offset: int = 0, bit: int = 0, *,
               default_zero: bool = False) -> Node:
    """The layout tree of ``type_id`` placed at ``offset`` (+ ``bit`` bits, 0–7), following
    ``btf_dumper_do_type``. ``default_zero``: structs take records that leave fields out
    (see :class:`Struct`)."""
    t = btf[type_id]
    kind = t.kind
    if kind == Kind.INT:
        return _int_node(t, offset, bit)
    if kind in (Kind.STRUCT, Kind.UNION):
        members = []
        for m in t.members:
            at = offset + m.bit_offset // 8
            if m.bitfield_size:
                signed = _is_signed(btf, m.type)
                node = Bits(at, m.bit_offset % 8, m.bitfield_size, signed)
            else:
                node = build_node(btf, m.type, at, m.bit_offset % 8, default_zero=default_zero)
                node.auto = _automatic_kind(btf, m.type, m.name)
            members.append((m.name, node))
        return Struct(offset, t.size, members, union=kind == Kind.UNION,
                      default_zero=default_zero)
    if kind == Kind.ARRAY:
        elem_size = btf.size_of(t.type) if t.nelems else 0
        elems = [build_node(btf, t.type, offset + i * elem_size, default_zero=default_zero)
                 for i in range(t.nelems)]
        return (CharArray if _is_char_elem(btf, t) else Array)(offset, elems)
    if kind in (Kind.ENUM, Kind.ENUM64):
        if t.size not in (1, 2, 4, 8):
            return Unsupported(offset, b"")
        signed = t.kind_flag or any(v < 0 for _, v in t.values)
        return Enum(offset, t.size, t.values, signed)
    if kind == Kind.PTR:
        return Int(offset, 8, False)
    if kind == Kind.UNKN:
        return Unsupported(offset, b"(unknown)", fatal=False)
    if kind == Kind.FWD:
        return Unsupported(offset, b"(fwd-kind-invalid)")
    if kind in (Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT):
        return build_node(btf, btf.resolve(type_id), offset, bit, default_zero=default_zero)
    if kind == Kind.VAR:
        return Var(offset, t.name,
                   build_node(btf, t.type, offset, bit, default_zero=default_zero))
    if kind == Kind.DATASEC:
        return Datasec(offset, t.name,
                       [build_node(btf, vt, offset + voff, default_zero=default_zero)
                        for vt, voff, _ in t.entries])
    if kind == Kind.FLOAT:
        return Float(offset, t.size)
    return Unsupported(offset, b"(unsupported-kind")


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


def _int_node(t, offset: int, bit: int) -> Node:
    signed = bool(t.encoding & INT_SIGNED)
    total = bit + t.int_offset
    if total or t.bits % 8:
        return Bits(offset + total // 8, total % 8, t.bits, signed)
    if t.bits == 128:
        return Int(offset, 16, signed)
    if t.encoding in (0, INT_SIGNED):
        if t.bits in (8, 16, 32, 64):
            return Int(offset, t.bits // 8, signed)
        return Bits(offset, 0, t.bits, signed)
    if t.encoding == INT_CHAR:
        return Char(offset)
    if t.encoding == INT_BOOL:
        return Bool(offset, t.size)
    return Unsupported(offset, b"")  # bpftool: -EINVAL, prints nothing


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
