"""Renderers against the installed bpftool on real maps.

Each test creates a map (BTF-typed through :class:`BtfBuilder`, or without BTF), fills it with
per-key updates, renders it from :class:`Batch` objects and compares with
``bpftool -j map dump id N``: ``bpftool-json`` byte for byte, the typed ``json`` against
bpftool's ``formatted`` member. Batches are built from per-key lookups in get_next_key order
(bpftool's order); one test feeds the real batch cursor instead.
"""

import io
import json
import random
import shutil
import subprocess

import pytest

from bpfbatch import Map
from bpfbatch._sys import libbpf
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import NotFoundError
from bpfbatch.loader import BpfObject
from bpfbatch.map.cursor import Batch, BatchCursor, read_ahead
from bpfbatch.records.codec import map_codecs
from bpfbatch.formats.render import make_renderer
from tools.layoutgen import bpftool_spelling, formatted_as_value_rule

pytestmark = pytest.mark.skipif(not shutil.which("bpftool"), reason="needs bpftool")


def bpftool_dump(m: Map) -> bytes:
    return subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)], check=True,
                          capture_output=True).stdout


def per_key_batches(m: Map, size: int = 3) -> list[Batch]:
    """The map's elements in get_next_key order, cut into batches of ``size``."""
    keys, values = [], []
    key = m.next_key(None)
    while key is not None:
        keys.append(key)
        values.append(m.lookup(key))
        key = m.next_key(key)
    return [Batch(len(keys[i:i + size]), memoryview(b"".join(keys[i:i + size])),
                  memoryview(b"".join(values[i:i + size]))) for i in range(0, len(keys), size)]


def render(fmt: str, m: Map, batches) -> bytes:
    key, value = map_codecs(m.info)
    out = io.BytesIO()
    renderer = make_renderer(fmt, m.info, key, value, out)
    for batch in batches:
        renderer.write_batch(batch)
    renderer.close()
    return out.getvalue()


def assert_matches_bpftool(m: Map) -> list:
    """bpftool-json identical; typed json equal to bpftool's ``formatted`` where it has one,
    read with the value rule (``tools.layoutgen.as_value_rule``)."""
    reference = bpftool_dump(m)
    assert render("bpftool-json", m, per_key_batches(m)) == reference
    typed = json.loads(render("json", m, per_key_batches(m)))
    doc = json.loads(reference)
    assert len(typed) == len(doc) == len(json.loads(render("json", m, per_key_batches(m, 1000))))
    if m.info.btf_value_type_id:
        expected = formatted_as_value_rule(reference, Btf.from_kernel(m.info.btf_id), m.info)
        assert [bpftool_spelling(e) for e in typed] == expected
    return typed


# -- types --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def types():
    """A rich value struct, a struct key, and scalar types, loaded into the kernel."""
    with BtfBuilder() as b:
        t = {}
        u8 = b.integer("unsigned char", 1)
        s16 = b.integer("short", 2, signed=True)
        t["u32"] = u32 = b.integer("unsigned int", 4)
        u64 = b.integer("long long unsigned int", 8)
        char = b.integer("char", 1, signed=True)
        color = b.enum("color", {"RED": 0, "GREEN": 1, "BLUE": 2, "MINUS": -1})
        point = b.struct("point", [("x", s16), ("y", s16)])
        either = b.union("either", [("word", u32), ("bytes", b.array(u8, 4)),
                                    ("halves", b.array(s16, 2))])
        t["rich"] = b.struct("rich", [
            ("id", u64), ("comm", b.array(char, 16)), ("color", color), ("at", point),
            ("either", either), ("hist", b.array(u32, 3)),
            ("lo", u32, 3), ("mid", u32, 5), ("hi", u32, 24),
            # bool then padding: bpftool reads 4 bytes for a bool, the pad keeps them zero
            ("flag", b.integer("_Bool", 1, boolean=True)), ("pad", u32),
            ("small", u8), ("delta", s16), ("big", b.integer("__int128", 16, signed=True)),
            ("ptr", b.ptr(u8)), ("alias", b.typedef("u32_t", b.const(b.volatile(u32)))),
        ])
        t["flow"] = b.struct("flow", [("addr", u32), ("port", b.integer("unsigned short", 2)),
                                      ("proto", u8), ("dir", b.enum("dir", {"IN": 0, "OUT": 1},
                                                                    size=1))])
        t["pair"] = b.struct("pair", [("a", u64), ("b", u64)])
        t["odd"] = b.struct("odd", [("a", u32), ("b", u32), ("c", u32)])  # 12 bytes
        t["u64"] = u64
        t["wide"] = b.struct("wide", [("e", b.enum("big", {"HUGE": 2**63 + 5}, size=8)),
                                      ("f", b.float("double", 8)), ("after", u32)])
        t["fd"] = b.load()
        t["size"] = {name: b.layout(t[name])[0] for name in ("rich", "flow", "pair", "odd",
                                                              "wide")}
        yield t


