"""Codecs against BTF sizes and offsets, bpftool's printing rules, and round trips."""

import ctypes
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import BpfBatchError, InputError
from bpfbatch.records.codec import BtfCodec, PerCpuCodec, RawCodec, codec_for, map_codecs, rows


def compile_types(build):
    """Build types with ``build(builder) -> type id`` and return a codec for that id."""
    with BtfBuilder() as b:
        type_id = build(b)
        return BtfCodec(Btf.from_bytes(b.raw()), type_id)


def text(codec, data, exact=False):
    return codec.render_batch(data, 1, exact=exact)[0].decode()


# -- integers -----------------------------------------------------------------------------

@pytest.mark.parametrize("size,signed,value,expected", [
    (1, False, 255, "255"), (1, True, -128, "-128"), (2, False, 65535, "65535"),
    (2, True, -2, "-2"), (4, False, 2**32 - 1, "4294967295"), (4, True, -(2**31), "-2147483648"),
    (8, False, 2**64 - 1, "18446744073709551615"), (8, True, -1, "-1"),
    # 128-bit: raw bits as a hex string (btf_int128_print), signed or not.
    (16, True, -1, '"0xffffffffffffffffffffffffffffffff"'), (16, False, 5, '"0x5"'),
    (16, False, 2**64, '"0x10000000000000000"'),
])
def test_integers(size, signed, value, expected):
    codec = compile_types(lambda b: b.integer("n", size, signed=signed))
    data = value.to_bytes(size, "little", signed=signed)
    assert codec.decode(data) == value
    assert codec.encode(value) == data
    assert text(codec, data) == text(codec, data, exact=True) == expected
    if size <= 8:
        assert np.frombuffer(data, codec.dtype)[0] == value


def test_integer_input_errors():
    codec = compile_types(lambda b: b.integer("u8", 1))
    with pytest.raises(InputError, match=r"256 does not fit u8 \(0\.\.255\)"):
        codec.encode(256)
    with pytest.raises(InputError, match="expected an integer"):
        codec.encode("twelve")
    assert codec.encode("0x1f") == b"\x1f"
    with pytest.raises(InputError, match=r"-1 does not fit u8"):  # no silent wrap
        codec.encode(-1)
    with pytest.raises(InputError, match="expected an integer, got true"):
        codec.encode(True)


# -- the rich struct ----------------------------------------------------------------------

class Flags(ctypes.LittleEndianStructure):
    _fields_ = [("lo", ctypes.c_uint32, 3), ("mid", ctypes.c_uint32, 5),
                ("hi", ctypes.c_uint32, 24)]


def build_rich(b):
    u8 = b.integer("unsigned char", 1)
    s16 = b.integer("short", 2, signed=True)
    u32 = b.integer("unsigned int", 4)
    u64 = b.integer("long long unsigned int", 8)
    char = b.integer("char", 1, signed=True)
    color = b.enum("color", {"RED": 0, "GREEN": 1, "MINUS": -1})
    point = b.struct("point", [("x", s16), ("y", s16)])
    either = b.union("either", [("word", u32), ("bytes", b.array(u8, 4))])
    return b.struct("rich", [
        ("id", u64), ("name", b.array(char, 16)), ("color", color), ("at", point),
        ("either", either), ("hist", b.array(u32, 3)),
        ("lo", u32, 3), ("mid", u32, 5), ("hi", u32, 24),
        ("flag", b.integer("_Bool", 1, boolean=True)), ("small", b.integer("signed char", 1,
                                                                           signed=True)),
        ("big", b.integer("__int128", 16, signed=True)), ("ptr", b.ptr(u8)),
        ("alias", b.typedef("u32_t", b.const(b.volatile(u32)))),
    ])


@pytest.fixture(scope="module")
def rich():
    return compile_types(build_rich)


RICH_VALUE = {
    "id": 7, "name": "flow-1", "color": "MINUS", "at": {"x": -3, "y": 4},
    "either": {"word": 0x04030201, "bytes": [1, 2, 3, 4]}, "hist": [1, 2, 3],
    "lo": 5, "mid": 17, "hi": 0xABCDEF, "flag": True, "small": -5, "big": -2, "ptr": 0xFFFF8000,
    "alias": 42,
}


