"""``bpfbatch load / delete / clear / drain / bench`` end to end on real maps, checked against
``bpftool -j map dump`` (an independent reader)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import cursor, writes

FORMATS = ["jsonl", "json", "csv", "bpftool-json"]


def bpfbatch(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "bpfbatch", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=120)


def bpftool_dump(m: Map) -> list[str]:
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                         capture_output=True, text=True, check=True).stdout
    return sorted(json.dumps(entry, sort_keys=True) for entry in json.loads(out))


@pytest.fixture
def btf():
    with BtfBuilder() as b:
        u8, u16 = b.integer("__u8", 1), b.integer("__u16", 2)
        u32, u64 = b.integer("__u32", 4), b.integer("__u64", 8)
        char, s16 = b.integer("char", 1, signed=True), b.integer("short", 2, signed=True)
        key = b.struct("flow", [("addr", u32), ("port", u16), ("proto", u8)])
        value = b.struct("stats", [("packets", u64), ("bytes", u64),
                                   ("comm", b.array(char, 16)), ("delta", s16)])
        b.load()
        yield b, key, value


@pytest.fixture
def maps(btf):
    builder, key_id, value_id = btf
    created = []

    def make(map_type=MapType.HASH, *, typed=True, max_entries=1024, entries=40):
        extra = dict(btf_fd=builder.load(), btf_key_type_id=key_id,
                     btf_value_type_id=value_id) if typed else {}
        m = Map.create(map_type, 8, 40, max_entries, name="bb_wcli", **extra)
        created.append(m)
        if entries:
            fill(m, entries)
        return m

    yield make
    for m in created:
        m.close()


def fill(m: Map, n: int, start: int = 0) -> None:
    keys = np.zeros(n, dtype=[("addr", "<u4"), ("port", "<u2"), ("proto", "u1"), ("pad", "u1")])
    keys["addr"], keys["port"], keys["proto"] = np.arange(start, start + n), 443, 17
    slots = m.info.value_stride // 40
    values = np.zeros((n, slots), dtype=[("packets", "<u8"), ("bytes", "<u8"), ("comm", "S16"),
                                         ("delta", "<i2"), ("pad", "V6")])
    values["packets"] = np.arange(start, start + n)[:, None] + np.arange(slots)
    values["bytes"] = np.arange(start, start + n)[:, None] * 1000
    values["comm"], values["delta"] = b"sshd", -7
    writes.update(m, keys, values, n)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("map_type,typed", [(MapType.HASH, True), (MapType.PERCPU_HASH, True),
                                            (MapType.HASH, False)])
def test_drain_then_load_round_trip_is_identical(maps, tmp_path, fmt, map_type, typed):
    m = maps(map_type, typed=typed)
    before = bpftool_dump(m)
    out = tmp_path / f"dump.{fmt}"
    drained = bpfbatch("drain", "--map-id", m.info.id, "-o", fmt, "--batch-size", 7)
    assert drained.returncode == 0, drained.stderr
    assert "40 entries drained" in drained.stderr
    assert bpftool_dump(m) == []
    out.write_text(drained.stdout)
    loaded = bpfbatch("load", "--map-id", m.info.id, out, "--format", fmt)
    assert loaded.returncode == 0, loaded.stderr
    assert bpftool_dump(m) == before


@pytest.mark.parametrize("fmt", FORMATS)
def test_dump_clear_load_dump_is_identical(maps, tmp_path, fmt):
    m = maps(MapType.PERCPU_HASH)
    first = bpfbatch("dump", "--map-id", m.info.id, "-o", fmt)
    assert first.returncode == 0, first.stderr
    (tmp_path / "dump").write_text(first.stdout)
    assert bpfbatch("clear", "--map-id", m.info.id).returncode == 0
    loaded = bpfbatch("load", "--map-id", m.info.id, tmp_path / "dump", "--format", fmt)
    assert loaded.returncode == 0, loaded.stderr
    again = bpfbatch("dump", "--map-id", m.info.id, "-o", fmt)
    assert entries(again.stdout, fmt) == entries(first.stdout, fmt)


@pytest.fixture
def map_of_maps():
    """``map_of_maps(type)``: an outer map whose slots 1, 4 and 6 hold three inner arrays;
    returns it and the inner maps' ids by slot. The test holds every map open."""
    created = []

    def make(map_type):
        inner = [Map.create(MapType.ARRAY, 4, 4, 1, name="bb_inner") for _ in range(3)]
        outer = Map.create(map_type, 4, 4, 8, name="bb_outer", inner_map_fd=inner[0].fd)
        created.extend([outer, *inner])
        for slot, child in zip((1, 4, 6), inner):
            outer.update(slot.to_bytes(4, "little"), child.fd.to_bytes(4, "little"))
        return outer, {slot: child.info.id for slot, child in zip((1, 4, 6), inner)}

    yield make
    for m in created:
        m.close()