def typed_map(types, map_type, key, value, max_entries=64):
    size = lambda name: types["size"].get(name) or {"u32": 4, "u64": 8}[name]  # noqa: E731
    return Map.create(map_type, size(key), size(value), max_entries, name="bb_compat",
                      btf_fd=types["fd"], btf_key_type_id=types[key],
                      btf_value_type_id=types[value])


def rich_value(i):
    return {
        "id": i * 1000003, "comm": ["curl", "a\\b\"c", "", "x" * 16][i % 4],
        "color": ["RED", "BLUE", "MINUS", 7][i % 4], "at": {"x": -i, "y": i * 3},
        "either": {"word": 0x01020304 + i}, "hist": [i, i * 2, 2**32 - 1],
        "lo": i % 8, "mid": i % 32, "hi": (i * 7919) % (1 << 24), "flag": bool(i % 2),
        "small": i % 256, "delta": -i * 100, "big": (-1) ** i * (i << 70),
        "ptr": 0xFFFF888000000000 + i, "alias": i, "pad": 0,
    }


# -- the tests ----------------------------------------------------------------------------

@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.ARRAY, MapType.LRU_HASH])
def test_rich_struct(types, map_type):
    with typed_map(types, map_type, "u32", "rich", max_entries=8) as m:
        key, value = map_codecs(m.info)
        for i in range(8):
            m.update(key.encode(i), value.encode(rich_value(i)))
        typed = assert_matches_bpftool(m)
    by_key = {entry["key"]: entry["value"] for entry in typed}
    assert by_key[1]["comm"] == 'a\\b"c' and by_key[3]["comm"] == "x" * 16  # full length
    assert by_key[2]["color"] == "MINUS" and by_key[3]["color"] == 7
    assert by_key[5]["hi"] == hex((5 * 7919) % (1 << 24))
    assert by_key[1]["big"] == hex((1 << 128) - (1 << 70))


def test_struct_key_and_small_enum(types):
    with typed_map(types, MapType.HASH, "flow", "pair") as m:
        key, value = map_codecs(m.info)
        for i in range(10):
            m.update(key.encode({"addr": 0x0A000001 + i, "port": 443 + i, "proto": 6,
                                 "dir": "OUT" if i % 2 else "IN"}),
                     value.encode({"a": i, "b": 2**64 - 1 - i}))
        typed = assert_matches_bpftool(m)
    assert {e["key"]["dir"] for e in typed} == {"IN", "OUT"}


@pytest.mark.parametrize("map_type", [MapType.PERCPU_HASH, MapType.PERCPU_ARRAY,
                                      MapType.LRU_PERCPU_HASH])
@pytest.mark.parametrize("value", ["u32", "odd", "pair"])
def test_per_cpu(types, map_type, value):
    with typed_map(types, map_type, "u32", value, max_entries=6) as m:
        key, codec = map_codecs(m.info)
        ncpus = libbpf.num_possible_cpus()
        sample = {"u32": lambda i, c: i * 10 + c,
                  "odd": lambda i, c: {"a": i, "b": c, "c": i * c},
                  "pair": lambda i, c: {"a": i, "b": 2**64 - 1 - c}}[value]
        for i in range(6):
            m.update(key.encode(i), codec.encode([sample(i, c) for c in range(ncpus)]))
        typed = assert_matches_bpftool(m)
    assert [v["cpu"] for v in typed[0]["values"]] == list(range(ncpus))


