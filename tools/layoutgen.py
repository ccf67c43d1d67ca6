"""Random C record layouts, compiled by clang into BTF-typed maps, filled with random bytes:
the outside oracle of the codecs is whatever ``bpftool -j map dump`` prints for them.

:func:`generate` writes, from a seed, one ``.bpf.c`` holding ``count`` map definitions, each
with its own random value type (and, for some hash maps, a random key type): bitfields of
every width, ``_Bool`` at every offset (also in arrays and bitfields), plain, packed and
fixed-type enums of every size and signedness (``enum x : __u8``, enum64), unions, anonymous
struct and union members, nested and multi-dimensional arrays, char arrays (typedef'd too),
``__int128``, floats, pointers, qualifiers, packed and over-aligned structs. :func:`build`
compiles it with one clang run and loads every map at once (an object of maps only).
:func:`fill` writes random bytes into each map, except where bpftool itself could not read
them back: bool bytes get only 0 or 1 (bpftool reads a C ``bool``; anything else is undefined
behaviour in bpftool), and some char arrays get a printable string, so that both of
bpftool's char-array forms come up.

``python -m tools.layoutgen [--seed S] [--count N] [--rounds R]`` is the long mode: R rounds of
N layouts each compared with the installed bpftool, byte for byte (``-o bpftool-json``); it
prints one line per mismatching map and a summary. The test suite runs a fixed seed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import io
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from bpfbatch import Map
from bpfbatch._sys import libbpf
from bpfbatch.btf import INT_BOOL, INT_CHAR, MODIFIERS, Btf, Kind
from bpfbatch.loader import BpfObject
from bpfbatch.map.cursor import BatchCursor
from bpfbatch.records.codec import map_codecs
from bpfbatch.formats.render import make_renderer

CLANG = "clang-16"
ENTRIES = 6  # elements per map: enough for several random records, cheap to dump

_SCALARS = ["char", "signed char", "unsigned char", "short", "unsigned short", "int",
            "unsigned int", "long", "unsigned long", "long long", "unsigned long long",
            "__s8", "__u8", "__s16", "__u16", "__s32", "__u32", "__s64", "__u64"]
_BITFIELD_BASES = [("unsigned int", 32), ("int", 32), ("unsigned char", 8), ("signed char", 8),
                   ("unsigned short", 16), ("short", 16), ("__u64", 64), ("__s64", 64),
                   ("_Bool", 1)]
# Members the automatic decoders show (a __be32 whose name ends in "addr" as IPv4).
_DECODED = ["__be16 {}", "__be32 {}addr", "__be32 {}", "__be64 {}", "struct in6_addr {}",
            "__be16 {}[2]"]
# Spelled as C types: clang 16 encodes an enum on a typedef such as __s16 as UNSIGNED.
_ENUM_BASES = [("unsigned char", 8, False), ("signed char", 8, True),
               ("unsigned short", 16, False), ("short", 16, True), ("unsigned int", 32, False),
               ("int", 32, True), ("unsigned long long", 64, False), ("long long", 64, True)]


@dataclasses.dataclass(frozen=True)
class Features:
    """Which C features a generated layout may use (all, by default)."""

    bools: bool = True
    anonymous: bool = True
    unsigned_enums: bool = True
    floats: bool = True
    #: Fields the automatic decoders show (``__be16``, ``__be32 *addr``, ``struct
    #: in6_addr``, ...). Off by default: turning it on changes every layout of a seed.
    decoded: bool = False


CORE = Features(bools=False, anonymous=False, unsigned_enums=False, floats=False)


class _Writer:
    """Declarations for one translation unit: named types first, then the maps."""

    def __init__(self, rng: random.Random, features: Features):
        self.rng = rng
        self.features = features
        self.decls: list[str] = []
        self.counter = 0
        self.enums: list[str] = []
        self.typedefs: list[str] = []

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # -- named types ---------------------------------------------------------------------

    def enum(self) -> str:
        rng, name = self.rng, self.fresh("e")
        choice = rng.randrange(4)
        if choice == 0:  # plain: int-sized, signed when an enumerator is negative
            base, bits, signed = None, 32, rng.random() < 0.5
        elif choice == 1:  # packed: the smallest size that holds the values
            base, bits, signed = "packed", rng.choice([8, 16, 32]), rng.random() < 0.5
        else:
            options = [b for b in _ENUM_BASES if self.features.unsigned_enums or b[2]]
            base, bits, signed = rng.choice(options)
        low = -(1 << (bits - 1)) if signed else 0
        high = (1 << (bits - 1 if signed else bits)) - 1
        if base is None and not signed:
            high = (1 << 31) - 1  # a plain enum stays an int unless a value needs more
        if not signed and not self.features.unsigned_enums:
            high = min(high, (1 << (bits - 1)) - 1)
        values = sorted({rng.choice([low, high, 0, 1, rng.randint(low, high)])
                         for _ in range(rng.randint(1, 5))})
        body = ", ".join(f"{name.upper()}_{i} = {_c_int(v)}" for i, v in enumerate(values))
        if base == "packed":
            self.decls.append(f"enum __attribute__((packed)) {name} {{ {body} }};")
        elif base:
            self.decls.append(f"enum {name} : {base} {{ {body} }};")
        else:
            self.decls.append(f"enum {name} {{ {body} }};")
        return f"enum {name}"

    # -- members -------------------------------------------------------------------------

    def member(self, depth: int, floats: bool = True) -> str:
        """One member declaration (without the ';'); no float when not ``floats``."""
        rng, f = self.rng, self.features
        name = self.fresh("f")
        if f.decoded and rng.random() < 0.2:
            return rng.choice(_DECODED).format(name)
        roll = rng.random()
        if roll < 0.25:
            return f"{rng.choice(_SCALARS)} {name}"
        if roll < 0.33 and f.bools:
            return f"_Bool {name}" + (f"[{rng.randint(1, 5)}]" if rng.random() < 0.3 else "")
        if roll < 0.45:
            return self.bitfield(name)
        if roll < 0.53:
            return f"{self.enum()} {name}"
        if roll < 0.62:
            n = rng.choice([1, 2, 3, 4, 8, 15, 16, 17])
            elem = rng.choice(["char", "char", "unsigned char", "signed char", "chr_t"])
            if elem == "chr_t":
                self._typedef("typedef char chr_t;")
            return f"{elem} {name}[{n}]"
        if roll < 0.68:
            dims = "".join(f"[{rng.randint(1, 3)}]" for _ in range(rng.randint(1, 3)))
            return f"{rng.choice(_SCALARS + ['__u64'])} {name}{dims}"
        if roll < 0.72:
            return f"{rng.choice(['__int128', 'unsigned __int128'])} {name}"
        if roll < 0.75 and f.floats and floats:
            return f"{rng.choice(['float', 'double'])} {name}"
        if roll < 0.78:
            return f"{rng.choice(['void *', 'const int *', 'char *'])}{name}"
        if roll < 0.81:
            return f"{rng.choice(['const', 'volatile', 'const volatile'])} " \
                   f"{rng.choice(_SCALARS)} {name}"
        if roll < 0.84:
            self._typedef("typedef char name16_t[16];")
            return f"name16_t {name}"
        if depth >= 3:
            return f"__u32 {name}"
        inner = self.aggregate(depth + 1)
        if f.anonymous and rng.random() < 0.35:
            return inner  # an anonymous struct or union member
        return f"{inner} {name}" + (f"[{rng.randint(1, 3)}]" if rng.random() < 0.2 else "")

    def bitfield(self, name: str) -> str:
        rng = self.rng
        options = [b for b in _BITFIELD_BASES if self.features.bools or b[0] != "_Bool"]
        base, width = rng.choice(options)
        if rng.random() < 0.15 and self.features.unsigned_enums:
            base, width = self.enum(), 8  # an enum bitfield (clang: 8 bits fit any here)
        return f"{base} {name}:{rng.randint(1, width)}"

    def aggregate(self, depth: int, name: str = "") -> str:
        """A struct or union type (anonymous unless ``name``) with random members."""
        rng = self.rng
        kind = "union" if rng.random() < 0.25 else "struct"
        attrs = ""
        if kind == "struct" and rng.random() < 0.15:
            attrs = " __attribute__((packed))"
        elif rng.random() < 0.1:
            attrs = " __attribute__((aligned(16)))"
        # The kernel refuses a float member that is not aligned to its size (packed).
        members = [self.member(depth, floats=not attrs.endswith("((packed))"))
                   for _ in range(rng.randint(1, 6 if depth else 9))]
        if any(":" in m for m in members):
            # The kernel checks a non-bitfield enum member of a struct or union that has
            # bitfields as if it were 4 bytes (btf_enum_check_kflag_member): a 1- or 2-byte
            # enum less than 4 bytes before the end is refused ("Member exceeds
            # struct_size"), and libbpf then silently drops the object's BTF.
            members.append(f"__u32 {self.fresh('tail')}")
        return f"{kind}{attrs} {name}{' ' if name else ''}{{ {'; '.join(members)}; }}"

    def _typedef(self, text: str) -> None:
        if text not in self.typedefs:
            self.typedefs.append(text)

    def record(self) -> str:
        """A named top-level record type; returns its C spelling."""
        name = self.fresh("r")
        text = self.aggregate(0, name)
        self.decls.append(text + ";")
        return f"{text.split(' ', 1)[0]} {name}"


def _c_int(value: int) -> str:
    if value == -(1 << 63):
        return "(-0x7fffffffffffffffLL - 1)"
    if value < 0:
        return f"({value}LL)"
    return f"{value}ULL" if value >= 1 << 31 else str(value)


_MAP_TYPES = ["BPF_MAP_TYPE_HASH", "BPF_MAP_TYPE_ARRAY", "BPF_MAP_TYPE_PERCPU_HASH",
              "BPF_MAP_TYPE_PERCPU_ARRAY", "BPF_MAP_TYPE_LRU_HASH"]


def generate(seed: int, count: int, features: Features = Features()) -> str:
    """The C source of ``count`` maps named ``m0``.. with random record layouts."""
    rng = random.Random(seed)
    w = _Writer(rng, features)
    maps = []
    for i in range(count):
        map_type = rng.choice(_MAP_TYPES)
        value = w.record()
        key = "__u32"
        if "HASH" in map_type and rng.random() < 0.3:
            key = w.record()
        # LRU maps get room to spare: near max_entries they evict (per-CPU free lists).
        capacity = 8 * ENTRIES if "LRU" in map_type else ENTRIES
        maps.append(f"struct {{ __uint(type, {map_type}); __uint(max_entries, {capacity}); "
                    f"__type(key, {key}); __type(value, {value}); }} m{i} SEC(\".maps\");")
    includes = ["#include <linux/bpf.h>", "#include <bpf/bpf_helpers.h>"]
    if features.decoded:
        includes.append("#include <linux/in6.h>")
    return "\n".join([*includes, *w.typedefs, *w.decls, *maps, ""])


def build(source: str, workdir: Path) -> BpfObject:
    """Compile ``source`` with one clang run and load every map (the caller closes it)."""
    c_file, obj_file = workdir / "layouts.bpf.c", workdir / "layouts.bpf.o"
    c_file.write_text(source)
    subprocess.run([CLANG, "-g", "-O2", "-target", "bpf", "-Wno-fixed-enum-extension",
                    "-I/usr/include/x86_64-linux-gnu", "-c", str(c_file), "-o", str(obj_file)],
                   check=True, capture_output=True, text=True)
    obj = BpfObject(obj_file)
    try:
        obj.load()
        untyped = [name for name in map_names(obj) if not obj.map(name).info.btf_value_type_id]
        if untyped:  # libbpf loads the maps without BTF when the kernel refuses it
            raise RuntimeError(f"the kernel refused the BTF of {obj_file} (maps without it: "
                               f"{', '.join(untyped[:5])}...)")
    except BaseException:
        obj.close()
        raise
    return obj


def map_names(obj: BpfObject) -> list[str]:
    section = obj.btf.find(Kind.DATASEC, ".maps")
    return [obj.btf[var].name for var, _, _ in section.entries]


# -- filling -----------------------------------------------------------------------------


def _walk(btf: Btf, type_id: int, offset: int, found: dict[str, list]) -> None:
    """Collect ``bool`` byte offsets and ``char[]`` (offset, length) pairs under a type."""
    t = btf[type_id]
    while t.kind in MODIFIERS or t.kind == Kind.TYPEDEF:
        t = btf[t.type]
    if t.kind == Kind.INT and t.encoding & INT_BOOL:
        found["bools"].append(offset)
    elif t.kind in (Kind.STRUCT, Kind.UNION):
        for m in t.members:
            if not m.bitfield_size:  # a bool bitfield is printed as raw bits: any bit goes
                _walk(btf, m.type, offset + m.bit_offset // 8, found)
    elif t.kind == Kind.ARRAY:
        elem = btf[t.type]
        while elem.kind in MODIFIERS:
            elem = btf[elem.type]
        if elem.kind == Kind.INT and elem.size == 1 and (elem.encoding == INT_CHAR
                                                          or elem.name == "char"):
            found["strings"].append((offset, t.nelems))
        size = btf.size_of(t.type)
        for i in range(t.nelems):
            _walk(btf, t.type, offset + i * size, found)


def random_record(rng: random.Random, btf: Btf, type_id: int, size: int) -> bytearray:
    """``size`` random bytes for a record of ``type_id``: bools 0/1, and about half of the
    char arrays a printable string ending in NUL (the rest stays random bytes)."""
    raw = bytearray(rng.randbytes(size))
    found: dict[str, list] = {"bools": [], "strings": []}
    _walk(btf, type_id, 0, found)
    for offset, length in found["strings"]:
        if rng.random() < 0.5:
            text = bytes(rng.choice(b" !\"#%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~\t")
                         for _ in range(rng.randrange(length)))
            raw[offset:offset + len(text) + 1] = text + b"\0"
    for offset in found["bools"]:  # last: a string may cover a union's bool
        raw[offset] = rng.getrandbits(1)
    return raw


def fill(m: Map, btf: Btf, rng: random.Random) -> None:
    """``ENTRIES`` random elements (random keys for hash maps, every index for arrays)."""
    info = m.info
    ncpus = libbpf.num_possible_cpus() if info.percpu else 1
    for i in range(ENTRIES):
        if "array" in info.type_name:
            key = i.to_bytes(4, "little")
        else:
            key = bytes(random_record(rng, btf, info.btf_key_type_id, info.key_size))
        value = bytearray()
        for _ in range(ncpus):
            value += random_record(rng, btf, info.btf_value_type_id, info.value_size)
            value += bytes(info.value_stride // ncpus - info.value_size) if info.percpu else b""
        m.update(key, bytes(value))


# -- comparing ---------------------------------------------------------------------------


def bpftool_dump(m: Map) -> bytes:
    return subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)], check=True,
                          capture_output=True).stdout


def render(m: Map, fmt: str, btf: Btf | None = None) -> bytes:
    """``m`` as ``bpfbatch dump -o fmt`` prints it, read in 4-entry batches. ``btf``: the
    map's kernel BTF (:func:`kernel_btf`) when the caller holds it; the maps of one object
    share one, whose parse costs more than the map's rendering (hundreds of layouts: 9,000
    types)."""
    key, value = map_codecs(m.info, btf)
    out = io.BytesIO()
    renderer = make_renderer(fmt, m.info, key, value, out)
    for batch in BatchCursor(m, batch_size=4):  # several batch seams per map
        renderer.write_batch(batch)
    renderer.close()
    return out.getvalue()


def kernel_btf(maps: list[Map]) -> Btf:
    """The BTF the kernel holds for ``maps``, all loaded from one object (so one BTF id),
    read once: what ``map_codecs`` reads from the kernel for each of them."""
    ids = {m.info.btf_id for m in maps}
    if len(ids) != 1:
        raise ValueError(f"maps of {len(ids)} BTF objects, not one")
    return Btf.from_kernel(ids.pop())


def bpftool_spelling(value):
    """A decoded JSON value as bpftool 7.1 spells its strings: a backslash comes out as
    ``\\n`` (its json_writer's bug, which the typed JSON does not copy)."""
    if isinstance(value, str):
        return value.replace("\\", "\n")
    if isinstance(value, dict):
        return {k: bpftool_spelling(v) for k, v in value.items()}
    if isinstance(value, list):
        return [bpftool_spelling(v) for v in value]
    return value


def as_value_rule(btf: Btf, type_id: int, value):
    """bpftool's ``formatted`` value of type ``type_id`` (parsed with objects as lists of
    pairs, so that duplicate ``""`` keys survive) as the value rule prints it: an unsigned
    enum unsigned (and by name when that names an enumerator), an anonymous member's fields
    in the record holding it, no unnamed bitfield (padding), a char array printed as a string
    when its bytes before the NUL are text (tab, LF, CR included) or it has no NUL. An
    independent reading of bpftool's output, for comparing the typed JSON with it; strings
    stay in bpftool's spelling (:func:`bpftool_spelling`)."""
    t = btf[type_id]
    while t.kind in MODIFIERS or t.kind == Kind.TYPEDEF:
        t = btf[t.type]
    if t.kind in (Kind.STRUCT, Kind.UNION):
        out = {}
        for member, (name, item) in zip(t.members, value):
            assert member.name == name
            if not name and not member.bitfield_size:
                out.update(as_value_rule(btf, member.type, item))
            elif name:
                out[name] = item if member.bitfield_size else as_value_rule(btf, member.type,
                                                                             item)
        return out
    if t.kind == Kind.ARRAY and isinstance(value, list):
        if _is_char(btf, t.type) and all(isinstance(v, int) for v in value):
            raw = bytes(v & 0xFF for v in value)
            text, _, _ = raw.partition(b"\0")
            if all(0x20 <= c < 0x7F or c in b"\t\n\r" for c in text):
                return bpftool_spelling(text.decode())
        return [as_value_rule(btf, t.type, item) for item in value]
    if t.kind in (Kind.ENUM, Kind.ENUM64) and isinstance(value, int):
        signed = t.kind_flag or any(v < 0 for _, v in t.values)
        if not signed:
            unsigned = value % (1 << (8 * t.size))
            names = {v % (1 << (8 * t.size)): n for n, v in reversed(t.values)}
            return names.get(unsigned, unsigned)
    return value


def _is_char(btf: Btf, type_id: int) -> bool:
    elem = btf[type_id]
    while elem.kind in MODIFIERS:
        elem = btf[elem.type]
    return elem.kind == Kind.INT and elem.size == 1 and (elem.encoding == INT_CHAR
                                                         or elem.name == "char")


def formatted_as_value_rule(dump: bytes, btf: Btf, info) -> list:
    """Each entry of a ``bpftool -j map dump`` as the typed JSON prints it, from
    ``formatted`` (see :func:`as_value_rule`)."""
    out = []
    for entry in json.loads(dump, object_pairs_hook=list):
        formatted = dict(dict(entry)["formatted"])
        record = {"key": as_value_rule(btf, info.btf_key_type_id, formatted["key"])}
        if "values" in formatted:
            record["values"] = [{"cpu": dict(c)["cpu"], "value": as_value_rule(
                btf, info.btf_value_type_id, dict(c)["value"])} for c in formatted["values"]]
        else:
            record["value"] = as_value_rule(btf, info.btf_value_type_id, formatted["value"])
        out.append(record)
    return out


def bpftool_dumps(maps: list[Map], workers: int = 2) -> list[bytes]:
    """bpftool's dumps of ``maps``, a few bpftool processes at a time."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(bpftool_dump, maps))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.layoutgen", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=300, help="layouts per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    compared = mismatched = 0
    for round_ in range(args.rounds):
        seed = args.seed + round_
        with tempfile.TemporaryDirectory() as tmp:
            obj = build(generate(seed, args.count), Path(tmp))
            with obj:
                rng = random.Random(seed)
                maps = [obj.map(name) for name in map_names(obj)]
                for m in maps:
                    fill(m, obj.btf, rng)
                btf = kernel_btf(maps)
                for name, m, theirs in zip(map_names(obj), maps, bpftool_dumps(maps)):
                    compared += 1
                    if render(m, "bpftool-json", btf) != theirs:
                        mismatched += 1
                        print(f"seed {seed} map {name}: bpftool-json differs from bpftool")
    print(f"{compared} layouts compared with bpftool, {mismatched} differ")
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
