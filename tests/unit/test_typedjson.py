"""The typed JSONL fast path (msgspec) against the general reader: the same records, lines
and errors on fuzzed input; and which layouts take it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.records import read, typedjson
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
    with pytest.raises(InputError, match=r"ok\.jsonl:2501: key\.saddr: not a ipv4 value: "
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
