"""tcptop loses nothing: every byte a process sends or receives over TCP shows up in exactly
one interval, while the tool samples as fast as it can during the transfer.

The traffic runs in a child process (this file run as a script) over IPv4 and IPv6 loopback
connections, in both directions, with odd chunk sizes and ``MSG_PEEK`` reads mixed in; the
child adds up what ``send()``/``recv()`` returned (the application's own view, independent of
BPF) and prints it when done. The tool, filtered on the child's pid, must report exactly that.
``tools/bench/tools_readout.py`` runs the same child to measure what other read-out styles lose.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading

import pytest

from bpfbatch import features
from bpfbatch.tools.tcptop import TcpTop

CONNECTIONS_PER_FAMILY = 2
BYTES_PER_DIRECTION = 24 << 20
PEEK_EVERY = 5


def _pump(sock: socket.socket, nbytes: int, seed: int, totals: dict, family: int) -> None:
    rng = random.Random(seed)
    chunk = bytes(range(256)) * 512
    left = nbytes
    while left:
        sent = sock.send(chunk[:min(left, rng.randint(1, len(chunk)))])
        totals["sent"][family] += sent
        left -= sent
    sock.shutdown(socket.SHUT_WR)


def _drain(sock: socket.socket, totals: dict, family: int) -> None:
    calls = 0
    while True:
        calls += 1
        if calls % PEEK_EVERY == 0:
            sock.recv(4096, socket.MSG_PEEK)  # must not count: the data is read again below
        data = sock.recv(1 + (calls * 7919) % 65536)
        if not data:
            return
        totals["received"][family] += len(data)


def traffic() -> None:
    """The child: wait for "go" on stdin, move the bytes, print the totals as JSON."""
    sys.stdin.readline()
    totals = {"sent": {4: 0, 6: 0}, "received": {4: 0, 6: 0}}
    per_thread = []  # one totals dict per connection direction, merged at the end
    threads = []
    for family, host, label in ((socket.AF_INET, "127.0.0.1", 4), (socket.AF_INET6, "::1", 6)):
        with socket.create_server((host, 0), family=family) as server:
            for i in range(CONNECTIONS_PER_FAMILY):
                client = socket.create_connection(server.getsockname()[:2])
                peer, _ = server.accept()
                for seed, (writer, reader) in enumerate(((client, peer), (peer, client))):
                    mine = {"sent": {4: 0, 6: 0}, "received": {4: 0, 6: 0}}
                    per_thread.append(mine)
                    threads.append(threading.Thread(
                        target=_pump, args=(writer, BYTES_PER_DIRECTION // (seed + 1), i * 2 + seed,
                                            mine, label)))
                    threads.append(threading.Thread(target=_drain, args=(reader, mine, label)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for mine in per_thread:
        for direction in totals:
            for label in totals[direction]:
                totals[direction][label] += mine[direction][label]
    print(json.dumps(totals), flush=True)


def _run(hook_kinds: tuple[str, ...], family: int | None) -> tuple[dict, dict, int]:
    child = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        with TcpTop(pid=child.pid, family=family, hook_kinds=hook_kinds) as tool:
            child.stdin.write("go\n")
            child.stdin.flush()
            seen = {"sent": {4: 0, 6: 0}, "received": {4: 0, 6: 0}}
            busy_intervals = 0
            while True:
                finished = child.poll() is not None  # decided before the read-out
                sample = tool.sample()
                flows = sample.flows
                busy_intervals += bool(len(flows))
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
    return reported, seen, busy_intervals


@pytest.mark.parametrize("hook", ["tp_btf", "raw_tp"])
def test_every_byte_counted_once_while_sampling(hook):
    if not getattr(features, hook)("sock_send_length"):
        pytest.skip(f"{hook} does not attach here: {getattr(features, hook)('sock_send_length').reason}")
    reported, seen, busy = _run((hook,), None)
    expected = CONNECTIONS_PER_FAMILY * (BYTES_PER_DIRECTION + BYTES_PER_DIRECTION // 2)
    assert reported["sent"] == {4: expected, 6: expected}
    assert reported["received"] == reported["sent"]
    assert seen == reported
    assert busy >= 2  # the transfer really spanned several read-outs


def test_family_filter_counts_only_that_family():
    reported, seen, _ = _run(("tp_btf", "raw_tp"), 6)
    assert seen["sent"] == {4: 0, 6: reported["sent"][6]}
    assert seen["received"] == {4: 0, 6: reported["received"][6]}


def test_cli_prints_bcc_tables(tmp_path):
    """``bpfbatch top tcp`` end to end: bcc's header and columns for this test's own flow."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        ports = client.getsockname()[1], server.getsockname()[1]
        with client, peer:
            cli = subprocess.Popen([sys.executable, "-m", "bpfbatch", "top", "tcp", "-C", "-S",
                                    "-p", str(os.getpid()), "2", "1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert cli.stdout.readline().startswith("Tracing...")
            client.sendall(b"x" * 300_000)
            got = 0
            while got < 300_000:
                got += len(peer.recv(1 << 20))
            out, err = cli.communicate(timeout=30)
    assert cli.returncode == 0, err
    lines = [line for line in out.splitlines() if line]
    assert lines[0].split() == ["PID", "COMM", "LADDR", "RADDR", "RX_KB", "TX_KB"]
    rows = {line.split()[2]: line.split() for line in lines[1:]}
    assert rows[f"127.0.0.1:{ports[0]}"][5] == str(300_000 // 1024)  # TX_KB of the sender
    assert rows[f"127.0.0.1:{ports[1]}"][4] == str(300_000 // 1024)  # RX_KB of the receiver


if __name__ == "__main__":
    traffic()