def test_rich_struct_layout_matches_c(rich):
    assert rich.size == 96  # big: 16-byte aligned at 64, so the struct aligns to 16
    data = rich.encode(RICH_VALUE)
    assert struct.unpack_from("<Q16si", data, 0) == (7, b"flow-1".ljust(16, b"\0"), -1)
    assert struct.unpack_from("<hhI3I", data, 28) == (-3, 4, 0x04030201, 1, 2, 3)
    flags = Flags.from_buffer_copy(data[48:52])  # ctypes places the bitfields, independently
    assert (flags.lo, flags.mid, flags.hi) == (5, 17, 0xABCDEF)
    assert data[52:54] == b"\x01\xfb"
    assert int.from_bytes(data[64:80], "little", signed=True) == -2
    assert struct.unpack_from("<QI", data, 80) == (0xFFFF8000, 42)
    assert rich.decode(data) == RICH_VALUE


def test_layouts_without_a_dtype_are_copied_into_named_fields(rich):
    """Bitfields have no numpy view: the records are copied out, every field under its name,
    a bitfield as its value, a 128-bit integer as its bytes, a union's members side by
    side."""
    data = rich.encode(RICH_VALUE) * 2
    arr = rich.array(data, 2)
    assert arr.shape == (2,) and arr.dtype.names == tuple(RICH_VALUE)
    row = arr[1]
    for name in ("id", "small", "ptr", "alias"):
        assert row[name] == RICH_VALUE[name]
    assert (row["lo"], row["mid"], row["hi"]) == (0x5, 0x11, 0xABCDEF)
    assert row["name"] == b"flow-1" and bool(row["flag"])
    assert row["either"]["word"] == 67305985 and list(row["either"]["bytes"]) == [1, 2, 3, 4]
    assert (row["at"]["x"], row["at"]["y"]) == (-3, 4) and list(row["hist"]) == [1, 2, 3]
    assert bytes(row["big"]) == (2**128 - 2).to_bytes(16, "little")


def test_rich_struct_json_follows_bpftool(rich):
    data = rich.encode(RICH_VALUE)
    expected = ('{"id":7,"name":"flow-1","color":"MINUS","at":{"x":-3,"y":4},'
                '"either":{"word":67305985,"bytes":[1,2,3,4]},"hist":[1,2,3],'
                '"lo":"0x5","mid":"0x11","hi":"0xabcdef","flag":true,"small":-5,'
                '"big":"0xfffffffffffffffffffffffffffffffe","ptr":4294934528,"alias":42}')
    assert text(rich, data) == expected
    assert text(rich, data, exact=True) == expected
    assert json.loads(expected)["hi"] == "0xabcdef"


def test_json_output_loads_back(rich):
    """What the JSON output prints (hex strings for bitfields and __int128) encodes back."""
    data = rich.encode(RICH_VALUE)
    assert rich.encode(json.loads(text(rich, data))) == data


def test_dtype_gives_zero_copy_views_except_with_bitfields(rich):
    assert rich.dtype is None  # bitfields have no numpy equivalent
    codec = compile_types(lambda b: b.struct("v", [
        ("a", b.integer("long long unsigned int", 8)), ("n", b.array(b.integer("char", 1), 4)),
        ("e", b.enum("e", {"A": 1})), ("f", b.integer("_Bool", 1, boolean=True))]))
    data = b"".join(codec.encode({"a": i, "n": "ab", "e": "A", "f": bool(i % 2)})
                    for i in range(5))
    arr = codec.array(memoryview(data), 5)
    assert not arr.flags.owndata  # a view of the batch buffer
    assert arr["a"].tolist() == list(range(5)) and arr.dtype.itemsize == codec.size
    assert arr["n"][0] == b"ab" and arr["e"][3] == 1 and arr["f"].tolist() == [
        False, True, False, True, False]


# -- char arrays, chars, bools, enums, floats ---------------------------------------------

