"""BTF: read a map's types from the kernel, and build types for maps we create.

Reading: :meth:`Btf.from_kernel` fetches the raw BTF blob once (``btf__load_from_kernel_by_id``
+ ``btf__get_raw_data``) and parses header, type section and string section in Python — one
native call instead of one per type accessor. The result is an immutable list of
:class:`BtfType` indexed by type id (id 0 is ``void``). Split BTF (kernel modules) is not
needed for maps and not supported.

Building: :class:`BtfBuilder` wraps libbpf's ``btf__add_*`` and lays out C structs with the
natural alignment of the System V ABI (or explicit bit offsets), so tests and the demo create
BTF-typed maps without a compiler.

Layouts follow ``include/uapi/linux/btf.h``; the host must be little-endian like the BTF the
kernel hands out.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import enum
import struct

from ._sys.libbpf import check, check_ptr, lib
from .errors import BpfBatchError, from_errno

BTF_MAGIC = 0xEB9F


class Kind(enum.IntEnum):
    """``BTF_KIND_*``."""

    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


# BTF_INT_ENCODING bits.
INT_SIGNED = 1 << 0
INT_CHAR = 1 << 1
INT_BOOL = 1 << 2

#: Kinds that only qualify another type (libbpf's ``btf_is_mod``).
MODIFIERS = frozenset({Kind.VOLATILE, Kind.CONST, Kind.RESTRICT, Kind.TYPE_TAG})


@dataclasses.dataclass(frozen=True)
class Member:
    """A struct/union member; ``bit_offset`` from the start of the aggregate, ``bitfield_size``
    0 for a plain member."""

    name: str
    type: int
    bit_offset: int
    bitfield_size: int = 0


@dataclasses.dataclass(frozen=True)
class BtfType:
    """One parsed type. Fields a kind does not use keep their defaults.

    ``size`` is the byte size for INT/STRUCT/UNION/ENUM/ENUM64/FLOAT/DATASEC; ``type`` is the
    referenced id for PTR/TYPEDEF/modifiers/FUNC/VAR/DECL_TAG (and the element type for ARRAY,
    the return type for FUNC_PROTO).
    """

    id: int
    kind: Kind
    name: str = ""
    size: int = 0
    type: int = 0
    kind_flag: bool = False
    # INT
    encoding: int = 0
    int_offset: int = 0
    bits: int = 0
    # ARRAY
    index_type: int = 0
    nelems: int = 0
    # STRUCT / UNION
    members: tuple[Member, ...] = ()
    # ENUM / ENUM64: (name, value); values as stored (ENUM: signed 32-bit, ENUM64: unsigned)
    values: tuple[tuple[str, int], ...] = ()
    # FUNC_PROTO params: (name, type); VAR linkage; DATASEC entries: (type, offset, size)
    params: tuple[tuple[str, int], ...] = ()
    linkage: int = 0
    entries: tuple[tuple[int, int, int], ...] = ()
    component_idx: int = -1


VOID = BtfType(0, Kind.UNKN, "void")

_HEADER = struct.Struct("<HBBIIIII")
_U32 = struct.Struct("<I")
_U32x2 = struct.Struct("<II")
_U32x3 = struct.Struct("<III")
_ENUM = struct.Struct("<Ii")


class Btf:
    """A parsed BTF object: ``btf[type_id]`` is a :class:`BtfType`."""

    def __init__(self, types: list[BtfType]):
        self.types = types

    def __getitem__(self, type_id: int) -> BtfType:
        try:
            return self.types[type_id]
        except IndexError:
            raise BpfBatchError(f"no BTF type {type_id}", obj="BTF") from None

    def __len__(self) -> int:
        return len(self.types)

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def from_kernel(cls, btf_id: int) -> "Btf":
        """The BTF object ``btf_id`` as loaded in the kernel (e.g. a map's ``btf_id``)."""
        handle = lib.btf__load_from_kernel_by_id(btf_id)
        if not handle:  # say what it is for: the errno alone reads like a map failure
            raise from_errno("load BTF", ctypes.get_errno() or errno.EINVAL, obj=f"BTF id {btf_id}",
                             detail="the type information a map's keys and values are "
                                    "decoded with could not be read")
        try:
            raw = cls._raw(handle, f"BTF id {btf_id}")
        finally:
            lib.btf__free(handle)
        return cls.from_bytes(raw)

    @classmethod
    def from_file(cls, path: str) -> "Btf":
        """The BTF of an ELF object file (``clang -g -target bpf`` output) or of a raw BTF
        file (``/sys/kernel/btf/vmlinux``), by libbpf's ``btf__parse``."""
        handle = lib.btf__parse(path.encode(), None)
        if not handle:
            code = ctypes.get_errno() or errno.EINVAL
            raise from_errno("read BTF", code, obj=path, detail="an object file built with "
                             "clang -g, or a raw BTF file" if code != errno.ENOENT else None)
        try:
            return cls.from_bytes(cls._raw(handle, path))
        finally:
            lib.btf__free(handle)

    @staticmethod
    def _raw(handle: int, obj: str) -> bytes:
        size = ctypes.c_uint32()
        ptr = check_ptr(lib.btf__get_raw_data(handle, ctypes.byref(size)), "read BTF", obj)
        return ctypes.string_at(ptr, size.value)

    @classmethod
    def from_bytes(cls, raw: bytes) -> "Btf":
        """Parse a raw BTF blob (header, type section, string section)."""
        if len(raw) < _HEADER.size:
            raise BpfBatchError("BTF blob shorter than its header", obj="BTF")
        magic, version, _flags, hdr_len, type_off, type_len, str_off, str_len = \
            _HEADER.unpack_from(raw)
        if magic != BTF_MAGIC or version != 1:
            raise BpfBatchError(f"not little-endian BTF v1 (magic {magic:#x}, version {version})",
                                obj="BTF")
        strings = raw[hdr_len + str_off: hdr_len + str_off + str_len]
        types = [VOID]
        _parse_types(memoryview(raw)[hdr_len + type_off: hdr_len + type_off + type_len],
                     strings, types)
        return cls(types)

    # -- walking -------------------------------------------------------------------------

    def find(self, kind: Kind, name: str) -> BtfType | None:
        """The first type of ``kind`` named ``name`` (libbpf's ``btf__find_by_name_kind``), or
        None."""
        return next((t for t in self.types if t.kind == kind and t.name == name), None)

    def resolve(self, type_id: int) -> int:
        """Skip typedefs, modifiers and VARs (libbpf's ``btf__resolve_type``)."""
        seen = 0
        t = self[type_id]
        while t.id and (t.kind in MODIFIERS or t.kind in (Kind.TYPEDEF, Kind.VAR)):
            seen += 1
            if seen > 32:
                raise BpfBatchError(f"type {type_id} loops through modifiers", obj="BTF")
            t = self[t.type]
        return t.id

    def size_of(self, type_id: int) -> int:
        """Byte size of a type (libbpf's ``btf__resolve_size``)."""
        nelems = 1
        t = self[type_id]
        for _ in range(32):
            if t.kind in (Kind.INT, Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.ENUM64,
                          Kind.FLOAT, Kind.DATASEC):
                return nelems * t.size
            if t.kind == Kind.PTR:
                return nelems * 8
            if t.kind == Kind.ARRAY:
                nelems *= t.nelems
            elif not (t.kind in MODIFIERS or t.kind in (Kind.TYPEDEF, Kind.VAR)):
                break
            t = self[t.type]
        raise BpfBatchError(f"type {type_id} ({t.kind.name}) has no size", obj="BTF")

    def name_of(self, type_id: int) -> str:
        """A C-like spelling of a type, for messages and headers (``struct flow``, ``u32[4]``)."""
        t = self[type_id]
        if t.kind in (Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.ENUM64):
            prefix = {Kind.STRUCT: "struct", Kind.UNION: "union"}.get(t.kind, "enum")
            return f"{prefix} {t.name}" if t.name else f"{prefix} (anon)"
        if t.kind == Kind.ARRAY:
            return f"{self.name_of(t.type)}[{t.nelems}]"
        if t.kind == Kind.PTR:
            return f"{self.name_of(t.type)} *"
        if t.kind in MODIFIERS:
            return f"{t.kind.name.lower()} {self.name_of(t.type)}"
        return t.name or t.kind.name.lower()


def _name(strings: bytes, off: int) -> str:
    end = strings.find(b"\0", off)
    return strings[off:end if end >= 0 else len(strings)].decode(errors="replace")


def _records(sec: memoryview, pos: int, count: int, layout: struct.Struct):
    """``count`` fixed-size records following a type; returns them and the next position."""
    records = [layout.unpack_from(sec, pos + i * layout.size) for i in range(count)]
    return records, pos + count * layout.size


def _parse_types(sec: memoryview, strings: bytes, types: list[BtfType]) -> None:
    pos = 0
    end = len(sec)
    while pos < end:
        name_off, info, size_or_type = _U32x3.unpack_from(sec, pos)
        pos += 12
        try:
            kind = Kind((info >> 24) & 0x1F)
        except ValueError:
            raise BpfBatchError(f"type {len(types)} has unknown kind {(info >> 24) & 0x1F}",
                                obj="BTF") from None
        vlen = info & 0xFFFF
        kflag = bool(info >> 31)
        common = dict(id=len(types), kind=kind, name=_name(strings, name_off), kind_flag=kflag)
        if kind in (Kind.INT, Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.ENUM64, Kind.FLOAT,
                    Kind.DATASEC):
            common["size"] = size_or_type
        else:
            common["type"] = size_or_type
        if kind == Kind.INT:
            (data,) = _U32.unpack_from(sec, pos)
            pos += 4
            t = BtfType(**common, encoding=(data >> 24) & 0xF, int_offset=(data >> 16) & 0xFF,
                        bits=data & 0xFF)
        elif kind == Kind.ARRAY:
            elem, index, nelems = _U32x3.unpack_from(sec, pos)
            pos += 12
            common["type"] = elem
            t = BtfType(**common, index_type=index, nelems=nelems)
        elif kind in (Kind.STRUCT, Kind.UNION):
            records, pos = _records(sec, pos, vlen, _U32x3)
            members = []
            for m_name, m_type, m_off in records:
                bitfield = 0
                if kflag:
                    bitfield, m_off = m_off >> 24, m_off & 0xFFFFFF
                members.append(Member(_name(strings, m_name), m_type, m_off, bitfield))
            t = BtfType(**common, members=tuple(members))
        elif kind == Kind.ENUM:
            records, pos = _records(sec, pos, vlen, _ENUM)
            t = BtfType(**common, values=tuple((_name(strings, n), v) for n, v in records))
        elif kind == Kind.ENUM64:
            records, pos = _records(sec, pos, vlen, _U32x3)
            t = BtfType(**common, values=tuple((_name(strings, n), lo | hi << 32)
                                               for n, lo, hi in records))
        elif kind == Kind.FUNC_PROTO:
            records, pos = _records(sec, pos, vlen, _U32x2)
            t = BtfType(**common, params=tuple((_name(strings, n), p) for n, p in records))
        elif kind == Kind.VAR:
            (linkage,) = _U32.unpack_from(sec, pos)
            pos += 4
            t = BtfType(**common, linkage=linkage)
        elif kind == Kind.DATASEC:
            records, pos = _records(sec, pos, vlen, _U32x3)
            t = BtfType(**common, entries=tuple(records))
        elif kind == Kind.DECL_TAG:
            (idx,) = struct.unpack_from("<i", sec, pos)
            pos += 4
            t = BtfType(**common, component_idx=idx)
        else:  # PTR, FWD, TYPEDEF, modifiers, FUNC, FLOAT, TYPE_TAG: no trailing data
            t = BtfType(**common)
        types.append(t)


# -- building -----------------------------------------------------------------------------

def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


class BtfBuilder:
    """Build BTF types through libbpf and load them into the kernel.

    Every ``add``-style method returns the new type id. Sizes and alignments are tracked here
    so :meth:`struct` can lay members out like a C compiler (System V x86-64 rules, including
    bitfields that do not straddle their storage unit). Use as a context manager, or call
    :meth:`close`; the kernel keeps the BTF alive as long as a map created with it exists.
    """

    def __init__(self):
        self._btf = check_ptr(lib.btf__new_empty(), "create BTF")
        self._layout: dict[int, tuple[int, int]] = {}  # id -> (size, alignment)
        self._fd = -1
        self._index = 0  # the array index type, added on first use

    def close(self) -> None:
        if self._btf:
            lib.btf__free(self._btf)  # also closes the kernel fd
            self._btf = None
            self._fd = -1

    def __enter__(self) -> "BtfBuilder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _added(self, ret: int, what: str, size: int, align: int) -> int:
        type_id = check(ret, f"add BTF {what}")
        self._layout[type_id] = (size, align)
        return type_id

    def layout(self, type_id: int) -> tuple[int, int]:
        """``(size, alignment)`` of a type built here."""
        return self._layout[type_id]

    # -- scalar types --------------------------------------------------------------------

    def integer(self, name: str, size: int, *, signed: bool = False, char: bool = False,
                boolean: bool = False) -> int:
        """An integer of ``size`` bytes (1, 2, 4, 8 or 16). C's ``char`` is what clang emits:
        ``integer("char", 1, signed=True)``; ``_Bool`` is ``integer("_Bool", 1, boolean=True)``."""
        encoding = (INT_SIGNED if signed else 0) | (INT_CHAR if char else 0) | \
            (INT_BOOL if boolean else 0)
        return self._added(lib.btf__add_int(self._btf, name.encode(), size, encoding),
                           f"int {name}", size, min(size, 16))

    def enum(self, name: str, values: dict[str, int], size: int = 4, *,
             signed: bool = False) -> int:
        """An enum; ``size`` 8 makes an ENUM64 (``signed`` sets its kind flag)."""
        if size == 8:
            type_id = self._added(lib.btf__add_enum64(self._btf, name.encode(), size, signed),
                                  f"enum {name}", size, size)
            add_value = lib.btf__add_enum64_value
        else:
            type_id = self._added(lib.btf__add_enum(self._btf, name.encode(), size),
                                  f"enum {name}", size, size)
            add_value = lib.btf__add_enum_value
        for value_name, value in values.items():
            check(add_value(self._btf, value_name.encode(), value),
                  f"add BTF enum value {value_name}")
        return type_id

    def float(self, name: str, size: int) -> int:
        return self._added(lib.btf__add_float(self._btf, name.encode(), size), f"float {name}",
                           size, size)

    def ptr(self, target: int) -> int:
        return self._added(lib.btf__add_ptr(self._btf, target), "pointer", 8, 8)

    def typedef(self, name: str, target: int) -> int:
        return self._added(lib.btf__add_typedef(self._btf, name.encode(), target),
                           f"typedef {name}", *self._layout[target])

    def const(self, target: int) -> int:
        return self._added(lib.btf__add_const(self._btf, target), "const", *self._layout[target])

    def volatile(self, target: int) -> int:
        return self._added(lib.btf__add_volatile(self._btf, target), "volatile",
                           *self._layout[target])

    def array(self, elem: int, nelems: int) -> int:
        index = self._index_type()
        size, align = self._layout[elem]
        return self._added(lib.btf__add_array(self._btf, index, elem, nelems), "array",
                           size * nelems, align)

    def _index_type(self) -> int:
        if not self._index:
            self._index = self.integer("__ARRAY_SIZE_TYPE__", 4)
        return self._index

    # -- aggregates ----------------------------------------------------------------------

    def struct(self, name: str, fields: list[tuple], *, union: bool = False,
               size: int | None = None) -> int:
        """A struct (or union) from ``fields``: ``(name, type)``, ``(name, type, bits)`` for a
        bitfield, or ``(name, type, bits, bit_offset)`` to place a member explicitly.

        Members without an explicit offset follow C layout: each at the next offset aligned to
        its type (a bitfield continues in the current storage unit when it fits). The size is
        rounded up to the largest alignment unless ``size`` is given.
        """
        placed = []
        pos = 0  # in bits
        align = 1
        for field in fields:
            fname, ftype, *rest = field
            bits = rest[0] if rest else 0
            offset = rest[1] if len(rest) > 1 else None
            fsize, falign = self._layout[ftype]
            align = max(align, falign)
            if offset is None:
                if union:
                    offset = 0
                elif bits:
                    unit = fsize * 8
                    if pos // unit != (pos + bits - 1) // unit:
                        pos = _round_up(pos, unit)
                    offset = pos
                else:
                    offset = _round_up(pos, falign * 8)
            end = offset + (bits or fsize * 8)
            pos = end if not union else max(pos, end)
            placed.append((fname, ftype, offset, bits))
        total = size if size is not None else _round_up(_round_up(pos, 8) // 8, align)
        add = lib.btf__add_union if union else lib.btf__add_struct
        type_id = self._added(add(self._btf, name.encode(), total),
                              f"{'union' if union else 'struct'} {name}", total, align)
        for fname, ftype, offset, bits in placed:
            check(lib.btf__add_field(self._btf, fname.encode(), ftype, offset, bits),
                  f"add BTF field {fname}")
        return type_id

    def union(self, name: str, fields: list[tuple], *, size: int | None = None) -> int:
        return self.struct(name, fields, union=True, size=size)

    # -- kernel --------------------------------------------------------------------------

    def load(self) -> int:
        """Load the types into the kernel; returns the BTF fd (owned by this builder)."""
        if self._fd < 0:
            check(lib.btf__load_into_kernel(self._btf), "load BTF into the kernel")
            self._fd = lib.btf__fd(self._btf)
        return self._fd

    def raw(self) -> bytes:
        """The raw BTF blob built so far (parse it with :meth:`Btf.from_bytes`)."""
        size = ctypes.c_uint32()
        ptr = check_ptr(lib.btf__get_raw_data(self._btf, ctypes.byref(size)), "read BTF")
        return ctypes.string_at(ptr, size.value)
