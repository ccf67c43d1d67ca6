"""bpftool's element words (``key [hex] BYTES ...``) read as bpftool reads them, with C's
``strtoul`` as the oracle for each byte; and types given for a map without BTF laid out as
ctypes and numpy lay them out (their own bytes decoded back to their own values)."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch._sys import abi
from bpfbatch.cli.bpftool import GrammarError, parse_element, pretty, strtoul
from bpfbatch.errors import InputError
from bpfbatch.records.codec import codec_for
from bpfbatch.records.typespec import given_type

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.strtoul.restype = ctypes.c_ulong
libc.strtoul.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]


def c_strtoul(word: str, base: int) -> int | None:
    """C's answer: the value when ``strtoul`` reads the whole word, else None."""
    data = word.encode()
    end = ctypes.c_char_p()
    value = libc.strtoul(data, ctypes.byref(end), base)
    return value if data and end.value == b"" else None


words = st.text(alphabet="0123456789abcdefABCDEFxX", min_size=0, max_size=5)


@settings(max_examples=2000, deadline=None)
@given(words, st.sampled_from([0, 16]))
def test_a_byte_word_reads_as_strtoul_reads_it(word, base):
    assert strtoul(word, base) == c_strtoul(word, base)


SIZES = {"key": 4, "value": 2}


@pytest.mark.parametrize("text, raw, flag", [
    ("key 1 0 0 0 value 2 0", {"key": b"\1\0\0\0", "value": b"\2\0"}, None),
    ("value hex ff 0x10 key 0x1 010 0 0", {"key": b"\1\x08\0\0", "value": b"\xff\x10"}, None),
    ("k 1 2 3 4 v h 0a 0b noexist", {"key": b"\1\2\3\4", "value": b"\n\x0b"},
     abi.BPF_NOEXIST),
    ("key 0 0 0 0 value 0 0 ex", {"key": bytes(4), "value": bytes(2)}, abi.BPF_EXIST),
    ("any key 0 0 0 0 value 0 0", {"key": bytes(4), "value": bytes(2)}, abi.BPF_ANY),
])
def test_bpftools_words(text, raw, flag):
    assert parse_element(text.split(), SIZES, flags=True) == (raw, flag)


@pytest.mark.parametrize("text, message", [
    ("key 1 0 0", "key: expected 4 bytes, got 3"),
    ("key 1 0 0 0 value 1", "value: expected 2 bytes, got 1"),
    ("key 1 0 0 0 key 1 0 0 0 value 0 0", "key given twice"),
    ("key 1 0 0 0", "no value given"),
    ("key 1 0 0 0 value 0 0 any exist", "flags given twice"),
    ("key 1 0 0 0 value 0 0 extra", "expected key or value or any|exist|noexist, got 'extra'"),
    ("key 1 0 0 0x100 value 0 0", "'0x100' is more than a byte"),
    ("key hex 1 0 0 0g value 0 0", "'0g' is not a byte (after hex"),
])
def test_a_wrong_word_is_named(text, message):
    with pytest.raises(GrammarError, match=message.replace("|", r"\|").replace("(", r"\(")):
        parse_element(text.split(), SIZES, flags=True)


def test_flags_only_where_allowed():
    with pytest.raises(GrammarError, match="expected key, got 'any'"):
        parse_element("key 1 0 0 0 any".split(), {"key": 4})


def test_pretty_is_bpftools_layout():
    assert pretty({"key": ["0x01", "0x00"], "value": [], "formatted": {"a": 1, "b": {}}}) == (
        '{\n    "key": ["0x01","0x00"\n    ],\n    "value": [],\n    "formatted": {\n'
        '        "a": 1,\n        "b": {}\n    }\n}')
    assert pretty([{"k": 1}, {"k": 2}]) == '[{\n        "k": 1\n    },{\n        "k": 2\n    }\n]'