@pytest.fixture(scope="module")
def chars():
    return compile_types(lambda b: b.array(b.integer("char", 1, signed=True), 6))


@pytest.mark.parametrize("raw,exact,typed", [
    (b"abc\0\0\0", '"abc"', '"abc"'),
    (b"\0bcdef", '""', '""'),
    # no NUL: bpftool prints the array; the value rule, the full-length string
    (b"abcdef", "[97,98,99,100,101,102]", '"abcdef"'),
    # a tab: bpftool prints the array; the value rule, the escaped string
    (b"ab\tc\0\0", "[97,98,9,99,0,0]", '"ab\\tc"'),
    (b"a\xffc\0\0\0", "[97,-1,99,0,0,0]", "[97,-1,99,0,0,0]"),  # char is signed
    (b"a\x01c\0\0\0", "[97,1,99,0,0,0]", "[97,1,99,0,0,0]"),
    (b'q"\0\0\0\0', '"q\\""', '"q\\""'),
])
def test_char_array_string_rule(chars, raw, exact, typed):
    assert text(chars, raw, exact=True) == exact
    assert text(chars, raw) == typed


def test_char_array_backslash_is_bpftool_v71s_newline(chars):
    # bpftool 7.1's jsonw_puts writes a backslash as "\n"; the typed JSON stays valid.
    assert text(chars, b"a\\b\0\0\0", exact=True) == '"a\\nb"'
    assert json.loads(text(chars, b"a\\b\0\0\0")) == "a\\b"


def test_char_array_decode_and_encode(chars):
    assert chars.decode(b"abc\0\0\0") == "abc"
    assert chars.decode(b"abcdef") == "abcdef"
    assert chars.decode(b"a\x01cdef") == [97, 1, 99, 100, 101, 102]
    assert chars.encode("hi") == b"hi\0\0\0\0"
    assert chars.encode("abcdef") == b"abcdef"
    assert chars.encode([1, 2, 3, 4, 5, 6]) == bytes([1, 2, 3, 4, 5, 6])
    with pytest.raises(InputError, match="longer than 6"):
        chars.encode("toolong!")


def test_unsigned_char_array_is_never_a_string():
    codec = compile_types(lambda b: b.array(b.integer("unsigned char", 1), 3))
    assert text(codec, b"a\0\0") == "[97,0,0]"


def test_char_encoding_and_bool_quirks():
    char = compile_types(lambda b: b.integer("c", 1, char=True))
    assert text(char, b"A", exact=True) == '"A"'
    assert text(char, b"\x01", exact=True) == '"\\u0001"'
    assert text(char, b'"', exact=True) == '"""'      # bpftool does not escape it
    assert json.loads(text(char, b'"')) == '"'
    flag = compile_types(lambda b: b.struct("s", [("f", b.integer("_Bool", 1, boolean=True)),
                                                  ("x", b.integer("unsigned char", 1))]))
    data = b"\x00\x07"
    # bpftool reads a bool as a C bool, one byte: the next byte does not leak into it.
    assert text(flag, data, exact=True) == '{"f":false,"x":7}'
    assert text(flag, data) == '{"f":false,"x":7}'
    assert flag.decode(data) == {"f": False, "x": 7}


def test_enums():
    codec = compile_types(lambda b: b.enum("e", {"A": 0, "ALSO_A": 0, "NEG": -2}))
    assert text(codec, struct.pack("<i", 0)) == '"A"'           # first match wins
    assert text(codec, struct.pack("<i", -2)) == '"NEG"'
    assert text(codec, struct.pack("<i", 9)) == "9"
    assert codec.decode(struct.pack("<i", 9)) == 9
    assert codec.encode("NEG") == struct.pack("<i", -2)
    assert codec.encode(9) == struct.pack("<i", 9)
    with pytest.raises(InputError, match="no enumerator 'B'"):
        codec.encode("B")
    small = compile_types(lambda b: b.enum("e1", {"BIG": 200}, size=1))  # unsigned in BTF
    # bpftool reads a 1-byte enum signed and compares with the 32-bit value: no match.
    assert text(small, b"\xc8", exact=True) == "-56"
    # the value rule: unsigned stays unsigned, so it is the enumerator (and reads back)
    assert text(small, b"\xc8") == '"BIG"' and small.decode(b"\x82") == 130
    assert small.encode("BIG") == small.encode(200) == b"\xc8"
    with pytest.raises(InputError, match="-56 does not fit u8"):
        small.encode(-56)


