"""Display decoders: parse is the exact inverse of format, checked against outside oracles."""

import ipaddress
import json
import socket
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bpfbatch.errors import InputError
from bpfbatch.records.decoders import DECODERS, automatic_kind, get, parse_decode_option
from bpfbatch.records.jsontext import json_string, json_texts

NOW = 10**15  # a fixed CLOCK_MONOTONIC reading for the clocked kind

# The kinds whose parse(format(raw)) is raw for every raw value of the field's size.
EXACT = {"ipv4": 4, "ipv6": 16, "mac": 6, "be16": 2, "be32": 4, "be64": 8, "hex": 5,
         "errno": 4, "ifname": 4}


def rows(*raws: bytes) -> np.ndarray:
    return np.frombuffer(b"".join(raws), dtype=np.uint8).reshape(len(raws), -1)


@pytest.mark.parametrize("kind,size", sorted(EXACT.items()))
@given(data=st.data())
def test_parse_inverts_format(kind, size, data):
    raws = data.draw(st.lists(st.binary(min_size=size, max_size=size), min_size=1, max_size=8))
    decoder = DECODERS[kind]
    shown = decoder.format(rows(*raws))
    assert len(shown) == len(raws)
    assert [decoder.parse(v, size) for v in shown] == raws


@given(raws=st.lists(st.binary(min_size=4, max_size=4), max_size=20))
def test_ipv4_is_what_the_c_library_prints(raws):
    assert DECODERS["ipv4"].format(rows(*raws) if raws else np.zeros((0, 4), np.uint8)) == \
        [socket.inet_ntoa(raw) for raw in raws]


json_values = st.one_of(st.text(), st.integers(), st.booleans(), st.none(), st.floats(),
                        st.integers(-(2**70), 2**70))


@given(values=st.one_of(st.lists(st.text()), st.lists(st.integers(-(2**70), 2**70)),
                        st.lists(json_values)))
def test_json_texts_are_json_dumps(values):
    """The C-loop columns (only str, only int) and the general one all write json.dumps's
    bytes: non-ASCII and control characters escaped, bools as true/false, not 1/0."""
    assert json_texts(values) == [json.dumps(v).encode() for v in values]
    assert [json_string(v) for v in values if type(v) is str] == \
        [json.dumps(v).encode() for v in values if type(v) is str]


@given(raw=st.binary(min_size=1, max_size=24))
def test_str_round_trip_keeps_the_text_before_the_nul(raw):
    decoder = DECODERS["str"]
    text = decoder.format_one(raw)
    assert decoder.parse(text, len(raw)) == raw.partition(b"\0")[0].ljust(len(raw), b"\0")
    assert decoder.format_one(decoder.parse(text, len(raw))) == text


@given(age_ns=st.integers(-(2**52), NOW))  # stamps 0 .. now + 52 days
def test_age_round_trip_to_the_ns(age_ns):
    stamp = NOW - age_ns
    raw = struct.pack("<Q", stamp)
    age = DECODERS["age"].format_one(raw, now=NOW)
    assert age == age_ns / 1e9
    assert DECODERS["age"].parse(age, 8, now=NOW) == raw


def test_outside_oracles():
    assert DECODERS["ipv4"].format(rows(socket.inet_aton("192.168.1.20"))) == ["192.168.1.20"]
    v6 = ipaddress.IPv6Address("2001:db8::8:800:200c:417a")
    assert DECODERS["ipv6"].format(rows(v6.packed)) == [str(v6)]
    assert DECODERS["ipv6"].format_one(ipaddress.IPv6Address("::ffff:10.0.0.1").packed) \
        == "::ffff:10.0.0.1"
    assert DECODERS["be16"].format(rows(struct.pack("!H", 443))) == [443]
    assert DECODERS["be32"].parse("0x01020304", 4) == b"\x01\x02\x03\x04"
    assert DECODERS["ifname"].format_one(struct.pack("<i", socket.if_nametoindex("lo"))) == "lo"
    assert DECODERS["ifname"].parse("lo", 4) == struct.pack("<i", socket.if_nametoindex("lo"))
    assert DECODERS["errno"].format(rows(struct.pack("<i", -2), struct.pack("<i", 524),
                                         struct.pack("<i", 0), struct.pack("<i", -9999))) \
        == ["-ENOENT", "ENOTSUPP", 0, -9999]
    assert DECODERS["str"].format(rows(b"a\\b\x07\0xyz")) == ["a\\x5cb\\x07"]
    assert DECODERS["mac"].parse("02:AB:00:00:00:01", 6) == bytes.fromhex("02ab00000001")


