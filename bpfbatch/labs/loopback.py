"""A loopback TCP load whose byte counts are known from the application's side: the
independent reference the tcptop test and ``tools/bench/tools_readout.py`` compare the tool
with.

Run as a child process (``python -m bpfbatch.labs.loopback``) so that a tool can filter on
its pid: it waits for a line on stdin, then moves the bytes over IPv4 and IPv6 loopback
connections, in both directions, with odd chunk sizes and ``MSG_PEEK`` reads mixed in (which
must not count: the data is read again), and prints what ``send()``/``recv()`` returned, added
up, as JSON: ``{"sent": {"4": n, "6": n}, "received": {"4": n, "6": n}}``.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading

CONNECTIONS_PER_FAMILY = 2
BYTES_PER_DIRECTION = 24 << 20
PEEK_EVERY = 5
FAMILIES = ((socket.AF_INET, "127.0.0.1", 4), (socket.AF_INET6, "::1", 6))


def expected_sent_per_family() -> int:
    """Bytes each family sends in one run (the reverse direction carries half)."""
    return CONNECTIONS_PER_FAMILY * (BYTES_PER_DIRECTION + BYTES_PER_DIRECTION // 2)


def _totals() -> dict:
    return {"sent": {4: 0, 6: 0}, "received": {4: 0, 6: 0}}


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
            sock.recv(4096, socket.MSG_PEEK)
        data = sock.recv(1 + (calls * 7919) % 65536)
        if not data:
            return
        totals["received"][family] += len(data)


def run() -> dict:
    """Move the bytes; return the totals (one dict per thread, merged at the end)."""
    per_thread, threads, sockets = [], [], []
    for family, host, label in FAMILIES:
        with socket.create_server((host, 0), family=family) as server:
            for i in range(CONNECTIONS_PER_FAMILY):
                client = socket.create_connection(server.getsockname()[:2])
                peer, _ = server.accept()
                sockets += [client, peer]
                for seed, (writer, reader) in enumerate(((client, peer), (peer, client))):
                    mine = _totals()
                    per_thread.append(mine)
                    threads.append(threading.Thread(
                        target=_pump, args=(writer, BYTES_PER_DIRECTION // (seed + 1),
                                            i * 2 + seed, mine, label)))
                    threads.append(threading.Thread(target=_drain, args=(reader, mine, label)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sockets:
        s.close()
    totals = _totals()
    for mine in per_thread:
        for direction in totals:
            for label in totals[direction]:
                totals[direction][label] += mine[direction][label]
    return totals


def spawn() -> subprocess.Popen:
    """Start the load in a child process; it moves the bytes once ``"go\\n"`` is written to its
    stdin and prints the totals on its stdout (text mode)."""
    return subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def main() -> None:
    sys.stdin.readline()
    print(json.dumps(run()), flush=True)


if __name__ == "__main__":
    main()
