"""Codec.encode_batch against its definition: the concatenation of ``encode`` over the
records, with the same error (type, message, path) as the first failing record's, for every
layout; and the vectorised path really taking typical records (no record-by-record pass).
Also the loader on top of it: chunk boundaries, line numbers and which error comes first."""

from __future__ import annotations

import io
import json
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.formats import read
from bpfbatch.records.codec import BtfCodec, PerCpuCodec, RawCodec
from bpfbatch.records.layout import Array, Bool, Char, CharArray, Enum, Float, Int, Struct


def compile_types(build, *, default_zero=True):
    """The records here leave fields out on purpose (the properties compare the batch path
    with encoding one by one), so missing fields are zeros unless ``default_zero=False``."""
    with BtfBuilder() as b:
        type_id = build(b)
        return BtfCodec(Btf.from_bytes(b.raw()), type_id, default_zero=default_zero)


def scalar(size, signed=False, **kind):
    return lambda b: b.integer("n", size, signed=signed, **kind)


def flow(b):
    u8, u16, u32 = b.integer("__u8", 1), b.integer("__u16", 2), b.integer("__u32", 4)
    return b.struct("flow", [("addr", u32), ("port", u16), ("proto", u8)])


def mixed(b):
    """Every leaf kind the batch path writes, nested, with padding between members."""
    u16, s32 = b.integer("__u16", 2), b.integer("int", 4, signed=True)
    u64, s64 = b.integer("__u64", 8), b.integer("long", 8, signed=True)
    char = b.integer("char", 1, signed=True)
    point = b.struct("point", [("x", b.integer("short", 2, signed=True)), ("y", u16)])
    return b.struct("mixed", [
        ("id", u64), ("delta", s64), ("name", b.array(char, 6)), ("level", s32),
        ("color", b.enum("color", {"RED": 0, "GREEN": 1, "MINUS": -1})),
        ("flag", b.integer("_Bool", 1, boolean=True)),
        ("letter", b.integer("c", 1, char=True)),
        ("ratio", b.float("double", 8)), ("share", b.float("float", 4)),
        ("at", point), ("path", b.array(point, 2)), ("hist", b.array(u16, 3)),
        ("", b.struct("", [("anon", b.integer("u8", 1))])),
        ("big", b.enum("big", {"HUGE": 2**63 + 5, "ONE": 1}, size=8)),
    ])


def with_union(b):
    u32, u8 = b.integer("u32", 4), b.integer("u8", 1)
    either = b.union("either", [("word", u32), ("bytes", b.array(u8, 4))])
    return b.struct("s", [("n", u32), ("either", either)])


def with_bitfields(b):
    u32 = b.integer("u32", 4)
    return b.struct("s", [("lo", u32, 3), ("hi", u32, 29), ("n", u32)])


def with_int128(b):
    return b.struct("s", [("big", b.integer("__int128", 16, signed=True)),
                          ("n", b.integer("u32", 4))])


LAYOUTS = {
    **{f"{'s' if signed else 'u'}{size * 8}": scalar(size, signed)
       for size in (1, 2, 4, 8) for signed in (False, True)},
    "bool": scalar(1, boolean=True),
    "char": scalar(1, char=True),
    "chars": lambda b: b.array(b.integer("char", 1, signed=True), 8),
    "enum8": lambda b: b.enum("e", {"A": 1, "B": -1}, size=1),
    "float": lambda b: b.float("float", 4),
    "array2d": lambda b: b.array(b.array(b.integer("u8", 1), 2), 3),
    "flow": flow,
    "mixed": mixed,
    "union": with_union,
    "bitfields": with_bitfields,
    "int128": with_int128,
}
CODECS = {name: compile_types(build) for name, build in LAYOUTS.items()}

# -- values: mostly what encode accepts, sometimes what it does not ------------------------

JUNK = st.one_of(st.none(), st.floats(allow_nan=False), st.text(max_size=3),
                 st.lists(st.integers(0, 3), max_size=2), st.just({"x": 1}), st.just(1.0))


def int_text(n):
    return st.sampled_from([hex(n), str(n), f" {n}", f"0b{n:b}" if n >= 0 else str(n)])


