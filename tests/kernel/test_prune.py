"""Pruning a real flow table: the tc program counts UDP flows sent across a veth pair between
two throwaway namespaces; prune removes exactly the idle ones, once (API, both modes) and as
the periodic `bpfbatch prune` loop that stops cleanly on SIGINT/SIGTERM, saying what it did."""

import json
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch._sys.libbpf import num_possible_cpus
from bpfbatch.btf import BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.exec import prune
from bpfbatch.labs.flowtable import RECEIVER_ADDR, SENDER_ADDR, FlowTableLab
from bpfbatch.map import cursor, probes, writes
from bpfbatch.records.codec import map_codecs
from fault_helpers import communicate

MS = 10**6
IDLE = 1000 * MS  # the --older-than of these tests
PACKET_BYTES = 14 + 20 + 8 + 64  # what tc ingress sees of one datagram: Ethernet, IPv4, UDP


@pytest.fixture
def lab():
    with FlowTableLab(prefix="bbpt") as lab:
        yield lab


def flows_by_port(table: Map) -> dict[int, dict]:
    """sport (host order) → decoded stats, from one batched read of the table."""
    key_codec, value_codec = map_codecs(table.info)
    keys, values = cursor.read_all(table)
    out = {}
    for k, v in zip(keys, values):
        key = key_codec.decode(k.tobytes())
        assert (key["saddr"], key["daddr"], key["proto"]) == (
            int.from_bytes(socket.inet_aton(SENDER_ADDR), "little"),
            int.from_bytes(socket.inet_aton(RECEIVER_ADDR), "little"), 17)
        out[socket.ntohs(key["sport"])] = value_codec.decode(v.tobytes())
    return out


def idle_and_active(lab, flows: int, active: int):
    """Every flow sends twice, then, once the others are idle, ``active`` send once more."""
    opened = lab.open_flows(flows)
    opened.send()
    opened.send()
    assert lab.wait_for(flows) == flows
    time.sleep(IDLE / 1e9 + 0.1)
    opened.send(opened.sockets[:active])
    return opened, set(opened.ports(opened.sockets[:active]))


def test_flow_table_counts_what_was_sent(lab):
    opened, active = idle_and_active(lab, 50, 5)
    time.sleep(0.05)
    seen = flows_by_port(lab.table)
    assert set(seen) == set(opened.ports())
    for port, stats in seen.items():
        packets = 3 if port in active else 2
        assert stats["packets"] == packets and stats["bytes"] == packets * PACKET_BYTES
        assert stats["first_seen_ns"] <= stats["last_seen_ns"]


@pytest.mark.parametrize("mode", ["kernel", "user"])
def test_prune_keeps_exactly_the_active_flows(lab, mode):
    if mode == "kernel" and not probes.syscall_program():
        pytest.skip("no syscall programs")
    opened, active = idle_and_active(lab, 400, 40)

    def once(predicate, **options):
        opened.send(opened.sockets[:40])  # the active flows stay active, however slow we are
        [r] = prune.prune_rounds(lab.table, predicate, mode=mode, **options)
        return r.result

    predicate = prune.prune_predicate(lab.table, "last_seen_ns", IDLE)
    dry = once(predicate, dry_run=True)
    assert dry.selected == 360 and dry.deleted == 0
    for proto, idle in ((6, 0), (17, 360)):  # an extra condition on the key: TCP / UDP flows
        narrowed = prune.prune_predicate(lab.table, "last_seen_ns", IDLE, f"key.proto == {proto}")
        assert once(narrowed, dry_run=True).selected == idle
    assert len(flows_by_port(lab.table)) == 400
    assert once(predicate, max_deleted=100).deleted == 100
    rest = once(predicate)
    assert rest.deleted == 260 and rest.mode == mode
    assert set(flows_by_port(lab.table)) == active
    if shutil.which("bpftool"):  # an independent reader agrees
        dump = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(lab.table.info.id)],
                              capture_output=True, text=True, check=True)
        assert len(json.loads(dump.stdout)) == 40


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_prune_loop_trims_while_traffic_flows_and_stops_cleanly(lab, sig):
    opened, _ = idle_and_active(lab, 200, 0)
    keep = opened.sockets[:20]
    proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", "prune", "--map-id",
                             str(lab.table.info.id), "--field", "last_seen_ns",
                             "--older-than", "1s", "--every", "100ms"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the 20 keep sending; the rest goes idle
            opened.send(keep)
            if len(flows_by_port(lab.table)) == 20:
                break
            time.sleep(0.05)
        for _ in range(4):  # more rounds while they keep sending: none of them goes
            opened.send(keep)
            time.sleep(0.1)
        proc.send_signal(sig)
        out, err = communicate(proc, 10)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    assert out == ""
    assert set(flows_by_port(lab.table)) == set(opened.ports(keep))
    *rounds, said = err.splitlines()
    assert said.startswith(f"bpfbatch: map {lab.table.info.id} ")
    assert f": interrupted ({signal.Signals(sig).name}) after {len(rounds)} rounds: " \
        "deleted 180" in said
    assert rounds[0].startswith("round 1: deleted ") and len(rounds) >= 2
    assert sum(int(line.split()[3]) for line in rounds) == 180
    assert all(line.endswith(")") and " ms (" in line for line in rounds)