@pytest.mark.parametrize("map_type", [MapType.HASH_OF_MAPS, MapType.ARRAY_OF_MAPS])
def test_map_of_maps_dump_clear_load_puts_the_same_inner_maps_back(map_of_maps, tmp_path,
                                                                   map_type):
    """A dump holds inner map ids; the load must open them, not write them as fds."""
    m, inner_ids = map_of_maps(map_type)
    before = bpftool_dump(m)
    dumped = bpfbatch("dump", "--map-id", m.info.id, "-o", "jsonl")
    assert dumped.returncode == 0, dumped.stderr
    (tmp_path / "dump.jsonl").write_text(dumped.stdout)
    assert bpfbatch("clear", "--map-id", m.info.id).returncode == 0
    assert bpftool_dump(m) == []
    loaded = bpfbatch("load", "--map-id", m.info.id, tmp_path / "dump.jsonl")
    assert loaded.returncode == 0, loaded.stderr
    assert bpftool_dump(m) == before
    got = {int.from_bytes(bytes(int(b, 16) for b in e["key"]), "little"):
           int.from_bytes(bytes(int(b, 16) for b in e["value"]), "little")
           for e in map(json.loads, before)}
    assert got == inner_ids


def test_map_of_maps_load_of_a_missing_inner_map_names_the_record(map_of_maps, tmp_path):
    m, inner_ids = map_of_maps(MapType.HASH_OF_MAPS)
    before = bpftool_dump(m)
    missing = 0x7FFFFFFE  # ids count up from 1: this one is never reached here
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"key": list((slot).to_bytes(4, "little")),
                                        "value": list(map_id.to_bytes(4, "little"))}) + "\n"
                            for slot, map_id in [(2, inner_ids[1]), (3, missing)]))
    result = bpfbatch("load", "--map-id", m.info.id, path)
    assert result.returncode == 1
    assert result.stderr == (f"bpfbatch: error: {path}:2: value: inner map id {missing} "
                             "does not exist (ENOENT)\n")
    assert bpftool_dump(m) == before


def entries(text: str, fmt: str) -> list[str]:
    """A dump's entries in a canonical order (the kernel may return them in another)."""
    if fmt in ("json", "bpftool-json"):
        return sorted(json.dumps(entry) for entry in json.loads(text))
    return sorted(text.splitlines())


def test_load_reads_stdin_and_guesses_format_from_suffix(maps, tmp_path):
    m = maps(entries=0)
    records = [{"key": {"addr": i, "port": 1, "proto": 2}, "value": {"packets": i, "comm": "x"}}
               for i in range(5)]
    result = bpfbatch("load", "--default-zero", "--map-id", m.info.id, "-", stdin="\n".join(map(json.dumps, records)))
    assert result.returncode == 0, result.stderr
    path = tmp_path / "array.json"
    path.write_text(json.dumps([dict(r, key=dict(r["key"], addr=r["key"]["addr"] + 5))
                                for r in records]))
    assert bpfbatch("load", "--default-zero", "--map-id", m.info.id, path).returncode == 0
    assert len(bpftool_dump(m)) == 10


