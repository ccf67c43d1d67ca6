"""tcp_mmap against the real kernel, on loopback only, with bounded amounts.

Each end is also checked against a minimal independent peer written here with the plain socket
module (no ctypes, no MSG_ZEROCOPY), so a bug shared by our sender and receiver cannot hide.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bpfbatch.errors import BpfBatchError, KernelError
from bpfbatch.tcp_mmap import Config, Server, send
from bpfbatch.tcp_mmap.sender import _finish
from fault_helpers import communicate, reaped

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
    if zerocopy:  # ~94 % here: whole pages map, the rest comes through the skip hint
        assert 0 < report.mapped < report.received
    else:
        assert report.mapped == 0


def test_loopback_recipe_maps_pages():
    """MSG_ZEROCOPY sender and a one-page MSS: the receiver maps (most of) the payload."""
    options = dict(zerocopy=True, hash=True, mss=LOOPBACK_MSS)
    with serving(**options) as (port, results):
        sent = send(client(port, **options))
    [report] = results
    assert report.sha256 == sent.sha256
    assert report.mapped_percent > 90  # ~99.9 % here: nearly every segment is one page
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


def _command(*argv: str) -> subprocess.Popen:
    """``bpfbatch tcp-mmap ARGV``: the same command as the tool, reached through the CLI."""
    return subprocess.Popen([sys.executable, "-m", "bpfbatch", "tcp-mmap", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _first_line(pipe, timeout: float = 30) -> str:
    """The next line of a child's pipe, or fail after ``timeout`` s instead of hanging."""
    ready, _, _ = select.select([pipe], [], [], timeout)
    assert ready, f"no output within {timeout:g} s"
    return pipe.readline()


def test_the_tool_end_to_end_over_ipv4():
    """Server through ``bpfbatch tcp-mmap``, client through tools/tcp_mmap.py."""
    with reaped(_command("-4", "-s", "-H", "127.0.0.1", "-p", "0", "--connections", "1",
                         "-z", "-x", "-M", str(LOOPBACK_MSS))) as server:
        port = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", _first_line(server.stderr))[1]
        client_run = subprocess.run(
            [sys.executable, str(TOOL), "-4", "-H", "127.0.0.1", "-p", port, "-z", "-x", "-M",
             str(LOOPBACK_MSS), "-n", "32M"], capture_output=True, text=True, timeout=60)
        out, err = server.communicate(timeout=30)
    assert client_run.returncode == 0, client_run.stderr
    assert server.returncode == 0, err
    found = REPORT.search(out)
    assert found, out
    assert float(found["mb"]) == 32 and float(found["mapped"]) > 0
    assert f"sha256 {found['sha']} (the receiver's matches)" in client_run.stdout
    assert "MSG_ZEROCOPY:" in client_run.stdout


def test_interrupting_a_server_exits_130_without_a_traceback():
    """^C is how a server serving until interrupted is meant to end: status 130 and the CLI's
    one line, nothing else on stderr after the listening line (no traceback, no click
    "Aborted!")."""
    with reaped(_command("-s", "-H", "::1", "-p", "0")) as server:
        port = int(_first_line(server.stderr).rsplit(":", 1)[1])
        send(client(port, size=1 << 20))
        assert _first_line(server.stdout).startswith("received 1 MB ")  # served, still serving
        server.send_signal(signal.SIGINT)
        out, err = communicate(server, 30)
    assert server.returncode == 130
    assert err == "bpfbatch: interrupted (SIGINT)\n"


def test_connection_refused_is_one_clear_line():
    with socket.socket(socket.AF_INET6) as closed:  # bound, never listening: refuses
        closed.bind(("::1", 0))
        port = closed.getsockname()[1]
        done = subprocess.run([sys.executable, str(TOOL), "-H", "::1", "-p", str(port)],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"bpfbatch: error: [::1]:{port}: connect: Connection refused (ECONNREFUSED)"]