def test_floats_stop_bpftool_and_print_in_typed_json():
    codec = compile_types(lambda b: b.struct("s", [
        ("a", b.integer("unsigned int", 4)), ("f", b.float("float", 4)),
        ("b", b.integer("unsigned int", 4))]))
    data = struct.pack("<IfI", 1, 1.5, 2)
    # btf_dumper has no FLOAT case: "(unsupported-kind", and the struct ends there.
    assert text(codec, data, exact=True) == '{"a":1,"f":(unsupported-kind}'
    assert json.loads(text(codec, data)) == {"a": 1, "f": 1.5, "b": 2}
    assert codec.decode(data) == {"a": 1, "f": 1.5, "b": 2}
    assert codec.encode({"a": 1, "f": 1.5, "b": 2}) == data


def test_per_cpu_stops_after_the_first_cpu_bpftool_cannot_print():
    base = compile_types(lambda b: b.struct("s", [("a", b.integer("unsigned int", 4)),
                                                  ("f", b.float("float", 4))]))
    codec = PerCpuCodec(base, 2)
    data = struct.pack("<If", 1, 0.5) + struct.pack("<If", 2, 1.5)
    assert text(codec, data, exact=True) == '[{"cpu":0,"value":{"a":1,"f":(unsupported-kind}}]'
    assert not codec.template(exact=True).complete
    assert json.loads(text(codec, data))[1] == {"cpu": 1, "value": {"a": 2, "f": 1.5}}


def test_non_finite_floats_are_strings_and_load_back():
    codec = compile_types(lambda b: b.float("double", 8))
    for value, shown in ((float("nan"), "NaN"), (float("inf"), "Infinity"),
                         (float("-inf"), "-Infinity"), (0.25, 0.25)):
        data = struct.pack("<d", value)
        assert json.loads(text(codec, data)) == shown
        assert codec.encode(shown) == data


def test_typed_json_prints_null_where_bpftool_prints_an_error():
    with BtfBuilder() as b:
        u32 = b.integer("unsigned int", 4)
        sid = b.struct("s", [("a", u32), ("b", u32)])
        raw = bytearray(b.raw())
    # Make member b's type a FWD (kind 7): "(fwd-kind-invalid)" for bpftool.
    btf = Btf.from_bytes(bytes(raw))
    struct.pack_into("<I", raw, 24 + 4, 7 << 24)  # type 1's info word: FWD, no INT data
    del raw[24 + 12:24 + 16]
    for off in (12, 16):  # type_len, str_off
        struct.pack_into("<I", raw, off, struct.unpack_from("<I", raw, off)[0] - 4)
    codec = BtfCodec(Btf.from_bytes(bytes(raw)), sid)
    assert btf[sid].members[0].type == 1
    assert text(codec, bytes(8), exact=True) == '{"a":(fwd-kind-invalid)}'
    assert json.loads(text(codec, bytes(8))) == {"a": None, "b": None}


def test_enum64_compares_all_64_bits_and_prints_signed_like_bpftool():
    codec = compile_types(lambda b: b.enum("e", {"A": 1, "HUGE": 2**63 + 5}, size=8))
    assert text(codec, struct.pack("<Q", 2**63 + 5), exact=True) == '"HUGE"'
    assert text(codec, struct.pack("<Q", 2**64 - 1), exact=True) == "-1"
    assert text(codec, struct.pack("<Q", 2**64 - 1)) == str(2**64 - 1)  # unsigned in BTF
    assert codec.encode("HUGE") == struct.pack("<Q", 2**63 + 5)


# -- per-CPU and raw ----------------------------------------------------------------------