@pytest.mark.parametrize("bad_line,message", [
    ('{"key":{"addr":1,"port":2,"proto":3},"value":{"packets":18446744073709551616}}', "value.packets: 18446744073709551616 does not fit"),
    ('{"key":{"addr":1,"port":70000,"proto":3},"value":{}}', "key.port: 70000 does not fit u16"),
    ('{"key":{"addr":1,"port":2,"proto":3},"value":{"packetz":1}}', "no field 'packetz'"),
    ('{"key":{"addr":1,"port":2,"proto":3},"value":{"packets":1}', "invalid JSON"),
    ('{"key":{"addr":1,"port":2,"proto":3}}', 'missing "value"'),
    ('{"key":{"addr":1,"port":2,"proto":3},"value":{},"extra":1}', "unknown member 'extra'"),
])
def test_bad_record_names_file_and_line_and_changes_nothing(maps, tmp_path, bad_line, message):
    m = maps()
    before = bpftool_dump(m)
    good = '{"key":{"addr":900,"port":2,"proto":3},"value":{"packets":1}}'
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([good, good, bad_line, good]) + "\n")
    result = bpfbatch("load", "--default-zero", "--map-id", m.info.id, path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"bpfbatch: error: {path}:3")
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert bpftool_dump(m) == before


def test_raw_map_wrong_byte_count_names_line(maps, tmp_path):
    m = maps(typed=False, entries=0)
    path = tmp_path / "raw.json"
    path.write_text('[\n{"key": "0100000000000000", "value": "%s"},\n'
                    '{"key": ["0x01", "0x02"], "value": "%s"}\n]\n' % ("00" * 40, "00" * 40))
    result = bpfbatch("load", "--default-zero", "--map-id", m.info.id, path)
    assert result.returncode == 1 and f"{path}:3: key: expected 8 bytes, got 2" in result.stderr
    assert bpftool_dump(m) == []


def test_kernel_failure_part_way_reports_applied_and_failing_record(maps, tmp_path):
    m = maps(max_entries=8, entries=0)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"key": {"addr": i, "port": 0, "proto": 0},
                                        "value": {"packets": i}}) + "\n" for i in range(12)))
    result = bpfbatch("load", "--default-zero", "--map-id", m.info.id, path, "--batch-size", 5)
    assert result.returncode == 1
    assert "8 of 12 entries applied" in result.stderr and "(E2BIG)" in result.stderr
    assert f"record at {path}:9" in result.stderr
    assert len(bpftool_dump(m)) == 8


def test_if_absent_and_if_present(maps, tmp_path):
    m = maps(entries=4)  # addr 0..3
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"key": {"addr": i, "port": 443, "proto": 17},
                                        "value": {"packets": 999}}) + "\n" for i in range(2, 6)))
    absent = bpfbatch("load", "--default-zero", "--map-id", m.info.id, path, "--if-absent")
    assert "2 entries loaded, 2 skipped" in absent.stderr
    present = bpfbatch("load", "--default-zero", "--map-id", m.info.id, path, "--if-present", "--per-key")
    assert "4 entries loaded, 0 skipped" in present.stderr
    both = bpfbatch("load", "--map-id", m.info.id, path, "--if-present", "--if-absent")
    assert both.returncode == 2 and "choose one" in both.stderr


