"""``dump -o parquet|arrow``, ``load`` of them and ``Map.to_arrow``/``to_pandas`` on real maps,
checked against ``bpftool -j map dump`` and read by independent readers (DuckDB, pandas)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fault_helpers
import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch._sys.libbpf import num_possible_cpus
from bpfbatch.btf import BtfBuilder
from bpfbatch.labs.demo import create_flow_table, fill_flow_table
from bpfbatch.map import writes

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def bpfbatch(*args, stdin: bytes | None = None):
    return subprocess.run([sys.executable, "-m", "bpfbatch", *map(str, args)], input=stdin,
                          capture_output=True, timeout=120)


def bpftool_dump(m: Map) -> list[dict]:
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def raw_entries(m: Map) -> list[str]:
    """bpftool's raw bytes of every entry, sorted: the exact content of the map."""
    return sorted(json.dumps([e["key"], e.get("value", e.get("values"))]) for e in bpftool_dump(m))


@pytest.fixture
def flows():
    """The demo's flow table (struct key with an enum and a u8[3] array), 3000 flows."""
    m = create_flow_table(4096, name=f"bb_col{os.getpid()}")
    fill_flow_table(m, 3000)
    try:
        yield m
    finally:
        m.close()


@pytest.fixture
def typed_map():
    """``typed_map(map_type)``: a hash keyed by u32 whose value has a u64 (not a double: bpftool
    cannot print floats), a signed field,
    a u16[2] array and a char[16]; 50 entries, value i derived from key i."""
    created = []

    def make(map_type=MapType.HASH):
        with BtfBuilder() as b:
            u16, u32 = b.integer("__u16", 2), b.integer("__u32", 4)
            s32, char = b.integer("int", 4, signed=True), b.integer("char", 1, signed=True)
            value = b.struct("v", [("bytes", b.integer("__u64", 8)), ("delta", s32),
                                   ("ports", b.array(u16, 2)), ("comm", b.array(char, 16))])
            m = Map.create(map_type, 4, 32, 64, name=f"bb_colt{os.getpid()}", btf_fd=b.load(),
                           btf_key_type_id=u32, btf_value_type_id=value)
        created.append(m)
        slots = m.info.value_stride // 32
        keys = np.arange(50, dtype=np.uint32)
        values = np.zeros((50, slots), dtype=[("bytes", "<u8"), ("delta", "<i4"),
                                              ("ports", "<u2", 2), ("comm", "S16")])
        values["comm"] = [[f"t{i}-cpu{c}".encode() for c in range(slots)] for i in range(50)]
        values["delta"] = -keys[:, None].astype(np.int32) + np.arange(slots)
        values["bytes"] = keys[:, None] * 1000
        values["ports"] = np.stack([keys, keys + 1], axis=1)[:, None, :].astype(np.uint16)
        writes.update(m, keys, values, 50)
        return m

    yield make
    for m in created:
        m.close()


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_flow_table_dump_clear_load_is_byte_identical(flows, tmp_path, fmt):
    before = raw_entries(flows)
    dumped = bpfbatch("dump", "--map-id", flows.info.id, "-o", fmt, "--batch-size", 700)
    assert dumped.returncode == 0, dumped.stderr
    path = tmp_path / f"flows.{fmt}"
    path.write_bytes(dumped.stdout)
    assert bpfbatch("clear", "--map-id", flows.info.id).returncode == 0
    assert raw_entries(flows) == []
    loaded = bpfbatch("load", "--map-id", flows.info.id, path)  # format from the suffix
    assert loaded.returncode == 0, loaded.stderr
    assert b"3000 entries loaded" in loaded.stderr
    assert raw_entries(flows) == before


