"""``dump --sum``: per-CPU values added up exactly, checked against bpftool's per-CPU dump."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_cli_maps import assert_one_line_error, bpfbatch

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch._sys.libbpf import num_possible_cpus
from bpfbatch.btf import BtfBuilder

N = 20


def _percpu(name: str, with_enum: bool) -> Map:
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        last = ("kind", b.enum("kind", {"A": 0, "B": 1})) if with_enum else ("pad", u32)
        val = b.struct("ctr", [("packets", u64), ("drops", u32), last])
        return Map.create(MapType.PERCPU_HASH, 4, 16, 64, name=name, btf_fd=b.load(),
                          btf_key_type_id=u32, btf_value_type_id=val)


@pytest.fixture
def counters():
    m = _percpu(f"bb_sum_{os.getpid():x}", with_enum=False)
    for k in range(N):  # key 0 holds the largest u64 on every CPU: the sum exceeds 64 bits
        slots = b"".join((2**64 - 1 - c if k == 0 else k * 1000 + c).to_bytes(8, "little")
                         + (c + k).to_bytes(4, "little") + bytes(4)
                         for c in range(num_possible_cpus()))
        m.update(k.to_bytes(4, "little"), slots)
    path = f"/sys/fs/bpf/bb_sum_{os.getpid()}"
    m.pin(path)
    yield path
    os.unlink(path)
    m.close()


def test_sums_match_bpftools_per_cpu_values(counters):
    theirs = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "pinned", counters],
                                       capture_output=True, text=True, check=True).stdout)
    want = {e["formatted"]["key"]: {f: sum(c["value"][f] for c in e["formatted"]["values"])
                                    for f in ("packets", "drops", "pad")} for e in theirs}
    assert want[0]["packets"] > 2**64  # exact, not wrapped
    lines = bpfbatch("dump", "pinned", counters, "-o", "jsonl", "--sum",
                     check=True).stdout.splitlines()
    assert {r["key"]: r["value"] for r in map(json.loads, lines)} == want
    table = bpfbatch("dump", "pinned", counters, "-o", "table", "--sum",
                     check=True).stdout.splitlines()
    assert table[0].split() == ["key", "value.packets", "value.drops", "value.pad"]
    assert len(table) == 2 + N  # one row per key, not per CPU


def test_sum_refuses_what_cannot_be_summed(maps):
    m = _percpu(f"bb_sum2_{os.getpid():x}", with_enum=True)
    try:
        assert_one_line_error(bpfbatch("dump", "id", str(m.info.id), "--sum"), "--sum",
                              "field 'value.kind' (enum) cannot be summed")
    finally:
        m.close()
    plain = maps(MapType.HASH, 4, 8, 4, name=f"bb_nosum_{os.getpid():x}")
    assert_one_line_error(bpfbatch("dump", "id", str(plain.info.id), "--sum"),
                          "--sum", "not per-CPU")
    assert_one_line_error(bpfbatch("dump", "id", str(plain.info.id), "--sum", "-o",
                                   "bpftool-json"), "--sum")


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_summed_columns_hold_the_exact_sums_and_refuse_one_past_64_bits(counters, fmt,
                                                                         tmp_path):
    """``--sum -o parquet|arrow``: a ``uint64`` column per field holding what ``-o jsonl``
    shows (the u32 ``drops`` widened: its sum may pass 32 bits); key 0's ``packets`` sum
    passes 64 bits, so with it the dump is refused naming the field, not wrapped. The file is
    a report: loading it into the per-CPU map is refused, naming the column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert_one_line_error(bpfbatch("dump", "pinned", counters, "--sum", "-o", fmt),
                          "value.packets of key 0", "does not fit u64")
    with Map.open(pinned=counters) as m:
        m.delete((0).to_bytes(4, "little"))
    want = {r["key"]: r["value"] for r in map(json.loads, bpfbatch(
        "dump", "pinned", counters, "--sum", "-o", "jsonl", check=True).stdout.splitlines())}
    out = subprocess.run([sys.executable, "-m", "bpfbatch", "dump", "pinned", counters, "--sum",
                          "-o", fmt], capture_output=True, check=True).stdout
    table = pq.read_table(pa.BufferReader(out)) if fmt == "parquet" else \
        pa.ipc.open_stream(out).read_all()
    assert [str(t) for t in table.schema.types] == ["uint32", "uint64", "uint64", "uint64"]
    got = {row["key"]: {f: row[f"value.{f}"] for f in ("packets", "drops", "pad")}
           for row in table.to_pylist()}
    assert got == want and len(got) == N - 1
    report = tmp_path / f"sums.{fmt}"
    report.write_bytes(out)
    assert_one_line_error(bpfbatch("load", "pinned", counters, str(report)),
                          "value.packets", "per-CPU")
