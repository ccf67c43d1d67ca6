"""BTF parsing and building, without privileges.

The parser is checked against bpftool's own dump of the running kernel's BTF (every kind
occurs there), and the builder's C layout against ctypes, which lays structs out like the C
compiler.
"""

import ctypes
import os
import re
import shutil
import struct
import subprocess

import pytest

from bpfbatch.btf import Btf, BtfBuilder, Kind
from bpfbatch.errors import BpfBatchError

VMLINUX = "/sys/kernel/btf/vmlinux"


@pytest.fixture
def builder():
    with BtfBuilder() as b:
        yield b


def _bpftool_types(path):
    """``{id: (kind, name, attrs, lines)}`` from ``bpftool btf dump file``'s plain output."""
    out = subprocess.run(["bpftool", "btf", "dump", "file", path], check=True,
                         capture_output=True, text=True).stdout
    types = {}
    current = None
    for line in out.splitlines():
        head = re.match(r"\[(\d+)\] (\w+) '([^']*)'(.*)", line)
        if head:
            current = types[int(head[1])] = (head[2], head[3], dict(
                re.findall(r"(\w+)=([^\s,]+)", head[4])), [])
        else:
            current[3].append(line.strip())
    return types


@pytest.mark.skipif(not (os.access(VMLINUX, os.R_OK) and shutil.which("bpftool")),
                    reason="needs the kernel's BTF and bpftool")
def test_parse_matches_bpftool_on_the_kernel_btf():
    with open(VMLINUX, "rb") as f:
        btf = Btf.from_bytes(f.read())
    expected = _bpftool_types(VMLINUX)
    assert len(btf) == len(expected) + 1  # + void
    kinds_seen = set()
    for type_id, (kind, name, attrs, lines) in expected.items():
        t = btf[type_id]
        kinds_seen.add(t.kind)
        assert (t.kind.name, t.name or "(anon)") == (kind, name), type_id
        if "size" in attrs:
            assert t.size == int(attrs["size"]), type_id
        if t.kind in (Kind.PTR, Kind.TYPEDEF, Kind.CONST, Kind.VOLATILE, Kind.ARRAY, Kind.VAR):
            assert t.type == int(attrs["type_id"]), type_id
        if t.kind == Kind.ARRAY:
            assert (t.index_type, t.nelems) == (int(attrs["index_type_id"]),
                                                int(attrs["nr_elems"]))
        if t.kind == Kind.INT:
            assert (t.int_offset, t.bits) == (int(attrs["bits_offset"]), int(attrs["nr_bits"]))
        if t.kind in (Kind.STRUCT, Kind.UNION):
            ours = [f"'{m.name or '(anon)'}' type_id={m.type} bits_offset={m.bit_offset}"
                    + (f" bitfield_size={m.bitfield_size}" if m.bitfield_size else "")
                    for m in t.members]
            assert ours == lines, type_id
        if t.kind in (Kind.ENUM, Kind.ENUM64):
            ours = [f"'{n}' val={v}" for n, v in t.values]
            assert [line.split(" val=")[0] for line in lines] == [o.split(" val=")[0]
                                                                    for o in ours], type_id
    assert kinds_seen >= {Kind.INT, Kind.PTR, Kind.ARRAY, Kind.STRUCT, Kind.UNION, Kind.ENUM,
                          Kind.FWD, Kind.TYPEDEF, Kind.CONST, Kind.FUNC, Kind.FUNC_PROTO,
                          Kind.VAR, Kind.DATASEC}
    list_head = next(t for t in btf.types if t.name == "list_head" and t.kind == Kind.STRUCT)
    assert btf.size_of(list_head.id) == 16
    assert btf.name_of(list_head.id) == "struct list_head"


class _Inner(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint8), ("y", ctypes.c_int16)]