def test_parquet_read_by_duckdb_matches_bpftool(flows, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "flows.parquet"
    path.write_bytes(bpfbatch("dump", "--map-id", flows.info.id, "-o", "parquet", "--decode",
                              "none").stdout)  # bpftool's formatted is the stored values
    rows = duckdb.sql(f"""SELECT "key.saddr", "key.sport", "key.proto"::VARCHAR, "key.pad",
                          "value.packets", "value.bytes", "value.last_seen_ns"
                          FROM '{path}'""").fetchall()
    theirs = sorted((e["formatted"]["key"]["saddr"], e["formatted"]["key"]["sport"],
                     e["formatted"]["key"]["proto"], e["formatted"]["key"]["pad"],
                     e["formatted"]["value"]["packets"], e["formatted"]["value"]["bytes"],
                     e["formatted"]["value"]["last_seen_ns"]) for e in bpftool_dump(flows))
    assert sorted((*r[:3], list(r[3]), *r[4:]) for r in rows) == theirs
    assert all(proto.startswith("IPPROTO_") for _, _, proto, *_ in theirs)  # names, not numbers


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_HASH])
def test_to_pandas_matches_bpftool_and_round_trips(typed_map, tmp_path, map_type):
    m = typed_map(map_type)
    frame = m.to_pandas()
    assert list(frame.columns) == ["key", "value.bytes", "value.delta", "value.ports",
                                   "value.comm"]
    theirs = {e["formatted"]["key"]: e["formatted"] for e in bpftool_dump(m)}
    assert len(frame) == len(theirs) == 50
    for row in frame.itertuples(index=False):
        want = theirs[row.key]
        if map_type == MapType.PERCPU_HASH:
            cpus = [slot["value"] for slot in want["values"]]
            assert len(cpus) == num_possible_cpus()
            assert list(row[1]) == [c["bytes"] for c in cpus]
            assert list(row[2]) == [c["delta"] for c in cpus]
            assert [list(p) for p in row[3]] == [c["ports"] for c in cpus]
            assert list(row[4]) == [c["comm"] for c in cpus]
        else:
            value = want["value"]
            assert (row[1], row[2], list(row[3]), row[4]) == (
                value["bytes"], value["delta"], value["ports"], value["comm"])
    # the table pandas wrote back loads into the map unchanged
    before = raw_entries(m)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "m.parquet")
    assert bpfbatch("clear", "--map-id", m.info.id).returncode == 0
    loaded = bpfbatch("load", "--map-id", m.info.id, tmp_path / "m.parquet")
    assert loaded.returncode == 0, loaded.stderr
    assert raw_entries(m) == before


def test_map_without_btf_is_one_binary_column_per_side(maps, tmp_path):
    m = maps(MapType.HASH, 4, 8, 16)
    m.update(b"\x01\x02\x03\x04", b"abcdefgh")
    table = m.to_arrow()
    assert table.schema.names == ["key", "value"]
    assert table.to_pylist() == [{"key": b"\x01\x02\x03\x04", "value": b"abcdefgh"}]


@pytest.mark.parametrize("btf", [False, True], ids=["raw", "typed"])
def test_per_cpu_columns_into_a_map_that_is_not_is_one_line(maps, typed_map, tmp_path, btf):
    """A per-CPU dump's list columns loaded into a plain map: refused naming the column, with
    or without BTF (a raw side has no field to ask the kind of)."""
    if btf:
        source, target = typed_map(MapType.PERCPU_HASH), typed_map()
    else:
        source, target = maps(MapType.PERCPU_HASH, 4, 8, 4), maps(MapType.HASH, 4, 8, 4)
        source.update(bytes(4), bytes(8 * num_possible_cpus()))
    table = pa.ipc.open_stream(bpfbatch("dump", "--map-id", source.info.id, "-o",
                                        "arrow").stdout).read_all()
    line = _load_error(target, table, tmp_path)
    assert line.startswith("bpfbatch: error: ") and "column value" in line
    assert "per-CPU values for a map that is not per-CPU" in line


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_pipe_and_a_closed_stdin_are_read_as_every_format_reads_them(flows, fmt):
    """Arrow seeks in a file: a pipe (a process substitution) is read whole first, as the
    text formats' pipes are; a closed stdin is one line, not a traceback."""
    ours = f"{sys.executable} -m bpfbatch"
    piped = subprocess.run(["bash", "-c", f"{ours} diff <({ours} dump --map-id {flows.info.id} "
                            f"-o {fmt}) id {flows.info.id} --format {fmt}"],
                           capture_output=True, text=True)
    assert piped.returncode == 0, piped.stderr
    closed = subprocess.run(["bash", "-c", f"{ours} load --map-id {flows.info.id} - --format "
                             f"{fmt} <&-"], capture_output=True, text=True)
    assert closed.returncode == 1
    assert closed.stderr == "bpfbatch: error: <stdin>: stdin is closed: nothing to read\n"


def test_empty_map_dumps_its_schema(flows, tmp_path):
    assert bpfbatch("clear", "--map-id", flows.info.id).returncode == 0
    out = bpfbatch("dump", "--map-id", flows.info.id, "-o", "arrow")
    assert out.returncode == 0, out.stderr
    table = pa.ipc.open_stream(out.stdout).read_all()
    assert table.num_rows == 0 and "value.bytes" in table.schema.names


