"""``--decode`` end to end: what dump prints, load and --where take back, on a real map,
checked against bpftool's raw bytes and numpy over the raw records."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import time

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import writes
from bpfbatch.map.cursor import read_all

from test_cli_maps import assert_one_line_error, bpfbatch

N = 64
DECODES = ["mac=mac", "comm=str", "err=errno", "ifindex=ifname", "key.tag=hex"]


def _create(name: str) -> Map:
    """``struct key { __be32 saddr; __be16 dport; u8 tag[2]; struct in6_addr daddr6; }`` →
    ``struct val { u8 mac[6]; char comm[8]; s32 err; u32 ifindex; u64 seen_ns; }``."""
    with BtfBuilder() as b:
        u8, u16, u32, u64 = (b.integer(n, s) for n, s in
                             (("__u8", 1), ("__u16", 2), ("__u32", 4), ("__u64", 8)))
        s32 = b.integer("int", 4, signed=True)
        char = b.integer("char", 1, signed=True)
        in6 = b.struct("in6_addr", [("s6_addr", b.array(u8, 16))])
        key = b.struct("flow", [("saddr", b.typedef("__be32", u32)),
                                ("dport", b.typedef("__be16", u16)), ("tag", b.array(u8, 2)),
                                ("daddr6", in6)])
        val = b.struct("seen", [("mac", b.array(u8, 6)), ("comm", b.array(char, 8)),
                                ("err", s32), ("ifindex", u32), ("seen_ns", u64)])
        return Map.create(MapType.HASH, b.layout(key)[0], b.layout(val)[0], 1024, name=name,
                          btf_fd=b.load(), btf_key_type_id=key, btf_value_type_id=val)


@pytest.fixture
def pinned():
    m = _create(f"bb_dec_{os.getpid():x}")
    assert m.info.value_size == 32
    keys = np.zeros(N, [("saddr", ">u4"), ("dport", ">u2"), ("tag", "u1", 2),
                        ("daddr6", "S16")])
    keys["saddr"] = 0x0A000000 + np.arange(N)
    keys["dport"] = np.arange(N) * 1000
    keys["tag"] = np.arange(2 * N).reshape(N, 2)
    keys["daddr6"] = [ipaddress.IPv6Address(f"2001:db8::{i:x}").packed for i in range(N)]
    vals = np.zeros(N, {"names": ["mac", "comm", "err", "ifindex", "seen_ns"],
                        "formats": [("u1", 6), "S8", "<i4", "<u4", "<u8"],
                        "offsets": [0, 6, 16, 20, 24], "itemsize": 32})  # C's padding
    vals["mac"] = np.arange(6 * N).reshape(N, 6) % 256
    vals["comm"] = [f"cmd{i}".encode() for i in range(N)]
    vals["err"] = -(np.arange(N) % 5)  # 0, -EPERM, -ENOENT, -ESRCH, -EINTR
    vals["ifindex"] = np.where(np.arange(N) % 2, socket.if_nametoindex("lo"), 0)
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    vals["seen_ns"] = now - np.minimum(np.arange(N, dtype=np.uint64) * 10**9, now)
    writes.update(m, keys.tobytes(), vals.tobytes(), N)
    path = f"/sys/fs/bpf/bb_dec_{os.getpid()}"
    m.pin(path)
    yield m, path, keys, vals
    os.unlink(path)
    m.close()


def _bpftool_raw(path: str) -> dict[bytes, bytes]:
    out = subprocess.run(["bpftool", "-j", "map", "dump", "pinned", path], capture_output=True,
                         text=True, check=True).stdout
    return {bytes(int(b, 16) for b in e["key"]): bytes(int(b, 16) for b in e["value"])
            for e in json.loads(out)}


def test_automatic_and_chosen_kinds_match_bpftools_bytes(pinned):
    m, path, *_ = pinned
    raw = _bpftool_raw(path)
    out = bpfbatch("dump", "--pinned", path, "-o", "jsonl", *(f"--decode={d}" for d in DECODES),
                   check=True).stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == N
    names = {socket.if_nametoindex("lo"): "lo"}
    for r in records:
        k, v = r["key"], r["value"]
        key = (ipaddress.IPv4Address(k["saddr"]).packed + k["dport"].to_bytes(2, "big")
               + bytes.fromhex(k["tag"]) + ipaddress.IPv6Address(k["daddr6"]).packed)
        value = raw[key]  # bpftool holds exactly this key
        assert bytes(int(x, 16) for x in v["mac"].split(":")) == value[:6]
        assert v["comm"].encode() == value[6:14].rstrip(b"\0")
        err = int.from_bytes(value[16:20], "little", signed=True)
        assert v["err"] == (f"-{__import__('errno').errorcode[-err]}" if err else 0)
        ifindex = int.from_bytes(value[20:24], "little")
        assert v["ifindex"] == names.get(ifindex, ifindex)


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_load_takes_back_what_dump_printed(pinned, tmp_path, fmt):
    m, path, *_ = pinned
    before = _bpftool_raw(path)
    decode = [f"--decode={d}" for d in DECODES]
    dumped = tmp_path / f"dump.{fmt}"
    dumped.write_text(bpfbatch("dump", "--pinned", path, "-o", fmt, *decode, check=True).stdout)
    assert "10.0.0.7" in dumped.read_text() and "2001:db8::7" in dumped.read_text()
    bpfbatch("clear", "--pinned", path, check=True)
    assert _bpftool_raw(path) == {}
    bpfbatch("load", "--pinned", path, str(dumped), "--format", fmt, *decode, check=True)
    assert _bpftool_raw(path) == before


def test_where_takes_display_values(pinned):
    m, path, keys, vals = pinned

    def count(where: str, *decode: str) -> int:
        proc = bpfbatch("exec", "--pinned", path, "--where", where, "--mode", "user",
                        *(f"--decode={d}" for d in decode), check=True)
        return int(proc.stdout)

    assert count("key.saddr == 10.0.0.7") == 1
    assert count("key.dport == 3000 or key.dport == 4000") == 2
    assert count('comm == "cmd12"', "comm=str") == 1
    assert count("err == -ENOENT", "err=errno") == int((vals["err"] == -2).sum())
    assert count("ifindex == lo", "ifindex=ifname") == int((vals["ifindex"] != 0).sum())
    _, values = read_all(m)
    stamps = values[:, 24:32].copy().view("<u8")[:, 0]
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    older = count("seen_ns > 30", "seen_ns=age")
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # ages grew meanwhile: a range
    assert int((stamps < before - 30 * 10**9).sum()) <= older
    assert older <= int((stamps < after - 30 * 10**9).sum())
    # The same selections in the kernel.
    kernel = bpfbatch("exec", "--pinned", path, "--where", "key.saddr != 10.0.0.7",
                      "--mode", "kernel", check=True)
    assert int(kernel.stdout) == N - 1


@pytest.mark.parametrize("args,fragments", [
    (["--decode", "nosuch=ipv4"], ["--decode nosuch", "no field 'nosuch'"]),
    (["--decode", "key.saddr=ipv6"], ["--decode key.saddr", "ipv6 needs a field of 16"]),
    (["--decode", "comm=ip"], ["unknown kind 'ip'"]),
    (["--decode", "comm"], ["expected FIELD=KIND"]),
    (["-o", "bpftool-json", "--decode", "comm=str"], ["--decode", "byte for byte"]),
])
def test_bad_decode_options_are_one_line(pinned, args, fragments):
    _, path, *_ = pinned
    proc = bpfbatch("dump", "--pinned", path, *args)
    assert proc.stdout == ""
    assert_one_line_error(proc, *fragments)


@pytest.mark.parametrize("where,fragments", [
    ("key.dport > 80", ["column 13 '80'", "be16 values", "use == or !="]),
    ("key.saddr == 10.0.0", ["not an ipv4 value"]),
    ("key.daddr6 == ::1", ["(ipv6) has 16 bytes"]),
    ("mac == 06:07:08:09:0a:0b", ["(mac) has 6 bytes"]),
])
def test_bad_where_on_decoded_fields(pinned, where, fragments):
    _, path, *_ = pinned
    proc = bpfbatch("exec", "--pinned", path, "--where", where, "--decode", "mac=mac")
    assert_one_line_error(proc, *fragments)


def test_decode_none_compares_and_prints_as_stored(pinned):
    m, path, keys, _ = pinned
    first = json.loads(bpfbatch("dump", "--pinned", path, "-o", "jsonl", "--limit", "1",
                                "--decode", "none", check=True).stdout)
    assert isinstance(first["key"]["saddr"], int)
    k, _ = read_all(m)
    assert first["key"]["saddr"] in set(k[:, :4].copy().view("<u4")[:, 0].tolist())