def test_ksym_against_kallsyms():
    try:
        with open("/proc/kallsyms") as f:
            lines = [line.split() for line in f]
    except OSError:
        pytest.skip("no /proc/kallsyms")
    names = {}
    for addr, _, name, *_ in lines:
        names.setdefault(name, set()).add(int(addr, 16))
    unique = [(name, *addrs) for name, addrs in names.items() if len(addrs) == 1]
    unique = [(name, addr) for name, addr in unique if addr]
    if not unique:
        pytest.skip("kallsyms addresses are hidden (kptr_restrict)")
    decoder = DECODERS["ksym"]
    for _, addr in unique[:50]:
        shown = decoder.format_one(struct.pack("<Q", addr))
        assert decoder.parse(shown, 8) == struct.pack("<Q", addr)
        assert shown.startswith("0x") or names[shown] == {addr}  # aliases share addresses
    name, addr = unique[0]
    assert decoder.parse(name, 8) == struct.pack("<Q", addr)
    assert decoder.format_one(struct.pack("<Q", 0)) == "0x0"


@pytest.mark.parametrize("kind,value,size", [
    ("ipv4", "10.0.0", 4), ("ipv4", "10.0.0.256", 4), ("ipv6", "1::2::3", 16),
    ("mac", "02:00:00:00:00", 6), ("be16", 65536, 2), ("be16", "x", 2), ("hex", "0a0", 2),
    ("hex", "0a", 2), ("str", "toolong", 4), ("str", "a\\b", 4), ("errno", "ENOSUCH", 4),
    ("ifname", "no-such-dev0", 4), ("ksym", "no_such_symbol_anywhere", 8), ("age", "soon", 8),
    ("ipv4", 167772161, 4), ("be32", True, 4),
])
def test_bad_display_values_name_the_path_and_kind(kind, value, size):
    with pytest.raises(InputError) as err:
        DECODERS[kind].parse(value, size, "key.saddr")
    assert str(err.value).startswith("key.saddr: ")
    assert kind in str(err.value)


def test_size_and_option_checks():
    with pytest.raises(InputError, match="ipv4 needs a field of 4 bytes, this one has 8"):
        DECODERS["ipv4"].check_size(8, "value.x")
    assert parse_decode_option(" key.saddr = ipv4 ")[0] == "key.saddr"
    for bad in ("saddr", "=ipv4", "saddr="):
        with pytest.raises(InputError, match="expected FIELD=KIND"):
            parse_decode_option(bad)
    with pytest.raises(InputError, match="unknown kind 'ip'"):
        get("ip")


def test_automatic_choice():
    assert automatic_kind(typedefs=("__be16",), member="dport", size=2) == "be16"
    assert automatic_kind(typedefs=("__be32",), member="saddr", size=4) == "ipv4"
    assert automatic_kind(typedefs=("__be32",), member="seq", size=4) == "be32"
    assert automatic_kind(typedefs=("__be64",), size=8) == "be64"
    assert automatic_kind(struct="in6_addr", member="daddr", size=16) == "ipv6"
    assert automatic_kind(typedefs=("__u32",), member="saddr", size=4) is None


def _display_spellings(kind: str, size: int):
    """What a display column may hold: the kind's own output, near misses and junk."""
    digits = st.text("0123456789", min_size=0, max_size=4)
    quads = st.lists(digits, min_size=3, max_size=5).map(".".join)
    texts = st.one_of(quads, st.text(" .0123456789:abcdefx%/\x00١", max_size=18),
                      st.sampled_from(["1.2.3.4", "01.2.3.4", "1.2.3.04", "0.0.0.0", "::1",
                                       "::ffff:1.2.3.4", "1.2.3.4 ", " 1.2.3.4", "1.2.3",
                                       "255.255.255.256", "2001:db8::1", "1:2:3:4:5:6:7:8:9"]))
    numbers = st.one_of(st.integers(-2, (1 << (8 * size)) + 2), st.integers(-(1 << 70), 1 << 70),
                        st.sampled_from([True, False, 1.0, None, "443", "0x1bb", " 80"]))
    own = st.binary(min_size=size, max_size=size).map(
        lambda raw: DECODERS[kind].format(rows(raw))[0])
    return st.one_of(own, own, texts, numbers)


@pytest.mark.parametrize("kind,size", [("ipv4", 4), ("ipv6", 16), ("be16", 2), ("be32", 4),
                                       ("be64", 8)])
@given(data=st.data())
def test_column_parse_is_parse_of_each_value(kind, size, data):
    """The column parse (inet_pton, numpy) takes a column only when ``parse`` takes every
    value of it, and then gives exactly ``parse``'s bytes."""
    decoder = DECODERS[kind]
    values = data.draw(st.lists(_display_spellings(kind, size), min_size=1, max_size=6))
    column = decoder.parse_column(values, size)
    try:
        each = b"".join(decoder.parse(v, size) for v in values)
    except InputError:
        assert column is None
    else:
        assert column is None or column.tobytes() == each
        if all(type(v) is int for v in values) or kind.startswith("ip"):
            assert column is not None  # what a dump writes never goes value by value
