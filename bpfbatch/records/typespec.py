"""Types given for a map that has no BTF (bcc's maps, ``bpftool map create`` ones): a key
or value type named by the caller, turned into BTF so that every surface types it exactly as
it types a map with BTF (the same codecs, decoders, formats, Arrow columns).

A type is given as

- a ctypes type, as bcc's tables carry them: ``c_uint32``, ``c_ulonglong``, ``c_char * 16``,
  a ``Structure``/``Union`` subclass (bitfields included);
- a numpy dtype (``np.dtype("u8")``, a structured dtype with its names and offsets), or a
  numpy scalar type (``np.uint32``);
- a C type name: ``u32``, ``__s64``, ``__be16``, ``unsigned long``, ``char[16]``,
  ``u8[6]``, or with ``btf`` (an object file's path or a :class:`~bpfbatch.btf.Btf`) any
  type it names, ``struct flow_val``, ``union u``, ``enum state``, a typedef.

:func:`given_type` returns ``(Btf, type_id)``; :class:`GivenTypes` holds a map's pair, which
:func:`bpfbatch.records.codec.map_codecs` prefers to the map's own BTF. The type's size must
be the map's key or value size: a mismatch is an error naming the side.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re

from ..btf import Btf, BtfBuilder, Kind
from ..errors import InputError

#: C's integer names (and the kernel's) → (size, signed).
_INTEGERS = {
    "char": (1, True), "signed char": (1, True), "unsigned char": (1, False),
    "short": (2, True), "unsigned short": (2, False), "int": (4, True),
    "unsigned int": (4, False), "unsigned": (4, False), "long": (8, True),
    "unsigned long": (8, False), "long long": (8, True), "unsigned long long": (8, False),
    **{f"{prefix}{kind}{bits}": (bits // 8, kind == "s")
       for prefix in ("", "__") for kind in "us" for bits in (8, 16, 32, 64)},
    **{f"{kind}int{bits}_t": (bits // 8, kind == "") for kind in ("", "u")
       for bits in (8, 16, 32, 64)},
}
#: The kernel's big-endian names (a typedef of the unsigned type, which the automatic
#: decoders show in network order, as for a map with BTF).
_BIG_ENDIAN = {"__be16": 2, "__be32": 4, "__be64": 8}
_FLOATS = {"float": 4, "double": 8}
_BOOLS = ("_Bool", "bool")
_ARRAY = re.compile(r"^(.*?)\s*\[\s*(\d+)\s*\]$")
_AGGREGATE = re.compile(r"^(struct|union|enum)\s+(\w+)$")


@dataclasses.dataclass(frozen=True)
class GivenTypes:
    """The key and value types given for a map, each ``(Btf, type_id)`` or ``None`` (that
    side keeps the map's own BTF, or raw bytes)."""

    key: tuple[Btf, int] | None = None
    value: tuple[Btf, int] | None = None


def given_types(info, key_type=None, value_type=None, btf=None) -> GivenTypes | None:
    """The :class:`GivenTypes` of a map (``info``: its :class:`~bpfbatch.map.handle.MapInfo`)
    from the forms above, each checked against the map's size; ``None`` when none is given."""
    if key_type is None and value_type is None:
        if btf is not None:
            raise InputError("names the types of key_type/value_type; give one of them",
                             obj="btf")
        return None
    source = load_btf(btf) if isinstance(btf, str) else btf
    return GivenTypes(
        key=None if key_type is None else given_type(key_type, info.key_size, "key_type",
                                                     btf=source),
        value=None if value_type is None else given_type(value_type, info.value_size,
                                                         "value_type", btf=source))


def given_type(spec, size: int | None, where: str, *, btf: Btf | None = None
               ) -> tuple[Btf, int]:
    """``spec`` as ``(Btf, type_id)``, ``size`` bytes (else an error naming ``where``; ``None``:
    whatever its size, for records that have no map yet, as a file's)."""
    if isinstance(spec, str) and btf is not None:
        found = _named(btf, spec.strip())
        if found is not None:
            return _sized(btf, found, size, where, spec)
    with BtfBuilder() as builder:
        type_id = _build(builder, spec, where)
        built = Btf.from_bytes(builder.raw())
    return _sized(built, type_id, size, where, spec)


def load_btf(path: str) -> Btf:
    """The BTF of an object file (``clang -g`` output) or a raw BTF file."""
    return Btf.from_file(path)


def _sized(btf: Btf, type_id: int, size: int | None, where: str, spec) -> tuple[Btf, int]:
    have = btf.size_of(type_id)
    if size is not None and have != size:
        raise InputError(f"{_spelling(spec)} is {have} bytes, the map's are {size}", obj=where)
    return btf, type_id


def _spelling(spec) -> str:
    return spec if isinstance(spec, str) else getattr(spec, "__name__", None) or str(spec)


def _named(btf: Btf, name: str) -> int | None:
    """The type ``name`` (``struct x``, ``enum y``, a typedef or base type name) in ``btf``."""
    aggregate = _AGGREGATE.match(name)
    if aggregate:
        kinds = {"struct": (Kind.STRUCT,), "union": (Kind.UNION,),
                 "enum": (Kind.ENUM, Kind.ENUM64)}[aggregate.group(1)]
        name = aggregate.group(2)
    else:
        kinds = (Kind.TYPEDEF, Kind.INT, Kind.FLOAT)
    found = next((t.id for t in btf.types if t.kind in kinds and t.name == name), None)
    if found is None and aggregate:
        raise InputError(f"no {aggregate.group(1)} '{name}' in the BTF given", obj="btf")
    return found


def _build(b: BtfBuilder, spec, where: str) -> int:
    """``spec`` added to ``b``; its type id."""
    if isinstance(spec, str):
        return _c_name(b, spec.strip(), where)
    if isinstance(spec, type) and issubclass(spec, ctypes._SimpleCData | ctypes.Structure
                                             | ctypes.Union | ctypes.Array):
        return _ctype(b, spec, where)
    dtype = _as_dtype(spec)
    if dtype is not None:
        return _dtype(b, dtype, where)
    raise InputError(f"not a type: {spec!r} (give a ctypes type, a numpy dtype or a C type "
                     "name such as u32)", obj=where)


def _c_name(b: BtfBuilder, name: str, where: str) -> int:
    array = _ARRAY.match(name)
    if array:
        return b.array(_c_name(b, array.group(1), where), int(array.group(2)))
    name = " ".join(name.split())
    if name in _BIG_ENDIAN:
        size = _BIG_ENDIAN[name]
        return b.typedef(name, b.integer(f"__u{size * 8}", size))
    if name in _INTEGERS:
        size, signed = _INTEGERS[name]
        return b.integer(name, size, signed=signed)  # "char" as clang emits it: signed
    if name in _FLOATS:
        return b.float(name, _FLOATS[name])
    if name in _BOOLS:
        return b.integer("_Bool", 1, boolean=True)
    hint = " (with --btf FILE.o / btf=)" if _AGGREGATE.match(name) else ""
    raise InputError(f"unknown type '{name}': use u8..u64, s8..s64, __be16/32/64, C's integer "
                     f"names, float, double, bool, T[N], or a type of an object's BTF{hint}",
                     obj=where)


def _scalar(b: BtfBuilder, ctype) -> int:
    """A ctypes scalar type by its code (the c_long family by its size on this host)."""
    code, size = ctype._type_, ctypes.sizeof(ctype)
    if code == "?":
        return b.integer("_Bool", 1, boolean=True)
    if code == "c":
        return b.integer("char", 1, signed=True)
    if code in "fd":
        return b.float("float" if size == 4 else "double", size)
    if code in "bhilqBHILQ":
        signed = code.islower()
        return b.integer(f"{'s' if signed else 'u'}{size * 8}", size, signed=signed)
    raise InputError(f"ctypes type {ctype.__name__} has no BTF form", obj="type")


def _ctype(b: BtfBuilder, ctype, where: str) -> int:
    if issubclass(ctype, ctypes.Array):
        return b.array(_ctype(b, ctype._type_, where), ctype._length_)
    if issubclass(ctype, ctypes._SimpleCData):
        return _scalar(b, ctype)
    fields = []
    for field in ctype._fields_:
        name, member, *bits = field
        descriptor = getattr(ctype, name)
        offset = descriptor.offset * 8
        if bits:  # ctypes packs bitfields LSB first in its storage unit, as GCC does on x86
            offset += descriptor.size & 0xFFFF  # CPython: size = bits << 16 | bit offset
        fields.append((name, _ctype(b, member, where), bits[0] if bits else 0, offset))
    union = issubclass(ctype, ctypes.Union)
    return b.struct(ctype.__name__, fields, union=union, size=ctypes.sizeof(ctype))


def _as_dtype(spec):
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return None
    if isinstance(spec, np.dtype):
        return spec
    if isinstance(spec, type) and issubclass(spec, np.generic):
        return np.dtype(spec)
    return None


def _dtype(b: BtfBuilder, dtype, where: str) -> int:
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        type_id = _dtype(b, base, where)
        for length in reversed(shape):
            type_id = b.array(type_id, length)
        return type_id
    if dtype.names:
        fields = [(name, _dtype(b, dtype.fields[name][0], where), 0,
                   dtype.fields[name][1] * 8) for name in dtype.names]
        return b.struct("record", fields, size=dtype.itemsize)
    if dtype.byteorder == ">":
        raise InputError(f"big-endian dtype {dtype}: give the little-endian one and "
                         "--decode the fields", obj=where)
    if dtype.kind == "b":
        return b.integer("_Bool", 1, boolean=True)
    if dtype.kind in "iu":
        signed = dtype.kind == "i"
        return b.integer(f"{'s' if signed else 'u'}{dtype.itemsize * 8}", dtype.itemsize,
                         signed=signed)
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        return b.float("float" if dtype.itemsize == 4 else "double", dtype.itemsize)
    if dtype.kind in "SV":
        char = b.integer("char", 1, signed=True) if dtype.kind == "S" \
            else b.integer("u8", 1)
        return b.array(char, dtype.itemsize)
    raise InputError(f"dtype {dtype} has no BTF form", obj=where)
