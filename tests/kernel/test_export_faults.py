"""The exporter's drain mode under real faults: a signal at moments swept over a scrape,
SIGKILL, a client that leaves in the middle of the body or never closes.

Every trial runs ``bpfbatch export`` as a process on a pinned ``u32 → u64`` map of ``N``
entries whose values are distinct (``3k + 1``), with one series per key, and is judged
exactly: the samples of the response the client received whole, plus the entries left in
the map, are every entry of the map before the trial — none missing (SIGKILL: at most one
``batch_size``), none twice, each with its own value. The moments are fractions of a scrape's
duration measured on this machine first, so they fall in the drain, the rendering, the
write and the wait for the client's close, whatever the machine's speed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from bpfbatch.map import writes

from fault_helpers import communicate, map_contents, typed_map

N = 50_000
BATCH = 256
_SAMPLE = re.compile(rb'^ev_total\{k="(\d+)"\} (\S+)$', re.M)


def _values(keys: np.ndarray) -> np.ndarray:
    return keys.astype(np.uint64) * 3 + 1


class Rig:
    """The pinned map, the configuration, and the exporter processes of one module."""

    def __init__(self, tmp: Path):
        self.map = typed_map(N, "bbexpf")
        self.pin = f"/sys/fs/bpf/bbexpf_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.map.pin(self.pin)
        self.journal = tmp / "drain.journal"
        self.config = tmp / "ev.toml"
        self.config.write_text(f"""\
batch_size = {BATCH}
journal = "{self.journal}"