def test_port_in_use_is_refused_before_serving():
    with serving() as (port, _):
        with pytest.raises(KernelError, match=r"bind and listen.*EADDRINUSE"):
            Server(Config(server=True, host="::1", port=port).validate())
        send(client(port, size=1 << 20))


def test_hash_asked_of_a_server_that_does_not_hash():
    with serving() as (port, _):
        with pytest.raises(BpfBatchError, match="not a SHA-256 digest"):
            send(client(port, hash=True, size=1 << 20))


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the kernel sends RST instead of FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_stop_ends_a_server_serving_until_interrupted():
    config = Config(server=True, host="::1", port=0).validate()
    with Server(config) as server:
        results = []
        thread = threading.Thread(target=lambda: results.append(server.serve()), daemon=True)
        thread.start()
        send(client(server.address[1], size=1 << 20))
        while server.accepted < 1:  # the connection is accepted before send() returns
            thread.join(timeout=0.01)
        server.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()
    [[report]] = results
    assert report.received == 1 << 20


@pytest.mark.parametrize("zerocopy", [False, True], ids=["plain", "zerocopy"])
def test_a_reset_by_the_sender_fails_the_server_with_one_line(zerocopy):
    """The receiver's error names the peer; the tool exits 1 after its connections."""
    args = ["-s", "-H", "::1", "-p", "0", "--connections", "1"] + (["-z"] if zerocopy else [])
    with reaped(_tool(*args)) as server:
        port = int(_first_line(server.stderr).rsplit(":", 1)[1])
        with socket.create_connection(("::1", port)) as sock:
            sock.sendall(os.urandom(1 << 20))
            local = sock.getsockname()[1]
            _reset(sock.dup())
        out, err = server.communicate(timeout=30)
    assert server.returncode == 1
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(f"bpfbatch: error: [::1]:{local}: ")
    assert "ECONNRESET" in line


def test_an_untranslated_receiver_failure_is_one_line_and_exit_1():
    """A 1 GiB receive buffer under a 1 GiB address-space limit: mmap() raises a raw
    OSError(ENOMEM) in the receiving thread, which must still end as the connection's one
    error line and a failed exit, not a thread traceback and status 0."""
    def limit_address_space():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    with reaped(_tool("-s", "-H", "::1", "-p", "0", "--connections", "1", "-C", "1G",
                      preexec_fn=limit_address_space)) as server:
        port = int(_first_line(server.stderr).rsplit(":", 1)[1])
        with socket.create_connection(("::1", port)) as sock:
            sock.sendall(b"x" * 1000)
            local = sock.getsockname()[1]
        out, err = server.communicate(timeout=30)
    assert (server.returncode, out) == (1, "")
    assert err.splitlines() == [f"bpfbatch: error: [::1]:{local}: receive: kernel out of memory "
                                f"(ENOMEM)"]


def test_a_reset_by_the_receiver_fails_the_sender_with_one_line():
    """Whether the RST meets send(), shutdown() or the wait for the reply, the sender raises
    one error naming the peer, not a raw OSError."""
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as listener:
        port = listener.getsockname()[1]

        def reset_first_connection():
            conn, _ = listener.accept()
            conn.recv(1)
            _reset(conn)

        thread = threading.Thread(target=reset_first_connection, daemon=True)
        thread.start()
        with pytest.raises(BpfBatchError, match=rf"^\[::1\]:{port}: .*\((ECONNRESET|EPIPE|ENOTCONN)\)"):
            send(client(port, size=64 << 20))
        thread.join(timeout=30)


def test_finish_on_a_reset_connection_names_the_peer():
    """The deterministic case of the above: the RST has arrived before shutdown()."""
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as listener:
        sock = socket.create_connection(listener.getsockname()[:2])
        conn, _ = listener.accept()
    with sock:
        _reset(conn)
        poller = select.poll()
        poller.register(sock, select.POLLERR | select.POLLHUP)
        assert poller.poll(30_000)  # the RST is in: the socket is closed, the error pending
        with pytest.raises(BpfBatchError, match=r"^\[::1\]:1: finish: .*\(E[A-Z]+\)$"):
            _finish(sock, "[::1]:1")
