"""tcptop loses nothing: every byte a process sends or receives over TCP shows up in exactly
one interval, while the tool samples as fast as it can during the transfer.

The traffic (:mod:`bpfbatch.labs.loopback`) runs in a child process over IPv4 and IPv6
loopback connections, in both directions, with odd chunk sizes and ``MSG_PEEK`` reads mixed
in; the child adds up what ``send()``/``recv()`` returned (the application's own view,
independent of BPF) and prints it when done. The tool, filtered on the child's pid, must report
exactly that.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

import pytest

from bpfbatch.labs import loopback
from bpfbatch.map import probes
from bpfbatch.top.tcptop import TcpTop
from fault_helpers import communicate

#: Generous bound for the child's transfer (it takes about a second here); a wedged child
#: fails the test instead of hanging it.
TRANSFER_DEADLINE_S = 60
#: linux/net_tstamp.h and asm-generic/socket.h: software TX timestamps with the packet
#: looped back on the error queue (no OPT_TSONLY), so error-queue reads return bytes.
SO_TIMESTAMPING = 37
SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1
SOF_TIMESTAMPING_SOFTWARE = 1 << 4


def _run(hook_kinds: tuple[str, ...], family: int | None) -> tuple[dict, dict]:
    child = loopback.spawn()
    try:
        with TcpTop(pid=child.pid, family=family, hook_kinds=hook_kinds) as tool:
            child.stdin.write("go\n")
            child.stdin.flush()
            seen = {"sent": {4: 0, 6: 0}, "received": {4: 0, 6: 0}}
            deadline = time.monotonic() + TRANSFER_DEADLINE_S
            while True:
                finished = child.poll() is not None  # decided before the read-out
                assert time.monotonic() < deadline, "the traffic child did not finish"
                sample = tool.sample()
                flows = sample.flows
                assert set(flows["pid"]) <= {child.pid}
                for label, af in ((4, socket.AF_INET), (6, socket.AF_INET6)):
                    mine = flows[flows["family"] == af]
                    seen["sent"][label] += int(mine["sent"].sum())
                    seen["received"][label] += int(mine["received"].sum())
                assert sample.dropped_events == 0
                if finished:
                    break
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    reported = json.loads(out)
    reported = {d: {int(k): v for k, v in per.items()} for d, per in reported.items()}
    return reported, seen


@pytest.mark.parametrize("hook", ["tp_btf", "raw_tp"])
def test_every_byte_counted_once_while_sampling(hook):
    if not getattr(probes, hook)("sock_send_length"):
        pytest.skip(f"{hook} does not attach here: {getattr(probes, hook)('sock_send_length').reason}")
    reported, seen = _run((hook,), None)
    expected = loopback.expected_sent_per_family()
    assert reported["sent"] == {4: expected, 6: expected}
    assert reported["received"] == reported["sent"]
    assert seen == reported


def test_family_filter_counts_only_that_family():
    reported, seen = _run(("tp_btf", "raw_tp"), 6)
    assert seen["sent"] == {4: 0, 6: reported["sent"][6]}
    assert seen["received"] == {4: 0, 6: reported["received"][6]}


def _connected_pairs(count: int) -> list[tuple[socket.socket, socket.socket]]:
    """``count`` loopback TCP connections of this process, as (client, accepted) pairs."""
    pairs = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        for _ in range(count):
            client = socket.create_connection(server.getsockname())
            pairs.append((client, server.accept()[0]))
    return pairs


def _close(pairs) -> None:
    for pair in pairs:
        for s in pair:
            s.close()


def _receive(sock: socket.socket, nbytes: int) -> None:
    got = 0
    while got < nbytes:
        got += len(sock.recv(nbytes - got))


def test_cli_reports_the_partial_interval_on_ctrl_c():
    """``bpfbatch top tcp`` end to end: a 60 s interval cut short by SIGINT still prints bcc's
    header and columns for this test's own flow, then says it was interrupted and exits 130."""
    [(client, peer)] = pairs = _connected_pairs(1)
    ports = client.getsockname()[1], peer.getsockname()[1]
    try:
        cli = subprocess.Popen([sys.executable, "-m", "bpfbatch", "top", "tcp", "-C", "-S",
                                "-p", str(os.getpid()), "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert select.select([cli.stdout], [], [], 30)[0], "the CLI printed nothing"
            assert cli.stdout.readline().startswith("Tracing...")  # attached from here on
            client.sendall(b"x" * 300_000)
            _receive(peer, 300_000)
            cli.send_signal(signal.SIGINT)
            out, err = communicate(cli, 30)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
    finally:
        _close(pairs)
    assert cli.returncode == 130, err
    assert err == "bpfbatch: interrupted (SIGINT) after 1 interval\n"
    lines = [line for line in out.splitlines() if line]
    assert lines[0].split() == ["PID", "COMM", "LADDR", "RADDR", "RX_KB", "TX_KB"]
    rows = {line.split()[2]: line.split() for line in lines[1:]}
    assert rows[f"127.0.0.1:{ports[0]}"][5] == str(300_000 // 1024)  # TX_KB of the sender
    assert rows[f"127.0.0.1:{ports[1]}"][4] == str(300_000 // 1024)  # RX_KB of the receiver


def test_error_queue_reads_are_not_received_bytes():
    """A TX timestamp comes back on the error queue with the packet: recvmsg(MSG_ERRQUEUE)
    returns bytes that are not part of the stream and must not count as received."""
    [(client, peer)] = pairs = _connected_pairs(1)
    ports = client.getsockname()[1], peer.getsockname()[1]
    try:
        client.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING,
                          SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE)
        with TcpTop(pid=os.getpid()) as tool:
            client.sendall(b"y" * 1000)
            _receive(peer, 1000)
            looped, deadline = 0, time.monotonic() + TRANSFER_DEADLINE_S
            while not looped:
                assert time.monotonic() < deadline, "no TX timestamp on the error queue"
                try:
                    looped = len(client.recvmsg(4096, 1024, socket.MSG_ERRQUEUE)[0])
                except BlockingIOError:
                    time.sleep(0.01)
            flows = tool.sample().flows
    finally:
        _close(pairs)
    assert looped > 0  # the precondition: the error-queue read did return bytes
    by_port = {int(f["lport"]): (int(f["sent"]), int(f["received"])) for f in flows}
    assert by_port == {ports[0]: (1000, 0), ports[1]: (0, 1000)}


def test_full_flow_map_counts_exactly_what_it_could_not_record():
    """Capacity 2: the third flow of an interval finds the map full; its call and bytes go to
    the dropped counters, per interval, and nothing else is lost."""
    pairs = _connected_pairs(3)
    sizes = (1000, 2000, 4000)
    try:
        with TcpTop(pid=os.getpid(), capacity=2) as tool:
            for (client, _), size in zip(pairs, sizes):
                client.sendall(b"z" * size)
            first = tool.sample()
            for (_, peer), size in zip(pairs, sizes):
                _receive(peer, size)
            second = tool.sample()
            third = tool.sample()
    finally:
        _close(pairs)
    assert sorted(first.flows["sent"].tolist()) == [1000, 2000]
    assert (first.dropped_events, first.dropped_bytes) == (1, 4000)
    assert sorted(second.flows["received"].tolist()) == [1000, 2000]
    assert (second.dropped_events, second.dropped_bytes) == (1, 4000)
    assert (len(third.flows), third.dropped_events, third.dropped_bytes) == (0, 0, 0)