@pytest.mark.parametrize("map_type,value_size", [
    (MapType.HASH, 16), (MapType.ARRAY, 5), (MapType.PERCPU_HASH, 12),
    (MapType.PERCPU_ARRAY, 4)])
def test_no_btf(map_type, value_size):
    with Map.create(map_type, 4, value_size, 5, name="bb_compat_raw") as m:
        key, value = map_codecs(m.info)
        assert not value.typed
        for i in range(5):
            m.update(i.to_bytes(4, "little"), value.encode(bytes([i + 1]) * value_size))
        typed = assert_matches_bpftool(m)
    assert sorted(e["key"][0] for e in typed) == ["0x00", "0x01", "0x02", "0x03", "0x04"]


def test_empty_map(types):
    with typed_map(types, MapType.HASH, "u32", "rich") as m:
        assert render("bpftool-json", m, []) == bpftool_dump(m) == b"[]\n"


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_ARRAY])
def test_unsupported_kind_ends_the_entry_like_bpftool(types, map_type):
    # A FLOAT member: bpftool prints "(unsupported-kind", stops the struct there and, for a
    # per-CPU map, the list of CPUs after the first.
    with typed_map(types, map_type, "u32", "wide", max_entries=4) as m:
        key, value = map_codecs(m.info)
        for i in range(3):
            m.update(key.encode(i), value.encode({"e": "HUGE" if i else 3, "f": i / 2,
                                                  "after": i}))
        reference = bpftool_dump(m)
        assert b"(unsupported-kind}" in reference
        assert render("bpftool-json", m, per_key_batches(m)) == reference
        typed = json.loads(render("json", m, per_key_batches(m)))
    values = [e["value"] if "value" in e else e["values"][0]["value"] for e in typed]
    assert sorted(v["f"] for v in values)[-3:] == [0.0, 0.5, 1.0]


def test_fed_by_the_batch_cursor(types):
    """The real cursor in small batches: output identical to bpftool across batch seams."""
    with typed_map(types, MapType.HASH, "u32", "pair", max_entries=512) as m:
        key, value = map_codecs(m.info)
        for i in range(300):
            m.update(key.encode(i * 7), value.encode({"a": i, "b": i * i}))
        reference = bpftool_dump(m)
        assert render("bpftool-json", m, BatchCursor(m, batch_size=64)) == reference
        assert render("bpftool-json", m, read_ahead(BatchCursor(m, batch_size=64))) == reference
        lines = render("jsonl", m, BatchCursor(m, batch_size=64)).splitlines()
    assert [json.loads(line) for line in lines] == [e["formatted"]
                                                    for e in json.loads(reference)]


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_HASH])
def test_random_bytes(types, map_type):
    """Arbitrary bytes (non-string char arrays, unnamed enum values, pad bytes, bool pad):
    still byte for byte what bpftool prints."""
    rng = random.Random(20261130)
    with typed_map(types, map_type, "flow", "rich", max_entries=64) as m:
        for _ in range(40):
            m.update(rng.randbytes(m.info.key_size), rng.randbytes(m.info.value_stride))
        assert render("bpftool-json", m, per_key_batches(m, 7)) == bpftool_dump(m)


@pytest.fixture
def tcptop():
    try:
        obj = BpfObject.package("tcptop")
    except NotFoundError as exc:
        pytest.skip(str(exc))
    with obj:
        obj.load()
        yield obj


def test_clang_compiled_object(tcptop):
    """BTF from clang: a struct key map filled with random bytes, and the .bss/.rodata
    global-data maps (DATASEC values, no key type)."""
    rng = random.Random(7)
    flows = tcptop.map("flows_a")
    for _ in range(20):
        flows.update(rng.randbytes(flows.info.key_size), rng.randbytes(flows.info.value_size))
    for name in ("flows_a", ".bss", ".rodata"):
        m = tcptop.map(name)
        assert render("bpftool-json", m, per_key_batches(m)) == bpftool_dump(m), name
    bss = json.loads(render("json", tcptop.map(".bss"), per_key_batches(tcptop.map(".bss"))))
    assert bss[0]["value"] == {".bss": [{"dropped_events": 0}, {"dropped_bytes": 0}]}