def _load_error(m: Map, table, tmp_path) -> str:
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    before = raw_entries(m)
    result = bpfbatch("load", "--map-id", m.info.id, path)
    assert result.returncode != 0
    assert raw_entries(m) == before  # nothing half-done
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_parquet_input_is_one_line_and_writes_nothing(flows, tmp_path):
    good = flows.to_arrow()
    too_big = good.set_column(good.schema.get_field_index("key.sport"), "key.sport",
                              pa.array(np.arange(good.num_rows) + 65530, pa.int64()))
    assert "column key.sport: record 7: 65536 does not fit u16" in _load_error(flows, too_big,
                                                                              tmp_path)
    assert "missing column 'value.bytes'" in _load_error(flows, good.drop(["value.bytes"]),
                                                         tmp_path)
    extra = good.append_column("value.typo", pa.array(np.zeros(good.num_rows)))
    assert "unknown column 'value.typo'" in _load_error(flows, extra, tmp_path)
    nulls = good.set_column(0, "key.saddr", pa.array([None] + [1] * (good.num_rows - 1),
                                                      pa.uint32()))
    assert "column key.saddr: null in record 1" in _load_error(flows, nulls, tmp_path)
    protos = pa.array(["IPPROTO_TCP"] * (good.num_rows - 1) + ["IPPROTO_NOPE"])
    enum = good.set_column(good.schema.get_field_index("key.proto"), "key.proto", protos)
    assert "no enumerator 'IPPROTO_NOPE'" in _load_error(flows, enum, tmp_path)


def test_a_duplicated_column_is_one_line_naming_it_and_the_file(flows, tmp_path):
    """It was a KeyError traceback (pyarrow's ``Field "value.bytes" exists 2 times``)."""
    good = flows.to_arrow()
    twice = good.append_column("value.bytes", good.column("value.bytes"))
    line = _load_error(flows, twice, tmp_path)
    assert line == f"bpfbatch: error: {tmp_path / 'bad.parquet'}: column 'value.bytes' " \
                   "appears 2 times"


def test_not_parquet_names_the_file(flows, tmp_path):
    path = tmp_path / "x.parquet"
    path.write_text("hello\n")
    result = bpfbatch("load", "--map-id", flows.info.id, path)
    assert result.returncode != 0
    assert result.stderr.decode().startswith(f"bpfbatch: error: {path}: not parquet")


def test_without_pyarrow_the_error_names_the_extra(flows):
    blocked = ("import sys; sys.modules['pyarrow'] = None; from bpfbatch.cli import main; "
               f"sys.exit(main(['dump', '--map-id', '{flows.info.id}', '-o', 'parquet']))")
    result = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "bpfbatch: error: arrow: pyarrow is not installed (pip install 'bpfbatch[arrow]')"]
    assert result.stdout == ""


