"""``bpfbatch export`` scraped by a real Prometheus server (Debian's ``prometheus``, started
here on a loopback port with a temporary TSDB and configuration; no systemd): what its HTTP
API returns equals what the map holds, ``promtool check metrics`` accepts the exposition, and
a drain-mode counter ends equal to everything a writer put in."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.labs.demo import create_flow_table, fill_flow_table

pytestmark = pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("promtool")),
                                reason="needs Debian's prometheus package (scripts/setup.sh)")
TAG = f"{os.getpid()}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


class Exporter:
    """``bpfbatch export`` as a subprocess on a free loopback port."""

    def __init__(self, config: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", "export", "--config",
                                      config, "--listen", "127.0.0.1:0"],
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        assert "serving http://" in line, line + self.proc.stderr.read()
        self.url = line.split("serving ", 1)[1].strip()
        self.target = urllib.parse.urlparse(self.url).netloc

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err


class Prometheus:
    def __init__(self, tmp, target: str):
        self.port = _free_port()
        conf = tmp / "prometheus.yml"
        conf.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                        "scrape_configs:\n  - job_name: bpfbatch\n    static_configs:\n"
                        f"      - targets: ['{target}']\n")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def query(self, expr: str) -> dict[tuple, float]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr})
        data = json.loads(_get(url))["data"]["result"]
        return {tuple(sorted((k, v) for k, v in r["metric"].items()
                             if k not in ("job", "instance", "__name__"))): float(r["value"][1])
                for r in data}

    def wait_for(self, expr: str, ok, timeout: float = 60) -> dict:
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError("prometheus exited")
            try:
                last = self.query(expr)
                if ok(last):
                    return last
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"{expr}: {last}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def test_prometheus_sees_what_the_map_holds(tmp_path, pins):
    with create_flow_table(20_000, name=f"bbprom{TAG}") as m:
        fill_flow_table(m, 20_000, seed=3)
        pin = pins(m, "flows")
        conf = tmp_path / "export.toml"
        conf.write_text(f"""
[[metric]]
name = "flow_bytes_total"
help = "Bytes per destination port"
type = "counter"
map = {{ pinned = "{pin}" }}
value = "bytes"
labels = [{{ name = "dport", field = "key.dport" }}]

[[metric]]
name = "flows"
help = "Flows per protocol"
type = "gauge"
map = {{ pinned = "{pin}" }}
aggregate = "count"
labels = [{{ name = "proto", field = "key.proto", values = {{ 6 = "tcp", 17 = "udp", 1 = "icmp" }} }}]
""")
        keys, values = m.to_numpy()
        exporter = Exporter(str(conf))
        prom = Prometheus(tmp_path, exporter.target)
        try:
            exposition = _get(exporter.url)
            lint = subprocess.run(["promtool", "check", "metrics"], input=exposition,
                                  capture_output=True)
            assert lint.returncode == 0, lint.stdout + lint.stderr
            got_bytes = prom.wait_for("flow_bytes_total", lambda r: len(r) == 5)
            got_flows = prom.wait_for("flows", lambda r: len(r) == 3)
            entries = prom.wait_for("bpfbatch_export_map_entries", lambda r: r)
        finally:
            prom.stop()
            exporter.stop()
    want_bytes = {(("dport", str(p.byteswap())),):  # the __be16 port as dump shows it
                  float(values["bytes"][keys["dport"] == p].sum())
                  for p in np.unique(keys["dport"])}
    names = {6: "tcp", 17: "udp", 1: "icmp"}
    want_flows = {(("proto", names[int(p)]),): float((keys["proto"] == p).sum())
                  for p in np.unique(keys["proto"])}
    assert got_bytes == want_bytes
    assert got_flows == want_flows
    assert entries == {(("map", pin),): 20_000.0}


def test_drain_counter_in_prometheus_equals_the_writers_total(tmp_path, pins):
    b = BtfBuilder()
    u32, u64 = b.integer("__u32", 4), b.integer("__u64", 8)
    with Map.create(MapType.HASH, 4, 8, 4096, name=f"bbpromd{TAG}"[:15], btf_fd=b.load(),
                    btf_key_type_id=u32, btf_value_type_id=u64) as m:
        b.close()
        pin = pins(m, "drain")
        conf = tmp_path / "drain.toml"
        conf.write_text(f'[[metric]]\nname = "events_total"\ntype = "counter"\n'
                        f'mode = "drain"\nmap = {{ pinned = "{pin}" }}\n')
        exporter = Exporter(str(conf))
        prom = Prometheus(tmp_path, exporter.target)
        total = 0
        try:
            prom.wait_for("up", lambda r: r.get(()) == 1.0)
            rng = np.random.default_rng(5)
            for round_ in range(6):  # the writer keeps adding while Prometheus scrapes
                weights = rng.integers(1, 10_000, 500)
                m.update_items((round_ * 1000 + i, int(w)) for i, w in enumerate(weights))
                total += int(weights.sum())
                time.sleep(0.4)
            got = prom.wait_for("events_total", lambda r: r.get(()) == float(total))
            assert m.count() == 0
        finally:
            prom.stop()
            err = exporter.stop()
    assert got == {(): float(total)}, err