def leaf_values(node):
    if isinstance(node, Enum):
        names = [name for name, _ in node.enumerators]
        bits = node.size * 8
        return st.one_of(st.sampled_from(names), st.integers(-(1 << bits), 1 << bits),
                         st.just("NOPE"), st.integers(0, 9).flatmap(int_text))
    if isinstance(node, Int):
        bits = node.size * 8
        edge = st.sampled_from([-(1 << (bits - 1)) - 1, -(1 << (bits - 1)), -1, 0,
                                (1 << bits) - 1, 1 << bits, 1 << 70])
        return st.one_of(st.integers(-(1 << (bits - 1)), (1 << bits) - 1), edge,
                         st.booleans(), st.integers(-5, 300).flatmap(int_text))
    if isinstance(node, Bool):
        return st.sampled_from([True, False, 0, 1, 2, -1, "true", "false", 1.0, "yes"])
    if isinstance(node, Char):
        return st.one_of(st.integers(-130, 260), st.characters(max_codepoint=300),
                         st.just("ab"))
    if isinstance(node, Float):
        return st.one_of(st.floats(), st.integers(-(1 << 80), 1 << 80), st.just(1 << 1100),
                         st.sampled_from(["NaN", "Infinity", "-Infinity", "1.5", True, "1e400",
                                          "-1E+309"]))
    raise AssertionError(node)


def node_values(node):
    if isinstance(node, CharArray):
        n = len(node.elems)
        return st.one_of(st.text(st.characters(max_codepoint=0x7F), max_size=n),
                         st.text(st.characters(max_codepoint=0x7F), min_size=n, max_size=n + 1),
                         st.text(max_size=n + 2),
                         st.lists(st.integers(-1, 256), min_size=n, max_size=n))
    if isinstance(node, Array):
        n = len(node.elems)
        items = node_values(node.elems[0]) if node.elems else st.nothing()
        return st.one_of(st.lists(items, min_size=n, max_size=n),
                         st.lists(items, min_size=n, max_size=n).map(tuple),
                         st.lists(items, max_size=n + 1))
    if isinstance(node, Struct):
        names = {name: node_values(member) for name, member in node.members}
        return st.one_of(
            st.fixed_dictionaries(names),
            st.fixed_dictionaries({}, optional=names),
            st.fixed_dictionaries({}, optional={**names, "extra": st.integers()}))
    if isinstance(node, (Int, Bool, Char, Float, Enum)):
        return leaf_values(node)
    return st.integers(0, 255)  # bitfields and the like: encode decides


def values_of(node):
    return st.one_of(node_values(node), node_values(node), JUNK)