def test_binary_output_refuses_a_terminal(flows):
    import pty

    leader, follower = pty.openpty()
    try:
        result = subprocess.run([sys.executable, "-m", "bpfbatch", "dump", "--map-id",
                                 str(flows.info.id), "-o", "parquet"], stdout=follower,
                                stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    assert result.returncode == 2, result  # a usage error, named by dump's own option
    assert "error: --output: binary output: redirect it to a file or a pipe" in result.stderr


# -- decoders: stored values by default, display values on request ----------------------------

def test_columns_hold_the_view_and_every_dump_loads_back(flows, tmp_path):
    """The columns show what jsonl shows (``__be32 saddr`` as IPv4 text, ``__be16 sport``
    as the port read), each decoded column's metadata naming its decoder; ``--decode none``
    gives bpftool's stored integers. Every one of these dumps loads back to the same bytes
    with any of the options, since the columns say how they read."""
    theirs = {json.dumps(e["key"]): e["formatted"]["key"] for e in bpftool_dump(flows)}
    shown = [json.loads(line)["key"] for line in
             bpfbatch("dump", "--map-id", flows.info.id, "-o", "jsonl").stdout.splitlines()]
    plain = pq.read_table(pa.BufferReader(
        bpfbatch("dump", "--map-id", flows.info.id, "-o", "parquet", "--decode", "none").stdout))
    assert plain.schema.field("key.saddr").type == pa.uint32()
    assert plain.schema.field("key.saddr").metadata is None
    assert sorted(plain.column("key.saddr").to_pylist()) == \
        sorted(k["saddr"] for k in theirs.values())  # bpftool's stored integer

    decode = ["--decode", "key.saddr=ipv4", "--decode", "last_seen_ns=age"]
    before = raw_entries(flows)
    for made_with in ([], decode, ["--decode", "none"]):
        dumped = bpfbatch("dump", "--map-id", flows.info.id, "-o", "parquet", *made_with)
        assert dumped.returncode == 0, dumped.stderr
        path = tmp_path / "flows.parquet"
        path.write_bytes(dumped.stdout)
        table = pq.read_table(path)
        if made_with != ["--decode", "none"]:
            assert table.schema.field("key.saddr").type == pa.string()
            assert table.schema.field("key.saddr").metadata == {b"bpfbatch.decode": b"ipv4"}
            assert table.schema.field("key.sport").type == pa.uint16()
            assert table.schema.field("key.sport").metadata == {b"bpfbatch.decode": b"be16"}
            rows = sorted(zip(table.column("key.saddr").to_pylist(),
                              table.column("key.sport").to_pylist()))
            assert rows == sorted((k["saddr"], k["sport"]) for k in shown)  # jsonl's values
        if made_with == decode:
            assert table.schema.field("value.last_seen_ns").type == pa.float64()
            continue  # an age is relative to the clock: loaded back, it is another stamp
        for options in ([], decode, ["--decode", "none"]):
            assert bpfbatch("clear", "--map-id", flows.info.id).returncode == 0
            loaded = bpfbatch("load", "--map-id", flows.info.id, path, *options)
            assert loaded.returncode == 0, loaded.stderr
            assert raw_entries(flows) == before, (made_with, options)


def test_a_bad_display_value_names_the_column_and_record(flows, tmp_path):
    table = pq.read_table(pa.BufferReader(bpfbatch(
        "dump", "--map-id", flows.info.id, "-o", "parquet", "--decode", "key.saddr=ipv4").stdout))
    saddrs = table.column("key.saddr").to_pylist()
    saddrs[4] = "10.0.0.300"
    path = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(0, "key.saddr", pa.array(saddrs)), path)
    before = raw_entries(flows)
    result = bpfbatch("load", "--map-id", flows.info.id, path, "--decode", "key.saddr=ipv4")
    assert result.returncode != 0 and raw_entries(flows) == before
    assert result.stderr.decode().strip().splitlines() == [
        f"bpfbatch: error: {path}: column key.saddr: record 5: not an ipv4 value: '10.0.0.300'"]


# -- deleting commands: Arrow batches are delivered whole, Parquet is refused ---------------

def _arrow_batches(data: bytes):
    """The record batches a stream reader reads before the stream ends or breaks off."""
    reader = pa.ipc.open_stream(data)
    batches = []
    while True:
        try:
            batches.append(reader.read_next_batch())
        except (StopIteration, OSError, pa.ArrowInvalid):
            return batches


def test_drain_to_arrow_on_a_full_tmpfs_puts_back_what_was_not_written(tmp_path):
    n = 50_000  # 600 KB of records for a 256 KiB file system
    with fault_helpers.typed_map(n, name=f"bb_colf{os.getpid()}") as m:
        fault_helpers.fill(m, n)
        with fault_helpers.small_tmpfs(tmp_path, "256k") as mnt:
            path = mnt / "out.arrow"
            with open(path, "wb") as out:
                proc = subprocess.run(fault_helpers.bpfbatch_argv(
                    "drain", "--map-id", m.info.id, "-o", "arrow", "--batch-size", 4096),
                    stdout=out, stderr=subprocess.PIPE, timeout=120)
            batches = _arrow_batches(path.read_bytes())
        keys = np.concatenate([b.column("key").to_numpy() for b in batches]).astype(np.uint64)
        values = np.concatenate([b.column("value").to_numpy() for b in batches])
        outcome = fault_helpers.judge(m, n, (keys, values), proc.returncode,
                                      proc.stderr.decode())
        assert proc.returncode != 0 and "No space left on device" in outcome.stderr
        assert 0 < len(keys) < n and outcome.left == n - len(keys)
        assert outcome.good, outcome


@pytest.mark.parametrize("command", ["drain", "exec"])
def test_deleting_to_parquet_is_refused_before_anything_is_deleted(flows, command):
    before = raw_entries(flows)
    argv = ["drain", "--map-id", flows.info.id, "-o", "parquet"] if command == "drain" else \
        ["exec", "--map-id", flows.info.id, "--where", "key.dport == 53", "--action", "delete",
         "-o", "parquet"]
    result = bpfbatch(*argv)
    assert result.returncode != 0 and result.stdout == b""
    assert result.stderr.decode().strip().splitlines() == [
        "bpfbatch: error: -o parquet: a parquet file is readable only once its footer is "
        "written at the end, so no batch could count as delivered before the last; use -o "
        "arrow (delivered a batch at a time) or dump, then clear"]
    assert raw_entries(flows) == before
