"""tcptop and slabratetop tables without the kernel: bcc's columns, sort orders, row caps,
and the CLI's refusals. Record layouts come from the built objects' BTF (opening an object
file needs no privileges)."""

from __future__ import annotations

import socket

import numpy as np
import pytest
from typer.testing import CliRunner

from bpfbatch.cli.app import app
from bpfbatch.errors import InputError
from bpfbatch.loader import PROGS_DIR, BpfObject
from bpfbatch.top import screen, slabratetop, tcptop

pytestmark = pytest.mark.skipif(not (PROGS_DIR / "tcptop.bpf.o").exists(),
                                reason="BPF objects not built (make -C progs)")


@pytest.fixture(scope="module")
def flow_dtype():
    with BpfObject.package("tcptop") as obj:
        return tcptop.flow_dtype(obj.dtype("tcptop_key"), obj.dtype("tcptop_value"))


@pytest.fixture(scope="module")
def slab_dtype():
    with BpfObject.package("slabratetop") as obj:
        return obj.dtype("slab_value")


def flows(dtype, *rows):
    """Rows of (pid, comm, family, laddr, lport, raddr, dport, received, sent)."""
    out = np.zeros(len(rows), dtype=dtype)
    for i, (pid, comm, family, laddr, lport, raddr, dport, received, sent) in enumerate(rows):
        out[i]["pid"], out[i]["comm"], out[i]["family"] = pid, comm, family
        out[i]["saddr"][:] = np.frombuffer(socket.inet_pton(family, laddr).ljust(16, b"\0"), np.uint8)
        out[i]["daddr"][:] = np.frombuffer(socket.inet_pton(family, raddr).ljust(16, b"\0"), np.uint8)
        out[i]["lport"], out[i]["dport"] = lport, dport
        out[i]["received"], out[i]["sent"] = received, sent
    return out


V4, V6 = socket.AF_INET, socket.AF_INET6


def test_record_layout_comes_from_btf(flow_dtype):
    assert flow_dtype.names == ("saddr", "daddr", "pid", "lport", "dport", "family", "pad",
                                "comm", "sent", "received")
    assert flow_dtype["comm"] == np.dtype("S16") and flow_dtype["sent"] == np.dtype("<u8")


def test_ipv4_table_is_bcc_formatted(flow_dtype):
    f = flows(flow_dtype, (1234, b"a-very-long-command", V4, "10.0.0.1", 5555, "10.0.0.2", 443,
                           2047, 4096))
    assert tcptop.table(f, V4) == [
        "PID    COMM         LADDR                 RADDR                  RX_KB  TX_KB",
        "1234   a-very-long- 10.0.0.1:5555         10.0.0.2:443               1      4",
    ]
    assert tcptop.table(f, V6) == []


def test_ipv6_table_follows_a_blank_line(flow_dtype):
    f = flows(flow_dtype, (7, b"ssh", V6, "::1", 22, "fe80::1", 40000, 0, 1 << 20),
              (8, b"curl", V4, "127.0.0.1", 1, "127.0.0.1", 2, 1024, 0))
    lines = list(tcptop.report(tcptop.Sample(f, 0, 0)))
    assert lines[0].startswith("PID    COMM         LADDR ")
    assert lines[2] == ""
    assert lines[3].split() == ["PID", "COMM", "LADDR6", "RADDR6", "RX_KB", "TX_KB"]
    assert lines[4] == "%-6d %-12.12s %-32s %-32s %6d %6d" % (7, "ssh", "::1:22", "fe80::1:40000",
                                                             0, 1024)


@pytest.mark.parametrize("sort,order", [("all", [3, 1, 2]), ("sent", [1, 2, 3]),
                                        ("received", [3, 2, 1])])
def test_sort_orders(flow_dtype, sort, order):
    f = flows(flow_dtype, (1, b"a", V4, "1.1.1.1", 1, "2.2.2.2", 2, 0, 9000),
              (2, b"b", V4, "1.1.1.1", 1, "2.2.2.2", 2, 2000, 5000),
              (3, b"c", V4, "1.1.1.1", 1, "2.2.2.2", 2, 10000, 0))
    assert [int(line.split()[0]) for line in tcptop.table(f, V4, sort=sort)[1:]] == order


def test_rows_cap_keeps_the_largest(flow_dtype):
    f = flows(flow_dtype, *[(pid, b"x", V4, "1.1.1.1", 1, "2.2.2.2", 2, 0, pid * 1024)
                            for pid in range(1, 31)])
    lines = tcptop.table(f, V4, rows=3)
    assert [int(line.split()[0]) for line in lines[1:]] == [30, 29, 28]
    assert len(tcptop.table(f, V4, rows=None)) == 31
    with pytest.raises(InputError, match="-s/--sort"):
        tcptop.table(f, V4, sort="bogus")


def test_slab_rows_merge_by_name_and_sort(slab_dtype):
    records = np.zeros(4, dtype=slab_dtype)
    records["name"] = [b"TCP", b"dentry", b"TCP", b"kmalloc-64"]
    records["count"] = [1, 10, 2, 5]
    records["bytes"] = [2000, 1920, 4000, 320]
    caches = slabratetop.by_name(records)
    assert sorted(caches["name"].tolist()) == [b"TCP", b"dentry", b"kmalloc-64"]
    by_size = slabratetop.table(caches)
    assert by_size[0] == "%-32s %6s %10s" % ("CACHE", "ALLOCS", "BYTES")
    assert by_size[1] == "%-32s %6d %10d" % ("TCP", 3, 6000)
    assert [line.split()[0] for line in slabratetop.table(caches, sort="count")[1:]] == \
        ["dentry", "kmalloc-64", "TCP"]
    assert [line.split()[0] for line in slabratetop.table(caches, sort="name", rows=2)[1:]] == \
        ["TCP", "dentry"]


def test_ticks_prints_the_banner_once_and_counts(capsys):
    assert len(list(screen.ticks(0, 3))) == 3
    assert capsys.readouterr().out == "Tracing... Output every 0 secs. Hit Ctrl-C to end\n"


def test_loadavg_line_is_bcc_shaped():
    line = screen.loadavg_line()
    assert line[2] == line[5] == ":" and line[8:18] == " loadavg: "
    assert line.endswith("\n")


@pytest.mark.parametrize("args,fragment", [
    (["top", "tcp", "-4", "-6"], "mutually exclusive"),
    (["top", "tcp", "0"], "INTERVAL"),
    (["top", "tcp", "1", "0"], "COUNT"),
    (["top", "tcp", "-r", "0"], "maxrows"),
    (["top", "tcp", "-s", "size"], "one of all, sent, received"),
    (["top", "slab", "-s", "sent"], "one of name, count, size"),
])
def test_cli_refuses_bad_options_before_loading(args, fragment):
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, InputError)
    assert fragment in str(result.exception)