def test_prune_demo_keeps_the_active_flows():
    proc = subprocess.run([sys.executable, "-m", "bpfbatch", "prune-demo", "--flows", "100",
                           "--active", "10", "--older-than", "500ms", "--rounds", "2"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "100 flows sent once, 10 keep sending" in lines[0]
    assert lines[1].startswith("round 1: deleted 0 in ") and lines[1].endswith("; 100 flows left")
    assert lines[2].startswith("round 2: deleted 90 in ") and lines[2].endswith("; 10 flows left")
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True
                          ).stdout.count("bbft") == 0  # the namespaces are gone


def test_cli_prune_errors_name_the_option(lab):
    argv = [sys.executable, "-m", "bpfbatch", "prune", "--map-id", str(lab.table.info.id)]
    cases = {("--field", "last_seen", "--older-than", "1s"):
             "bpfbatch: error: --field column 1 'last_seen': no such field (fields: packets, "
             "bytes, first_seen_ns, last_seen_ns)\n",
             ("--field", "last_seen_ns", "--older-than", "10"):
             "bpfbatch: error: --older-than: expected a duration like 30s, 500ms or 1h (units: "
             "ns, us, ms, s, m, h), got '10'\n",
             ("--field", "last_seen_ns", "--older-than", "1s", "--where", "bytes >"):
             "bpfbatch: error: --where column 8 (end of expression): expected a number, 'now' "
             "or an enumerator\n"}
    for extra, message in cases.items():
        proc = subprocess.run([*argv, *extra], capture_output=True, text=True)
        assert (proc.returncode, proc.stderr) == (2, message)  # usage errors: the options


def percpu_table(map_type: MapType = MapType.LRU_PERCPU_HASH) -> Map:
    """64 entries of ``u32 → {u64 packets; u64 last_seen_ns}`` (per CPU by default)."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        value = b.struct("flow", [("packets", u64), ("last_seen_ns", u64)])
        return Map.create(map_type, 4, 16, 64, name="bb_prune_pcpu",
                          btf_fd=b.load(), btf_key_type_id=u32, btf_value_type_id=value)


@pytest.mark.skipif(num_possible_cpus() < 2, reason="needs two possible CPUs")
@pytest.mark.parametrize("mode", ["kernel", "user"])
def test_per_cpu_prune_goes_by_the_newest_cpu(mode):
    """Key k: seen long ago on every CPU but CPU k % cpus, where it is fresh (k < cpus); keys
    from cpus on are old everywhere. Only the latter are idle."""
    cpus = num_possible_cpus()
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    with percpu_table() as m:
        n = cpus + 5
        values = np.zeros((n, cpus, 2), np.uint64)
        values[:, :, 1] = 1  # last seen at boot
        for k in range(cpus):
            values[k, k, 1] = now
        writes.update(m, np.arange(n, dtype=np.uint32), values, n)
        predicate = prune.prune_predicate(m, "last_seen_ns", 10**9)
        [r] = prune.prune_rounds(m, predicate, mode=mode)
        assert r.result.deleted == 5
        assert sorted(np.frombuffer(cursor.read_all(m)[0].tobytes(), "<u4")) == list(range(cpus))


def test_prune_predicate_refuses_what_it_cannot_compare():
    with percpu_table() as m:
        with pytest.raises(InputError, match="^field column 1 'packet'"):
            prune.prune_predicate(m, "packet", 10)
        with pytest.raises(InputError, match="^older_than_ns: must be positive"):
            prune.prune_predicate(m, "last_seen_ns", 0)


@pytest.mark.skipif(not probes.syscall_program(), reason="no syscall programs")
@pytest.mark.parametrize("map_type, mode", [(MapType.LRU_PERCPU_HASH, "kernel-fast"),
                                            (MapType.LRU_HASH, "kernel")],
                         ids=["per-CPU", "plain"])
def test_the_default_mode_deletes_in_the_program_only_on_per_cpu_maps(map_type, mode):
    """``auto`` deletes in the program where updates write in place (per-CPU maps), and with
    lookup-and-delete where they replace the element."""
    with percpu_table(map_type) as m:
        values = np.ones((10, m.info.value_stride // 8), np.uint64)  # last seen at boot
        writes.update(m, np.arange(10, dtype=np.uint32), values, 10)
        [r] = prune.prune_rounds(m, prune.prune_predicate(m, "last_seen_ns", 10**9))
        assert (r.result.mode, r.result.deleted) == (mode, 10)