def outcome(run):
    """The bytes, or what was raised: (type, message, obj)."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 -- compared, not handled
        return type(exc), str(exc), getattr(exc, "obj", None)


def assert_batch_is_encode_per_record(codec, values):
    def where(i):
        return f"in.jsonl:{i + 1}: value"
    expected = outcome(lambda: b"".join(codec.encode(v, where(i)) for i, v in enumerate(values)))
    assert outcome(lambda: codec.encode_batch(values, where)) == expected


@pytest.mark.parametrize("name", list(LAYOUTS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_batch_equals_encode_per_record(name, data):
    codec = CODECS[name]
    values = data.draw(st.lists(values_of(codec.node), max_size=12))
    assert_batch_is_encode_per_record(codec, values)


@pytest.mark.parametrize("field,value,message", [
    ("share", 1e39, "value.share: 1e+39 is beyond the range of a 4-byte float"),
    ("share", -3.5e38, "value.share: -3.5e+38 is beyond the range of a 4-byte float"),
    ("share", 1 << 200, "value.share: an integer of 201 bits is beyond the range"),
    ("ratio", 1 << 1100, "value.ratio: an integer of 1101 bits is beyond the range"),
    ("ratio", "1e400", "value.ratio: 1e400 is beyond the range of a 8-byte float"),
])
@pytest.mark.parametrize("batch", [False, True])
def test_float_beyond_its_field_is_an_input_error_naming_the_field(field, value, message,
                                                                   batch):
    codec = CODECS["mixed"]
    good = {"ratio": 1.5, "share": 2.5}
    records = [good, dict(good, **{field: value}), good]
    with pytest.raises(InputError) as exc:
        if batch:
            codec.encode_batch(records, lambda i: f"in.jsonl:{i + 1}: value")
        else:
            for i, record in enumerate(records):
                codec.encode(record, f"in.jsonl:{i + 1}: value")
    assert str(exc.value).startswith(f"in.jsonl:2: {message}")


def valid_values(node):
    """Only what encode takes, in the shapes a dump prints."""
    if isinstance(node, Struct):
        return st.fixed_dictionaries({}, optional={name: valid_values(member)
                                                   for name, member in node.members})
    if isinstance(node, CharArray):
        return st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E),
                       max_size=len(node.elems))
    if isinstance(node, Array):
        n = len(node.elems)
        return st.lists(valid_values(node.elems[0]), min_size=n, max_size=n)
    if isinstance(node, Enum):
        return st.sampled_from([name for name, _ in node.enumerators])
    if isinstance(node, Int):
        return st.integers(-(1 << (node.size * 8 - 1)), (1 << node.size * 8) - 1)
    if isinstance(node, Float):
        return st.floats(width=node.size * 8)
    return st.booleans() if isinstance(node, Bool) else st.characters(max_codepoint=255)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_batch_of_valid_records_with_one_bad_record(data):
    """The usual failure: many good records, one bad one somewhere; the batch must name it."""
    codec = CODECS["mixed"]
    good = data.draw(st.lists(valid_values(codec.node), min_size=1, max_size=30))
    bad = data.draw(values_of(codec.node))
    at = data.draw(st.integers(0, len(good)))
    assert_batch_is_encode_per_record(codec, good)
    assert_batch_is_encode_per_record(codec, good[:at] + [bad] + good[at:])


@pytest.mark.parametrize("ncpus", [1, 3])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_per_cpu_batch_equals_encode_per_record(ncpus, data):
    """A list of ``ncpus`` values per CPU or one value for all, including the ambiguous case
    of an array value whose length is ``ncpus`` (encode tries per CPU first)."""
    for base in (CODECS["flow"], CODECS["array2d"], compile_types(
            lambda b: b.array(b.integer("u32", 4), ncpus))):
        codec = PerCpuCodec(base, ncpus)
        one = values_of(base.node)
        values = data.draw(st.lists(one | st.lists(one, min_size=ncpus, max_size=ncpus),
                                    max_size=8))
        assert_batch_is_encode_per_record(codec, values)


def raw_values(size):
    hex_bytes = st.binary(min_size=size, max_size=size)
    return st.one_of(
        hex_bytes.map(lambda b: "0x" + b.hex()), hex_bytes.map(bytes.hex),
        hex_bytes.map(lambda b: "0X" + b.hex().upper()), hex_bytes.map(lambda b: b.hex(" ")),
        hex_bytes.map(lambda b: [f"0x{x:02x}" for x in b]),
        hex_bytes.map(lambda b: [f"0X{x:02X}" for x in b]),
        hex_bytes.map(list), hex_bytes,
        st.lists(st.sampled_from(["0x7", "0x_7", "0x100", "7", "07", "0xzz", "-0x01", -1, 255,
                                  256, True, "0x0a"]), min_size=size, max_size=size),
        st.lists(st.sampled_from(["0x0a", "0XfF", "0b11", "0o17", "1234", "0x_7", " 0x1", "0x1é"]),
                 min_size=size, max_size=size),
        st.binary(max_size=size + 1).map(bytes.hex), st.lists(st.integers(0, 255),
                                                              max_size=size + 1),
        JUNK)


@pytest.mark.parametrize("size", [1, 4, 8])
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_raw_batch_equals_encode_per_record(size, data):
    codec = RawCodec(size)
    values = data.draw(st.lists(raw_values(size), max_size=10))
    assert_batch_is_encode_per_record(codec, values)
    homogeneous = data.draw(st.sampled_from([0, 4, 5]))  # a chunk of one shape (fast path)
    values = data.draw(st.lists(raw_values(size).filter(lambda v: not isinstance(v, bytes)),
                                min_size=1, max_size=1)) * homogeneous
    assert_batch_is_encode_per_record(codec, values)
    assert_batch_is_encode_per_record(PerCpuCodec(codec, 2), values)


@pytest.mark.parametrize("spelling", ["0x0a", "0XfF", "0b11", "0o17", "1234", "0x_7", " 0x1",
                                      "0x1é", "0xzz", "07", "7", "-0x01", "0x", ""])
def test_raw_byte_spellings_in_a_chunk_of_byte_lists(spelling):
    """bpftool prints bytes as "0x0a"; any other spelling in a chunk of such lists must be
    read (or refused) as int(text, 0) reads it."""
    codec = RawCodec(4)
    assert_batch_is_encode_per_record(codec, [[spelling] * 4] * 3)
    assert_batch_is_encode_per_record(codec, [["0x01", "0x02", "0x03", "0x04"]] * 2 +
                                      [["0x01", spelling, "0x03", "0x04"]])


# -- the vectorised path is taken ----------------------------------------------------------

TYPICAL = {
    "flow": [{"addr": i, "port": 443, "proto": 6} for i in range(50)],
    "mixed": [{"id": i, "delta": -i, "name": f"n{i}", "level": -1, "color": "MINUS",
               "flag": bool(i % 2), "letter": "x", "ratio": i / 3, "share": 0.5,
               "at": {"x": -3, "y": 4}, "path": [{"x": 1, "y": 2}, {"x": 3, "y": 4}],
               "hist": [1, 2, 3], "anon": 7, "big": "HUGE"} for i in range(50)],
    "u64": [2**64 - 1, 0, 2**63],
    "s64": [-(2**63), -1, 2**63 - 1],
}


@pytest.mark.parametrize("name", list(TYPICAL))
def test_typical_records_never_go_one_by_one(name, monkeypatch):
    codec, values = CODECS[name], TYPICAL[name]
    per_cpu = PerCpuCodec(codec, 2)
    expected = b"".join(codec.encode(v) for v in values)
    expected_per_cpu = b"".join(per_cpu.encode(v) for v in values)
    pairs = [[v, values[0]] for v in values]  # one value per CPU
    expected_pairs = b"".join(per_cpu.encode(v) for v in pairs)
    monkeypatch.setattr(codec, "encode", _refuse)
    monkeypatch.setattr(per_cpu, "encode", _refuse)
    assert codec.encode_batch(values, str) == expected
    assert per_cpu.encode_batch(values, str) == expected_per_cpu
    assert per_cpu.encode_batch(pairs, str) == expected_pairs


def test_bpftool_byte_lists_and_hex_strings_never_go_one_by_one(monkeypatch):
    codec = RawCodec(4)
    monkeypatch.setattr(codec, "encode", _refuse)
    data = [bytes([i, 0, 1, 255]) for i in range(20)]
    assert codec.encode_batch([[f"0x{b:02x}" for b in d] for d in data], str) == b"".join(data)
    assert codec.encode_batch(["0x" + d.hex() for d in data], str) == b"".join(data)
    assert codec.encode_batch([list(d) for d in data], str) == b"".join(data)


def _refuse(value, path="value"):
    raise AssertionError(f"encoded one by one: {value!r}")


@pytest.mark.parametrize("name", ["union", "bitfields", "int128"])
def test_layouts_it_cannot_vectorise_go_one_by_one(name):
    codec = CODECS[name]
    value = {"n": 1, "either": {"word": 5}} if name == "union" else {"n": 9}
    assert codec.encode_batch([value, value], str) == codec.encode(value) * 2
    with pytest.raises(InputError,
                       match=r"^f:1\.n: 4294967296 does not fit u32 \(0\.\.4294967295\)"):
        codec.encode_batch([{"n": 1}, {"n": 2**32}], lambda i: f"f:{i}")


# -- the loader on top ---------------------------------------------------------------------

RAW = type("Info", (), {"key_size": 8, "value_size": 16, "percpu": False, "btf_id": 0,
                        "btf_key_type_id": 0, "btf_value_type_id": 0})


@pytest.fixture(scope="module")
def flow_codecs():
    with BtfBuilder() as b:
        key = flow(b)
        u64 = b.integer("__u64", 8)
        value = b.struct("stats", [("packets", u64), ("bytes", u64)])
        btf = Btf.from_bytes(b.raw())
    return (BtfCodec(btf, key, default_zero=True), BtfCodec(btf, value, default_zero=True))


def line(i, **over):
    entry = {"key": {"addr": i, "port": 443, "proto": 6}, "value": {"packets": i, "bytes": 2 * i}}
    entry.update(over)
    return json.dumps(entry)


def test_jsonl_across_many_chunks_keeps_line_numbers(tmp_path, flow_codecs):
    """Enough lines for several parse chunks, with blank lines and CRLF line ends; records
    and their line numbers are those of a line-by-line read."""
    text = []
    for i in range(20000):
        text.append(line(i))
        if i % 997 == 0:
            text.append("  ")
    path = tmp_path / "in.jsonl"
    path.write_bytes("\r\n".join(text).encode() + b"\r\n")
    records = read.read_records(str(path), RAW, codecs=flow_codecs)
    key_codec, value_codec = flow_codecs
    kept = [(n, json.loads(t)) for n, t in enumerate(text, 1) if t.strip()]
    assert records.count == len(kept) == 20000
    assert records.keys == b"".join(key_codec.encode(e["key"]) for _, e in kept)
    assert records.values == b"".join(value_codec.encode(e["value"]) for _, e in kept)
    assert [records.where(i) for i in (0, 1, 19999)] == [f"{path}:{n}" for n, _ in
                                                         (kept[0], kept[1], kept[-1])]


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_first_failing_record_wins_across_key_and_value(tmp_path, flow_codecs, fmt):
    """Record 3 has a bad value, record 5 a bad key: record 3 is reported, as when records
    are encoded one after the other, whatever the chunk the batch encoder sees."""
    entries = [json.loads(line(i)) for i in range(8)]
    entries[3]["value"]["bytes"] = -1 - 2**64
    entries[5]["key"]["port"] = 70000
    if fmt == "jsonl":
        text = "\n".join(json.dumps(e) for e in entries) + "\n"
        expected = 4
    elif fmt == "json":
        text = "[\n" + ",\n".join(json.dumps(e) for e in entries) + "\n]\n"
        expected = 5
    else:
        text = "key.addr,key.port,key.proto,value.packets,value.bytes\n" + "".join(
            f"{e['key']['addr']},{e['key']['port']},6,{e['value']['packets']},"
            f"{e['value']['bytes']}\n" for e in entries)
        expected = 5
    path = tmp_path / f"in.{fmt}"
    path.write_text(text)
    with pytest.raises(InputError) as exc:
        read.read_records(str(path), RAW, codecs=flow_codecs)
    assert str(exc.value) == (f"{path}:{expected}: value.bytes: -18446744073709551617 "
                              f"does not fit u64 (0..18446744073709551615)")


GOOD = b'{"key":"0100000000000000","value":"' + b"02" * 16 + b'"}\n'


def test_utf8_error_comes_first_wherever_it_is(tmp_path, flow_codecs):
    """JSONL is read in pieces, but still checked as UTF-8 before any line is parsed."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"key":\n' + GOOD * 30000 + b"\xff\n")
    with pytest.raises(InputError, match=rf"^{path}: not UTF-8 text \(byte {8 + 30000 * len(GOOD)}\)$"):
        read.read_records(str(path), RAW)