def test_delete_file_skips_missing_keys_and_accepts_a_dump(maps, tmp_path):
    m = maps(entries=10)
    dumped = bpftool_dump(m)
    path = tmp_path / "keys.jsonl"
    path.write_text("".join(json.dumps({"key": {"addr": a, "port": 443, "proto": 17}}) + "\n"
                            for a in (1, 2, 50, 3)))
    result = bpfbatch("delete", "--map-id", m.info.id, path)
    assert result.returncode == 0 and "3 entries deleted, 1 not found" in result.stderr
    assert len(bpftool_dump(m)) == 7
    full = tmp_path / "dump.json"
    full.write_text("[" + ",".join(dumped) + "]")
    result = bpfbatch("delete", "--map-id", m.info.id, full, "--format", "bpftool-json")
    assert "7 entries deleted, 3 not found" in result.stderr
    assert bpftool_dump(m) == []


def test_clear_hash_and_array(maps):
    m = maps(entries=30)
    assert "30 entries removed" in bpfbatch("clear", "--map-id", m.info.id).stderr
    assert bpftool_dump(m) == []
    with Map.create(MapType.ARRAY, 4, 8, 16, name="bb_wcli") as array:
        writes.update(array, np.arange(16, dtype=np.uint32), np.arange(16, dtype=np.uint64), 16)
        result = bpfbatch("clear", "--map-id", array.info.id)
        assert "16 entries zeroed" in result.stderr
        _, values = cursor.read_all(array)
        assert len(values) == 16 and not values.any()