class _Outer(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint8), ("b", ctypes.c_uint64), ("c", ctypes.c_int16),
                ("name", ctypes.c_char * 5), ("in", _Inner), ("d", ctypes.c_uint32),
                ("e", ctypes.c_uint8)]


def test_builder_lays_out_like_the_c_compiler(builder):
    b = builder
    u8 = b.integer("unsigned char", 1)
    inner = b.struct("inner", [("x", u8), ("y", b.integer("short", 2, signed=True))])
    sid = b.struct("s", [("a", u8), ("b", b.integer("long long unsigned int", 8)),
                         ("c", b.integer("short", 2, signed=True)),
                         ("name", b.array(b.integer("char", 1, signed=True), 5)),
                         ("in", inner), ("d", b.integer("unsigned int", 4)), ("e", u8)])
    t = Btf.from_bytes(b.raw())[sid]
    assert {m.name: m.bit_offset // 8 for m in t.members} == {
        name: getattr(_Outer, name).offset for name, _ in _Outer._fields_}
    assert t.size == ctypes.sizeof(_Outer) and b.layout(sid) == (ctypes.sizeof(_Outer), 8)


def test_int128_aligns_to_16_bytes(builder):
    # x86-64 SysV: __int128 has 16-byte alignment (ctypes has no such type to compare with).
    b = builder
    sid = b.struct("s", [("a", b.integer("unsigned char", 1)),
                         ("big", b.integer("__int128", 16, signed=True))])
    t = Btf.from_bytes(b.raw())[sid]
    assert [m.bit_offset // 8 for m in t.members] == [0, 16] and t.size == 32


_BITS_C = r"""
#include <stdio.h>
#include <string.h>
struct bits { unsigned char a; unsigned int b:3; unsigned int c:30; unsigned char d:7;
              unsigned char e:2; };
#define SHOW(f, w) do { struct bits s; memset(&s, 0, sizeof(s)); s.f = (1u << w) - 1; \
    unsigned char *p = (unsigned char *)&s; printf(#f); \
    for (size_t i = 0; i < sizeof(s); i++) printf(" %02x", p[i]); printf("\n"); } while (0)
int main(void) { printf("size %zu\n", sizeof(struct bits));
    SHOW(b, 3); SHOW(c, 30); SHOW(d, 7); SHOW(e, 2); return 0; }
"""


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc to compare layouts with")
def test_builder_bitfields_lay_out_like_gcc(builder, tmp_path):
    src = tmp_path / "bits.c"
    src.write_text(_BITS_C)
    subprocess.run(["gcc", "-o", str(tmp_path / "bits"), str(src)], check=True)
    lines = subprocess.run([str(tmp_path / "bits")], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    size = int(lines[0].split()[1])
    positions = {}
    for line in lines[1:]:
        name, *hexbytes = line.split()
        value = int.from_bytes(bytes.fromhex("".join(hexbytes)), "little")
        positions[name] = ((value & -value).bit_length() - 1, value.bit_count())

    b = builder
    u32 = b.integer("unsigned int", 4)
    u8 = b.integer("unsigned char", 1)
    sid = b.struct("bits", [("a", u8), ("b", u32, 3), ("c", u32, 30), ("d", u8, 7),
                            ("e", u8, 2)])
    t = Btf.from_bytes(b.raw())[sid]
    assert {m.name: (m.bit_offset, m.bitfield_size) for m in t.members if m.bitfield_size} \
        == positions
    assert t.size == size


def test_builder_explicit_offsets_and_union(builder):
    b = builder
    u16 = b.integer("unsigned short", 2)
    u64 = b.integer("long long unsigned int", 8)
    uid = b.union("u", [("w", u16), ("q", u64)])
    sid = b.struct("s", [("x", u16, 0, 24), ("f", u16, 4, 40)], size=8)
    btf = Btf.from_bytes(b.raw())
    assert [(m.name, m.bit_offset) for m in btf[uid].members] == [("w", 0), ("q", 0)]
    assert btf[uid].kind == Kind.UNION and btf[uid].size == 8
    assert [(m.name, m.bit_offset, m.bitfield_size) for m in btf[sid].members] == [
        ("x", 24, 0), ("f", 40, 4)]
    assert btf[sid].size == 8


def test_typedef_and_modifiers_resolve(builder):
    b = builder
    u32 = b.integer("unsigned int", 4)
    alias = b.typedef("u32_t", b.const(b.volatile(u32)))
    arr = b.array(alias, 3)
    btf = Btf.from_bytes(b.raw())
    assert btf.resolve(alias) == u32
    assert btf.size_of(alias) == 4 and btf.size_of(arr) == 12
    assert btf.name_of(arr) == "u32_t[3]"


def _raw_btf(types: bytes, strings: bytes) -> bytes:
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
    return header + types + strings


def _info(kind, vlen=0, kflag=0):
    return kind << 24 | vlen | kflag << 31


def test_parse_kinds_the_builder_does_not_make():
    strings = b"\0f\0x\0.data\0E\0BIG\0t\0p\0"
    name = {s: strings.index(s.encode() + b"\0") for s in ("f", "x", ".data", "E", "BIG", "t", "p")}
    types = b"".join([
        struct.pack("<III", name["f"], _info(Kind.FLOAT), 8),                       # 1 float
        struct.pack("<III", name["x"], _info(Kind.VAR), 1) + struct.pack("<I", 1),  # 2 var
        struct.pack("<III", name[".data"], _info(Kind.DATASEC, 1), 8)
        + struct.pack("<III", 2, 0, 8),                                             # 3 datasec
        struct.pack("<III", name["E"], _info(Kind.ENUM64, 1, 1), 8)
        + struct.pack("<III", name["BIG"], 0xFFFFFFFF, 0x7FFFFFFF),                 # 4 enum64
        struct.pack("<III", 0, _info(Kind.FUNC_PROTO, 1), 1)
        + struct.pack("<II", name["p"], 1),                                         # 5 proto
        struct.pack("<III", name["t"], _info(Kind.DECL_TAG), 2) + struct.pack("<i", -1),
        struct.pack("<III", name["t"], _info(Kind.TYPE_TAG), 1),                    # 7
        struct.pack("<III", name["t"], _info(Kind.FWD, 0, 1), 0),                   # 8 union fwd
        struct.pack("<III", 0, _info(Kind.RESTRICT), 1),                            # 9
    ])
    btf = Btf.from_bytes(_raw_btf(types, strings))
    assert [t.kind for t in btf.types[1:]] == [
        Kind.FLOAT, Kind.VAR, Kind.DATASEC, Kind.ENUM64, Kind.FUNC_PROTO, Kind.DECL_TAG,
        Kind.TYPE_TAG, Kind.FWD, Kind.RESTRICT]
    assert btf[2].linkage == 1 and btf[2].type == 1
    assert btf[3].entries == ((2, 0, 8),) and btf[3].name == ".data"
    assert btf[4].values == (("BIG", 0x7FFFFFFF_FFFFFFFF),)
    assert btf[5].params == (("p", 1),)
    assert btf[6].component_idx == -1
    assert btf[8].kind_flag
    assert btf.size_of(2) == 8 and btf.resolve(9) == 1


def test_bad_blobs_are_refused():
    with pytest.raises(BpfBatchError, match="header"):
        Btf.from_bytes(b"\x9f\xeb")
    with pytest.raises(BpfBatchError, match="magic"):
        Btf.from_bytes(b"\x00" * 24)
    bad_kind = struct.pack("<III", 0, 31 << 24, 0)
    with pytest.raises(BpfBatchError, match="unknown kind"):
        Btf.from_bytes(_raw_btf(bad_kind, b"\0"))
    with pytest.raises(BpfBatchError, match="no BTF type 5"):
        Btf.from_bytes(_raw_btf(b"", b"\0"))[5]