def test_jsonl_from_a_pipe_is_read_once(tmp_path):
    """A pipe (``<(cmd)``) cannot be read twice: it is held, and every record arrives."""
    read_end, write_end = os.pipe()
    data = GOOD * 40000

    def feed():
        with os.fdopen(write_end, "wb") as f:
            f.write(data)
    writer = threading.Thread(target=feed)
    writer.start()
    try:
        records = read.read_records(f"/dev/fd/{read_end}", RAW)
    finally:
        writer.join()
        os.close(read_end)
    assert records.count == 40000 and records.keys == bytes.fromhex("0100000000000000") * 40000


@pytest.mark.parametrize("binary", [True, False])
def test_jsonl_from_stdin_binary_or_text(monkeypatch, binary):
    data = GOOD * 3
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8") if binary else \
        io.StringIO(data.decode())
    monkeypatch.setattr("sys.stdin", stream)
    records = read.read_records("-", RAW)
    assert records.count == 3 and records.where(2) == "<stdin>:3"


def test_a_missing_field_fails_the_batch_as_it_fails_one_by_one():
    codec = compile_types(lambda b: b.struct("s", [("a", b.integer("unsigned int", 4)),
                                                   ("b", b.integer("unsigned int", 4))]),
                          default_zero=False)
    whole = [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert codec.encode_batch(whole, str) == b"".join(codec.encode(v) for v in whole)
    with pytest.raises(InputError, match=r"^1: missing field b "):
        codec.encode_batch([{"a": 1, "b": 2}, {"a": 3}], str)