def test_drain_into_a_pipe_that_closes_midway_puts_the_batch_back(maps):
    m = maps(max_entries=1 << 16, entries=0)
    fill(m, 30000)
    drain = subprocess.Popen([sys.executable, "-m", "bpfbatch", "drain", "--map-id",
                              str(m.info.id), "-o", "jsonl", "--batch-size", "500"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head = subprocess.run(["head", "-n", "3"], stdin=drain.stdout, capture_output=True, text=True)
    drain.stdout.close()
    stderr = drain.stderr.read()
    drain.stderr.close()
    assert drain.wait(60) == 141  # 128 + SIGPIPE, as for every command
    assert len(head.stdout.splitlines()) == 3
    match = re.search(r"output failed: Broken pipe; (\d+) entries delivered, (\d+) put back "
                      r"into the map \(EPIPE\)$", stderr.strip())
    assert match, stderr
    assert len(stderr.strip().splitlines()) == 1  # no second error from the final flush
    delivered = int(match.group(1))
    assert 0 < delivered < 30000
    assert len(bpftool_dump(m)) == 30000 - delivered


def test_bench_prints_the_table_and_draws_the_chart(tmp_path):
    pytest.importorskip("matplotlib")
    chart = tmp_path / "bench.png"
    result = bpfbatch("bench", "--entries", 3000, "--plot", chart)
    assert result.returncode == 0, result.stderr
    for row in ("lookup ", "lookup_and_delete", "delete "):
        assert row in result.stdout
    assert "batch 1000" in result.stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_csv_dump_clear_load_dump_keeps_cells_that_read_as_numbers(tmp_path):
    """Each CSV cell loads by its field's type: a char '7', a char[8] "42", "true" or "NaN",
    bools, enums, floats, nested structs and arrays come back unchanged."""
    with BtfBuilder() as b:
        u16, u32 = b.integer("__u16", 2), b.integer("__u32", 4)
        char = b.integer("char", 1, char=True)
        plain_char = b.integer("char", 1, signed=True)
        boolean = b.integer("_Bool", 1, boolean=True)
        span = b.struct("span", [("lo", u16), ("hi", b.integer("short", 2, signed=True))])
        value = b.struct("mixed", [("c", char), ("name", b.array(plain_char, 8)),
                                   ("ok", boolean), ("shade", b.enum("color", {"RED": 0,
                                                                              "GREEN": 1})),
                                   ("ratio", b.float("float", 4)), ("range", span),
                                   ("slots", b.array(u32, 3))])
        m = Map.create(MapType.HASH, 4, 36, 16, name="bb_wcsv", btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=value)
    with m:
        rows = [("7", b"42", 1, 1, 1.5), ("t", b"true", 0, 7, -0.25), ("0", b"NaN", 1, 0, 0.0)]
        for i, (c, name, ok, shade, ratio) in enumerate(rows):
            m.update(i.to_bytes(4, "little"),
                     c.encode() + name.ljust(8, b"\0") + bytes([ok]) + bytes(2)
                     + struct.pack("<if", shade, ratio) + struct.pack("<Hh", 7, -2)
                     + struct.pack("<3I", 1, 2, 3))
        before = raw_entries(m)
        first = bpfbatch("dump", "--map-id", m.info.id, "-o", "csv")
        assert first.returncode == 0, first.stderr
        assert "7,42,true,GREEN,1.5" in first.stdout  # the cells that used to load wrong
        (tmp_path / "dump.csv").write_text(first.stdout)
        assert bpfbatch("clear", "--map-id", m.info.id).returncode == 0
        loaded = bpfbatch("load", "--map-id", m.info.id, tmp_path / "dump.csv")
        assert loaded.returncode == 0, loaded.stderr
        again = bpfbatch("dump", "--map-id", m.info.id, "-o", "csv")
        assert entries(again.stdout, "csv") == entries(first.stdout, "csv")
        assert raw_entries(m) == before


def raw_entries(m: Map) -> list[tuple[bytes, bytes]]:
    """The map's bytes as the kernel returns them (bpftool prints no floats to compare)."""
    keys, values = cursor.read_all(m)
    return sorted(zip(map(bytes, keys), map(bytes, values)))


@pytest.mark.parametrize("fmt,bad,message", [
    ("jsonl", '{"key": 2, "value": {"f": 1e39, "d": 0}}',
     "value.f: 1e+39 is beyond the range of a 4-byte float"),
    ("jsonl", '{"key": 2, "value": {"f": 0, "d": 1e400}}',
     "value.d: 1e400 is beyond the range of a 8-byte float"),
    ("csv", "2,1e39,0", "value.f: 1e+39 is beyond the range of a 4-byte float"),
])
def test_float_beyond_its_field_names_file_line_and_field(tmp_path, fmt, bad, message):
    """One line naming the record and the field, not a traceback, and nothing written."""
    with BtfBuilder() as b:
        u32 = b.integer("__u32", 4)
        value = b.struct("pair", [("f", b.float("float", 4)), ("d", b.float("double", 8))])
        m = Map.create(MapType.HASH, 4, 16, 16, name="bb_wfloat", btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=value)
    with m:
        good = '{"key": 1, "value": {"f": 1.5, "d": 2.5}}' if fmt == "jsonl" else \
            "key,value.f,value.d\n1,1.5,2.5"
        path = tmp_path / f"in.{fmt}"
        path.write_text(f"{good}\n{bad}\n")
        result = bpfbatch("load", "--map-id", m.info.id, path)
        assert result.returncode == 1
        line = 2 if fmt == "jsonl" else 3
        assert result.stderr == f"bpfbatch: error: {path}:{line}: {message}\n"
        assert raw_entries(m) == []


def test_a_field_left_out_is_an_error_unless_default_zero(maps, tmp_path):
    """The value rule: no silent defaulting; --default-zero asks for it."""
    m = maps(entries=0)
    path = tmp_path / "partial.jsonl"
    path.write_text('{"key":{"addr":1,"port":2,"proto":3},"value":{"packets":5,"bytes":6,'
                    '"comm":"x","delta":1}}\n'
                    '{"key":{"addr":2,"port":2,"proto":3},"value":{"packets":5}}\n')
    refused = bpfbatch("load", "--map-id", m.info.id, path)
    assert refused.returncode == 1 and bpftool_dump(m) == []
    assert refused.stderr == (f"bpfbatch: error: {path}:2: value: missing field bytes (a field "
                              "left out is an error; load --default-zero makes it 0)\n")
    assert bpfbatch("load", "--default-zero", "--map-id", m.info.id, path).returncode == 0
    assert len(bpftool_dump(m)) == 2