def test_per_cpu_layout_with_two_cpus():
    base = compile_types(lambda b: b.struct("v", [("a", b.integer("unsigned int", 4)),
                                                  ("b", b.integer("unsigned short", 2))]))
    codec = PerCpuCodec(base, 2)
    assert (base.size, codec.stride, codec.size) == (8, 8, 16)
    data = codec.encode([{"a": 1, "b": 2}, {"a": 3, "b": 4}])
    assert data == struct.pack("<IHxx", 1, 2) + struct.pack("<IHxx", 3, 4)
    assert codec.decode(data) == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert codec.encode({"a": 9, "b": 0}) == struct.pack("<IHxx", 9, 0) * 2  # to every CPU
    assert text(codec, data) == ('[{"cpu":0,"value":{"a":1,"b":2}},'
                                 '{"cpu":1,"value":{"a":3,"b":4}}]')
    arr = np.frombuffer(data, codec.dtype)
    assert arr["value"]["a"].tolist() == [[1, 3]]


def test_per_cpu_list_or_one_value_for_every_cpu():
    pair = PerCpuCodec(compile_types(lambda b: b.array(b.integer("unsigned int", 4), 2)), 2)
    # [1, 2] is one u32[2] value (its items are not u32[2] values): copied to both CPUs.
    assert pair.encode([1, 2]) == struct.pack("<II", 1, 2) * 2
    assert pair.encode([[1, 2], [3, 4]]) == struct.pack("<IIII", 1, 2, 3, 4)
    with pytest.raises(InputError, match="expected 2 per-CPU values, got 3"):
        pair.encode_cpus([[1, 2]] * 3)
    with pytest.raises(InputError, match=r"value\[cpu 1\]"):
        pair.encode([[1, 2], [3]])


def test_per_cpu_stride_rounds_odd_sizes_up_to_8():
    base = compile_types(lambda b: b.array(b.integer("unsigned char", 1), 12))
    codec = PerCpuCodec(base, 2)
    assert (codec.stride, codec.size) == (16, 32)
    data = bytes(range(12)) + b"\xee" * 4 + bytes(range(12, 24)) + b"\xee" * 4
    assert codec.decode(data) == [list(range(12)), list(range(12, 24))]
    with pytest.raises(BpfBatchError, match="at least one CPU"):
        PerCpuCodec(base, 0)


def test_raw_codec():
    raw = RawCodec(3)
    assert raw.array(b"\x01\x02\x03" * 2, 2).tolist() == [[1, 2, 3], [1, 2, 3]]
    assert raw.decode(b"\x01\x02\x03") == b"\x01\x02\x03"
    assert text(raw, b"\x01\xab\x00") == '["0x01","0xab","0x00"]'
    assert raw.encode("0x0102ff") == raw.encode(["0x01", 2, 255]) == b"\x01\x02\xff"
    with pytest.raises(InputError, match="expected 3 bytes, got 2"):
        raw.encode(b"ab")
    assert text(RawCodec(0), b"") == "[]"
    assert RawCodec(0).decode_batch(b"", 3) == [b"", b"", b""]


def test_map_codecs_follow_bpftool_on_which_types_to_use():
    class Info:
        key_size, value_size, percpu, btf_id = 4, 4, False, 1
        btf_key_type_id, btf_value_type_id = 1, 1
    with BtfBuilder() as b:
        b.integer("unsigned int", 4)
        btf = Btf.from_bytes(b.raw())
    key, value = map_codecs(Info, btf)
    assert key.typed and value.typed
    Info.btf_value_type_id = 0  # no value type: bpftool ignores the BTF entirely
    key, value = map_codecs(Info, btf)
    assert not key.typed and not value.typed
    Info.percpu, Info.btf_value_type_id = True, 1
    key, value = map_codecs(Info, btf, ncpus=2)
    assert isinstance(value, PerCpuCodec) and value.size == 16
    with pytest.raises(BpfBatchError, match="is 4 bytes, the map says 8"):
        codec_for(btf, 1, 8)