[[metric]]
name = "ev_total"
type = "counter"
mode = "drain"
map = {{ pinned = "{self.pin}" }}
max_series = {N}
labels = [{{ name = "k", field = "key" }}]
""")

    def fill(self) -> None:
        keys = np.arange(N, dtype=np.uint32)
        writes.update(self.map, keys, _values(keys), N)

    def serve(self, **client) -> tuple[subprocess.Popen, Client]:
        """The map filled, an exporter serving it, and a :class:`Client` of it (not started:
        ``client`` are its options)."""
        self.fill()
        proc, port, _ = self.start()
        return proc, Client(port, **client)

    def start(self) -> tuple[subprocess.Popen, int, list[str]]:
        """An exporter, its port, and what it said before serving."""
        proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", "export", "--config",
                                 str(self.config), "--listen", "127.0.0.1:0"],
                                stderr=subprocess.PIPE, text=True)
        said = []
        while True:
            line = proc.stderr.readline()
            assert line, "".join(said) + proc.stderr.read()
            said.append(line)
            if "serving http://" in line:
                return proc, int(line.rsplit(":", 1)[1].split("/")[0]), said[:-1]

    def close(self) -> None:
        os.unlink(self.pin)
        self.map.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    r = Rig(tmp_path_factory.mktemp("export_faults"))
    yield r
    r.close()


class Client(threading.Thread):
    """One ``GET /metrics``: ``body`` is set when the whole response (Content-Length) came."""

    def __init__(self, port: int, *, read: int | None = None, linger: bool = False):
        super().__init__(daemon=True)
        self.port, self.read_only, self.linger = port, read, linger
        self.sent = threading.Event()
        self.body: bytes | None = None
        self.status = 0

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
                self.sent.set()
                data = b""
                while self.read_only is None or len(data) < self.read_only:
                    chunk = s.recv(1 << 16)
                    if not chunk:
                        break
                    data += chunk
                    if self.linger and self._whole(data):
                        time.sleep(3)  # has it all, and keeps the connection open
                if self.read_only is None:
                    self.body = self._whole(data)
        except OSError:
            pass  # refused or reset: the client received nothing whole
        finally:
            self.sent.set()

    def _whole(self, data: bytes) -> bytes | None:
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep:
            return None
        self.status = int(head.split(b" ", 2)[1])
        length = re.search(rb"(?im)^content-length: (\d+)", head)
        return body if length and len(body) == int(length.group(1)) else None


def judge(rig: Rig, body: bytes | None, *, may_lose: int = 0,
          may_repeat: bool = False) -> tuple[int, int]:
    """Asserts the trial lost nothing (``may_lose``: SIGKILL's batch); returns how many
    samples the client received and how many entries are left in the map. ``may_repeat``
    (SIGKILL): the whole response may also be back in the map, when the kill landed after
    the client had it and before the exporter saw it close — all of it, never a part."""
    got = {int(k): float(v) for k, v in _SAMPLE.findall(body or b"")}
    keys, values = map_contents(rig.map)
    left = dict(zip(keys.tolist(), values.tolist()))
    if may_repeat and set(got) & set(left):
        assert set(got) <= set(left), "part of a delivered response came back"
        got = {}
    assert not set(got) & set(left), "an entry both delivered and left in the map"
    assert all(v == k * 3 + 1 for k, v in got.items()), "a delivered sample has a wrong value"
    assert all(v == k * 3 + 1 for k, v in left.items()), "an entry came back with a wrong value"
    lost = N - len(got) - len(left)
    assert 0 <= lost <= may_lose, f"{lost} entries lost ({len(got)} delivered, {len(left)} left)"
    assert rig.journal.stat().st_size == 0, "the journal was not settled"
    return len(got), len(left)


@pytest.fixture(scope="module")
def scrape_seconds(rig) -> float:
    """How long one scrape of the full map takes here, from the request to the client's
    close (the moments of the sweeps are fractions of it)."""
    proc, client = rig.serve()
    start = time.monotonic()
    client.run()
    took = time.monotonic() - start
    proc.send_signal(signal.SIGTERM)
    communicate(proc, 60)
    assert judge(rig, client.body) == (N, 0)
    return took


def into_a_scrape(rig: Rig, seconds: float) -> tuple[subprocess.Popen, Client]:
    """An exporter and the client whose scrape it has served for ``seconds``: the moment
    of a sweep, where a fault lands."""
    proc, client = rig.serve()
    client.start()
    client.sent.wait(30)
    time.sleep(seconds)
    return proc, client


_SWEEP = (0.0, 0.1, 0.3, 0.5, 0.7, 0.85, 1.0, 1.3)
_LAST = re.compile(r"interrupted \((SIG\w+)\) after (\d+) scrapes; (\d+) drained entries "
                   r"delivered, (\d+) put back$")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("at", _SWEEP)
def test_a_signal_during_a_scrape_lets_it_deliver_or_put_back(rig, scrape_seconds, signum, at):
    proc, client = into_a_scrape(rig, at * scrape_seconds)
    proc.send_signal(signum)
    _, err = communicate(proc, 120)
    client.join(60)
    delivered, left = judge(rig, client.body)
    lines = err.strip().splitlines()
    assert proc.returncode == 128 + signum, err
    said = _LAST.search(lines[-1])
    assert said and lines[-1].startswith("bpfbatch: "), err
    assert said.group(1) == signal.Signals(signum).name
    assert int(said.group(3)) == delivered, err
    assert len(lines) == 1 + (int(said.group(4)) > 0), err  # + the put-back's log line


@pytest.mark.parametrize("at", _SWEEP)
def test_sigkill_loses_at_most_one_batch_and_the_next_start_puts_back(rig, scrape_seconds, at):
    proc, client = into_a_scrape(rig, at * scrape_seconds)
    proc.kill()
    communicate(proc, 60)
    client.join(60)
    again, _, said = rig.start()  # puts back what the journal holds, before it listens
    again.send_signal(signal.SIGTERM)
    _, err = communicate(again, 60)
    assert again.returncode == 128 + signal.SIGTERM, err
    judge(rig, client.body, may_lose=BATCH, may_repeat=True)
    assert all("before the last exit" in line or "torn" in line for line in said), said


def test_a_client_that_leaves_mid_body_gets_every_entry_put_back(rig):
    proc, client = rig.serve(read=64 << 10)
    client.run()  # 64 KiB of a body of a few MiB, then close with the rest unread
    proc.send_signal(signal.SIGTERM)  # lands once the scrape is settled
    _, err = communicate(proc, 120)
    assert judge(rig, None) == (0, N)
    assert "the client closed the connection before reading the whole response" in err, err
    assert err.strip().splitlines()[-1].endswith("0 drained entries delivered, "
                                                 f"{N} put back"), err


def test_a_client_that_never_closes_did_not_show_it_read(rig, tmp_path):
    """The whole body reached the client's socket, but without the client's close within the
    scrape budget nothing says it was read: put back."""
    rig.fill()
    short = tmp_path / "short.toml"
    short.write_text(rig.config.read_text().replace("batch_size", 'scrape_budget = "1s"\n'
                                                    "batch_size", 1))
    config, rig.config = rig.config, short
    try:
        proc, port, _ = rig.start()
    finally:
        rig.config = config
    client = Client(port, linger=True)
    client.run()
    proc.send_signal(signal.SIGTERM)
    _, err = communicate(proc, 120)
    left = judge(rig, None)[1]
    assert "did not close the connection within the scrape budget" in err, err
    assert left == N
