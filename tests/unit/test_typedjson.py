"""The typed JSONL fast path (msgspec) against the general reader: the same records, lines
and errors on fuzzed input; and which layouts take it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.formats import read, typedjson
from bpfbatch.records.codec import BtfCodec, PerCpuCodec
from bpfbatch.records.decoding import decoded_codecs

from test_codecs_batch import LAYOUTS, node_values

INFO = SimpleNamespace(percpu=False, btf_id=0)


def codecs_of(key_build, value_build, *, default_zero=False, decode=()):
    with BtfBuilder() as b:
        key, value = key_build(b), value_build(b)
        btf = Btf.from_bytes(b.raw())
    codecs = (BtfCodec(btf, key, default_zero=default_zero),
              BtfCodec(btf, value, default_zero=default_zero))
    return decoded_codecs(*codecs, decode)  # __be32 addresses read as ipv4, as the CLI does


def net_flow(b):
    """The demo's flow key: ``__be32`` addresses and ``__be16`` ports (decoded automatically
    as ipv4 / be16), an enum, a ``u8[3]``."""
    u8, u16, u32 = b.integer("__u8", 1), b.integer("__u16", 2), b.integer("__u32", 4)
    be16, be32 = b.typedef("__be16", u16), b.typedef("__be32", u32)
    proto = b.enum("ip_proto", {"IPPROTO_ICMP": 1, "IPPROTO_TCP": 6, "IPPROTO_UDP": 17}, size=1)
    return b.struct("flow_key", [("saddr", be32), ("daddr", be32), ("sport", be16),
                                 ("dport", be16), ("proto", proto), ("pad", b.array(u8, 3))])


def stats(b):
    u64, char = b.integer("__u64", 8), b.integer("char", 1, signed=True)
    return b.struct("stats", [("packets", u64), ("delta", b.integer("long", 8, signed=True)),
                              ("comm", b.array(char, 4))])


TAKEN = {
    "u32 → u64": codecs_of(LAYOUTS["u32"], LAYOUTS["u64"]),
    "s8 → s16": codecs_of(LAYOUTS["s8"], LAYOUTS["s16"]),
    "enum → char[8]": codecs_of(LAYOUTS["enum8"], LAYOUTS["chars"]),
    "u8[3][2] → flow": codecs_of(LAYOUTS["array2d"], LAYOUTS["flow"]),
    "flow_key → stats": codecs_of(net_flow, stats),
    "flow_key decoded → stats": codecs_of(net_flow, stats, decode=["key.proto=hex"]),
}
NOT_TAKEN = {
    "floats": codecs_of(LAYOUTS["u32"], LAYOUTS["float"]),
    "bools": codecs_of(LAYOUTS["u32"], LAYOUTS["bool"]),
    "unions": codecs_of(LAYOUTS["u32"], LAYOUTS["union"]),
    "bitfields": codecs_of(LAYOUTS["u32"], LAYOUTS["bitfields"]),
    "128-bit ints": codecs_of(LAYOUTS["u32"], LAYOUTS["int128"]),
    "anonymous members": codecs_of(LAYOUTS["u32"], LAYOUTS["mixed"]),
    "--default-zero": codecs_of(LAYOUTS["u32"], LAYOUTS["flow"], default_zero=True),
    "arrays of structs": codecs_of(LAYOUTS["u32"], lambda b: b.array(b.struct(
        "pt", [("a", b.integer("__u32", 4)), ("b", b.integer("__u32", 4))]), 2)),
}


def test_layouts_that_take_the_fast_path():
    for name, codecs in TAKEN.items():
        assert typedjson.typed_lines(*codecs) is not None, name
    for name, codecs in NOT_TAKEN.items():
        assert typedjson.typed_lines(*codecs) is None, name
    key, value = TAKEN["u32 → u64"]
    assert typedjson.typed_lines(key, PerCpuCodec(value, 2)) is None


# -- fuzzed lines: what a dump writes, what a person types, and JSON-level junk -------------

def _records(codecs):
    key, value = (node_values(c.node) for c in codecs)
    return st.one_of(
        st.builds(lambda k, v: {"key": k, "value": v}, key, value),
        st.builds(lambda k, v: {"value": v, "key": k}, key, value),
        st.builds(lambda k, v, x: {"key": k, "value": v, x: 1}, key, value,
                  st.sampled_from(["values", "extra", "Key"])),
        st.builds(lambda k: {"key": k}, key),
        st.just([1, 2]), st.just(None), st.integers())


_SPELLINGS = st.sampled_from([
    "", "   ", "\t", "{", "}", "NaN", "Infinity", "-0", "1e400", "1.0", "[]",
    '{"key":1,"key":2,"value":3}', '{"key":1,"value":2}{"key":1,"value":2}',
    '{"key":1,"value":2}, {"key":3,"value":4}', '{"key":\n', '"value":1}', '\ufeff{"key":1}',
    '{"key":"\\ud800","value":1}', '{"k\\u0065y":7,"value":8}', '{"key":007,"value":1}',
    '{"key":18446744073709551616,"value":1}', '{"key":1, "value":2}\r', '\x0c{"key":1}',
])


def _line(codecs):
    return st.one_of(
        _records(codecs).map(lambda r: json.dumps(r, separators=(",", ":"))),
        _records(codecs).map(lambda r: json.dumps(r, indent=None, ensure_ascii=False)),
        _records(codecs).map(lambda r: json.dumps(r, indent=1)),  # a record over lines
        _SPELLINGS)


def _outcome(path, codecs):
    try:
        r = read.read_records(path, INFO, fmt="jsonl", codecs=codecs)
        return r.count, r.keys, r.values, [r.line_of(i) for i in range(r.count)]
    except Exception as exc:  # noqa: BLE001 -- compared, not handled
        return type(exc), str(exc)


@pytest.mark.parametrize("name", list(TAKEN))
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fast_and_general_paths_agree(name, data, tmp_path, monkeypatch):
    """Every record, line number and error (file:line, field, token) exactly as the general
    reader gives them, whether the fast path takes the block or declines it."""
    codecs = TAKEN[name]
    good = _records(codecs).filter(lambda r: isinstance(r, dict) and len(r) == 2 and "value" in r)
    lines = data.draw(st.lists(st.one_of(good.map(json.dumps), _line(codecs)), max_size=12))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + data.draw(st.sampled_from(["", "\n"])))
    fast = _outcome(str(path), codecs)
    with monkeypatch.context() as m:
        m.setattr(read, "typed_lines", lambda *codecs: None)
        general = _outcome(str(path), codecs)
    assert fast == general


def test_blocks_the_fast_path_declines_go_the_general_way(tmp_path, monkeypatch):
    """A file of good records takes the fast path for every block; one bad record sends its
    block to the general reader, which names it as ever; nothing else changes."""
    codecs = TAKEN["flow_key → stats"]
    record = {"key": {"saddr": "10.0.0.1", "daddr": "192.168.0.1", "sport": 40000,
                      "dport": 443, "proto": "IPPROTO_TCP", "pad": [0, 0, 0]},
              "value": {"packets": 3, "delta": -2, "comm": "sh"}}
    lines = [json.dumps(record)] * 3000
    taken = []
    real = typedjson.TypedLines.encode
    monkeypatch.setattr(typedjson.TypedLines, "encode",
                        lambda self, block: taken.append(real(self, block)) or taken[-1])
    monkeypatch.setattr(read, "_JSONL_CHUNK", 1 << 16)
    path = tmp_path / "ok.jsonl"
    path.write_text("\n".join(lines) + "\n")
    records = read.read_records(str(path), INFO, codecs=codecs)
    assert records.count == 3000 and len(taken) > 1 and None not in taken
    assert records.keys[:12] == bytes([10, 0, 0, 1, 192, 168, 0, 1, 0x9c, 0x40, 1, 0xbb])
    bad = dict(record, key=dict(record["key"], saddr="10.0.0.256"))
    lines[2500] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    taken.clear()
    with pytest.raises(InputError, match=r"ok\.jsonl:2501: key\.saddr: not an ipv4 value: "
                                              r"'10\.0\.0\.256'"):
        read.read_records(str(path), INFO, codecs=codecs)
    assert None in taken


def test_a_file_the_fast_path_declines_is_parsed_once(tmp_path, monkeypatch):
    """Integers spelled as text load through the general reader; after the first block the
    fast path declines it is not tried again (nothing is parsed twice)."""
    codecs = TAKEN["u32 → u64"]
    calls = []
    real = typedjson.TypedLines.encode
    monkeypatch.setattr(typedjson.TypedLines, "encode",
                        lambda self, block: calls.append(len(block)) or real(self, block))
    monkeypatch.setattr(read, "_JSONL_CHUNK", 1 << 12)
    path = tmp_path / "hex.jsonl"
    path.write_text("".join(f'{{"key":"0x{i:x}","value":{i}}}\n' for i in range(2000)))
    records = read.read_records(str(path), INFO, codecs=codecs)
    assert records.count == 2000 and records.keys[4:8] == (1).to_bytes(4, "little")
    assert len(calls) == 1


# -- the demo's flow records, as dump writes them and mutated ------------------------------

FLOWS = codecs_of(net_flow, lambda b: b.struct("flow_stats", [
    (name, b.integer("__u64", 8)) for name in ("packets", "bytes", "first_seen_ns",
                                                 "last_seen_ns")]))
_PROTOS = ["IPPROTO_ICMP", "IPPROTO_TCP", "IPPROTO_UDP"]


_GOOD = {
    "key": {"saddr": st.ip_addresses(v=4).map(str), "daddr": st.ip_addresses(v=4).map(str),
            "sport": st.integers(0, 65535), "dport": st.integers(0, 65535),
            "proto": st.sampled_from(_PROTOS),
            "pad": st.lists(st.integers(0, 255), min_size=3, max_size=3)},
    "value": {name: st.integers(0, (1 << 64) - 1)
              for name in ("packets", "bytes", "first_seen_ns", "last_seen_ns")},
}
_ADDRS = st.one_of(
    st.sampled_from(["10.0.0.256", "1.2.3", "1.2.3.4.5", "01.2.3.4", " 1.2.3.4", "1.2.3.4 ",
                     "::1", "", "1.2.3.-4", "\u0661.2.3.4", "1.2.3.4\u0000", "0x1.2.3.4"]),
    st.integers(0, 1 << 33), st.text(max_size=16))
_PORTS = st.sampled_from([65536, -1, 1 << 64, 1 << 70, "80", "0x50", 80.0, True, None])
_BAD = {
    "saddr": _ADDRS, "daddr": _ADDRS, "sport": _PORTS, "dport": _PORTS,
    "proto": st.one_of(st.integers(-300, 300),
                       st.sampled_from(["IPPROTO_SCTP", "6", "ipproto_tcp", "", None])),
    "pad": st.one_of(st.lists(st.sampled_from([0, 255, 256, -1, 1 << 64, "0", 0.0, False]),
                              max_size=4), st.just("abc"), st.just({"0": 0})),
    **{name: st.one_of(st.sampled_from([1 << 64, -1, 1 << 200, -(1 << 70), "1", 1.5, True]),
                       st.integers(-(1 << 80), 1 << 80))
       for name in ("packets", "bytes", "first_seen_ns", "last_seen_ns")},
}
GOOD_FLOWS = st.fixed_dictionaries({side: st.fixed_dictionaries(fields)
                                    for side, fields in _GOOD.items()})


@st.composite
def _bad_flow(draw):
    """A flow record with one thing wrong: a value out of range or of the wrong kind, a
    member missing or added, or the members of a side reordered (which is fine)."""
    record = draw(GOOD_FLOWS)
    side = draw(st.sampled_from(["key", "value"]))
    field = draw(st.sampled_from(sorted(_GOOD[side])))
    change = draw(st.sampled_from(["value", "value", "missing", "extra", "reordered"]))
    if change == "value":
        record[side][field] = draw(_BAD[field])
    elif change == "missing":
        del record[side][field]
    elif change == "extra":
        record[side]["extra"] = 1
    else:
        record[side] = dict(reversed(record[side].items()))
    return record


FLOW_RECORDS = st.one_of(*[GOOD_FLOWS] * 6, _bad_flow())


def _flow_line():
    """A record as dump writes it (compact, so pieces take the one-parse path), sometimes
    spaced, with a CR, or a blank line."""
    compact = FLOW_RECORDS.map(lambda r: json.dumps(r, separators=(",", ":")))
    return st.one_of(*[compact] * 12, FLOW_RECORDS.map(json.dumps),
                     compact.map(lambda line: line + "\r"), st.just(""))


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_flow_line(), min_size=1, max_size=40),
       piece=st.sampled_from([1 << 8, 1 << 10, 1 << 19]), end=st.sampled_from(["", "\n"]))
def test_fuzzed_flow_records_load_the_same_by_both_paths(lines, piece, end, tmp_path,
                                                          monkeypatch):
    """Flow records with out-of-range ports, bytes and counters, bad addresses, unknown
    protocol names, missing and extra members, >64-bit integers: the fast path (taking
    pieces of several sizes whole, or declining them) loads exactly the bytes, lines and
    errors of the general reader."""
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(lines) + end)
    monkeypatch.setattr(read, "_JSONL_CHUNK", piece)
    fast = _outcome(str(path), FLOWS)
    with monkeypatch.context() as m:
        m.setattr(read, "typed_lines", lambda *codecs: None)
        general = _outcome(str(path), FLOWS)
    assert fast == general


def _dumped_flows(count):
    return [json.dumps({"key": {"saddr": f"10.0.{i >> 8 & 255}.{i & 255}",
                                "daddr": "192.168.0.1", "sport": 1024 + i, "dport": 443,
                                "proto": _PROTOS[i % 3], "pad": [0, 0, 0]},
                        "value": {"packets": i, "bytes": (1 << 64) - 1 - i,
                                  "first_seen_ns": 1 << 40, "last_seen_ns": 0}},
                       separators=(",", ":")) for i in range(count)]


def test_what_dump_writes_is_parsed_a_piece_at_a_time(tmp_path, monkeypatch):
    """Every piece of a dump's lines reaches the typed path as one block and is taken; the
    bytes are those the general reader encodes."""
    blocks = []
    real = typedjson.TypedLines.encode
    monkeypatch.setattr(typedjson.TypedLines, "encode",
                        lambda self, block: blocks.append(block) or real(self, block))
    monkeypatch.setattr(read, "_JSONL_CHUNK", 1 << 14)
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(_dumped_flows(2000)) + "\n")
    fast = _outcome(str(path), FLOWS)
    assert len(blocks) > 3 and all(isinstance(b, typedjson.RecordLines) for b in blocks)
    assert sum(b.count for b in blocks) == 2000
    monkeypatch.setattr(read, "typed_lines", lambda *codecs: None)
    assert fast == _outcome(str(path), FLOWS)
    assert fast[1][:16] == bytes([10, 0, 0, 0, 192, 168, 0, 1, 4, 0, 1, 0xbb, 1, 0, 0, 0])


@pytest.mark.parametrize("text,count", [
    ('{"a":1}\n{"a":2}\n', 2),
    ('{"a":1}\n{"a":2}', 2),
    ('{"a":1}', 1),
    ('{"a":1}\r\n{"a":2}\r\n', None),  # CRLF: line by line
    ('{"a":1}\n\n{"a":2}\n', None),  # a blank line
    (' {"a":1}\n', None),
    ('{"a":1} \n', None),
    ('{"a":\n1}\n{"a":2}\n', None),  # a record over two lines
    ('{"a":{}\n}\n', None),
    ('[1]\n', None),
])
def test_record_lines_only_vouches_for_one_object_a_line(text, count):
    block = typedjson.record_lines(text.encode())
    assert (block and block.count) == count


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.dictionaries(st.sampled_from("ab"), st.one_of(st.integers(), st.just({"c": [1]})),
                    max_size=2).map(json.dumps),
    st.sampled_from(["{", "}", "{}", "}{", "} {", "},{", "\n", " ", "[", "]", '"x"', "1",
                     ",", ":", '{"a":', "}\n{"])), max_size=10).map("".join))
def test_record_lines_and_one_parse_find_what_a_parse_per_line_finds(text):
    """Whenever record_lines vouches for a piece and one parse of it finds as many values
    as it has lines, each line parses on its own to the same value."""
    block = typedjson.record_lines(text.encode())
    if block is None:
        return
    try:
        values = msgspec.json.Decoder().decode_lines(text)
    except msgspec.DecodeError:
        return
    if len(values) != block.count:
        return
    assert [json.loads(line) for line in text.removesuffix("\n").split("\n")] == values
