"""tcp_mmap against the real kernel, on loopback only, with bounded amounts.

Each end is also checked against a minimal independent peer written here with the plain socket
module (no ctypes, no MSG_ZEROCOPY), so a bug shared by our sender and receiver cannot hide.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bpfbatch.errors import BpfBatchError, KernelError
from bpfbatch.tcp_mmap import Config, Server, send

TOOL = Path(__file__).resolve().parents[2] / "tools" / "tcp_mmap.py"
LOOPBACK_MSS = 4096 + 12  # one page of payload plus the TCP timestamp option
SIZE = 48 << 20
REPORT = re.compile(
    r"received (?P<mb>[\d.]+) MB \((?P<mapped>[\d.e+-]+) % mmap'ed\) in [\d.e+-]+ s, "
    r"[\d.e+-]+ Gbit\n  cpu usage user:[\d.e+-]+ sys:[\d.e+-]+, [\d.e+-]+ usec per MB, "
    r"\d+ c-switches, rcv_mss (?P<mss>\d+)\n  sha256 (?P<sha>[0-9a-f]{64})")


@contextlib.contextmanager
def serving(connections: int = 1, **options):
    """A Server on [::1] with a free port, serving in a thread; yields (port, results)."""
    config = Config(server=True, host="::1", port=0, **options).validate()
    results: list = []
    with Server(config) as server:
        thread = threading.Thread(target=lambda: results.extend(server.serve(connections)),
                                  daemon=True)
        thread.start()
        try:
            yield server.address[1], results
        except BaseException:
            server.stop()
            raise
        finally:
            thread.join(timeout=30)
            assert not thread.is_alive(), "the server did not finish its connections"


def client(port: int, **options) -> Config:
    return Config(host="::1", port=port, **{"size": SIZE, **options}).validate()


@pytest.mark.parametrize("zerocopy", [False, True], ids=["plain", "zerocopy"])
def test_hash_equal_on_both_ends(zerocopy):
    """In zero-copy mode with the default MSS, mapped pages and skip-hint reads interleave
    (most of the payload maps, the rest is read), so the digest checks their order too."""
    with serving(zerocopy=zerocopy, hash=True) as (port, results):
        sent = send(client(port, zerocopy=zerocopy, hash=True))
    [report] = results
    assert report.received == sent.sent == SIZE
    assert report.sha256 == sent.sha256 and len(sent.sha256) == 64
    if not zerocopy:
        assert report.mapped == 0


def test_loopback_recipe_maps_pages():
    """MSG_ZEROCOPY sender and a one-page MSS: the receiver maps (most of) the payload."""
    options = dict(zerocopy=True, hash=True, mss=LOOPBACK_MSS)
    with serving(**options) as (port, results):
        sent = send(client(port, **options))
    [report] = results
    assert report.sha256 == sent.sha256
    assert report.mapped_percent > 0
    assert 0 < report.rcv_mss <= LOOPBACK_MSS
    # Every MSG_ZEROCOPY send was completed, and loopback says it copied (it always does).
    assert sent.zerocopy_sends > 0
    assert sent.completions == sent.zerocopy_sends
    assert sent.copied == sent.completions


def test_parallel_flows_each_in_its_own_thread():
    flows = 3
    options = dict(zerocopy=True, hash=True, mss=LOOPBACK_MSS)
    sent: list = []
    with serving(connections=flows, **options) as (port, results):
        senders = [threading.Thread(target=lambda: sent.append(send(client(port, **options))))
                   for _ in range(flows)]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(timeout=30)
    assert sorted(r.sha256 for r in results) == sorted(s.sha256 for s in sent)
    assert len(results) == flows and all(r.received == SIZE for r in results)


def _raw_send(port: int, payload: bytes) -> bytes:
    """An independent sender: connect, sendall, shut down, read the reply."""
    with socket.create_connection(("::1", port), timeout=30) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while data := sock.recv(64):
            reply += data
    return reply


@pytest.mark.parametrize("mss", [0, LOOPBACK_MSS], ids=["default-mss", "page-mss"])
def test_zerocopy_receiver_against_a_plain_sender(mss):
    """A plain send() on loopback gives nothing mappable: everything comes through
    recv_skip_hint, and must still arrive whole and in order. The odd length leaves a tail
    shorter than a page."""
    payload = os.urandom((8 << 20) + 1234)
    with serving(zerocopy=True, hash=True, mss=mss) as (port, results):
        reply = _raw_send(port, payload)
    [report] = results
    assert report.received == len(payload)
    assert reply == hashlib.sha256(payload).digest()
    assert report.sha256 == reply.hex()


def test_sender_against_a_plain_receiver():
    """Our MSG_ZEROCOPY sender to an independent receiver that hashes and replies."""
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as listener:
        port = listener.getsockname()[1]
        seen = {}

        def receive():
            conn, _ = listener.accept()
            with conn:
                digest, total = hashlib.sha256(), 0
                while data := conn.recv(1 << 20):
                    digest.update(data)
                    total += len(data)
                seen["total"] = total
                conn.sendall(digest.digest())

        thread = threading.Thread(target=receive, daemon=True)
        thread.start()
        sent = send(client(port, zerocopy=True, hash=True, chunk_size=100_000))
        thread.join(timeout=30)
    assert seen["total"] == sent.sent == SIZE
    assert sent.completions == sent.zerocopy_sends


def _tool(*argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(TOOL), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_the_tool_end_to_end_over_ipv4():
    server = _tool("-4", "-s", "-H", "127.0.0.1", "-p", "0", "--connections", "1", "-z", "-x",
                   "-M", str(LOOPBACK_MSS))
    try:
        port = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", server.stderr.readline())[1]
        client_run = subprocess.run(
            [sys.executable, str(TOOL), "-4", "-H", "127.0.0.1", "-p", port, "-z", "-x", "-M",
             str(LOOPBACK_MSS), "-n", "32M"], capture_output=True, text=True, timeout=60)
        out, err = server.communicate(timeout=30)
    finally:
        server.kill()
        server.wait()
    assert client_run.returncode == 0, client_run.stderr
    assert server.returncode == 0, err
    found = REPORT.search(out)
    assert found, out
    assert float(found["mb"]) == 32 and float(found["mapped"]) > 0
    assert f"sha256 {found['sha']} (the receiver's matches)" in client_run.stdout
    assert "MSG_ZEROCOPY:" in client_run.stdout


def test_connection_refused_is_one_clear_line():
    with socket.socket(socket.AF_INET6) as closed:  # bound, never listening: refuses
        closed.bind(("::1", 0))
        port = closed.getsockname()[1]
        done = subprocess.run([sys.executable, str(TOOL), "-H", "::1", "-p", str(port)],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"tcp_mmap: error: [::1]:{port}: connect: Connection refused (ECONNREFUSED)"]


def test_port_in_use_is_refused_before_serving():
    with serving() as (port, _):
        with pytest.raises(KernelError, match=r"bind and listen.*EADDRINUSE"):
            Server(Config(server=True, host="::1", port=port).validate())
        send(client(port, size=1 << 20))


def test_hash_asked_of_a_server_that_does_not_hash():
    with serving() as (port, _):
        with pytest.raises(BpfBatchError, match="not a SHA-256 digest"):
            send(client(port, hash=True, size=1 << 20))