def test_struct_input_errors(rich):
    with pytest.raises(InputError, match="no field 'nope'"):
        rich.encode({"nope": 1})
    with pytest.raises(InputError, match=r"value\.at\.x"):
        rich.encode({"at": {"x": 1 << 20}})
    with pytest.raises(InputError, match=r"list of 3 elements"):
        rich.encode({"hist": [1]})
    with pytest.raises(InputError, match=r"^value: missing field id "):  # no silent zero
        rich.encode({})
    with pytest.raises(InputError, match=r"^value.at: missing field y "):
        rich.encode(RICH_VALUE | {"at": {"x": 1}})
    # a union needs one of its members; default_zero makes every missing field zero
    assert rich.decode(rich.encode(RICH_VALUE | {"either": {"word": 7}}))["either"]["word"] == 7
    with BtfBuilder() as b:
        type_id = build_rich(b)
        lenient = BtfCodec(Btf.from_bytes(b.raw()), type_id, default_zero=True)
    assert lenient.decode(lenient.encode({}))["name"] == ""


def test_batches_decode_and_render_every_row(rich):
    values = [dict(RICH_VALUE, id=i) for i in range(4)]
    data = b"".join(rich.encode(v) for v in values)
    assert rich.decode_batch(data, 4) == values
    texts = rich.render_batch(data, 4)
    assert [json.loads(t)["id"] for t in texts] == [0, 1, 2, 3]
    assert rows(data, 4, rich.size).shape == (4, rich.size)


# -- round trips --------------------------------------------------------------------------

def _ints(bits, signed):
    return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else \
        st.integers(0, (1 << bits) - 1)


RICH_VALUES = st.fixed_dictionaries({
    "id": _ints(64, False),
    "name": st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=15),
    "color": st.sampled_from(["RED", "GREEN", "MINUS"]) | st.integers(2, 1000),
    "at": st.fixed_dictionaries({"x": _ints(16, True), "y": _ints(16, True)}),
    "hist": st.lists(_ints(32, False), min_size=3, max_size=3),
    "lo": _ints(3, False), "mid": _ints(5, False), "hi": _ints(24, False),
    "flag": st.booleans(), "small": _ints(8, True), "big": _ints(128, True),
    "ptr": _ints(64, False), "alias": _ints(32, False),
    "either": _ints(32, False).map(lambda w: {"word": w, "bytes": list(w.to_bytes(4, "little"))}),
})


@settings(max_examples=200, deadline=None)
@given(RICH_VALUES)
def test_round_trip_values(rich, value):
    data = rich.encode(value)
    assert rich.decode(data) == value
    assert rich.encode(json.loads(text(rich, data))) == data  # the JSON output loads back


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_round_trip_bytes_of_a_padding_free_struct(data):
    codec = compile_types(lambda b: b.struct("p", [
        ("a", b.integer("unsigned int", 4)), ("b", b.integer("int", 4, signed=True)),
        ("c", b.integer("short", 2, signed=True)), ("d", b.array(b.integer("unsigned char", 1), 2)),
        ("e", b.integer("unsigned int", 4, ))]))
    assert codec.encode(codec.decode(data)) == data
    assert codec.encode(json.loads(text(codec, data))) == data


def test_whole_batch_rendering_equals_row_by_row(rich):
    """render_joined (one % per batch, raw byte lists as numpy blocks) == joined rows."""
    from bpfbatch.records.jsontext import RecordText
    data = b"".join(rich.encode(dict(RICH_VALUE, id=i, name="n%d%%" % i)) for i in range(5))
    keys = rows(bytes(range(20)), 5, 4)
    values = rows(data, 5, rich.size)
    entry = (RecordText().text(b'{"k%":[').extend(RawCodec(4).template(), 0)
             .text(b'],"v":').extend(rich.template(exact=True), 1).text(b"}"))
    per_row = entry.render([keys, values])
    assert entry.render_joined([keys, values], b",%\n") == b",%\n".join(per_row)
    assert per_row[1].startswith(b'{"k%":[["0x04","0x05","0x06","0x07"]],"v":{"id":1,')
    assert json.loads(per_row[2].decode())["v"]["name"] == "n2%"