SCALARS = [ctypes.c_uint8, ctypes.c_int8, ctypes.c_uint16, ctypes.c_int16, ctypes.c_uint32,
           ctypes.c_int32, ctypes.c_uint64, ctypes.c_int64, ctypes.c_bool, ctypes.c_double,
           ctypes.c_float, ctypes.c_ulong, ctypes.c_longlong]
BITFIELD_TYPES = [ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64,
                  ctypes.c_int32]


@st.composite
def structures(draw):
    """A random ctypes Structure (scalars, arrays, bitfields) and one filled instance. The
    bitfields of one struct share one type: CPython before 3.14 lays out a run of bitfields
    of mixed types unlike C does (and then cannot even store into them)."""
    fields = []
    base = draw(st.sampled_from(BITFIELD_TYPES))
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["scalar", "array", "bits"]))
        if kind == "bits":
            fields.append((f"f{i}", base, draw(st.integers(1, ctypes.sizeof(base) * 8 - 1))))
        elif kind == "array":
            fields.append((f"f{i}", draw(st.sampled_from(SCALARS[:8])) * draw(st.integers(1, 3))))
        else:
            fields.append((f"f{i}", draw(st.sampled_from(SCALARS))))
    struct = type("S", (ctypes.Structure,), {"_fields_": fields})
    raw = draw(st.binary(min_size=ctypes.sizeof(struct), max_size=ctypes.sizeof(struct)))
    return struct, struct.from_buffer_copy(raw)


def _plain(value):
    if isinstance(value, ctypes.Array):
        return [_plain(v) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(structures())
def test_a_ctypes_structure_decodes_its_own_bytes_to_its_own_fields(case):
    struct, instance = case
    btf, type_id = given_type(struct, ctypes.sizeof(struct), "value_type")
    decoded = codec_for(btf, type_id, ctypes.sizeof(struct)).decode(bytes(instance))
    for name, *_ in struct._fields_:
        want, got = _plain(getattr(instance, name)), decoded[name]
        if isinstance(want, float) and want != want:  # NaN
            assert got != got, (name, got)
        else:
            assert got == want, (name, struct._fields_)


@settings(max_examples=200, deadline=None)
@given(structures())
def test_a_numpy_dtype_of_the_same_layout_decodes_the_same(case):
    struct, instance = case
    if any(len(f) == 3 for f in struct._fields_) or any(
            f[1] in (ctypes.c_bool, ctypes.c_float, ctypes.c_double) for f in struct._fields_):
        return  # numpy has no bitfields; floats and bools are checked above
    dtype = np.dtype(struct)  # numpy reads ctypes' layout: names, offsets, itemsize
    size = ctypes.sizeof(struct)
    from_ctypes = codec_for(*given_type(struct, size, "v"), size).decode(bytes(instance))
    from_numpy = codec_for(*given_type(dtype, size, "v"), size).decode(bytes(instance))
    assert from_numpy == from_ctypes


@pytest.mark.parametrize("spec, size", [("u32", 4), ("__be16", 2), ("unsigned long", 8),
                                        ("char[16]", 16), ("u8[6]", 6), ("s64", 8),
                                        ("bool", 1), ("double", 8), ("u16[2][3]", 12)])
def test_c_type_names(spec, size):
    btf, type_id = given_type(spec, size, "key_type")
    assert btf.size_of(type_id) == size


@pytest.mark.parametrize("spec, message", [
    ("u128x", "unknown type 'u128x'"), ("struct flow", "with --btf"),
    ("u32", "u32 is 4 bytes, the map's are 8"), (object(), "not a type"),
])
def test_a_wrong_type_is_named(spec, message):
    with pytest.raises(InputError, match=message):
        given_type(spec, 8, "key_type")


def test_global_flags_do_not_outlive_their_command_line():
    from bpfbatch.cli import argv, options

    for flag in ("pretty", "quiet", "key_type=u32"):
        argv.set_global_flag(flag)
    argv.reset_global_flags()
    assert (options.PRETTY, options.QUIET, options.TYPES) == (False, False, {})
