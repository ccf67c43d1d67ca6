"""Scrape cost of ``bpfbatch export`` against a per-key exporter, on the demo flow table.

``python -m tools.bench export [--entries 100000 1000000] [--rounds R] [--out DIR]``

One scrape = read the map, aggregate ``bytes`` by ``dport`` and ``proto`` (15 series) plus a
count of flows per protocol, and render the Prometheus exposition. Peers, on the same map in
the same run, interleaved:

- *per-key exporter*: the way cloudflare/ebpf_exporter reads a table (its ``tableValues``: a
  ``get_next_key`` + ``lookup`` loop), in Python, with the same label texts (the fields
  unpacked per entry, summed in a dict) and the same prometheus-client rendering;
- *C get_next_key+lookup loop*: ``c/map_floor.c`` walking the map with no decoding at all —
  the least any per-key exporter, in any language, pays for the syscalls alone;
- *C lookup_batch loop*: the kernel's batch read with nothing done to it — the floor of the
  batched scrape, which bounds the ratio any batched exporter can reach.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from tabulate import tabulate

from bpfbatch import Map
from bpfbatch.export import config, server
from bpfbatch.labs.demo import create_flow_table, fill_flow_table
from tools.bench.harness import Command, InProcess, build_c, interleave, report, summarize

BATCHED = "bpfbatch export scrape"
PER_KEY = "per-key exporter (get_next_key + lookup)"
C_WALK = "C get_next_key+lookup loop, no decoding"
C_BATCH = "C lookup_batch loop, no decoding"
PROTOS = {1: "IPPROTO_ICMP", 6: "IPPROTO_TCP", 17: "IPPROTO_UDP"}

CONFIG = """
[[metric]]
name = "flow_bytes_total"
type = "counter"
map = {{ id = {id} }}
value = "bytes"
labels = [{{ name = "dport", field = "key.dport" }}, {{ name = "proto", field = "key.proto" }}]

[[metric]]
name = "flows"
type = "gauge"
map = {{ id = {id} }}
aggregate = "count"
labels = [{{ name = "proto", field = "key.proto" }}]
"""


class PerKeyCollector:
    """ebpf_exporter's read loop over the demo flow table: one get_next_key and one lookup
    per entry, labels decoded per entry, series summed in a dict."""

    # struct flow_key { u32 saddr, daddr; u16 sport, dport; u8 proto; u8 pad[3]; }
    _KEY = struct.Struct("<IIHHB3x")
    _VALUE = struct.Struct("<QQQQ")  # packets, bytes, first_seen_ns, last_seen_ns

    def __init__(self, map_id: int):
        self.map_id = map_id

    def describe(self):
        return []

    def collect(self):
        with Map.open(id=self.map_id, read_only=True) as m:
            by_port, by_proto = {}, {}
            key = m.next_key(None)
            while key is not None:
                value = m.lookup(key)
                if value is not None:
                    _, _, _, dport, proto = self._KEY.unpack(key)
                    labels = (str(dport), PROTOS.get(proto, str(proto)))
                    by_port[labels] = by_port.get(labels, 0) + self._VALUE.unpack(value)[1]
                    by_proto[labels[1]] = by_proto.get(labels[1], 0) + 1
                key = m.next_key(key)
        counter = CounterMetricFamily("flow_bytes_total", "", labels=["dport", "proto"])
        for labels, total in by_port.items():
            counter.add_metric(list(labels), total)
        gauge = GaugeMetricFamily("flows", "", labels=["proto"])
        for proto, count in by_proto.items():
            gauge.add_metric([proto], count)
        yield counter
        yield gauge


def _registry(collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def _series(text: bytes) -> dict[str, float]:
    """The flow samples of an exposition (self-metrics dropped), to check peers agree."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.decode().splitlines()
            if line.startswith(("flow_bytes_total{", "flows{"))}


def run(entries: int, rounds: int, floor: str, out: Path) -> dict[str, float]:
    with create_flow_table(entries, name="bb_bench_exp") as m:
        fill_flow_table(m, entries)
        conf = config.parse(CONFIG.format(id=m.info.id), "bench.toml")
        batched = _registry(server.Exporter(conf))
        per_key = _registry(PerKeyCollector(m.info.id))
        assert _series(generate_latest(batched)) == _series(generate_latest(per_key))
        cases = {
            BATCHED: InProcess(lambda: generate_latest(batched)),
            PER_KEY: InProcess(lambda: generate_latest(per_key)),
            C_WALK: Command([floor, "lookup-perkey", str(m.info.id)]),
            C_BATCH: Command([floor, "lookup-batch", str(m.info.id), "8192"]),
        }
        rows = summarize(interleave(cases, rounds=rounds), baseline=BATCHED)
    report(f"export scrape of {entries:,} flows (15 + 3 series)", rows, BATCHED, out_dir=out,
           params={"entries": entries})
    return {r["case"]: r["wall_s"] for r in rows}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench export", description=__doc__)
    parser.add_argument("--entries", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        floor = build_c("map_floor.c", Path(tmp))
        for entries in args.entries:
            wall = run(entries, args.rounds, floor, args.out)
            summary.append([f"{entries:,}", f"{wall[BATCHED]:.3f}", f"{wall[PER_KEY]:.2f}",
                            f"{wall[PER_KEY] / wall[BATCHED]:.0f}×", f"{wall[C_WALK]:.2f}",
                            f"{wall[C_WALK] / wall[BATCHED]:.1f}×",
                            f"{wall[BATCHED] / wall[C_BATCH]:.2f}×"])
    print(tabulate(summary, headers=["entries", "bpfbatch s", "per-key exporter s",
                                     "per-key ÷ bpfbatch", "C per-key walk s",
                                     "C walk ÷ bpfbatch", "bpfbatch ÷ C batch floor"],
                   tablefmt="github"))
    print("goal: per-key ÷ bpfbatch ≥ 20× at 100k entries")
    return 0
